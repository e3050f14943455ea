package admit

import (
	"context"
	"errors"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// Rejections of Acquire, matched with errors.Is.
var (
	// ErrQueueFull: the queue holds MaxQueue requests of the same or a
	// higher priority, and none of another tenant with more waiting for
	// its weight.
	ErrQueueFull = errors.New("admission queue full")
	// ErrWait: the predicted wait for a slot exceeds the deadline (or
	// slots have been held that long without one freeing), so the
	// request is rejected at once instead of at the deadline.
	ErrWait = errors.New("predicted admission wait exceeds the deadline")
	// ErrTimeout: the request waited its deadline without a slot.
	ErrTimeout = errors.New("admission deadline passed")
	// ErrEvicted: a higher-priority request, or one of a tenant with
	// fewer waiting for its weight, took the queued request's place in a
	// full queue.
	ErrEvicted = errors.New("evicted from the admission queue by a higher priority or a lighter tenant")
)

// Priorities are 0 (lowest) to Priorities-1 (highest).
const Priorities = 3

// DefaultTimeout is QueueConfig.Timeout's default.
const DefaultTimeout = 8 * time.Second

// QueueConfig tunes a Queue. Zero values take the defaults.
type QueueConfig struct {
	// MaxQueue bounds the requests waiting. Default 1024.
	MaxQueue int
	// Timeout is the longest a request waits for a slot: its deadline.
	// Default 8s (an LLM request holds a slot for seconds, so a burst at
	// the fleet's capacity takes seconds to clear: a deadline of one
	// second would reject what a proxy's engine queues serve a few
	// seconds later; under sustained overload the standing-queue rule,
	// see bound, keeps admitted requests' waits to an eighth of it).
	Timeout time.Duration
	// Standing is how long the queue must go without draining before it
	// counts as standing (see bound). Default 4 × Timeout (32 s): a
	// trace replayed at 0.9× a fleet's capacity has bursts above it
	// that last 20-30 s, and with a whole Timeout here its queue stood
	// in them, queued requests for 1 s only and answered 5-10 of 800
	// with 429 whose wait would have been 2-3 s (bench/live).
	Standing time.Duration
	// NewestFirst is adaptive LIFO within a tenant's queue: while its
	// oldest waiter has waited less than this, its newest is admitted
	// first; once the oldest has waited this long, oldest first. The
	// tenant's turn among the others (its start tags) is the same either
	// way. 0: Timeout/4 (2 s); negative: always oldest first (FIFO).
	// Why: at a fleet's capacity most requests meet a queue, and oldest
	// first makes each of them wait out the whole backlog, so the median
	// request waits as long as the mean; newest first serves most at
	// once, from the slot that frees next, and the bound caps what the
	// others wait, as proxies' adaptive LIFO queues do (see
	// docs/gateway.md#overload-gatewayadmit).
	NewestFirst time.Duration
}

// rateBuckets × rateWidth is the window of the release rate: LLM
// requests hold a slot for seconds, so a fleet of a few dozen slots
// frees a handful a second, and a one-second count would often read 0.
const (
	rateBuckets = 8
	rateWidth   = time.Second
)

// Queue admits up to Capacity requests at once and queues the rest, by
// priority and, within a priority, fairly between tenants (see Request),
// for at most Timeout each. A request is rejected at once when the queue
// is full (a lower-priority waiter, else the newest waiter of the tenant
// with the most waiting for its weight, is evicted to make room when
// that is not the request's own), or when the wait it would have — its
// place in the order the queue would admit its waiters, over the rate at
// which slots were freed in the last 8 seconds (per second that any was
// taken, see rate) — exceeds ¾ of Timeout (an eighth of it while the
// queue stands, see bound), or, with no slot freed yet, when slots have
// been held that long: so nearly every rejection is immediate, a queued
// request is nearly always served, and a burst after a lull is queued
// while its first slots are still in use.
// Safe for concurrent use.
//
// Fairness is start-time fair queuing (SFQ) over one queue per tenant
// within each priority, as Kubernetes API Priority and Fairness queues
// per flow: a request queued by tenant f gets the start tag max(V,
// F_f), where V is the tag of the request last admitted from its
// priority and F_f the tag after f's previous one, and F_f becomes the
// start tag plus 1/weight; the waiter with the lowest tag is admitted
// first. So backlogged tenants are admitted in proportion to their
// weights, a tenant that asks less than its share waits behind at most
// one request of each other tenant, and a tenant alone (or with the
// others idle) is admitted as fast as slots free: the idle share is
// borrowed, and banks no credit while idle. Tenants come from the
// operator's key file, so there is a queue per tenant rather than
// shuffle sharding (which APF needs for unbounded flows).
//
// A borrower leaves headroom: while another tenant of its priority that
// holds less than its share of the slots is active (it has requests
// waiting or admitted, or arrived in the last 8 s), a tenant at or over
// its share (Capacity × its weight over the active tenants' weights)
// does not take the last free slots: two for each such tenant, at most
// a quarter of Capacity. So a light tenant's request finds a free slot
// instead of waiting for one of the flooder's to end (in an LLM fleet,
// slots free tens of milliseconds apart, more than an unloaded time to
// first token can spare); a tenant alone has every slot.
type Queue struct {
	cfg QueueConfig
	now func() time.Time

	mu       sync.Mutex
	capacity int // <= 0: no limit
	inflight int
	bands    [Priorities]band
	queued   int
	seq      uint64 // arrival order, for ties between equal tags
	relEpoch [rateBuckets]int64
	relN     [rateBuckets]int
	// relFullN counts the releases made while every slot was taken,
	// relFull the seconds every slot was, relBusy the seconds any slot
	// was, per bucket; accruedAt is when they were last accrued (see
	// rate).
	relFullN  [rateBuckets]int
	relFull   [rateBuckets]float64
	relBusy   [rateBuckets]float64
	accruedAt time.Time
	calls     []call // answers to make once q.mu is released (unlock)
	// standing is when the queue last went from empty to not empty (zero
	// while it is empty).
	standing time.Time
}

// Request is what the queue knows of a request.
type Request struct {
	// Priority is 0 (lowest) to Priorities-1 (highest), clamped.
	Priority int
	// Tenant names the request's flow: requests of one tenant and
	// priority wait in one FIFO, and the flows of a priority share its
	// admissions by Weight. "" is a flow too (requests without a tenant).
	Tenant string
	// Weight is the tenant's share relative to the other tenants of its
	// priority; <= 0 (or not finite) is 1.
	Weight float64
}

// activeFor is how long after its last arrival a tenant holds headroom
// (see Queue): the release rate's window.
const activeFor = rateBuckets * rateWidth

// band is the waiters of one priority, a FIFO per tenant.
type band struct {
	flows  map[string]*flow
	active []*flow // the flows with waiters
	n      int     // waiters
	v      float64 // virtual time: the start tag of the last admitted
}

// flow is one tenant's queue in a band.
type flow struct {
	tenant   string
	weight   float64
	finish   float64   // the tag after its last queued request
	waiting  []*waiter // by start tag (= arrival)
	inflight int       // admitted and not released
	seen     time.Time // last arrival
}

// active reports whether f counts in its band's shares at now.
func (f *flow) active(now time.Time) bool {
	return len(f.waiting) > 0 || f.inflight > 0 || now.Sub(f.seen) < activeFor
}

type waiter struct {
	ch       chan error  // Acquire's: buffered; nil error: admitted
	fn       func(error) // Offer's
	prio     int
	flow     *flow
	start    float64 // SFQ start tag
	seq      uint64
	at       time.Time // arrival
	deadline time.Time
	gone     bool // answered by Expire (while it rebuilds the flows)
}

// before reports whether w is admitted before x (same band).
func (w *waiter) before(x *waiter) bool {
	return w.start < x.start || (w.start == x.start && w.seq < x.seq)
}

// call is an answer to an Offer's waiter, made after q.mu is released.
type call struct {
	fn  func(error)
	err error
}

// NewQueue returns a queue without a capacity (everything admitted) until
// SetCapacity; now is its clock (nil: time.Now).
func NewQueue(cfg QueueConfig, now func() time.Time) *Queue {
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.NewestFirst == 0 {
		cfg.NewestFirst = cfg.Timeout / 4
	}
	if cfg.Standing <= 0 {
		cfg.Standing = 4 * cfg.Timeout
	}
	if now == nil {
		now = time.Now
	}
	return &Queue{cfg: cfg, now: now}
}

// Timeout returns the queue's deadline.
func (q *Queue) Timeout() time.Duration { return q.cfg.Timeout }

// SetCapacity sets how many requests may be admitted at once (<= 0: no
// limit) and admits waiting requests that now fit.
func (q *Queue) SetCapacity(n int) {
	q.mu.Lock()
	q.accrue()
	q.capacity = n
	q.grant()
	q.unlock()
}

// Capacity returns the capacity.
func (q *Queue) Capacity() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.capacity
}

// Len returns the requests waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued
}

// Waiting returns the requests of tenant waiting at priority prio.
func (q *Queue) Waiting(prio int, tenant string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if f := q.bands[min(max(prio, 0), Priorities-1)].flows[tenant]; f != nil {
		return len(f.waiting)
	}
	return 0
}

// InFlight returns the requests admitted and not released.
func (q *Queue) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight
}

// Acquire admits r, waiting if it must; every nil return must be paired
// with one Release(r). It returns ErrQueueFull, ErrWait, ErrTimeout or
// ErrEvicted when the request is rejected, or ctx's error when ctx ends
// first.
func (q *Queue) Acquire(ctx context.Context, r Request) error {
	q.mu.Lock()
	w, err := q.enter(r)
	if w == nil {
		q.unlock()
		return err
	}
	w.ch = make(chan error, 1)
	q.unlock()

	t := time.NewTimer(q.cfg.Timeout)
	defer t.Stop()
	select {
	case err = <-w.ch:
		return err
	case <-t.C:
		err = ErrTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.mu.Lock()
	removed := q.remove(w)
	q.unlock()
	if !removed {
		// Admitted or evicted while timing out: take that answer.
		if granted := <-w.ch; granted == nil {
			if ctx.Err() == nil {
				return nil
			}
			q.Release(r)
		} else {
			err = granted
		}
	}
	return err
}

// ErrQueued is Offer's answer for a request it queued.
var ErrQueued = errors.New("queued for admission")

// Offer is Acquire for callers that cannot block, such as a simulation
// on a virtual clock: it admits r at once (nil), rejects it at once
// (ErrQueueFull, ErrWait), or queues it (ErrQueued) and later calls done
// exactly once, outside the queue's lock: with nil when it is admitted
// (pair it with one Release(r)), or with ErrWait or ErrTimeout when Expire
// finds that it cannot be admitted by its deadline, or ErrEvicted. The
// same rules decide as for Acquire; the caller calls Expire at least as
// often as it wants deadlines kept.
func (q *Queue) Offer(r Request, done func(error)) error {
	q.mu.Lock()
	w, err := q.enter(r)
	if w == nil {
		q.unlock()
		return err
	}
	w.fn = done
	q.unlock()
	return ErrQueued
}

// enter admits a request at once (nil waiter and error), rejects it
// (nil waiter, the error), or queues it and returns its waiter; q.mu
// held. A request whose predicted wait exceeds the bound is rejected
// here, on entry, by the rule Expire applies to waiters every tick.
func (q *Queue) enter(r Request) (*waiter, error) {
	prio := min(max(r.Priority, 0), Priorities-1)
	b := &q.bands[prio]
	f := b.flow(r.Tenant, r.Weight)
	now := q.now()
	f.seen = now
	// Every waiter that fits a free slot has been admitted (grant), and
	// one of f's that does not means f does not either: so a request
	// that fits is admitted at once, queue or not.
	if q.fits(b, f, now) {
		q.accrue()
		q.inflight++
		f.inflight++
		return nil, nil
	}
	start := max(b.v, f.finish)
	ahead := b.ahead(start, f)
	for p := prio + 1; p < Priorities; p++ {
		ahead += q.bands[p].n
	}
	var vb *band // full: the band and flow whose newest waiter makes room
	var vf *flow
	if q.queued >= q.cfg.MaxQueue {
		if vb, vf = q.victim(prio, f); vf == nil {
			return nil, ErrQueueFull
		}
	}
	if rate, busy := q.rate(); rate <= 0 && busy >= q.bound(now) || rate > 0 && float64(ahead+1)/rate > q.bound(now) {
		return nil, ErrWait
	}
	if vf != nil {
		q.evict(vb, vf)
	}
	q.seq++
	w := &waiter{prio: prio, flow: f, start: start, seq: q.seq, at: now, deadline: now.Add(q.cfg.Timeout)}
	f.finish = start + 1/f.weight
	if len(f.waiting) == 0 {
		b.active = append(b.active, f)
	}
	f.waiting = append(f.waiting, w)
	b.n++
	if q.queued == 0 {
		q.standing = now
	}
	q.queued++
	return w, nil
}

// flow returns tenant's flow in b, made if new, with its weight set.
func (b *band) flow(tenant string, weight float64) *flow {
	if !(weight > 0) || math.IsInf(weight, 1) {
		weight = 1
	}
	f := b.flows[tenant]
	if f == nil {
		if b.flows == nil {
			b.flows = map[string]*flow{}
		}
		f = &flow{tenant: tenant, finish: b.v}
		b.flows[tenant] = f
	}
	f.weight = weight
	return f
}

// fits reports whether a request of f may take a free slot now: there
// is one beyond the headroom f must leave (see Queue); q.mu held.
func (q *Queue) fits(b *band, f *flow, now time.Time) bool {
	if q.capacity <= 0 {
		return true
	}
	free := q.capacity - q.inflight
	if free <= 0 {
		return false
	}
	if free > q.capacity/4 {
		return true // more than any headroom
	}
	var total float64 // the active flows' weights
	for _, g := range b.flows {
		if g == f || g.active(now) {
			total += g.weight
		}
	}
	share := func(g *flow) float64 { return float64(q.capacity) * g.weight / total }
	if float64(f.inflight+1) <= share(f) {
		return true
	}
	headroom := 0
	for _, g := range b.flows {
		if g != f && g.active(now) && float64(g.inflight) < share(g) {
			headroom += 2
		}
	}
	return free > min(headroom, q.capacity/4)
}

// ahead counts the waiters of b that would be admitted before a new
// request of f with start tag start: all of f's, and those of the other
// flows with a tag up to start (a tie goes to the earlier arrival).
func (b *band) ahead(start float64, f *flow) int {
	n := len(f.waiting)
	for _, g := range b.active {
		if g != f {
			n += sort.Search(len(g.waiting), func(i int) bool { return g.waiting[i].start > start })
		}
	}
	return n
}

// bound is the longest wait, in seconds, a request may be predicted to
// have and still be queued: ¾ of its deadline (the prediction keeps a
// margin, so that a queued request is nearly always served), or an
// eighth of it once the queue has not drained for QueueConfig.Standing. A
// queue that drains absorbs a burst, which is worth a wait of seconds
// to an LLM request (whose requests hold their slots for seconds, so a
// burst at the fleet's capacity takes seconds to clear); one that stands
// means more arrives than the engines serve, and a long wait would only
// delay every admitted request by it without serving one more (CoDel's
// standing-queue rule, as in adaptive LIFO server queues). It bounds the
// waits of requests as they arrive; those already queued keep their
// place (Expire). q.mu held.
func (q *Queue) bound(now time.Time) float64 {
	if q.queued > 0 && now.Sub(q.standing) > q.cfg.Standing {
		return q.cfg.Timeout.Seconds() / 8
	}
	return q.cfg.Timeout.Seconds() * 3 / 4
}

// Release ends an admitted request r: its slot goes to the waiting
// request of the highest priority with the lowest start tag that fits.
func (q *Queue) Release(r Request) {
	q.mu.Lock()
	q.accrue()
	q.countRelease(q.full())
	q.inflight--
	if f := q.bands[min(max(r.Priority, 0), Priorities-1)].flows[r.Tenant]; f != nil && f.inflight > 0 {
		f.inflight--
	}
	q.grant()
	q.unlock()
}

// grant admits waiting requests while they fit: from the highest
// priority with waiters, the one with the lowest start tag among the
// flows that may take a slot (fits); q.mu held.
func (q *Queue) grant() {
	if q.queued == 0 {
		return
	}
	now := q.now()
	for q.capacity <= 0 || q.inflight < q.capacity {
		var next *flow
		var b *band
		for p := Priorities - 1; p >= 0 && next == nil; p-- {
			b = &q.bands[p]
			for _, f := range b.active {
				if (next == nil || f.waiting[0].before(next.waiting[0])) && q.fits(b, f, now) {
					next = f
				}
			}
		}
		if next == nil {
			return
		}
		i := q.pick(next, now)
		w := next.waiting[i]
		b.v = next.waiting[0].start
		b.serve(next, i)
		q.queued--
		q.accrue()
		q.inflight++
		next.inflight++
		q.answer(w, nil)
	}
}

// pick returns the index of the waiter of f to admit: its newest
// while its oldest has waited less than QueueConfig.NewestFirst, else
// its oldest; q.mu held.
func (q *Queue) pick(f *flow, now time.Time) int {
	n := len(f.waiting)
	if n < 2 || q.cfg.NewestFirst < 0 || now.Sub(f.waiting[0].at) >= q.cfg.NewestFirst {
		return 0
	}
	return n - 1
}

// serve removes f's i-th waiter from b as admitted at f's first start
// tag: the waiters before it each move to the tag of the one after, so
// f's turn among the flows advances by one request whichever of its
// waiters is admitted; q.mu held.
func (b *band) serve(f *flow, i int) {
	if i > 0 {
		head := f.waiting[0].start
		for k := 0; k < i; k++ {
			f.waiting[k].start = f.waiting[k+1].start
		}
		f.waiting[i].start = head
	}
	b.take(f, i)
}

// take removes f's i-th waiter from b; q.mu held.
func (b *band) take(f *flow, i int) {
	w := f.waiting[i]
	copy(f.waiting[i:], f.waiting[i+1:])
	f.waiting[len(f.waiting)-1] = nil
	f.waiting = f.waiting[:len(f.waiting)-1]
	b.n--
	if i == len(f.waiting) && f.finish == w.start+1/f.weight {
		// Its newest left unserved: give its virtual time back.
		f.finish = w.start
	}
	if len(f.waiting) == 0 {
		b.deactivate(f)
	}
}

// deactivate takes f, which has no waiters left, out of b's active
// flows (prune forgets it later).
func (b *band) deactivate(f *flow) {
	if i := slices.Index(b.active, f); i >= 0 {
		b.active = slices.Delete(b.active, i, i+1)
	}
	f.waiting = nil
}

// prune forgets the flows that are no longer active and hold no credit
// ahead of b's virtual time: one is made again, equal, when its tenant
// next arrives. So the flows are at most the tenants active lately.
func (b *band) prune(now time.Time) {
	for t, f := range b.flows {
		if !f.active(now) && f.finish <= b.v {
			delete(b.flows, t)
		}
	}
}

// answer gives w its answer: at once on its channel (buffered), or, for
// Offer's waiters, by their callback once q.mu is released (unlock);
// q.mu held.
func (q *Queue) answer(w *waiter, err error) {
	if w.fn == nil {
		w.ch <- err
		return
	}
	q.calls = append(q.calls, call{w.fn, err})
}

// unlock releases q.mu and then makes the callbacks answer queued.
func (q *Queue) unlock() {
	calls := q.calls
	q.calls = nil
	q.mu.Unlock()
	for _, c := range calls {
		c.fn(c.err)
	}
}

// Expire rejects every waiting request whose deadline has passed (with
// ErrTimeout; Acquire's own timer does it for its waiters too) or whose
// predicted wait (its place in the order the queue admits its waiters,
// over the rate slots were freed lately) exceeds the time left to its
// deadline (with ErrWait): it would be rejected at the deadline anyway,
// and a 429 now lets its client retry elsewhere sooner. enter applies
// the same rule to a request as it arrives, with bound, at most ¾ of the
// deadline, for the time left: so a waiter has a margin of a third of
// its predicted wait, and a rejection after waiting is rare (a queue that starts
// to stand is not cut to the short bound: its waiters were queued within
// ¾ of their deadline and are served; new requests are queued only
// within the short bound). The gateway calls it every tick.
func (q *Queue) Expire() {
	q.mu.Lock()
	defer q.unlock()
	now := q.now()
	rate, _ := q.rate()
	for p := range q.bands {
		q.bands[p].prune(now)
	}
	q.grant() // a tenant that went idle leaves no headroom
	if q.queued == 0 {
		return
	}
	ahead := 0
	var order []*waiter
	for p := Priorities - 1; p >= 0; p-- {
		b := &q.bands[p]
		if b.n == 0 {
			continue
		}
		order = order[:0]
		for _, f := range b.active {
			order = append(order, f.waiting...)
		}
		slices.SortFunc(order, func(x, y *waiter) int {
			if x.before(y) {
				return -1
			}
			return 1
		})
		rejected := false
		for _, w := range order {
			left := w.deadline.Sub(now).Seconds()
			switch {
			case left <= 0:
				w.gone = true
				q.answer(w, ErrTimeout)
			case rate > 0 && float64(ahead+1)/rate > left:
				w.gone = true
				q.answer(w, ErrWait)
			default:
				ahead++
				continue
			}
			rejected = true
			q.queued--
		}
		if rejected {
			b.sweep()
		}
	}
}

// sweep takes the waiters Expire answered out of b's flows; q.mu held.
func (b *band) sweep() {
	for _, f := range slices.Clone(b.active) {
		for i := len(f.waiting) - 1; i >= 0; i-- {
			if f.waiting[i].gone {
				b.take(f, i)
			}
		}
	}
}

// victim picks the waiter a request of priority prio and flow f takes
// the place of in a full queue, as the band and flow whose newest waiter
// it is (nil flow: none): the newest of the lowest priority below prio,
// else, in f's band, the newest of the flow with the most waiters for
// its weight if that is another flow and heavier than f would be with
// the request, so that a tenant flooding the queue loses its own newest
// waiters to the others' requests; q.mu held.
func (q *Queue) victim(prio int, f *flow) (*band, *flow) {
	for p := 0; p < prio; p++ {
		b := &q.bands[p]
		if b.n == 0 {
			continue
		}
		var last *flow
		for _, g := range b.active {
			if last == nil || last.waiting[len(last.waiting)-1].before(g.waiting[len(g.waiting)-1]) {
				last = g
			}
		}
		return b, last
	}
	b := &q.bands[prio]
	var heavy *flow
	for _, g := range b.active {
		if heavy == nil || float64(len(g.waiting))/g.weight > float64(len(heavy.waiting))/heavy.weight {
			heavy = g
		}
	}
	if heavy == nil || heavy == f || float64(len(heavy.waiting))/heavy.weight <= float64(len(f.waiting)+1)/f.weight {
		return nil, nil
	}
	return b, heavy
}

// evict rejects f's newest waiter with ErrEvicted; q.mu held.
func (q *Queue) evict(b *band, f *flow) {
	w := f.waiting[len(f.waiting)-1]
	b.take(f, len(f.waiting)-1)
	q.queued--
	q.answer(w, ErrEvicted)
}

// remove takes w out of the queue, reporting whether it was there; q.mu
// held.
func (q *Queue) remove(w *waiter) bool {
	if i := slices.Index(w.flow.waiting, w); i >= 0 {
		q.bands[w.prio].take(w.flow, i)
		q.queued--
		return true
	}
	return false
}

// bucket returns the index of the rate window's bucket of epoch e
// (rateWidth units), emptied if it held an older epoch; q.mu held.
func (q *Queue) bucket(e int64) int {
	i := int(e % rateBuckets)
	if q.relEpoch[i] != e {
		q.relEpoch[i], q.relN[i], q.relFullN[i], q.relFull[i], q.relBusy[i] = e, 0, 0, 0, 0
	}
	return i
}

// full reports whether every slot is taken; q.mu held.
func (q *Queue) full() bool { return q.capacity > 0 && q.inflight >= q.capacity }

// countRelease counts one freed slot in the rate window, and whether
// every slot was taken when it freed; q.mu held.
func (q *Queue) countRelease(full bool) {
	i := q.bucket(q.now().UnixNano() / int64(rateWidth))
	q.relN[i]++
	if full {
		q.relFullN[i]++
	}
}

// accrue adds the time every slot was taken, and the time any was,
// since the last change of inflight (or capacity) to the rate window's
// buckets; call it before either changes. q.mu held.
func (q *Queue) accrue() {
	now := q.now()
	t := q.accruedAt
	q.accruedAt = now
	if t.IsZero() || !now.After(t) || q.inflight == 0 {
		return
	}
	full := q.full()
	if now.Sub(t) > activeFor {
		t = now.Add(-activeFor)
	}
	for t.Before(now) {
		e := t.UnixNano() / int64(rateWidth)
		end := time.Unix(0, (e+1)*int64(rateWidth))
		if end.After(now) {
			end = now
		}
		i, d := q.bucket(e), end.Sub(t).Seconds()
		q.relBusy[i] += d
		if full {
			q.relFull[i] += d
		}
		t = end
	}
}

// minFullReleases: the releases made while every slot was taken that
// rate needs before it trusts their rate.
const minFullReleases = 2

// rate returns the slots freed per second the queue can count on, over
// the last rateBuckets×rateWidth, and the seconds of it during which any
// slot was taken (busy): the rate at which slots freed while every slot
// was taken, once they were for a rateWidth in all and minFullReleases
// freed meanwhile, else the slots freed per second of busy time (0: none
// freed). A queue forms only when every slot is taken, and then drains
// at that rate; the slots freed per second read the arrival rate after a
// lull instead (at 0.9× a fleet's capacity they predicted waits of 6 s
// for bursts that cleared in 2.5 s, and rejected them: bench/live). Per
// second of busy time, not of the window: an idle gateway frees no slot
// because it holds none, and counting its idle seconds read the first
// burst after a lull as slots that free slowly, or (none freed yet) not
// at all, and answered it 429 though the engines served it in
// milliseconds (bench/gateway: up to a thousand 429s a run, each round
// starting after the gateway had idled). q.mu held.
func (q *Queue) rate() (rate, busy float64) {
	q.accrue()
	e := q.now().UnixNano() / int64(rateWidth)
	n, fullN, full := 0, 0, 0.0
	for i := range q.relEpoch {
		if e-q.relEpoch[i] < rateBuckets {
			n, fullN, full, busy = n+q.relN[i], fullN+q.relFullN[i], full+q.relFull[i], busy+q.relBusy[i]
		}
	}
	if full >= rateWidth.Seconds() && fullN >= minFullReleases {
		return float64(fullN) / full, busy
	}
	if n == 0 {
		return 0, busy
	}
	// Releases at one instant (a virtual clock) count over a
	// millisecond.
	return float64(n) / max(busy, time.Millisecond.Seconds()), busy
}
