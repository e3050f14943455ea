package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInvalidUTF8Refused: a body that is not valid UTF-8 (in a message,
// in a key, truncated at the end, an overlong or surrogate encoding) gets
// 400 invalid_utf8 in OpenAI's shape on both servers and never reaches
// the engine; valid multi-byte text still goes through.
func TestInvalidUTF8Refused(t *testing.T) {
	e := newFakeEngine(t, "a")
	bad := []struct{ name, body string }{
		{"in content", `{"model":"sim","messages":[{"role":"user","content":"caf` + "\xe9" + `"}]}`},
		{"in a key", `{"model":"sim","` + "\xff" + `":1,"messages":[{"role":"user","content":"x"}]}`},
		{"truncated sequence", `{"model":"sim","messages":[{"role":"user","content":"` + "\xe2\x82" + `"}]}`},
		{"overlong", `{"model":"sim","messages":[{"role":"user","content":"` + "\xc0\xaf" + `"}]}`},
		{"surrogate", `{"model":"sim","messages":[{"role":"user","content":"` + "\xed\xa0\x80" + `"}]}`},
		{"in the model", `{"model":"s` + "\x80" + `m","messages":[{"role":"user","content":"x"}]}`},
	}
	forEachServer(t, func(t *testing.T, server string) {
		_, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
		addr := strings.TrimPrefix(base, "http://")
		before := e.requests.Load()
		for _, tt := range bad {
			t.Run(tt.name, func(t *testing.T) {
				resp, body := rawDo(t, addr, rawPost(pathChat, "", tt.body))
				e := decodeOpenAIError(t, resp, body)
				if resp.StatusCode != 400 || e.Code != "invalid_utf8" || !strings.Contains(e.Message, "UTF-8") {
					t.Fatalf("%d %+v, want 400 invalid_utf8", resp.StatusCode, e)
				}
			})
		}
		if n := e.requests.Load() - before; n != 0 {
			t.Errorf("the engine got %d requests with invalid UTF-8", n)
		}
		resp, body := rawDo(t, addr, rawPost(pathChat, "", chatBody(false, "café ☕ 𝄞")))
		if resp.StatusCode != 200 {
			t.Fatalf("valid UTF-8: %d %s", resp.StatusCode, body)
		}
	})
}

// TestMalformedFramingOpenAIError: requests whose framing net/http
// refuses (two Content-Lengths, an unknown Transfer-Encoding, both
// Content-Length and Transfer-Encoding) get OpenAI-style JSON from the
// whole gateway over raw TCP, on both servers, and reach no engine.
func TestMalformedFramingOpenAIError(t *testing.T) {
	e := newFakeEngine(t, "a")
	for _, tt := range []struct {
		name, req string
		status    int
	}{
		{"two lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400},
		{"unknown transfer encoding", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: compress\r\n\r\n", 501},
		{"length and chunked", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400},
		{"no host", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			forEachServer(t, func(t *testing.T, server string) {
				_, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
				before := e.requests.Load()
				resp, body := rawDo(t, strings.TrimPrefix(base, "http://"), tt.req)
				if got := decodeOpenAIError(t, resp, body); resp.StatusCode != tt.status || got.Message == "" {
					t.Fatalf("%d %+v, want %d", resp.StatusCode, got, tt.status)
				}
				if n := e.requests.Load() - before; n != 0 {
					t.Errorf("the engine got %d requests", n)
				}
			})
		})
	}
}

type openAIErrorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// decodeOpenAIError checks that resp is an OpenAI-style JSON error and
// returns its fields.
func decodeOpenAIError(t *testing.T, resp *http.Response, body []byte) openAIErrorFields {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, body %q", ct, body)
	}
	var e struct {
		Error openAIErrorFields `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if e.Error.Type != "invalid_request_error" {
		t.Fatalf("error type %q in %q", e.Error.Type, body)
	}
	return e.Error
}

// rawDo writes req on a new connection and reads one response.
func rawDo(t *testing.T, addr, req string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", req, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
