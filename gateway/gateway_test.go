package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/schemas"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start"),
	)
}

// startGateway runs a us-east gateway on a free port until the test
// ends.
func startGateway(t testing.TB, opts ...Opt) (*Gateway, string) {
	t.Helper()
	return startCluster(t, "us-east", opts...)
}

// startCluster runs a gateway of cluster on a free port until the test
// ends: without health checks and with its own registry unless opts say
// otherwise.
func startCluster(t testing.TB, cluster string, opts ...Opt) (*Gateway, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts = append([]Opt{HealthInterval(-1), Registerer(reg), Gatherer(reg)}, opts...)
	g, err := New(cluster, append(opts, Listen("127.0.0.1:0"))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	return g, "http://" + g.Addr()
}

func static(es ...*fakeEngine) []StaticEngine {
	out := make([]StaticEngine, len(es))
	for i, e := range es {
		out[i] = StaticEngine{ID: e.id, URL: e.url()}
	}
	return out
}

// snapshot builds a one-cluster snapshot.
func snapshot(version uint64, cluster string, shedFrac float64, ws map[*fakeEngine]float64) *schemas.WeightSnapshot {
	cw := &schemas.ClusterWeights{Cluster: cluster, ShedFraction: shedFrac}
	for e, w := range ws {
		cw.Weights = append(cw.Weights, &schemas.EngineWeight{EngineId: e.id, EndpointUrl: e.url(), Weight: w})
	}
	return &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: version, CreatedUnixMs: time.Now().UnixMilli(), Clusters: []*schemas.ClusterWeights{cw}}
}

func TestStreamThroughFallback(t *testing.T) { forEachServer(t, testStreamThroughFallback) }

func testStreamThroughFallback(t *testing.T, server string) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	g, base := startGateway(t, HTTPServer(server), Engines(static(a, b)...))
	status, h, body := post(t, context.Background(), base, chatBody(true, "hello"), map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if got := strings.Count(body, "data: "); got != 6 { // 5 tokens, [DONE]: the usage the gateway asked for is not the client's
		t.Errorf("%d data events, want 6:\n%s", got, body)
	}
	if !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("stream does not end with [DONE]: %q", body)
	}
	eng := h.Get(HeaderEngine)
	if eng != "a" && eng != "b" {
		t.Errorf("%s = %q", HeaderEngine, eng)
	}
	if h.Get(HeaderSnapshot) != "0" || h.Get(HeaderRequestID) == "" {
		t.Errorf("headers %v", h)
	}
	if h.Get("Content-Type") != "text/event-stream" {
		t.Errorf("content type %q", h.Get("Content-Type"))
	}
	served := a
	if eng == "b" {
		served = b
	}
	if tp := served.header(0).Get("traceparent"); !strings.HasPrefix(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Errorf("trace context not propagated: %q", tp)
	}
	// Non-streaming.
	status, _, body = post(t, context.Background(), base, chatBody(false, "hello"), nil)
	if status != 200 || !strings.Contains(body, `"chat.completion"`) {
		t.Fatalf("non-stream: %d %s", status, body)
	}
	s := settled(t, g)
	if s.Requests != 2 || s.Succeeded != 2 || s.Cluster != "us-east" {
		t.Errorf("stats %+v", s)
	}
	// Models and health.
	resp, err := http.Get(base + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("models: %v %v", err, resp)
	}
	resp.Body.Close()
}

func TestBadInput(t *testing.T) { forEachServer(t, testBadInput) }

func testBadInput(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), MaxBodyBytes(1024), Models("sim"), PriorityHeader(true))
	big := `{"model":"sim","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	tests := []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   string
		param  string
	}{
		{"invalid json", `{"model":`, nil, 400, "invalid_json", ""},
		{"not an object", `[1,2]`, nil, 400, "invalid_json", ""},
		{"empty", ``, nil, 400, "invalid_json", ""},
		{"missing model", `{"messages":[]}`, nil, 400, "missing_required_parameter", "model"},
		{"model not a string", `{"model":5}`, nil, 400, "invalid_type", "model"},
		{"unknown model", `{"model":"gpt-9"}`, nil, 404, "model_not_found", "model"},
		{"too large", big, nil, 413, "request_too_large", ""},
		{"bad priority", chatBody(false, "x"), map[string]string{HeaderPriority: "urgent"}, 400, "invalid_header", HeaderPriority},
		{"bad session", chatBody(false, "x"), map[string]string{HeaderSession: strings.Repeat("s", 300)}, 400, "invalid_header", HeaderSession},
		{"bad request id", chatBody(false, "x"), map[string]string{HeaderRequestID: "a b"}, 400, "invalid_header", HeaderRequestID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, body := post(t, context.Background(), base, tt.body, tt.hdr)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if h.Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", h.Get("Content-Type"))
			}
			var v struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error.Message == "" || v.Error.Type != "invalid_request_error" {
				t.Fatalf("not an OpenAI error: %s (%v)", body, err)
			}
			if v.Error.Code == nil || *v.Error.Code != tt.code {
				t.Errorf("code %v, want %q", v.Error.Code, tt.code)
			}
			if got := ""; v.Error.Param != nil {
				got = *v.Error.Param
				if got != tt.param {
					t.Errorf("param %q, want %q", got, tt.param)
				}
			} else if tt.param != "" {
				t.Errorf("param missing, want %q", tt.param)
			}
		})
	}
	if n := e.requests.Load(); n != 0 {
		t.Fatalf("%d bad requests reached the engine", n)
	}
	resp, err := http.Get(base + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET: %d", resp.StatusCode)
	}
}

func TestEngine4xxNotRetried(t *testing.T) { forEachServer(t, testEngine4xxNotRetried) }

func testEngine4xxNotRetried(t *testing.T, server string) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	a.setMode("400")
	b.setMode("400")
	g, base := startGateway(t, HTTPServer(server), Engines(static(a, b)...))
	status, _, body := post(t, context.Background(), base, chatBody(false, "x"), nil)
	if status != 400 || !strings.Contains(body, "bad prompt") {
		t.Fatalf("%d %s", status, body)
	}
	if n := a.requests.Load() + b.requests.Load(); n != 1 {
		t.Fatalf("4xx tried on %d engines", n)
	}
	if s := settled(t, g); s.Retries != 0 || s.ClientErrors != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRetryBeforeFirstByte(t *testing.T) { forEachServer(t, testRetryBeforeFirstByte) }

func testRetryBeforeFirstByte(t *testing.T, server string) {
	tests := []struct {
		name, mode string
		opts       []Opt
		reason     string
	}{
		{"5xx", "500", nil, "status_5xx"},
		{"connection refused", "closed", nil, "connect"},
		{"first token timeout", "hang", []Opt{FirstTokenTimeout(200 * time.Millisecond)}, "first_token_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad, good := newFakeEngine(t, "bad"), newFakeEngine(t, "good")
			bad.setMode(tt.mode)
			if tt.mode == "closed" {
				bad.srv.Close()
			}
			g, base := startGateway(t, append(tt.opts, Engines(static(bad, good)...), HTTPServer(server))...)
			for i := 0; i < 6; i++ {
				for _, stream := range []bool{true, false} {
					status, h, body := post(t, context.Background(), base, chatBody(stream, fmt.Sprint(i)), nil)
					if status != 200 || h.Get(HeaderEngine) != "good" {
						t.Fatalf("request %d: %d from %q: %s", i, status, h.Get(HeaderEngine), body)
					}
				}
			}
			s := settled(t, g)
			if s.Failed != 0 || s.Succeeded != 12 {
				t.Fatalf("stats %+v", s)
			}
			if got := counter(g.m.upstreamFails.WithLabelValues("us-east", tt.reason)); got < 1 {
				t.Errorf("no %s failure counted", tt.reason)
			}
			if s.Retries == 0 || s.Retries > 12 {
				t.Errorf("retries %d", s.Retries)
			}
			if tt.mode == "hang" && bad.canceled.Load() == 0 {
				t.Error("timed-out upstream request not canceled")
			}
		})
	}
}

func TestMidStreamFailureAndIdleTimeout(t *testing.T) {
	forEachServer(t, testMidStreamFailureAndIdleTimeout)
}

func testMidStreamFailureAndIdleTimeout(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.setMode("slow") // one event, then silence
	g, base := startGateway(t, HTTPServer(server), Engines(static(e)...), IdleTimeout(200*time.Millisecond))
	status, _, body := post(t, context.Background(), base, chatBody(true, "x"), nil)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	if !strings.Contains(body, "t0 ") || !strings.Contains(body, `"code":"upstream_error"`) {
		t.Fatalf("want the first token then an error event, got %q", body)
	}
	if s := settled(t, g); s.Failed != 1 || s.Retries != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	forEachServer(t, testClientDisconnectCancelsUpstream)
}

func testClientDisconnectCancelsUpstream(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.setMode("slow")
	g, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(chatBody(true, "x")))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, 5*time.Second, func() bool { return e.canceled.Load() == 1 }, "engine request not canceled")
	waitFor(t, 5*time.Second, func() bool { return g.Stats().Canceled == 1 }, "request not counted as canceled")
}

func waitFor(t testing.TB, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// counter reads a counter's value.
func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func asAPIError(err error, target **openai.Error) bool { return errors.As(err, target) }

// TestSharedRegistry: gateways of several clusters can share one
// registry (as in the demo); each keeps its own series.
func TestSharedRegistry(t *testing.T) {
	e := newFakeEngine(t, "a")
	reg := prometheus.NewRegistry()
	g1, b1 := startCluster(t, "one", Engines(static(e)...), Registerer(reg), Gatherer(reg))
	g2, _ := startCluster(t, "two", Engines(static(e)...), Registerer(reg), Gatherer(reg))
	post(t, context.Background(), b1, chatBody(false, "x"), nil)
	if settled(t, g1).Requests != 1 || g2.Stats().Requests != 0 {
		t.Fatalf("%+v %+v", g1.Stats(), g2.Stats())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ages := 0
	for _, mf := range mfs {
		if mf.GetName() == "switchyard_gateway_snapshot_age_seconds" {
			ages = len(mf.GetMetric())
		}
	}
	if ages != 2 {
		t.Fatalf("%d snapshot age series, want 2", ages)
	}
	resp, err := http.Get(b1 + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v", err)
	}
	resp.Body.Close()
}

// settled waits until every request the gateway counted has finished its
// accounting (a client can read the last byte before the handler returns)
// and returns the stats.
func settled(t testing.TB, g *Gateway) Stats {
	t.Helper()
	var s Stats
	waitFor(t, 5*time.Second, func() bool {
		s = g.Stats()
		return s.InFlight == 0 && s.Requests == s.Succeeded+s.Failed+s.Shed+s.ClientErrors+s.Canceled
	}, "requests did not settle")
	return s
}

// TestEngineLingersAfterDone: a response is complete at data: [DONE]; an
// engine that keeps the connection open after it neither holds the client
// past the grace period nor counts as a failure.
func TestEngineLingersAfterDone(t *testing.T) { forEachServer(t, testEngineLingersAfterDone) }

func testEngineLingersAfterDone(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.setMode("linger")
	g, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
	status, _, body := post(t, context.Background(), base, chatBody(true, "x"), nil)
	if status != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("%d %q", status, body)
	}
	if s := settled(t, g); s.Succeeded != 1 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}
