package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// sseTransport answers with a canned 50-token SSE stream from memory.
type sseTransport struct{ body []byte }

func (s sseTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(s.body)), Request: r}, nil
}

// BenchmarkProxyStream measures the gateway's own CPU per streamed
// request (parse, route, relay 50 SSE events with usage, account),
// without network: the engine is in memory and the client a recorder.
func BenchmarkProxyStream(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&sb, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
	}
	sb.WriteString("data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":50}}\n\ndata: [DONE]\n\n")
	g, err := New(Config{Cluster: "c", Engines: []StaticEngine{{ID: "a", URL: "http://a"}, {ID: "b", URL: "http://b"}},
		Transport: sseTransport{[]byte(sb.String())}, HealthInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	h := g.Handler()
	body := []byte(chatBody(true, "Count from one to fifty, one number per token."))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
