package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/schemas"
)

// runDraining runs a gateway (admin listener on its own port, so that
// readiness stays observable after the API listener closes) until the
// test calls stop, the SIGTERM; done is closed when Run returned, with
// its error in *runErr.
func runDraining(t *testing.T, opts ...Opt) (g *Gateway, base, admin string, stop context.CancelFunc, done <-chan struct{}, runErr *error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts = append([]Opt{HealthInterval(-1), Registerer(reg), Gatherer(reg), ArrivalRecordAfter(-1),
		Listen("127.0.0.1:0"), AdminListen("127.0.0.1:0")}, opts...)
	g, err := New("us-east", opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	runErr = new(error)
	go func() { *runErr = g.Run(ctx); close(ch) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
	select {
	case <-g.Ready():
	case <-ch:
		t.Fatalf("Run: %v", *runErr)
	}
	return g, "http://" + g.Addr(), "http://" + g.AdminAddr(), cancel, ch, runErr
}

// openStream starts a streaming chat request on its own connection and
// returns its SSE data lines as they arrive; the channel closes at the
// end of the body.
func openStream(t *testing.T, base string) <-chan string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequest(http.MethodPost, base+pathChat, strings.NewReader(chatBody(true, "drain")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("stream request: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream request: status %d", resp.StatusCode)
	}
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data:") {
				lines <- l
			}
		}
	}()
	return lines
}

// rest collects the stream's remaining data lines (within d).
func rest(t *testing.T, lines <-chan string, d time.Duration) []string {
	t.Helper()
	var out []string
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return out
			}
			out = append(out, l)
		case <-timeout:
			t.Fatalf("stream not ended within %v (%d lines so far)", d, len(out))
		}
	}
}

// freshPost sends a non-streaming chat request on a new connection:
// its status, or the connection's error.
func freshPost(base string) (int, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post(base+pathChat, "application/json", strings.NewReader(chatBody(false, "new")))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// nextEvent returns the next routing event that is not an arrival
// record.
func nextEvent(t *testing.T, sink eventSink) *schemas.RoutingEvent {
	t.Helper()
	for {
		select {
		case ev := <-sink:
			if ev.Status != schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS {
				return ev
			}
		default:
			t.Fatal("no routing event emitted by the time Run returned")
			return nil
		}
	}
}

// TestDrainLetsStreamsFinish: on the end of Run's ctx (SIGTERM) a stream
// in flight runs to data: [DONE]; readiness fails at once, while a new
// connection is still accepted and served during the drain delay; after
// the delay connections are refused; Run returns once the stream ended,
// its routing event emitted.
func TestDrainLetsStreamsFinish(t *testing.T) { forEachServer(t, testDrainLetsStreamsFinish) }

func testDrainLetsStreamsFinish(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.tokens, e.delay = 20, 75*time.Millisecond // a 1.5s stream
	const delay = time.Second
	sink := make(eventSink, 64)
	_, base, admin, stop, done, runErr := runDraining(t, HTTPServer(server), Engines(static(e)...), Events(sink),
		DrainDelay(delay), DrainTimeout(10*time.Second))
	if r := readyReason(admin); r != "no snapshot yet" {
		t.Fatalf("readiness before the drain: reason %q, want no snapshot yet", r)
	}
	lines := openStream(t, base)
	if l := <-lines; !strings.Contains(l, "t0") {
		t.Fatalf("first event: %q", l)
	}

	stop()
	stopped := time.Now()
	waitFor(t, 2*time.Second, func() bool { return readyReason(admin) == "draining" }, "readiness failing with reason draining")
	if s, err := freshPost(base); err != nil || s != http.StatusOK {
		t.Fatalf("new connection during the drain delay: status %d, err %v; want 200", s, err)
	}
	if since := time.Since(stopped); since >= delay {
		t.Fatalf("checks took %v, past the drain delay %v: inconclusive", since, delay)
	}

	got := rest(t, lines, 10*time.Second)
	if n := len(got); n == 0 || got[n-1] != "data: [DONE]" {
		t.Fatalf("stream did not end at [DONE] (%d more lines, last %q)", n, last(got))
	}
	if n := len(got) - 1; n != e.tokens-1 {
		t.Errorf("got %d more chunks after the first, want %d", n, e.tokens-1)
	}
	waitFor(t, 5*time.Second, func() bool {
		_, err := freshPost(base)
		return err != nil
	}, "new connections refused after the drain delay")
	select {
	case <-done:
		if *runErr != nil {
			t.Fatalf("Run: %v", *runErr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the stream ended")
	}
	if took := time.Since(stopped); took < delay {
		t.Errorf("Run returned %v after the signal, before the drain delay %v", took, delay)
	}
	var evs []*schemas.RoutingEvent
	for len(sink) > 0 {
		evs = append(evs, nextEvent(t, sink))
	}
	var streamed bool
	for _, ev := range evs {
		if ev.Stream && ev.Status == schemas.RequestStatus_REQUEST_STATUS_OK && ev.OutputTokens == uint32(e.tokens) {
			streamed = true
		}
	}
	if !streamed {
		t.Errorf("no OK routing event of the drained stream among %d events", len(evs))
	}
}

// TestDrainTimeoutCutsStreams: a stream still running at the drain
// timeout ends with an OpenAI error event (code gateway_shutdown), not
// cut silently; Run returns soon after the timeout, the stream's routing
// event (an error) emitted and the engine's request canceled.
func TestDrainTimeoutCutsStreams(t *testing.T) { forEachServer(t, testDrainTimeoutCutsStreams) }

func testDrainTimeoutCutsStreams(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.tokens, e.delay = 1000, 20*time.Millisecond // a 20s stream
	const timeout = 1500 * time.Millisecond
	sink := make(eventSink, 64)
	_, base, _, stop, done, runErr := runDraining(t, HTTPServer(server), Engines(static(e)...), Events(sink),
		DrainDelay(100*time.Millisecond), DrainTimeout(timeout))
	lines := openStream(t, base)
	<-lines
	stop()
	stopped := time.Now()
	got := rest(t, lines, 10*time.Second)
	ended := time.Since(stopped)
	if ended < timeout-100*time.Millisecond {
		t.Errorf("stream ended %v after the signal, before the drain timeout %v", ended, timeout)
	}
	if n := len(got); n == 0 || !strings.Contains(got[n-1], `"code":"gateway_shutdown"`) {
		t.Fatalf("stream cut at the drain timeout without the error event (%d lines, last %q)", n, last(got))
	}
	for _, l := range got {
		if l == "data: [DONE]" {
			t.Fatal("a cut stream sent [DONE]")
		}
	}
	select {
	case <-done:
		if *runErr != nil {
			t.Fatalf("Run: %v", *runErr)
		}
	case <-time.After(timeout + cutGrace + 2*time.Second):
		t.Fatal("Run did not return after the drain timeout")
	}
	ev := nextEvent(t, sink)
	if ev.Status != schemas.RequestStatus_REQUEST_STATUS_ERROR || !ev.Stream {
		t.Errorf("routing event of the cut stream: status %v stream %v, want ERROR, true", ev.Status, ev.Stream)
	}
	waitFor(t, 2*time.Second, func() bool { return e.canceled.Load() == 1 }, "the engine's request canceled")
}

func readyReason(admin string) string {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get(admin + "/health/ready")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable {
		return ""
	}
	if i := strings.Index(string(b), `"reason":"`); i >= 0 {
		r := string(b)[i+len(`"reason":"`):]
		return r[:strings.IndexByte(r, '"')]
	}
	return ""
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
