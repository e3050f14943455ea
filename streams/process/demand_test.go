package process

import (
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// TestDemandCountsOfferedUnderRejection feeds the processor core the
// records a gateway writes when it answers 40% of 10.5 requests a second
// with 429 (admission and snapshot sheds, written at once) and serves the
// rest slowly (an arrival record 2 s after each start, the final record
// with counted_at_arrival 20-30 s later; arrival records on their own
// topic), with malformed requests and a
// tenant over its quota besides; every window inside the load must
// estimate the offered 10.5 requests a second, 40% of them rejected. A
// processor that counted only served requests would say 6.3, one that
// counted arrival and final records both 16.8.
func TestDemandCountsOfferedUnderRejection(t *testing.T) {
	const (
		rps      = 10.5
		loadSecs = 120
	)
	topics := streams.TopicsFor("demand")
	spec := window.Spec{Size: 30 * time.Second, Slide: 10 * time.Second, AllowedLateness: 5 * time.Second}
	core, err := NewCore(topics, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	type produced struct {
		at time.Time
		ev *schemas.RoutingEvent
	}
	var out []produced
	emit := func(at time.Time, ev *schemas.RoutingEvent) { out = append(out, produced{at, ev}) }
	n := int(rps * loadSecs)
	for i := range n {
		start := from.Add(time.Duration(float64(i) / rps * float64(time.Second)))
		ev := &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: fmt.Sprintf("r%d", i), Cluster: "us",
			EventTimeUnixMs: start.UnixMilli(), Model: "m"}
		switch i % 5 {
		case 0, 1: // 40% answered 429 at once
			ev.Status, ev.HttpStatus, ev.Decision = schemas.RequestStatus_REQUEST_STATUS_SHED, 429, schemas.DecisionReason_DECISION_REASON_SHED
			ev.FailureReason = schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION
			if i%10 == 1 {
				ev.FailureReason = schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT
			}
			done := start.Add(3 * time.Millisecond)
			ev.CompletionTimeUnixMs = done.UnixMilli()
			emit(done, ev)
		default: // served in 20-30 s: an arrival record at 2 s
			arrival := &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: ev.RequestId, Cluster: "us",
				EventTimeUnixMs: ev.EventTimeUnixMs, Status: schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS}
			emit(start.Add(2*time.Second), arrival)
			done := start.Add(20*time.Second + time.Duration(i%10)*time.Second)
			ev.Status, ev.HttpStatus, ev.EngineId, ev.Attempts = schemas.RequestStatus_REQUEST_STATUS_OK, 200, "e1", 1
			ev.CountedAtArrival, ev.CompletionTimeUnixMs, ev.TtftMs, ev.E2EMs = true, done.UnixMilli(), 15000, 25000
			ev.PromptTokens, ev.OutputTokens = 500, 100
			emit(done, ev)
		}
		// Not demand: a malformed request and a tenant over its quota.
		if i%7 == 0 {
			emit(start, &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: fmt.Sprintf("bad%d", i), Cluster: "us",
				EventTimeUnixMs: start.UnixMilli(), CompletionTimeUnixMs: start.UnixMilli(), HttpStatus: 400,
				Status: schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR, FailureReason: schemas.FailureReason_FAILURE_REASON_INVALID_REQUEST})
			emit(start, &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: fmt.Sprintf("quota%d", i), Cluster: "us",
				EventTimeUnixMs: start.UnixMilli(), CompletionTimeUnixMs: start.UnixMilli(), HttpStatus: 429,
				Status: schemas.RequestStatus_REQUEST_STATUS_SHED, FailureReason: schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT})
		}
	}
	// One partition per topic (arrival records on theirs), in produce
	// order, and a signal a second that keeps
	// event time moving after the load (as agents do).
	for s := range loadSecs + 90 {
		at := from.Add(time.Duration(s) * time.Second)
		emit(at, nil)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].at.Before(out[b].at) })
	var offEv, offArr, offSig int64
	for _, p := range out {
		var rec *kgo.Record
		if p.ev == nil {
			b, err := proto.Marshal(&schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "e1", GpuClass: "h100",
				EventTimeUnixMs: p.at.UnixMilli(), ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY, IntervalSeconds: 1})
			if err != nil {
				t.Fatal(err)
			}
			rec = &kgo.Record{Topic: topics.Signals, Offset: offSig, Key: []byte("e1"), Value: b, Timestamp: p.at}
			offSig++
		} else {
			b, err := proto.Marshal(p.ev)
			if err != nil {
				t.Fatal(err)
			}
			rec = &kgo.Record{Topic: topics.RoutingEvents, Offset: offEv, Key: []byte(p.ev.RequestId), Value: b, Timestamp: p.at}
			if p.ev.Status == schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS {
				rec.Topic, rec.Offset = topics.RoutingArrivals, offArr
				offArr++
			} else {
				offEv++
			}
		}
		if o, reason := core.Handle(rec); o != Accepted {
			t.Fatalf("record at %v: outcome %d %s", p.at, o, reason)
		}
	}
	checked := 0
	loadEnd := from.Add(loadSecs * time.Second).UnixMilli()
	for _, f := range core.Fire() {
		for _, e := range f.Estimates {
			d := e.GetDemand()
			if d == nil || d.GetWindowStartUnixMs() < from.UnixMilli() || d.GetWindowEndUnixMs() > loadEnd {
				continue
			}
			checked++
			if math.Abs(d.GetDemandRps()-rps) > 0.1 {
				t.Errorf("window ending %v: demand %.2f rps (%d requests), want the offered %.1f", time.UnixMilli(d.GetWindowEndUnixMs()).UTC(), d.GetDemandRps(), d.GetRequestCount(), rps)
			}
			ratio := float64(d.GetRejectedCount()) / float64(d.GetRequestCount())
			snap := float64(d.GetShedSnapshotCount()) / float64(d.GetRequestCount())
			adm := float64(d.GetShedAdmissionCount()) / float64(d.GetRequestCount())
			if math.Abs(ratio-0.4) > 0.01 || math.Abs(snap-0.1) > 0.01 || math.Abs(adm-0.3) > 0.01 {
				t.Errorf("window ending %v: rejected %.3f (snapshot %.3f, admission %.3f), want 0.4 (0.1, 0.3)", time.UnixMilli(d.GetWindowEndUnixMs()).UTC(), ratio, snap, adm)
			}
		}
	}
	if checked < 8 {
		t.Fatalf("%d demand estimates inside the load, want at least 8", checked)
	}
}
