package gateway

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/schemas"
)

// sameTable fails unless a and b route alike: the same engines with the
// same shares, round trips, slots, residencies and limits, and the same
// first choice for 2,000 keys. (A gateway's limiter starts at the batch
// limit the engine had when first seen; with limits false, the limits
// are not compared, for gateways that saw other batch limits.)
func sameTable(t *testing.T, a, b *pick.Table, limits ...bool) {
	t.Helper()
	if a.Len() != b.Len() {
		t.Fatalf("%d engines, want %d", a.Len(), b.Len())
	}
	cmpLimits := len(limits) == 0 || limits[0]
	for i := 0; i < a.Len(); i++ {
		x, y := a.Engine(i), b.Engine(i)
		if x.ID != y.ID || x.URL != y.URL || x.Share != y.Share || x.RTTms != y.RTTms || x.Slots != y.Slots ||
			x.State.CacheResidency() != y.State.CacheResidency() || cmpLimits && x.State.Limit() != y.State.Limit() {
			t.Fatalf("engine %d: %+v (residency %d, limit %d), want %+v (%d, %d)", i, *x, x.State.CacheResidency(), x.State.Limit(), *y, y.State.CacheResidency(), y.State.Limit())
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

// TestValidateClusterHeldMatches: validateCluster with a held entry
// (skipping the id and endpoint checks it passed) gives the error it
// gives without, on random edits of that entry.
func TestValidateClusterHeldMatches(t *testing.T) {
	held := viewOf(fullSnapshot(1, 20), "c").cw
	if err := validateCluster(held, nil); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 5000 {
		cw := &clusterView{engines: slices.Clone(held.engines), shed: held.shed}
		for range r.IntN(3) {
			e := &cw.engines[r.IntN(len(cw.engines))]
			switch r.IntN(8) {
			case 0:
				e.id = ""
			case 1:
				e.id = cw.engines[r.IntN(len(cw.engines))].id
			case 2:
				e.id = "new"
			case 3:
				e.weight = []float64{math.NaN(), -0.1, 1.5, e.weight / 2}[r.IntN(4)]
			case 4:
				e.url = []string{"ftp://x", "http://other:1", "", "http://u:p@x/"}[r.IntN(4)]
			case 5:
				cw.shed = []float64{0, 0.5, math.NaN(), held.shed}[r.IntN(4)]
			case 6:
				cw.engines = cw.engines[:len(cw.engines)-1]
			case 7:
				cw.engines = append(cw.engines, engineView{id: "x", url: "http://x", weight: 0})
			}
		}
		want, got := validateCluster(cw, nil), validateCluster(cw, held)
		if fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("trial %d: with the held entry %v, without %v", trial, got, want)
		}
	}
}

// TestApplyLimitsAfterUpdates: after the limiters moved (ticks with
// latency samples and drops), a new plan over the same engines leaves
// every engine's limit and gauge at its limiter's limit, as a full
// apply sets them, and the capacity at their sum.
func TestApplyLimitsAfterUpdates(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g, err := New("c", HealthInterval(-1), Clock(func() time.Time { return now }), Registerer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	// Half the engines have no known batch limit: their limiters decide.
	unknownSlots := func(s *schemas.WeightSnapshot) *schemas.WeightSnapshot {
		for i, w := range s.Clusters[1].Weights {
			if i%2 == 0 {
				w.Explanation.MaxConcurrency = 0
			}
		}
		return s
	}
	if err := g.ApplySnapshot(marshal(t, unknownSlots(fullSnapshot(1, 30)))); err != nil {
		t.Fatal(err)
	}
	tb := g.cur.Load().table
	for round := range 5 {
		for i := 0; i < tb.Len(); i++ {
			l := g.admit.limiter(tb.Engine(i).State, 0)
			if (i+round)%3 == 0 {
				l.Limiter().Drop(now.Add(-time.Second))
			} else {
				l.Limiter().Sample(admit.TTFT, time.Duration(50+i)*time.Millisecond, now.Add(-time.Second), 1)
			}
		}
		now = now.Add(time.Second)
		g.tickAdmission()
	}
	s2 := unknownSlots(fullSnapshot(2, 30))
	s2.Clusters[1].Weights[0].Weight, s2.Clusters[1].Weights[1].Weight = 0.01, 0.05
	if err := g.ApplySnapshot(marshal(t, s2)); err != nil {
		t.Fatal(err)
	}
	tb2 := g.cur.Load().table
	if tb2 == tb {
		t.Fatal("the table was kept")
	}
	sum := 0
	distinct := map[int64]bool{}
	for i := 0; i < tb2.Len(); i++ {
		e := tb2.Engine(i)
		l := g.admit.limiter(e.State, 0)
		want := g.admit.limits().Limit(l.Slots(e.Slots), l.Limiter().Limit())
		if e.Slots > 0 {
			if want != int64(e.Slots+e.Slots/4) {
				t.Errorf("engine %s with %d slots: limit %d, want its slots and a quarter", e.ID, e.Slots, want)
			}
		} else {
			distinct[want] = true
		}
		if e.State.Limit() != want {
			t.Errorf("engine %s: limit %d, want %d", e.ID, e.State.Limit(), want)
		}
		var m dto.Metric
		if err := g.admit.limit.WithLabelValues("c", e.ID).Write(&m); err != nil || m.GetGauge().GetValue() != float64(want) {
			got := m.GetGauge().GetValue()
			t.Errorf("engine %s: gauge %v, want %d", e.ID, got, want)
		}
		sum += int(want)
	}
	if got := g.admit.q.Capacity(); got != sum {
		t.Errorf("capacity %d, want %d", got, sum)
	}
	if len(distinct) < 2 {
		t.Errorf("limits %v: the limiters did not move", distinct)
	}
}

// TestApplySequenceMatchesFresh: after every snapshot of a random
// sequence (weights that move, drop to 0 and come back, residencies,
// batch limits and round trips that move or stay), the gateway's table
// is the one a fresh gateway builds from that snapshot alone.
func TestApplySequenceMatchesFresh(t *testing.T) {
	g, err := New("c", HealthInterval(-1), MaxInFlightPerEngine(8))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 10))
	s := fullSnapshot(1, 30)
	for v := uint64(1); v <= 60; v++ {
		s.Version = v
		c := s.Clusters[1]
		for _, w := range c.Weights {
			switch r.IntN(6) {
			case 0:
				w.Weight = 0
			case 1:
				w.Weight = r.Float64()
			case 2:
				w.Explanation.CacheResidencyS = float64(r.IntN(3) * 30)
			case 3:
				w.Explanation.NetworkMs = float64(1 + r.IntN(3))
			case 4:
				w.Explanation.MaxConcurrency = uint32(r.IntN(3))
			}
		}
		sum := 0.0
		for _, w := range c.Weights {
			sum += w.Weight
		}
		if sum == 0 {
			c.Weights[0].Weight, sum = 1, 1
		}
		for _, w := range c.Weights {
			w.Weight *= 0.9 / sum
		}
		if err := g.ApplySnapshot(marshal(t, s)); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		f, err := New("c", HealthInterval(-1), MaxInFlightPerEngine(8))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ApplySnapshot(marshal(t, s)); err != nil {
			t.Fatal(err)
		}
		tb := g.cur.Load().table
		sameTable(t, tb, f.cur.Load().table, false)
		for i := 0; i < tb.Len(); i++ {
			e := tb.Engine(i)
			l := g.admit.limiter(e.State, 0)
			if want := g.admit.limits().Limit(l.Slots(e.Slots), l.Limiter().Limit()); e.State.Limit() != want {
				t.Fatalf("version %d, engine %s: limit %d, want %d", v, e.ID, e.State.Limit(), want)
			}
		}
	}
}
