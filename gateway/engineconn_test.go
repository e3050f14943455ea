package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/engineclient"
)

// newCountingEngine is a fakeEngine that counts the connections it
// accepted.
func newCountingEngine(t testing.TB, id string) (*fakeEngine, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	e := &fakeEngine{id: id, tokens: 5, release: make(chan struct{})}
	e.mode.Store("")
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	e.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e, &n
}

func TestEngineClientReusesConnections(t *testing.T) {
	tests := []struct {
		name   string
		stream bool
		path   string
	}{
		{"stream", true, ""},
		{"whole", false, ""},
		{"base url with /v1", true, "/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, conns := newCountingEngine(t, "a")
			g, base := startGateway(t, Engines(StaticEngine{ID: "a", URL: e.url() + tt.path}))
			if g.client == nil {
				t.Fatal("the default config does not use the engine client")
			}
			for i := range 20 {
				code, h, body := post(t, context.Background(), base, chatBody(tt.stream, "hi"), map[string]string{"Authorization": "Bearer k"})
				if code != 200 || h.Get(HeaderEngine) != "a" {
					t.Fatalf("request %d: %d %v %s", i, code, h, body)
				}
				if tt.stream && !strings.HasSuffix(body, "data: [DONE]\n\n") {
					t.Fatalf("request %d: stream not complete: %q", i, body)
				}
			}
			// Drains of complete streams run in the background: the
			// connection count is read once they are done.
			if n := conns.Load(); n > 2 {
				t.Errorf("engine accepted %d connections for 20 sequential requests, want 1 or 2", n)
			}
			if got := e.header(19).Get("Authorization"); got != "Bearer k" {
				t.Errorf("Authorization forwarded as %q", got)
			}
			if got := e.header(19).Get(HeaderRequestID); got == "" {
				t.Error("no request id forwarded")
			}
			if s := g.Stats(); s.Retries != 0 || s.Succeeded != 20 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestEngineClientStaleConnection: an engine that closed its idle
// keep-alive connections costs neither an error nor a retry.
func TestEngineClientStaleConnection(t *testing.T) {
	e := newFakeEngine(t, "a")
	g, base := startGateway(t, Engines(static(e)...))
	for i := range 5 {
		code, _, body := post(t, context.Background(), base, chatBody(true, "hi"), nil)
		if code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		// Wait for the drain to pool the connection, then close it
		// from the engine's side.
		waitFor(t, 10*time.Second, func() bool { return g.client.IdleConns() > 0 }, "connection pooled")
		e.srv.CloseClientConnections()
	}
	if s := g.Stats(); s.Retries != 0 || s.Failed != 0 || s.Succeeded != 5 {
		t.Errorf("stats %+v", s)
	}
}

// TestEngineClientIdleSweep: idle connections older than the idle
// timeout are closed.
func TestEngineClientIdleSweep(t *testing.T) {
	e := newFakeEngine(t, "a")
	g, base := startGateway(t, Engines(static(e)...))
	if code, _, body := post(t, context.Background(), base, chatBody(false, "hi"), nil); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	waitFor(t, 10*time.Second, func() bool { return g.client.IdleConns() == 1 }, "connection pooled")
	g.client.CloseIdle(time.Now().Add(time.Hour))
	if n := g.client.IdleConns(); n != 0 {
		t.Errorf("%d idle connections after the sweep", n)
	}
	if code, _, body := post(t, context.Background(), base, chatBody(false, "hi"), nil); code != 200 {
		t.Fatalf("after the sweep: %d %s", code, body)
	}
}

// TestUpstreamURLMatchesEngineClient: net/http's path (upstreamURL) and
// the engine client send a request for a path to the same target.
func TestUpstreamURLMatchesEngineClient(t *testing.T) {
	c := engineclient.New(time.Second, time.Now)
	for _, base := range []string{"http://h:1", "http://h:1/v1", "http://h:1/v1/", "http://h:1/engine/a", "http://h:1/engine/v1"} {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/embeddings", "/tokenize", "/rerank"} {
			target := string(c.Host(base).AppendTarget(nil, path))
			if got, want := upstreamURL(strings.TrimRight(base, "/"), path), "http://h:1"+target; got != want {
				t.Errorf("upstreamURL(%s, %s) = %s, engine client %s", base, path, got, want)
			}
		}
	}
}

// TestRawSyscallsOnAndOff: with RawSyscalls (the default) the fast
// server and the engine client serve streams and whole responses over
// raw recvfrom/sendto, and with RawSyscalls(false) over the connections'
// own Read and Write, with keep-alive on both sides either way.
func TestRawSyscallsOnAndOff(t *testing.T) {
	d, _ := newCountingEngine(t, "d")
	if g, _ := startGateway(t, Engines(static(d)...)); !g.cfg.rawSyscalls {
		t.Error("RawSyscalls is off by default")
	}
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw=%v", on), func(t *testing.T) {
			e, conns := newCountingEngine(t, "a")
			g, base := startGateway(t, RawSyscalls(on), Engines(static(e)...))
			for i := range 10 {
				code, _, body := post(t, context.Background(), base, chatBody(i%2 == 0, "hi"), nil)
				if code != 200 {
					t.Fatalf("request %d: %d %s", i, code, body)
				}
				if i%2 == 0 && !strings.HasSuffix(body, "data: [DONE]\n\n") {
					t.Fatalf("request %d: stream not complete: %q", i, body)
				}
			}
			if n := conns.Load(); n > 2 {
				t.Errorf("engine accepted %d connections for 10 sequential requests", n)
			}
			if s := g.Stats(); s.Succeeded != 10 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}
