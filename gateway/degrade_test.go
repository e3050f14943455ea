package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// logLines is a slog.Handler that keeps every record's level and
// message (with its engine attribute, when it has one).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "engine" {
			line += " engine=" + a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

// take returns the lines logged since the last take.
func (l *logLines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

var degradeT0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func newTestDegrade(t *testing.T) (*degrade, *logLines, *fakeClock, *prometheus.Registry) {
	t.Helper()
	logs := &logLines{}
	clock := &fakeClock{t: degradeT0}
	reg := prometheus.NewRegistry()
	d, err := newDegrade("c", reg, slog.New(logs), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	return d, logs, clock, reg
}

func degradedGauge(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_gateway_degraded" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no switchyard_gateway_degraded{reason=%q}", reason)
	return 0
}

func rejectedRatio(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "switchyard_gateway_rejected_ratio" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no single switchyard_gateway_rejected_ratio series")
	return 0
}

// drive runs the degrade for secs seconds from its clock's time at rps
// requests a second, every reject-th of them rejected by admission (0:
// none), with a check after each second, and returns the lines logged.
func drive(d *degrade, logs *logLines, clock *fakeClock, secs, rps, reject int) []string {
	n := 0
	for range secs {
		for range rps {
			n++
			if reject > 0 && n%reject == 0 {
				d.observe(rejectedAdmission)
			} else {
				d.observe(served)
			}
		}
		clock.set(clock.now().Add(time.Second))
		d.check(clock.now())
	}
	return logs.take()
}

func count(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// TestDegradeRejecting: a gateway rejecting 40% of 10 requests a second
// logs one WARN when it starts, one a minute while it goes on, and one
// INFO within a minute after it stops (the minute's ratio falls under 5%); the
// gauges follow. Rejecting 4% logs nothing, nor does rejecting every
// request of fewer than degradeMinRequests.
func TestDegradeRejecting(t *testing.T) {
	t.Run("40 percent", func(t *testing.T) {
		d, logs, clock, reg := newTestDegrade(t)
		lines := drive(d, logs, clock, 1, 10, 0)
		if len(lines) != 0 {
			t.Fatalf("serving: %q", lines)
		}
		var all []string
		for range 124 { // two minutes, 2 in 5 rejected (ending so that the next WARN would come after the end)
			for i := range 10 {
				if i%5 < 2 {
					d.observe(rejectedAdmission)
				} else {
					d.observe(served)
				}
			}
			clock.set(clock.now().Add(time.Second))
			d.check(clock.now())
			all = append(all, logs.take()...)
		}
		if got := count(all, "WARN gateway rejecting requests"); got != 1 {
			t.Fatalf("start WARNs %d, want 1: %q", got, all)
		}
		if got := count(all, "WARN gateway still rejecting requests"); got != 2 {
			t.Fatalf("repeated WARNs over 2 minutes %d, want 2 (one a minute): %q", got, all)
		}
		if r := rejectedRatio(t, reg); r < 0.39 || r > 0.41 {
			t.Fatalf("rejected ratio %.3f, want 0.4", r)
		}
		if g := degradedGauge(t, reg, degradedRejecting); g != 1 {
			t.Fatalf("degraded{rejecting} %v while rejecting", g)
		}
		// Serving everything: the minute's ratio falls under 5% within a
		// minute, and the end is logged once.
		lines = drive(d, logs, clock, 120, 10, 0)
		if got := count(lines, "INFO gateway no longer rejecting requests"); got != 1 || len(lines) != 1 {
			t.Fatalf("after it ends: %q, want one INFO", lines)
		}
		if g := degradedGauge(t, reg, degradedRejecting); g != 0 {
			t.Fatalf("degraded{rejecting} %v after it ended", g)
		}
		if r := rejectedRatio(t, reg); r != 0 {
			t.Fatalf("rejected ratio %.3f after a minute without rejections", r)
		}
	})
	t.Run("4 percent", func(t *testing.T) {
		d, logs, clock, reg := newTestDegrade(t)
		if lines := drive(d, logs, clock, 180, 25, 25); len(lines) != 0 {
			t.Fatalf("4%% rejected logged %q", lines)
		}
		if r := rejectedRatio(t, reg); r < 0.039 || r > 0.041 {
			t.Fatalf("rejected ratio %.3f, want 0.04", r)
		}
		if g := degradedGauge(t, reg, degradedRejecting); g != 0 {
			t.Fatalf("degraded at 4%%")
		}
	})
	t.Run("6 percent", func(t *testing.T) {
		d, logs, clock, _ := newTestDegrade(t)
		lines := drive(d, logs, clock, 60, 50, 16) // 6.25%
		if count(lines, "WARN gateway rejecting requests") != 1 {
			t.Fatalf("6%% rejected: %q, want a WARN", lines)
		}
	})
	t.Run("too few requests", func(t *testing.T) {
		d, logs, clock, reg := newTestDegrade(t)
		for range degradeMinRequests - 1 {
			d.observe(rejectedCapacity)
		}
		clock.set(clock.now().Add(time.Second))
		d.check(clock.now())
		if lines := logs.take(); len(lines) != 0 || degradedGauge(t, reg, degradedRejecting) != 0 {
			t.Fatalf("%d requests, all rejected: degraded (%q)", degradeMinRequests-1, lines)
		}
		d.observe(rejectedCapacity)
		d.check(clock.now())
		if lines := logs.take(); count(lines, "WARN gateway rejecting") != 1 {
			t.Fatalf("%d requests, all rejected: %q, want a WARN", degradeMinRequests, lines)
		}
	})
	t.Run("not demand", func(t *testing.T) {
		d, logs, clock, reg := newTestDegrade(t)
		for range 100 {
			d.observe(notCounted)
			d.observe(served)
		}
		d.observe(rejectedSnapshot)
		d.observe(rejectedSnapshot)
		clock.set(clock.now().Add(time.Second))
		d.check(clock.now())
		// 2 of 102 counted requests: under 5%; counting the 100 malformed
		// ones would not change that, but the ratio would be 2/202.
		if r := rejectedRatio(t, reg); r != 2.0/102 {
			t.Fatalf("rejected ratio %v, want 2/102 (malformed requests are not counted)", r)
		}
		if lines := logs.take(); len(lines) != 0 {
			t.Fatalf("%q", lines)
		}
	})
}

// TestDegradeFlappingIsRateLimited: a ratio that crosses 5% back and
// forth every few seconds logs at most one WARN and one INFO a minute.
func TestDegradeFlappingIsRateLimited(t *testing.T) {
	d, logs, clock, _ := newTestDegrade(t)
	drive(d, logs, clock, 60, 20, 0)
	var all []string
	for i := range 300 { // five minutes
		reject := 0
		if (i/3)%2 == 0 {
			reject = 3 // a third of the requests of three seconds in six
		}
		all = append(all, drive(d, logs, clock, 1, 20, reject)...)
	}
	warns := count(all, "WARN")
	infos := count(all, "INFO")
	if warns == 0 || warns > 6 || infos > 6 {
		t.Fatalf("five minutes of flapping: %d WARN, %d INFO lines, want 1 to 6 each at most: %q", warns, infos, all)
	}
}

// TestDegradeWindowIsTheLastMinute: rejections older than a minute do
// not count, however the checks are spaced.
func TestDegradeWindowIsTheLastMinute(t *testing.T) {
	d, _, clock, reg := newTestDegrade(t)
	for range 100 {
		d.observe(rejectedAdmission)
	}
	clock.set(clock.now().Add(time.Second))
	d.check(clock.now())
	if r := rejectedRatio(t, reg); r != 1 {
		t.Fatalf("ratio %v, want 1", r)
	}
	for range 100 {
		d.observe(served)
	}
	clock.set(clock.now().Add(50 * time.Second)) // one check 50 s later
	d.check(clock.now())
	if r := rejectedRatio(t, reg); r != 100.0/200 {
		t.Fatalf("ratio %v with no sample a minute old: want 0.5 (the oldest sample is the base)", r)
	}
	clock.set(clock.now().Add(61 * time.Second))
	d.check(clock.now())
	if r := rejectedRatio(t, reg); r != 0 {
		t.Fatalf("ratio %v a minute after the last rejection, want 0", r)
	}
	if n := len(d.samples); n > int(degradeSpan/degradeStep)+2 {
		t.Fatalf("%d samples kept", n)
	}
}

// TestDegradeHeldBelowBatchLimit: holding an engine below its batch
// limit logs a WARN naming it, once a minute while it lasts, and an INFO
// when it ends; the gauge is 1 while any engine is held. A hold that
// comes back within the minute of the last WARN is not logged again.
func TestDegradeHeldBelowBatchLimit(t *testing.T) {
	d, logs, clock, reg := newTestDegrade(t)
	d.heldBelow("a-0", true)
	d.heldBelow("a-0", true) // no change
	if lines := logs.take(); len(lines) != 1 || lines[0] != "WARN gateway holding an engine below its batch limit while it has no queue engine=a-0" {
		t.Fatalf("%q", lines)
	}
	if g := degradedGauge(t, reg, degradedHeld); g != 1 {
		t.Fatalf("degraded{held_below_batch_limit} %v while held", g)
	}
	d.heldBelow("b-0", true)
	d.heldBelow("a-0", false)
	if g := degradedGauge(t, reg, degradedHeld); g != 1 {
		t.Fatalf("degraded %v while b-0 is held", g)
	}
	if lines := logs.take(); len(lines) != 2 || !strings.HasSuffix(lines[0], "engine=b-0") || lines[1] != "INFO gateway no longer holding an engine below its batch limit engine=a-0" {
		t.Fatalf("%q", lines)
	}
	// b-0 held for three minutes: a WARN a minute.
	var all []string
	for range 180 {
		clock.set(clock.now().Add(time.Second))
		d.check(clock.now())
		all = append(all, logs.take()...)
	}
	if got := count(all, "WARN gateway still holding an engine below its batch limit"); got != 3 || len(all) != 3 {
		t.Fatalf("three minutes held: %q, want 3 WARNs", all)
	}
	d.heldBelow("b-0", false)
	if g := degradedGauge(t, reg, degradedHeld); g != 0 {
		t.Fatalf("degraded %v with nothing held", g)
	}
	logs.take()
	// Flapping within a minute of the last WARN: silent both ways.
	d.heldBelow("b-0", true)
	d.heldBelow("b-0", false)
	if lines := logs.take(); len(lines) != 0 {
		t.Fatalf("re-held within the minute: %q", lines)
	}
}

// TestRejectionCountsAsTheProcessorDoes: the requests the gateway counts
// in its rejected ratio are those the processor counts as demand.
func TestRejectionCountsAsTheProcessorDoes(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   *schemas.RoutingEvent
		out  outcome
		want rejection
	}{
		{"ok", &schemas.RoutingEvent{EngineId: "a"}, outcome{statusOK, 200}, served},
		{"failed", &schemas.RoutingEvent{EngineId: "a"}, outcome{statusErr, 502}, served},
		{"no engines", &schemas.RoutingEvent{}, outcome{statusErr, 503}, served},
		{"canceled", &schemas.RoutingEvent{}, outcome{statusCanceled, 499}, served},
		{"engine's 400", &schemas.RoutingEvent{EngineId: "a"}, outcome{statusClientErr, 400}, served},
		{"malformed", &schemas.RoutingEvent{}, outcome{statusClientErr, 400}, notCounted},
		{"unauthenticated", &schemas.RoutingEvent{FailureReason: schemas.FailureReason_FAILURE_REASON_UNAUTHENTICATED}, outcome{statusClientErr, 401}, notCounted},
		{"tenant quota", &schemas.RoutingEvent{FailureReason: schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT}, outcome{statusShed, 429}, notCounted},
		{"snapshot shed", &schemas.RoutingEvent{FailureReason: schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT}, outcome{statusShed, 429}, rejectedSnapshot},
		{"admission", &schemas.RoutingEvent{FailureReason: schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION}, outcome{statusShed, 429}, rejectedAdmission},
		{"capacity", &schemas.RoutingEvent{FailureReason: schemas.FailureReason_FAILURE_REASON_SHED_CAPACITY}, outcome{statusShed, 429}, rejectedCapacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rejectionOf(tc.ev, tc.out)
			if got != tc.want {
				t.Fatalf("rejectionOf %v, want %v", got, tc.want)
			}
			ev := &schemas.RoutingEvent{EngineId: tc.ev.EngineId, FailureReason: tc.ev.FailureReason, Status: tc.out.status}
			if (got != notCounted) != estimate.CountsAsDemand(ev) {
				t.Fatalf("counted %v, the processor's CountsAsDemand %v", got != notCounted, estimate.CountsAsDemand(ev))
			}
		})
	}
}

// TestGatewayCountsRejections: the proxy's requests reach the degrade
// watch: shed requests count as rejected, malformed ones not at all.
func TestGatewayCountsRejections(t *testing.T) {
	logs := &logLines{}
	clock := &fakeClock{t: degradeT0}
	reg := prometheus.NewRegistry()
	shedAll := &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: 1, Clusters: []*schemas.ClusterWeights{{Cluster: "c", ShedFraction: 1}}}
	g, err := New("c", HealthInterval(-1), Registerer(reg), Logger(slog.New(logs)), Clock(clock.now), InitialSnapshot(shedAll))
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) int {
		w := httptest.NewRecorder()
		g.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, pathChat, strings.NewReader(body)))
		return w.Code
	}
	for range 30 {
		if code := post(`{"model":"sim","messages":[{"role":"user","content":"hi"}]}`); code != 429 {
			t.Fatalf("status %d, want 429", code)
		}
		if code := post(`{"model":`); code != 400 {
			t.Fatalf("status %d, want 400", code)
		}
	}
	clock.set(clock.now().Add(time.Second))
	g.degrade.check(clock.now())
	if r := rejectedRatio(t, reg); r != 1 {
		t.Fatalf("rejected ratio %v, want 1 (30 shed, the 30 malformed not counted)", r)
	}
	if lines := logs.take(); count(lines, "WARN gateway rejecting requests") != 1 {
		t.Fatalf("%q", lines)
	}
}
