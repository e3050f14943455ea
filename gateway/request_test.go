package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
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

// TestParseInferenceLeavesFieldsToTheEngine: a JSON object is parsed
// whatever its fields hold; a model, stream or user of another type reads
// as absent (the engine judges it), and only a non-object, invalid JSON
// or invalid UTF-8 is refused.
func TestParseInferenceLeavesFieldsToTheEngine(t *testing.T) {
	for _, tc := range []struct {
		body         string
		model        string
		modelBad     bool
		stream       bool
		user, refuse string
	}{
		{body: `{"messages":[]}`},
		{body: `{"model":5,"stream":"yes","user":7}`, modelBad: true},
		{body: `{"model":"s\u0069m","stream":true,"user":"u\u0031"}`, model: "sim", stream: true, user: "u1"},
		{body: `{"model":null,"n":0,"max_tokens":"5","messages":{"role":"robot"}}`},
		{body: `{"model":["a"],"stream":1}`, modelBad: true},
		{body: `{"model":"sim","prompt":5,"input":{}}`, model: "sim"},
		{body: `{"model":`, refuse: "invalid_json"},
		{body: `[1]`, refuse: "invalid_json"},
		{body: "{\"model\":\"\xff\"}", refuse: "invalid_utf8"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			in, err := parseInference([]byte(tc.body))
			if tc.refuse != "" {
				br, ok := err.(*badRequest)
				if !ok || br.code != tc.refuse || br.status != 400 {
					t.Fatalf("err %v, want 400 %s", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if in.Model != tc.model || in.modelBad != tc.modelBad || in.Stream != tc.stream || in.User != tc.user {
				t.Fatalf("model %q bad %v stream %v user %q", in.Model, in.modelBad, in.Stream, in.User)
			}
		})
	}
}

// TestCheckModel: with accepted models (--models) the gateway answers
// for the model: missing, not a string, or not one of them.
func TestCheckModel(t *testing.T) {
	models := map[string]bool{"sim": true}
	for body, want := range map[string]string{
		`{"model":"sim"}`:      "",
		`{"messages":[]}`:      "400 missing_required_parameter",
		`{"model":null}`:       "400 missing_required_parameter",
		`{"model":5}`:          "400 invalid_type",
		`{"model":"gpt-9"}`:    "404 model_not_found",
		`{"model":"s\u0069m"}`: "",
	} {
		in, err := parseInference([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if br := in.checkModel(models); br != nil {
			got = fmt.Sprintf("%d %s", br.status, br.code)
			if br.param != "model" {
				t.Errorf("%s: param %q", body, br.param)
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}

// TestChoices: n read for a stream's per-choice timing; anything but a
// plain integer reads as 1, and it is bounded.
func TestChoices(t *testing.T) {
	for n, want := range map[string]int{"": 1, "1": 1, "3": 3, "0": 1, "-2": 1, "2.0": 1, `"2"`: 1, "9999": maxChoices, "123456789012345678901234567890": maxChoices, "128": 128, "null": 1} {
		in := inference{N: json.RawMessage(n)}
		if got := in.choices(); got != want {
			t.Errorf("n %s: %d, want %d", n, got, want)
		}
	}
}
