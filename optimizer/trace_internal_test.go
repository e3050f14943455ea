package optimizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestTraceKeepsPlan solves variants of the shipped region-bc instance
// with and without the trace hook: the hook only observes, so both plans
// must encode to the same bytes, and the trace must show the phases the
// variant is known to take (the exact phase's sweeps; the churn run's
// certification; its fallback candidates when the churn Newton run falls
// short). SWITCHYARD_OPTIMIZER_TRACE names an extra instance file to
// solve and log the trace of, at SWITCHYARD_OPTIMIZER_TRACE_TOL (default
// 1e-3): a development aid. (It was SWITCHYARD_TRACE, which the sim's
// --trace flag also reads from the environment.)
func TestTraceKeepsPlan(t *testing.T) {
	load := func(t *testing.T, path string) *Instance {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		in := new(Instance)
		if err := json.Unmarshal(data, in); err != nil {
			t.Fatal(err)
		}
		return in
	}
	churn := func(cw, demandB float64) func(*Instance) {
		return func(in *Instance) {
			in.Clusters[0].DemandRPS = demandB
			in.ChurnWeight = cw
			in.Previous = map[string]map[string]float64{"region-b": {"b-0": 0.75, "c-0": 0.25}, "region-c": {"c-0": 1}}
		}
	}
	tests := []struct {
		name string
		path string
		edit func(*Instance)
		tol  float64
		want []string // substrings of trace lines
	}{
		{"exact", "testdata/region-bc.json", func(*Instance) {}, 1e-9,
			[]string{"newton: ", "softmax entries", "after newton: ", "sweep 1: "}},
		{"churn certified", "testdata/region-bc.json", churn(1e4, 120), 1e-4,
			[]string{"   certify g1 ", "after newton: "}},
		{"churn fallback", "testdata/region-bc.json", churn(20, 200), 1e-9,
			[]string{"engine solves", "candidate primal", "softmax entries", "sweep 1: "}},
	}
	if path := os.Getenv("SWITCHYARD_OPTIMIZER_TRACE"); path != "" {
		tests = append(tests, struct {
			name string
			path string
			edit func(*Instance)
			tol  float64
			want []string
		}{"SWITCHYARD_OPTIMIZER_TRACE", path, func(*Instance) {}, tolFromEnv(), nil})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := load(t, tt.path)
			tt.edit(in)
			plain, err := Solve(in, Tolerance(tt.tol))
			if err != nil {
				t.Fatal(err)
			}
			var trace []string
			traced, err := Solve(in, Tolerance(tt.tol), optionFunc(func(c *config) {
				c.debug = func(format string, args ...any) { trace = append(trace, fmt.Sprintf(format, args...)) }
			}))
			if err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(plain)
			b, _ := json.Marshal(traced)
			if !bytes.Equal(a, b) {
				t.Errorf("tracing changed the plan:\n%s\n%s", a, b)
			}
			all := strings.Join(trace, "\n")
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("trace has no %q:\n%s", w, all)
				}
			}
			if tt.want == nil {
				t.Logf("trace:\n%s", all)
			}
			t.Logf("gap %.3g iterations %d, %d trace lines", traced.DualityGap, traced.Iterations, len(trace))
		})
	}
}

func tolFromEnv() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("SWITCHYARD_OPTIMIZER_TRACE_TOL"), 64); err == nil {
		return v
	}
	return 1e-3
}
