package optimizer_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

const goldenSolve = "testdata/golden_solve.txt"

// TestGoldenSolve pins the exact output of Solve and FitProfile (every
// float64 bit, through the JSON encoding's shortest round-trip form) on
// fixed instances: the region-bc seed under several demands and churn
// weights, synthetic fleets (shedding, churn, residency), and profile fits.
// The file is the same for every CPU build: run it with GOAMD64=v1 and
// GOAMD64=v3 (where the compiler may fuse x*y+z into one FMA unless an
// explicit float64 conversion rounds the product; see docs/replay.md).
// Regenerate with -update after an intended change.
func TestGoldenSolve(t *testing.T) {
	type tc struct {
		name string
		in   *optimizer.Instance
	}
	var cases []tc
	for _, cw := range []float64{0, 20} {
		for _, d := range []float64{80, 200} {
			in := loadInstance(t, "testdata/region-bc.json")
			in.Clusters[0].DemandRPS = d
			in.ChurnWeight = cw
			in.Previous = map[string]map[string]float64{"region-b": {"b-0": 0.75, "c-0": 0.25}, "region-c": {"c-0": 1}}
			cases = append(cases, tc{fmt.Sprintf("region-bc/demand=%g/churn=%g", d, cw), in})
		}
	}
	for seed := uint64(1); seed <= 3; seed++ {
		for _, load := range []float64{0.7, 1.3} {
			cfg := synth.Config{Clusters: 3 + int(seed), Engines: 6 + 3*int(seed), Seed: seed, Load: load,
				ChurnWeight: 5 * float64(seed-1), Previous: seed > 1, UnhealthyFraction: 0.1, Residency: 0.8}
			cases = append(cases, tc{fmt.Sprintf("synth/%dx%d/seed=%d/load=%g", cfg.Clusters, cfg.Engines, seed, load), synth.Instance(cfg)})
		}
	}
	var got []string
	for _, c := range cases {
		sol, err := optimizer.Solve(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got = append(got, c.name+" "+digest(t, sol))
	}
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		var obs []optimizer.Observation
		for range 200 {
			// Inputs rounded explicitly, so the test's own arithmetic is
			// not fused either.
			u := rng.Float64() * 1.1
			lat := 40 + float64(30*u) + float64(300*u*u*u) + float64(20*(rng.Float64()-0.5))
			obs = append(obs, optimizer.Observation{Utilization: u, LatencyMs: lat, Weight: 0.5 + rng.Float64()})
		}
		prior, _ := optimizer.PriorProfile(optimizer.GPUClasses()[seed%3])
		p, err := optimizer.FitProfile(obs, prior)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("fit/seed=%d %s", seed, digest(t, p)))
	}
	compareGolden(t, goldenSolve, got)
}

func digest(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func compareGolden(t *testing.T, path string, got []string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(got) {
			t.Fatalf("%s has more lines than the %d computed", path, len(got))
		}
		if sc.Text() != got[i] {
			t.Fatalf("output differs from %s at line %d:\n got  %s\n want %s", path, i+1, got[i], sc.Text())
		}
	}
	if i != len(got) {
		t.Fatalf("%s has %d lines, computed %d", path, i, len(got))
	}
}
