package estimate

import (
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

func signalOf(id string) *schemas.EngineSignal {
	s := validSignal()
	s.EngineId = id
	return s
}

// triedEvents returns n events in cluster "us", each a first attempt on
// "bad" that ended with status and reason, then an OK retry on "good".
func triedEvents(n int, status schemas.RequestStatus, reason schemas.FailureReason) []*schemas.RoutingEvent {
	var out []*schemas.RoutingEvent
	for range n {
		out = append(out, &schemas.RoutingEvent{
			SchemaVersion: schemas.Version, Cluster: "us", EngineId: "good", EventTimeUnixMs: 1, Attempts: 2,
			Status: schemas.RequestStatus_REQUEST_STATUS_OK, TtftMs: 80,
			Tried: []*schemas.Attempt{
				{EngineId: "bad", Status: status, FailureReason: reason},
				{EngineId: "good", Status: schemas.RequestStatus_REQUEST_STATUS_OK},
			},
		})
	}
	return out
}

func okEvents(n int, engine string) []*schemas.RoutingEvent {
	var out []*schemas.RoutingEvent
	for range n {
		out = append(out, &schemas.RoutingEvent{
			SchemaVersion: schemas.Version, Cluster: "us", EngineId: engine, EventTimeUnixMs: 1, Attempts: 1,
			Status: schemas.RequestStatus_REQUEST_STATUS_OK, TtftMs: 80,
			Tried: []*schemas.Attempt{{EngineId: engine, Status: schemas.RequestStatus_REQUEST_STATUS_OK}},
		})
	}
	return out
}

func engineEstimates(out []*schemas.Estimate) map[string]*schemas.EngineEstimate {
	m := map[string]*schemas.EngineEstimate{}
	for _, e := range out {
		if ee := e.GetEngine(); ee != nil {
			m[ee.GetEngineId()] = ee
		}
	}
	return m
}

// TestHealthFromAttempts: an engine whose signals say healthy but whose
// attempts fail by its own fault (5xx, connect, broken stream) is
// unhealthy, with no capacity; one answering 429 (busy), client errors
// or canceled attempts, or failing fewer than failMinAttempts attempts,
// keeps its signals' health; 10-50% failures degrade it.
func TestHealthFromAttempts(t *testing.T) {
	const (
		errS    = schemas.RequestStatus_REQUEST_STATUS_ERROR
		ok      = schemas.RequestStatus_REQUEST_STATUS_OK
		healthy = schemas.Health_HEALTH_HEALTHY
	)
	cases := []struct {
		name string
		evs  []*schemas.RoutingEvent
		want schemas.Health
	}{
		{"5xx", triedEvents(5, errS, schemas.FailureReason_FAILURE_REASON_STATUS_5XX), schemas.Health_HEALTH_UNHEALTHY},
		{"connect", triedEvents(6, errS, schemas.FailureReason_FAILURE_REASON_CONNECT), schemas.Health_HEALTH_UNHEALTHY},
		{"stream", triedEvents(6, errS, schemas.FailureReason_FAILURE_REASON_STREAM), schemas.Health_HEALTH_UNHEALTHY},
		{"half failing", append(triedEvents(5, errS, schemas.FailureReason_FAILURE_REASON_STATUS_5XX), okEvents(5, "bad")...), schemas.Health_HEALTH_UNHEALTHY},
		{"429 busy", triedEvents(20, errS, schemas.FailureReason_FAILURE_REASON_SATURATED), healthy},
		{"first token timeout", triedEvents(20, errS, schemas.FailureReason_FAILURE_REASON_FIRST_TOKEN_TIMEOUT), healthy},
		{"client errors", triedEvents(20, schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR, schemas.FailureReason_FAILURE_REASON_INVALID_REQUEST), healthy},
		{"canceled", append(triedEvents(20, schemas.RequestStatus_REQUEST_STATUS_CANCELED, schemas.FailureReason_FAILURE_REASON_CLIENT_CANCELED),
			triedEvents(1, errS, schemas.FailureReason_FAILURE_REASON_STATUS_5XX)...), healthy},
		{"below minimum", triedEvents(failMinAttempts-1, errS, schemas.FailureReason_FAILURE_REASON_STATUS_5XX), healthy},
		{"all ok", triedEvents(20, ok, 0), healthy},
		{"one in five", append(triedEvents(2, errS, schemas.FailureReason_FAILURE_REASON_STATUS_5XX), okEvents(8, "bad")...), schemas.Health_HEALTH_DEGRADED},
		{"one in twenty", append(triedEvents(1, errS, schemas.FailureReason_FAILURE_REASON_STATUS_5XX), okEvents(19, "bad")...), healthy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := engineEstimates(computeAll(t, []*schemas.EngineSignal{signalOf("bad"), signalOf("good")}, c.evs))
			bad, good := got["bad"], got["good"]
			if bad.GetHealth() != c.want {
				t.Errorf("bad: health %v, want %v", bad.GetHealth(), c.want)
			}
			if c.want == schemas.Health_HEALTH_UNHEALTHY && bad.GetCapacityRps() != 0 {
				t.Errorf("bad: unhealthy with capacity %v", bad.GetCapacityRps())
			}
			if good.GetHealth() != healthy {
				t.Errorf("good: health %v, want healthy", good.GetHealth())
			}
			// The same records through the processor's Decoder.
			var d Decoder
			p := NewPane()
			p.AddSignal(signalOf("bad"))
			for _, ev := range c.evs {
				dev, err := d.RoutingEvent(detMarshal(t, ev), decodeAt)
				if err != nil {
					t.Fatal(err)
				}
				p.AddRoutingEvent(dev)
			}
			w := Window{End: 10_000, Slide: 5_000, PaneStarts: []int64{0}, Panes: []*Pane{p}}
			if h := engineEstimates(Compute(w, nil))["bad"].GetHealth(); h != c.want {
				t.Errorf("bad, decoded by Decoder: health %v, want %v", h, c.want)
			}
		})
	}
}

// TestHealthFromAttemptsReadmits: the failures count in the windows that
// hold them only; the next window without attempts on the engine has its
// signals' health again (re-admission).
func TestHealthFromAttemptsReadmits(t *testing.T) {
	failing, quiet := NewPane(), NewPane()
	for _, p := range []*Pane{failing, quiet} {
		p.AddSignal(signalOf("bad"))
	}
	for _, ev := range triedEvents(10, schemas.RequestStatus_REQUEST_STATUS_ERROR, schemas.FailureReason_FAILURE_REASON_STATUS_5XX) {
		failing.AddRoutingEvent(ev)
	}
	w1 := Window{Start: 0, End: 10_000, Slide: 5_000, PaneStarts: []int64{0, 5_000}, Panes: []*Pane{failing, quiet}}
	if h := engineEstimates(Compute(w1, nil))["bad"].GetHealth(); h != schemas.Health_HEALTH_UNHEALTHY {
		t.Fatalf("window with the failures: %v, want unhealthy", h)
	}
	w2 := Window{Start: 5_000, End: 15_000, Slide: 5_000, PaneStarts: []int64{5_000}, Panes: []*Pane{quiet}}
	if h := engineEstimates(Compute(w2, nil))["bad"].GetHealth(); h != schemas.Health_HEALTH_HEALTHY {
		t.Fatalf("next window: %v, want healthy (the signals' health)", h)
	}
}

// TestTriesAbsorbExact: attempts spread over partial panes (routing
// events are keyed by request id) combine into one reader's counts, and
// survive the pane codec.
func TestTriesAbsorbExact(t *testing.T) {
	evs := append(triedEvents(3, schemas.RequestStatus_REQUEST_STATUS_ERROR, schemas.FailureReason_FAILURE_REASON_STATUS_5XX), okEvents(4, "bad")...)
	one, a, b := NewPane(), NewPane(), NewPane()
	for i, ev := range evs {
		one.AddRoutingEvent(ev)
		[]*Pane{a, b}[i%2].AddRoutingEvent(ev)
	}
	a.Absorb(b)
	c, err := DecodePane(AppendPane(nil, a))
	if err != nil {
		t.Fatal(err)
	}
	want := Tries{attempts: 7, failures: 3}
	for name, p := range map[string]*Pane{"one": one, "absorbed": a, "decoded": c, "clone": a.Clone()} {
		if got := p.tries["bad"]; got == nil || *got != want {
			t.Errorf("%s: tries %+v, want %+v", name, got, want)
		}
	}
}
