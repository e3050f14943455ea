package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/gateway/relay"
)

// sseTransport answers with a canned 50-token SSE stream from memory,
// delivered one event per Read (apart) or all in the first Read.
type sseTransport struct {
	events [][]byte
	apart  bool
}

func (s sseTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: &eventReader{events: s.events, apart: s.apart}, Request: r}, nil
}

type eventReader struct {
	events [][]byte
	apart  bool
	cur    []byte
}

func (e *eventReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(e.cur) == 0 {
			if len(e.events) == 0 || (e.apart && n > 0) {
				break
			}
			e.cur, e.events = e.events[0], e.events[1:]
		}
		m := copy(p[n:], e.cur)
		e.cur = e.cur[m:]
		n += m
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (e *eventReader) Close() error { return nil }

// discardWriter is a client that reads nothing back: it counts bytes and
// flushes.
type discardWriter struct {
	h       http.Header
	code    int
	n       int
	flushes int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }
func (d *discardWriter) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }
func (d *discardWriter) Flush()                      { d.flushes++ }

func benchEvents() [][]byte {
	var evs [][]byte
	for i := 0; i < 50; i++ {
		evs = append(evs, fmt.Appendf(nil, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i))
	}
	return append(evs,
		[]byte("data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":50}}\n\n"),
		[]byte("data: [DONE]\n\n"))
}

// BenchmarkProxyStream measures the gateway's own CPU and allocations per
// streamed request (parse, route, relay 50 SSE events with usage,
// account), without network: the engine is in memory and the client
// discards. apart: each event arrives alone (a flush each); together: the
// whole stream arrives in one read (one write, no flush: the handler's
// return ends the response). The request and response objects are the
// harness's; the gateway's own allocations are what remains.
func BenchmarkProxyStream(b *testing.B) {
	for _, apart := range []bool{true, false} {
		name := "together"
		if apart {
			name = "apart"
		}
		b.Run(name, func(b *testing.B) {
			g, err := New("c", Engines(StaticEngine{ID: "a", URL: "http://a"}, StaticEngine{ID: "b", URL: "http://b"}),
				Transport(sseTransport{events: benchEvents(), apart: apart}), HealthInterval(-1))
			if err != nil {
				b.Fatal(err)
			}
			flushes := streamLoop(b, g.Handler())
			b.ReportMetric(float64(flushes)/float64(b.N), "flushes/op")
		})
	}
}

// cannedEngine is a raw HTTP/1.1 engine on loopback that answers every
// request with the same chunked 50-token SSE response, written at once,
// so that what a benchmark measures is the gateway's side.
func cannedEngine(b *testing.B) string {
	b.Helper()
	var resp bytes.Buffer
	resp.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nDate: Sun, 29 Nov 2026 14:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n")
	for _, ev := range benchEvents() {
		fmt.Fprintf(&resp, "%x\r\n%s\r\n", len(ev), ev)
	}
	resp.WriteString("0\r\n\r\n")
	canned := resp.Bytes()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if _, err := c.Write(canned); err != nil {
						return
					}
				}
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// BenchmarkProxyEngine is BenchmarkProxyStream against a loopback engine
// (cannedEngine). own and nethttp call the gateway's handler directly,
// with the gateway's engine client (the default) or net/http's
// Transport. fast and std go through the gateway's listener as a client
// does, with the engine client: fast is the default server (the
// gateway's own HTTP/1.1 loop, package httpserver), std is net/http's;
// one keep-alive client connection sends the requests one after the
// other. The CPU per op includes the engine's (and for fast and std the
// client's), the same for each.
func BenchmarkProxyEngine(b *testing.B) {
	for _, variant := range []string{"own", "nethttp", ServerFast, ServerStd} {
		b.Run(variant, func(b *testing.B) {
			opts := []Opt{Engines(StaticEngine{ID: "a", URL: cannedEngine(b)}), HealthInterval(-1)}
			switch variant {
			case "nethttp":
				opts = append(opts, Transport(&http.Transport{MaxIdleConnsPerHost: 16, ReadBufferSize: relay.BufSize, DisableCompression: true}))
			case ServerFast, ServerStd:
				opts = append(opts, HTTPServer(variant))
			}
			g, err := New("c", opts...)
			if err != nil {
				b.Fatal(err)
			}
			if variant == ServerFast || variant == ServerStd {
				serverLoop(b, g)
				return
			}
			streamLoop(b, g.Handler())
			b.StopTimer()
			g.drains.closeAndWait()
			if g.client != nil {
				g.client.CloseAll()
			}
		})
	}
}

// serverLoop runs g on a loopback listener and streams one 50-token chat
// completion through it per benchmark iteration, on one keep-alive
// connection, reading each chunked response to its end.
func serverLoop(b *testing.B, g *Gateway) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte(rawPost(pathChat, "", chatBody(true, "Count from one to fifty, one number per token.")))
	br := bufio.NewReaderSize(c, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if n, err := readResponse(br); err != nil || n < 5000 {
			b.Fatalf("response of %d bytes: %v", n, err)
		}
	}
}

// readResponse reads one 200 response (Content-Length or chunked) and
// returns the length of its body, allocating nothing.
func readResponse(br *bufio.Reader) (int, error) {
	length, chunked := -1, false
	for i := 0; ; i++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		switch {
		case i == 0 && !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")):
			return 0, fmt.Errorf("status line %q", line)
		case bytes.HasPrefix(line, []byte("Content-Length: ")):
			length = 0
			for _, c := range bytes.TrimSpace(line[len("Content-Length: "):]) {
				length = 10*length + int(c-'0')
			}
		case bytes.Equal(line, []byte("Transfer-Encoding: chunked\r\n")):
			chunked = true
		}
		if len(line) == 2 {
			break
		}
	}
	if !chunked {
		_, err := br.Discard(length)
		return length, err
	}
	total := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return total, err
		}
		n := 0
		for _, c := range bytes.TrimSpace(line) {
			d := int(c & 0xf) // '0'-'9'
			if c > '9' {
				d += 9 // 'a'-'f', 'A'-'F'
			}
			n = n<<4 | d
		}
		if _, err := br.Discard(n + 2); err != nil {
			return total, err
		}
		if total += n; n == 0 {
			return total, nil
		}
	}
}

// streamLoop streams one 50-token chat completion through h per
// benchmark iteration, reusing the request and a discarding writer, and
// returns the flushes counted over all iterations.
func streamLoop(b *testing.B, h http.Handler) (flushes int) {
	body := []byte(chatBody(true, "Count from one to fifty, one number per token."))
	tmpl := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil).WithContext(context.Background())
	rd := bytes.NewReader(body)
	rc := io.NopCloser(rd)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		req := *tmpl
		req.Body, req.ContentLength = rc, int64(len(body))
		clear(w.h)
		w.code, w.n, w.flushes = 0, 0, 0
		h.ServeHTTP(w, &req)
		if w.code != 200 || w.n < 5000 {
			b.Fatal(w.code, w.n)
		}
		flushes += w.flushes
	}
	return flushes
}
