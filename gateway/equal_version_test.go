package gateway

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// TestEqualVersionReplaces: a snapshot of the version held with another
// entry for the cluster replaces the held one (the store's value after a
// refused publish of that version reached the gateway first, see
// streams/snapshots.Watcher), the same entry again is a no-op, an older
// version is stale, and unsigned or badly signed bytes are rejected at
// the version held as at any other.
func TestEqualVersionReplaces(t *testing.T) {
	pub, priv, _ := trust.GenerateKey()
	_, other, _ := trust.GenerateKey()
	signer := trust.NewSigner(priv)
	g := newTrustGateway(t, SnapshotKeys(pub))
	v := uint64(trustNow.UnixMilli())
	on := func(version uint64, engine string) []byte {
		b, err := proto.Marshal(&schemas.WeightSnapshot{SchemaVersion: 1, Version: version, CreatedUnixMs: trustNow.UnixMilli(),
			Clusters: []*schemas.ClusterWeights{{Cluster: "eu", Weights: []*schemas.EngineWeight{
				{EngineId: engine, EndpointUrl: "http://127.0.0.1:1", Weight: 1}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	steps := []struct {
		name   string
		b      []byte
		reason string // "" applied or repeated
		engine string // routed on after the step
	}{
		{"first", signer.Sign(on(v, "a")), "", "a"},
		{"refused publish of v", signer.Sign(on(v, "b")), "", "b"},
		{"store's value of v", signer.Sign(on(v, "a")), "", "a"},
		{"store's value again", signer.Sign(on(v, "a")), "", "a"},
		{"unsigned at v", on(v, "b"), "unsigned", "a"},
		{"another key at v", trust.NewSigner(other).Sign(on(v, "b")), "signature", "a"},
		{"older", signer.Sign(on(v-1, "b")), "stale", "a"},
	}
	for _, s := range steps {
		err := g.ApplySnapshot(s.b)
		if (err == nil) != (s.reason == "") {
			t.Fatalf("%s: err %v", s.name, err)
		}
		if err != nil && rejectReason(err) != s.reason {
			t.Fatalf("%s: reason %q (%v), want %q", s.name, rejectReason(err), err, s.reason)
		}
		rt := g.cur.Load()
		if rt.version != v || len(rt.cw.engines) != 1 || rt.cw.engines[0].id != s.engine || rt.table.Engine(0).ID != s.engine {
			t.Fatalf("%s: routing on version %d, %+v; want %d on %s", s.name, rt.version, rt.cw.engines, v, s.engine)
		}
	}
	if got := counter(g.m.applied.WithLabelValues("eu")); got != 3 {
		t.Errorf("%v applied, want 3 (the repeat is a no-op)", got)
	}
}
