package plan

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestPlanPerModel: engines a-0 and a-1 serve model "a", b-0 and b-1
// model "b" (their estimates list them), one cluster offers 120 rps of
// "a" and 30 of "b". The snapshot's entry for the cluster carries a plan
// per model over the engines that serve it only: "a"'s 120 rps shed a
// sixth on its 100 rps of engines while "b" sheds nothing though the
// fleet as a whole (400 rps) has room; peer clusters name the cluster,
// not its models' parts. Without model lists the same demand is one
// plan over all four engines and sheds nothing.
func TestPlanPerModel(t *testing.T) {
	now := time.Unix(1000, 0)
	build := func(lists bool) *schemas.WeightSnapshot {
		s := NewState()
		for _, e := range []struct {
			id    string
			model string
			cap   float64
		}{{"a-0", "a", 50}, {"a-1", "a", 50}, {"b-0", "b", 150}, {"b-1", "b", 150}} {
			est := engineEst(e.id, "r", e.cap, now)
			if lists {
				est.GetEngine().Models = []string{e.model}
			}
			s.Apply(est)
		}
		d := demandEst("r", 150, now)
		d.GetDemand().RequestCount = 150 * 30
		d.GetDemand().Models = []*schemas.ModelDemand{{Model: "a", RequestCount: 120 * 30, DemandRps: 120}, {Model: "b", RequestCount: 30 * 30, DemandRps: 30}}
		s.Apply(d)
		in, eps, err := s.Instance(now, Settings{MinDemandRPS: 1})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := s.Solve(in, eps, 3, now)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	snap := build(true)
	if len(snap.GetClusters()) != 1 {
		t.Fatalf("%d entries, want the cluster's one", len(snap.GetClusters()))
	}
	cw := snap.GetClusters()[0]
	if len(cw.GetPeerClusters()) != 1 || cw.GetPeerClusters()[0] != "r" {
		t.Errorf("peer clusters %q, want [r]", cw.GetPeerClusters())
	}
	if d := cw.GetDemandRps(); d > 0.01 {
		t.Errorf("the cluster's own demand (requests of no planned model: none) planned at %v rps, want ~0: no --min-demand-rps floor on a split demand", d)
	}
	mws := cw.GetModelWeights()
	if len(mws) != 2 || mws[0].GetModel() != "a" || mws[1].GetModel() != "b" {
		t.Fatalf("model weights %v, want a and b", mws)
	}
	for _, mw := range mws {
		var on, off float64
		for _, w := range mw.GetWeights() {
			if w.GetEngineId()[0] == mw.GetModel()[0] {
				on += w.GetWeight()
			} else {
				off += w.GetWeight()
			}
		}
		if off != 0 || math.Abs(on+mw.GetShedFraction()-1) > 1e-3 {
			t.Errorf("model %s: %.3f on its engines, %.3f elsewhere, shed %.3f", mw.GetModel(), on, off, mw.GetShedFraction())
		}
	}
	if a, b := mws[0].GetShedFraction(), mws[1].GetShedFraction(); math.Abs(a-1.0/6) > 0.02 || b > 1e-3 {
		t.Errorf("shed a %.3f (want 1/6: 120 rps on 100), b %.3f (want 0)", a, b)
	}
	if a, b := mws[0].GetDemandRps(), mws[1].GetDemandRps(); math.Abs(a-120) > 1e-6 || math.Abs(b-30) > 1e-6 {
		t.Errorf("model demands %v and %v rps, want 120 and 30", a, b)
	}
	whole := build(false).GetClusters()[0]
	if len(whole.GetModelWeights()) != 0 || whole.GetShedFraction() > 1e-3 {
		t.Errorf("without model lists: %d model plans, shed %.3f; want none and 0", len(whole.GetModelWeights()), whole.GetShedFraction())
	}
}
