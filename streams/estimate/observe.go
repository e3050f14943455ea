package estimate

import "github.com/switchyard-llm/switchyard/schemas"

// SignalObs is the observation one signal adds to an engine's latency
// profile of kind k (TTFT or TBOT): its utilization, the mean latency of
// the requests its histogram delta counts, and their number as the
// weight; false when the histogram counted none. The fit sees the same
// observations, bucketed by utilization.
func SignalObs(s *schemas.EngineSignal, k Kind) (Obs, bool) {
	h := s.GetTtftSeconds()
	if k == TBOT {
		h = s.GetTbotSeconds()
	}
	n, sum := histMeanMs(h)
	if n == 0 {
		return Obs{}, false
	}
	return Obs{Utilization: signalUtil(s), LatencyMs: sum / n, Weight: n}, true
}
