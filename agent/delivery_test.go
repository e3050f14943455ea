package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSignalFailsWhenKafkaIsDown: with ClientOpts, a signal produced
// while Kafka is down fails after SignalDeliveryTimeout (so publish
// errors count the outage) instead of waiting in the buffer for ever.
func TestSignalFailsWhenKafkaIsDown(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "signals"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(ClientOpts(), kgo.SeedBrokers(kc.ListenAddrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*SignalDeliveryTimeout)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "signals", Value: []byte("up")}).FirstErr(); err != nil {
		t.Fatalf("producing with kafka up: %v", err)
	}
	kc.Close()
	start := time.Now()
	failed := make(chan error, 1)
	cl.TryProduce(ctx, &kgo.Record{Topic: "signals", Value: []byte("down")}, func(_ *kgo.Record, err error) { failed <- err })
	select {
	case err := <-failed:
		if err == nil || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			t.Fatalf("signal with kafka down: err %v, want a delivery failure", err)
		}
		t.Logf("failed after %v: %v", time.Since(start).Round(time.Second), err)
	case <-ctx.Done():
		t.Fatalf("signal with kafka down still buffered after %v: publish errors would not count the outage", 3*SignalDeliveryTimeout)
	}
}
