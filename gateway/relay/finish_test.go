package relay

import (
	"encoding/json"
	"testing"
)

func TestFinishReason(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}`, ""},
		{`{"choices":[{"delta":{},"finish_reason":"stop"}]}`, "stop"},
		{`{"choices":[{"index":0,"finish_reason" : "length"}],"usage":{"prompt_tokens":3}}`, "length"},
		{`{"choices":[{"finish_reason":"tool_calls"}]}`, "tool_calls"},
		{`{"choices":[{"finish_reason":"content_filter"}]}`, "content_filter"},
		{`{"choices":[{"finish_reason":"abort"}]}`, "other"},
		{`{"choices":[{"finish_reason":"stop"},{"finish_reason":"length"}]}`, "length"},
		{`{"choices":[{"finish_reason":"sto`, ""},
		{`{"usage":{"prompt_tokens":3}}`, ""},
	} {
		if got := finishReason([]byte(tc.in)); got != tc.want {
			t.Errorf("finishReason(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzFinishReason checks finishReason against encoding/json on inputs
// that encoding/json reads as one choice: the scan finds the same value.
func FuzzFinishReason(f *testing.F) {
	for _, s := range []string{"stop", "length", "tool_calls", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		b, err := json.Marshal(map[string]any{"choices": []any{map[string]any{"finish_reason": reason, "index": 0}}})
		if err != nil {
			t.Skip()
		}
		var v struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		want := finishName([]byte(v.Choices[0].FinishReason))
		if got := finishReason(b); got != want {
			t.Fatalf("finishReason(%s) = %q, want %q", b, got, want)
		}
	})
}

// BenchmarkClassifyChunk is what the relay asks of every chat chunk it
// relays (scan.line): its finish reason, whether it is a usage-only
// chunk, whether it carries output, whether it has a usage object.
func BenchmarkClassifyChunk(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-8f2c","object":"chat.completion.chunk","created":1733580000,"model":"switchyard-sim-8b","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if finishReason(chunk) != "" || !contentEvent(chunk) || !outputEvent(chunk) {
			b.Fatal("misread chunk")
		}
		if _, ok := hasKey(chunk, usageKey); ok {
			b.Fatal("misread chunk")
		}
	}
}
