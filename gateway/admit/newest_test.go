package admit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// newestLog queues requests of one slot's queue on a clock the test
// moves, and records which were admitted, in order.
type newestLog struct {
	t   *testing.T
	c   *clock
	q   *Queue
	got []string
}

func newNewestLog(t *testing.T, cfg QueueConfig) *newestLog {
	c := &clock{t: time.Unix(1000, 0)}
	q := NewQueue(cfg, c.now)
	warm(q, c, 100)
	q.SetCapacity(1)
	if err := q.Offer(Request{Priority: 1}, nil); err != nil {
		t.Fatal(err) // the slot's holder
	}
	return &newestLog{t: t, c: c, q: q}
}

// queue offers a request named id of tenant at the clock's time plus
// after (the clock stays there).
func (l *newestLog) queue(after time.Duration, tenant, id string) {
	l.t.Helper()
	l.c.set(l.c.now().Add(after))
	err := l.q.Offer(Request{Priority: 1, Tenant: tenant}, func(err error) {
		if err == nil {
			l.got = append(l.got, id)
		}
	})
	if !errors.Is(err, ErrQueued) {
		l.t.Fatalf("%s: %v, want queued", id, err)
	}
}

// release frees the slot after the given time: the next waiter is
// admitted into it.
func (l *newestLog) release(after time.Duration) {
	l.c.set(l.c.now().Add(after))
	l.q.Release(Request{Priority: 1})
}

// TestQueueAdmitsTheNewestWhileTheOldestWaitedLess: with the default
// bound (a quarter of the 8 s deadline), a slot that frees goes to the
// newest waiter while the oldest has waited under 2 s, and to the oldest
// once it has waited 2 s: most requests are served from the next slot,
// and none waits much past the bound behind newer ones.
func TestQueueAdmitsTheNewestWhileTheOldestWaitedLess(t *testing.T) {
	l := newNewestLog(t, QueueConfig{})
	l.queue(0, "", "r1")
	l.queue(100*time.Millisecond, "", "r2")
	l.queue(100*time.Millisecond, "", "r3")
	l.release(100 * time.Millisecond) // r1 has waited 0.3 s
	l.queue(100*time.Millisecond, "", "r4")
	l.release(100 * time.Millisecond)  // 0.5 s
	l.release(1600 * time.Millisecond) // 2.1 s: r1 first
	l.release(100 * time.Millisecond)  // r2 has waited 2.1 s too
	if got, want := strings.Join(l.got, " "), "r3 r4 r1 r2"; got != want {
		t.Fatalf("admitted %q, want %q", got, want)
	}
}

// TestQueueNegativeNewestFirstIsOldestFirst: NewestFirst < 0 admits in
// arrival order.
func TestQueueNegativeNewestFirstIsOldestFirst(t *testing.T) {
	l := newNewestLog(t, QueueConfig{NewestFirst: -1})
	for i := range 4 {
		l.queue(100*time.Millisecond, "", fmt.Sprintf("r%d", i+1))
	}
	for range 4 {
		l.release(10 * time.Millisecond)
	}
	if got, want := strings.Join(l.got, " "), "r1 r2 r3 r4"; got != want {
		t.Fatalf("admitted %q, want %q", got, want)
	}
}

// TestQueueNewestFirstKeepsTenantsTurns: admitting a tenant's newest
// request first does not change whose turn it is: two backlogged
// tenants of equal weight still alternate, and each one's requests go
// newest first.
func TestQueueNewestFirstKeepsTenantsTurns(t *testing.T) {
	l := newNewestLog(t, QueueConfig{Timeout: time.Hour})
	for i := range 3 {
		l.queue(10*time.Millisecond, "a", fmt.Sprintf("a%d", i+1))
	}
	for i := range 3 {
		l.queue(10*time.Millisecond, "b", fmt.Sprintf("b%d", i+1))
	}
	for range 6 {
		l.release(10 * time.Millisecond)
	}
	if got, want := strings.Join(l.got, " "), "a3 b3 a2 b2 a1 b1"; got != want {
		t.Fatalf("admitted %q, want %q", got, want)
	}
}
