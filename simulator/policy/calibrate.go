package policy

import (
	"fmt"
	"time"

	"github.com/switchyard-llm/switchyard/internal/hashkey"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// calibrationSpan is how much of the workload a load test replays.
const calibrationSpan = 60 * time.Second

// calibrate load-tests the engine model, as an operator would before
// pinning capacities: for each distinct engine configuration it replays
// into one such engine alone the conversations of the run's workload that
// an affinity router would send it (one in len(engines)), sped up or
// slowed down, and finds by bisection the highest rate at which the
// p90 TTFT stays within the scenario's SLO and nothing fails. The result
// is each engine's capacity in rps.
func calibrate(w *des.World) ([]float64, error) {
	out := make([]float64, len(w.Engines))
	cache := map[string]float64{}
	for k, info := range w.Engines {
		e := w.Scenario.Engines[k]
		key := fmt.Sprintf("%s/%d/%d/%d/%d/%g", e.GPU, max(e.Replicas, 1), e.MaxWaiting, e.MaxModelLen, e.MaxSeqs, e.LatencyMultiplier)
		if c, ok := cache[key]; ok {
			out[k] = c
			continue
		}
		c, err := loadTest(w, e)
		if err != nil {
			return nil, fmt.Errorf("calibrating %s: %w", info.ID, err)
		}
		cache[key] = c
		out[k] = c
	}
	return out, nil
}

func loadTest(w *des.World, e scenario.Engine) (float64, error) {
	src := w.Stream.Requests
	if len(src) == 0 {
		return 1, nil
	}
	// The conversations an affinity router would give one engine of the
	// fleet (every len(engines)-th session key) over the first
	// calibrationSpan of the workload, all in one cluster.
	var base []workload.Request
	stride := uint64(len(w.Engines))
	for _, r := range src {
		if r.Arrival >= calibrationSpan && len(base) >= 200 {
			break
		}
		if hashkey.String("s:"+r.Session)%stride == 0 {
			base = append(base, r)
		}
	}
	if len(base) == 0 {
		base = src[:min(len(src), 200)]
	}
	span := base[len(base)-1].Arrival + time.Millisecond
	rate0 := float64(len(base)) / span.Seconds()
	sc := &scenario.Scenario{
		Name: "calibrate", SLO: w.Scenario.SLO, Regions: []string{"r"}, DrainS: 30,
		Clusters: []scenario.Cluster{{ID: "c", Region: "r"}},
		Engines: []scenario.Engine{{ID: "e", Region: "r", GPU: e.GPU, Replicas: e.Replicas, MaxWaiting: e.MaxWaiting,
			MaxModelLen: e.MaxModelLen, MaxSeqs: e.MaxSeqs, LatencyMultiplier: e.LatencyMultiplier}},
		Workload: scenario.Workload{Kind: scenario.KindGenerator},
		Control:  w.Scenario.Control,
	}
	reqs := make([]workload.Request, len(base))
	ok := func(rate float64) (bool, error) {
		f := rate0 / rate
		for i, r := range base {
			r.Arrival = time.Duration(float64(r.Arrival) * f)
			r.Cluster = "c"
			reqs[i] = r
		}
		st := &scenario.Stream{Requests: reqs, BlockTokens: w.Stream.BlockTokens, Span: time.Duration(float64(span) * f)}
		res, err := des.Run(sc, st, "calibrate", func(w *des.World) (des.Policy, error) { return &roundRobin{base: newBase(w, 1)}, nil }, des.Options{})
		if err != nil {
			return false, err
		}
		m := res.Metrics
		return m.Failed == 0 && m.Shed == 0 && m.TTFTms.P90 <= w.Scenario.SLO.TTFTms, nil
	}
	lo, hi := 0.0, rate0
	for {
		good, err := ok(hi)
		if err != nil {
			return 0, err
		}
		if !good || hi > 1e5 {
			break
		}
		lo, hi = hi, hi*2
	}
	for range 10 {
		mid := (lo + hi) / 2
		good, err := ok(mid)
		if err != nil {
			return 0, err
		}
		if good {
			lo = mid
		} else {
			hi = mid
		}
	}
	return max(lo, 0.1), nil
}
