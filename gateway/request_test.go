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
