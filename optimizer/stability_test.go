package optimizer_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
)

// loop simulates the seed fleet in closed loop: each step a controller
// sets per-cluster weights from what it observes; each engine's load
// follows the traffic those weights sent `delay` steps ago through a
// first-order lag (queues drain and fill gradually), and its latency is
// its profile at that load. It returns the weight region-b puts on b-0
// at every step.
func loop(t *testing.T, steps, delay int, control func(step int, latency map[string]float64, prev map[string]map[string]float64) map[string]map[string]float64) []float64 {
	t.Helper()
	in := loadInstance(t, "testdata/region-bc.json")
	demand := map[string]float64{}
	for _, c := range in.Clusters {
		demand[c.ID] = c.DemandRPS
	}
	load := map[string]float64{"b-0": 100 * 0.8, "c-0": 80 * 0.8}
	history := []map[string]map[string]float64{in.Previous}
	var out []float64
	for step := range steps {
		// Load follows the traffic the weights of `delay` steps ago send.
		w := history[max(0, len(history)-1-delay)]
		for _, e := range in.Engines {
			target := 0.0
			for c, d := range demand {
				target += w[c][e.ID] * d
			}
			load[e.ID] += 0.5 * (target - load[e.ID])
		}
		latency := map[string]float64{}
		for _, e := range in.Engines {
			u := math.Min(load[e.ID]/e.CapacityRPS, 1.2) // queues beyond capacity, bounded for the model
			latency[e.ID] = latencyAt(e.LatencyMs, u)
		}
		next := control(step, latency, history[len(history)-1])
		history = append(history, next)
		out = append(out, next["region-b"]["b-0"])
	}
	return out
}

func latencyAt(pts [][2]float64, u float64) float64 { return latency(pts, u) }

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
// old design (a proportional controller on each engine's latency relative
// to the fleet average, whose engine weights feed weighted consistent
// hashing, i.e. every cluster splits its traffic by them). 200 steps,
// load lagging the weights by 2 steps; amplitudes are measured over the
// last 100. Switchyard re-solves every step from demand estimates with
// ±2% noise, churn_weight 20 ms/rps.
func TestStabilityClosedLoop(t *testing.T) {
	const steps, delay = 200, 2
	in := loadInstance(t, "testdata/region-bc.json")
	switchyard := func(noise, churn float64) []float64 {
		rng := rand.New(rand.NewPCG(7, 7))
		return loop(t, steps, delay, func(step int, _ map[string]float64, prev map[string]map[string]float64) map[string]map[string]float64 {
			inst := *in
			inst.ChurnWeight = churn
			inst.Clusters = nil
			for _, c := range in.Clusters {
				inst.Clusters = append(inst.Clusters, optimizer.Cluster{ID: c.ID, DemandRPS: c.DemandRPS * (1 + noise*(2*rng.Float64()-1))})
			}
			inst.Previous = prev
			sol, err := optimizer.Solve(&inst)
			if err != nil {
				t.Fatal(err)
			}
			return sol.Weights
		})
	}

	// The old design: engine weights w, w_j *= 1 - k*(lat_j-avg)/avg.
	const gain = 0.5
	ew := map[string]float64{"b-0": 0.5, "c-0": 0.5}
	old := loop(t, steps, delay, func(step int, latency map[string]float64, _ map[string]map[string]float64) map[string]map[string]float64 {
		avg := (latency["b-0"] + latency["c-0"]) / 2
		sum := 0.0
		for _, id := range []string{"b-0", "c-0"} {
			ew[id] = math.Max(0.01, ew[id]*(1-gain*(latency[id]-avg)/avg))
			sum += ew[id]
		}
		w := map[string]float64{"b-0": ew["b-0"] / sum, "c-0": ew["c-0"] / sum}
		return map[string]map[string]float64{"region-b": w, "region-c": w}
	})

	exact := switchyard(0, 0)
	noisy := switchyard(0.02, 0)
	damped := switchyard(0.02, 200)
	ampE, revE := amplitude(exact)
	ampN, revN := amplitude(noisy)
	ampD, revD := amplitude(damped)
	ampO, revO := amplitude(old)
	t.Logf("weight region-b -> b-0 over the last %d of %d steps, load lagging weights by %d steps:", steps/2, steps, delay)
	t.Logf("  switchyard, exact demand:               settles at %.4f, amplitude %.2g, %d reversals", exact[steps-1], ampE, revE)
	t.Logf("  switchyard, ±2%% demand noise, churn 0:   amplitude %.4f, %d reversals (tracks the noise)", ampN, revN)
	t.Logf("  switchyard, ±2%% demand noise, churn 200: amplitude %.4f, %d reversals", ampD, revD)
	t.Logf("  old proportional controller:            amplitude %.4f, %d reversals", ampO, revO)
	if ampE > 1e-6 || revE > 0 {
		t.Errorf("switchyard with exact inputs: amplitude %v, %d reversals; want settled", ampE, revE)
	}
	if ampD > ampN || ampD > 0.01 {
		t.Errorf("churn term should damp noise: amplitude %v with churn, %v without", ampD, ampN)
	}
	if ampO < 0.1 || revO < 10 {
		t.Errorf("old design amplitude %v with %d reversals: expected sustained oscillation", ampO, revO)
	}
}
