package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
)

var scanCases = []struct {
	body string
	fast bool // scanInference decides (else encoding/json)
}{
	{`{"model":"sim","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi \"x\" \u00e9"}]}`, true},
	{` {"model":"sim","prompt":"x","user":"u","stream":null} `, true},
	{`{"model":"sim","prompt":["a",1,-0.5e+3,true,false,null,{}],"n":1}`, true},
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
		!bytes.Equal(got.Messages, want.Messages) || !bytes.Equal(got.Prompt, want.Prompt) {
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

var usageCases = []string{
	`{"id":"c","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":50,"total_tokens":70,"prompt_tokens_details":{"cached_tokens":4}}}`,
	`{"usage":{"prompt_tokens":0,"completion_tokens":4294967295,"prompt_tokens_details":null}}`,
	`{"usage":{"prompt_tokens":4294967296}}`,
	`{"usage":{"prompt_tokens":-1}}`,
	`{"usage":{"prompt_tokens":1.0}}`,
	`{"usage":{"prompt_tokens":01}}`,
	`{"usage":null}`,
	`{"Usage":{"prompt_tokens":1}}`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens":2}}`,
	`{"choices":[{"delta":{"content":"x"}}]}`,
	`{"usage":{"prompt_tokens":1}`,
}

// FuzzScanUsage: whenever scanUsage decides, encoding/json reads the
// same usage (as setUsage did before the fast path).
func FuzzScanUsage(f *testing.F) {
	for _, c := range usageCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkUsage(t, b) })
}

func TestScanUsageAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range usageCases {
		t.Run(c, func(t *testing.T) { checkUsage(t, []byte(c)) })
	}
	u, found, ok := scanUsage([]byte(usageCases[0]))
	if !ok || !found || u != (usageCounts{prompt: 20, completion: 50, cached: 4, hasDetails: true}) {
		t.Errorf("scanUsage = %+v %v %v", u, found, ok)
	}
}

func checkUsage(t *testing.T, b []byte) {
	t.Helper()
	u, found, ok := scanUsage(b)
	if !ok {
		return
	}
	var v struct {
		Usage *usage `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("fast path accepted %q, encoding/json: %v", b, err)
	}
	if found != (v.Usage != nil) {
		t.Fatalf("%q: found %v, encoding/json %+v", b, found, v.Usage)
	}
	if !found {
		return
	}
	want := usageCounts{prompt: v.Usage.PromptTokens, completion: v.Usage.CompletionTokens}
	if d := v.Usage.PromptTokensDetails; d != nil {
		want.cached, want.hasDetails = d.CachedTokens, true
	}
	if u != want {
		t.Fatalf("%q: fast path %+v, encoding/json %+v", b, u, want)
	}
}

func BenchmarkSetUsage(b *testing.B) {
	line := []byte(usageCases[0])
	b.ReportAllocs()
	for b.Loop() {
		var res attemptResult
		if !res.setUsage(line) {
			b.Fatal("no usage")
		}
	}
}
