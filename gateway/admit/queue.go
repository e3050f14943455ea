package admit

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// Rejections of Acquire, matched with errors.Is.
var (
	// ErrQueueFull: the queue holds MaxQueue requests of the same or a
	// higher priority.
	ErrQueueFull = errors.New("admission queue full")
	// ErrWait: the predicted wait for a slot exceeds the deadline (or
	// no slot has been freed lately), so the request is rejected at once
	// instead of at the deadline.
	ErrWait = errors.New("predicted admission wait exceeds the deadline")
	// ErrTimeout: the request waited its deadline without a slot.
	ErrTimeout = errors.New("admission deadline passed")
	// ErrEvicted: a higher-priority request took the queued request's
	// place in a full queue.
	ErrEvicted = errors.New("evicted from the admission queue by a higher priority")
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
}

// rateBuckets × rateWidth is the window of the release rate: LLM
// requests hold a slot for seconds, so a fleet of a few dozen slots
// frees a handful a second, and a one-second count would often read 0.
const (
	rateBuckets = 8
	rateWidth   = time.Second
)

// Queue admits up to Capacity requests at once and queues the rest, by
// priority and then arrival, for at most Timeout each. A request is
// rejected at once when the queue is full of requests of its priority or
// higher (a lower-priority one is evicted to make room otherwise), or
// when the wait it would have, its place in the queue over the rate at
// which slots were freed in the last 8 seconds, exceeds half Timeout (an
// eighth of it while the queue stands, see bound): so nearly every
// rejection is immediate, and a queued request is nearly always served.
// Safe for concurrent use.
type Queue struct {
	cfg QueueConfig
	now func() time.Time

	mu       sync.Mutex
	capacity int // <= 0: no limit
	inflight int
	waiting  [Priorities][]*waiter // FIFO per priority
	queued   int
	relEpoch [rateBuckets]int64
	relN     [rateBuckets]int
	calls    []call // answers to make once q.mu is released (unlock)
	// standing is when the queue last went from empty to not empty (zero
	// while it is empty).
	standing time.Time
}

type waiter struct {
	ch       chan error  // Acquire's: buffered; nil error: admitted
	fn       func(error) // Offer's
	prio     int
	deadline time.Time
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

// InFlight returns the requests admitted and not released.
func (q *Queue) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight
}

// Acquire admits a request of priority prio (clamped to 0..Priorities-1),
// waiting if it must; every nil return must be paired with one Release.
// It returns ErrQueueFull, ErrWait, ErrTimeout or ErrEvicted when the
// request is rejected, or ctx's error when ctx ends first.
func (q *Queue) Acquire(ctx context.Context, prio int) error {
	q.mu.Lock()
	w, err := q.enter(prio)
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
			q.Release()
		} else {
			err = granted
		}
	}
	return err
}

// ErrQueued is Offer's answer for a request it queued.
var ErrQueued = errors.New("queued for admission")

// Offer is Acquire for callers that cannot block, such as a simulation
// on a virtual clock: it admits a request of priority prio at once (nil),
// rejects it at once (ErrQueueFull, ErrWait), or queues it (ErrQueued)
// and later calls done exactly once, outside the queue's lock: with nil
// when it is admitted (pair it with one Release), or with ErrWait or
// ErrTimeout when Expire finds that it cannot be admitted by its
// deadline, or ErrEvicted. The same rules decide as for Acquire; the
// caller calls Expire at least as often as it wants deadlines kept.
func (q *Queue) Offer(prio int, done func(error)) error {
	q.mu.Lock()
	w, err := q.enter(prio)
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
// held.
func (q *Queue) enter(prio int) (*waiter, error) {
	prio = min(max(prio, 0), Priorities-1)
	if q.capacity <= 0 || (q.inflight < q.capacity && q.queued == 0) {
		q.inflight++
		return nil, nil
	}
	ahead := 0
	for p := prio; p < Priorities; p++ {
		ahead += len(q.waiting[p])
	}
	if ahead >= q.cfg.MaxQueue {
		return nil, ErrQueueFull
	}
	now := q.now()
	if rate := q.rate(); rate <= 0 || float64(ahead+1)/rate > q.bound(now) {
		return nil, ErrWait
	}
	if q.queued >= q.cfg.MaxQueue {
		q.evictLowest(prio)
	}
	w := &waiter{prio: prio, deadline: now.Add(q.cfg.Timeout)}
	q.waiting[prio] = append(q.waiting[prio], w)
	if q.queued == 0 {
		q.standing = now
	}
	q.queued++
	return w, nil
}

// bound is the longest wait, in seconds, a request may be predicted to
// have and still be queued: half its deadline (the prediction has a
// margin, so that a queued request is nearly always served), or an
// eighth of it once the queue has not drained for a whole deadline. A
// queue that drains absorbs a burst, which is worth a wait of seconds
// to an LLM request (whose requests hold their slots for seconds, so a
// burst at the fleet's capacity takes seconds to clear); one that stands
// means more arrives than the engines serve, and a long wait would only
// delay every admitted request by it without serving one more (CoDel's
// standing-queue rule, as in adaptive LIFO server queues). q.mu held.
func (q *Queue) bound(now time.Time) float64 {
	if q.queued > 0 && now.Sub(q.standing) > q.cfg.Timeout {
		return q.cfg.Timeout.Seconds() / 8
	}
	return q.cfg.Timeout.Seconds() / 2
}

// Release ends an admitted request: its slot goes to the first waiting
// request of the highest priority, if any fits.
func (q *Queue) Release() {
	q.mu.Lock()
	q.inflight--
	q.countRelease()
	q.grant()
	q.unlock()
}

// grant admits waiting requests while they fit; q.mu held.
func (q *Queue) grant() {
	for q.queued > 0 && (q.capacity <= 0 || q.inflight < q.capacity) {
		for p := Priorities - 1; p >= 0; p-- {
			if len(q.waiting[p]) == 0 {
				continue
			}
			w := q.waiting[p][0]
			q.waiting[p][0] = nil
			q.waiting[p] = q.waiting[p][1:]
			q.queued--
			q.inflight++
			q.answer(w, nil)
			break
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
// predicted wait (its place among the waiting requests of its priority
// or higher over the rate slots were freed lately) exceeds the time left
// to its deadline (with ErrWait): it would be rejected at the deadline
// anyway, and a 429 now lets its client retry elsewhere sooner. The
// gateway calls it every tick.
func (q *Queue) Expire() {
	q.mu.Lock()
	defer q.unlock()
	if q.queued == 0 {
		return
	}
	now, rate := q.now(), q.rate()
	bound := math.Inf(1)
	if b := q.bound(now); b < q.cfg.Timeout.Seconds()/2 {
		bound = b // a standing queue: drain it to the short bound
	}
	ahead := 0
	for p := Priorities - 1; p >= 0; p-- {
		ws := q.waiting[p][:0]
		for _, w := range q.waiting[p] {
			left := min(w.deadline.Sub(now).Seconds(), bound)
			switch {
			case left <= 0:
				q.queued--
				q.answer(w, ErrTimeout)
				continue
			case rate > 0 && float64(ahead+1)/rate > left:
				q.queued--
				q.answer(w, ErrWait)
				continue
			}
			ws = append(ws, w)
			ahead++
		}
		clear(q.waiting[p][len(ws):])
		q.waiting[p] = ws
	}
}

// evictLowest rejects the newest waiter of the lowest priority below
// prio, if any; q.mu held.
func (q *Queue) evictLowest(prio int) {
	for p := 0; p < prio; p++ {
		if n := len(q.waiting[p]); n > 0 {
			w := q.waiting[p][n-1]
			q.waiting[p][n-1] = nil
			q.waiting[p] = q.waiting[p][:n-1]
			q.queued--
			q.answer(w, ErrEvicted)
			return
		}
	}
}

// remove takes w out of the queue, reporting whether it was there; q.mu
// held.
func (q *Queue) remove(w *waiter) bool {
	ws := q.waiting[w.prio]
	for i, x := range ws {
		if x == w {
			copy(ws[i:], ws[i+1:])
			ws[len(ws)-1] = nil
			q.waiting[w.prio] = ws[:len(ws)-1]
			q.queued--
			return true
		}
	}
	return false
}

// countRelease counts one freed slot in the rate window; q.mu held.
func (q *Queue) countRelease() {
	e := q.now().UnixNano() / int64(rateWidth)
	i := int(e % rateBuckets)
	if q.relEpoch[i] != e {
		q.relEpoch[i], q.relN[i] = e, 0
	}
	q.relN[i]++
}

// rate returns the slots freed per second over the last
// rateBuckets×rateWidth; q.mu held.
func (q *Queue) rate() float64 {
	e := q.now().UnixNano() / int64(rateWidth)
	n := 0
	for i := range q.relEpoch {
		if e-q.relEpoch[i] < rateBuckets {
			n += q.relN[i]
		}
	}
	return float64(n) / (rateBuckets * rateWidth).Seconds()
}
