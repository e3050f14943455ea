package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	gw "github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// recorder sits between the gateway and an engine and keeps the request
// bodies the engine received, by X-Request-Id.
type recorder struct {
	mu     sync.Mutex
	bodies map[string][]byte
}

func (rc *recorder) body(id string) []byte {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.bodies[id]
}

// recordingProxy starts a reverse proxy to target that records bodies
// into rc.
func recordingProxy(t *testing.T, target string, rc *recorder) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // a client's abort is expected
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if id := r.Header.Get(gw.HeaderRequestID); id != "" {
			rc.mu.Lock()
			rc.bodies[id] = b
			rc.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runGateway runs g until ctx ends (checked at cleanup).
func runGateway(t *testing.T, ctx context.Context, g *gw.Gateway) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("gateway Run: %v", err)
		}
	})
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("gateway Run: %v", err)
	}
}

// sdkReport is check.js's output.
type sdkReport struct {
	SDK             string                     `json:"sdk"`
	Version         string                     `json:"version"`
	PassthroughBody map[string]json.RawMessage `json:"passthrough_body"`
	Checks          []struct {
		Name   string          `json:"name"`
		OK     bool            `json:"ok"`
		MS     int             `json:"ms"`
		Error  string          `json:"error"`
		Detail json.RawMessage `json:"detail"`
	} `json:"checks"`
}

// TestOpenAINodeSDK runs examples/openai-node/check.js (the official
// OpenAI Node SDK, `npm ci` in .ci/run) against a gateway in front of two
// enginesim engines (and, for the same_* checks, directly against one of
// them: the gateway must answer every call as the engine does, n,
// logprobs, tools, embeddings, rerank, score, tokenize, the Responses
// API and the engine's own 400s included), a gateway that sheds everything (its snapshot's shed
// fraction is 1) and one whose only engine answers 429: chat, legacy
// completions and the Responses API, streamed with and without usage
// (and the SDK's stream helpers), models, the SDK's typed
// errors, 429 retries by Retry-After, fields passed through to the engine
// untouched, and an abort mid-stream that leaves nothing in flight at the
// gateway or the engines. Skipped without node or its packages outside CI;
// in CI (CI set) that is a failure.
func TestOpenAINodeSDK(t *testing.T) {
	dir, err := filepath.Abs("../../examples/openai-node")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node or examples/openai-node/node_modules missing in CI (.ci/run installs them): %v", err)
		}
		t.Skipf("node or `npm ci` in examples/openai-node missing: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	rc := &recorder{bodies: map[string][]byte{}}
	var engines []gw.StaticEngine
	var engineMetrics, engineBases []string
	ids := []string{"sim-a", "sim-b"}
	for i, base := range startEngines(t, ctx, cancel, ids...) {
		engineBases = append(engineBases, base)
		engines = append(engines, gw.StaticEngine{ID: ids[i], URL: recordingProxy(t, base, rc)})
		engineMetrics = append(engineMetrics, base+"/metrics")
	}
	reg := prometheus.NewRegistry()
	g, err := gw.New("local", gw.Listen("127.0.0.1:0"), gw.Engines(engines...), gw.HealthInterval(-1), gw.Registerer(reg), gw.Gatherer(reg))
	if err != nil {
		t.Fatal(err)
	}
	runGateway(t, ctx, g)

	// A gateway whose snapshot sheds all of its cluster's traffic.
	shedSnap := &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: 1, CreatedUnixMs: time.Now().UnixMilli(),
		Clusters: []*schemas.ClusterWeights{{Cluster: "local", ShedFraction: 1,
			Weights: []*schemas.EngineWeight{{EngineId: engines[0].ID, EndpointUrl: engines[0].URL, Weight: 0}}}}}
	shedReg := prometheus.NewRegistry()
	shedGW, err := gw.New("local", gw.Listen("127.0.0.1:0"), gw.InitialSnapshot(shedSnap), gw.HealthInterval(-1), gw.Registerer(shedReg), gw.Gatherer(shedReg))
	if err != nil {
		t.Fatal(err)
	}
	runGateway(t, ctx, shedGW)
	waitStatus(t, ctx, "http://"+shedGW.Addr()+"/v1/chat/completions", http.StatusTooManyRequests)

	// A gateway whose only engine is saturated (vLLM's 429).
	saturated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"too many requests","type":"rate_limit_error","param":null,"code":null}}`)
	}))
	t.Cleanup(saturated.Close)
	satReg := prometheus.NewRegistry()
	satGW, err := gw.New("local", gw.Listen("127.0.0.1:0"), gw.Engines(gw.StaticEngine{ID: "busy", URL: saturated.URL}), gw.HealthInterval(-1), gw.Registerer(satReg), gw.Gatherer(satReg))
	if err != nil {
		t.Fatal(err)
	}
	runGateway(t, ctx, satGW)

	// A gateway whose only engine's connection breaks mid-stream, and
	// which answers errors in vLLM's older flat shape.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get(gw.HeaderRequestID) == "sdk-flat-error" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"object":"error","message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":"max_tokens","code":400}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"half"},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not a clean end
		}
		conn.Close()
	}))
	t.Cleanup(broken.Close)
	brokenReg := prometheus.NewRegistry()
	brokenGW, err := gw.New("local", gw.Listen("127.0.0.1:0"), gw.Engines(gw.StaticEngine{ID: "broken", URL: broken.URL}), gw.HealthInterval(-1), gw.Registerer(brokenReg), gw.Gatherer(brokenReg))
	if err != nil {
		t.Fatal(err)
	}
	runGateway(t, ctx, brokenGW)

	base := "http://" + g.Addr()
	cmd := exec.CommandContext(ctx, node, "check.js",
		"--base-url", base+"/v1", "--model", engineserver.DefaultModel, "--engine-base-url", engineBases[0]+"/v1",
		"--metrics-url", base+"/metrics", "--engine-metrics", strings.Join(engineMetrics, ","),
		"--shed-base-url", "http://"+shedGW.Addr()+"/v1", "--saturated-base-url", "http://"+satGW.Addr()+"/v1",
		"--broken-base-url", "http://"+brokenGW.Addr()+"/v1")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep sdkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("node: %v (%v)\nstdout: %s\nstderr: %s", runErr, err, stdout.String(), stderr.String())
	}
	t.Logf("%s %s", rep.SDK, rep.Version)
	seen := map[string]bool{}
	for _, c := range rep.Checks {
		seen[c.Name] = true
		if !c.OK {
			t.Errorf("%s: %s (%s)", c.Name, c.Error, c.Detail)
		} else {
			t.Logf("%s ok in %d ms: %s", c.Name, c.MS, c.Detail)
		}
	}
	for _, name := range []string{"chat_nonstream", "chat_stream", "chat_stream_usage", "chat_stream_helper", "completions_nonstream",
		"completions_stream", "completions_stream_usage", "models_list", "error_model_unknown", "error_chat_model_unknown",
		"error_malformed_json", "error_unknown_route", "passthrough", "passthrough_stream",
		"rate_limited_shed", "rate_limited_engine", "chat_stream_usage_false", "stream_broken", "error_engine_flat", "concurrent", "abort_nonstream", "abort_mid_stream",
		"responses_nonstream", "responses_stream", "responses_stream_helper",
		// The gateway answers as the engine does (check.js sameAnswers).
		"same_chat_n", "same_chat_n_stream", "same_chat_n_stream_no_usage", "same_chat_logprobs", "same_chat_logprobs_stream", "same_completions_n_logprobs",
		"same_chat_tools", "same_chat_tools_stream", "same_chat_tool_result", "same_embeddings", "same_embeddings_float", "same_embeddings_tokens",
		"same_responses", "same_responses_stream", "same_responses_tools", "same_rerank", "same_score", "same_tokenize", "same_detokenize",
		"same_chat_no_model", "same_chat_no_messages", "same_chat_empty_messages", "same_chat_n_zero", "same_chat_max_tokens_zero", "same_chat_bad_logprobs",
		"same_responses_no_input", "same_responses_bad_max_output_tokens", "same_embeddings_no_input", "same_embeddings_unknown_model", "same_rerank_no_query"} {
		if !seen[name] {
			t.Errorf("check %s did not run", name)
		}
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("node: %v\n%s", runErr, stderr.String())
	}

	// Every field the client sent reached the engine as sent.
	for _, id := range []string{"sdk-passthrough", "sdk-passthrough-stream"} {
		got := rc.body(id)
		if got == nil {
			t.Errorf("%s: the engine got no request", id)
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(got, &fields); err != nil {
			t.Fatalf("%s: %v: %s", id, err, got)
		}
		for k, want := range rep.PassthroughBody {
			if !jsonEqual(t, fields[k], want) {
				t.Errorf("%s: the engine got %s = %s, the client sent %s", id, k, fields[k], want)
			}
		}
	}

	// The aborted requests ended as canceled and nothing is left in flight.
	if s := g.Stats(); s.InFlight != 0 || s.Canceled < 2 {
		t.Errorf("stats after the abort: %+v", s)
	}
}

// jsonEqual compares two JSON values by meaning.
func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// waitStatus polls url with a chat request until it answers status.
func waitStatus(t *testing.T, ctx context.Context, url string, status int) {
	t.Helper()
	body := `{"model":"` + engineserver.DefaultModel + `","messages":[{"role":"user","content":"hi"}]}`
	deadline := time.Now().Add(5 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d in time (last: %v)", url, status, err)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}
