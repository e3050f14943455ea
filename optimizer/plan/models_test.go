package plan

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestPlanPerModel: engines a-0 and a-1 serve model "a" and its LoRA
// adapter "a-sql", b-0 and b-1 model "b" (their estimates list them);
// one cluster offers 100 rps of "a", 20 of "a-sql" and 30 of "b". The
// snapshot's entry for the cluster carries a plan per model over the
// engines that serve it only; "a" and "a-sql", served by the same
// engines, are planned together: their 120 rps shed a sixth on their
// 100 rps of engines while "b" sheds nothing though the fleet as a whole
// (400 rps) has room; peer clusters name the cluster, not its models'
// parts. Without model lists the same demand is one plan over all four
// engines and sheds nothing.
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
				if e.model == "a" {
					est.GetEngine().Models = []string{"a", "a-sql"} // its LoRA adapter, on both
				}
			}
			s.Apply(est)
		}
		d := demandEst("r", 150, now)
		d.GetDemand().RequestCount = 150 * 30
		d.GetDemand().Models = []*schemas.ModelDemand{{Model: "a", RequestCount: 100 * 30, DemandRps: 100},
			{Model: "a-sql", RequestCount: 20 * 30, DemandRps: 20}, {Model: "b", RequestCount: 30 * 30, DemandRps: 30}}
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
	if len(mws) != 3 || mws[0].GetModel() != "a" || mws[1].GetModel() != "a-sql" || mws[2].GetModel() != "b" {
		t.Fatalf("model weights %v, want a, a-sql and b", mws)
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
	// a and its adapter are one part (the same engines serve them):
	// planned together, 120 rps on 100.
	a, sql, b := mws[0], mws[1], mws[2]
	if math.Abs(a.GetShedFraction()-1.0/6) > 0.02 || sql.GetShedFraction() != a.GetShedFraction() || b.GetShedFraction() > 1e-3 {
		t.Errorf("shed a %.3f, a-sql %.3f (want both 1/6: 120 rps on 100), b %.3f (want 0)", a.GetShedFraction(), sql.GetShedFraction(), b.GetShedFraction())
	}
	for i, w := range a.GetWeights() {
		if sw := sql.GetWeights()[i]; sw.GetEngineId() != w.GetEngineId() || sw.GetWeight() != w.GetWeight() {
			t.Errorf("a-sql's weights differ from a's: %v against %v", sql.GetWeights(), a.GetWeights())
			break
		}
	}
	if math.Abs(a.GetDemandRps()-100) > 1e-6 || math.Abs(sql.GetDemandRps()-20) > 1e-6 || math.Abs(b.GetDemandRps()-30) > 1e-6 {
		t.Errorf("model demands %v, %v and %v rps, want 100, 20 and 30", a.GetDemandRps(), sql.GetDemandRps(), b.GetDemandRps())
	}
	whole := build(false).GetClusters()[0]
	if len(whole.GetModelWeights()) != 0 || whole.GetShedFraction() > 1e-3 {
		t.Errorf("without model lists: %d model plans, shed %.3f; want none and 0", len(whole.GetModelWeights()), whole.GetShedFraction())
	}
}
