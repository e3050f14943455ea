package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestEveryAnswerHasRequestID: the model routes, an unknown route and a
// wrong method answer with X-Request-Id as inference does (the OpenAI
// SDKs read it into an error's requestID): the client's when valid, else
// a new one. Both servers.
func TestEveryAnswerHasRequestID(t *testing.T) { forEachServer(t, testEveryAnswerHasRequestID) }

func testEveryAnswerHasRequestID(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/models", 200},
		{"GET", "/v1/models/sim", 200},
		{"GET", "/v1/models/nope", 404},
		{"POST", "/v1/nothing", 404},
		{"GET", "/v1/chat/completions", 405},
	} {
		for _, sent := range []string{"", "client-id-7", "bad id"} {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, base+tt.path, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			if sent != "" {
				req.Header.Set(HeaderRequestID, sent)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get(HeaderRequestID)
			switch {
			case resp.StatusCode != tt.status:
				t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
			case sent == "client-id-7" && got != sent:
				t.Errorf("%s %s: %s %q, want the client's %q", tt.method, tt.path, HeaderRequestID, got, sent)
			case sent != "client-id-7" && (got == "" || got == sent || !validHeaderValue(got)):
				t.Errorf("%s %s with %q: %s %q, want a new valid one", tt.method, tt.path, sent, HeaderRequestID, got)
			}
		}
	}
}
