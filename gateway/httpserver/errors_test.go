package httpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// openAIError is the body every error the HTTP layer writes must have.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// malformed are requests net/http refuses before any handler runs, with
// the status and code the client must get.
var malformed = []struct {
	name, req string
	status    int
	code      string
}{
	{"two lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "invalid_request"},
	{"unknown transfer encoding", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported_transfer_encoding"},
	{"chunked twice", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 501, "unsupported_transfer_encoding"},
	{"no host", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400, "invalid_request"},
	{"bad request line", "POST\r\n\r\n", 400, "invalid_request"},
	{"space before colon", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Bad : 1\r\nContent-Length: 2\r\n\r\n{}", 400, "invalid_request"},
	{"bad length", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: -1\r\n\r\n", 400, "invalid_request"},
	{"version", "POST /v1/chat/completions HTTP/2.0\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}", 505, "http_version_not_supported"},
	{"expect", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", 417, "expectation_failed"},
	{"head too large", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Pad: " + strings.Repeat("p", 8<<10) + "\r\n\r\n", 431, "request_header_too_large"},
	{"length and chunked", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400, "invalid_request"},
}

// TestMalformedRequestsGetOpenAIErrors sends each malformed request over
// raw TCP to a hardened net/http server alone and behind the fast server
// (which hands such requests off): every answer is OpenAI-style JSON
// with net/http's status, a Content-Length that matches, and the
// connection closes; the handler never runs.
func TestMalformedRequestsGetOpenAIErrors(t *testing.T) {
	for _, fast := range []bool{false, true} {
		t.Run("fast="+strconv.FormatBool(fast), func(t *testing.T) {
			addr, handled := serveHardened(t, fast)
			for _, tt := range malformed {
				t.Run(tt.name, func(t *testing.T) {
					resp, body, closed := rawRoundTrip(t, addr, tt.req)
					if resp.StatusCode != tt.status {
						t.Fatalf("status %d, want %d; body %q", resp.StatusCode, tt.status, body)
					}
					if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
						t.Errorf("Content-Type %q, want application/json; body %q", ct, body)
					}
					if resp.ContentLength != int64(len(body)) {
						t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
					}
					var e openAIError
					dec := json.NewDecoder(bytes.NewReader(body))
					dec.DisallowUnknownFields()
					if err := dec.Decode(&e); err != nil {
						t.Fatalf("body %q: %v", body, err)
					}
					if e.Error.Type != "invalid_request_error" || e.Error.Code != tt.code || e.Error.Message == "" || e.Error.Param != nil {
						t.Errorf("error %+v, want type invalid_request_error, code %s, a message", e.Error, tt.code)
					}
					if !resp.Close || !closed {
						t.Errorf("connection not closed (Connection: close %v, closed %v)", resp.Close, closed)
					}
				})
			}
			if n := handled(); n != 0 {
				t.Errorf("the handler served %d malformed requests", n)
			}
		})
	}
}

// TestHandlerResponsesUntouched: responses written by a handler pass
// through guardConn as they are, even text/plain errors that close the
// connection, which look most like net/http's own.
func TestHandlerResponsesUntouched(t *testing.T) {
	addr, _ := serveHardened(t, false)
	resp, body, _ := rawRoundTrip(t, addr, "GET /plain HTTP/1.1\r\nHost: gw\r\n\r\n")
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || string(body) != "400 Bad Request: handler\n" {
		t.Fatalf("handler's response rewritten: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// TestStdErrorJSON: the rewrite recognises exactly net/http's error
// responses.
func TestStdErrorJSON(t *testing.T) {
	for _, tt := range []struct {
		in      string
		rewrite bool
		msg     string
	}{
		{"HTTP/1.1 400 Bad Request" + stdErrorHeaders + "400 Bad Request", true, "400 Bad Request"},
		{"HTTP/1.1 400 Bad Request: missing required Host header" + stdErrorHeaders + "400 Bad Request: missing required Host header", true, "missing required Host header"},
		{"HTTP/1.1 501 Not Implemented" + stdErrorHeaders + "Unsupported transfer encoding", true, "Unsupported transfer encoding"},
		{stdExpectationFailed + "Date: Mon, 02 Jan 2006 15:04:05 GMT" + stdEmptyEnd, true, "the Expect header must be 100-continue or absent"},
		{stdExpectationFailed + "Date: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Length: 4\r\n\r\nbody", false, ""},
		{stdExpectationFailed + "Content-Type: text/plain\r\nContent-Length: 0\r\n\r\n", false, ""},
		{"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nx", false, ""},
		{"HTTP/1.1 200 OK" + stdErrorHeaders + "fine", false, ""},
		{"data: HTTP/1.1 400 Bad Request" + stdErrorHeaders, false, ""},
		{"HTTP/1.1 4", false, ""},
	} {
		out, ok := stdErrorJSON([]byte(tt.in))
		if ok != tt.rewrite {
			t.Errorf("%q: rewritten %v, want %v", tt.in, ok, tt.rewrite)
			continue
		}
		if !ok {
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		var e openAIError
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Message != tt.msg {
			t.Errorf("%q: message %q (%v), want %q", out, e.Error.Message, err, tt.msg)
		}
	}
}

// FuzzStdErrorJSON: whatever it is given, a rewrite is one well-formed
// HTTP response with a JSON error body, and keeps the status.
func FuzzStdErrorJSON(f *testing.F) {
	f.Add([]byte("HTTP/1.1 400 Bad Request" + stdErrorHeaders + "400 Bad Request"))
	f.Add([]byte("HTTP/1.1 431 Request Header Fields Too Large" + stdErrorHeaders + "\xff\"\\"))
	f.Add([]byte(stdExpectationFailed + "Date: x" + stdEmptyEnd))
	f.Fuzz(func(t *testing.T, p []byte) {
		out, ok := stdErrorJSON(p)
		if !ok {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || !json.Valid(body) || resp.ContentLength != int64(len(body)) {
			t.Fatalf("%q: body %q (%v)", out, body, err)
		}
		if strconv.Itoa(resp.StatusCode) != string(p[9:12]) || !resp.Close {
			t.Fatalf("%q: status %d, close %v", out, resp.StatusCode, resp.Close)
		}
	})
}

// serveHardened serves a hardened net/http server on loopback, behind
// the fast server when fast; handled counts the requests its handler
// served (other than /plain).
func serveHardened(t *testing.T, fast bool) (addr string, handled func() int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain" {
			w.Header().Set("Connection", "close")
			http.Error(w, "400 Bad Request: handler", http.StatusBadRequest)
			return
		}
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, MaxHeaderBytes: 4 << 10}
	Harden(srv, BodyLimits{})
	done := make(chan struct{})
	if fast {
		s := New(Config{Handler: h, Paths: []string{"/v1/chat/completions"}, Std: srv, Addr: ln.Addr(), MaxBodyBytes: 1 << 20})
		go func() { defer close(done); _ = s.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx, ln); err != nil {
				s.Close()
			}
			<-done
		})
	} else {
		go func() { defer close(done); _ = srv.Serve(GuardListener(ln)) }()
		t.Cleanup(func() { _ = srv.Close(); <-done })
	}
	return ln.Addr().String(), n.Load
}

// rawRoundTrip writes req on a new connection and reads one response;
// closed reports whether the server closed the connection after it.
func rawRoundTrip(t *testing.T, addr, req string) (*http.Response, []byte, bool) {
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
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	_, err = br.ReadByte()
	return resp, body, err == io.EOF || isReset(err)
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
