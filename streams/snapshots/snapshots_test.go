package snapshots_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

func snap(v uint64, clusters ...string) *schemas.WeightSnapshot {
	s := &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: v, CreatedUnixMs: int64(v)}
	for _, c := range clusters {
		s.Clusters = append(s.Clusters, &schemas.ClusterWeights{Cluster: c, Weights: []*schemas.EngineWeight{
			{EngineId: "e1", EndpointUrl: "http://127.0.0.1:1", Weight: 1},
		}})
	}
	return s
}

func TestPublishGetVersionsOnlyGoUp(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := st.LatestVersion(ctx); err != nil || v != 0 {
		t.Fatalf("LatestVersion on empty bucket = %d, %v", v, err)
	}
	if _, err := st.Get(ctx, "region-a"); !errors.Is(err, snapshots.ErrNotFound) {
		t.Fatalf("Get before publish: %v, want ErrNotFound", err)
	}
	if err := st.Publish(ctx, snap(1, "region-a", "region-b")); err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx, snap(2, "region-a", "region-b")); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, "region-b")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetVersion() != 2 || len(got.GetClusters()) != 1 || got.GetClusters()[0].GetCluster() != "region-b" {
		t.Fatalf("Get = %v", got)
	}
	if err := st.Publish(ctx, snap(2, "region-a")); err != nil {
		t.Fatalf("republishing the same version 2 (a second replica): %v, want a no-op", err)
	}
	other := snap(2, "region-a")
	other.Clusters[0].ShedFraction = 0.5
	if err := st.Publish(ctx, other); !errors.Is(err, snapshots.ErrStaleVersion) {
		t.Fatalf("publishing a different version 2: %v, want ErrStaleVersion", err)
	}
	if v, _ := st.LatestVersion(ctx); v != 2 {
		t.Fatalf("LatestVersion = %d, want 2", v)
	}
	h, err := st.History(ctx, "region-a")
	if err != nil || len(h) != 2 || h[0].GetVersion() != 1 || h[1].GetVersion() != 2 {
		t.Fatalf("History = %v, %v", h, err)
	}
	if err := st.Publish(ctx, snap(3, "bad key!")); !errors.Is(err, snapshots.ErrInvalidKey) {
		t.Fatalf("bad key: %v", err)
	}
}

func TestWatcherSurvivesMissingBucketAndDelivers(t *testing.T) {
	ns := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := snapshots.NewWatcher(ns.ClientURL(), "", "region-a")
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	// The bucket does not exist yet: the watcher must wait for it.
	st, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx, snap(7, "region-a")); err != nil {
		t.Fatal(err)
	}
	var got schemas.WeightSnapshot
	select {
	case b := <-w.Updates():
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no update")
	}
	if got.GetVersion() != 7 {
		t.Fatalf("version %d", got.GetVersion())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOptionsNameBucketAndStream: Open creates the bucket and audit
// stream the options name, with the history asked for.
func TestOptionsNameBucketAndStream(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js, snapshots.Bucket("other_bucket"), snapshots.History(3),
		snapshots.AuditStream("OTHER_AUDIT", "other.audit"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx, snap(1, "region-a")); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "other_bucket")
	if err != nil {
		t.Fatal(err)
	}
	status, err := kv.Status(ctx)
	if err != nil || status.History() != 3 {
		t.Fatalf("bucket history %v, %v; want 3", status, err)
	}
	stream, err := js.Stream(ctx, "OTHER_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 1 || info.Config.Subjects[0] != "other.audit" {
		t.Fatalf("audit stream %+v, %v", info, err)
	}
	if _, err := js.KeyValue(ctx, snapshots.DefaultBucket); err == nil {
		t.Error("default bucket created too")
	}
}
