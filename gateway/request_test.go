package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

var scanCases = []struct {
	body string
	fast bool // scanInference decides (else encoding/json)
}{
	{`{"model":"sim","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi \"x\" \u00e9"}]}`, true},
	{` {"model":"sim","prompt":"x","user":"u","stream":null} `, true},
	{`{"model":"sim","prompt":["a",1,-0.5e+3,true,false,null,{}],"n":1}`, true},
	{`{"model":"sim","stream":true,"stream_options":{"include_usage":false}}`, true},
	{`{"model":"sim","n":1,"max_tokens":5,"max_completion_tokens":null,"messages":[]}`, true},
	{`{"model":"sim","n":1,"n":2}`, false},
	{`{"model":"sim","Max_Tokens":3}`, false},
	{`{"model":"sim","stream_options":null,"stream_options":{}}`, false}, // repeated
	{`{}`, true},
	{`{"model":null,"messages":null}`, true},
	{`{"model":"s\u0069m"}`, false},      // escapes in model
	{`{"model":"sïm"}`, false},           // non-ASCII model
	{`{"Model":"sim"}`, false},           // case-insensitive match
	{`{"model":"a","model":"b"}`, false}, // repeated
	{`{"model":1}`, false},               // type error
	{`{"model":"sim","stream":"yes"}`, false},
	{`{"model":"sim",}`, false},
	{`{"model":"sim"} x`, false},
	{`{"model":"sim","n":01}`, false},
	{`{"model":"sim","n":1.}`, false},
	{`{"model":"sim","n":"\x"}`, false},
	{"{\"model\":\"sim\",\"n\":\"\t\"}", false},
	{`{"model":"sim","n":[1,]}`, false},
	{`{"model":"sim","n":tru}`, false},
	{`{"model"`, false},
	{`[1]`, false},
	// Responses API bodies.
	{`{"model":"sim","input":"hi","instructions":"be brief","stream":true,"max_output_tokens":16,"previous_response_id":"resp_1","store":false}`, true},
	{`{"model":"sim","input":[{"role":"user","content":[{"type":"input_text","text":"hi é"}]},{"type":"function_call_output","call_id":"c","output":"{}"}],"tools":[{"type":"function","name":"f"}]}`, true},
	{`{"model":"sim","input":null,"instructions":null,"max_output_tokens":null,"previous_response_id":null}`, true},
	{`{"model":"sim","input":5,"instructions":[],"max_output_tokens":"x","previous_response_id":7}`, true},
	{`{"model":"sim","input":"a","input":"b"}`, false},
	{`{"model":"sim","Input":"a"}`, false},
	{`{"model":"sim","previous_response_iD":"r"}`, false},
	{`{"model":"sim","max_output_tokens":[1,]}`, false},
}

func TestScanInferenceAgreesWithEncodingJSON(t *testing.T) {
	for _, tc := range scanCases {
		t.Run(tc.body, func(t *testing.T) {
			_, ok := scanInference([]byte(tc.body))
			if ok != tc.fast {
				t.Errorf("fast path %v, want %v", ok, tc.fast)
			}
			checkScan(t, []byte(tc.body))
		})
	}
}

// FuzzScanInference: whenever the fast path decides, encoding/json
// accepts the body and reads the same fields; whenever encoding/json
// refuses it, the fast path gives up.
func FuzzScanInference(f *testing.F) {
	for _, tc := range scanCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkScan(t, body) })
}

func checkScan(t *testing.T, body []byte) {
	t.Helper()
	got, ok := scanInference(body)
	var want inference
	err := json.Unmarshal(body, &want)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("fast path accepted %q, encoding/json: %v", body, err)
	}
	if got.Model != want.Model || got.Stream != want.Stream || got.User != want.User ||
		!bytes.Equal(got.Messages, want.Messages) || !bytes.Equal(got.Prompt, want.Prompt) ||
		!bytes.Equal(got.StreamOptions, want.StreamOptions) || (got.soEnd > 0 && string(body[got.soStart:got.soEnd]) != string(got.StreamOptions)) ||
		!bytes.Equal(got.N, want.N) || !bytes.Equal(got.MaxTokens, want.MaxTokens) || !bytes.Equal(got.MaxCompletionTokens, want.MaxCompletionTokens) ||
		!bytes.Equal(got.Input, want.Input) || !bytes.Equal(got.Instructions, want.Instructions) ||
		!bytes.Equal(got.MaxOutputTokens, want.MaxOutputTokens) || !bytes.Equal(got.PreviousResponseID, want.PreviousResponseID) {
		t.Fatalf("%q: fast path %+v, encoding/json %+v", body, got, want)
	}
}

func BenchmarkParseInference(b *testing.B) {
	body := []byte(`{"model":"switchyard-sim-8b","stream":true,"max_tokens":50,"messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Count from one to fifty, one number per token."}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseInference(body); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWithUsage(t *testing.T) {
	for _, tt := range []struct {
		body  string
		strip bool
	}{
		{`{"model":"sim","stream":true,"messages":[]}`, true},
		{` { "model":"sim","stream":true}`, true},
		{`{"model":"sim","stream":true,"stream_options":null}`, true},
		{`{"model":"sim","stream":true,"stream_options":{}}`, true},
		{`{"model":"sim","stream":true,"stream_options":{ }}`, true},
		{`{"model":"sim","stream":true,"stream_options":{"include_usage":false}}`, true},
		{`{"model":"sim","stream":true,"stream_options":{"continuous_usage_stats":false} ,"n":1}`, true},
		{`{"model":"sim","stream":true,"stream_options":{"include_usage":true}}`, false},
		{`{"model":"sim","stream":false}`, false},
		{`{"model":"sim"}`, false},
		{`{"model":"s\u0069m","stream":true,"stream_options":{}}`, false}, // encoding/json path: not located
		{`{"model":"s\u0069m","stream":true}`, true},
	} {
		t.Run(tt.body, func(t *testing.T) {
			in, err := parseInference([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			out, strip := withUsage([]byte(tt.body), in)
			if strip != tt.strip {
				t.Fatalf("strip %v, want %v: %s", strip, tt.strip, out)
			}
			if !strip {
				if string(out) != tt.body {
					t.Fatalf("changed to %s", out)
				}
				return
			}
			var got, orig map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			_ = json.Unmarshal([]byte(tt.body), &orig)
			so, _ := got["stream_options"].(map[string]any)
			if so["include_usage"] != true {
				t.Fatalf("%s: include_usage not true", out)
			}
			delete(got, "stream_options")
			delete(orig, "stream_options")
			if fmt.Sprint(got) != fmt.Sprint(orig) {
				t.Fatalf("other fields changed: %s", out)
			}
		})
	}
}

// FuzzWithUsage: a forwarded body is the client's, or valid JSON that
// asks for usage and otherwise reads the same.
func FuzzWithUsage(f *testing.F) {
	f.Add([]byte(`{"model":"sim","stream":true,"stream_options":{"include_usage":false}}`))
	f.Add([]byte(`{"model":"sim","stream":true,"stream_options":null}`))
	f.Add([]byte(`{"model":"sim","stream":true}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := parseInference(body)
		if err != nil {
			return
		}
		out, strip := withUsage(body, in)
		if !strip {
			if !bytes.Equal(out, body) {
				t.Fatalf("changed %q to %q without strip", body, out)
			}
			return
		}
		var v struct {
			Model         string `json:"model"`
			Stream        bool   `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(out, &v); err != nil || !v.StreamOptions.IncludeUsage || v.Model != in.Model || !v.Stream {
			t.Fatalf("%q -> %q: %+v %v", body, out, v, err)
		}
	})
}

var validateCases = []struct {
	name, path, body string
	code, param      string // "" code: valid
}{
	{"plain chat", pathChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "", ""},
	{"every role", pathChat, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},{"role":"tool","content":"r","tool_call_id":"1"},{"role":"assistant","function_call":{"name":"f"}},{"role":"function","name":"f","content":"x"}]}`, "", ""},
	{"escaped key and role", pathChat, `{"model":"m","messages":[{"r\u006fle":"\u0075ser","content":"x"}]}`, "", ""},
	{"repeated role, last wins", pathChat, `{"model":"m","messages":[{"role":"boss","role":"user","content":"x"}]}`, "", ""},
	{"limits", pathChat, `{"model":"m","n":1,"max_tokens":16,"max_completion_tokens":null,"messages":[{"role":"user","content":"x"}]}`, "", ""},
	{"no messages", pathChat, `{"model":"m","prompt":"x"}`, "missing_required_parameter", "messages"},
	{"null messages", pathChat, `{"model":"m","messages":null}`, "missing_required_parameter", "messages"},
	{"messages not an array", pathChat, `{"model":"m","messages":{"role":"user"}}`, "invalid_type", "messages"},
	{"empty messages", pathChat, `{"model":"m","messages":[]}`, "empty_array", "messages"},
	{"message not an object", pathChat, `{"model":"m","messages":[{"role":"user","content":"x"},"hi"]}`, "invalid_type", "messages[1]"},
	{"no role", pathChat, `{"model":"m","messages":[{"content":"x"}]}`, "missing_required_parameter", "messages[0].role"},
	{"role not a string", pathChat, `{"model":"m","messages":[{"role":1,"content":"x"}]}`, "invalid_type", "messages[0].role"},
	{"bad role", pathChat, `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"User","content":"x"}]}`, "invalid_value", "messages[1].role"},
	{"case-different key", pathChat, `{"model":"m","messages":[{"Role":"user","content":"x"}]}`, "missing_required_parameter", "messages[0].role"},
	{"no content", pathChat, `{"model":"m","messages":[{"role":"user"}]}`, "missing_required_parameter", "messages[0].content"},
	{"null content", pathChat, `{"model":"m","messages":[{"role":"system","content":null}]}`, "missing_required_parameter", "messages[0].content"},
	{"assistant without content or calls", pathChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":null}]}`, "missing_required_parameter", "messages[0].content"},
	{"content a number", pathChat, `{"model":"m","messages":[{"role":"user","content":5}]}`, "invalid_type", "messages[0].content"},
	{"n 2", pathChat, `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, "unsupported_value", "n"},
	{"n 0", pathChat, `{"model":"m","n":0,"messages":[{"role":"user","content":"x"}]}`, "invalid_value", "n"},
	{"n 1.0", pathChat, `{"model":"m","n":1.0,"messages":[{"role":"user","content":"x"}]}`, "invalid_type", "n"},
	{"max_tokens 0", pathChat, `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "invalid_value", "max_tokens"},
	{"max_tokens negative", pathChat, `{"model":"m","max_tokens":-5,"messages":[{"role":"user","content":"x"}]}`, "invalid_value", "max_tokens"},
	{"max_tokens over int64", pathChat, `{"model":"m","max_tokens":99999999999999999999,"messages":[{"role":"user","content":"x"}]}`, "invalid_value", "max_tokens"},
	{"max_tokens int64 max", pathChat, `{"model":"m","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"x"}]}`, "", ""},
	{"max_tokens a string", pathChat, `{"model":"m","max_tokens":"5","messages":[{"role":"user","content":"x"}]}`, "invalid_type", "max_tokens"},
	{"max_completion_tokens fraction", pathChat, `{"model":"m","max_completion_tokens":2.5,"messages":[{"role":"user","content":"x"}]}`, "invalid_type", "max_completion_tokens"},
	{"prompt", pathCompletions, `{"model":"m","prompt":["a","b"],"max_tokens":3}`, "", ""},
	{"no prompt", pathCompletions, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "missing_required_parameter", "prompt"},
	{"prompt a number", pathCompletions, `{"model":"m","prompt":5}`, "invalid_type", "prompt"},
}

func TestValidate(t *testing.T) {
	for _, tc := range validateCases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := parseInference([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			br := in.validate(tc.path)
			switch {
			case tc.code == "" && br != nil:
				t.Fatalf("refused: %s %s: %s", br.code, br.param, br.msg)
			case tc.code == "":
			case br == nil:
				t.Fatalf("accepted, want %s %s", tc.code, tc.param)
			case br.status != 400 || br.code != tc.code || br.param != tc.param || br.msg == "":
				t.Fatalf("%d %s %s %q, want 400 %s %s", br.status, br.code, br.param, br.msg, tc.code, tc.param)
			}
			if tc.path == pathChat {
				checkMessages(t, in.Messages)
			}
		})
	}
}

// FuzzValidateMessages: the jscan pass over messages decides as the
// encoding/json version (code and param).
func FuzzValidateMessages(f *testing.F) {
	for _, tc := range validateCases {
		if in, err := parseInference([]byte(tc.body)); err == nil {
			f.Add([]byte(in.Messages))
		}
	}
	f.Add([]byte(`[{"role":"user","content":"x","x":[[[[[[[[]]]]]]]]}]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		checkMessages(t, bytes.TrimSpace(raw))
	})
}

func checkMessages(t *testing.T, raw []byte) {
	t.Helper()
	got, want := validateMessages(raw), validateMessagesJSON(raw)
	if (got == nil) != (want == nil) || (got != nil && (got.code != want.code || got.param != want.param)) {
		t.Fatalf("%q: jscan %+v, encoding/json %+v", raw, got, want)
	}
}

// TestRequestValidation: on both servers, invalid requests get an
// OpenAI-shaped 400 naming the parameter, never reach an engine, and
// their routing events are client errors with no engine (which the
// processor does not count as demand, estimate.CountsAsDemand).
func TestRequestValidation(t *testing.T) {
	forEachServer(t, func(t *testing.T, server string) {
		e := newFakeEngine(t, "a")
		sink := make(eventSink, 100)
		_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), Events(sink))
		n := 0
		for _, tc := range validateCases {
			if tc.code == "" || tc.path != pathChat {
				continue
			}
			n++
			status, _, body := post(t, context.Background(), base, tc.body, nil)
			var v struct {
				Error struct {
					Type  string  `json:"type"`
					Param *string `json:"param"`
					Code  *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &v); err != nil || status != 400 || v.Error.Type != "invalid_request_error" ||
				v.Error.Param == nil || *v.Error.Param != tc.param || v.Error.Code == nil || *v.Error.Code != tc.code {
				t.Errorf("%s: %d %s", tc.name, status, body)
			}
		}
		if got := e.requests.Load(); got != 0 {
			t.Errorf("%d invalid requests reached the engine", got)
		}
		for range n {
			ev := sink.next(t)
			if ev.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR || ev.GetEngineId() != "" || ev.GetHttpStatus() != 400 {
				t.Errorf("event %v", ev)
			}
		}
	})
}
