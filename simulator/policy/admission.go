package policy

import (
	"errors"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/gateway/shed"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/des"
)

// The simulated gateway's admission is the gateway's (gateway/admit, as
// gateway/admission.go and gateway/proxy.go use it), on the virtual
// clock: every engine of a gateway's table gets a concurrency limit in
// batch slots (admit.Limits: the snapshot's max_concurrency, else the
// batch limit the engine's signals show, admit.BatchFromSignal; an
// admit.Limiter's limit only while neither is known), set on the
// gateway's pick state so that the picker never exceeds it; in front, an
// admit.Queue whose capacity is the sum of the available engines'
// limits admits a request's first attempt at once, queues it (des.Held,
// then dispatched when a slot frees) or rejects it with a 429 (shed,
// recorded as SHED_ADMISSION). An admitted request holds its queue slot
// across its retries and releases it when it ends. Limits are set and
// the queue's deadlines kept (Expire) at every tick, after snapshot and
// health changes, as the gateway does every admission tick.
//
// The gateway's limiters learn only from samples that gateway/admission.go
// takes from an attempt's result (admission.sample, unexported in
// package gateway): here they are not fed, so an engine whose batch
// limit is not known yet keeps the limiter's initial limit.

// gatewayPriority is the priority of the simulated requests: the live
// gateway's default class (no tenant, no priority header).
const gatewayPriority = int(shed.Normal)

// admission is one simulated gateway's admission state.
type admission struct {
	q *admit.Queue
	// lims[e] is engine e's limiter, made when e is first in a table
	// (at the table's batch limit for it, as the gateway makes it).
	lims []*admit.Limiter
}

func newAdmission(engines int, now func() time.Time) *admission {
	return &admission{q: admit.NewQueue(admit.QueueConfig{}, now), lims: make([]*admit.Limiter, engines)}
}

// admissionLimits is the gateway's default: limits from batch slots,
// learned (adaptive) only where those are unknown, no static cap.
var admissionLimits = admit.Limits{Adaptive: true}

// clock is the virtual clock as the gateway's code reads time.
func (p *switchyard) clock() time.Time { return time.UnixMilli(simEpochMs).Add(p.now) }

// setLimits sets the limits of g's table's engines and its queue's
// capacity: the sum of the available engines' limits, or of all of them
// when none is available, as gateway/admission.go's apply and
// setCapacity do (package gateway, which the simulator cannot import).
func (p *switchyard) setLimits(g *gateway) {
	if g.table == nil {
		return
	}
	now := p.clock()
	var sum, all int64
	for i := range g.table.Len() {
		e := g.table.Engine(i)
		w := g.toWorld[i]
		l := g.adm.lims[w]
		if l == nil {
			l = admit.NewLimiter(admit.Config{}, e.Slots)
			g.adm.lims[w] = l
		}
		slots := int64(e.Slots)
		if slots <= 0 {
			slots = p.batch[w]
		}
		learned := 0
		if slots <= 0 {
			learned = l.Update(now)
		}
		lim := admissionLimits.Limit(slots, learned)
		e.State.SetLimit(lim)
		all += lim
		if e.State.Available() {
			sum += lim
		}
	}
	if sum == 0 {
		sum = all
	}
	g.adm.q.SetCapacity(int(sum))
}

// noteBatch learns engine e's batch limit from its signal, as every
// gateway does from the signals it follows.
func (p *switchyard) noteBatch(e int, s *schemas.EngineSignal) {
	down := s.GetHealth() == schemas.Health_HEALTH_UNHEALTHY ||
		(s.GetHealth() != schemas.Health_HEALTH_UNSPECIFIED && s.GetReadyReplicas() == 0)
	p.batch[e] = admit.BatchFromSignal(p.batch[e], s, down)
}

// admit offers r's first attempt to its gateway's queue: the engine to
// send it to, des.Held while it waits, or -1 when it is rejected or no
// engine can take it.
func (p *switchyard) admit(g *gateway, r *des.Request) int {
	err := g.adm.q.Offer(gatewayPriority, func(err error) { p.admitted(g, r, err) })
	switch {
	case err == nil:
		return p.place(g, r, nil)
	case errors.Is(err, admit.ErrQueued):
		return des.Held
	}
	p.record(r, -1, schemas.RequestStatus_REQUEST_STATUS_SHED, schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION, des.Outcome{})
	return -1
}

// admitted answers a queued request: admitted (err nil), it is placed
// now; rejected, it is shed.
func (p *switchyard) admitted(g *gateway, r *des.Request, err error) {
	if err != nil {
		p.record(r, -1, schemas.RequestStatus_REQUEST_STATUS_SHED, schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION, des.Outcome{})
		p.w.Reject(r)
		return
	}
	if e := p.place(g, r, nil); e >= 0 {
		p.w.Dispatch(r, e)
		return
	}
	p.w.Reject(r)
}
