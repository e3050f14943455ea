package engineclient

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestAppendTarget(t *testing.T) {
	tests := []struct{ base, path, want string }{
		{"http://h:1", "/v1/chat/completions", "/v1/chat/completions"},
		{"http://h:1/v1", "/v1/chat/completions", "/v1/chat/completions"},
		{"http://h:1/v1/", "/v1/models", "/v1/models"},
		{"http://h:1/engine/a", "/v1/completions", "/engine/a/v1/completions"},
		{"http://h:1/engine/v1", "/v1/completions", "/engine/v1/completions"},
		{"http://h:1/v1", "/tokenize", "/tokenize"},
		{"http://h:1/engine/v1", "/rerank", "/engine/rerank"},
		{"http://h:1/engine/a", "/tokenize", "/engine/a/tokenize"},
	}
	c := New(time.Second, time.Now)
	for _, tt := range tests {
		hp := c.Host(tt.base)
		if hp == nil {
			t.Fatalf("%s: not plain http", tt.base)
		}
		if got := string(hp.AppendTarget(nil, tt.path)); got != tt.want {
			t.Errorf("%s + %s = %s, want %s", tt.base, tt.path, got, tt.want)
		}
	}
	if hp := c.Host("https://h:1"); hp != nil {
		t.Error("https engine routed to the plain-http client")
	}
	if hp := c.Host("http://h"); hp == nil || hp.addr != "h:80" {
		t.Errorf("default port: %+v", hp)
	}
}

func TestAppendRequestLine(t *testing.T) {
	hp := New(time.Second, time.Now).Host("http://h:1/v1")
	if got, want := string(hp.AppendRequestLine([]byte("x"), "POST", "/v1/chat/completions")), "xPOST /v1/chat/completions HTTP/1.1\r\nHost: h:1\r\n"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// readRaw reads a raw response through readHead and the body, as the
// proxy does, and reports status, Content-Type, body, whether the
// connection would be kept and the error.
func readRaw(raw string) (status int, ct, body string, kept bool, err error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(time.Second, time.Now)
	hp := c.Host("http://h:1")
	ec := &engineConn{nc: a, pool: hp}
	ec.br = bufio.NewReaderSize(strings.NewReader(raw), 64)
	r, err := ec.readHead()
	if err != nil {
		return 0, "", "", false, err
	}
	r.body.c, r.body.ec, r.body.stop = c, ec, func() bool { return true }
	data, err := io.ReadAll(&r.body)
	hp.mu.Lock()
	kept = len(hp.idle) == 1
	hp.mu.Unlock()
	return r.resp.StatusCode, r.resp.Header.Get("Content-Type"), string(data), kept, err
}

func TestReadHead(t *testing.T) {
	tests := []struct {
		name, raw  string
		status     int
		ct, body   string
		kept, fail bool
	}{
		{"chunked", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 200, "text/event-stream", "hello world", true, false},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", 200, "", "abc", true, false},
		{"content length", "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}", 400, "application/json; charset=utf-8", "{}", true, false},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, "", "ok", false, false},
		{"until close", "HTTP/1.1 200 OK\r\n\r\nall of it", 200, "", "all of it", false, false},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, "", "x", false, false},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", "", true, false},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 1\n\nx", 200, "", "x", true, false},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 200, "", "ab", false, true},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", 0, "", "", false, true},
		{"not http", "SSH-2.0\r\n\r\n", 0, "", "", false, true},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", "", false, true},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 0, "", "", false, true},
		{"gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, "", "", false, true},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 200, "", "", false, true},
		{"cut head", "HTTP/1.1 200 OK\r\nContent-", 0, "", "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, ct, body, kept, err := readRaw(tt.raw)
			if (err != nil) != tt.fail {
				t.Fatalf("err %v, want failure %v", err, tt.fail)
			}
			if status != tt.status || ct != tt.ct || body != tt.body || kept != tt.kept {
				t.Errorf("got %d %q %q kept %v, want %d %q %q kept %v", status, ct, body, kept, tt.status, tt.ct, tt.body, tt.kept)
			}
		})
	}
}

// TestChunkedEndWithData: the last events and the end of a chunked body
// that arrive together are one read that ends the body.
func TestChunkedEndWithData(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n0\r\n\r\n"
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(time.Second, time.Now)
	ec := &engineConn{nc: a, pool: c.Host("http://h:1")}
	ec.br = bufio.NewReader(strings.NewReader(raw))
	r, err := ec.readHead()
	if err != nil {
		t.Fatal(err)
	}
	r.body.c, r.body.ec, r.body.stop = c, ec, func() bool { return true }
	buf := make([]byte, 100)
	n, err := r.body.Read(buf)
	if n != 6 || err != io.EOF {
		t.Errorf("Read = %d, %v; want 6, EOF", n, err)
	}
}

// FuzzReadHead: any engine response gives a response or an error, never
// a panic, and a body read ends.
func FuzzReadHead(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close, x\r\n\r\nok")
	f.Add("HTTP/1.0 100 Continue\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		_, _, _, _, _ = readRaw(raw)
	})
}

// TestRetryAfterKept: a saturated engine's Retry-After reaches the
// proxy with the Content-Type, whatever their order; the shared header
// maps are not modified.
func TestRetryAfterKept(t *testing.T) {
	for _, raw := range []string{
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nretry-after:  7 \r\nContent-Length: 2\r\n\r\n{}",
	} {
		a, b := net.Pipe()
		c := New(time.Second, time.Now)
		ec := &engineConn{nc: a, pool: c.Host("http://h:1")}
		ec.br = bufio.NewReaderSize(strings.NewReader(raw), 64)
		r, err := ec.readHead()
		a.Close()
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r.resp.Header.Get("Retry-After") != "7" || r.resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%q: header %v", raw, r.resp.Header)
		}
		if len(jsonHeader) != 1 {
			t.Fatalf("shared header modified: %v", jsonHeader)
		}
	}
}

// TestConnectRTT: new connections record their connect time; the
// shortest recent one is the engine's round trip.
func TestConnectRTT(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c := New(time.Second, time.Now)
	hp := c.Host("http://" + ln.Addr().String())
	if d := hp.ConnectRTT(time.Now(), time.Minute); d != 0 {
		t.Fatalf("round trip %v before any connection", d)
	}
	for range 6 {
		ec, err := hp.get(context.Background(), c, true)
		if err != nil {
			t.Fatal(err)
		}
		ec.nc.Close()
	}
	d := hp.ConnectRTT(time.Now(), time.Minute)
	if d <= 0 || d > time.Second {
		t.Fatalf("loopback connect round trip %v", d)
	}
	if old := hp.ConnectRTT(time.Now().Add(2*time.Minute), time.Minute); old != 0 {
		t.Fatalf("samples older than the age limit still count: %v", old)
	}
}
