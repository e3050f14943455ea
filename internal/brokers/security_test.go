package brokers

import (
	"context"
	"flag"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// connection parses the connection flags from env alone, as a service
// started with SWITCHYARD_* variables does.
func connection(t *testing.T, env map[string]string) cli.Connection {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var c cli.Connection
	c.Register(fs)
	if err := cli.Parse(fs, nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSecureBrokers runs the embedded brokers with mutual TLS and
// passwords on both, and shows that (1) a client configured only through
// SWITCHYARD_* variables produces, consumes in a group, publishes a
// snapshot and watches it, and (2) a client missing any one of the CA,
// its certificate, its credentials, or with a wrong password, is refused
// by each broker.
func TestSecureBrokers(t *testing.T) {
	pki := newTestPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Second)
	defer cancel()
	b, err := Start(ctx, Config{KafkaPartitions: 1, Security: Security{
		TLS:   pki.ServerTLS(t),
		Users: []User{{Name: "switchyard", Password: "s3cret"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	topics := streams.TopicsFor("")
	if err := b.EnsureTopics(topics.All(), []string{topics.Estimates}, 1); err != nil {
		t.Fatal(err)
	}
	good := map[string]string{
		"SWITCHYARD_KAFKA_BROKERS": b.KafkaAddrs()[0], "SWITCHYARD_NATS_URL": b.NATSURL(),
		"SWITCHYARD_KAFKA_CA": pki.CAFile, "SWITCHYARD_KAFKA_CERT": pki.ClientCert, "SWITCHYARD_KAFKA_KEY": pki.ClientKey,
		"SWITCHYARD_KAFKA_SASL": "SCRAM-SHA-512", "SWITCHYARD_KAFKA_USER": "switchyard", "SWITCHYARD_KAFKA_PASSWORD": "s3cret",
		"SWITCHYARD_NATS_CA": pki.CAFile, "SWITCHYARD_NATS_CERT": pki.ClientCert, "SWITCHYARD_NATS_KEY": pki.ClientKey,
		"SWITCHYARD_NATS_USER": "switchyard", "SWITCHYARD_NATS_PASSWORD": "s3cret",
	}
	conn := connection(t, good)

	t.Run("kafka produce and group consume", func(t *testing.T) {
		prod, err := conn.NewKafka()
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topics.RoutingEvents, Value: []byte("hello")}).FirstErr(); err != nil {
			t.Fatalf("authorised produce: %v", err)
		}
		cons, err := conn.NewKafka(kgo.ConsumerGroup("secure-test"), kgo.ConsumeTopics(topics.RoutingEvents),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("authorised consume: %v", err)
		}
		if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "hello" {
			t.Fatalf("consumed %d records", len(recs))
		}
	})

	t.Run("snapshot publish and watch", func(t *testing.T) {
		nc, err := conn.ConnectNATS()
		if err != nil {
			t.Fatalf("authorised connect: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		store, err := snapshots.Open(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		snap := &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: 7, Clusters: []*schemas.ClusterWeights{{Cluster: "eu"}}}
		if err := store.Publish(ctx, snap); err != nil {
			t.Fatal(err)
		}
		opts, err := conn.NATSOpts()
		if err != nil {
			t.Fatal(err)
		}
		w := snapshots.NewWatcher(conn.NATSURL, "", "eu", opts...)
		wctx, wcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		defer func() { wcancel(); <-done }()
		select {
		case raw := <-w.Updates():
			var got schemas.WeightSnapshot
			if err := protoUnmarshal(raw, &got); err != nil || got.GetVersion() != 7 {
				t.Fatalf("watched %v (err %v)", got.GetVersion(), err)
			}
		case <-ctx.Done():
			t.Fatal("watcher delivered nothing")
		}
	})

	refused := []struct {
		name  string
		unset []string
		set   map[string]string
	}{
		{name: "no TLS", unset: []string{"CA", "CERT", "KEY"}},
		{name: "no client certificate", unset: []string{"CERT", "KEY"}},
		{name: "untrusted server", set: map[string]string{"CA": pki.OtherCAFile}},
		{name: "no credentials", unset: []string{"USER", "PASSWORD", "SASL"}},
		{name: "wrong password", set: map[string]string{"PASSWORD": "guess"}},
	}
	for _, tc := range refused {
		env := maps.Clone(good)
		for _, k := range tc.unset {
			delete(env, "SWITCHYARD_KAFKA_"+k)
			delete(env, "SWITCHYARD_NATS_"+k)
		}
		for k, v := range tc.set {
			env["SWITCHYARD_KAFKA_"+k], env["SWITCHYARD_NATS_"+k] = v, v
		}
		c := connection(t, env)
		t.Run("nats refuses "+tc.name, func(t *testing.T) {
			nc, err := c.ConnectNATS()
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
		})
		t.Run("kafka refuses "+tc.name, func(t *testing.T) {
			cl, err := c.NewKafka(kgo.RequestRetries(0))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			defer pcancel()
			if err := cl.Ping(pctx); err == nil {
				t.Fatal("ping succeeded")
			}
		})
	}
}

func protoUnmarshal(b []byte, m *schemas.WeightSnapshot) error { return proto.Unmarshal(b, m) }
