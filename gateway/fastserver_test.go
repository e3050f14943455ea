package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// forEachServer runs f against both HTTP servers.
func forEachServer(t *testing.T, f func(t *testing.T, server string)) {
	for _, s := range []string{ServerFast, ServerStd} {
		t.Run(s, func(t *testing.T) { f(t, s) })
	}
}

// rawReply is what a test compares of a response.
type rawReply struct {
	status int
	code   string // OpenAI error code, if any
	events int    // SSE data lines
	close  bool
}

// rawExchange writes reqs on one connection, in one write when
// pipelined, else one after the other, and reads n responses.
func rawExchange(t *testing.T, addr string, reqs []string, pipelined bool) []rawReply {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if pipelined {
		if _, err := io.WriteString(c, strings.Join(reqs, "")); err != nil {
			t.Fatal(err)
		}
	}
	var out []rawReply
	for _, r := range reqs {
		if !pipelined {
			if _, err := io.WriteString(c, r); err != nil {
				t.Fatal(err)
			}
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(r)))
		method := http.MethodPost
		if err == nil {
			method = req.Method
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("reading response to %q: %v", r, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("reading body of the response to %q: %v", r, err)
		}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		out = append(out, rawReply{status: resp.StatusCode, code: e.Error.Code, events: strings.Count(string(b), "data: "), close: resp.Close})
		if resp.Close {
			break
		}
	}
	return out
}

func rawPost(path, extra, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", path, extra, len(body), body)
}

// TestServersAgree sends the same raw requests to both servers: the fast
// server serves the plain proxy requests itself and hands the rest to
// net/http, so every answer must be the same.
func TestServersAgree(t *testing.T) {
	e := newFakeEngine(t, "a")
	stream, whole := chatBody(true, "hi"), chatBody(false, "hi")
	chunked := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(stream), stream)
	tests := []struct {
		name      string
		reqs      []string
		pipelined bool
	}{
		{"stream", []string{rawPost(pathChat, "", stream)}, false},
		{"whole", []string{rawPost(pathCompletions, "", whole)}, false},
		{"keep-alive", []string{rawPost(pathChat, "", stream), rawPost(pathChat, "", whole), rawPost(pathChat, "", stream)}, false},
		{"pipelined", []string{rawPost(pathChat, "", stream), rawPost(pathChat, "", whole)}, true},
		{"then net/http", []string{rawPost(pathChat, "", stream), "GET /health HTTP/1.1\r\nHost: gw\r\n\r\n", rawPost(pathChat, "", stream)}, false},
		{"connection close", []string{rawPost(pathChat, "Connection: close\r\n", stream), rawPost(pathChat, "", stream)}, false},
		{"lower-case headers", []string{"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: " + fmt.Sprint(len(stream)) + "\r\nx-switchyard-priority: high\r\n\r\n" + stream}, false},
		{"chunked body", []string{chunked, rawPost(pathChat, "", stream)}, false},
		{"expect", []string{rawPost(pathChat, "Expect: 100-continue\r\n", stream)}, false},
		{"http/1.0", []string{strings.Replace(rawPost(pathChat, "", stream), "HTTP/1.1", "HTTP/1.0", 1)}, false},
		{"too large", []string{rawPost(pathChat, "", `{"model":"sim","messages":[{"role":"user","content":"`+strings.Repeat("x", 2000)+`"}]}`)}, false},
		{"bad json", []string{rawPost(pathChat, "", `{"model":`)}, false},
		{"bad header", []string{rawPost(pathChat, "X-Switchyard-Priority: urgent\r\n", whole)}, false},
		{"no host", []string{"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"}, false},
		{"two lengths", []string{"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"}, false},
		{"no length", []string{"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n"}, false},
		{"get", []string{"GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n"}, false},
		{"query", []string{rawPost(pathChat+"?x=1", "", whole)}, false},
		{"models", []string{"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"}, false},
		{"unknown", []string{rawPost("/v1/no-such-route", "", whole)}, false},
		{"big head", []string{rawPost(pathChat, "X-Pad: "+strings.Repeat("p", 6000)+"\r\n", whole)}, false},
		{"space before colon", []string{rawPost(pathChat, "X-Bad : 1\r\n", whole)}, false},
		{"bare LF", []string{strings.ReplaceAll(rawPost(pathChat, "", whole), "\r\n", "\n"), rawPost(pathChat, "", whole)}, false},
		{"bare LF in one header", []string{strings.Replace(rawPost(pathChat, "", whole), "Host: gw\r\n", "Host: gw\n", 1)}, false},
		{"length and chunked", []string{strings.Replace(chunked, "Host: gw\r\n", fmt.Sprintf("Host: gw\r\nContent-Length: %d\r\n", len(stream)), 1), rawPost(pathChat, "", stream)}, false},
		{"chunked and length", []string{strings.Replace(chunked, "\r\n\r\n", "\r\nContent-Length: 3\r\n\r\n", 1)}, false},
		{"then length and chunked", []string{"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n", strings.Replace(chunked, "Host: gw\r\n", "Host: gw\r\nContent-Length: 3\r\n", 1)}, false},
	}
	got := map[string][][]rawReply{}
	forEachServer(t, func(t *testing.T, server string) {
		g, base := startGateway(t, HTTPServer(server), Engines(static(e)...), MaxBodyBytes(1024))
		addr := strings.TrimPrefix(base, "http://")
		for _, tt := range tests {
			before := g.handoffs.Load()
			got[server] = append(got[server], rawExchange(t, addr, tt.reqs, tt.pipelined))
			handedOff := g.handoffs.Load() > before
			switch tt.name {
			case "stream", "whole", "keep-alive", "pipelined", "connection close", "lower-case headers", "bad json", "bad header":
				if handedOff {
					t.Errorf("%s: handed off to net/http", tt.name)
				}
			default:
				if server == ServerFast && !handedOff {
					t.Errorf("%s: not handed off to net/http", tt.name)
				}
			}
		}
		settled(t, g)
	})
	for i, tt := range tests {
		f, s := got[ServerFast][i], got[ServerStd][i]
		if fmt.Sprint(f) != fmt.Sprint(s) {
			t.Errorf("%s: fast %+v, std %+v", tt.name, f, s)
		}
	}
	if r := got[ServerFast][0]; len(r) != 1 || r[0].status != 200 || r[0].events != 6 { // 5 tokens and [DONE]
		t.Errorf("stream: %+v", r)
	}
	for i, tt := range tests {
		switch tt.name {
		case "bare LF", "bare LF in one header":
			for _, r := range got[ServerFast][i] {
				if r.status != 200 {
					t.Errorf("%s: %+v", tt.name, got[ServerFast][i])
				}
			}
		case "length and chunked", "chunked and length":
			if r := got[ServerFast][i]; len(r) != 1 || r[0].status != 400 || !r[0].close {
				t.Errorf("%s: %+v", tt.name, r)
			}
		}
	}
}

// TestServersRejectLengthWithChunked: a request with both Content-Length
// and Transfer-Encoding gets 400 and the connection closes, on both
// servers, whether it is the connection's first request or not.
func TestServersRejectLengthWithChunked(t *testing.T) {
	e := newFakeEngine(t, "a")
	stream := chatBody(true, "hi")
	bad := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(stream), stream)
	forEachServer(t, func(t *testing.T, server string) {
		_, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
		addr := strings.TrimPrefix(base, "http://")
		for _, reqs := range [][]string{{bad, rawPost(pathChat, "", stream)}, {rawPost(pathChat, "", stream), bad, rawPost(pathChat, "", stream)}} {
			r := rawExchange(t, addr, reqs, false)
			last := r[len(r)-1]
			if len(r) != len(reqs)-1 || last.status != 400 || last.code != "invalid_request" || !last.close {
				t.Errorf("%d requests: %+v", len(reqs), r)
			}
		}
	})
}

// TestSlowBody: a body that does not arrive within the body timeout gets
// 408 request_timeout and the connection closes, on both servers; the
// request counts as a client error.
func TestSlowBody(t *testing.T) {
	e := newFakeEngine(t, "a")
	forEachServer(t, func(t *testing.T, server string) {
		g, base := startGateway(t, HTTPServer(server), Engines(static(e)...), BodyTimeout(300*time.Millisecond))
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 4000000\r\n\r\n"
		if _, err := io.WriteString(c, head+`{"model":"sim","messages":[{"role":"user","content":"`+strings.Repeat("x", 60)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || !strings.Contains(string(b), `"code":"request_timeout"`) {
			t.Errorf("%d close %v %s", resp.StatusCode, resp.Close, b)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("answered after %v", d)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Error("connection still open")
		}
		waitFor(t, 5*time.Second, func() bool { return g.Stats().ClientErrors == 1 }, "request not counted as a client error")
		if n := e.requests.Load(); n != 0 {
			t.Errorf("engine got %d requests", n)
		}
	})
}

// TestFastServerShutdown: a request in flight finishes when the gateway
// stops, idle connections are closed, and nothing leaks (goleak).
func TestFastServerShutdown(t *testing.T) {
	e := newFakeEngine(t, "a")
	e.delay = 20 * time.Millisecond
	g, err := New("us-east", Listen("127.0.0.1:0"), HealthInterval(-1), Engines(static(e)...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	<-g.Ready()
	idle, err := net.Dial("tcp", g.Addr()) // idle after one request
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	ibr := bufio.NewReader(idle)
	if _, err := io.WriteString(idle, rawPost(pathChat, "", chatBody(false, "x"))); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(ibr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	type result struct {
		status int
		body   string
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Post("http://"+g.Addr()+pathChat, "application/json", strings.NewReader(chatBody(true, "x")))
		if err != nil {
			res <- result{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b)}
	}()
	waitFor(t, 5*time.Second, func() bool { return g.Stats().InFlight == 1 && g.Stats().Requests == 2 }, "request not in flight")
	cancel()
	r := <-res
	if r.status != 200 || !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
		t.Errorf("request in flight at shutdown: %d %q", r.status, r.body)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ibr.ReadByte(); err == nil {
		t.Error("idle connection still open after shutdown")
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestClientLeavesBeforeFirstByte: a client that goes away while the
// engine has not answered yet cancels the engine request (nothing was
// written, so only the server's read of the connection can tell).
func TestClientLeavesBeforeFirstByte(t *testing.T) {
	forEachServer(t, func(t *testing.T, server string) {
		e := newFakeEngine(t, "a")
		e.setMode("hang")
		g, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, rawPost(pathChat, "", chatBody(true, "x"))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return e.requests.Load() == 1 }, "request did not reach the engine")
		c.Close()
		waitFor(t, 5*time.Second, func() bool { return e.canceled.Load() == 1 }, "engine request not canceled")
		waitFor(t, 5*time.Second, func() bool { return g.Stats().Canceled == 1 }, "request not counted as canceled")
	})
}
