package admit

import "github.com/switchyard-llm/switchyard/schemas"

// Limits is how a gateway limits the requests it has in flight on one
// engine, in the engine's own unit: batch slots. An engine whose batch
// limit is known gets that many slots plus a queue of a quarter of them
// (at least one), so that it is never held below its free slots and a
// slot that frees is refilled without waiting for the gateway; requests
// beyond every engine's limit wait in the gateway's Queue, where the
// first engine to free a slot takes them (late binding, which a
// heterogeneous fleet needs: an engine's own queue would commit a
// request to a slow engine while a fast one frees first). Which engine
// a request goes to is the picker's business, scored in prefill work.
//
// Only an engine whose batch limit is unknown falls back to a Limiter's
// limit learned from its latency (when Adaptive), which assumes requests
// of similar cost; Static caps every limit (0: none).
type Limits struct {
	Adaptive bool
	Static   int64
}

// Limit returns an engine's limit (0: none) from its batch limit over
// all replicas (slots, 0: unknown) or, when that is unknown, its
// limiter's limit (learned).
func (l Limits) Limit(slots int64, learned int) int64 {
	if slots > 0 {
		n := slots + max(slots/4, 1)
		if l.Static > 0 {
			n = min(n, l.Static)
		}
		return n
	}
	switch {
	case !l.Adaptive:
		return l.Static
	case l.Static > 0:
		return min(int64(learned), l.Static)
	}
	return int64(learned)
}

// BatchFromSignal returns an engine's batch limit over its replicas
// after one of its signals, given what was known before (0: nothing):
// the max_batch it advertises over its ready replicas; else, when
// requests waited in its own queue, the most it was seen running then
// (it was full: what ran is what it can run); else what was known. A
// signal that says the engine is down forgets it (it may come back with
// other settings).
func BatchFromSignal(known int64, s *schemas.EngineSignal, down bool) int64 {
	running := s.GetRunningRequests()
	switch {
	case down:
		return 0
	case s.GetMaxBatch() > 0:
		return int64(s.GetMaxBatch()) * int64(max(s.GetReadyReplicas(), 1))
	case s.GetWaitingRequests() >= 1 && running >= 1 && running < 1<<20:
		return max(known, int64(running))
	}
	return known
}

// SignalDown reports whether an engine signal says the engine is down:
// unhealthy, or a known health with no ready replica.
func SignalDown(s *schemas.EngineSignal) bool {
	return s.GetHealth() == schemas.Health_HEALTH_UNHEALTHY ||
		(s.GetHealth() != schemas.Health_HEALTH_UNSPECIFIED && s.GetReadyReplicas() == 0)
}
