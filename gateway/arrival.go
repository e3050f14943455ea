package gateway

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// A request's routing event is published when the request ends, stamped
// with its arrival (event time). The processor drops records later than
// its allowed lateness, so a long request would be missing from the
// demand of the window it arrived in. A request still running
// ArrivalRecordAfter after it arrived therefore gets an arrival record
// (RequestStatus IN_PROGRESS, the same request id and event time), which
// counts as demand at once; its final record then carries
// counted_at_arrival and counts only for latency and tokens. Arrival
// records go to their own sink (Arrivals, the routing-arrivals topic),
// so the routing-events topic keeps one record per request and a reader
// that does not know arrival records counts requests exactly.

// arrival is one request's pending arrival record.
type arrival struct {
	g     *Gateway
	state atomic.Int32 // arrivalPending, ...
	timer *time.Timer
	rec   *schemas.RoutingEvent
}

// States of an arrival record.
const (
	arrivalPending int32 = iota
	arrivalSending       // being emitted (Emit never blocks)
	arrivalSent
	arrivalDropped // the sink was full: the final record counts
	arrivalDone    // the request ended first: no arrival record
)

// startArrival arms ev's arrival record (nil when arrival records are
// off or there is no arrival sink). It copies what ev holds now.
func (g *Gateway) startArrival(ev *schemas.RoutingEvent) *arrival {
	if g.cfg.arrivalAfter < 0 || g.cfg.arrivals == nil {
		return nil
	}
	a := &arrival{g: g, rec: &schemas.RoutingEvent{
		SchemaVersion:   ev.SchemaVersion,
		RequestId:       ev.RequestId,
		Cluster:         ev.Cluster,
		SnapshotVersion: ev.SnapshotVersion,
		Status:          schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS,
		EventTimeUnixMs: ev.EventTimeUnixMs,
		Model:           ev.Model,
		Stream:          ev.Stream,
		Tenant:          ev.Tenant,
		TenantSource:    ev.TenantSource,
		ClientRequestId: ev.ClientRequestId,
		AffinityKeyHash: ev.AffinityKeyHash,
		Priority:        ev.Priority,
		Route:           ev.Route,
		GatewayId:       ev.GatewayId,
	}}
	a.timer = time.AfterFunc(g.cfg.arrivalAfter, a.send)
	return a
}

func (a *arrival) send() {
	if !a.state.CompareAndSwap(arrivalPending, arrivalSending) {
		return
	}
	if a.g.cfg.arrivals.Emit(a.rec.RequestId, a.rec) { // keyed as its final record
		a.state.Store(arrivalSent)
		return
	}
	a.g.eventDropped()
	a.state.Store(arrivalDropped)
}

// finish disarms the arrival record and marks ev counted_at_arrival when
// the record was published. Safe on a nil arrival.
func (a *arrival) finish(ev *schemas.RoutingEvent) {
	if a == nil {
		return
	}
	a.timer.Stop()
	if a.state.CompareAndSwap(arrivalPending, arrivalDone) {
		return
	}
	for a.state.Load() == arrivalSending {
		runtime.Gosched() // Emit does not block: this is brief
	}
	ev.CountedAtArrival = a.state.Load() == arrivalSent
}
