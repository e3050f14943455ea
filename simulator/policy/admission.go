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
// clock: every engine of a gateway's table has an admit.Engine, which
// sets its concurrency limit in batch slots (the larger of the
// snapshot's max_concurrency and the batch limit the engine's signals
// show, probed upwards when it binds on an engine without a queue; a
// limit learned by its admit.Limiter, fed each attempt's outcome, only
// while no batch limit is known), set on the gateway's pick state so
// that the picker never exceeds it; in front, an admit.Queue whose
// capacity (admit.Capacity) is the sum of the available engines' limits
// admits a request's first attempt at once, queues it (des.Held, then
// dispatched when a slot frees) or rejects it with a 429 (shed, recorded
// as SHED_ADMISSION). An admitted request holds its queue slot across its
// retries and releases it when it ends. Limits are set and the queue's
// deadlines kept (Expire) at every tick, after snapshot and health
// changes, as the gateway does every admission tick.

// gatewayPriority is the priority of the simulated requests: the live
// gateway's default class (no tenant, no priority header).
const gatewayPriority = int(shed.Normal)

// admission is one simulated gateway's admission state.
type admission struct {
	q *admit.Queue
	// engs[e] is engine e's admission state, made when e is first in a
	// table or signals (at the table's batch limit for it, as the
	// gateway makes it).
	engs []*admit.Engine
}

func newAdmission(engines int, now func() time.Time) *admission {
	return &admission{q: admit.NewQueue(admit.QueueConfig{}, now), engs: make([]*admit.Engine, engines)}
}

// release ends an admitted request: its queue slot goes to the next.
func (a *admission) release() { a.q.Release(admit.Request{Priority: gatewayPriority}) }

// engine returns engine e's admission state, made at slots.
func (a *admission) engine(e, slots int) *admit.Engine {
	if a.engs[e] == nil {
		a.engs[e] = admit.NewEngine(admit.Config{}, slots)
	}
	return a.engs[e]
}

// admissionLimits is the gateway's default: limits from batch slots,
// learned (adaptive) only where those are unknown, no static cap.
var admissionLimits = admit.Limits{Adaptive: true}

// clock is the virtual clock as the gateway's code reads time.
func (p *switchyard) clock() time.Time { return time.UnixMilli(simEpochMs).Add(p.now) }

// setLimits sets the limits of g's table's engines and its queue's
// capacity, as gateway/admission.go's apply does at every tick.
func (p *switchyard) setLimits(g *gateway) {
	if g.table == nil {
		return
	}
	now := p.clock()
	var c admit.Capacity
	queued := g.adm.q.Len()
	for i := range g.table.Len() {
		e := g.table.Engine(i)
		ld := admit.Load{InFlight: e.State.InFlight(), Queued: queued}
		lim, _ := g.adm.engine(g.toWorld[i], e.Slots).Limit(admissionLimits, e.Slots, ld, now, true)
		e.State.SetLimit(lim)
		c.Add(lim, e.State.Available())
	}
	g.adm.q.SetCapacity(c.Total())
}

// noteSignal gives engine e's signal to every gateway's admission, as
// every gateway follows the signals.
func (p *switchyard) noteSignal(e int, s *schemas.EngineSignal) {
	for _, g := range p.gw {
		g.adm.engine(e, 0).NoteSignal(s, admit.SignalDown(s))
	}
}

// feedAdmission feeds an attempt's outcome on engine e to its admission
// state, as gateway/admission.go's sample does.
func (p *switchyard) feedAdmission(g *gateway, e, slots int, r *des.Request, o des.Outcome) {
	g.adm.engine(e, slots).Observe(slots, admit.Attempt{
		Started:      p.clock().Add(-o.E2E),
		Refused:      !o.OK,
		FirstToken:   o.OK && !r.W.NonStreaming,
		TTFT:         o.EngineTTFT,
		Whole:        o.OK && r.W.NonStreaming,
		Duration:     max(o.E2E-p.w.RTT[r.Cluster][e], 0),
		OutputTokens: o.OutputTokens,
		InFlight:     g.states[e].InFlight() + 1,
	})
}

// admit offers r's first attempt to its gateway's queue: the engine to
// send it to, des.Held while it waits, or -1 when it is rejected or no
// engine can take it.
func (p *switchyard) admit(g *gateway, r *des.Request) int {
	err := g.adm.q.Offer(admit.Request{Priority: gatewayPriority}, func(err error) { p.admitted(g, r, err) })
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
