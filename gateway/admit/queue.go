package admit

import (
	"context"
	"errors"
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

// QueueConfig tunes a Queue. Zero values take the defaults.
type QueueConfig struct {
	// MaxQueue bounds the requests waiting. Default 1024.
	MaxQueue int
	// Timeout is the longest a request waits for a slot. Default 1s.
	Timeout time.Duration
}

// rateBuckets × rateWidth is the window of the release rate.
const (
	rateBuckets = 4
	rateWidth   = 250 * time.Millisecond
)

// Queue admits up to Capacity requests at once and queues the rest, by
// priority and then arrival, for at most Timeout each. A request is
// rejected at once when the queue is full of requests of its priority or
// higher (a lower-priority one is evicted to make room otherwise), or
// when the wait it would have, its place in the queue over the rate at
// which slots were freed in the last second, exceeds half Timeout: so nearly
// every rejection is immediate, and a queued request is nearly always
// served. Safe for concurrent use.
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
}

type waiter struct {
	ch   chan error // buffered; nil error: admitted
	prio int
}

// NewQueue returns a queue without a capacity (everything admitted) until
// SetCapacity; now is its clock (nil: time.Now).
func NewQueue(cfg QueueConfig, now func() time.Time) *Queue {
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
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
	q.mu.Unlock()
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
	prio = min(max(prio, 0), Priorities-1)
	q.mu.Lock()
	if q.capacity <= 0 || (q.inflight < q.capacity && q.queued == 0) {
		q.inflight++
		q.mu.Unlock()
		return nil
	}
	ahead := 0
	for p := prio; p < Priorities; p++ {
		ahead += len(q.waiting[p])
	}
	if ahead >= q.cfg.MaxQueue {
		q.mu.Unlock()
		return ErrQueueFull
	}
	// Half the deadline: the prediction has a margin, so that a queued
	// request is nearly always served (a rejection at the deadline is a
	// slow one).
	if rate := q.rate(); rate <= 0 || float64(ahead+1)/rate > q.cfg.Timeout.Seconds()/2 {
		q.mu.Unlock()
		return ErrWait
	}
	if q.queued >= q.cfg.MaxQueue {
		q.evictLowest(prio)
	}
	w := &waiter{ch: make(chan error, 1), prio: prio}
	q.waiting[prio] = append(q.waiting[prio], w)
	q.queued++
	q.mu.Unlock()

	t := time.NewTimer(q.cfg.Timeout)
	defer t.Stop()
	var err error
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
	q.mu.Unlock()
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

// Release ends an admitted request: its slot goes to the first waiting
// request of the highest priority, if any fits.
func (q *Queue) Release() {
	q.mu.Lock()
	q.inflight--
	q.countRelease()
	q.grant()
	q.mu.Unlock()
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
			w.ch <- nil
			break
		}
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
			w.ch <- ErrEvicted
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

// rate returns the slots freed per second over the last second; q.mu
// held.
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
