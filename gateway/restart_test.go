package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/outlier"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TestRestartedEngineTakesItsShareAgain: an engine killed mid-run is
// ejected and found down by the health checks; once it answers them again
// it leaves ejection at once (outlier.Restarted) and takes its planned
// share of the next requests, instead of waiting out an ejection back-off
// while its neighbour carries the whole cluster (issue 27: a restarted
// fast engine served 1 request in the 60 s after it came back).
func TestRestartedEngineTakesItsShareAgain(t *testing.T) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	snap := snapshot(1, "us-east", 0, map[*fakeEngine]float64{a: 0.5, b: 0.5})
	// One failure ejects (with the default of five, the picker's penalty
	// steers requests away from a failing engine before five fail).
	g, base := startGateway(t, InitialSnapshot(snap), HealthInterval(300*time.Millisecond), Outlier(outlier.Config{Consecutive: 1}))
	ctx := context.Background()
	send := func(n int, phase string) {
		t.Helper()
		for i := range n {
			if status, _, body := post(t, ctx, base, chatBody(false, fmt.Sprintf("%s %d", phase, i)), nil); status != http.StatusOK {
				t.Fatalf("%s: request %d: status %d: %s", phase, i, status, body)
			}
		}
	}
	send(20, "before")

	// a fails (an engine crashing answers 500s first) until a request
	// ejects it, then dies; the health checks find it down.
	a.setMode("500")
	for i := 0; counter(g.m.ejections.WithLabelValues("us-east", "a")) < 1; i++ {
		if i > 1000 {
			t.Fatal("a failing engine was never ejected")
		}
		send(1, "failing")
	}
	addr := a.srv.Listener.Addr().String()
	a.srv.Close()
	st, ok := g.pool.Lookup("a")
	if !ok {
		t.Fatal("engine a not in the pool")
	}
	waitFor(t, 10*time.Second, st.Down, "the killed engine found down by the health checks")

	// Restart a on the same address.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("restarting engine a on %s: %v", addr, err)
	}
	a.setMode("")
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.srv.Listener = ln
	a.srv.Start()
	t.Cleanup(a.srv.Close)
	waitFor(t, 10*time.Second, func() bool { return !st.Down() }, "engine a found healthy again")

	before := a.requests.Load()
	const after = 200
	send(after, "restarted")
	share := float64(a.requests.Load()-before) / after
	t.Logf("restarted engine's share of the next %d requests: %.2f (planned 0.50)", after, share)
	if share < 0.35 {
		t.Errorf("restarted engine took %.2f of the next %d requests, planned 0.50", share, after)
	}
}

// TestRestartedEngineRoutedOnceASnapshotBringsItBack: the optimizer
// leaves an engine out of its snapshots while it is down, which also
// takes it out of the health checks (they check the routed engines); when
// it is back and a snapshot routes to it again, the gateway checks it at
// once and sends it requests, instead of holding it down until the next
// health interval (live, bench/live's restart scenario: 4-13 s of a
// restarted engine's planned share lost to the 5-s interval).
func TestRestartedEngineRoutedOnceASnapshotBringsItBack(t *testing.T) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	// An interval no test waits out: only a check asked for runs.
	g, base := startGateway(t, InitialSnapshot(snapshot(1, "us-east", 0, map[*fakeEngine]float64{a: 0.5, b: 0.5})), HealthInterval(time.Hour))
	st, ok := g.pool.Lookup("a")
	if !ok {
		t.Fatal("engine a not in the pool")
	}
	// The health checks found a down (as two failed checks do), and the
	// next snapshot leaves it out.
	st.SetDown(true)
	apply := func(snap *schemas.WeightSnapshot) {
		t.Helper()
		if err := g.ApplySnapshot(marshal(t, snap)); err != nil {
			t.Fatal(err)
		}
	}
	apply(snapshot(2, "us-east", 0, map[*fakeEngine]float64{b: 1}))
	// a restarted (it answers /health) and the optimizer routes to it again.
	apply(snapshot(3, "us-east", 0, map[*fakeEngine]float64{a: 0.5, b: 0.5}))
	waitFor(t, 5*time.Second, func() bool { return !st.Down() }, "engine a still held down after a snapshot routed to it again")
	before := a.requests.Load()
	const n = 100
	for i := range n {
		if status, _, body := post(t, context.Background(), base, chatBody(false, fmt.Sprintf("after %d", i)), nil); status != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", i, status, body)
		}
	}
	if got := a.requests.Load() - before; got < n/4 {
		t.Errorf("engine a served %d of the next %d requests, planned half", got, n)
	}
}
