package optimizer

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
)

// TestTrace prints the solver's trace for the instance file named by
// SWITCHYARD_TRACE (skipped otherwise); a development aid.
func TestTrace(t *testing.T) {
	path := os.Getenv("SWITCHYARD_TRACE")
	if path == "" {
		t.Skip("SWITCHYARD_TRACE not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	in := new(Instance)
	if err := json.Unmarshal(data, in); err != nil {
		t.Fatal(err)
	}
	sol, err := Solve(in, Tolerance(tolFromEnv()), optionFunc(func(c *config) { c.debug = t.Logf }))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gap %.3g iterations %d", sol.DualityGap, sol.Iterations)
}

func tolFromEnv() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("SWITCHYARD_TRACE_TOL"), 64); err == nil {
		return v
	}
	return 1e-3
}
