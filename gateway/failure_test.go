package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/budget"
	"github.com/switchyard-llm/switchyard/gateway/outlier"
)

// TestKillEngineMidRun: 8 clients send 400 streaming requests over 3
// engines; one engine dies after 100. No client gets an error status
// (retries before the first byte hide the dead engine), only streams cut
// while in flight on the dead engine end early, the dead engine is
// ejected, and retries stay within the budget.
func TestKillEngineMidRun(t *testing.T) {
	for _, tt := range []struct {
		name        string
		consecutive int
	}{
		{"ejection", 0},        // the default: cut streams eject the engine
		{"no ejection", 10000}, // every pick of the dead engine is retried
	} {
		t.Run(tt.name, func(t *testing.T) {
			forEachServer(t, func(t *testing.T, server string) { killEngineMidRun(t, server, tt.consecutive) })
		})
	}
}

func killEngineMidRun(t *testing.T, server string, consecutive int) {
	a, b, c := newFakeEngine(t, "a"), newFakeEngine(t, "b"), newFakeEngine(t, "c")
	for _, e := range []*fakeEngine{a, b, c} {
		e.delay = time.Millisecond
	}
	snap := snapshot(1, "us-east", 0, map[*fakeEngine]float64{a: 0.34, b: 0.33, c: 0.33})
	g, base := startGateway(t, InitialSnapshot(snap), HTTPServer(server), Outlier(outlier.Config{Consecutive: consecutive}))
	const total, clients = 400, 8
	var sent, cut, badStatus atomic.Int64
	var once sync.Once
	var inflightAtKill int64
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := sent.Add(1)
				if n > total {
					return
				}
				if n == 100 {
					once.Do(func() {
						st, _ := g.pool.Lookup("c")
						inflightAtKill = st.InFlight()
						c.srv.Listener.Close()
						c.srv.CloseClientConnections()
					})
				}
				status, _, body := post(t, context.Background(), base, chatBody(true, "conversation "+string(rune('a'+n%26))), nil)
				switch {
				case status != 200:
					badStatus.Add(1)
					t.Errorf("status %d: %s", status, body)
				case !strings.HasSuffix(body, "data: [DONE]\n\n"):
					cut.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	s := settled(t, g)
	t.Logf("stats %+v, cut streams %d (in flight on the killed engine: %d)", s, cut.Load(), inflightAtKill)
	if badStatus.Load() != 0 {
		t.Fatalf("%d clients saw an error status", badStatus.Load())
	}
	if cut.Load() > inflightAtKill+clients {
		t.Errorf("%d streams cut, more than could be in flight on the killed engine", cut.Load())
	}
	if max := uint64(0.1*float64(s.Requests)) + 10; s.Retries > max {
		t.Errorf("%d retries over budget %d", s.Retries, max)
	}
	if consecutive > 100 && s.Retries == 0 {
		t.Error("no retries after an engine died")
	}
	if consecutive == 0 && counter(g.m.ejections.WithLabelValues("us-east", "c")) < 1 {
		t.Error("dead engine not ejected")
	}
}

// TestRetryBudgetBoundsStorm: every engine fails; retries stay within the
// budget (ratio 0.1 of 60 requests plus a floor of 2).
func TestRetryBudgetBoundsStorm(t *testing.T) {
	a, b, c := newFakeEngine(t, "a"), newFakeEngine(t, "b"), newFakeEngine(t, "c")
	for _, e := range []*fakeEngine{a, b, c} {
		e.setMode("500")
	}
	g, base := startGateway(t, Engines(static(a, b, c)...), RetryBudget(budget.Config{Floor: 2}),
		Outlier(outlier.Config{Consecutive: 1000})) // keep every engine in play
	for i := 0; i < 60; i++ {
		if status, _, body := post(t, context.Background(), base, chatBody(false, "x"), nil); status != 502 || !strings.Contains(body, `"upstream_error"`) {
			t.Fatalf("%d %s", status, body)
		}
	}
	if s := settled(t, g); s.Retries > 8 || s.Failed != 60 {
		t.Fatalf("stats %+v: retries over budget 0.1·60+2", s)
	}
	if n := a.requests.Load() + b.requests.Load() + c.requests.Load(); n > 68 {
		t.Fatalf("%d upstream attempts for 60 requests", n)
	}
}

// TestOverloadSheds: with every engine at its in-flight cap the gateway
// answers 429 at once with Retry-After and an OpenAI error.
func TestOverloadSheds(t *testing.T) { forEachServer(t, testOverloadSheds) }

func testOverloadSheds(t *testing.T, server string) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	a.setMode("block")
	b.setMode("block")
	g, base := startGateway(t, HTTPServer(server), Engines(static(a, b)...), MaxInFlightPerEngine(2))
	var wg sync.WaitGroup
	statuses := make(chan int, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _, _ := post(t, context.Background(), base, chatBody(true, "x"), nil)
			statuses <- s
		}()
	}
	waitFor(t, 5*time.Second, func() bool { return g.Stats().InFlight == 4 }, "4 requests not in flight")
	status, h, body := post(t, context.Background(), base, chatBody(true, "x"), map[string]string{HeaderPriority: "high"})
	if status != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, `"rate_limit_exceeded"`) {
		t.Fatalf("overload: %d %v %s", status, h, body)
	}
	close(a.release)
	close(b.release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("blocked request ended %d", s)
		}
	}
	if s := settled(t, g); s.Shed != 1 || s.Succeeded != 4 {
		t.Errorf("stats %+v", s)
	}
}

// TestSnapshotShedsLowestPriorityFirst: a snapshot shedding everything
// answers 429; one shedding 40% of a half-low, half-high mix sheds the low
// class (after the gateway has measured the mix) and none of the high.
func TestSnapshotShedsLowestPriorityFirst(t *testing.T) {
	forEachServer(t, testSnapshotShedsLowestPriorityFirst)
}

func testSnapshotShedsLowestPriorityFirst(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	_, base := startGateway(t, HTTPServer(server), InitialSnapshot(snapshot(1, "us-east", 1, map[*fakeEngine]float64{e: 0})))
	status, h, _ := post(t, context.Background(), base, chatBody(false, "x"), nil)
	if status != 429 || h.Get("Retry-After") != "1" {
		t.Fatalf("shed all: %d", status)
	}

	g, base := startGateway(t, HTTPServer(server), InitialSnapshot(snapshot(1, "us-east", 0.4, map[*fakeEngine]float64{e: 0.6})), PriorityHeader(true))
	// Poll until the measured mix has converged: 20 pairs in a row with
	// every low request shed and every high one served.
	deadline := time.Now().Add(20 * time.Second)
	streak := 0
	for streak < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("shedding did not converge to low-first; stats %+v", g.Stats())
		}
		low, _, _ := post(t, context.Background(), base, chatBody(false, "x"), map[string]string{HeaderPriority: "low"})
		high, _, _ := post(t, context.Background(), base, chatBody(false, "x"), map[string]string{HeaderPriority: "high"})
		if high == 429 && g.shedder.Probability(2) > 0 {
			t.Fatalf("high priority shed with probability %v", g.shedder.Probability(2))
		}
		if low == 429 && high == 200 {
			streak++
		} else {
			streak = 0
		}
	}
}

// stubTransport answers every request with a canned streaming response
// and counts calls.
type stubTransport struct{ calls atomic.Int64 }

func (s *stubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.calls.Add(1)
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")), Request: r}, nil
}

// FuzzRequest: any body and header values, for chat or (responses) the
// Responses API, get either the engine's answer or an OpenAI-style 4xx
// JSON error, and a 4xx never reached the engine.
func FuzzRequest(f *testing.F) {
	f.Add([]byte(chatBody(true, "hi")), "", "", false)
	f.Add([]byte(`{"model":"sim","prompt":"x","user":"u"}`), "low", "s1", false)
	f.Add([]byte(`{"model":`), "", "", false)
	f.Add([]byte(`{"model":null}`), "3", "", false)
	f.Add([]byte("\x00\xff"), "high", "\n", false)
	f.Add([]byte(`{"model":"sim","messages":[1,2,{"a":[]}],"stream":true}`), "", "", false)
	f.Add([]byte(`{"model":"sim","input":"hi","stream":true,"max_output_tokens":4}`), "", "", true)
	f.Add([]byte(`{"model":"sim","input":[{"role":"user","content":"hi"}],"instructions":"x","previous_response_id":"r"}`), "", "s", true)
	f.Add([]byte(`{"model":"sim","input":5,"max_output_tokens":0}`), "", "", true)
	stub := &stubTransport{}
	g, err := New("c", Engines(StaticEngine{ID: "a", URL: "http://engine"}), Transport(stub), MaxBodyBytes(4096), HealthInterval(-1), PriorityHeader(true))
	if err != nil {
		f.Fatal(err)
	}
	h := g.Handler()
	f.Fuzz(func(t *testing.T, body []byte, prio, session string, responses bool) {
		path := pathChat
		if responses {
			path = pathResponses
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		if prio != "" {
			req.Header[HeaderPriority] = []string{prio}
		}
		if session != "" {
			req.Header[HeaderSession] = []string{session}
		}
		before := stub.calls.Load()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		called := stub.calls.Load() != before
		switch {
		case rec.Code == 200:
			if !called {
				t.Fatal("200 without the engine")
			}
		case rec.Code >= 400 && rec.Code < 500:
			if called {
				t.Fatalf("%d but the engine was called", rec.Code)
			}
			var v struct {
				Error *struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.Error == nil || v.Error.Message == "" || v.Error.Type == "" {
				t.Fatalf("%d with a non-OpenAI body %q", rec.Code, rec.Body.String())
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	})
}
