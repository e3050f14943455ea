package optimizer_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

// FuzzSolve solves random small fleets (optionally corrupted) and asserts
// the hard constraints and first-order optimality on every feasible
// instance, and ErrInvalid naming a field on every corrupted one.
func FuzzSolve(f *testing.F) {
	f.Add(uint64(1), uint8(2), uint8(3), 0.7, 0.0, 0.0, uint8(0), 0.0)
	f.Add(uint64(2), uint8(5), uint8(11), 1.5, 10.0, 0.3, uint8(0), 0.2)
	f.Add(uint64(3), uint8(1), uint8(1), 3.0, 0.0, 0.0, uint8(0), 0.0)
	f.Add(uint64(4), uint8(3), uint8(7), 0.9, 50.0, 0.5, uint8(0), 0.5)
	for c := uint8(1); c <= 6; c++ {
		f.Add(uint64(c), uint8(3), uint8(4), 0.5, 1.0, 0.0, c, 0.0)
	}
	f.Fuzz(func(t *testing.T, seed uint64, nc, ne uint8, load, churn, residency float64, corrupt uint8, unhealthy float64) {
		clean := func(v, mod float64) float64 {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0
			}
			return math.Mod(math.Abs(v), mod)
		}
		cfg := synth.Config{
			Clusters: 1 + int(nc%6), Engines: 1 + int(ne%12), Seed: seed,
			Load: 0.05 + clean(load, 2.5), ChurnWeight: clean(churn, 100),
			Previous: seed%2 == 0, Residency: clean(residency, 1),
			UnhealthyFraction: clean(unhealthy, 0.6),
		}
		in := synth.Instance(cfg)
		want := ""
		switch corrupt % 8 {
		case 1:
			in.Clusters[0].DemandRPS, want = math.NaN(), "demand_rps"
		case 2:
			in.Engines[0].CapacityRPS, want = -1, "capacity_rps"
		case 3:
			in.Engines[0].LatencyMs, want = [][2]float64{{0, 100}, {0.5, 900}, {1, 1000}}, "not convex"
		case 4:
			in.RTTms[in.Clusters[0].ID]["ghost"], want = 1, "unknown engine"
		case 5:
			in.Engines, want = nil, "empty fleet"
		case 6:
			in.Engines[0].LatencyMs, want = [][2]float64{{0, 500}, {1, 100}}, "decreasing"
		}
		sol, err := optimizer.Solve(in)
		if want != "" {
			if !errors.Is(err, optimizer.ErrInvalid) {
				t.Fatalf("corrupted (%s): err = %v, want ErrInvalid", want, err)
			}
			if msg := err.Error(); !strings.Contains(msg, want) {
				t.Fatalf("error %q does not name %q", msg, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid instance: %v", err)
		}
		checkSolution(t, in, sol, true)
	})
}

// FuzzInstanceJSON feeds arbitrary bytes to the instance decoder and the
// solver: either a clean ErrInvalid or a plan that keeps every hard
// constraint, never a panic or NaN.
func FuzzInstanceJSON(f *testing.F) {
	b, err := os.ReadFile("testdata/region-bc.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"max_utilization":1,"clusters":[{"id":"a","demand_rps":5}],"engines":[{"id":"e","capacity_rps":1,"healthy":true,"latency_ms":[[0,1]]}],"rtt_ms":{"a":{"e":0}}}`))
	f.Add([]byte(`{"max_utilization":0.5,"clusters":[{"id":"a","demand_rps":0}],"engines":[{"id":"e","capacity_rps":0,"healthy":true,"latency_ms":[[0.5,1],[0.6,1]]}],"rtt_ms":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var in optimizer.Instance
		if json.Unmarshal(data, &in) != nil {
			return
		}
		sol, err := optimizer.Solve(&in)
		if err != nil {
			if !errors.Is(err, optimizer.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			return
		}
		checkSolution(t, &in, sol, false)
	})
}
