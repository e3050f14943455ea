package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

// postRaw posts body to url and returns the status, the Content-Type
// and the body.
func postRaw(t *testing.T, url, body string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// shape is a JSON value's structure: its keys and their types, the
// lengths of the choices, data and results arrays and the shape of their
// first element, numbers and strings as their type only (two answers
// differ in ids, generated text and its tokens).
func shape(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "not json: " + err.Error()
	}
	var walk func(key string, v any) string
	walk = func(key string, v any) string {
		switch x := v.(type) {
		case map[string]any:
			if key == "top_logprobs" { // completions': keyed by token
				return "map"
			}
			var sb strings.Builder
			for _, k := range sortedKeys(x) {
				fmt.Fprintf(&sb, "%s:%s,", k, walk(k, x[k]))
			}
			return "{" + sb.String() + "}"
		case []any:
			if len(x) == 0 {
				return "[]"
			}
			if key == "choices" || key == "data" || key == "results" {
				return fmt.Sprintf("[%d×%s]", len(x), walk("", x[0]))
			}
			return "[" + walk(key, x[0]) + "]"
		case nil:
			return "null"
		case bool:
			return "bool"
		case float64:
			return "number"
		}
		return "string"
	}
	return walk("", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// TestEngineAnswersThroughGateway: requests the gateway used to refuse
// (no messages, n above 1, bad max_tokens, no model) and the other
// inference routes (embeddings, rerank, score, tokenize, detokenize)
// get from the gateway what the engine (enginesim) answers directly:
// the same status, the same JSON shape; the routing event names the
// engine and, for an engine's 4xx, is a client error.
func TestEngineAnswersThroughGateway(t *testing.T) { forEachServer(t, testEngineAnswersThroughGateway) }

func testEngineAnswersThroughGateway(t *testing.T, server string) {
	sim := startSim(t, "sim")
	sink := make(eventSink, 64)
	_, base := startGateway(t, HTTPServer(server), Engines(StaticEngine{ID: "sim", URL: sim + "/v1"}), Events(sink))
	msgs := `[{"role":"user","content":"tell me about switchyards"}]`
	for _, tc := range []struct{ path, body string }{
		{pathChat, `{"model":"switchyard-sim-8b","max_tokens":3}`},
		{pathChat, `{"model":"switchyard-sim-8b","messages":[],"max_tokens":3}`},
		{pathChat, `{"model":"switchyard-sim-8b","messages":[{"role":"robot","content":"hi"}],"max_tokens":3}`},
		{pathChat, `{"messages":` + msgs + `,"max_tokens":3}`},
		{pathChat, `{"model":5,"messages":` + msgs + `,"max_tokens":3}`},
		{pathChat, `{"messages":` + msgs + `,"max_tokens":0}`},
		{pathChat, `{"messages":` + msgs + `,"max_tokens":"3"}`},
		{pathChat, `{"messages":` + msgs + `,"max_tokens":3,"n":0}`},
		{pathChat, `{"messages":` + msgs + `,"max_tokens":3,"n":3,"logprobs":true,"top_logprobs":2}`},
		{pathCompletions, `{"prompt":"once upon a time","max_tokens":3,"n":2,"logprobs":2}`},
		{pathCompletions, `{"model":"switchyard-sim-8b","max_tokens":3}`},
		{pathResponses, `{"model":"switchyard-sim-8b"}`},
		{pathResponses, `{"input":"hi","max_output_tokens":0}`},
		{pathResponses, `{"input":"hi","max_output_tokens":3}`},
		{"/v1/embeddings", `{"model":"switchyard-sim-8b","input":["a freight train","the yard"]}`},
		{"/v1/embeddings", `{"input":"a freight train","encoding_format":"base64"}`},
		{"/v1/embeddings", `{"model":"switchyard-sim-8b"}`},
		{"/v1/embeddings", `{"model":"gpt-9","input":"x"}`},
		{"/v1/rerank", `{"query":"freight","documents":["a freight train","the sea"]}`},
		{"/rerank", `{"query":"freight","documents":["a freight train","the sea"],"top_n":1}`},
		{"/v2/rerank", `{"documents":["a"]}`},
		{"/v1/score", `{"text_1":"freight","text_2":["a freight train","the sea"]}`},
		{"/score", `{"text_1":["a","b"],"text_2":["c"]}`},
		{"/tokenize", `{"prompt":"Grüße aus dem Rangierbahnhof"}`},
		{"/tokenize", `{"messages":` + msgs + `}`},
		{"/detokenize", `{"tokens":[1953719668,1634235424]}`},
		{"/detokenize", `{"tokens":"x"}`},
	} {
		t.Run(tc.path+" "+tc.body, func(t *testing.T) {
			wantStatus, wantType, want := postRaw(t, sim+tc.path, tc.body)
			status, ctype, got := postRaw(t, base+tc.path, tc.body)
			if status != wantStatus || ctype != wantType || shape(t, got) != shape(t, want) {
				t.Fatalf("gateway %d %s %s\nengine  %d %s %s", status, ctype, got, wantStatus, wantType, want)
			}
			if tc.path == "/tokenize" || tc.path == "/detokenize" || status >= 400 {
				if !bytes.Equal(got, want) {
					t.Fatalf("gateway %s, engine %s", got, want)
				}
			}
			ev := sink.next(t)
			wantEv := schemas.RequestStatus_REQUEST_STATUS_OK
			if status >= 400 {
				wantEv = schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR
			}
			if ev.GetEngineId() != "sim" || ev.GetStatus() != wantEv || ev.GetHttpStatus() != uint32(status) || ev.GetAttempts() != 1 {
				t.Fatalf("event %v", ev)
			}
			var u struct {
				Usage struct {
					PromptTokens     uint32 `json:"prompt_tokens"`
					CompletionTokens uint32 `json:"completion_tokens"`
					InputTokens      uint32 `json:"input_tokens"` // the Responses API's
					OutputTokens     uint32 `json:"output_tokens"`
				} `json:"usage"`
			}
			if status == 200 && json.Unmarshal(got, &u) == nil && (ev.GetPromptTokens() != u.Usage.PromptTokens+u.Usage.InputTokens || ev.GetOutputTokens() != u.Usage.CompletionTokens+u.Usage.OutputTokens) {
				t.Fatalf("event tokens %d/%d, usage %+v", ev.GetPromptTokens(), ev.GetOutputTokens(), u.Usage)
			}
		})
	}
}

// TestChoicesStreamAccounted: a stream of n choices is relayed with
// every choice's chunks and indexes, and its routing event has the
// engine's usage over all choices (the usage chunk the gateway asked
// for, stripped from the client's stream) and a time between tokens.
func TestChoicesStreamAccounted(t *testing.T) { forEachServer(t, testChoicesStreamAccounted) }

func testChoicesStreamAccounted(t *testing.T, server string) {
	sim := startSim(t, "sim")
	sink := make(eventSink, 4)
	_, base := startGateway(t, HTTPServer(server), Engines(StaticEngine{ID: "sim", URL: sim}), Events(sink))
	status, _, b := postRaw(t, base+pathChat, `{"stream":true,"n":3,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	perChoice := map[int]int{}
	for line := range strings.SplitSeq(string(b), "\n") {
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok || payload == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil || len(c.Choices) == 0 {
			t.Fatalf("the usage chunk reached the client: %s", payload)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				perChoice[ch.Index]++
			}
		}
	}
	if len(perChoice) != 3 || perChoice[0] != 5 || perChoice[1] != 5 || perChoice[2] != 5 {
		t.Fatalf("content chunks per choice %v", perChoice)
	}
	ev := sink.next(t)
	if ev.GetOutputTokens() != 15 || ev.GetPromptTokens() == 0 || !ev.GetStream() || ev.GetTtftMs() <= 0 || ev.GetMeanTbotMs() <= 0 || ev.GetFinishReason() != "length" {
		t.Fatalf("event %v", ev)
	}
}

// TestEventNamesTheRoute: each request's routing event carries the route
// the client called, so a reader tells an embeddings call or a tokenize
// from a chat, and the gateway instance (InstanceID) that answered.
func TestEventNamesTheRoute(t *testing.T) {
	sim := startSim(t, "sim")
	sink := make(eventSink, 8)
	_, base := startGateway(t, Engines(StaticEngine{ID: "sim", URL: sim}), Events(sink), InstanceID("gw-7"))
	for _, c := range []struct{ path, body string }{
		{pathChat, `{"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/embeddings", `{"input":"a freight train"}`},
		{"/tokenize", `{"prompt":"a freight train"}`},
		{pathCompletions, `{"max_tokens":2,"prompt":"hi"}`},
	} {
		if status, _, b := postRaw(t, base+c.path, c.body); status != 200 {
			t.Fatalf("%s: %d %s", c.path, status, b)
		}
		if ev := sink.next(t); ev.GetRoute() != c.path || ev.GetEngineId() != "sim" || ev.GetGatewayId() != "gw-7" {
			t.Fatalf("%s: event route %q engine %q gateway %q", c.path, ev.GetRoute(), ev.GetEngineId(), ev.GetGatewayId())
		}
	}
}
