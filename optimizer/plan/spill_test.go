package plan

import (
	"fmt"
	"math"
	"testing"
	"time"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
	"github.com/switchyard-llm/switchyard/schemas"
)

func TestSpill(t *testing.T) {
	// Three regions of two 50-rps engines; cluster b is served by its own
	// region, with the optimizer's incidental sliver on a-1.
	engines := []opt.Engine{
		{ID: "a-0", CapacityRPS: 50, Healthy: true}, {ID: "a-1", CapacityRPS: 50, Healthy: true},
		{ID: "b-0", CapacityRPS: 50, Healthy: true}, {ID: "b-1", CapacityRPS: 50, Healthy: true},
		{ID: "c-0", CapacityRPS: 50, Healthy: true}, {ID: "c-1", CapacityRPS: 50, Healthy: true},
	}
	region := map[string]string{"a-0": "a", "a-1": "a", "b-0": "b", "b-1": "b", "c-0": "c", "c-1": "c"}
	rtt := map[string]float64{"a-0": 30, "a-1": 30, "b-0": 1, "b-1": 1, "c-0": 30, "c-1": 30}
	weights := func(cluster string, demand, shed float64, ws map[string]float64) *schemas.ClusterWeights {
		cw := &schemas.ClusterWeights{Cluster: cluster, DemandRps: demand, ShedFraction: shed}
		for _, id := range sortedKeys(region) {
			cw.Weights = append(cw.Weights, &schemas.EngineWeight{EngineId: id, Weight: ws[id]})
		}
		return cw
	}
	get := func(cw *schemas.ClusterWeights) map[string]float64 {
		m := map[string]float64{}
		for _, w := range cw.GetWeights() {
			m[w.GetEngineId()] = w.GetWeight()
		}
		return m
	}
	tests := []struct {
		name    string
		mutate  func(in *opt.Instance)
		b       map[string]float64
		shed    float64
		other   map[string]float64 // cluster a's weights (load on a's engines)
		want    map[string]float64 // nil: unchanged
		wantOut float64            // total outside region b, when want is set
	}{
		{
			name:  "sliver on one remote engine is spread over both remote regions by headroom",
			b:     map[string]float64{"a-1": 0.006, "b-0": 0.49, "b-1": 0.504},
			other: map[string]float64{"a-0": 0.5, "a-1": 0.5},
			// a's engines carry 15 rps each (30 rps of cluster a) and a-1 b's
			// 0.36, c's none: headroom 30 and 29.64 on a's engines, 45 on c's.
			want:    map[string]float64{"a-0": 30 / 149.64, "a-1": 29.64 / 149.64, "c-0": 45 / 149.64, "c-1": 45 / 149.64},
			wantOut: 0.006,
		},
		{
			name:    "no weight outside the home region gets the minimum share",
			b:       map[string]float64{"b-0": 0.5, "b-1": 0.5},
			want:    map[string]float64{"a-0": 0.25, "a-1": 0.25, "c-0": 0.25, "c-1": 0.25},
			wantOut: spillShare,
		},
		{
			name:   "nearer region first while it has room",
			b:      map[string]float64{"b-0": 0.5, "b-1": 0.5},
			mutate: func(in *opt.Instance) { in.RTTms["b"]["c-0"], in.RTTms["b"]["c-1"] = 60, 60 },
			// 60 rps of b fit in a's 90 rps of headroom.
			want:    map[string]float64{"a-0": 0.5, "a-1": 0.5},
			wantOut: spillShare,
		},
		{
			name:    "unhealthy engines get nothing",
			b:       map[string]float64{"b-0": 0.5, "b-1": 0.5},
			mutate:  func(in *opt.Instance) { in.Engines[4].Healthy = false },
			want:    map[string]float64{"a-0": 1.0 / 3, "a-1": 1.0 / 3, "c-1": 1.0 / 3},
			wantOut: spillShare,
		},
		{
			name: "a real share elsewhere is the optimizer's",
			b:    map[string]float64{"a-1": 0.2, "b-0": 0.4, "b-1": 0.4},
		},
		{
			name: "no remote headroom: left alone",
			b:    map[string]float64{"a-1": 0.006, "b-0": 0.49, "b-1": 0.504},
			mutate: func(in *opt.Instance) {
				in.Engines[0].Healthy, in.Engines[1].Healthy, in.Engines[5].Healthy = false, false, false
				in.Engines[4].CapacityRPS = 30
			},
			other: map[string]float64{"c-0": 1}, // c-0 carries cluster a's 30 rps: no headroom
		},
		{
			name: "shedding: left alone",
			b:    map[string]float64{"b-0": 0.5, "b-1": 0.4},
			shed: 0.1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &opt.Instance{MaxUtilization: 0.9, Engines: append([]opt.Engine(nil), engines...),
				RTTms: map[string]map[string]float64{"a": {}, "b": {}}}
			for id, r := range rtt {
				in.RTTms["b"][id] = r
				in.RTTms["a"][id] = 1
			}
			if tt.mutate != nil {
				tt.mutate(in)
			}
			cwB := weights("b", 60, tt.shed, tt.b)
			cwA := weights("a", 30, 0, tt.other)
			if tt.other == nil {
				cwA = weights("a", 0, 0, map[string]float64{"a-0": 1})
			}
			before := get(cwB)
			spill(in, region, nil, []*schemas.ClusterWeights{cwA, cwB})
			got := get(cwB)
			var sum, out float64
			for id, w := range got {
				sum += w
				if region[id] != "b" {
					out += w
				}
			}
			if tt.want == nil {
				for id := range before {
					if got[id] != before[id] {
						t.Fatalf("weights changed: %v -> %v", before, got)
					}
				}
				return
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("weights sum to %v: %v", sum, got)
			}
			if math.Abs(out-tt.wantOut) > 1e-9 {
				t.Fatalf("outside the home region %v, want %v (%v)", out, tt.wantOut, got)
			}
			for id, w := range got {
				if region[id] == "b" {
					if want := before[id] * (1 - tt.wantOut) / (1 - outside(before, region)); math.Abs(w-want) > 1e-9 {
						t.Fatalf("home weight %s = %v, want %v", id, w, want)
					}
					continue
				}
				if want := tt.want[id] * tt.wantOut; math.Abs(w-want) > 1e-9 {
					t.Fatalf("weight %s = %v, want %v (%v)", id, w, want, got)
				}
			}
		})
	}
}

func outside(ws map[string]float64, region map[string]string) float64 {
	var s float64
	for id, w := range ws {
		if region[id] != "b" {
			s += w
		}
	}
	return s
}

// The planner publishes the split: a cluster served by its own region
// has weight on the other region's engines.
func TestPlannerPublishesFailoverSplit(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPlanner(Settings{RegionRTTms: map[string]map[string]float64{"a": {"a": 1, "b": 30}, "b": {"a": 30, "b": 1}}})
	snap, err := p.Plan(now, []*schemas.Estimate{
		engineEst("a-0", "a", 100, now), engineEst("a-1", "a", 100, now),
		engineEst("b-0", "b", 100, now), engineEst("b-1", "b", 100, now),
		demandEst("a", 20, now), demandEst("b", 20, now),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, cw := range snap.GetClusters() {
		var remote float64
		n := 0
		for _, w := range cw.GetWeights() {
			if w.GetEngineId()[:1] != cw.GetCluster() {
				remote += w.GetWeight()
				if w.GetWeight() > 0 {
					n++
				}
			}
		}
		if n != 2 || remote < spillShare-1e-12 || remote >= spillMax {
			t.Fatalf("cluster %s: %d remote engines with weight, %v in all: %v", cw.GetCluster(), n, remote, cw.GetWeights())
		}
	}
}

// On generated instances, with and without shedding and residency, the
// split keeps every weight in [0, 1] and each cluster's total unchanged.
func TestSpillKeepsWeightsValid(t *testing.T) {
	split := 0
	for seed := uint64(1); seed <= 12; seed++ {
		cfg := synth.Config{Clusters: 6, Engines: 24, Seed: seed, Load: 0.3 + 0.1*float64(seed), ChurnWeight: 5, Previous: seed%2 == 0}
		if seed%3 == 0 {
			cfg.Residency = 0.5
		}
		in := synth.Instance(cfg)
		eps := map[string]string{}
		region := map[string]string{}
		for i, e := range in.Engines {
			eps[e.ID] = "http://" + e.ID
			region[e.ID] = fmt.Sprintf("r%d", i%int(2+seed%3))
		}
		snap, err := Solve(in, eps, 1, time.Unix(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		before := map[string]float64{}
		old := map[[2]string]float64{}
		for _, cw := range snap.GetClusters() {
			for _, w := range cw.GetWeights() {
				before[cw.GetCluster()] += w.GetWeight()
				old[[2]string{cw.GetCluster(), w.GetEngineId()}] = w.GetWeight()
			}
		}
		spill(in, region, nil, snap.GetClusters())
		for _, cw := range snap.GetClusters() {
			var sum float64
			changed := false
			for _, w := range cw.GetWeights() {
				changed = changed || w.GetWeight() != old[[2]string{cw.GetCluster(), w.GetEngineId()}]
				if x := w.GetWeight(); !(x >= 0 && x <= 1) {
					t.Fatalf("seed %d cluster %s: weight %s = %v", seed, cw.GetCluster(), w.GetEngineId(), x)
				}
				sum += w.GetWeight()
			}
			if math.Abs(sum-before[cw.GetCluster()]) > 1e-9 {
				t.Fatalf("seed %d cluster %s: weights sum %v, were %v", seed, cw.GetCluster(), sum, before[cw.GetCluster()])
			}
			if changed {
				split++
			}
		}
	}
	if split == 0 {
		t.Fatal("no cluster got a failover split")
	}
	t.Logf("%d clusters got a failover split", split)
}
