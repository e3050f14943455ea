package gateway

import (
	"testing"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/schemas"
)

// sameTable fails unless a and b route alike: the same engines with the
// same shares, round trips, slots and residencies, and the same first
// choice for 2,000 keys.
func sameTable(t *testing.T, a, b *pick.Table) {
	t.Helper()
	if a.Len() != b.Len() {
		t.Fatalf("%d engines, want %d", a.Len(), b.Len())
	}
	for i := 0; i < a.Len(); i++ {
		x, y := a.Engine(i), b.Engine(i)
		if x.ID != y.ID || x.URL != y.URL || x.Share != y.Share || x.RTTms != y.RTTms || x.Slots != y.Slots ||
			x.State.CacheResidency() != y.State.CacheResidency() || x.State.Limit() != y.State.Limit() {
			t.Fatalf("engine %d: %+v, want %+v", i, *x, *y)
		}
	}
	for k := range uint64(2000) {
		i, ri := a.Pick(k*0x9e3779b97f4a7c15, nil)
		j, rj := b.Pick(k*0x9e3779b97f4a7c15, nil)
		if i != j || ri != rj {
			t.Fatalf("key %d: %d (%v), want %d (%v)", k, i, ri, j, rj)
		}
		a.Done(i)
		b.Done(j)
	}
}

// TestApplyKeepsTable: a snapshot whose engines are those held (the same
// plan again, or only what the gateway does not use changed) keeps the
// held table, which routes as a table built from it would; other weights,
// round trips from health checks, or a shed fraction that no longer adds
// up are applied or rejected as before.
func TestApplyKeepsTable(t *testing.T) {
	g, err := New("c", HealthInterval(-1), MaxInFlightPerEngine(8))
	if err != nil {
		t.Fatal(err)
	}
	table := func() *pick.Table { return g.cur.Load().table }
	// fresh is the table a new gateway builds from snap.
	fresh := func(snap *schemas.WeightSnapshot) *pick.Table {
		f, err := New("c", HealthInterval(-1), MaxInFlightPerEngine(8))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ApplySnapshot(marshal(t, snap)); err != nil {
			t.Fatal(err)
		}
		return f.cur.Load().table
	}
	apply := func(snap *schemas.WeightSnapshot) error { return g.ApplySnapshot(marshal(t, snap)) }

	s1 := fullSnapshot(1, 40)
	if err := apply(s1); err != nil {
		t.Fatal(err)
	}
	t1 := table()
	sameTable(t, t1, fresh(s1))

	s2 := fullSnapshot(2, 40) // the same plan
	if err := apply(s2); err != nil || table() != t1 || g.Stats().SnapshotVersion != 2 {
		t.Fatalf("same plan: err %v, table kept %v, version %d", err, table() == t1, g.Stats().SnapshotVersion)
	}
	s3 := fullSnapshot(3, 40) // what the gateway does not use
	for _, w := range s3.Clusters[1].Weights {
		w.Explanation.EngineMs, w.PlannedUtilization = 123, 0.1
	}
	s3.Clusters[1].DemandRps = 99
	if err := apply(s3); err != nil || table() != t1 {
		t.Fatalf("unused fields: err %v, table kept %v", err, table() == t1)
	}
	sameTable(t, table(), fresh(s3))

	// Availability moved: the capacity follows as a full apply's would.
	t1.Engine(0).State.SetEjected(true)
	if err := apply(fullSnapshot(4, 40)); err != nil || table() != t1 {
		t.Fatalf("err %v, table kept %v", err, table() == t1)
	}
	if got, want := g.admit.q.Capacity(), 39*8; got != want {
		t.Errorf("capacity %d, want %d", got, want)
	}
	t1.Engine(0).State.SetEjected(false)

	s5 := fullSnapshot(5, 40) // other weights
	s5.Clusters[1].Weights[0].Weight, s5.Clusters[1].Weights[1].Weight = s5.Clusters[1].Weights[1].Weight, s5.Clusters[1].Weights[0].Weight*1.5
	s5.Clusters[1].ShedFraction -= s5.Clusters[1].Weights[1].Weight / 3
	if err := apply(s5); err != nil || table() == t1 {
		t.Fatalf("other weights: err %v, table kept %v", err, table() == t1)
	}
	sameTable(t, table(), fresh(s5))

	s6 := fullSnapshot(6, 40) // the same engines, a shed fraction that no longer adds up
	s6.Clusters[1].ShedFraction = 0.5
	t5 := table()
	if err := apply(s6); err == nil || table() != t5 || g.Stats().SnapshotVersion != 5 {
		t.Fatalf("bad shed: err %v, version %d", err, g.Stats().SnapshotVersion)
	}

	s7 := fullSnapshot(7, 40) // round trips from health checks: rebuilt every time
	s7.Clusters[1].Weights[3].Explanation.NetworkMs = 0
	if err := apply(s7); err != nil {
		t.Fatal(err)
	}
	t7 := table()
	s8 := fullSnapshot(8, 40)
	s8.Clusters[1].Weights[3].Explanation.NetworkMs = 0
	if err := apply(s8); err != nil || table() == t7 {
		t.Fatalf("health round trips: err %v, table kept %v", err, table() == t7)
	}

	// Garbage and an older version leave the held snapshot in place.
	if err := g.ApplySnapshot([]byte{0xff}); err == nil {
		t.Fatal("garbage applied")
	}
	if err := apply(fullSnapshot(7, 40)); err == nil || g.Stats().SnapshotVersion != 8 {
		t.Fatalf("older version: err %v, version %d", err, g.Stats().SnapshotVersion)
	}
}
