package admit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// feed gives l n samples of latency with inflight requests, then Updates.
func feed(l *Limiter, now time.Time, k Kind, latency time.Duration, inflight int64, n int) int {
	for range n {
		l.Sample(k, latency, now, inflight)
	}
	return l.Update(now)
}

func TestLimiterGrowsWhileLatencyHolds(t *testing.T) {
	l := NewLimiter(Config{}, 0)
	now := time.Unix(1000, 0)
	prev := l.Limit()
	// Slow start: x1.5 per window while the limit is in use.
	for i := range 5 {
		now = now.Add(250 * time.Millisecond)
		got := feed(l, now, TTFT, 100*time.Millisecond, int64(prev), 100)
		if got <= prev {
			t.Fatalf("window %d: limit %d -> %d with flat latency at the limit", i, prev, got)
		}
		prev = got
	}
	if prev < 32*5 {
		t.Fatalf("slow start reached only %d after 5 windows from 32", prev)
	}
}

func TestLimiterHoldsWhenNotInUse(t *testing.T) {
	l := NewLimiter(Config{Initial: 64}, 0)
	now := time.Unix(1000, 0)
	for range 10 {
		now = now.Add(250 * time.Millisecond)
		if got := feed(l, now, TTFT, 100*time.Millisecond, 10, 100); got != 64 {
			t.Fatalf("limit moved to %d with 10 of 64 in flight", got)
		}
	}
}

func TestLimiterShrinksWhenLatencyRises(t *testing.T) {
	l := NewLimiter(Config{Initial: 100}, 0)
	now := time.Unix(1000, 0)
	feed(l, now, TTFT, 100*time.Millisecond, 100, 100) // baseline 100 ms
	// 2x the baseline is within Tolerance 2: no decrease.
	now = now.Add(250 * time.Millisecond)
	before := l.Limit()
	if got := feed(l, now, TTFT, 200*time.Millisecond, int64(before), 100); got < before {
		t.Fatalf("limit fell %d -> %d at 2x the baseline", before, got)
	}
	// 8x: the gradient is clamped at 0.5.
	now = now.Add(250 * time.Millisecond)
	before = l.Limit()
	got := feed(l, now, TTFT, 800*time.Millisecond, int64(before), 100)
	if want := before / 2; got != want {
		t.Fatalf("limit %d -> %d at 8x the baseline, want %d", before, got, want)
	}
	// After the decrease, growth is additive (sqrt), not slow start.
	now = now.Add(250 * time.Millisecond)
	before = l.Limit()
	got = feed(l, now, TTFT, 100*time.Millisecond, int64(before), 100)
	if got <= before || got > before+12 {
		t.Fatalf("limit %d -> %d after a decrease, want +sqrt", before, got)
	}
}

func TestLimiterKindsHaveTheirOwnBaseline(t *testing.T) {
	l := NewLimiter(Config{Initial: 100}, 0)
	now := time.Unix(1000, 0)
	for range 100 {
		l.Sample(TTFT, 100*time.Millisecond, now, 100)
		l.Sample(PerToken, 20*time.Millisecond, now, 100)
	}
	l.Update(now)
	before := l.Limit()
	now = now.Add(250 * time.Millisecond)
	// Whole responses are slower per token than streamed TTFTs are long,
	// but each kind is compared with its own baseline: no decrease.
	for range 100 {
		l.Sample(TTFT, 110*time.Millisecond, now, int64(before))
		l.Sample(PerToken, 22*time.Millisecond, now, int64(before))
	}
	if got := l.Update(now); got < before {
		t.Fatalf("limit fell %d -> %d with both kinds near their baselines", before, got)
	}
}

func TestLimiterBacksOffOnDrops(t *testing.T) {
	l := NewLimiter(Config{Initial: 100, Min: 5}, 0)
	l.Drop(time.Unix(1, 0))
	if got := l.Update(time.Unix(1, 0)); got != 80 {
		t.Fatalf("limit after a drop %d, want 80", got)
	}
	for i := range 50 {
		at := time.Unix(int64(2+i), 0)
		l.Drop(at)
		l.Update(at)
	}
	if got := l.Limit(); got != 5 {
		t.Fatalf("limit after many drops %d, want the minimum 5", got)
	}
}

// TestLimiterWaitsForFreshSamples: after the limit changed, samples and
// drops of requests that started before do not move it again.
func TestLimiterWaitsForFreshSamples(t *testing.T) {
	l := NewLimiter(Config{Initial: 100}, 0)
	t0 := time.Unix(1000, 0)
	feed(l, t0, TTFT, 100*time.Millisecond, 100, 100) // baseline; grows
	t1 := t0.Add(250 * time.Millisecond)
	stale := t0.Add(-time.Millisecond)
	for range 100 {
		l.Sample(TTFT, time.Second, stale, 150) // started before the change
	}
	l.Drop(stale)
	before := l.Limit()
	if got := l.Update(t1); got != before {
		t.Fatalf("stale samples moved the limit %d -> %d", before, got)
	}
	for range 100 {
		l.Sample(TTFT, time.Second, t1, 150) // started after: counts
	}
	if got := l.Update(t1.Add(250 * time.Millisecond)); got >= before {
		t.Fatalf("fresh slow samples: limit %d -> %d", before, got)
	}
}

func TestLimiterInitialFromSnapshot(t *testing.T) {
	if got := NewLimiter(Config{}, 256).Limit(); got != 256 {
		t.Fatalf("initial %d, want 256", got)
	}
	if got := NewLimiter(Config{Max: 100}, 256).Limit(); got != 100 {
		t.Fatalf("initial %d, want Max 100", got)
	}
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// waitLen polls until n requests wait in q (or fails after 5 s).
func waitLen(t *testing.T, q *Queue, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue length %d, want %d", q.Len(), n)
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

// warm makes q see perSecond slot releases per second over its rate
// window, with some slot taken all along and none of them while every
// slot was.
func warm(q *Queue, c *clock, perSecond int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := c.now().UnixNano() / int64(rateWidth)
	for k := range int64(rateBuckets) {
		i := q.bucket(e - k)
		q.relN[i] += perSecond
		q.relBusy[i] += rateWidth.Seconds()
	}
}

// TestQueueExpireRejectsWaitersThatCannotMakeTheirDeadline: a queued
// request whose predicted wait exceeds the time left to its deadline
// (here because slots free far slower, once every one is taken, than
// they did when it was queued) is rejected with ErrWait at the next
// Expire, not at the deadline; one that can still make it stays queued.
func TestQueueExpireRejectsWaitersThatCannotMakeTheirDeadline(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 6 * time.Second}, c.now)
	warm(q, c, 2) // 2 slots freed a second: half a second per place
	q.SetCapacity(2)
	for range 2 {
		if err := q.Offer(Request{Priority: 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got []error
	done := func(err error) { got = append(got, err) }
	for i := range 6 { // places 1-6: 0.5 to 3 s predicted, within ¾ of the 6 s deadline
		if err := q.Offer(Request{Priority: 1}, done); !errors.Is(err, ErrQueued) {
			t.Fatalf("offer %d: %v, want ErrQueued", i, err)
		}
	}
	q.Expire()
	if q.Len() != 6 {
		t.Fatalf("Expire with 6 s left rejected: queue length %d, want 6", q.Len())
	}
	// Both slots free after 3 s taken: 2/3 of a slot a second while
	// full. The first two waiters take them; of the other four, with 3 s
	// left, places 1 and 2 (1.5 and 3 s) make it and 3 and 4 (4.5 and
	// 6 s) do not.
	c.set(time.Unix(1003, 0))
	q.Release(Request{Priority: 1})
	q.Release(Request{Priority: 1})
	if len(got) != 2 || got[0] != nil || got[1] != nil {
		t.Fatalf("answers %v after two slots freed, want the first two waiters admitted", got)
	}
	got = got[:0]
	q.Expire()
	if q.Len() != 2 || len(got) != 2 {
		t.Fatalf("queue length %d, answers %v; want 2 kept and 2 rejected", q.Len(), got)
	}
	for _, err := range got {
		if !errors.Is(err, ErrWait) {
			t.Fatalf("answer %v, want ErrWait", err)
		}
	}
}

// TestQueueRejectsAtOnceWhenSlotsAreHeldTheBoundWithoutARelease: with
// every slot taken for ¾ of the deadline and none freed, a request over
// capacity is rejected at once (ErrWait); slots taken for a moment only
// (a burst after a lull, nothing freed yet because nothing ran) queue it.
func TestQueueRejectsAtOnceWhenSlotsAreHeldTheBoundWithoutARelease(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 8 * time.Second}, c.now)
	q.SetCapacity(2)
	for range 2 {
		if err := q.Offer(Request{Priority: 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.set(time.Unix(1000, 10e6)) // taken for 10 ms
	if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrQueued) {
		t.Fatalf("over capacity after 10 ms held: %v, want ErrQueued", err)
	}
	c.set(time.Unix(1006, 0)) // 6 s held, none freed: ¾ of the deadline
	if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrWait) {
		t.Fatalf("over capacity after 6 s held without a release: %v, want ErrWait", err)
	}
}

// TestQueueBurstAfterLullIsQueued: slots freed fast (100 a second for 2
// s), then the gateway idled 10 s (past the rate window): a burst of 40
// requests on 8 slots is queued, not rejected, and once the first slots
// free (8 in 20 ms) the next arrivals are predicted by the rate of busy
// time (400 a second), not by 8 releases over the 8 s window (1 a
// second: a 33 s wait, which rejected them).
func TestQueueBurstAfterLullIsQueued(t *testing.T) {
	base := time.Unix(1000, 0)
	c := &clock{t: base}
	q := NewQueue(QueueConfig{Timeout: 8 * time.Second}, c.now)
	q.SetCapacity(8)
	for i := range 200 { // 100 a second, one at a time
		c.set(base.Add(time.Duration(i) * 10 * time.Millisecond))
		if err := q.Offer(Request{}, nil); err != nil {
			t.Fatal(err)
		}
		c.set(base.Add(time.Duration(i)*10*time.Millisecond + 5*time.Millisecond))
		q.Release(Request{})
	}
	burst := base.Add(12 * time.Second)
	c.set(burst)
	var answers []error
	done := func(err error) { answers = append(answers, err) }
	for i := range 40 {
		err := q.Offer(Request{}, done)
		if want := i >= 8; want != errors.Is(err, ErrQueued) || !want && err != nil {
			t.Fatalf("burst request %d: %v", i, err)
		}
	}
	c.set(burst.Add(20 * time.Millisecond))
	for range 8 {
		q.Release(Request{})
	}
	if err := q.Offer(Request{}, done); !errors.Is(err, ErrQueued) {
		t.Fatalf("request after the first releases: %v, want ErrQueued", err)
	}
	q.Expire()
	for _, err := range answers {
		if err != nil {
			t.Fatalf("a queued burst request was answered %v", err)
		}
	}
	if q.Len() != 25 {
		t.Fatalf("queue length %d, want 25 (33 queued, 8 admitted)", q.Len())
	}
}

func TestQueueOrder(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: time.Hour}, c.now)
	warm(q, c, 100)
	q.SetCapacity(1)
	if err := q.Acquire(context.Background(), Request{Priority: 1}); err != nil {
		t.Fatal(err)
	}
	admitted := make([]chan struct{}, 3)
	for i, p := range []int{0, 2, 1} {
		admitted[i] = make(chan struct{})
		go func() {
			if err := q.Acquire(context.Background(), Request{Priority: p}); err != nil {
				t.Errorf("priority %d: %v", p, err)
			}
			close(admitted[i])
		}()
		waitLen(t, q, i+1)
	}
	// High (index 1), then normal (2), then low (0).
	for _, i := range []int{1, 2, 0} {
		q.Release(Request{Priority: 1})
		<-admitted[i]
	}
	q.Release(Request{Priority: 1})
	if q.InFlight() != 0 || q.Len() != 0 {
		t.Fatalf("in flight %d, queued %d", q.InFlight(), q.Len())
	}
}

func TestQueueRejectsPredictedLongWait(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 160 * time.Millisecond}, c.now)
	warm(q, c, 20) // 20 slots/s: 50 ms per place in the queue
	q.SetCapacity(1)
	if err := q.Acquire(context.Background(), Request{Priority: 1}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i := range 2 { // places 1 and 2: 50 and 100 ms
		go func() { errs <- q.Acquire(context.Background(), Request{Priority: 1}) }()
		waitLen(t, q, i+1)
	}
	if err := q.Acquire(context.Background(), Request{Priority: 1}); !errors.Is(err, ErrWait) {
		t.Fatalf("third in line (150 ms predicted, ¾ of the deadline 120 ms): %v", err)
	}
	// A high-priority request goes ahead of both: admitted to the queue.
	high := make(chan error, 1)
	go func() { high <- q.Acquire(context.Background(), Request{Priority: 2}) }()
	waitLen(t, q, 3)
	q.Release(Request{Priority: 1})
	if err := <-high; err != nil {
		t.Fatal(err)
	}
	q.Release(Request{Priority: 1})
	q.Release(Request{Priority: 1})
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueueTimeoutAndFull(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 20 * time.Millisecond, MaxQueue: 1}, c.now)
	warm(q, c, 1000)
	q.SetCapacity(1)
	if err := q.Acquire(context.Background(), Request{Priority: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Acquire(context.Background(), Request{Priority: 0}) }()
	waitLen(t, q, 1)
	if err := q.Acquire(context.Background(), Request{Priority: 0}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second waiter in a queue of 1: %v", err)
	}
	// A higher priority evicts the low one.
	hi := make(chan error, 1)
	go func() { hi <- q.Acquire(context.Background(), Request{Priority: 2}) }()
	if err := <-done; !errors.Is(err, ErrEvicted) {
		t.Fatalf("low waiter: %v, want ErrEvicted", err)
	}
	if err := <-hi; !errors.Is(err, ErrTimeout) {
		t.Fatalf("high waiter without a release: %v, want ErrTimeout", err)
	}
	if q.Len() != 0 || q.InFlight() != 1 {
		t.Fatalf("queued %d in flight %d", q.Len(), q.InFlight())
	}
}

func TestQueueCanceled(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: time.Hour}, c.now)
	warm(q, c, 1000)
	q.SetCapacity(1)
	if err := q.Acquire(context.Background(), Request{Priority: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Acquire(ctx, Request{Priority: 1}) }()
	waitLen(t, q, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	q.Release(Request{Priority: 1})
	if q.InFlight() != 0 || q.Len() != 0 {
		t.Fatalf("in flight %d, queued %d", q.InFlight(), q.Len())
	}
}

func TestQueueCapacityRaiseAdmits(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: time.Hour}, c.now)
	warm(q, c, 1000)
	q.SetCapacity(1)
	if err := q.Acquire(context.Background(), Request{Priority: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Acquire(context.Background(), Request{Priority: 1}) }()
	waitLen(t, q, 1)
	q.SetCapacity(2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOfferAnswersQueuedRequestsByCallback: Offer admits at once while
// there is room, queues beyond it and answers by callback outside the
// lock (the callback may call the queue again): nil when a Release
// frees a slot, ErrTimeout from Expire once the deadline passed.
func TestOfferAnswersQueuedRequestsByCallback(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 10 * time.Second}, c.now)
	warm(q, c, 1)
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatalf("first offer: %v", err)
	}
	var got []error
	done := func(err error) {
		got = append(got, err)
		_ = q.Len() // takes the lock: answered outside it
	}
	for i := range 2 {
		if err := q.Offer(Request{Priority: 1}, done); !errors.Is(err, ErrQueued) {
			t.Fatalf("offer %d: %v, want ErrQueued", i, err)
		}
	}
	q.Release(Request{Priority: 1})
	if len(got) != 1 || got[0] != nil {
		t.Fatalf("after a release: %v, want one admission", got)
	}
	c.set(c.now().Add(11 * time.Second))
	q.Expire()
	if len(got) != 2 || !errors.Is(got[1], ErrTimeout) {
		t.Fatalf("after the deadline: %v, want ErrTimeout", got)
	}
	if q.Len() != 0 || q.InFlight() != 1 {
		t.Fatalf("queued %d, in flight %d", q.Len(), q.InFlight())
	}
}

// TestQueueStandingQueueShortensTheWait: a queue that drains lets a
// request wait up to ¾ of its deadline (a burst is worth seconds); once
// it has not drained for QueueConfig.Standing (more arrives than is
// served), a new request is queued only for an eighth of it; the
// waiters queued before keep their places (rejecting them now would
// make them 429s that waited), and Expire rejects only those that can
// no longer make their deadline.
func TestQueueStandingQueueShortensTheWait(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 4 * time.Second, Standing: 4 * time.Second}, c.now)
	warm(q, c, 2) // 2 slots/s: half a second per place in the queue
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var got []error
	done := func(err error) { got = append(got, err) }
	if err := q.Offer(Request{Priority: 1}, done); !errors.Is(err, ErrQueued) {
		t.Fatalf("place 1 in a fresh queue: %v, want ErrQueued", err)
	}
	c.set(c.now().Add(3 * time.Second)) // not drained for 3 s: not yet standing
	for i := range 2 {                  // places 2 and 3: within ¾ of the deadline (3 s)
		if err := q.Offer(Request{Priority: 1}, done); !errors.Is(err, ErrQueued) {
			t.Fatalf("offer %d after 3 s: %v, want ErrQueued", i, err)
		}
	}
	c.set(c.now().Add(1100 * time.Millisecond)) // standing for more than Standing
	warm(q, c, 2)                               // slots still free at 3 a second over the window
	if err := q.Offer(Request{Priority: 1}, done); !errors.Is(err, ErrWait) {
		t.Fatalf("place 4 in a standing queue: %v, want ErrWait (an eighth of the deadline is 0.5 s)", err)
	}
	q.Expire() // place 1: past its deadline; 2 and 3: 0.5 and 1 s, within their 2.9 s left
	if q.Len() != 2 || len(got) != 1 || !errors.Is(got[0], ErrTimeout) {
		t.Fatalf("after Expire in a standing queue: %d waiting, answers %v; want place 1 timed out, 2 and 3 kept", q.Len(), got)
	}
	q.Release(Request{Priority: 1}) // admits place 2
	q.Release(Request{Priority: 1}) // and 3: the queue drained
	c.set(c.now().Add(time.Second))
	if err := q.Offer(Request{Priority: 1}, done); !errors.Is(err, ErrQueued) {
		t.Fatalf("after the queue drained: %v, want ErrQueued", err)
	}
}

// TestQueueBurstAfterLullPredictsTheDrainRate: the predicted wait of a
// burst that arrives after a lull is its place over the rate at which
// slots freed while every one was taken, not over the rate requests
// happened to arrive at during the lull. Ten slots, each request holding
// one for 2 s: 3 s at 10 arrivals a second (the slots all taken, 12
// freed in the 3.1 s they were: 3.9 a second, counted from when they
// filled), then one arrival every 2 s; then a burst. Its 20th waiter is
// predicted to wait 5.2 s and is queued (deadline 8 s, bound 6 s; it
// drains at 5 a second, in 4 s); over the slots freed per second in the
// last 8 s (2.75) it was predicted to wait 7.3 s and rejected.
func TestQueueBurstAfterLullPredictsTheDrainRate(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 8 * time.Second}, c.now)
	q.SetCapacity(10)
	const hold = 2 * time.Second
	var ends []time.Time // when each admitted request frees its slot
	admitted := func(error) { ends = append(ends, c.now().Add(hold)) }
	step := func(to time.Time) { // advance to 'to', freeing slots on time
		for {
			slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
			if len(ends) == 0 || ends[0].After(to) {
				break
			}
			c.set(ends[0])
			ends = ends[1:]
			q.Release(Request{Priority: 1})
		}
		c.set(to)
	}
	arrive := func() {
		switch err := q.Offer(Request{Priority: 1}, admitted); {
		case err == nil:
			admitted(nil)
		case errors.Is(err, ErrQueued), errors.Is(err, ErrWait):
			// (the first second's arrivals find no release counted yet)
		default:
			t.Fatalf("at %v: %v", c.now().Sub(time.Unix(1000, 0)), err)
		}
	}
	start := time.Unix(1000, 0)
	for k := range 30 { // 3 s at 10 a second
		step(start.Add(time.Duration(k) * 100 * time.Millisecond))
		arrive()
	}
	for k := range 3 { // then one every 2 s
		step(start.Add(3*time.Second + time.Duration(k)*2*time.Second))
		arrive()
	}
	step(start.Add(8 * time.Second))
	if q.Len() != 0 {
		t.Fatalf("%d still queued after the lull", q.Len())
	}
	for q.InFlight() < 10 { // the burst takes the free slots
		arrive()
	}
	for i := range 20 {
		if err := q.Offer(Request{Priority: 1}, admitted); !errors.Is(err, ErrQueued) {
			t.Fatalf("burst's waiter %d: %v, want ErrQueued", i+1, err)
		}
	}
	q.Expire()
	if q.Len() != 20 {
		t.Fatalf("Expire rejected waiters that drain in 4 s: %d left of 20", q.Len())
	}
}
