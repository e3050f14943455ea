package admit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// admitLog offers requests and records, in order, the tenants admitted
// from the queue.
type admitLog struct {
	t   *testing.T
	q   *Queue
	got []string
	err map[string][]error
	rel int // releases so far: the first is the warm-up's request's
}

// release ends the oldest admitted request (the warm-up's, then those
// in got).
func (l *admitLog) release() {
	r := Request{Priority: 1}
	if l.rel > 0 {
		r.Tenant = l.got[l.rel-1]
	}
	l.rel++
	l.q.Release(r)
}

func (l *admitLog) offer(r Request) error {
	return l.q.Offer(r, func(err error) {
		if err != nil {
			l.err[r.Tenant] = append(l.err[r.Tenant], err)
			return
		}
		l.got = append(l.got, r.Tenant)
	})
}

func newAdmitLog(t *testing.T, cfg QueueConfig, perSecond int) *admitLog {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(cfg, c.now)
	warm(q, c, perSecond)
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatal(err)
	}
	return &admitLog{t: t, q: q, err: map[string][]error{}}
}

// TestQueueFairBetweenTenants: waiters of one priority are admitted in
// turn between tenants, by weight, not by arrival: a tenant that queued
// many first does not make a later one wait behind all of them.
func TestQueueFairBetweenTenants(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wa, wb float64
		na, nb int
		want   string
	}{
		{"equal", 0, 0, 6, 3, "a b a b a b a a a"},
		{"a weighs 2", 2, 1, 6, 3, "a b a a b a a b a"},
		{"b weighs 3", 1, 3, 4, 6, "a b b b a b b b a a"},
		{"b alone borrows all", 0, 0, 0, 4, "b b b b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newAdmitLog(t, QueueConfig{Timeout: time.Hour}, 100)
			for range tc.na {
				if err := l.offer(Request{Priority: 1, Tenant: "a", Weight: tc.wa}); !errors.Is(err, ErrQueued) {
					t.Fatalf("a: %v", err)
				}
			}
			for range tc.nb {
				if err := l.offer(Request{Priority: 1, Tenant: "b", Weight: tc.wb}); !errors.Is(err, ErrQueued) {
					t.Fatalf("b: %v", err)
				}
			}
			for range tc.na + tc.nb {
				l.release()
			}
			if got := strings.Join(l.got, " "); got != tc.want {
				t.Fatalf("admitted %q, want %q", got, tc.want)
			}
		})
	}
}

// TestQueueIdleTenantBanksNoCredit: a tenant that was idle while another
// was served gets its share from when it comes back, not the share it
// did not use (which would starve the other for as long).
func TestQueueIdleTenantBanksNoCredit(t *testing.T) {
	l := newAdmitLog(t, QueueConfig{Timeout: time.Hour}, 100)
	for range 4 {
		_ = l.offer(Request{Priority: 1, Tenant: "a"})
	}
	for range 3 {
		l.release() // a alone: a a a
	}
	for range 3 {
		_ = l.offer(Request{Priority: 1, Tenant: "a"})
	}
	for range 3 {
		_ = l.offer(Request{Priority: 1, Tenant: "b"})
	}
	for range 7 {
		l.release()
	}
	// b's first tag is a's next (a's 4th, still queued): no earlier.
	if got, want := strings.Join(l.got, " "), "a a a b a b a b a a"; got != want {
		t.Fatalf("admitted %q, want %q", got, want)
	}
}

// TestQueueHopelessIsRejectedOnEntryByFairPosition: the predicted wait
// on entry is the request's place in the fair order: behind a flooding
// tenant's long queue another tenant's request is queued (its place is
// near the front), while the flooder's next is rejected at once.
func TestQueueHopelessIsRejectedOnEntryByFairPosition(t *testing.T) {
	// 10 slots/s, deadline 1.4 s: queued while predicted to wait <= 1.05
	// s (¾ of the deadline), that is, up to place 10.
	l := newAdmitLog(t, QueueConfig{Timeout: 1400 * time.Millisecond}, 10)
	for i := range 10 {
		if err := l.offer(Request{Priority: 1, Tenant: "a"}); !errors.Is(err, ErrQueued) {
			t.Fatalf("a's %d: %v, want ErrQueued", i+1, err)
		}
	}
	if err := l.offer(Request{Priority: 1, Tenant: "a"}); !errors.Is(err, ErrWait) {
		t.Fatalf("a's 11th: %v, want ErrWait at once", err)
	}
	for i := range 5 { // b's places: 2, 4, 6, 8, 10
		if err := l.offer(Request{Priority: 1, Tenant: "b"}); !errors.Is(err, ErrQueued) {
			t.Fatalf("b's %d: %v, want ErrQueued", i+1, err)
		}
	}
	if err := l.offer(Request{Priority: 1, Tenant: "b"}); !errors.Is(err, ErrWait) {
		t.Fatalf("b's 6th (place 12): %v, want ErrWait", err)
	}
}

// TestQueueFullEvictsTheHeaviestTenant: in a full queue a request of a
// tenant with fewer waiting takes the place of the newest waiter of the
// tenant with the most (for its weight); the flooder's own next request
// is rejected, and a tenant never evicts its own.
func TestQueueFullEvictsTheHeaviestTenant(t *testing.T) {
	l := newAdmitLog(t, QueueConfig{Timeout: time.Hour, MaxQueue: 4}, 100)
	for range 4 {
		if err := l.offer(Request{Priority: 1, Tenant: "a"}); !errors.Is(err, ErrQueued) {
			t.Fatal(err)
		}
	}
	if err := l.offer(Request{Priority: 1, Tenant: "a"}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a's 5th in a full queue: %v, want ErrQueueFull", err)
	}
	for range 2 {
		if err := l.offer(Request{Priority: 1, Tenant: "b"}); !errors.Is(err, ErrQueued) {
			t.Fatalf("b in a queue full of a's: %v, want ErrQueued", err)
		}
	}
	if n := len(l.err["a"]); n != 2 || !errors.Is(l.err["a"][0], ErrEvicted) {
		t.Fatalf("a's answers %v, want 2 evicted", l.err["a"])
	}
	// 2 each: b's third would make b the heavier one.
	if err := l.offer(Request{Priority: 1, Tenant: "b"}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("b's 3rd with 2 of a's left: %v, want ErrQueueFull", err)
	}
	// A tenant of weight 2 may hold twice as many.
	if err := l.offer(Request{Priority: 1, Tenant: "b", Weight: 2}); !errors.Is(err, ErrQueued) {
		t.Fatalf("b at weight 2: %v, want ErrQueued", err)
	}
	if l.q.Waiting(1, "a") != 1 || l.q.Waiting(1, "b") != 3 {
		t.Fatalf("waiting a %d b %d, want 1 and 3", l.q.Waiting(1, "a"), l.q.Waiting(1, "b"))
	}
}
