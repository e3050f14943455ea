package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// eventSink collects routing events.
type eventSink chan *schemas.RoutingEvent

func (s eventSink) Emit(_ string, m proto.Message) bool {
	select {
	case s <- m.(*schemas.RoutingEvent):
		return true
	default:
		return false
	}
}

func (s eventSink) next(t *testing.T) *schemas.RoutingEvent {
	t.Helper()
	select {
	case ev := <-s:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no routing event")
		return nil
	}
}

// engineStream is what e sends for body, asked directly.
func engineStream(t *testing.T, e *fakeEngine, body string) string {
	t.Helper()
	resp, err := http.Post(e.url()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUsageAlwaysLearned: the gateway asks a streaming engine for usage
// when the client did not, and the client gets exactly the stream it
// would have got without the gateway's question; a client that asked
// gets the engine's bytes unchanged. Either way the event has the
// engine's usage, a TTFT, the measured round trip and the engine's TTFT.
func TestUsageAlwaysLearned(t *testing.T) { forEachServer(t, testUsageAlwaysLearned) }

func testUsageAlwaysLearned(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.delay = time.Millisecond
	sink := make(eventSink, 16)
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), Events(sink))
	plain := chatBody(true, "hello")
	asked := `{"model":"sim","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`
	withUsage := engineStream(t, e, asked)
	usageEvent := withUsage[strings.Index(withUsage, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"sim","choices":[],"usage"`):strings.Index(withUsage, "data: [DONE]")]
	if usageEvent == "" || !strings.HasSuffix(usageEvent, "\n\n") {
		t.Fatalf("engine stream without a usage event: %q", withUsage)
	}
	without := strings.Replace(withUsage, usageEvent, "", 1)
	if direct := engineStream(t, e, plain); direct != without {
		t.Fatalf("the engine's stream without usage is not the one with it less the usage event:\n%q\n%q", direct, without)
	}
	for _, tt := range []struct {
		name, body, want string
	}{
		{"not asked", plain, without},
		{"asked", asked, withUsage},
	} {
		n := len(e.lastBodies)
		status, _, got := post(t, context.Background(), base, tt.body, nil)
		if status != 200 || got != tt.want {
			t.Fatalf("%s: status %d, client got\n%q\nwant\n%q", tt.name, status, got, tt.want)
		}
		e.mu.Lock()
		sent := string(e.lastBodies[n])
		e.mu.Unlock()
		if !strings.Contains(sent, `"include_usage":true`) {
			t.Errorf("%s: engine was not asked for usage: %s", tt.name, sent)
		}
		ev := sink.next(t)
		if ev.GetPromptTokens() != 11 || ev.GetCachedTokens() != 4 || ev.GetOutputTokens() != 5 || !ev.GetStream() ||
			ev.GetTtftMs() <= 0 || ev.GetNetworkRttMs() <= 0 || ev.GetEngineTtftMs() > ev.GetTtftMs() || ev.GetMeanTbotMs() <= 0 {
			t.Errorf("%s: event %v", tt.name, ev)
		}
	}
	// A whole response has tokens and e2e but no TTFT.
	if status, _, body := post(t, context.Background(), base, chatBody(false, "hello"), nil); status != 200 {
		t.Fatalf("non-stream: %d %s", status, body)
	}
	ev := sink.next(t)
	if ev.GetStream() || ev.GetTtftMs() != 0 || ev.GetEngineTtftMs() != 0 || ev.GetMeanTbotMs() != 0 || ev.GetE2EMs() <= 0 ||
		ev.GetPromptTokens() != 11 || ev.GetOutputTokens() != 5 {
		t.Errorf("non-stream event %v", ev)
	}
	e.mu.Lock()
	sent := string(e.lastBodies[len(e.lastBodies)-1])
	e.mu.Unlock()
	if strings.Contains(sent, "stream_options") {
		t.Errorf("a non-streaming request was changed: %s", sent)
	}
}

// TestSaturatedEngineRetried: an engine that answers 429 or 503 is
// skipped for another one and penalized; only when every attempt meets
// a saturated engine does the client get the last answer, as an
// OpenAI-style error with the engine's Retry-After.
func TestSaturatedEngineRetried(t *testing.T) { forEachServer(t, testSaturatedEngineRetried) }

func testSaturatedEngineRetried(t *testing.T, server string) {
	for _, code := range []string{"429", "503"} {
		t.Run(code, func(t *testing.T) {
			a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
			a.setMode(code)
			sink := make(eventSink, 64)
			g, base := startGateway(t, HTTPServer(server), Engines(static(a, b)...), Events(sink))
			for i := 0; a.requests.Load() == 0; i++ {
				if i == 20 {
					t.Fatal("the saturated engine got no request in 20")
				}
				status, h, body := post(t, context.Background(), base, chatBody(true, fmt.Sprint("hi ", i)), nil)
				if status != 200 || h.Get(HeaderEngine) != "b" {
					t.Fatalf("status %d from %q: %s", status, h.Get(HeaderEngine), body)
				}
				ev := sink.next(t)
				if ev.GetStatus() != statusOK || ev.GetEngineId() != "b" {
					t.Fatalf("event %v", ev)
				}
				if a.requests.Load() > 0 && (ev.GetAttempts() != 2 || ev.GetDecisionReason() != "retry") {
					t.Fatalf("retried request's event %v", ev)
				}
			}
			st, _ := g.pool.Lookup("a")
			if st.Penalty() <= 0 || st.Ejected() {
				t.Errorf("saturated engine: penalty %v, ejected %v", st.Penalty(), st.Ejected())
			}
			b.setMode(code)
			status, h, body := post(t, context.Background(), base, chatBody(true, "hi"), nil)
			want, wantCode := 429, `"code":"rate_limit_exceeded"`
			if code == "503" {
				want, wantCode = 503, `"code":"engine_overloaded"`
			}
			if status != want || h.Get("Retry-After") != "7" || !strings.Contains(body, wantCode) {
				t.Fatalf("all saturated: %d Retry-After %q %s", status, h.Get("Retry-After"), body)
			}
			settled(t, g)
		})
	}
}

// TestPickerAccounting: the gateway's queued prefill on an engine holds
// the request's prompt until its first token and is released after;
// what the gateway learned of an engine is forgotten when its signals
// say it is down.
func TestPickerAccounting(t *testing.T) { forEachServer(t, testPickerAccounting) }

func testPickerAccounting(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.delay = 2 * time.Millisecond
	g, base := startGateway(t, HTTPServer(server), InitialSnapshot(snapshot(1, "us-east", 0, map[*fakeEngine]float64{e: 1})))
	st, _ := g.pool.Lookup("a")
	prompt := strings.Repeat("p", 4000)
	e.setMode("block")
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, context.Background(), base, chatBody(true, prompt), nil)
	}()
	waitFor(t, 5*time.Second, func() bool { return st.Prefill() > 0 }, "queued prefill while waiting for the first token")
	if p := st.Prefill(); p < 900 || p > 1100 {
		t.Errorf("queued prefill %d tokens, want about %d (4 bytes a token)", p, (len(prompt)+4)/4)
	}
	e.setMode("")
	close(e.release)
	<-done
	settled(t, g)
	if p := st.Prefill(); p != 0 {
		t.Errorf("queued prefill %d after the request", p)
	}
	if _, _, _, _, knownTBOT := st.Model(time.Now().UnixMilli()); !knownTBOT {
		t.Fatal("no TBOT learned from a streamed request")
	}
	sig, err := proto.Marshal(&schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "a", Health: schemas.Health_HEALTH_UNHEALTHY, EventTimeUnixMs: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	g.applySignal(sig)
	if _, _, _, _, knownTBOT := st.Model(time.Now().UnixMilli()); knownTBOT || !st.SignalDown() {
		t.Error("an engine that went down is still modelled")
	}
}

// TestHealthCheckMeasuresRTT: health checks give each engine a round
// trip.
func TestHealthCheckMeasuresRTT(t *testing.T) {
	e := newFakeEngine(t, "a")
	g, _ := startGateway(t, Engines(static(e)...), HealthInterval(5*time.Millisecond), Transport(http.DefaultTransport))
	st, _ := g.pool.Lookup("a")
	waitFor(t, 5*time.Second, func() bool { return g.engineRTT(st, e.url()) > 0 }, "a round trip from health checks")
	if d := g.engineRTT(st, e.url()); d > time.Second {
		t.Errorf("loopback round trip %v", d)
	}
}

// TestEngineRefusingStreamOptions: an engine that rejects the
// stream_options the gateway adds still serves streaming clients that did
// not ask for usage: the refused request is sent again at once with the
// client's own body, the engine is remembered (its next requests go
// without the addition, one engine request each), and output tokens are
// counted from the stream.
func TestEngineRefusingStreamOptions(t *testing.T) { forEachServer(t, testEngineRefusingStreamOptions) }

func testEngineRefusingStreamOptions(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.setMode("nostreamopts")
	sink := make(eventSink, 16)
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), Events(sink))
	plain := chatBody(true, "hello")
	want := engineStream(t, e, plain)
	for k := range 2 {
		before := e.requests.Load()
		status, _, got := post(t, context.Background(), base, plain, nil)
		if status != 200 || got != want {
			t.Fatalf("request %d: status %d, client got\n%q\nwant\n%q", k, status, got, want)
		}
		wantRequests := int64(2) // refused, then the client's own body
		if k > 0 {
			wantRequests = 1 // remembered
		}
		if n := e.requests.Load() - before; n != wantRequests {
			t.Fatalf("request %d took %d engine requests, want %d", k, n, wantRequests)
		}
		if ev := sink.next(t); ev.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_OK || ev.GetOutputTokens() != 5 {
			t.Fatalf("request %d: event %v", k, ev)
		}
	}
}
