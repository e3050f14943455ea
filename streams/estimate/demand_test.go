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

// TestDemandByModel: a cluster's demand estimate splits its requests by
// the model they named (counted as demand is: the final record of a
// request counted at arrival is not), sorted, with "" for those naming
// none and for models past the 63 a pane keeps apart; merged panes add
// up; no split when no request named a model.
func TestDemandByModel(t *testing.T) {
	var a, b Demand
	for range 3 {
		a.Add(&schemas.RoutingEvent{Status: schemas.RequestStatus_REQUEST_STATUS_OK, Model: "llama"})
	}
	a.Add(&schemas.RoutingEvent{Status: schemas.RequestStatus_REQUEST_STATUS_OK, Model: "llama", CountedAtArrival: true})
	a.Add(&schemas.RoutingEvent{Status: schemas.RequestStatus_REQUEST_STATUS_OK})
	b.Add(&schemas.RoutingEvent{Status: schemas.RequestStatus_REQUEST_STATUS_SHED, Model: "qwen-sql"})
	est := demandEstimate("c", 0, 2000, 1000, []*Demand{&a, &b}, promptFallback{})
	got := map[string]uint32{}
	var order []string
	for _, m := range est.GetModels() {
		got[m.GetModel()] = m.GetRequestCount()
		order = append(order, m.GetModel())
		if m.GetDemandRps() != float64(m.GetRequestCount())/2 {
			t.Errorf("%q: %v rps for %d requests over 2 s", m.GetModel(), m.GetDemandRps(), m.GetRequestCount())
		}
	}
	if len(order) != 3 || order[0] != "" || order[1] != "llama" || order[2] != "qwen-sql" || got[""] != 1 || got["llama"] != 3 || got["qwen-sql"] != 1 {
		t.Errorf("models %v in order %q, want 1 unnamed, 3 llama, 1 qwen-sql, sorted", got, order)
	}
	var many Demand
	for i := range maxPaneModels + 10 {
		many.Add(&schemas.RoutingEvent{Status: schemas.RequestStatus_REQUEST_STATUS_OK, Model: string(rune('A' + i))})
	}
	if len(many.models) != maxPaneModels || many.models[""] != 11 {
		t.Errorf("%d entries, %d under \"\"; want %d (63 models and \"\") and 11", len(many.models), many.models[""], maxPaneModels)
	}
	var unnamed Demand
	unnamed.Add(&schemas.RoutingEvent{Status: schemas.RequestStatus_REQUEST_STATUS_OK})
	if est := demandEstimate("c", 0, 1000, 1000, []*Demand{&unnamed}, promptFallback{}); len(est.GetModels()) != 0 {
		t.Errorf("no model named: split %v, want none", est.GetModels())
	}
}

// TestEngineEstimateCarriesLatestModels: an engine's estimate lists the
// models of its latest signal by event time, whatever order signals and
// merged panes came in.
func TestEngineEstimateCarriesLatestModels(t *testing.T) {
	var e, later Engine
	e.Add(&schemas.EngineSignal{EventTimeUnixMs: 2000, Models: []string{"a", "b"}})
	e.Add(&schemas.EngineSignal{EventTimeUnixMs: 1000, Models: []string{"old"}})
	if got := e.Estimate("e", 0, 3000, nil).GetModels(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("models %q, want [a b] (the signal of 2000)", got)
	}
	later.Add(&schemas.EngineSignal{EventTimeUnixMs: 2500, Models: []string{"c"}})
	e.Merge(&later)
	if got := e.Estimate("e", 0, 3000, nil).GetModels(); len(got) != 1 || got[0] != "c" {
		t.Errorf("after merging a later pane: models %q, want [c]", got)
	}
}
