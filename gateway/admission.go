package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Admission control (package admit) works in the units an LLM engine
// has: batch slots. An engine whose batch limit is known — the
// snapshot's max_concurrency (the agent's max_batch over the ready
// replicas), else its own signals' max_batch, else the requests it ran
// while others waited in its own queue (it was full: what ran is what it
// can run) — gets a limit of that many slots plus a queue of a quarter
// of them (at least one), so it is never held below its free slots and a
// slot that frees is refilled without waiting for the gateway; which
// engine a request goes to is the picker's business (prefill work,
// cached prefix, slot wait). Only an engine whose batch limit is unknown
// falls back to a limit learned from its latency (admit.Limiter), unless
// AdaptiveConcurrency(false). MaxInFlightPerEngine caps every limit. The
// picker never sends an engine more than its limit (pick.State.SetLimit).
// In front of the engines a queue admits as many requests as the limits
// of the available engines add up to and queues the rest by priority,
// rejecting with 429 + Retry-After only a request whose predicted wait
// for a slot exceeds its deadline (AdmissionQueue), at once rather than
// at the deadline, so that overload turns into fast 429s while below
// capacity nothing is rejected. Within a priority the queue is fair
// between tenants (weighted by the key file's weight): a tenant that
// floods it gets the 429s, not the others (admit.Queue).

// admission is the gateway's admission state.
type admission struct {
	q        *admit.Queue
	adaptive bool
	static   int64 // MaxInFlightPerEngine, 0: none
	cfg      admit.Config
	limiters sync.Map // *pick.State -> *engineLimit

	// The table of apply's last call, its engines' limiters and the
	// limits it set (under mu), for the next call on the same table.
	mu   sync.Mutex
	last *pick.Table
	lims []*engineLimit
	caps []engineCap

	limit *prometheus.GaugeVec   // cluster, engine
	wait  prometheus.Observer    // queued requests' wait
	rej   *prometheus.CounterVec // cluster, reason

	tenantRej *prometheus.CounterVec // cluster, tenant, reason
	unauth    prometheus.Counter

	// onHeld is told when an engine starts or stops being held below its
	// batch limit while it has no queue (degrade.heldBelow); nil: nobody.
	onHeld func(engine string, held bool)
}

func newAdmission(c *cfg, reg prometheus.Registerer) (*admission, error) {
	a := &admission{
		q:        admit.NewQueue(c.queue, c.now),
		adaptive: !c.noAdaptive,
		static:   int64(max(c.maxInFlight, 0)),
		cfg:      c.limiter,
	}
	labels := prometheus.Labels{"cluster": c.cluster}
	var errs []error
	gauge := func(name, help string, f func() float64) {
		_, err := obs.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "switchyard", Subsystem: "gateway", Name: name, Help: help, ConstLabels: labels,
		}, f))
		errs = append(errs, err)
	}
	gauge("admission_capacity", "Requests the admission queue lets in at once: the sum of the available engines' concurrency limits (0: no limit).",
		func() float64 { return float64(a.q.Capacity()) })
	gauge("admission_queued", "Requests waiting in the admission queue.", func() float64 { return float64(a.q.Len()) })
	var err error
	a.limit, err = obs.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "concurrency_limit",
		Help: "Each engine's concurrency limit: its batch limit plus a quarter (learned from its latency when the batch limit is unknown), capped by --max-in-flight-per-engine; 0: none.",
	}, []string{"cluster", "engine"}))
	errs = append(errs, err)
	h, err := obs.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "admission_wait_seconds",
		Help:    "Time requests waited for admission, admitted or rejected (0 for those admitted at once).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"cluster"}))
	errs = append(errs, err)
	a.rej, err = obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "admission_rejected_total",
		Help: "Requests rejected with 429 by admission control, by reason: queue_full, wait (predicted wait over the deadline), timeout, evicted (by a higher priority), tenant_rate, tenant_concurrency.",
	}, []string{"cluster", "reason"}))
	errs = append(errs, err)
	a.tenantRej, err = obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "tenant_rejected_total",
		Help: "Requests rejected with 429 for their tenant's own limit, by tenant and reason: tenant_rate, tenant_concurrency.",
	}, []string{"cluster", "tenant", "reason"}))
	errs = append(errs, err)
	unauth, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "unauthenticated_total",
		Help: "Requests answered 401: API keys are configured and the request had no valid one.",
	}, []string{"cluster"}))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	a.wait = h.WithLabelValues(c.cluster)
	a.unauth = unauth.WithLabelValues(c.cluster)
	for _, r := range []string{"queue_full", "wait", "timeout", "evicted", "tenant_rate", "tenant_concurrency"} { // admitReason, tenantLimited
		a.rej.WithLabelValues(c.cluster, r) // exported at 0
	}
	return a, nil
}

// engineCap is an engine's limit as apply set it, next to its state: the
// capacity is summed from them (setCapacity) without touching the table.
type engineCap struct {
	st    *pick.State
	eff   int64
	slots int // the table's batch limit for the engine, which eff follows
}

// engineLimit is an engine's limiter and, once apply has set it, its
// limit gauge: one lookup an engine per apply, not one for the limiter
// and one by labels for the gauge (with 200 gateways in one process
// they were a fifth to a third of applying a snapshot).
type engineLimit struct {
	*admit.Engine
	gauge atomic.Pointer[prometheus.Gauge]
}

// limiter returns st's limiter, created at slots (the snapshot's
// concurrency for the engine, 0: unknown).
func (a *admission) limiter(st *pick.State, slots int) *engineLimit {
	if l, ok := a.limiters.Load(st); ok {
		return l.(*engineLimit)
	}
	l, _ := a.limiters.LoadOrStore(st, &engineLimit{Engine: admit.NewEngine(a.cfg, slots)})
	return l.(*engineLimit)
}

// setGauge sets e's limit gauge (l's), looked up by its labels the first
// time only.
func (a *admission) setGauge(cluster string, e *pick.Engine, l *engineLimit, v float64) {
	g := l.gauge.Load()
	if g == nil {
		child := a.limit.WithLabelValues(cluster, e.ID)
		g = &child
		l.gauge.Store(g)
	}
	(*g).Set(v)
}

// freeSlot reports whether some available engine of t would start a
// request at once (admit.Engine.FreeSlot): the plan's shed is then not
// applied, since a refused request would leave a slot idle (the plan
// sheds when it expects capacity short; what is free now is known here).
func (a *admission) freeSlot(t *pick.Table) bool {
	for i := 0; i < t.Len(); i++ {
		e := t.Engine(i)
		if !e.State.Available() {
			continue
		}
		if l, ok := a.limiters.Load(e.State); ok && l.(*engineLimit).FreeSlot(e.Slots, e.State.InFlight()) {
			return true
		}
	}
	return false
}

// limits is the gateway's per-engine limit policy.
func (a *admission) limits() admit.Limits {
	return admit.Limits{Adaptive: a.adaptive, Static: a.static}
}

// apply sets the limits of t's engines (probing and updating the
// fallback limiters first when update: admit.Engine.Limit) and the
// queue's capacity: the sum of the available
// engines' limits (of all engines when none is available; no capacity
// when the engines have no limits).
func (a *admission) apply(cluster string, t *pick.Table, now time.Time, update bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// held[i]: engine i of t is engine i of the last table, whose limit
	// and gauge the last call set to a.caps[i].eff. Without update that
	// stays its limit: what moves it (the limiter's Update, the probe, a
	// batch limit learned from signals) is taken in at the next tick's
	// update, within 250 ms, so there is nothing to set.
	var held []engineCap
	if a.last != t {
		// A new plan lists mostly the same engines in the same order:
		// take their limiters from the last table's where they match.
		lims := make([]*engineLimit, t.Len())
		for i := range lims {
			e := t.Engine(i)
			if a.last != nil && i < len(a.caps) && a.caps[i].st == e.State {
				lims[i] = a.lims[i]
			} else {
				lims[i] = a.limiter(e.State, e.Slots)
			}
		}
		a.lims = lims
		if !update {
			held = a.caps
		}
		a.caps = make([]engineCap, 0, len(lims))
	} else {
		if !update {
			held = slices.Clone(a.caps)
		}
		a.caps = a.caps[:0]
	}
	var lowered []int // a.caps indexes whose limit fell (lower)
	for i, l := range a.lims {
		e := t.Engine(i)
		if i < len(held) && held[i].st == e.State && held[i].slots == e.Slots {
			a.caps = append(a.caps, held[i])
			continue
		}
		ld := admit.Load{InFlight: e.State.InFlight(), Queued: a.q.Len()}
		eff, slots := l.Limit(a.limits(), e.Slots, ld, now, update)
		if update {
			if held, changed := l.Held(slots, eff, ld.InFlight); changed && a.onHeld != nil {
				a.onHeld(e.ID, held)
			}
		}
		if prev := e.State.Limit(); eff > 0 && (prev == 0 || eff < prev) {
			lowered = append(lowered, len(a.caps))
		} else {
			e.State.SetLimit(eff)
		}
		a.setGauge(cluster, e, l, float64(eff))
		a.caps = append(a.caps, engineCap{e.State, eff, e.Slots})
	}
	a.last = t
	a.setCapacity()
	a.lower(lowered)
}

// lower sets the lowered limits of a.caps[k] for k in lowered, after the
// queue's capacity (a.mu held). The queue may have admitted requests
// under the old limits that have not picked an engine yet; the picker
// sheds a request that finds every engine at its limit, so a lowered
// limit leaves room for the admitted requests beyond the new capacity
// (never above the old limit): each still finds an engine, and the queue
// admits none until they end, when the next update lowers it the rest
// of the way. Set at once, a falling latency-learned limit answered 429
// (shed, capacity) to requests the queue had just let in (bench/gateway:
// about one in 8,000 at 128 connections).
func (a *admission) lower(lowered []int) {
	var excess int64
	if c := a.q.Capacity(); c > 0 {
		excess = max(int64(a.q.InFlight()-c), 0)
	}
	for _, k := range lowered {
		c := a.caps[k]
		lim := c.eff + excess
		if prev := c.st.Limit(); prev > 0 {
			lim = min(lim, prev)
		}
		c.st.SetLimit(lim)
	}
}

// refresh is apply(cluster, t, now, false) when apply's last call was on
// t (else it calls it): limits move only at apply's update (every
// tick), so the limits and gauges are where that call set them, and
// only the capacity, which follows the engines' availability,
// is computed again. A snapshot that keeps the table so costs no lock
// and no gauge an engine.
func (a *admission) refresh(cluster string, t *pick.Table, now time.Time) {
	a.mu.Lock()
	if a.last != t {
		a.mu.Unlock()
		a.apply(cluster, t, now, false)
		return
	}
	defer a.mu.Unlock()
	a.setCapacity()
}

// setCapacity sets the queue's capacity from the limits apply set on
// the last table's engines (a.caps, under a.mu).
func (a *admission) setCapacity() {
	var c admit.Capacity
	for _, x := range a.caps {
		c.Add(x.eff, x.st.Available())
	}
	a.q.SetCapacity(c.Total())
}

// sample feeds one attempt's outcome on e to its limiter (before the
// attempt's Done: in flight includes it); began is the attempt's start,
// rtt the network round trip.
func (a *admission) sample(e *pick.Engine, res *attemptResult, began, end time.Time, rtt time.Duration) {
	if !a.adaptive {
		return
	}
	a.limiter(e.State, e.Slots).Observe(e.Slots, admit.Attempt{
		Started:      began,
		Refused:      res.saturated || res.failReason == "first_token_timeout" || res.failReason == "idle_timeout",
		FirstToken:   res.firstToken,
		TTFT:         res.ttft - res.queued - rtt,
		Whole:        res.complete && !res.sse,
		Duration:     end.Sub(began) - rtt,
		OutputTokens: int(res.usage.OutputTokens),
		InFlight:     e.State.InFlight(),
	})
}

// noteSignal learns st's batch limit from one of its engine signals
// (admit.BatchFromSignal).
func (a *admission) noteSignal(st *pick.State, s *schemas.EngineSignal, down bool) {
	a.limiter(st, 0).NoteSignal(s, down)
}

// admitReason maps an admit rejection to its metric reason.
func admitReason(err error) string {
	switch {
	case errors.Is(err, admit.ErrQueueFull):
		return "queue_full"
	case errors.Is(err, admit.ErrWait):
		return "wait"
	case errors.Is(err, admit.ErrTimeout):
		return "timeout"
	case errors.Is(err, admit.ErrEvicted):
		return "evicted"
	}
	return "other"
}

// expire rejects the queued requests whose predicted wait now exceeds
// their deadline (admit.Queue.Expire); acquire counts them.
func (a *admission) expire() { a.q.Expire() }

// acquire admits a request of priority prio from tenant ("": none) of
// the given weight: nil, or the rejection (a context error when the
// client left while queued).
func (a *admission) acquire(ctx context.Context, cluster string, prio int, tenant string, weight float64, now func() time.Time) error {
	t0 := now()
	err := a.q.Acquire(ctx, admit.Request{Priority: prio, Tenant: tenant, Weight: weight})
	a.wait.Observe(now().Sub(t0).Seconds())
	if err != nil && ctx.Err() == nil {
		a.rej.WithLabelValues(cluster, admitReason(err)).Inc()
	}
	return err
}

// release ends a request acquire admitted.
func (a *admission) release(prio int, tenant string) {
	a.q.Release(admit.Request{Priority: prio, Tenant: tenant})
}
