package relay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestContentEvent(t *testing.T) {
	for _, tt := range []struct {
		payload string
		content bool
		usage   bool
	}{
		{`{"choices":[{"delta":{"content":"x"}}]}`, true, false},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, false, true},
		{`{"usage":{"prompt_tokens":1},"choices":[]}`, false, true},
		{`{"choices":[{"delta":{}}],"usage":{"completion_tokens":3}}`, true, true},
		{`{"choices":[{"delta":{"content":"choices\":[]"}}],"usage":null}`, true, false},
		{`{"xchoices":[],"choices":[]}`, false, false},
		{`{"nousage":{},"choices":[{}]}`, true, false},
		{`{"choices":[`, true, false},
		{`choices":[]`, true, false},
		{``, true, false},
	} {
		_, usage := hasKey([]byte(tt.payload), usageKey)
		if got := contentEvent([]byte(tt.payload)); got != tt.content || usage != tt.usage {
			t.Errorf("%s: content %v usage %v, want %v %v", tt.payload, got, usage, tt.content, tt.usage)
		}
	}
}

// split cuts b into reads of n bytes (n <= 0: one read).
func split(b []byte, n int) [][]byte {
	if n <= 0 {
		return [][]byte{b}
	}
	var out [][]byte
	for len(b) > 0 {
		m := min(n, len(b))
		out = append(out, b[:m])
		b = b[m:]
	}
	return out
}

// reads delivers chunks, one per Read.
type reads struct{ chunks [][]byte }

func (r *reads) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(r.chunks) > 0 {
		m := copy(p[n:], r.chunks[0])
		n += m
		if r.chunks[0] = r.chunks[0][m:]; len(r.chunks[0]) == 0 {
			r.chunks = r.chunks[1:]
		}
		if n > 0 {
			break
		}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// relayReads relays stream delivered in reads of n bytes.
func relayReads(t testing.TB, stream []byte, n int) (*httptest.ResponseRecorder, Result) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	first := time.AfterFunc(time.Minute, func() {})
	defer first.Stop()
	st := Stream{
		Now: time.Now, Start: time.Now(), Status: 200,
		IdleTimeout: time.Minute, Cancel: cancel, FirstToken: first,
		Buf: make([]byte, BufSize),
	}
	w := httptest.NewRecorder()
	return w, st.Relay(ctx, w, &reads{chunks: split(stream, n)}, func(h http.Header) { h.Set("X-Engine", "a") }, nil)
}

// TestRelaySplits: however the engine's bytes are cut into reads, the
// client gets the same bytes and the accounting is the same.
func TestRelaySplits(t *testing.T) {
	var sb strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&sb, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\r\n\r\n", i)
	}
	sb.WriteString(": comment\n\nevent: x\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":20,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n")
	long := strings.Repeat("y", 3*BufSize)
	fmt.Fprintf(&sb, "data: {\"choices\":[{\"delta\":{\"content\":\"%s\"}}]}\n\n", long)
	sb.WriteString("data: [DONE]\n\n")
	stream := []byte(sb.String())
	for _, n := range []int{0, 1, 2, 7, 100, 4096, BufSize - 1, BufSize + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			w, res := relayReads(t, stream, n)
			if !res.Complete || res.FailReason != "" || !bytes.Equal(w.Body.Bytes(), stream) {
				t.Fatalf("complete %v fail %q: relayed %d of %d bytes", res.Complete, res.FailReason, w.Body.Len(), len(stream))
			}
			if res.Usage != (Usage{PromptTokens: 7, OutputTokens: 20, CachedTokens: 3}) {
				t.Fatalf("usage %+v", res.Usage)
			}
			if w.Header().Get("X-Engine") != "a" || w.Header().Get("Cache-Control") != "no-cache" || w.Code != 200 {
				t.Fatalf("head %d %v", w.Code, w.Header())
			}
		})
	}
}

func FuzzRelay(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{}]}\n\ndata: [DONE]\n\n"), 3)
	f.Add([]byte("data: x\r\n\r\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n"), 1)
	f.Add([]byte("data: [DONE]\n\ntail"), 0)
	f.Add([]byte("no event end"), 5)
	f.Fuzz(func(t *testing.T, stream []byte, n int) {
		if n > 1<<16 || n < -1 {
			return
		}
		w, res := relayReads(t, stream, n)
		got := w.Body.Bytes()
		switch {
		case !res.Committed:
			if w.Body.Len() != 0 || res.FailReason == "" {
				t.Fatalf("not committed but relayed %q (fail %q)", got, res.FailReason)
			}
		case !bytes.Contains(stream, donePayload):
			// Without [DONE] every byte is relayed, then the stream ends.
			if !bytes.Equal(got, stream) {
				t.Fatalf("relayed %q, engine sent %q", got, stream)
			}
		default:
			if !bytes.HasPrefix(stream, got) {
				t.Fatalf("relayed %q, not a prefix of %q", got, stream)
			}
		}
	})
}

func TestOutputEvent(t *testing.T) {
	for _, tt := range []struct {
		payload string
		want    bool
	}{
		{`{"choices":[{"delta":{"content":"x"}}]}`, true},
		{`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false},
		{`{"choices":[{"delta":{"role":"assistant"}}]}`, false},
		{`{"choices":[{"delta":{},"finish_reason":"stop"}]}`, false},
		{`{"choices":[{"delta":{"content":null},"finish_reason":"stop"}]}`, false},
		{`{"choices":[{"text":"hi","index":0}]}`, true},
		{`{"choices":[{"text":"","index":0,"finish_reason":"length"}]}`, false},
		{`{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, true},
		{`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, true},
		{`{"choices":[{"delta":{"tool_calls":[ ]}}]}`, false},
		{`{"choices": [{"delta": {"content": "spaced"}}]}`, true},
		{`{"choices":[],"usage":{"completion_tokens":3}}`, false},
		{`{"xcontent":"x"}`, false},
		{`{"content"`, false},
		{`{"content":"`, false},
		{``, false},
	} {
		if got := outputEvent([]byte(tt.payload)); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.payload, got, tt.want)
		}
	}
}

// relayStrip relays stream in reads of n bytes with StripUsage and a
// first-token hook.
func relayStrip(t testing.TB, stream []byte, n int, strip bool, hook func(time.Duration)) (*httptest.ResponseRecorder, Result) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	first := time.AfterFunc(time.Minute, func() {})
	defer first.Stop()
	st := Stream{
		Now: time.Now, Start: time.Now(), Status: 200,
		IdleTimeout: time.Minute, Cancel: cancel, FirstToken: first,
		Buf: make([]byte, BufSize), StripUsage: strip,
	}
	w := httptest.NewRecorder()
	return w, st.Relay(ctx, w, &reads{chunks: split(stream, n)}, func(http.Header) {}, hook)
}

type countHook struct{ n int }

func (h *countHook) firstToken(time.Duration) { h.n++ }

// TestStripUsage: with StripUsage the client gets the engine's stream
// without its usage-only event, byte for byte, however the stream is cut
// into reads, and the usage is still accounted; without it every byte.
func TestStripUsage(t *testing.T) {
	role := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	var body strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&body, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
	}
	finish := "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n"
	done := "data: [DONE]\n\n"
	for _, tt := range []struct {
		name         string
		usage, strip bool
		crlf         bool
	}{
		{"asked", true, false, false},
		{"injected", true, true, false},
		{"injected crlf", true, true, true},
		{"none", false, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := role + body.String() + finish
			stream := want
			if tt.usage {
				stream += usage
				if !tt.strip {
					want += usage
				}
			}
			stream += done
			want += done
			if tt.crlf {
				stream, want = strings.ReplaceAll(stream, "\n", "\r\n"), strings.ReplaceAll(want, "\n", "\r\n")
			}
			for _, n := range []int{0, 1, 2, 3, 7, 50, 100, 4096} {
				h := &countHook{}
				w, res := relayStrip(t, []byte(stream), n, tt.strip, h.firstToken)
				if !res.Complete || w.Body.String() != want {
					t.Fatalf("reads of %d: complete %v, got\n%q\nwant\n%q", n, res.Complete, w.Body.String(), want)
				}
				wantUsage := Usage{OutputTokens: 10, FinishReason: "stop"} // content events only: not role, not finish
				if tt.usage {
					wantUsage = Usage{PromptTokens: 7, OutputTokens: 10, CachedTokens: 3, FinishReason: "stop"}
				}
				if res.Usage != wantUsage || h.n != 1 || !res.FirstToken {
					t.Fatalf("reads of %d: usage %+v, hook called %d times", n, res.Usage, h.n)
				}
			}
		})
	}
}

// TestStripUsageEventSplitAcrossReads: a usage-only event whose first
// line came in an earlier read keeps that line and its blank line.
func TestStripUsageEventSplitAcrossReads(t *testing.T) {
	content := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n"
	chunks := [][]byte{[]byte(content + "event: u\n"), []byte(usage), []byte("\ndata: [DONE]\n\n")}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	first := time.AfterFunc(time.Minute, func() {})
	defer first.Stop()
	st := Stream{Now: time.Now, Start: time.Now(), Status: 200, IdleTimeout: time.Minute, Cancel: cancel,
		FirstToken: first, Buf: make([]byte, BufSize), StripUsage: true}
	w := httptest.NewRecorder()
	res := st.Relay(ctx, w, &reads{chunks: chunks}, func(http.Header) {}, nil)
	if want := content + "event: u\n\ndata: [DONE]\n\n"; w.Body.String() != want || res.Usage.OutputTokens != 1 {
		t.Fatalf("got %q (usage %+v), want %q", w.Body.String(), res.Usage, want)
	}
}

func FuzzRelayStrip(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"), 3)
	f.Add([]byte("event: x\ndata: {\"choices\":[],\"usage\":{}}\ndata: y\n\n"), 1)
	f.Fuzz(func(t *testing.T, stream []byte, n int) {
		if n > 1<<16 || n < -1 {
			return
		}
		w1, r1 := relayStrip(t, stream, n, true, nil)
		w2, r2 := relayStrip(t, stream, n, true, nil)
		if !bytes.Equal(w1.Body.Bytes(), w2.Body.Bytes()) || r1.Usage != r2.Usage || r1.Complete != r2.Complete {
			t.Fatal("not deterministic")
		}
		if w1.Body.Len() > len(stream)+300 { // + an error event at most
			t.Fatalf("relayed %d bytes of %d", w1.Body.Len(), len(stream))
		}
		// Without usage-only events, nothing is stripped.
		if !bytes.Contains(stream, []byte(`usage"`)) {
			w3, _ := relayStrip(t, stream, n, false, nil)
			if !bytes.Equal(w1.Body.Bytes(), w3.Body.Bytes()) {
				t.Fatalf("stripped %q to %q", w3.Body.Bytes(), w1.Body.Bytes())
			}
		}
	})
}
