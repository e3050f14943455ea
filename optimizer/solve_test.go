package optimizer_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

func loadInstance(t testing.TB, path string) *optimizer.Instance {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in optimizer.Instance
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	return &in
}

// TestSeedRegionBC checks the seed scenario against its analytic optimum.
//
// Region B sends 120 rps, region C 40; b-0 has capacity 100 and c-0 80,
// both with the same profile, rtt 2 ms local and 40 ms remote. Let y be
// B's traffic sent to c-0. Then u_b = (120-y)/100 and u_c = (40+y)/80.
// On the profile segment [0.8, 0.9], f(u) = -8750 + 12500u, so the
// marginal latency g'(L) = f(u) + u f'(u) = -8750 + 25000u. B splits
// where its marginal costs are equal:
//
//	2 + (-8750 + 25000(120-y)/100) = 40 + (-8750 + 25000(40+y)/80)
//	30002 - 250y = 12540 + 312.5y  =>  y = 17462/562.5 = 31.04355...
//
// which puts both engines at u ≈ 0.889, inside the segment as assumed.
// C stays local: its marginal on c-0 is 38 ms below B's, and b-0 would
// cost it 38 ms more. Nearest-only routing would put 120 rps on b-0,
// above its capacity, so the queue would grow without bound.
func TestSeedRegionBC(t *testing.T) {
	in := loadInstance(t, "testdata/region-bc.json")
	sol, err := optimizer.Solve(in, optimizer.Tolerance(1e-9))
	if err != nil {
		t.Fatal(err)
	}
	checkSolution(t, in, sol, true)
	y := 17462 / 562.5
	want := map[string]map[string]float64{
		"region-b": {"b-0": (120 - y) / 120, "c-0": y / 120},
		"region-c": {"c-0": 1},
	}
	for c, ws := range want {
		for e, w := range ws {
			if got := sol.Weights[c][e]; math.Abs(got-w) > 1e-6 {
				t.Errorf("weight %s/%s = %.9f, want %.9f", c, e, got, w)
			}
		}
		if sol.Shed[c] != 0 {
			t.Errorf("shed %s = %v, want 0", c, sol.Shed[c])
		}
	}
	if got := sol.Weights["region-c"]["b-0"]; got > 1e-9 {
		t.Errorf("region-c sends %v to b-0, want 0", got)
	}
	f := func(u float64) float64 { return -8750 + 12500*u }
	ub, uc := (120-y)/100, (40+y)/80
	obj := ((120-y)*(2+f(ub)) + y*(40+f(uc)) + 40*(2+f(uc))) / 160
	if math.Abs(sol.ObjectiveMs-obj) > 1e-6*obj {
		t.Errorf("objective %.6f, want %.6f", sol.ObjectiveMs, obj)
	}
	if sol.DualityGap > 1e-9 {
		t.Errorf("duality gap %v", sol.DualityGap)
	}
	// Explanations: both of B's engines have the same marginal latency.
	ex := sol.Explanations["region-b"]
	if len(ex) != 2 || math.Abs(ex[0].MarginalMs-ex[1].MarginalMs) > 1e-6*ex[0].MarginalMs {
		t.Errorf("region-b explanations %+v: want equal marginal ms", ex)
	}
}

func TestSolveSynthetic(t *testing.T) {
	tests := []struct {
		name string
		cfg  synth.Config
	}{
		{"light", synth.Config{Clusters: 6, Engines: 40, Seed: 1, Load: 0.3}},
		{"busy", synth.Config{Clusters: 8, Engines: 64, Seed: 2, Load: 0.9}},
		{"overloaded", synth.Config{Clusters: 8, Engines: 64, Seed: 3, Load: 1.4}},
		{"residency", synth.Config{Clusters: 12, Engines: 80, Seed: 4, Load: 0.8, Residency: 0.2}},
		{"residency overloaded", synth.Config{Clusters: 12, Engines: 80, Seed: 5, Load: 1.2, Residency: 0.1}},
		{"churn", synth.Config{Clusters: 8, Engines: 64, Seed: 6, Load: 0.8, ChurnWeight: 20, Previous: true}},
		{"previous without churn", synth.Config{Clusters: 8, Engines: 64, Seed: 7, Load: 0.8, Previous: true}},
		{"unhealthy", synth.Config{Clusters: 8, Engines: 64, Seed: 8, Load: 0.6, UnhealthyFraction: 0.3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := synth.Instance(tt.cfg)
			sol, err := optimizer.Solve(in)
			if err != nil {
				t.Fatal(err)
			}
			checkSolution(t, in, sol, true)
			if sol.DualityGap > 1e-4 {
				t.Errorf("gap %v above the default tolerance", sol.DualityGap)
			}
			shed := sol.TotalShedRPS > 0
			if want := tt.cfg.Load > 1; shed != want && tt.cfg.Residency == 0 {
				t.Errorf("shed %v rps, want shedding %v", sol.TotalShedRPS, want)
			}
		})
	}
}

func TestShedMaxMinFair(t *testing.T) {
	prof := [][2]float64{{0, 100}, {1, 400}}
	tests := []struct {
		name  string
		in    *optimizer.Instance
		shed  map[string]float64
		total float64
	}{
		{
			name: "shared engine sheds equally",
			in: &optimizer.Instance{MaxUtilization: 1,
				Clusters: []optimizer.Cluster{{ID: "a", DemandRPS: 100}, {ID: "b", DemandRPS: 50}},
				Engines:  []optimizer.Engine{{ID: "e", CapacityRPS: 100, Healthy: true, LatencyMs: prof}},
				RTTms:    map[string]map[string]float64{"a": {"e": 1}, "b": {"e": 1}}},
			shed: map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3},
		},
		{
			name: "cluster with its own spare engine sheds nothing",
			in: &optimizer.Instance{MaxUtilization: 0.95,
				Clusters: []optimizer.Cluster{{ID: "a", DemandRPS: 100}, {ID: "b", DemandRPS: 50}},
				Engines: []optimizer.Engine{{ID: "e1", CapacityRPS: 50, Healthy: true, LatencyMs: prof},
					{ID: "e2", CapacityRPS: 100, Healthy: true, LatencyMs: prof}},
				RTTms: map[string]map[string]float64{"a": {"e1": 1}, "b": {"e1": 1, "e2": 30}}},
			shed: map[string]float64{"a": 1 - 47.5/100, "b": 0},
		},
		{
			name: "progressive filling: second level",
			in: &optimizer.Instance{MaxUtilization: 1,
				Clusters: []optimizer.Cluster{{ID: "a", DemandRPS: 100}, {ID: "b", DemandRPS: 100}, {ID: "c", DemandRPS: 100}},
				Engines: []optimizer.Engine{{ID: "e1", CapacityRPS: 50, Healthy: true, LatencyMs: prof},
					{ID: "e2", CapacityRPS: 150, Healthy: true, LatencyMs: prof}},
				RTTms: map[string]map[string]float64{"a": {"e1": 1}, "b": {"e1": 1, "e2": 5}, "c": {"e2": 1}}},
			// e1 alone serves a: a gets at most 50 (shed 0.5); b and c share
			// e2 (150) plus what is left: b+c routed 150 -> 0.25 each.
			shed: map[string]float64{"a": 0.5, "b": 0.25, "c": 0.25},
		},
		{
			name: "unhealthy only engine sheds all",
			in: &optimizer.Instance{MaxUtilization: 0.9,
				Clusters: []optimizer.Cluster{{ID: "a", DemandRPS: 10}},
				Engines:  []optimizer.Engine{{ID: "e", CapacityRPS: 100, Healthy: false, LatencyMs: prof}},
				RTTms:    map[string]map[string]float64{"a": {"e": 1}}},
			shed: map[string]float64{"a": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sol, err := optimizer.Solve(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			checkSolution(t, tt.in, sol, true)
			for c, want := range tt.shed {
				if got := sol.Shed[c]; math.Abs(got-want) > 1e-9 {
					t.Errorf("shed[%s] = %v, want %v", c, got, want)
				}
			}
		})
	}
}

func TestSolveDeterministic(t *testing.T) {
	in := synth.Instance(synth.Config{Clusters: 10, Engines: 70, Seed: 9, Load: 0.85, ChurnWeight: 5, Previous: true})
	a, err := optimizer.Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	// Same instance with clusters and engines in reverse order.
	rev := *in
	rev.Clusters = append([]optimizer.Cluster(nil), in.Clusters...)
	rev.Engines = append([]optimizer.Engine(nil), in.Engines...)
	for i, j := 0, len(rev.Clusters)-1; i < j; i, j = i+1, j-1 {
		rev.Clusters[i], rev.Clusters[j] = rev.Clusters[j], rev.Clusters[i]
	}
	for i, j := 0, len(rev.Engines)-1; i < j; i, j = i+1, j-1 {
		rev.Engines[i], rev.Engines[j] = rev.Engines[j], rev.Engines[i]
	}
	b, err := optimizer.Solve(&rev)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatal("same instance in another order gave different output")
	}
	if in.Digest() != rev.Digest() {
		t.Fatal("digest depends on order")
	}
	rev.Clusters[0].DemandRPS++
	if in.Digest() == rev.Digest() {
		t.Fatal("digest ignores demand")
	}
}

func TestChurnHoldsPreviousWeights(t *testing.T) {
	in := loadInstance(t, "testdata/region-bc.json")
	in.Clusters[0].DemandRPS = 80 // fits on b-0: previous plan is feasible
	in.Previous = map[string]map[string]float64{"region-b": {"b-0": 0.75, "c-0": 0.25}, "region-c": {"c-0": 1}}
	for _, tt := range []struct {
		churn   float64
		holdsAt bool
	}{{0, false}, {1e4, true}} {
		in.ChurnWeight = tt.churn
		sol, err := optimizer.Solve(in)
		if err != nil {
			t.Fatal(err)
		}
		checkSolution(t, in, sol, true)
		held := math.Abs(sol.Weights["region-b"]["c-0"]-0.25) < 1e-6
		if held != tt.holdsAt {
			t.Errorf("churn %v: weights %v, want held at previous %v", tt.churn, sol.Weights, tt.holdsAt)
		}
		if tt.holdsAt && sol.ChurnRPS > 1e-6 {
			t.Errorf("churn %v: moved %v rps", tt.churn, sol.ChurnRPS)
		}
		if tt.holdsAt && !strings.Contains(strings.Join(sol.Explanations["region-b"][1].Binding, ","), "churn") {
			t.Errorf("explanation %+v does not name churn", sol.Explanations["region-b"][1])
		}
	}
}

func TestExplanationsBinding(t *testing.T) {
	in := loadInstance(t, "testdata/region-bc.json")
	in.Engines = append(in.Engines, optimizer.Engine{ID: "d-0", CapacityRPS: 50, Healthy: false, LatencyMs: [][2]float64{{0, 10}}})
	in.RTTms["region-b"]["d-0"] = 1
	in.Previous["region-c"] = map[string]float64{"b-0": 0.5, "c-0": 0.5}
	delete(in.RTTms["region-c"], "b-0")
	in.Clusters[0].DemandRPS = 200 // overload: capacity binds
	sol, err := optimizer.Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	checkSolution(t, in, sol, true)
	binding := map[string]string{}
	for _, c := range []string{"region-b", "region-c"} {
		for _, ex := range sol.Explanations[c] {
			binding[c+"/"+ex.Engine] = strings.Join(ex.Binding, ",")
		}
	}
	want := map[string]string{
		"region-b/b-0": "capacity", "region-b/c-0": "capacity", "region-b/d-0": "unhealthy",
		"region-c/b-0": "residency", "region-c/c-0": "capacity",
	}
	for k, v := range want {
		if binding[k] != v {
			t.Errorf("binding %s = %q, want %q", k, binding[k], v)
		}
	}
	cw := sol.ClusterWeights(map[string]string{"b-0": "http://b-0"})
	if len(cw) != 2 || cw[0].Cluster != "region-b" || cw[0].Weights[0].EndpointUrl != "http://b-0" || cw[0].ShedFraction <= 0 {
		t.Errorf("cluster weights %v", cw)
	}
	if st := sol.Stats(); st.Solver == "" || st.TotalShedRps <= 0 {
		t.Errorf("stats %v", st)
	}
}

func TestValidate(t *testing.T) {
	good := func() *optimizer.Instance { return loadInstance(t, "testdata/region-bc.json") }
	tests := []struct {
		name  string
		edit  func(in *optimizer.Instance)
		field string
	}{
		{"nan demand", func(in *optimizer.Instance) { in.Clusters[0].DemandRPS = math.NaN() }, "demand_rps"},
		{"negative capacity", func(in *optimizer.Instance) { in.Engines[0].CapacityRPS = -1 }, "capacity_rps"},
		{"decreasing profile", func(in *optimizer.Instance) { in.Engines[0].LatencyMs = [][2]float64{{0, 300}, {1, 200}} }, "latency_ms"},
		{"non-convex profile", func(in *optimizer.Instance) {
			in.Engines[1].LatencyMs = [][2]float64{{0, 100}, {0.5, 1000}, {1, 1100}}
		}, "not convex"},
		{"empty profile", func(in *optimizer.Instance) { in.Engines[1].LatencyMs = nil }, "latency_ms"},
		{"unknown engine in rtt", func(in *optimizer.Instance) { in.RTTms["region-b"]["x-9"] = 1 }, `rtt_ms["region-b"]["x-9"]`},
		{"unknown cluster in rtt", func(in *optimizer.Instance) { in.RTTms["nowhere"] = map[string]float64{} }, `rtt_ms["nowhere"]`},
		{"unknown engine in previous", func(in *optimizer.Instance) { in.Previous["region-b"]["x-9"] = 0.1 }, `previous["region-b"]["x-9"]`},
		{"previous above one", func(in *optimizer.Instance) { in.Previous["region-b"]["c-0"] = 0.5 }, "sums to"},
		{"empty fleet", func(in *optimizer.Instance) { in.Engines = nil; in.RTTms = nil; in.Previous = nil }, "empty fleet"},
		{"no clusters", func(in *optimizer.Instance) { in.Clusters = nil; in.RTTms = nil; in.Previous = nil }, "clusters"},
		{"max utilization", func(in *optimizer.Instance) { in.MaxUtilization = 1.5 }, "max_utilization"},
		{"negative churn", func(in *optimizer.Instance) { in.ChurnWeight = -1 }, "churn_weight"},
		{"duplicate engine", func(in *optimizer.Instance) { in.Engines[1].ID = "b-0" }, "duplicated"},
		{"infinite rtt", func(in *optimizer.Instance) { in.RTTms["region-b"]["b-0"] = math.Inf(1) }, "rtt_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := good()
			tt.edit(in)
			_, err := optimizer.Solve(in)
			if !errors.Is(err, optimizer.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("err %q does not name %q", err, tt.field)
			}
		})
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
}
