// Package testenv starts the real embedded brokers for tests: a NATS
// server with JetStream and a kfake Kafka, each on a free loopback port and
// stopped when the test ends.
package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/brokers"
)

// NATS starts a JetStream-enabled NATS server storing under t.TempDir().
func NATS(t testing.TB) *server.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := brokers.StartNATS(ctx, "127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// NATSWith starts a JetStream-enabled NATS server on a free loopback
// port with opt's other settings (users, limits), storing under
// t.TempDir(), and shuts it down at cleanup.
func NATSWith(t testing.TB, opt server.Options) *server.Server {
	t.Helper()
	opt.Host, opt.Port, opt.JetStream, opt.StoreDir, opt.NoLog, opt.NoSigs = "127.0.0.1", -1, true, t.TempDir(), true, true
	s, err := server.NewServer(&opt)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// JetStream connects to s with opts (a user, an error handler) and
// returns a JetStream context.
func JetStream(t testing.TB, s *server.Server, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	// nats.go's 2-s connect timeout is short for a machine busy with
	// other tests under -race; opts may set another.
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.Timeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Kafka starts a single-broker kfake cluster.
func Kafka(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	kc, err := brokers.StartKafka("127.0.0.1:0", "", 3)
	if len(opts) > 0 {
		kc.Close()
		all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3)}, opts...)
		kc, err = kfake.NewCluster(all...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// Client returns a kgo client of kc, closed at the end of the test.
func Client(t testing.TB, kc *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Eventually polls cond every 10ms until it is true or d passes, then
// fails the test with msg.
func Eventually(t testing.TB, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", d, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
