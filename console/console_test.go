package console

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// TestPages loads every page of a console on a small pipeline's output
// and checks what each must show.
func TestPages(t *testing.T) {
	f := newFixture(t)
	last, prev := f.versions[len(f.versions)-1], f.versions[len(f.versions)-2]
	tests := []struct {
		name, path string
		status     int
		want       []string
	}{
		{"overview: clusters, weights, shed, rates, health", "/", 200, []string{
			fmt.Sprintf("Snapshot <b>v%d</b>", last),
			`href="cluster?id=region-a"`, `href="cluster?id=region-b"`,
			"a-h100-0 0.90", // heaviest engine of region-a in the last snapshot
			"15.0%",         // region-b's shed fraction
			fmt.Sprintf("diff?a=%d&amp;b=%d", prev, last),
			"last snapshot", "watermark", "processor lag",
			"<svg class=\"bar\"",
			// region-b's gateways rejected about 6 of the last minute's 60
			// requests (one a second, every tenth rejected).
			`<p class="banner" role="alert">Gateways of <a href="/cluster?id=region-b">region-b</a> answered 429 to <b>`,
			`requests of the last minute (shed by the snapshot 0.0%, admission `,
		}},
		{"cluster: weights table, history chart, rates", "/cluster?id=region-a", 200, []string{
			"Cluster region-a", "0.9000", "0.1000", // a-h100-0 and a-a100-1 weights
			"Weights and shed", "<svg class=\"chart\"",
			"planned demand (snapshot)",
			`errors/s</th><td class="num bad">`,                             // region-a had errors in the last minute
			"Expected and observed latency", "observed TTFT (served, mean)", // the routing events' 80 ms TTFTs
			fmt.Sprintf("<td>region-a-gw-0</td><td class=\"num\">v%d", last), fmt.Sprintf("<td>region-a-gw-1</td><td class=\"num\">v%d", prev),
			`<td class="num warn">behind</td>`,
			"Plans per model", "llama-sql · demand 4.00 rps · shed <b>5.0%</b>", "0.9500", // the model planned apart
		}},
		{"cluster with shed", "/cluster?id=region-b", 200, []string{"(shed)", "0.1500", "capacity", ">shed<",
			"offered 1.50 rps (45 requests), <b>20.0%</b> answered 429 by the gateways (shed by the snapshot 6.7%, admission 11.1%, every engine at its limit 2.2%)",
			">rejected (observed)<", "answered 429/s",
		}},
		{"engines: every engine with its estimate, and the banner", "/engines", 200, []string{
			`engine?id=a-h100-0`, `engine?id=a-a100-1`, `engine?id=b-l4-0`, "h100", "configured", "healthy",
			`class="banner"`, "TTFT ms expected / observed",
		}},
		{"engine: both profiles against observations", "/engine?id=a-h100-0", 200, []string{
			"TTFT profile", "TBOT profile", "fitted profile", "observed (40 signals", "<circle", "region-a", "region-b",
			"prefix cache residency 37.50 s",
		}},
		{"explain a cluster", "/explain?cluster=region-b", 200, []string{
			"b-l4-0", "capacity", "marginal ms", "16 (configured)", "cache s", `<td class="num">37.5</td>`, "(shed) 0.1500", "newton",
			"Offered 1.500 rps in the window", "(45 requests; forecast 1.600 rps); 20.0% answered 429 by the gateways",
		}},
		{"explain a cluster without a demand estimate", "/explain?cluster=region-a", 200, []string{"Offered: unknown"}},
		{"explain an engine everywhere", "/explain?engine=a-h100-0", 200, []string{"Engine <b>a-h100-0</b> in every cluster", "region-a", "region-b", "40.00", "130.00"}},
		{"explain highlights an engine", "/explain?cluster=region-a&engine=a-a100-1", 200, []string{`class="highlight"`}},
		{"diff: latest against previous by default", "/diff", 200, []string{
			fmt.Sprintf("v%d → v%d", prev, last), "&#43;0.0800", "-0.0800", "traffic moved", "The optimizer's inputs differ",
			"Why: what changed in the inputs", "Timeline",
		}},
		{"diff of chosen versions", fmt.Sprintf("/diff?a=%d&b=%d", f.versions[0], last), 200, []string{"&#43;0.4000", "-0.4000", "3 engine weights changed"}},
		{"pipeline: lag, watermark, snapshot age, counts", "/pipeline", 200, []string{
			"Processor lag", "watermark", "last snapshot", "invalid records skipped</th><td class=\"num\">1<", "routing events read</th><td class=\"num\">180<",
			"<td>switchyard.engine.signals</td><td class=\"num\">21</td>", // 20 signals and the invalid record
			"processor lag</div><div class=\"value\">21 records",
			"<h2>Timeline</h2>", "sheds 5.0% of 3.00 rps", // region-b starts shedding at the fourth snapshot
		}},
		{"unknown cluster", "/cluster?id=nope", 404, []string{"cluster &#34;nope&#34;: not found", "region-a, region-b"}},
		{"unknown engine", "/engine?id=nope", 404, []string{"engine &#34;nope&#34;: not found"}},
		{"bad version", "/diff?a=x", 400, []string{"a snapshot version is a number"}},
		{"missing version", "/diff?a=12&b=13", 404, []string{"no snapshot version 12"}},
		{"unknown page", "/nope", 404, []string{"no page"}},
		{"stylesheet", "/static/console.css", 200, []string{"svg.chart"}},
		{"script", "/static/console.js", 200, []string{"DOMParser"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := f.get(t, tt.path)
			if status != tt.status {
				t.Errorf("GET %s: status %d, want %d\n%s", tt.path, status, tt.status, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s: no %q in the page", tt.path, w)
				}
			}
			if strings.HasPrefix(tt.path, "/static/") {
				return
			}
			if strings.Contains(body, "NaN") || strings.Contains(body, "ZgotmplZ") {
				t.Errorf("GET %s: page contains NaN or an unsafe-value marker", tt.path)
			}
		})
	}
}

// TestRates checks the live request rates against the routing events the
// fixture wrote: over the last minute of complete 10 s buckets.
func TestRates(t *testing.T) {
	f := newFixture(t)
	r, pts := f.console.live.clusterRates("region-a", f.console.cfg.Now())
	if r.RPS < 0.8 || r.RPS > 1.01 {
		t.Errorf("region-a: %.2f requests/s, want about 1 (one event a second)", r.RPS)
	}
	if r.ErrorRPS <= 0 || r.ErrorRatio <= 0 || r.ShedRPS != 0 {
		t.Errorf("region-a rates %+v: want errors and no shed", r)
	}
	var total uint64
	for _, p := range pts {
		total += p.Total
	}
	if total == 0 || total > fixtureEvents {
		t.Errorf("region-a: %d requests in the rate buckets, want 1..%d", total, fixtureEvents)
	}
	rb, _ := f.console.live.clusterRates("region-b", f.console.cfg.Now())
	if rb.ShedRPS <= 0 || rb.ErrorRPS != 0 {
		t.Errorf("region-b rates %+v: want shed and no errors", rb)
	}
	if rb.Offered < 59 || rb.Offered > 61 || rb.Rejected < 5 || rb.Rejected > 7 || rb.RejAdmissionRatio != rb.RejectedRatio || !rb.Rejecting() || r.Rejecting() {
		t.Errorf("region-b rates %+v: want about 6 of 60 offered requests rejected by admission, a banner for region-b only", rb)
	}
}

// TestOfferedCountsEachRequestOnce: the console's offered requests are
// the processor's demand: a long request counts once (its arrival
// record, not its final record), a 429 counts as offered and rejected,
// a malformed request and a tenant over its quota not at all; the
// banner needs more than 5% of at least 20 requests rejected.
func TestOfferedCountsEachRequestOnce(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 5, 0, time.UTC)
	l := newLive(time.Hour)
	at := now.Add(-30 * time.Second).UnixMilli()
	ev := func(status schemas.RequestStatus, reason schemas.FailureReason, engine string, arrival bool) *schemas.RoutingEvent {
		return &schemas.RoutingEvent{Cluster: "c", Status: status, FailureReason: reason, EngineId: engine, CountedAtArrival: arrival, EventTimeUnixMs: at}
	}
	const (
		ok   = schemas.RequestStatus_REQUEST_STATUS_OK
		shed = schemas.RequestStatus_REQUEST_STATUS_SHED
	)
	for range 10 { // long requests: arrival and final records
		l.addEvent(ev(schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS, 0, "", false), now)
		l.addEvent(ev(ok, 0, "e", true), now)
	}
	for range 8 {
		l.addEvent(ev(ok, 0, "e", false), now)
	}
	l.addEvent(ev(shed, schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION, "", false), now)
	l.addEvent(ev(shed, schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT, "", false), now)
	l.addEvent(ev(schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR, schemas.FailureReason_FAILURE_REASON_INVALID_REQUEST, "", false), now)
	l.addEvent(ev(shed, schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT, "", false), now)
	r, _ := l.clusterRates("c", now)
	if r.Offered != 20 || r.Rejected != 2 || r.RejSnapshotRatio != 0.05 || r.RejAdmissionRatio != 0.05 || r.RejCapacityRatio != 0 {
		t.Fatalf("rates %+v: want 20 offered (10 long, 8 short, 2 rejected), 2 rejected", r)
	}
	if r.RPS*rateSpan.Seconds() != 22 {
		t.Fatalf("%v requests answered, want 22 (the final records, the malformed and over-quota ones included)", r.RPS*rateSpan.Seconds())
	}
	if !r.Rejecting() {
		t.Fatalf("10%% of 20 requests rejected: no banner")
	}
	l.addEvent(ev(ok, 0, "e", false), now)
	l.addEvent(ev(ok, 0, "e", false), now)
	for range 20 {
		l.addEvent(ev(ok, 0, "e", false), now)
	}
	if r, _ := l.clusterRates("c", now); r.Rejecting() {
		t.Fatalf("2 of 42 rejected (4.8%%): a banner")
	}
}

// TestMountedUnderAPrefix checks that links follow BasePath.
func TestMountedUnderAPrefix(t *testing.T) {
	f := newFixture(t)
	cfg := f.console.cfg
	cfg.BasePath = "/console/"
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", c.Handler()))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/console/", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `href="/console/static/console.css"`) {
		t.Fatalf("mounted console: status %d, stylesheet link missing", rec.Code)
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/console/static/console.js", nil))
	if rec.Code != 200 {
		t.Fatalf("mounted console script: status %d", rec.Code)
	}
}

func TestConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a snapshot reader: no error")
	}
	if _, err := New(Config{Snapshots: (*snapshots.Store)(nil), BasePath: "console"}); err == nil {
		t.Error("New with a base path without slashes: no error")
	}
}

// TestLastChange: the diff page's default "from" is the newest snapshot
// whose weights differ from the latest's, not merely the previous one.
func TestLastChange(t *testing.T) {
	now := uint64(1_700_000_000_000)
	es := []snapEntry{
		{Snap: fixtureSnapshot(now, 0)},
		{Snap: fixtureSnapshot(now+2000, 3)},
		{Snap: fixtureSnapshot(now+4000, 3)},
		{Snap: fixtureSnapshot(now+6000, 3)},
	}
	if got := lastChange(es); got != 0 {
		t.Errorf("lastChange = %d, want 0 (snapshots 1..3 have the same weights)", got)
	}
	if got := lastChange(es[1:]); got != 1 {
		t.Errorf("without a change: lastChange = %d, want the previous one (1)", got)
	}
	if got := lastChange(es[:1]); got != -1 {
		t.Errorf("one snapshot: lastChange = %d, want -1", got)
	}
}

// TestServe serves a console mounted under a prefix on a listener until
// its context ends: "/" redirects to the prefix, pages answer there, and
// Serve returns nil once cancelled.
func TestServe(t *testing.T) {
	ns := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Publish(ctx, fixtureSnapshot(uint64(time.Now().UnixMilli()), 1)); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Snapshots: store, BasePath: "/console/"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Serve(serveCtx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/console/" || !strings.Contains(string(body), "region-b") {
		t.Errorf("GET / ended at %s with status %d; want the overview at /console/", resp.Request.URL.Path, resp.StatusCode)
	}
	if !strings.Contains(string(body), "no Kafka client") {
		t.Error("a console without Kafka does not say so")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after its context ended", err)
	}
}
