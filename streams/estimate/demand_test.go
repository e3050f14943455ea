package estimate

import (
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestDemandCountsArrivalsOnce: each request counts once as demand, at
// arrival: shed and failed requests count (the shed also as rejected, by
// reason), a long request's arrival
// record counts and its final record does not, and requests the gateway
// refused itself as malformed or unauthenticated, or over their tenant's
// quota, never count.
func TestDemandCountsArrivalsOnce(t *testing.T) {
	const (
		ok         = schemas.RequestStatus_REQUEST_STATUS_OK
		shed       = schemas.RequestStatus_REQUEST_STATUS_SHED
		failed     = schemas.RequestStatus_REQUEST_STATUS_ERROR
		clientErr  = schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR
		inProgress = schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS
	)
	for _, tc := range []struct {
		name   string
		ev     *schemas.RoutingEvent
		demand bool
	}{
		{"ok", &schemas.RoutingEvent{Status: ok, EngineId: "a", OutputTokens: 10}, true},
		{"shed by snapshot", &schemas.RoutingEvent{Status: shed, FailureReason: schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT}, true},
		{"rejected by admission", &schemas.RoutingEvent{Status: shed, FailureReason: schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION}, true},
		{"every engine at its limit", &schemas.RoutingEvent{Status: shed, FailureReason: schemas.FailureReason_FAILURE_REASON_SHED_CAPACITY}, true},
		{"failed", &schemas.RoutingEvent{Status: failed, EngineId: "a"}, true},
		{"engine's 4xx", &schemas.RoutingEvent{Status: clientErr, EngineId: "a", HttpStatus: 400}, true},
		{"arrival record", &schemas.RoutingEvent{Status: inProgress}, true},
		{"final record after arrival", &schemas.RoutingEvent{Status: ok, EngineId: "a", CountedAtArrival: true, OutputTokens: 10}, false},
		{"malformed (gateway 400)", &schemas.RoutingEvent{Status: clientErr, HttpStatus: 400}, false},
		{"bad key (gateway 401)", &schemas.RoutingEvent{Status: clientErr, HttpStatus: 401, FailureReason: schemas.FailureReason_FAILURE_REASON_UNAUTHENTICATED}, false},
		{"over tenant quota", &schemas.RoutingEvent{Status: shed, HttpStatus: 429, FailureReason: schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CountsAsDemand(tc.ev); got != tc.demand {
				t.Fatalf("CountsAsDemand %v, want %v", got, tc.demand)
			}
			var d Demand
			d.Add(tc.ev)
			if want := map[bool]uint32{true: 1}[tc.demand]; d.requests != want {
				t.Fatalf("requests %d, want %d", d.requests, want)
			}
			// Rejected: the counted requests the gateway answered 429.
			rejected := tc.demand && tc.ev.GetStatus() == shed
			if want := map[bool]uint32{true: 1}[rejected]; d.rejected != want {
				t.Fatalf("rejected %d, want %d", d.rejected, want)
			}
			snap := rejected && tc.ev.GetFailureReason() == schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT
			adm := rejected && tc.ev.GetFailureReason() == schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION
			if d.shedSnapshot != map[bool]uint32{true: 1}[snap] || d.shedAdmission != map[bool]uint32{true: 1}[adm] {
				t.Fatalf("shed by snapshot %d, by admission %d", d.shedSnapshot, d.shedAdmission)
			}
		})
	}
	// The final record of a long request still gives the token mix.
	var d Demand
	d.Add(&schemas.RoutingEvent{Status: inProgress})
	d.Add(&schemas.RoutingEvent{Status: ok, EngineId: "a", CountedAtArrival: true, OutputTokens: 10, PromptTokens: 5})
	if d.requests != 1 || d.tokened != 1 || d.outputSum != 10 || d.promptSum != 5 {
		t.Fatalf("arrival + final: %+v", d)
	}
}
