package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/schemas"
)

// postPath sends body to base+path and returns status, headers, body.
func postPath(t testing.TB, base, path, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
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
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestResponsesRelayed: POST /v1/responses reaches the engine with the
// client's body unchanged (no stream_options), its stream and its whole
// response come back byte for byte, and the routing event has the TTFT,
// the TBOT and the usage of the stream's response.completed event (whose
// type comes last, as vLLM writes it) or of the whole response.
func TestResponsesRelayed(t *testing.T) { forEachServer(t, testResponsesRelayed) }

func testResponsesRelayed(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	e.delay = time.Millisecond
	sink := make(eventSink, 16)
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), Events(sink))
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"sim","stream":%v,"instructions":"be brief","input":[{"role":"user","content":"hi"}],"store":false}`, stream)
			_, _, direct := postPath(t, e.url(), pathResponses, body, nil)
			status, h, got := postPath(t, base, pathResponses, body, nil)
			if status != 200 || got != direct || h.Get(HeaderEngine) != "a" {
				t.Fatalf("status %d engine %q:\n%s\nengine sent\n%s", status, h.Get(HeaderEngine), got, direct)
			}
			e.mu.Lock()
			fwd := string(e.lastBodies[len(e.lastBodies)-1])
			e.mu.Unlock()
			if fwd != body {
				t.Fatalf("engine got %s, client sent %s", fwd, body)
			}
			ev := sink.next(t)
			if ev.Status != statusOK || ev.HttpStatus != 200 || ev.Stream != stream || ev.PromptTokens != 11 || ev.OutputTokens != 5 ||
				ev.CachedTokens != 4 || ev.FinishReason != "stop" || ev.Attempts != 1 {
				t.Fatalf("event %v", ev)
			}
			if stream && (ev.TtftMs <= 0 || ev.MeanTbotMs <= 0 || ev.TtftMs > ev.E2EMs) {
				t.Fatalf("stream event ttft %v tbot %v e2e %v", ev.TtftMs, ev.MeanTbotMs, ev.E2EMs)
			}
		})
	}
}

// sseEvents splits an event stream into its events' types (event:
// lines) and data payloads.
func sseEvents(stream string) (types []string, data []string) {
	for _, ev := range strings.Split(strings.TrimSpace(stream), "\n\n") {
		for _, line := range strings.Split(ev, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				types = append(types, v)
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = append(data, v)
			}
		}
	}
	return types, data
}

// TestResponsesThroughEnginesim streams and fetches whole Responses API
// answers from an enginesim engine through the gateway: the client gets
// the engine's typed events up to response.incomplete (max_output_tokens)
// and no data: [DONE]; the event's tokens are the usage that event (or
// the whole response) reports, with a TTFT for the stream.
func TestResponsesThroughEnginesim(t *testing.T) { forEachServer(t, testResponsesThroughEnginesim) }

func testResponsesThroughEnginesim(t *testing.T, server string) {
	sim := startSim(t, "sim")
	sink := make(eventSink, 16)
	_, base := startGateway(t, HTTPServer(server), Engines(StaticEngine{ID: "sim", URL: sim}), Events(sink))
	type usage struct {
		InputTokens        uint32 `json:"input_tokens"`
		OutputTokens       uint32 `json:"output_tokens"`
		InputTokensDetails struct {
			CachedTokens uint32 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	}
	var resp struct {
		Status string `json:"status"`
		Usage  usage  `json:"usage"`
	}
	for _, stream := range []bool{true, false} {
		body := fmt.Sprintf(`{"model":"switchyard-sim-8b","stream":%v,"input":"tell me about switchyards","max_output_tokens":5}`, stream)
		status, h, got := postPath(t, base, pathResponses, body, nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, got)
		}
		if stream {
			if !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") || strings.Contains(got, "[DONE]") {
				t.Fatalf("stream %v: %s", h, got)
			}
			types, data := sseEvents(got)
			deltas := 0
			for _, ty := range types {
				if ty == "response.output_text.delta" {
					deltas++
				}
			}
			if deltas != 5 || types[len(types)-1] != "response.incomplete" {
				t.Fatalf("%d deltas, events %v", deltas, types)
			}
			var last struct {
				Response json.RawMessage `json:"response"`
			}
			if err := json.Unmarshal([]byte(data[len(data)-1]), &last); err != nil {
				t.Fatal(err)
			}
			got = string(last.Response)
		}
		if err := json.Unmarshal([]byte(got), &resp); err != nil {
			t.Fatal(err)
		}
		ev := sink.next(t)
		if resp.Status != "incomplete" || resp.Usage.OutputTokens != 5 || ev.OutputTokens != 5 || ev.PromptTokens != resp.Usage.InputTokens || ev.PromptTokens == 0 ||
			ev.CachedTokens != resp.Usage.InputTokensDetails.CachedTokens || ev.FinishReason != "length" || ev.Status != statusOK || ev.Stream != stream {
			t.Fatalf("stream %v: response %+v, event %v", stream, resp, ev)
		}
		if stream && (ev.TtftMs <= 0 || ev.MeanTbotMs <= 0) {
			t.Fatalf("ttft %v tbot %v", ev.TtftMs, ev.MeanTbotMs)
		}
	}
}

// TestResponsesRetryBeforeFirstByte: an engine that fails a Responses
// request before its first byte is retried on another, and the client
// gets the other's whole stream.
func TestResponsesRetryBeforeFirstByte(t *testing.T) {
	forEachServer(t, testResponsesRetryBeforeFirstByte)
}

func testResponsesRetryBeforeFirstByte(t *testing.T, server string) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	a.setMode("500")
	sink := make(eventSink, 64)
	_, base := startGateway(t, HTTPServer(server), Engines(static(a, b)...), Events(sink))
	_, _, direct := postPath(t, b.url(), pathResponses, `{"model":"sim","stream":true,"input":"x"}`, nil)
	// Users until one is placed on a first (the placement is a hash).
	for i := 0; i < 32; i++ {
		body := fmt.Sprintf(`{"model":"sim","stream":true,"input":"x","user":"u%d"}`, i)
		status, h, got := postPath(t, base, pathResponses, body, nil)
		ev := sink.next(t)
		if status != 200 || got != direct || h.Get(HeaderEngine) != "b" || ev.Status != statusOK || ev.OutputTokens != 5 {
			t.Fatalf("status %d engine %q event %v: %s", status, h.Get(HeaderEngine), ev, got)
		}
		if ev.Attempts == 2 {
			if ev.Tried[0].EngineId != "a" || ev.Tried[0].FailureReason != schemas.FailureReason_FAILURE_REASON_STATUS_5XX || ev.DecisionReason != "retry" {
				t.Fatalf("tried %v", ev.Tried)
			}
			return
		}
	}
	t.Fatal("no request was placed on the failing engine first")
}

// TestResponsesValidation: a Responses body the gateway reads is
// forwarded unchanged for the engine to judge, whatever its fields hold
// (the gateway refuses only invalid JSON); the 405 for another method,
// the 429 of a shedding snapshot.
func TestResponsesValidation(t *testing.T) { forEachServer(t, testResponsesValidation) }

func testResponsesValidation(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
	for _, tt := range []struct {
		body        string
		status      int
		code, param string
	}{
		{`{"model":"sim"}`, 200, "", ""},
		{`{"model":"sim","input":null}`, 200, "", ""},
		{`{"model":"sim","input":5}`, 200, "", ""},
		{`{"model":"sim","input":{"role":"user"}}`, 200, "", ""},
		{`{"model":"sim","input":"x","max_output_tokens":0}`, 200, "", ""},
		{`{"model":"sim","input":"x","max_output_tokens":"5"}`, 200, "", ""},
		{`{"model":"sim","input":"x","instructions":["a"]}`, 200, "", ""},
		{`{"model":"sim","input":"x","previous_response_id":7}`, 200, "", ""},
		{`{"model":"sim","input":"x","user":7}`, 200, "", ""},
		{`{"input":"x"}`, 200, "", ""},
		{`{"model":"sim","input":[`, 400, "invalid_json", ""},
		{`{"model":"sim","input":"x","max_output_tokens":5,"max_tokens":0,"n":3,"tools":[{"type":"web_search"}],"reasoning":{"effort":"low"},"store":false,"text":{"format":{"type":"text"}}}`, 200, "", ""},
	} {
		t.Run(tt.body, func(t *testing.T) {
			status, h, got := postPath(t, base, pathResponses, tt.body, nil)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, got)
			}
			if status == 200 {
				e.mu.Lock()
				fwd := string(e.lastBodies[len(e.lastBodies)-1])
				e.mu.Unlock()
				if fwd != tt.body {
					t.Fatalf("engine got %s", fwd)
				}
				return
			}
			var v struct {
				Error struct {
					Type  string  `json:"type"`
					Code  string  `json:"code"`
					Param *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(got), &v); err != nil || v.Error.Type != typeInvalid || v.Error.Code != tt.code ||
				(tt.param == "") != (v.Error.Param == nil) || (v.Error.Param != nil && *v.Error.Param != tt.param) || h.Get(HeaderRequestID) == "" {
				t.Fatalf("error %s (%v), want code %s param %q", got, err, tt.code, tt.param)
			}
		})
	}
	resp, err := http.Get(base + pathResponses)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if typ, code := openAIError(t, string(b)); resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || typ != typeInvalid || code != "method_not_allowed" {
		t.Fatalf("GET: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	_, shedding := startGateway(t, HTTPServer(server), InitialSnapshot(snapshot(1, "us-east", 1, map[*fakeEngine]float64{e: 0})))
	status, h, got := postPath(t, shedding, pathResponses, `{"model":"sim","input":"x"}`, nil)
	if typ, code := openAIError(t, got); status != 429 || h.Get("Retry-After") != "1" || typ != typeRateLimit || code != "rate_limit_exceeded" {
		t.Fatalf("shed: %d %s", status, got)
	}
}

// TestResponsesAffinity: a Responses request's affinity key is its
// session or user, else its previous_response_id, else its instructions
// and input; requests sharing one land on one engine.
func TestResponsesAffinity(t *testing.T) {
	es := []*fakeEngine{newFakeEngine(t, "a"), newFakeEngine(t, "b"), newFakeEngine(t, "c")}
	sink := make(eventSink, 64)
	_, base := startGateway(t, Engines(static(es...)...), Events(sink))
	send := func(body string) (engine string, key uint64) {
		t.Helper()
		status, h, got := postPath(t, base, pathResponses, body, nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, got)
		}
		return h.Get(HeaderEngine), sink.next(t).AffinityKeyHash
	}
	for _, tt := range []struct {
		name   string
		bodies []string
		key    uint64 // 0: the bodies share a key, whatever it is
	}{
		{"user", []string{
			`{"model":"sim","user":"alice","input":"one"}`,
			`{"model":"sim","user":"alice","input":"two","previous_response_id":"resp_9"}`,
			`{"model":"sim","user":"alice","instructions":"x","input":[{"role":"user","content":"three"}]}`,
		}, hashkey.String("u:alice")},
		{"previous_response_id", []string{
			`{"model":"sim","previous_response_id":"resp_42","input":"one"}`,
			`{"model":"sim","previous_response_id":"resp_42","input":[{"role":"user","content":"two"}],"instructions":"be brief"}`,
			`{"model":"sim","previous_response_id":"resp_42","input":"three","stream":true}`,
		}, hashkey.String("p:resp_42")},
		{"prefix", []string{
			`{"model":"sim","instructions":"You answer about trains.","input":[{"role":"user","content":"What is a hump yard?"}]}`,
			`{"model":"sim","instructions":"You answer about trains.","input":[{"role":"user","content":"What is a hump yard?"}],"stream":true}`,
		}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eng0, key0 := send(tt.bodies[0])
			if tt.key != 0 && key0 != tt.key {
				t.Fatalf("key %x, want %x", key0, tt.key)
			}
			for _, b := range tt.bodies[1:] {
				if eng, key := send(b); eng != eng0 || key != key0 {
					t.Fatalf("%s: engine %s key %x, first %s %x", b, eng, key, eng0, key0)
				}
			}
		})
	}
	_, k1 := send(`{"model":"sim","previous_response_id":"resp_1","input":"x"}`)
	_, k2 := send(`{"model":"sim","previous_response_id":"resp_2","input":"x"}`)
	_, k3 := send(`{"model":"sim","instructions":"You answer about trains.","input":"x"}`)
	_, k4 := send(`{"model":"sim","instructions":"You answer about trains.","input":"y"}`)
	if k1 == k2 || k3 == k4 {
		t.Fatalf("distinct requests share keys: %x %x %x %x", k1, k2, k3, k4)
	}
}

// TestResponsesFailures: a Responses request fails as a chat request
// does: a first-token timeout is retried on another engine, an engine's
// 400 is passed through in OpenAI's shape, a stream gone idle after its
// first delta ends with the gateway's error event, and a client that
// leaves mid-stream cancels the engine's request.
func TestResponsesFailures(t *testing.T) { forEachServer(t, testResponsesFailures) }

func testResponsesFailures(t *testing.T, server string) {
	t.Run("first token timeout", func(t *testing.T) {
		bad, good := newFakeEngine(t, "bad"), newFakeEngine(t, "good")
		bad.setMode("hang")
		g, base := startGateway(t, HTTPServer(server), Engines(static(bad, good)...), FirstTokenTimeout(200*time.Millisecond))
		for i := 0; i < 6; i++ {
			for _, stream := range []bool{true, false} {
				status, h, got := postPath(t, base, pathResponses, fmt.Sprintf(`{"model":"sim","stream":%v,"input":"%d"}`, stream, i), nil)
				if status != 200 || h.Get(HeaderEngine) != "good" {
					t.Fatalf("request %d: %d from %q: %s", i, status, h.Get(HeaderEngine), got)
				}
			}
		}
		if s := settled(t, g); s.Failed != 0 || s.Succeeded != 12 || s.Retries == 0 {
			t.Fatalf("stats %+v", s)
		}
		if counter(g.m.upstreamFails.WithLabelValues("us-east", "first_token_timeout")) < 1 || bad.canceled.Load() == 0 {
			t.Fatal("no first-token timeout counted, or the engine's request not canceled")
		}
	})
	t.Run("engine 400", func(t *testing.T) {
		e := newFakeEngine(t, "a")
		e.setMode("400")
		sink := make(eventSink, 4)
		_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), Events(sink))
		status, _, got := postPath(t, base, pathResponses, `{"model":"sim","input":"x","previous_response_id":"resp_gone"}`, nil)
		if typ, _ := openAIError(t, got); status != 400 || typ != typeInvalid {
			t.Fatalf("%d %s", status, got)
		}
		if ev := sink.next(t); ev.Status != statusClientErr || ev.EngineId != "a" || e.requests.Load() != 1 {
			t.Fatalf("event %v, %d engine requests", ev, e.requests.Load())
		}
	})
	t.Run("idle mid-stream", func(t *testing.T) {
		e := newFakeEngine(t, "a")
		e.setMode("slow") // one delta, then silence
		g, base := startGateway(t, HTTPServer(server), Engines(static(e)...), IdleTimeout(200*time.Millisecond))
		status, _, got := postPath(t, base, pathResponses, `{"model":"sim","stream":true,"input":"x"}`, nil)
		if status != 200 || !strings.Contains(got, `"delta":"t0 "`) || !strings.Contains(got, `"code":"upstream_error"`) {
			t.Fatalf("want the first delta then an error event, got %d %q", status, got)
		}
		if s := settled(t, g); s.Failed != 1 || s.Retries != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("client leaves", func(t *testing.T) {
		e := newFakeEngine(t, "a")
		e.setMode("slow")
		g, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+pathResponses, strings.NewReader(`{"model":"sim","stream":true,"input":"x"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := resp.Body.Read(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, 5*time.Second, func() bool { return e.canceled.Load() == 1 }, "engine request not canceled")
		waitFor(t, 5*time.Second, func() bool { return g.Stats().Canceled == 1 }, "request not counted as canceled")
	})
}
