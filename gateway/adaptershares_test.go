package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestAdapterSharesFromModelPlans: when a snapshot plans models apart,
// the shares adapter homes are placed against are the engines' planned
// requests per second over the cluster's weights and every model plan,
// not the cluster's weights alone. Here every model is planned apart, so
// the cluster's weights are an idle spread that favours the small engine,
// while the plans send four fifths of the requests to the big one (the
// bench/models run whose busiest adapter was homed on an a100).
func TestAdapterSharesFromModelPlans(t *testing.T) {
	w := func(id string, v float64) *schemas.EngineWeight {
		return &schemas.EngineWeight{EngineId: id, Weight: v}
	}
	cw := &schemas.ClusterWeights{Cluster: "c", DemandRps: 0.001,
		Weights: []*schemas.EngineWeight{w("big", 0.1), w("small", 0.9)},
		ModelWeights: []*schemas.ModelWeights{
			{Model: "base", DemandRps: 3, Weights: []*schemas.EngineWeight{w("big", 0.8), w("small", 0.2)}},
			{Model: "lora1", DemandRps: 2, Weights: []*schemas.EngineWeight{w("big", 0.8), w("small", 0.2)}},
		}}
	got := plannedRPS(clusterViewOf(cw))
	if want := 0.8*5 + 0.1*0.001; math.Abs(got["big"]-want) > 1e-9 {
		t.Errorf("big plans %v rps, want %v", got["big"], want)
	}
	if want := 0.2*5 + 0.9*0.001; math.Abs(got["small"]-want) > 1e-9 {
		t.Errorf("small plans %v rps, want %v", got["small"], want)
	}
	if !(got["big"] > got["small"]) {
		t.Errorf("shares %v: the big engine, planned four fifths of the requests, has the smaller", got)
	}
	cw.ModelWeights = nil
	if got := plannedRPS(clusterViewOf(cw)); got != nil {
		t.Errorf("no model plans: %v, want the cluster's weights (nil)", got)
	}
}

// TestAdapterHomeFollowsTheModelPlans: with every model planned apart and
// an idle-spread cluster weight favouring the small engine, the busiest
// adapter's home is the big engine, which the model plans give four
// fifths of the requests (with the cluster's weights it went to the small
// one).
func TestAdapterHomeFollowsTheModelPlans(t *testing.T) {
	big, small := newFakeEngine(t, "big"), newFakeEngine(t, "small")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	snap := func(v uint64) *schemas.WeightSnapshot {
		s := snapshot(v, "us-east", 0, map[*fakeEngine]float64{big: 0.1, small: 0.9})
		s.Clusters[0].DemandRps = 0.001
		plan := func(m string, d float64) *schemas.ModelWeights {
			return &schemas.ModelWeights{Model: m, DemandRps: d, Weights: []*schemas.EngineWeight{
				{EngineId: "big", EndpointUrl: big.url(), Weight: 0.8}, {EngineId: "small", EndpointUrl: small.url(), Weight: 0.2}}}
		}
		s.Clusters[0].ModelWeights = []*schemas.ModelWeights{plan("base", 3), plan("hot", 2), plan("cold", 0.1)}
		return s
	}
	g, base := startGateway(t, Clock(clock))
	if err := g.ApplySnapshot(marshal(t, snap(1))); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*fakeEngine{big, small} {
		g.applySignal(marshal(t, &schemas.EngineSignal{SchemaVersion: 1, EngineId: e.id, EndpointUrl: e.url(), Model: "base",
			EventTimeUnixMs: now.UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1,
			Models: []string{"base", "hot", "cold"}, MaxLora: 1}))
	}
	for i := range 60 {
		model := "hot"
		if i%10 == 0 {
			model = "cold"
		}
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"%s %d"}]}`, model, model, i)
		if code, _, out := post(t, context.Background(), base, body, nil); code != http.StatusOK {
			t.Fatalf("%s: %d %s", model, code, out)
		}
	}
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	if err := g.ApplySnapshot(marshal(t, snap(2))); err != nil { // places the homes on the rates
		t.Fatal(err)
	}
	st, _ := g.pool.Lookup("big")
	if _, home := st.AdapterHome(modelHash("hot")); !home {
		other, _ := g.pool.Lookup("small")
		_, onSmall := other.AdapterHome(modelHash("hot"))
		t.Errorf("the busiest adapter is not homed on the big engine (on the small one: %v)", onSmall)
	}
}
