package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/gateway/pick"
)

// TestLoweredLimitLeavesRoomForAdmittedRequests: four requests admitted
// under a limit of 4, two of them on the engine; the limit falls to 2.
// The two admitted ones that have not picked yet still find the engine
// (the picker would shed them at a limit of 2), the queue admits no new
// request, and once the four ended the next update lowers the limit to 2.
func TestLoweredLimitLeavesRoomForAdmittedRequests(t *testing.T) {
	c := &cfg{cluster: "t", maxInFlight: 4, noAdaptive: true, now: time.Now}
	c.queue.Timeout = time.Second
	a, err := newAdmission(c, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tb, err := pick.NewPool().Build([]pick.Spec{{ID: "e", URL: "http://e", Weight: 1}}, pick.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a.apply("t", tb, time.Now(), true)
	st := tb.Engine(0).State
	if st.Limit() != 4 || a.q.Capacity() != 4 {
		t.Fatalf("limit %d, capacity %d; want 4, 4", st.Limit(), a.q.Capacity())
	}
	for range 4 {
		if err := a.acquire(context.Background(), "t", 1, "", 1, time.Now); err != nil {
			t.Fatal(err)
		}
	}
	pickOne := func() int {
		i, _, _ := tb.PickRequest(&pick.Request{Key: 1, NowMs: time.Now().UnixMilli()}, nil)
		return i
	}
	for range 2 {
		if pickOne() < 0 {
			t.Fatal("no engine under the limit of 4")
		}
	}
	a.static = 2
	a.apply("t", tb, time.Now(), true)
	if a.q.Capacity() != 2 {
		t.Fatalf("capacity %d after the limit fell, want 2", a.q.Capacity())
	}
	for k := range 2 {
		if pickOne() < 0 {
			t.Fatalf("admitted request %d shed after the limit fell to 2", k+3)
		}
	}
	for range 4 {
		tb.Done(0)
		a.release(1, "")
	}
	a.apply("t", tb, time.Now(), true)
	if st.Limit() != 2 {
		t.Fatalf("limit %d once the admitted requests ended, want 2", st.Limit())
	}
}
