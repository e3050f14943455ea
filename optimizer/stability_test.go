package optimizer_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
)

// observed is what a controller sees of one engine at one step: its load
// and its latency measured with noise.
type observed struct{ util, latencyMs float64 }

// controller sets per-cluster weights from what it observes this step and
// the weights it set last step.
type controller func(step int, obs map[string]observed, prev map[string]map[string]float64) map[string]map[string]float64

// loop simulates the seed fleet in closed loop: each step a controller
// sets per-cluster weights from what it observes; each engine's load
// follows the traffic those weights sent `delay` steps ago through a
// first-order lag (queues drain and fill gradually), and its latency is
// its profile at that load times (1 + noise[step][engine]). Every
// controller run with the same noise table sees the same measurement
// errors. It returns the weight region-b puts on b-0 at every step.
func loop(t *testing.T, in *optimizer.Instance, delay int, noise []map[string]float64, control controller) []float64 {
	t.Helper()
	demand := map[string]float64{}
	for _, c := range in.Clusters {
		demand[c.ID] = c.DemandRPS
	}
	load := map[string]float64{"b-0": 100 * 0.8, "c-0": 80 * 0.8}
	history := []map[string]map[string]float64{in.Previous}
	var out []float64
	for step := range noise {
		// Load follows the traffic the weights of `delay` steps ago send.
		w := history[max(0, len(history)-1-delay)]
		for _, e := range in.Engines {
			target := 0.0
			for c, d := range demand {
				target += w[c][e.ID] * d
			}
			load[e.ID] += 0.5 * (target - load[e.ID])
		}
		obs := map[string]observed{}
		for _, e := range in.Engines {
			u := math.Min(load[e.ID]/e.CapacityRPS, 1.2) // queues beyond capacity, bounded for the model
			obs[e.ID] = observed{u, latency(e.LatencyMs, u) * (1 + noise[step][e.ID])}
		}
		next := control(step, obs, history[len(history)-1])
		history = append(history, next)
		out = append(out, next["region-b"]["b-0"])
	}
	return out
}

// noiseTable draws uniform relative measurement errors in [-level, level]
// per step and engine from a fixed seed.
func noiseTable(steps int, level float64, engines []optimizer.Engine) []map[string]float64 {
	rng := rand.New(rand.NewPCG(7, 7))
	out := make([]map[string]float64, steps)
	for s := range out {
		out[s] = map[string]float64{}
		for _, e := range engines {
			out[s][e.ID] = level * (2*rng.Float64() - 1)
		}
	}
	return out
}

// switchyardController is the live loop in miniature: each engine's
// profile is refitted every step (FitProfile, shrunk towards the
// instance's profile as prior) to the observations of the last `window`
// steps, and the instance re-solved with those profiles, the previous
// weights and the churn weight.
func switchyardController(t *testing.T, in *optimizer.Instance, churn float64, window int) controller {
	hist := map[string][]optimizer.Observation{}
	return func(_ int, obs map[string]observed, prev map[string]map[string]float64) map[string]map[string]float64 {
		inst := *in
		inst.ChurnWeight = churn
		inst.Previous = prev
		inst.Engines = nil
		for _, e := range in.Engines {
			o := obs[e.ID]
			h := append(hist[e.ID], optimizer.Observation{Utilization: o.util, LatencyMs: o.latencyMs})
			if len(h) > window {
				h = h[len(h)-window:]
			}
			hist[e.ID] = h
			var prior optimizer.Profile
			for _, p := range e.LatencyMs {
				prior.Points = append(prior.Points, optimizer.ProfilePoint{Utilization: p[0], LatencyMs: p[1]})
			}
			fit, err := optimizer.FitProfile(h, prior)
			if err != nil {
				t.Fatal(err)
			}
			e.LatencyMs = fit.Latency()
			inst.Engines = append(inst.Engines, e)
		}
		sol, err := optimizer.Solve(&inst)
		if err != nil {
			t.Fatal(err)
		}
		return sol.Weights
	}
}

// proportionalController reproduces the old design: engine weights w,
// w_j *= 1 - gain*(lat_j-avg)/avg on the observed latencies, fed to
// weighted consistent hashing, i.e. every cluster splits its traffic by
// them.
func proportionalController() controller {
	const gain = 0.5
	ew := map[string]float64{"b-0": 0.5, "c-0": 0.5}
	return func(_ int, obs map[string]observed, _ map[string]map[string]float64) map[string]map[string]float64 {
		avg := (obs["b-0"].latencyMs + obs["c-0"].latencyMs) / 2
		sum := 0.0
		for _, id := range []string{"b-0", "c-0"} {
			ew[id] = math.Max(0.01, ew[id]*(1-gain*(obs[id].latencyMs-avg)/avg))
			sum += ew[id]
		}
		w := map[string]float64{"b-0": ew["b-0"] / sum, "c-0": ew["c-0"] / sum}
		return map[string]map[string]float64{"region-b": w, "region-c": w}
	}
}

// amplitude is max-min over the second half; reversals counts sign
// changes of the step-to-step change larger than 1e-4 there.
func amplitude(w []float64) (amp float64, reversals int) {
	tail := w[len(w)/2:]
	lo, hi := math.Inf(1), math.Inf(-1)
	lastSign := 0
	for k, v := range tail {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
		if k == 0 {
			continue
		}
		d := v - tail[k-1]
		s := 0
		if d > 1e-4 {
			s = 1
		} else if d < -1e-4 {
			s = -1
		}
		if s != 0 && lastSign != 0 && s != lastSign {
			reversals++
		}
		if s != 0 {
			lastSign = s
		}
	}
	return hi - lo, reversals
}

// TestStabilityClosedLoop compares Switchyard with a reproduction of the
// old design (proportionalController) in the same closed loop, on the
// same observed latencies: 200 steps, load lagging the weights by 2
// steps, every latency measured with the same seeded uniform error (0,
// ±5% and ±15%); amplitudes and reversals of region-b's weight on b-0 are
// measured over the last 100 steps. Switchyard refits each engine's
// profile to its last 20 observations every step and re-solves
// (switchyardController), with churn_weight 0 and 200 ms/rps. Both
// controllers act on the observed latencies only (neither sees the true
// profile after the start), so what settles is the closed loop, not a
// solver fed the same input every step.
func TestStabilityClosedLoop(t *testing.T) {
	const steps, delay, window = 200, 2, 20
	in := loadInstance(t, "testdata/region-bc.json")
	t.Logf("weight region-b -> b-0 over the last %d of %d steps, load lagging weights by %d steps:", steps/2, steps, delay)
	for _, level := range []float64{0, 0.05, 0.15} {
		noise := noiseTable(steps, level, in.Engines)
		ampS, revS := amplitude(loop(t, in, delay, noise, switchyardController(t, in, 0, window)))
		ampD, revD := amplitude(loop(t, in, delay, noise, switchyardController(t, in, 200, window)))
		ampO, revO := amplitude(loop(t, in, delay, noise, proportionalController()))
		t.Logf("  latency noise ±%2.0f%%: switchyard churn 0: amplitude %.4f, %3d reversals; churn 200: amplitude %.4f, %3d reversals; old: amplitude %.4f, %3d reversals",
			100*level, ampS, revS, ampD, revD, ampO, revO)
		if ampO < 0.1 || revO < 10 {
			t.Errorf("noise %v: old design amplitude %v with %d reversals: expected sustained oscillation", level, ampO, revO)
		}
		// The optimizer tracks the noise with small moves (without churn
		// they reverse often); it never swings like the old design.
		if ampS > 0.1*ampO || ampD > 0.1*ampO {
			t.Errorf("noise %v: switchyard amplitude %v (churn 0), %v (churn 200), old design %v: want below a tenth", level, ampS, ampD, ampO)
		}
		// The churn term damps it: no larger amplitude (or at most 1e-3,
		// the slow drift of a held weight), fewer reversals than the old
		// design.
		if ampD > math.Max(ampS, 1e-3) || revD >= revO {
			t.Errorf("noise %v: switchyard with churn 200: amplitude %v, %d reversals; want at most %v and fewer than the old design's %d", level, ampD, revD, ampS, revO)
		}
		if level == 0 && (ampS > 1e-3 || revS > 0 || ampD > 1e-3 || revD > 0) {
			t.Errorf("exact measurements: switchyard amplitude %v/%v, %d/%d reversals; want settled", ampS, ampD, revS, revD)
		}
	}
}
