package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEngine is a small OpenAI-compatible engine for tests.
type fakeEngine struct {
	id       string
	srv      *httptest.Server
	requests atomic.Int64
	tokens   int
	// mode: "" ok, "500" fails, "429" and "503" are saturated (with
	// Retry-After: 7), "hang" waits for the client to go away before the
	// first byte, "slow" sleeps between events (via delay).
	mode    atomic.Value
	delay   time.Duration // between events
	release chan struct{} // "block" mode waits for it

	mu         sync.Mutex
	headers    []http.Header
	canceled   atomic.Int64
	lastBodies [][]byte
}

func newFakeEngine(t testing.TB, id string) *fakeEngine {
	t.Helper()
	e := &fakeEngine{id: id, tokens: 5, release: make(chan struct{})}
	e.mode.Store("")
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEngine) url() string { return e.srv.URL }

func (e *fakeEngine) setMode(m string) { e.mode.Store(m) }

func (e *fakeEngine) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		if e.mode.Load() == "500" {
			w.WriteHeader(500)
			return
		}
		fmt.Fprint(w, "ok")
		return
	}
	if r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"sim","object":"model","owned_by":%q}]}`, e.id)
		return
	}
	e.requests.Add(1)
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.headers = append(e.headers, r.Header.Clone())
	e.lastBodies = append(e.lastBodies, body)
	e.mu.Unlock()
	switch e.mode.Load() {
	case "500":
		http.Error(w, `{"error":{"message":"boom"}}`, 500)
		return
	case "429", "503":
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(map[string]int{"429": 429, "503": 503}[e.mode.Load().(string)])
		fmt.Fprint(w, `{"error":{"message":"busy","type":"rate_limit_error","param":null,"code":null}}`)
		return
	case "nostreamopts": // an engine that knows no stream_options
		if bytes.Contains(body, []byte("stream_options")) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			fmt.Fprint(w, `{"object":"error","message":"1 validation error: stream_options: extra fields not permitted","type":"BadRequestError","code":400}`)
			return
		}
	case "400":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		fmt.Fprint(w, `{"error":{"message":"bad prompt","type":"invalid_request_error","param":null,"code":null}}`)
		return
	case "hang":
		<-r.Context().Done()
		e.canceled.Add(1)
		return
	case "block":
		select {
		case <-e.release:
		case <-r.Context().Done():
			e.canceled.Add(1)
			return
		}
	}
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
			// vLLM's: usage in every chunk (with include_usage).
			ContinuousUsageStats bool `json:"continuous_usage_stats"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &req)
	if r.URL.Path == "/v1/responses" {
		e.serveResponses(w, r, req.Stream)
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"sim","choices":[{"index":0,"message":{"role":"assistant","content":"hi from %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":%d,"total_tokens":%d}}`, e.id, e.tokens, 11+e.tokens)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	for i := 0; i < e.tokens; i++ {
		if i > 0 && e.delay > 0 {
			select {
			case <-time.After(e.delay):
			case <-r.Context().Done():
				e.canceled.Add(1)
				return
			}
		}
		if e.mode.Load() == "slow" && i == 1 {
			<-r.Context().Done()
			e.canceled.Add(1)
			return
		}
		if req.StreamOptions.IncludeUsage && req.StreamOptions.ContinuousUsageStats {
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"sim\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", i, i+1, i+12)
		} else {
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"sim\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
		}
		fl.Flush()
	}
	if req.StreamOptions.IncludeUsage { // as OpenAI and vLLM: only when asked
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"sim\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":%d,\"total_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n", e.tokens, e.tokens+11)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
	if e.mode.Load() == "linger" { // keep the response open after [DONE]
		<-r.Context().Done()
	}
}

// serveResponses answers a Responses API request: a whole response, or
// typed events with e.tokens deltas ending at response.completed, whose
// data has its type last and its usage (11 input tokens, 4 of them
// cached), as vLLM writes it.
func (e *fakeEngine) serveResponses(w http.ResponseWriter, r *http.Request, stream bool) {
	const usage = `"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":4},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`
	resp := fmt.Sprintf(`{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"sim","output":[{"type":"message","id":"m1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hi from %s","annotations":[]}]}],"incomplete_details":null,`+usage+`}`, e.id, e.tokens, 11+e.tokens)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	fmt.Fprint(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n")
	fl.Flush()
	for i := 0; i < e.tokens; i++ {
		if i > 0 && e.delay > 0 {
			select {
			case <-time.After(e.delay):
			case <-r.Context().Done():
				e.canceled.Add(1)
				return
			}
		}
		if e.mode.Load() == "slow" && i == 1 {
			<-r.Context().Done()
			e.canceled.Add(1)
			return
		}
		fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"content_index\":0,\"delta\":\"t%d \",\"item_id\":\"m1\",\"output_index\":0,\"sequence_number\":%d,\"type\":\"response.output_text.delta\"}\n\n", i, i+1)
		fl.Flush()
	}
	fmt.Fprintf(w, "event: response.completed\ndata: {\"response\":%s,\"sequence_number\":%d,\"type\":\"response.completed\"}\n\n", resp, e.tokens+1)
	fl.Flush()
}

func (e *fakeEngine) header(i int) http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.headers[i]
}

// chatBody is a chat completion request body.
func chatBody(stream bool, content string) string {
	return fmt.Sprintf(`{"model":"sim","stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, content)
}

// post sends a chat completion to base and returns status, headers, body.
func post(t testing.TB, ctx context.Context, base, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
