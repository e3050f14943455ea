package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/internal/jscan"
)

// relayResponses relays a Responses API stream delivered in reads of n
// bytes.
func relayResponses(t testing.TB, stream []byte, n int) (*httptest.ResponseRecorder, Result) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	first := time.AfterFunc(time.Minute, func() {})
	defer first.Stop()
	st := Stream{
		Now: time.Now, Start: time.Now().Add(-time.Millisecond), Status: 200,
		IdleTimeout: time.Minute, Cancel: cancel, FirstToken: first,
		Buf: make([]byte, BufSize), Responses: true,
		StripUsage: true, // does not apply
	}
	w := httptest.NewRecorder()
	return w, st.Relay(ctx, w, &reads{chunks: split(stream, n)}, func(http.Header) {}, nil)
}

// responsesStream is a Responses stream of deltas then last (the data of
// the last event, after an event: line naming event unless it is "").
func responsesStream(deltas []string, last, event string) []byte {
	var sb strings.Builder
	sb.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"status\":\"in_progress\",\"output\":[],\"usage\":null,\"text\":{\"format\":{\"type\":\"text\"}}}}\n\n")
	sb.WriteString("event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"part\":{\"type\":\"output_text\",\"text\":\"\"}}\n\n")
	for i, d := range deltas {
		fmt.Fprintf(&sb, "event: response.output_text.delta\ndata: {\"content_index\":0,\"delta\":%s,\"sequence_number\":%d,\"type\":\"response.output_text.delta\"}\n\n", d, i+2)
	}
	sb.WriteString("event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"t0 t1\"}\n\n")
	if event != "" {
		sb.WriteString("event: " + event + "\n")
	}
	sb.WriteString("data: " + last + "\n\n")
	return []byte(sb.String())
}

// TestRelayResponses: a Responses stream is relayed byte for byte
// however it is cut into reads; it is complete at its last event, with
// that event's usage and status, found by its type (first or last in the
// data) or by its event: line, even when the event is longer than the
// read buffer; its TTFT and TBOT come from the non-empty deltas.
func TestRelayResponses(t *testing.T) {
	usage := `"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":4},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}`
	long := strings.Repeat("z", 3*BufSize)
	deltas := []string{`""`, `"t0 "`, `"t1"`}
	for _, tt := range []struct {
		name  string
		last  string
		event string
		want  Usage
	}{
		{"vllm", `{"response":{"id":"r","status":"completed","output":[],"incomplete_details":null,` + usage + `},"sequence_number":9,"type":"response.completed"}`, "response.completed",
			Usage{PromptTokens: 11, OutputTokens: 2, CachedTokens: 4, FinishReason: "stop"}},
		{"openai", `{"type":"response.completed","sequence_number":9,"response":{"status":"completed",` + usage + `}}`, "",
			Usage{PromptTokens: 11, OutputTokens: 2, CachedTokens: 4, FinishReason: "stop"}},
		{"incomplete", `{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},` + usage + `}}`, "",
			Usage{PromptTokens: 11, OutputTokens: 2, CachedTokens: 4, FinishReason: "length"}},
		{"failed", `{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"x"},"usage":null}}`, "response.failed",
			Usage{OutputTokens: 2, FinishReason: "other"}},
		{"long", `{"response":{"output":[{"content":[{"text":"` + long + `"}]}],"status":"completed",` + usage + `},"type":"response.completed"}`, "response.completed",
			Usage{PromptTokens: 11, OutputTokens: 2, CachedTokens: 4, FinishReason: "stop"}},
		{"escaped", `{"type":"response.completed","response":{"output":[{"content":[{"text":"say \"response.completed\" \u00e9"}]}],"status":"completed",` + usage + `}}`, "",
			Usage{PromptTokens: 11, OutputTokens: 2, CachedTokens: 4, FinishReason: "stop"}},
		{"untyped", `{"response":{"status":"completed",` + usage + `}}`, "response.completed",
			Usage{PromptTokens: 11, OutputTokens: 2, CachedTokens: 4, FinishReason: "stop"}},
	} {
		stream := responsesStream(deltas, tt.last, tt.event)
		for _, n := range []int{0, 1, 7, 100, BufSize - 1, BufSize + 1} {
			t.Run(fmt.Sprint(tt.name, n), func(t *testing.T) {
				w, res := relayResponses(t, stream, n)
				if !res.Complete || res.FailReason != "" || !bytes.Equal(w.Body.Bytes(), stream) {
					t.Fatalf("complete %v fail %q: relayed %d of %d bytes", res.Complete, res.FailReason, w.Body.Len(), len(stream))
				}
				if res.Usage != tt.want {
					t.Fatalf("usage %+v, want %+v", res.Usage, tt.want)
				}
				if !res.FirstToken || res.TTFT <= 0 {
					t.Fatalf("first token %v ttft %v", res.FirstToken, res.TTFT)
				}
			})
		}
	}
	// Not a last event: a delta quoting one (escaped), an untyped event
	// without an event: line. The stream ends without its last event: all
	// of it is relayed, incomplete, its output counted from the deltas.
	for _, last := range []string{
		`{"type":"response.output_text.delta","delta":"\"response.completed\""}`,
		`{"response":{"status":"completed",` + usage + `}}`,
		`{"type":"response.in_progress","response":{"status":"in_progress",` + usage + `}}`,
	} {
		stream := responsesStream(deltas, last, "")
		w, res := relayResponses(t, stream, 0)
		wantOut := uint32(2)
		if strings.Contains(last, "delta") {
			wantOut = 3
		}
		if res.Complete || !bytes.Equal(w.Body.Bytes(), stream) || res.Usage.OutputTokens != wantOut || res.Usage.PromptTokens != 0 {
			t.Fatalf("%s: complete %v usage %+v", last, res.Complete, res.Usage)
		}
	}
}

func TestDeltaEvent(t *testing.T) {
	for _, tt := range []struct {
		payload string
		want    bool
	}{
		{`{"type":"response.output_text.delta","delta":"x"}`, true},
		{`{"content_index":0,"delta": "x","type":"response.output_text.delta"}`, true},
		{`{"type":"response.function_call_arguments.delta","delta":"{\""}`, true},
		{`{"type":"response.reasoning_text.delta","delta":"hmm"}`, true},
		{`{"type":"response.output_text.delta","delta":""}`, false},
		{`{"type":"response.output_text.done","text":"all of it"}`, false},
		{`{"type":"response.created","response":{"text":{"format":{"type":"text"}}}}`, false},
		{`{"type":"response.output_text.delta","text":"\"delta\":\"x\""}`, false},
	} {
		if got := deltaEvent([]byte(tt.payload)); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.payload, got, tt.want)
		}
	}
}

// FuzzRelayResponses: a Responses stream reaches the client as the
// engine sent it: nothing before its first event, a prefix of it when
// complete, all of it otherwise.
func FuzzRelayResponses(f *testing.F) {
	f.Add(responsesStream([]string{`"a"`, `"b"`}, `{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2}}}`, ""), 3)
	f.Add(responsesStream([]string{`"a"`}, `{"response":{"status":"incomplete"},"type":"response.incomplete"}`, "response.incomplete"), 0)
	f.Add([]byte("event: response.completed\ndata: {}\n\ntail"), 1)
	f.Add([]byte("data: {\"type\":\"response.failed\"}\n\ndata: [DONE]\n\n"), 5)
	f.Fuzz(func(t *testing.T, stream []byte, n int) {
		if n > 1<<16 || n < -1 {
			return
		}
		w, res := relayResponses(t, stream, n)
		got := w.Body.Bytes()
		switch {
		case !res.Committed:
			if len(got) != 0 || res.FailReason == "" {
				t.Fatalf("not committed but relayed %q (fail %q)", got, res.FailReason)
			}
		case res.Complete:
			if !bytes.HasPrefix(stream, got) {
				t.Fatalf("relayed %q, not a prefix of %q", got, stream)
			}
		default:
			if !bytes.Equal(got, stream) {
				t.Fatalf("relayed %q, engine sent %q", got, stream)
			}
		}
	})
}

var responseCases = []string{
	`{"type":"response.completed","sequence_number":9,"response":{"id":"r","status":"completed","incomplete_details":null,"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":4},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}}}`,
	`{"response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":1,"output_tokens":4294967295,"input_tokens_details":null}},"type":"response.incomplete"}`,
	`{"id":"r","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":3,"output_tokens":5}}`,
	`{"type":"response.failed","response":{"status":"failed","usage":null}}`,
	`{"type":"response.created","response":null}`,
	`{"type":null}`,
	`{"type":"response.completed","response":{"usage":{"input_tokens":4294967296}}}`,
	`{"type":"response.completed","response":{"usage":{"input_tokens":-1}}}`,
	`{"type":"response.completed","response":{"usage":{"output_tokens":1.0}}}`,
	`{"type":"response.completed","response":{"Usage":{"output_tokens":1}}}`,
	`{"type":"response.completed","response":{"usage":{"output_tokens":1,"output_tokens":2}}}`,
	`{"type":"response.completed","type":"response.failed"}`,
	`{"type":"response.c\u006fmpleted"}`,
	`{"status":"compl\u00e9ted","usage":{"input_tokens":1}}`,
	`{"status":"completed","incomplete_details":{"reason":5}}`,
	`{"usage":{"input_tokens":1}`,
	`[1]`,
}

// FuzzScanResponse: whenever the scans of a Responses stream event and of
// a whole response decide, encoding/json reads the same type, status,
// reason and usage.
func FuzzScanResponse(f *testing.F) {
	for _, c := range responseCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkResponse(t, b) })
}

func TestScanResponseAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range responseCases {
		t.Run(c, func(t *testing.T) { checkResponse(t, []byte(c)) })
	}
	typ, r, ok := scanResponseEvent([]byte(responseCases[0]))
	if !ok || string(typ) != "response.completed" || string(r.status) != "completed" || !r.found ||
		r.usage != (usageCounts{prompt: 11, completion: 2, cached: 4, hasDetails: true}) {
		t.Errorf("scanResponseEvent = %q %+v %v", typ, r, ok)
	}
	var u Usage
	if !u.SetResponse([]byte(responseCases[2])) || u != (Usage{PromptTokens: 3, OutputTokens: 5, FinishReason: "stop"}) {
		t.Errorf("SetResponse: %+v", u)
	}
}

func sameResponse(a, b response) bool {
	return string(a.status) == string(b.status) && string(a.reason) == string(b.reason) && a.usage == b.usage && a.found == b.found
}

func checkResponse(t *testing.T, b []byte) {
	t.Helper()
	if typ, r, ok := scanResponseEvent(b); ok {
		var v responseEventJSON
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("event fast path accepted %q, encoding/json: %v", b, err)
		}
		var want response
		if v.Response != nil {
			want = fromJSON(v.Response)
		}
		if string(typ) != v.Type || !sameResponse(r, want) {
			t.Fatalf("%q: fast path %q %+v, encoding/json %q %+v", b, typ, r, v.Type, want)
		}
	}
	var r response
	s := jscan.Scanner{B: b}
	s.WS()
	ok := scanResponse(&s, &r)
	s.WS()
	if ok && s.I == len(b) {
		var v responseJSON
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("response fast path accepted %q, encoding/json: %v", b, err)
		}
		if want := fromJSON(&v); !sameResponse(r, want) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", b, r, want)
		}
	}
}
