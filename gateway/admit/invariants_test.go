package admit

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Behavioural tests for rules of the package that the other tests did
// not pin (issue 26: each was found by a mutant of bench/mutation that
// survived them; see docs/testing.md).

// TestLimiterDefaultTolerances: with the default Config, a window whose
// mean TTFT is 2.4 times its baseline shrinks the limit by 2/2.4 (the
// default Tolerance is 2), and one whose mean time per output token is
// 1.5 times its baseline by 1.3/1.5 (TokenTolerance 1.3).
func TestLimiterDefaultTolerances(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    Kind
		base time.Duration
		mean time.Duration
		want int
	}{
		{"TTFT at 2.4x", TTFT, 100 * time.Millisecond, 240 * time.Millisecond, 83},
		{"TTFT at 1.9x", TTFT, 100 * time.Millisecond, 190 * time.Millisecond, 100},
		{"per token at 1.5x", PerToken, 20 * time.Millisecond, 30 * time.Millisecond, 86},
		{"per token at 1.25x", PerToken, 20 * time.Millisecond, 25 * time.Millisecond, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLimiter(Config{}, 100)
			now := time.Unix(1000, 0)
			// Nothing in flight: the limit does not grow, only the
			// baseline is set.
			if got := feed(l, now, tc.k, tc.base, 0, 100); got != 100 {
				t.Fatalf("baseline window moved the limit to %d", got)
			}
			if got := feed(l, now.Add(250*time.Millisecond), tc.k, tc.mean, 0, 100); got != tc.want {
				t.Fatalf("limit %d after a window at %v over a %v baseline, want %d", got, tc.mean, tc.base, tc.want)
			}
		})
	}
}

// TestLimiterBaselineIsTheLowestWindowMean: the baseline is the lowest
// window mean of the last BaselineWindow, also when a lower mean follows
// a higher one within the same bucket of the windowed minimum.
func TestLimiterBaselineIsTheLowestWindowMean(t *testing.T) {
	l := NewLimiter(Config{}, 100)
	now := time.Unix(1000, 0)
	feed(l, now, TTFT, 300*time.Millisecond, 0, 100)
	feed(l, now.Add(250*time.Millisecond), TTFT, 100*time.Millisecond, 0, 100)
	// 240 ms is 2.4 times the lower mean (but within 2 times the first).
	if got := feed(l, now.Add(500*time.Millisecond), TTFT, 240*time.Millisecond, 0, 100); got != 83 {
		t.Fatalf("limit %d at 2.4x the lowest window mean, want 83 (baseline 100 ms)", got)
	}
}

// TestLimiterBaselineBucketIsReusedAfterTheWindow: a window mean that
// lands in a bucket of the windowed minimum last used a whole
// BaselineWindow ago replaces the old value, even when it is higher: it
// is the baseline the next window is compared with.
func TestLimiterBaselineBucketIsReusedAfterTheWindow(t *testing.T) {
	l := NewLimiter(Config{}, 100)
	t0 := time.Unix(1000, 0)
	feed(l, t0, TTFT, 100*time.Millisecond, 0, 100)
	// 30 s later: the same bucket, the old baseline forgotten.
	if got := feed(l, t0.Add(30*time.Second), TTFT, 300*time.Millisecond, 0, 100); got != 100 {
		t.Fatalf("a window mean after the old baseline expired moved the limit to %d", got)
	}
	// 700 ms is 2.33 times 300 ms: gradient 0.857.
	if got := feed(l, t0.Add(30250*time.Millisecond), TTFT, 700*time.Millisecond, 0, 100); got != 85 {
		t.Fatalf("limit %d at 2.33x the baseline of 300 ms, want 85", got)
	}
}

// TestLimiterDefaultBaselineWindowIs30s: a window mean stays the
// baseline for the default BaselineWindow of 30 s (at the resolution of
// its six buckets) and is forgotten after it.
func TestLimiterDefaultBaselineWindowIs30s(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		after time.Duration
		want  int
	}{
		{29900 * time.Millisecond, 66}, // 3x the remembered baseline: gradient 2/3
		{35 * time.Second, 100},        // forgotten: the slow window is its own baseline
	} {
		l := NewLimiter(Config{}, 100)
		feed(l, t0, TTFT, 100*time.Millisecond, 0, 100)
		if got := feed(l, t0.Add(tc.after), TTFT, 300*time.Millisecond, 0, 100); got != tc.want {
			t.Fatalf("a 100 ms baseline, then %v later a 300 ms window: limit %d, want %d", tc.after, got, tc.want)
		}
	}
}

// TestLimiterWindowNeedsAQuarterOfTheLimitInSamples: a window moves the
// limit only with at least MinSamples samples and a quarter of the limit
// (the first requests to end after a change are the ones that did not
// queue); a smaller window carries over to the next Update.
func TestLimiterWindowNeedsAQuarterOfTheLimitInSamples(t *testing.T) {
	l := NewLimiter(Config{}, 100)
	now := time.Unix(1000, 0)
	feed(l, now, TTFT, 100*time.Millisecond, 0, 100) // baseline 100 ms
	now = now.Add(250 * time.Millisecond)
	if got := feed(l, now, TTFT, 800*time.Millisecond, 0, 24); got != 100 {
		t.Fatalf("24 slow samples (a quarter of the limit is 25) moved the limit to %d", got)
	}
	now = now.Add(250 * time.Millisecond)
	if got := feed(l, now, TTFT, 800*time.Millisecond, 0, 1); got != 50 {
		t.Fatalf("the 25th slow sample, carried over: limit %d, want 50", got)
	}
}

// TestObservePerTokenOfWholeResponses: a whole response's sample is its
// engine time over its output tokens plus one, so responses of different
// lengths at the same speed sample the same, and one with no output
// token is a sample too.
func TestObservePerTokenOfWholeResponses(t *testing.T) {
	e := NewEngine(Config{}, 100)
	now := time.Unix(1000, 0)
	for _, tokens := range []int{1, 9, 0} { // the first window is the baseline
		for range 50 {
			e.Observe(0, Attempt{Started: now, Whole: true, OutputTokens: tokens,
				Duration: time.Duration(tokens+1) * 20 * time.Millisecond, InFlight: 1})
		}
		if got := e.Limiter().Update(now); got != 100 {
			t.Fatalf("responses of %d tokens at 20 ms per token plus one moved the limit to %d", tokens, got)
		}
		now = now.Add(250 * time.Millisecond)
	}
}

// TestEngineProbesByAQuarterOfItsBatchLimit: a probe raises the batch
// limit by a quarter of the known one, by at least one slot.
func TestEngineProbesByAQuarterOfItsBatchLimit(t *testing.T) {
	l := Limits{Adaptive: true}
	for _, tc := range []struct {
		batch uint32
		want  []int64
	}{
		{12, []int64{15, 18, 21}},
		{2, []int64{3, 4, 5}},
	} {
		e := NewEngine(Config{}, 0)
		e.NoteSignal(signal(tc.batch, 1, float64(tc.batch), 0), false)
		var got []int64
		for range tc.want {
			limit, _ := e.Limit(l, 0, Load{}, time.Unix(0, 0), false)
			_, slots := e.Limit(l, 0, Load{InFlight: limit, Queued: 3}, time.Unix(0, 0), true)
			got = append(got, slots)
			e.NoteSignal(signal(tc.batch, 1, float64(tc.batch), 0), false)
		}
		for k := range tc.want {
			if got[k] != tc.want[k] {
				t.Fatalf("batch limit %d: slots over the probes %v, want %v", tc.batch, got, tc.want)
			}
		}
	}
}

// TestEngineProbeEndsWithOneRequestWaiting: one request waiting in the
// engine's own queue is enough to show its limit: probing ends and the
// batch limit is its signals' again.
func TestEngineProbeEndsWithOneRequestWaiting(t *testing.T) {
	l := Limits{Adaptive: true}
	e := NewEngine(Config{}, 0)
	e.NoteSignal(signal(8, 1, 8, 0), false)
	limit, _ := e.Limit(l, 0, Load{}, time.Unix(0, 0), false)
	if _, slots := e.Limit(l, 0, Load{InFlight: limit, Queued: 3}, time.Unix(0, 0), true); slots != 10 {
		t.Fatalf("probe: %d slots, want 10", slots)
	}
	e.NoteSignal(signal(8, 1, 8, 1), false)
	if got := e.Slots(0); got != 8 {
		t.Fatalf("after a signal with one request waiting: %d slots, want 8", got)
	}
}

// TestEngineSlotsUnknownWhenThePlanDropsItsLimit: probing raises a
// known batch limit; when the plan no longer gives the engine one and
// its signals never did, its batch limit is unknown again (its limiter
// takes over), whatever probing added.
func TestEngineSlotsUnknownWhenThePlanDropsItsLimit(t *testing.T) {
	l := Limits{Adaptive: true}
	e := NewEngine(Config{}, 0)
	e.NoteSignal(signal(0, 1, 4, 0), false) // no max_batch, nobody waiting
	if _, slots := e.Limit(l, 8, Load{InFlight: 10, Queued: 3}, time.Unix(0, 0), true); slots != 10 {
		t.Fatalf("probe on the plan's 8 slots: %d slots, want 10", slots)
	}
	if got := e.Slots(0); got != 0 {
		t.Fatalf("plan without a batch limit: %d slots, want 0 (unknown)", got)
	}
}

// TestEngineFreeSlot: a request would start at once on an engine whose
// batch limit is known, this gateway's requests there are below it, and
// whose last signal showed nobody waiting; not before its first signal.
func TestEngineFreeSlot(t *testing.T) {
	e := NewEngine(Config{}, 0)
	if e.FreeSlot(8, 0) {
		t.Fatal("a free slot before any signal")
	}
	e.NoteSignal(signal(0, 1, 2, 0), false) // batch limit unknown to the signals
	for _, tc := range []struct {
		snapshot int
		inFlight int64
		want     bool
	}{
		{8, 0, true},
		{8, 7, true},
		{8, 8, false},
		{1, 0, true},
		{1, 1, false},
		{0, 0, false}, // no batch limit known
	} {
		if got := e.FreeSlot(tc.snapshot, tc.inFlight); got != tc.want {
			t.Fatalf("one idle signal, snapshot %d, %d in flight: free slot %v, want %v", tc.snapshot, tc.inFlight, got, tc.want)
		}
	}
	e.NoteSignal(signal(16, 1, 3, 0), false)
	if !e.FreeSlot(0, 15) {
		t.Fatal("no free slot with 15 of the signals' 16 in flight")
	}
	e.NoteSignal(signal(16, 1, 3, 1), false)
	if e.FreeSlot(0, 0) {
		t.Fatal("a free slot while a request waits in the engine's own queue")
	}
}

// TestBatchFromSignalOneRunning: an engine seen running one request
// while others wait in its queue has a batch limit of one.
func TestBatchFromSignalOneRunning(t *testing.T) {
	if got := BatchFromSignal(0, signal(0, 1, 1, 2), false); got != 1 {
		t.Fatalf("one running, two waiting: batch limit %d, want 1", got)
	}
}

// TestSignalDown: a signal says the engine is down when it is unhealthy,
// or its health is known and no replica is ready; a signal without a
// health says nothing by its replica count.
func TestSignalDown(t *testing.T) {
	for _, tc := range []struct {
		health schemas.Health
		ready  uint32
		want   bool
	}{
		{schemas.Health_HEALTH_UNHEALTHY, 2, true},
		{schemas.Health_HEALTH_HEALTHY, 0, true},
		{schemas.Health_HEALTH_HEALTHY, 1, false},
		{schemas.Health_HEALTH_UNSPECIFIED, 0, false},
		{schemas.Health_HEALTH_UNSPECIFIED, 1, false},
	} {
		s := &schemas.EngineSignal{Health: tc.health, ReadyReplicas: tc.ready}
		if got := SignalDown(s); got != tc.want {
			t.Fatalf("health %v, %d ready: down %v, want %v", tc.health, tc.ready, got, tc.want)
		}
	}
}

// TestQueueDefaults: a zero QueueConfig has DefaultTimeout as its
// deadline.
func TestQueueDefaults(t *testing.T) {
	if got := NewQueue(QueueConfig{}, nil).Timeout(); got != DefaultTimeout {
		t.Fatalf("timeout %v, want %v", got, DefaultTimeout)
	}
}

// TestQueuePriorityIsClamped: a request above the highest priority is of
// the highest (admitted before a waiter of a lower one), and its Release
// frees its slot.
func TestQueuePriorityIsClamped(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{}, c.now)
	warm(q, c, 2)
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, p := range []int{1, 9} {
		if err := q.Offer(Request{Priority: p}, func(err error) {
			if err == nil {
				got = append(got, p)
			}
		}); !errors.Is(err, ErrQueued) {
			t.Fatalf("priority %d: %v, want ErrQueued", p, err)
		}
	}
	q.Release(Request{Priority: 1})
	q.Release(Request{Priority: 9})
	if len(got) != 2 || got[0] != 9 || got[1] != 1 {
		t.Fatalf("admitted priorities %v, want [9 1]", got)
	}
}

// TestQueueWaitCountsEveryHigherPriority: a request's predicted wait
// counts the waiters of every priority above its own.
func TestQueueWaitCountsEveryHigherPriority(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: 4 * time.Second}, c.now)
	warm(q, c, 2) // half a second per place; the bound is 3 s (place 6)
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 2}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrQueued) {
			t.Fatalf("priority 1, place %d: %v, want ErrQueued", i+1, err)
		}
	}
	if err := q.Offer(Request{Priority: 0}, func(error) {}); !errors.Is(err, ErrWait) {
		t.Fatalf("priority 0 behind 6 of priority 1 (3.5 s): %v, want ErrWait", err)
	}
}

// TestQueueStandingQueueBoundIsAnEighthOfTheDeadline: in a standing
// queue a request is queued only while its predicted wait is within an
// eighth of its deadline.
func TestQueueStandingQueueBoundIsAnEighthOfTheDeadline(t *testing.T) {
	c := &clock{t: time.Unix(1000, 100_000_000)}
	q := NewQueue(QueueConfig{Timeout: 7500 * time.Millisecond, Standing: time.Millisecond}, c.now)
	warm(q, c, 9) // 9 slots freed a second
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrQueued) {
		t.Fatal(err)
	}
	c.set(c.now().Add(2 * time.Millisecond)) // standing
	// An eighth of 7.5 s is 0.94 s: places up to 8 (0.89 s) are queued,
	// the 9th (1.0 s) is not.
	for place := 2; place <= 8; place++ {
		if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrQueued) {
			t.Fatalf("place %d: %v, want ErrQueued", place, err)
		}
	}
	if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrWait) {
		t.Fatalf("place 9 in a standing queue: %v, want ErrWait", err)
	}
}

// TestQueueStandsAfterFourTimesTheDeadlineByDefault: a queue, even of
// one waiter, counts as standing once it has not drained for the default
// Standing, 4 × Timeout, and only then shortens the bound.
func TestQueueStandsAfterFourTimesTheDeadlineByDefault(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		want  error
	}{
		{7900 * time.Millisecond, ErrQueued},
		{8100 * time.Millisecond, ErrWait},
	} {
		t0 := time.Unix(1000, 0)
		c := &clock{t: t0}
		q := NewQueue(QueueConfig{Timeout: 2 * time.Second}, c.now) // bound 1.5 s; standing: 0.25 s
		q.SetCapacity(1)
		if err := q.Offer(Request{Priority: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrQueued) {
			t.Fatal(err)
		}
		c.set(t0.Add(tc.after))
		warm(q, c, 4) // with the slot held all along: 2 freed a second
		if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, tc.want) {
			t.Fatalf("place 2 (1 s away) after %v without draining: %v, want %v", tc.after, err, tc.want)
		}
	}
}

// TestQueueThatDrainedIsNotStanding: a queue that stood and then drained
// gives the next request to wait the long bound (¾ of its deadline)
// again, as a fresh queue does.
func TestQueueThatDrainedIsNotStanding(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &clock{t: t0}
	q := NewQueue(QueueConfig{Timeout: 4 * time.Second, Standing: time.Second}, c.now)
	warm(q, c, 1) // a second per place; the bounds are 3 s and 0.5 s
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrQueued) {
		t.Fatalf("place 1 (1 s) in a fresh queue: %v, want ErrQueued", err)
	}
	c.set(t0.Add(2 * time.Second)) // standing
	if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrWait) {
		t.Fatalf("place 2 (2 s) in a standing queue: %v, want ErrWait", err)
	}
	q.Release(Request{Priority: 1}) // admits place 1: drained
	c.set(t0.Add(2500 * time.Millisecond))
	warm(q, c, 1)
	if err := q.Offer(Request{Priority: 1}, func(error) {}); !errors.Is(err, ErrQueued) {
		t.Fatalf("place 1 after the queue drained: %v, want ErrQueued", err)
	}
}

// TestQueueIdleTenantHoldsNoHeadroom: a tenant that has not arrived for
// the release rate's window, and holds no slot, leaves no headroom to
// the others: only active tenants under their share do.
func TestQueueIdleTenantHoldsNoHeadroom(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{}, c.now)
	q.SetCapacity(16)
	if err := q.Offer(Request{Tenant: "idle"}, nil); err != nil {
		t.Fatal(err)
	}
	q.Release(Request{Tenant: "idle"})
	c.set(c.now().Add(activeFor + time.Second))
	if err := q.Offer(Request{Tenant: "light"}, nil); err != nil {
		t.Fatal(err)
	}
	// "heavy" and "light" share 16 slots, 8 each: light, under its share,
	// holds 2 for itself, so heavy may take 13 of the 15 left.
	for i := range 13 {
		if err := q.Offer(Request{Tenant: "heavy"}, nil); err != nil {
			t.Fatalf("heavy's request %d: %v, want admitted", i+1, err)
		}
	}
	if err := q.Offer(Request{Tenant: "heavy"}, func(error) {}); err == nil {
		t.Fatal("heavy took a slot of light's headroom")
	}
}

// TestQueueReleaseReturnsTheTenantsSlot: a released request counts its
// tenant's slot back at its own priority, so the tenant, under its share
// again, takes a slot of the headroom.
func TestQueueReleaseReturnsTheTenantsSlot(t *testing.T) {
	for prio := range Priorities {
		c := &clock{t: time.Unix(1000, 0)}
		q := NewQueue(QueueConfig{}, c.now)
		q.SetCapacity(8)
		a, b := Request{Priority: prio, Tenant: "a"}, Request{Priority: prio, Tenant: "b"}
		for range 3 {
			if err := q.Offer(a, nil); err != nil {
				t.Fatal(err)
			}
		}
		for range 4 {
			if err := q.Offer(b, nil); err != nil {
				t.Fatal(err)
			}
		}
		q.Release(b)
		// 2 free of 8, no more than a's headroom; b holds 3 of its share of 4.
		if err := q.Offer(b, func(error) {}); err != nil {
			t.Fatalf("priority %d: b under its share after a release: %v, want admitted", prio, err)
		}
	}
}

// TestQueueTenantAtItsShareHoldsNoHeadroom: only a tenant below its
// share holds headroom; one at its share does not.
func TestQueueTenantAtItsShareHoldsNoHeadroom(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{}, c.now)
	q.SetCapacity(24) // three tenants: a share of 8 each; headroom at most 6
	offer := func(tenant string, n int) {
		for i := range n {
			if err := q.Offer(Request{Tenant: tenant}, nil); err != nil {
				t.Fatalf("%s's request %d: %v, want admitted", tenant, i+1, err)
			}
		}
	}
	offer("light", 1)
	offer("full", 8)
	// heavy, over its share, leaves 2 slots for light only.
	offer("heavy", 13)
	if err := q.Offer(Request{Tenant: "heavy"}, func(error) {}); err == nil {
		t.Fatal("heavy took a slot of light's headroom")
	}
}

// TestQueueExpireJudgesWaitersInTheFairOrder: Expire predicts each
// waiter's wait from its place in the order the queue admits its
// waiters (fair between tenants), not from the order they arrived in:
// a tenant that queued one request after another's three is admitted
// second, so the other's third is the one that cannot make its deadline.
func TestQueueExpireJudgesWaitersInTheFairOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &clock{t: t0}
	q := NewQueue(QueueConfig{Timeout: time.Second}, c.now)
	warm(q, c, 8) // 8 slots freed a second: places 1-6 within ¾ of the deadline
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string][]error{}
	offer := func(tenant string) {
		if err := q.Offer(Request{Priority: 1, Tenant: tenant}, func(err error) {
			got[tenant] = append(got[tenant], err)
		}); !errors.Is(err, ErrQueued) {
			t.Fatalf("%s: %v, want ErrQueued", tenant, err)
		}
	}
	offer("a")
	offer("a")
	offer("a")
	offer("b") // admitted second: a, b, a, a
	// Half a second left: places 1-3 (up to 0.4 s) make it, place 4
	// (0.53 s) does not.
	c.set(t0.Add(500 * time.Millisecond))
	q.Expire()
	if len(got["a"]) != 1 || !errors.Is(got["a"][0], ErrWait) || len(got["b"]) != 0 {
		t.Fatalf("answers after Expire %v, want a's third rejected with ErrWait and b's request kept", got)
	}
	if q.Waiting(1, "a") != 2 || q.Waiting(1, "b") != 1 {
		t.Fatalf("waiting: a %d, b %d; want 2 and 1", q.Waiting(1, "a"), q.Waiting(1, "b"))
	}
}

// TestQueueFullEvictsTheLowerPriorityWaiterAdmittedLast: a request of a
// higher priority in a full queue takes the place of the waiter of the
// lowest priority that would be admitted last (the fair order's last,
// not the last to arrive).
func TestQueueFullEvictsTheLowerPriorityWaiterAdmittedLast(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(QueueConfig{Timeout: time.Hour, MaxQueue: 3}, c.now)
	warm(q, c, 100)
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 2}, nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	offer := func(prio int, tenant string) {
		if err := q.Offer(Request{Priority: prio, Tenant: tenant}, func(err error) {
			got = append(got, tenant+": "+errString(err))
		}); !errors.Is(err, ErrQueued) {
			t.Fatalf("%s at priority %d: %v, want ErrQueued", tenant, prio, err)
		}
	}
	offer(0, "a")
	offer(0, "a")
	offer(0, "b") // arrives last, admitted second: a, b, a
	offer(2, "c")
	if len(got) != 1 || got[0] != "a: "+ErrEvicted.Error() {
		t.Fatalf("answers %q, want a's second evicted", got)
	}
	if q.Waiting(0, "a") != 1 || q.Waiting(0, "b") != 1 || q.Waiting(2, "c") != 1 {
		t.Fatalf("waiting a %d b %d c %d, want 1 each", q.Waiting(0, "a"), q.Waiting(0, "b"), q.Waiting(2, "c"))
	}
}

func errString(err error) string {
	if err == nil {
		return "admitted"
	}
	return err.Error()
}

// TestQueueExpireTimesOutTheLowestPriority: Expire rejects the waiters
// of every priority, the lowest too, once their deadline has passed.
func TestQueueExpireTimesOutTheLowestPriority(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &clock{t: t0}
	q := NewQueue(QueueConfig{Timeout: time.Second}, c.now)
	q.SetCapacity(1)
	if err := q.Offer(Request{}, nil); err != nil {
		t.Fatal(err)
	}
	got := map[int]error{}
	for prio := range Priorities {
		if err := q.Offer(Request{Priority: prio}, func(err error) { got[prio] = err }); !errors.Is(err, ErrQueued) {
			t.Fatalf("priority %d: %v, want ErrQueued", prio, err)
		}
	}
	c.set(t0.Add(time.Second))
	q.Expire()
	for prio := range Priorities {
		if !errors.Is(got[prio], ErrTimeout) {
			t.Fatalf("priority %d past its deadline: answer %v, want ErrTimeout", prio, got[prio])
		}
	}
	if q.Len() != 0 {
		t.Fatalf("%d still waiting", q.Len())
	}
}
