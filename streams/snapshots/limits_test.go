package snapshots_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// TestPublishTooLargeNamesTheLimit: on a server whose max_payload is
// smaller than a snapshot, Publish fails with ErrTooLarge naming both
// sizes instead of nats.go's bare "maximum payload exceeded", and a
// snapshot that fits still goes through.
func TestPublishTooLargeNamesTheLimit(t *testing.T) {
	const limit = 4 << 10
	ns := testenv.NATSWith(t, server.Options{MaxPayload: limit})
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx, snap(1, "region-a")); err != nil {
		t.Fatalf("a small snapshot: %v", err)
	}
	big := snap(2, "region-a")
	for i := range 200 { // ~40 bytes each: ~8 KB, twice the limit
		big.Clusters[0].Weights = append(big.Clusters[0].Weights, &schemas.EngineWeight{
			EngineId: fmt.Sprintf("engine-%04d", i), EndpointUrl: "http://10.0.0.1:8000", Weight: 0.005})
	}
	err = st.Publish(ctx, big)
	if !errors.Is(err, snapshots.ErrTooLarge) {
		t.Fatalf("publishing an 8 KB snapshot under a 4 KB max_payload: %v, want ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("max_payload is %d bytes", limit)) {
		t.Errorf("error %q does not name the limit %d", err, limit)
	}
	if got, err := st.Get(ctx, "region-a"); err != nil || got.GetVersion() != 1 {
		t.Fatalf("after the refused publish Get = %v, %v; want version 1 kept", got, err)
	}
}

// TestReplicasReachTheStreams: Replicas sets the bucket's and the audit
// stream's replica count (a single server refuses 3, which proves the
// setting reaches JetStream), and without the option an existing store
// keeps its count.
func TestReplicasReachTheStreams(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := snapshots.Open(ctx, js, snapshots.Replicas(3)); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("Open with 3 replicas on one server: %v, want JetStream's replicas error", err)
	}
	if _, err := snapshots.Open(ctx, js, snapshots.Replicas(-1)); err == nil {
		t.Fatal("Open with -1 replicas: no error")
	}
	if _, err := snapshots.Open(ctx, js, snapshots.Replicas(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshots.Open(ctx, js); err != nil {
		t.Fatalf("reopening with the default: %v", err)
	}
	for _, name := range []string{"KV_" + snapshots.DefaultBucket, snapshots.DefaultAuditStream} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 1 {
			t.Errorf("stream %s: %d replicas, want 1", name, info.Config.Replicas)
		}
	}
}
