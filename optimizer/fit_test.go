package optimizer_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
)

// validProfile checks p through the instance validator (convex,
// non-decreasing, finite).
func validProfile(t *testing.T, p optimizer.Profile) {
	t.Helper()
	in := &optimizer.Instance{MaxUtilization: 0.95,
		Clusters: []optimizer.Cluster{{ID: "c", DemandRPS: 1}},
		Engines:  []optimizer.Engine{{ID: "e", CapacityRPS: 10, Healthy: true, LatencyMs: p.Latency()}},
		RTTms:    map[string]map[string]float64{"c": {"e": 1}}}
	if err := in.Validate(); err != nil {
		t.Fatalf("fitted profile %v is not valid: %v", p.Points, err)
	}
}

func samples(rng *rand.Rand, n int, truth func(float64) float64, sigma float64) []optimizer.Observation {
	obs := make([]optimizer.Observation, n)
	for k := range obs {
		u := 0.95 * rng.Float64()
		obs[k] = optimizer.Observation{Utilization: u, LatencyMs: truth(u) + sigma*rng.NormFloat64()}
	}
	return obs
}

func TestFitProfile(t *testing.T) {
	a100, _ := optimizer.PriorProfile(optimizer.GPUA100)
	h100, _ := optimizer.PriorProfile(optimizer.GPUH100)
	// The engine really behaves like 1.3x the A100 prior.
	truth := func(u float64) float64 { return 1.3 * a100.At(u) }
	tests := []struct {
		name      string
		n         int
		sigma     float64
		truth     func(float64) float64
		prior     optimizer.Profile
		wantPrior bool
		// maximum relative error at the knots up to 0.9 utilization
		maxRel float64
		// reference the fit should be close to
		ref func(float64) float64
	}{
		{"plenty of data", 2000, 20, truth, a100, false, 0.05, truth},
		{"plenty of data, other class's prior", 2000, 20, truth, h100, false, 0.05, truth},
		{"no prior", 2000, 20, truth, optimizer.Profile{}, false, 0.05, truth},
		{"thin data: prior shape at the data's level", 3, 20, truth, a100, true, 0.1, truth},
		{"no data is the prior", 0, 0, truth, h100, true, 0.02, h100.At},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			obs := samples(rng, tt.n, tt.truth, tt.sigma)
			p, err := optimizer.FitProfile(obs, tt.prior)
			if err != nil {
				t.Fatal(err)
			}
			validProfile(t, p)
			if p.Samples != tt.n || p.Prior != tt.wantPrior {
				t.Errorf("samples %d prior %v, want %d %v", p.Samples, p.Prior, tt.n, tt.wantPrior)
			}
			worst := 0.0
			for _, q := range p.Points {
				if q.Utilization > 0.9 {
					continue
				}
				worst = math.Max(worst, math.Abs(q.LatencyMs-tt.ref(q.Utilization))/tt.ref(q.Utilization))
			}
			t.Logf("%d samples: worst relative error %.3f at the knots, rmse %.2f ms", tt.n, worst, p.RMSEms)
			if worst > tt.maxRel {
				t.Errorf("worst relative error %.3f > %.3f; fit %v", worst, tt.maxRel, p.Points)
			}
			if tt.n >= 1000 && tt.maxRel <= 0.08 && (p.RMSEms < 0.8*tt.sigma || p.RMSEms > 1.3*tt.sigma) {
				t.Errorf("rmse %.2f, want about the noise %.2f", p.RMSEms, tt.sigma)
			}
		})
	}
}

// TestFitProfileConcaveData: the best convex non-decreasing fit of
// concave data is no worse than the least-squares line (itself convex).
func TestFitProfileConcaveData(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	obs := samples(rng, 2000, func(u float64) float64 { return 100 + 400*math.Sqrt(u) }, 5)
	p, err := optimizer.FitProfile(obs, optimizer.Profile{})
	if err != nil {
		t.Fatal(err)
	}
	validProfile(t, p)
	var su, sy, suu, suy float64
	for _, o := range obs {
		su, sy, suu, suy = su+o.Utilization, sy+o.LatencyMs, suu+o.Utilization*o.Utilization, suy+o.Utilization*o.LatencyMs
	}
	n := float64(len(obs))
	b := (n*suy - su*sy) / (n*suu - su*su)
	a := (sy - b*su) / n
	se := 0.0
	for _, o := range obs {
		d := a + b*o.Utilization - o.LatencyMs
		se += d * d
	}
	line := math.Sqrt(se / n)
	t.Logf("convex fit rmse %.2f ms, least-squares line %.2f ms", p.RMSEms, line)
	if p.RMSEms > line*1.001 {
		t.Errorf("convex fit rmse %.3f worse than the line's %.3f", p.RMSEms, line)
	}
}

func TestFitProfileBadInput(t *testing.T) {
	if _, err := optimizer.FitProfile(nil, optimizer.Profile{}); !errors.Is(err, optimizer.ErrNoData) {
		t.Fatalf("no data no prior: %v", err)
	}
	bad := []optimizer.Observation{{Utilization: math.NaN(), LatencyMs: 1}, {Utilization: 0.5, LatencyMs: -3},
		{Utilization: 0.5, LatencyMs: math.Inf(1)}, {Utilization: -1, LatencyMs: 5}}
	if _, err := optimizer.FitProfile(bad, optimizer.Profile{}); !errors.Is(err, optimizer.ErrNoData) {
		t.Fatalf("only invalid observations: %v", err)
	}
	prior, _ := optimizer.PriorProfile(optimizer.GPUL4)
	p, err := optimizer.FitProfile(append(bad, optimizer.Observation{Utilization: 0.5, LatencyMs: 700}), prior)
	if err != nil || p.Samples != 1 {
		t.Fatalf("mixed observations: %v samples %d", err, p.Samples)
	}
	validProfile(t, p)
	for _, opt := range []optimizer.FitOpt{optimizer.Knots(0.5), optimizer.Knots(0.5, 0.2), optimizer.PriorWeight(-1), optimizer.PriorWeight(math.NaN())} {
		if _, err := optimizer.FitProfile(nil, prior, opt); err == nil {
			t.Errorf("bad option accepted")
		}
	}
	if _, ok := optimizer.PriorProfile("tpu"); ok {
		t.Error("unknown class has a prior")
	}
	for _, c := range optimizer.GPUClasses() {
		p, ok := optimizer.PriorProfile(c)
		if !ok {
			t.Fatalf("class %s has no prior", c)
		}
		validProfile(t, p)
		back := optimizer.ProfileFromProto(p.Proto())
		if len(back.Points) != len(p.Points) || !back.Prior {
			t.Errorf("proto round trip of %s: %v", c, back)
		}
	}
}

// FuzzFitProfile: arbitrary observations never give an invalid profile.
func FuzzFitProfile(f *testing.F) {
	f.Add(uint64(1), uint8(10), 100.0, 3.0, false)
	f.Add(uint64(2), uint8(0), 0.0, 0.0, true)
	f.Add(uint64(3), uint8(200), 1e6, 1e-9, true)
	f.Fuzz(func(t *testing.T, seed uint64, n uint8, scale, spread float64, usePrior bool) {
		rng := rand.New(rand.NewPCG(seed, 0))
		var obs []optimizer.Observation
		for range n {
			obs = append(obs, optimizer.Observation{Utilization: spread * rng.Float64(), LatencyMs: scale * rng.Float64(), Weight: rng.Float64()})
		}
		var prior optimizer.Profile
		if usePrior {
			prior, _ = optimizer.PriorProfile(optimizer.GPUH100)
		}
		p, err := optimizer.FitProfile(obs, prior)
		if err != nil {
			if !errors.Is(err, optimizer.ErrNoData) {
				t.Fatal(err)
			}
			return
		}
		if math.IsNaN(p.RMSEms) || math.IsInf(p.RMSEms, 0) {
			t.Fatalf("rmse %v", p.RMSEms)
		}
		if math.Abs(scale) < 1e8 {
			validProfile(t, p)
		}
	})
}
