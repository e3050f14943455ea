package estimate

import "github.com/switchyard-llm/switchyard/schemas"

// Tries counts the attempts gateways made on one engine (RoutingEvent
// tried) and how many of them failed by the engine's fault (see
// engineFault). Routing events are keyed by request id, so an engine's
// attempts come from every input partition; the counts are integers and
// sum exactly in any order.
type Tries struct{ attempts, failures uint32 }

func (t *Tries) merge(o *Tries) {
	t.attempts += o.attempts
	t.failures += o.failures
}

// Health from attempt outcomes (see Tries.health): with at least
// failMinAttempts attempts on an engine in the window, a failed share of
// failUnhealthyShare or more makes it unhealthy, of failDegradedShare or
// more degraded.
const (
	failMinAttempts    = 5
	failUnhealthyShare = 0.5
	failDegradedShare  = 0.1
)

// engineFault reports whether an attempt failed by the engine's fault:
// it answered 5xx (other than 503), could not be connected to, or its
// stream broke. Client errors, cancellations, 429/503 (saturated: busy,
// not broken) and timeouts (a slow engine, which its latency profile
// already shows) are not.
func engineFault(a *schemas.Attempt) bool {
	if a.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_ERROR {
		return false
	}
	switch a.GetFailureReason() {
	case schemas.FailureReason_FAILURE_REASON_CONNECT, schemas.FailureReason_FAILURE_REASON_STATUS_5XX,
		schemas.FailureReason_FAILURE_REASON_STREAM:
		return true
	}
	return false
}

// counts reports whether a counts as an attempt at all: one the client
// canceled says nothing about the engine.
func counts(a *schemas.Attempt) bool {
	return a.GetEngineId() != "" && a.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_CANCELED
}

// health is the engine's health given the signals' health h and the
// window's attempts: unhealthy when at least failMinAttempts attempts
// were made and failUnhealthyShare of them failed by the engine's fault;
// a healthy engine is degraded from failDegradedShare. Otherwise h.
func (t Tries) health(h schemas.Health) schemas.Health {
	if t.attempts < failMinAttempts || h == schemas.Health_HEALTH_UNHEALTHY {
		return h
	}
	share := float64(t.failures) / float64(t.attempts)
	switch {
	case share >= failUnhealthyShare:
		return schemas.Health_HEALTH_UNHEALTHY
	case share >= failDegradedShare && h == schemas.Health_HEALTH_HEALTHY:
		return schemas.Health_HEALTH_DEGRADED
	}
	return h
}
