package relay

import (
	"encoding/json"
	"testing"
)

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
// same usage (as Usage.Set did before the fast path).
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
		Usage *usageJSON `json:"usage"`
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
		var u Usage
		if !u.Set(line) {
			b.Fatal("no usage")
		}
	}
}
