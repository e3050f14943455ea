// Package httpserver is the gateway's own HTTP/1.1 server loop for its
// proxy routes: it parses the plain requests of those routes itself and
// hands every other connection, with the bytes already read, to a
// net/http server.
package httpserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/internal/httpwire"
)

// Timeouts of the server, which its net/http server should share.
const (
	ReadHeaderTimeout = 10 * time.Second
	IdleTimeout       = 2 * time.Minute
	fastReadBufSize   = 4 << 10 // request heads above go to net/http
	fastPreBody       = 8 << 10 // body buffered before a response goes chunked
	fastMaxKeep       = 64 << 10
)

// Connection states for shutdown.
const (
	connNew int32 = iota
	connIdle
	connActive
	connClosed
)

// Server is the gateway's own HTTP/1.1 server loop for its proxy routes
// (Config.Paths, POST only). One goroutine
// per connection reads requests; each request runs in a second goroutine
// of the connection while the first waits in a read of the next request, which is how a client that goes away (EOF, reset) cancels the
// request's context without a read-deadline dance. Anything it does not
// serve itself (another route or method, chunked bodies, Expect,
// HTTP/1.0, upgrades, big heads, bodies over the limit, malformed
// heads) is handed, with the bytes already read, to the net/http server,
// which serves the connection from then on.
type Server struct {
	handler   http.Handler
	paths     []string
	onHandoff func()
	std       *http.Server
	handoff   *handoffListener
	log       *slog.Logger
	maxBody   int64
	limits    BodyLimits
	raw       bool

	shutting atomic.Bool
	mu       sync.Mutex
	conns    map[*fastConn]struct{}
	wg       sync.WaitGroup
	stdDone  chan struct{}
	readers  sync.Pool // *bufio.Reader
}

// Config configures a Server.
type Config struct {
	// Handler serves the requests the server parses itself.
	Handler http.Handler
	// Paths are the routes it serves itself (POST only).
	Paths []string
	// Std serves every other connection; New starts it.
	Std *http.Server
	// Addr is the listener's address, as the net/http server sees it.
	Addr net.Addr
	// MaxBodyBytes bounds the bodies the server reads itself; a longer
	// request goes to Std.
	MaxBodyBytes int64
	// Logger; default discards.
	Logger *slog.Logger
	// OnHandoff, when set, is called for each connection handed to Std.
	OnHandoff func()
	// Limits bound the arrival of the bodies the server reads itself
	// (Harden applies the same to Std). The zero value means the
	// defaults.
	Limits BodyLimits
	// RawSyscalls makes the server read and write its connections with
	// raw recvfrom/sendto calls (httpwire.RawIO, Linux only). Default false:
	// the connections' own Read and Write.
	RawSyscalls bool
}

// New starts cfg.Std on the connections the server hands off (wrapped
// as GuardListener wraps them, for Harden) and returns the server; Serve
// starts serving a listener.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.OnHandoff == nil {
		cfg.OnHandoff = func() {}
	}
	s := &Server{
		handler:   cfg.Handler,
		paths:     cfg.Paths,
		onHandoff: cfg.OnHandoff,
		std:       cfg.Std,
		handoff:   &handoffListener{ch: make(chan net.Conn), done: make(chan struct{}), addr: cfg.Addr},
		log:       cfg.Logger,
		maxBody:   cfg.MaxBodyBytes,
		limits:    cfg.Limits.withDefaults(),
		raw:       cfg.RawSyscalls,
		conns:     map[*fastConn]struct{}{},
		stdDone:   make(chan struct{}),
	}
	std := cfg.Std
	s.readers.New = func() any { return bufio.NewReaderSize(nil, fastReadBufSize) }
	go func() {
		defer close(s.stdDone)
		_ = std.Serve(s.handoff)
	}()
	return s
}

// Serve accepts connections until ln is closed.
func (s *Server) Serve(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Like net/http: back off on errors such as EMFILE.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		fc := &fastConn{s: s, c: c, done: make(chan struct{}, 1), hdr: http.Header{}, accepted: time.Now()}
		if !s.track(fc) {
			_ = c.Close()
			continue
		}
		go fc.serve()
	}
}

func (s *Server) track(fc *fastConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	s.conns[fc] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) forget(fc *fastConn) {
	s.mu.Lock()
	delete(s.conns, fc)
	s.mu.Unlock()
	s.wg.Done()
}

// Shutdown stops accepting (it closes ln), lets
// requests in flight finish, closes idle connections, and shuts the
// net/http server down, until ctx ends.
func (s *Server) Shutdown(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	s.shutting.Store(true)
	s.mu.Unlock()
	_ = ln.Close()
	stdErr := make(chan error, 1)
	go func() { stdErr <- s.std.Shutdown(ctx) }()
	wait := time.Millisecond
	for !s.closeIdle() {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
	s.wg.Wait()
	err := <-stdErr
	<-s.stdDone
	return err
}

// closeIdle closes idle connections and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fc := range s.conns {
		st := fc.state.Load()
		if (st == connIdle || (st == connNew && time.Since(fc.accepted) > 5*time.Second)) && fc.state.CompareAndSwap(st, connClosed) {
			_ = fc.c.Close()
		}
	}
	return len(s.conns) == 0
}

// Close closes everything at once (after a shutdown timed out).
func (s *Server) Close() {
	s.shutting.Store(true)
	_ = s.std.Close()
	s.mu.Lock()
	for fc := range s.conns {
		fc.state.Store(connClosed)
		_ = fc.c.Close()
	}
	s.mu.Unlock()
	<-s.stdDone
}

// fastConn is one client connection.
type fastConn struct {
	s        *Server
	c        net.Conn
	br       *bufio.Reader
	state    atomic.Int32
	accepted time.Time
	remote   string
	hdr      http.Header // request headers, reused per request
	url      url.URL
	body     []byte
	bodyR    bodyReader
	w        fastResponse
	cancel   context.CancelFunc
	raw      *httpwire.RawIO // nil: write through fc.c
	jobs     chan fastJob    // to the request goroutine, started at the first request

	// Written by the request goroutine before it signals done.
	done   chan struct{}
	doneAt time.Time
	keep   bool
}

// fastJob is a request for the connection's request goroutine.
type fastJob struct {
	r  *http.Request
	rh reqHead
}

// work runs the connection's requests, one at a time. It lives as long
// as the connection (rather than a goroutine per request), so its stack
// stays grown.
func (fc *fastConn) work() {
	for j := range fc.jobs {
		fc.handle(j.r, j.rh, true)
	}
}

func (fc *fastConn) serve() {
	defer fc.s.forget(fc)
	defer func() {
		if fc.jobs != nil {
			close(fc.jobs)
		}
	}()
	s := fc.s
	if s.raw {
		fc.raw = httpwire.NewRawIO(fc.c)
	}
	fc.br = s.readers.Get().(*bufio.Reader)
	if fc.raw != nil {
		fc.br.Reset(fc.raw)
	} else {
		fc.br.Reset(fc.c)
	}
	fc.remote = fc.c.RemoteAddr().String()
	release := true
	defer func() {
		if release {
			fc.br.Reset(nil)
			s.readers.Put(fc.br)
		}
	}()
	_ = fc.c.SetReadDeadline(fc.accepted.Add(ReadHeaderTimeout))
	running := false
	var idleFrom time.Time // end of the last response; zero before the first
	for {
		_, err := fc.br.Peek(1)
		if running {
			select {
			case <-fc.done:
				running, idleFrom = false, fc.doneAt
			default:
			}
		}
		if running {
			if err != nil {
				if isTimeout(err) {
					_ = fc.c.SetReadDeadline(time.Now().Add(IdleTimeout))
					continue
				}
				// The client went away: cancel the request.
				fc.cancel()
				<-fc.done
				fc.closeConn()
				return
			}
			<-fc.done // the next request came early (pipelined)
			running, idleFrom = false, fc.doneAt
		}
		if !idleFrom.IsZero() && !fc.keep {
			fc.closeConn()
			return
		}
		if err != nil {
			if isTimeout(err) && !idleFrom.IsZero() && time.Since(idleFrom) < IdleTimeout && fc.state.Load() == connIdle {
				_ = fc.c.SetReadDeadline(idleFrom.Add(IdleTimeout))
				continue
			}
			fc.closeConn()
			return
		}
		st := fc.state.Load()
		if st == connClosed || !fc.state.CompareAndSwap(st, connActive) {
			fc.closeConn()
			return
		}
		end, ok, err := fc.readHead(!idleFrom.IsZero())
		if err != nil {
			fc.closeConn()
			return
		}
		var rh reqHead
		if ok {
			clear(fc.hdr)
			buf, _ := fc.br.Peek(end)
			rh, ok = parseHead(string(buf), s.paths, s.maxBody, fc.hdr)
		}
		if !ok {
			release = false
			fc.handOff()
			return
		}
		_, _ = fc.br.Discard(end)
		bodyErr := fc.readBody(rh.contentLength, time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		fc.cancel = cancel
		r := fc.request(ctx, rh)
		if bodyErr != nil {
			// The connection is broken: serve what came (the handler
			// reports the short body) and close.
			fc.handle(r, rh, false)
			<-fc.done
			fc.closeConn()
			return
		}
		_ = fc.c.SetReadDeadline(time.Now().Add(IdleTimeout))
		running = true
		if fc.jobs == nil {
			fc.jobs = make(chan fastJob, 1)
			go fc.work()
		}
		fc.jobs <- fastJob{r, rh}
	}
}

// readHead waits until a whole request head is buffered and returns its
// length; ok is false when the connection goes to net/http (not a proxy
// route, or a head larger than the buffer).
func (fc *fastConn) readHead(keptAlive bool) (end int, ok bool, err error) {
	const prefix = "POST /v1/"
	deadline := false
	scanned := 0 // bytes checked for a bare LF
	for {
		buf, _ := fc.br.Peek(fc.br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			buf = buf[:i+4]
			if bareLF(buf, scanned) {
				return 0, false, nil
			}
			return i + 4, true, nil
		}
		n := min(len(buf), len(prefix))
		if string(buf[:n]) != prefix[:n] || len(buf) >= fc.br.Size() || bareLF(buf, scanned) {
			// Not a proxy route, too big, or bare LF line ends (which
			// net/http accepts): net/http decides.
			return 0, false, nil
		}
		scanned = len(buf)
		if keptAlive && !deadline {
			deadline = true
			_ = fc.c.SetReadDeadline(time.Now().Add(ReadHeaderTimeout))
		}
		if _, err := fc.br.Peek(len(buf) + 1); err != nil {
			return 0, false, err
		}
	}
}

// bareLF reports whether b has an LF not preceded by a CR at or after
// from (or just before it).
func bareLF(b []byte, from int) bool {
	from = max(from-1, 0)
	for {
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return false
		}
		if i += from; i == 0 || b[i-1] != '\r' {
			return true
		}
		from = i + 1
	}
}

// bodyChunk is the least the body buffer grows by.
const bodyChunk = 4 << 10

// readBody reads a Content-Length body whose head ended at start into
// fc.body, under the server's BodyLimits. The buffer grows with the
// bytes that arrive (doubling, up to n), so a declared length costs no
// memory until its bytes come.
func (fc *fastConn) readBody(n int64, start time.Time) error {
	fc.bodyR = bodyReader{}
	if cap(fc.body) > fastMaxKeep {
		fc.body = nil // the last request's big body
	}
	if int64(fc.br.Buffered()) >= n {
		b, _ := fc.br.Peek(int(n))
		fc.body = append(fc.body[:0], b...)
		_, _ = fc.br.Discard(int(n))
		fc.bodyR.b = fc.body
		return nil
	}
	body := fc.body[:0]
	var err error
	for int64(len(body)) < n && err == nil {
		if len(body) == cap(body) {
			nb := make([]byte, len(body), min(n, int64(max(2*cap(body), bodyChunk))))
			copy(nb, body)
			body = nb
		}
		_ = fc.c.SetReadDeadline(fc.s.limits.deadline(start, int64(len(body))))
		var m int
		m, err = fc.br.Read(body[len(body):min(int64(cap(body)), n)])
		body = body[:len(body)+m]
	}
	fc.body = body
	fc.bodyR.b = body
	if err != nil {
		fc.bodyR.err = io.ErrUnexpectedEOF
		if isTimeout(err) {
			fc.bodyR.err = ErrBodyTimeout
		}
		return err
	}
	return nil
}

func (fc *fastConn) request(ctx context.Context, rh reqHead) *http.Request {
	fc.url = url.URL{Path: rh.path}
	r := &http.Request{
		Method:        http.MethodPost,
		URL:           &fc.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        fc.hdr,
		Body:          &fc.bodyR,
		ContentLength: rh.contentLength,
		Host:          rh.host,
		RemoteAddr:    fc.remote,
		RequestURI:    rh.path,
		Close:         rh.close,
	}
	return r.WithContext(ctx)
}

// handle runs one request and signals fc.done.
func (fc *fastConn) handle(r *http.Request, rh reqHead, keepable bool) {
	w := &fc.w
	var out io.Writer = fc.c
	if fc.raw != nil {
		out = fc.raw
	}
	w.reset(out, fc.cancel, rh.close || !keepable || fc.s.shutting.Load())
	defer func() {
		keep := keepable
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				fc.s.log.Error("panic serving request", "remote", fc.remote, "panic", fmt.Sprint(p))
			}
			keep = false
		} else if !w.finish() {
			keep = false
		}
		fc.cancel()
		fc.keep = keep && !w.closeAfter
		fc.doneAt = time.Now()
		if fc.keep {
			fc.state.Store(connIdle)
			if fc.s.shutting.Load() && fc.state.CompareAndSwap(connIdle, connClosed) {
				_ = fc.c.Close()
			}
		} else {
			fc.closeConn()
		}
		w.release()
		fc.done <- struct{}{}
	}()
	fc.s.handler.ServeHTTP(w, r)
}

func (fc *fastConn) closeConn() {
	fc.state.Store(connClosed)
	_ = fc.c.Close()
}

// handOff gives the connection, with the bytes read so far, to net/http.
func (fc *fastConn) handOff() {
	buf, _ := fc.br.Peek(fc.br.Buffered())
	rc := &guardConn{Conn: &replayConn{Conn: fc.c, pre: bytes.Clone(buf)}}
	fc.br.Reset(nil)
	fc.s.readers.Put(fc.br)
	fc.state.Store(connClosed) // no longer ours
	fc.s.onHandoff()
	if !fc.s.handoff.give(rc) {
		_ = fc.c.Close()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bodyReader is a request body already read.
type bodyReader struct {
	b   []byte
	err error // after b: io.ErrUnexpectedEOF when the body was cut short
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if len(b.b) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

func (b *bodyReader) Close() error { return nil }

// fastResponse writes a response straight to the connection: the head
// and body are held until the first Flush (or the handler's end, which
// then sets Content-Length as net/http does), after which every Write
// is one chunk and every Flush one write to the connection.
type fastResponse struct {
	c          io.Writer // the connection, or its RawIO
	cancel     context.CancelFunc
	hdr        http.Header
	out        []byte // bytes not yet written to the connection
	pre        []byte // body written before the head
	status     int
	wroteHead  bool // WriteHeader was called
	headSent   bool // the head is in out (or sent)
	chunked    bool
	noBody     bool
	cl         int64 // declared Content-Length, -1 none
	written    int64
	closeAfter bool
	err        error
}

var (
	_ http.ResponseWriter = (*fastResponse)(nil)
	_ http.Flusher        = (*fastResponse)(nil)
)

func (w *fastResponse) reset(c io.Writer, cancel context.CancelFunc, closeAfter bool) {
	if w.hdr == nil {
		w.hdr = http.Header{}
	}
	*w = fastResponse{c: c, cancel: cancel, hdr: w.hdr, out: w.out[:0], pre: w.pre[:0], cl: -1, closeAfter: closeAfter}
}

// release drops the references of a finished response.
func (w *fastResponse) release() {
	clear(w.hdr)
	if cap(w.out) > fastMaxKeep {
		w.out = nil
	}
	if cap(w.pre) > fastMaxKeep {
		w.pre = nil
	}
	w.c, w.cancel = nil, nil
}

func (w *fastResponse) Header() http.Header { return w.hdr }

func (w *fastResponse) WriteHeader(code int) {
	if w.wroteHead || code < 200 { // 1xx informational responses are not sent
		return
	}
	w.wroteHead, w.status = true, code
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified
	if v := w.hdr.Get("Content-Length"); v != "" {
		if n, ok := httpwire.ParseLength(v); ok {
			w.cl = n
		} else {
			w.hdr.Del("Content-Length")
		}
	}
}

func (w *fastResponse) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if !w.wroteHead {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.headSent {
		w.pre = append(w.pre, p...)
		if len(w.pre) > fastPreBody {
			w.sendHead(false)
			w.flush()
		}
		return len(p), w.err
	}
	w.appendBody(p)
	if len(w.out) > fastMaxKeep {
		w.flush()
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// Flush writes what is held to the connection.
func (w *fastResponse) Flush() {
	if w.err != nil {
		return
	}
	if !w.wroteHead {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(false)
	}
	w.flush()
}

// finish ends the response and reports whether the connection can serve
// another request.
func (w *fastResponse) finish() bool {
	if w.err != nil {
		return false
	}
	if !w.wroteHead {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(true)
	}
	if w.chunked {
		w.out = append(w.out, "0\r\n\r\n"...)
	}
	w.flush()
	return w.err == nil && (w.cl < 0 || w.written == w.cl)
}

func (w *fastResponse) appendBody(p []byte) {
	if len(p) == 0 || w.noBody {
		return
	}
	if w.chunked {
		w.out = strconv.AppendInt(w.out, int64(len(p)), 16)
		w.out = append(w.out, "\r\n"...)
		w.out = append(w.out, p...)
		w.out = append(w.out, "\r\n"...)
		return
	}
	w.out = append(w.out, p...)
}

// sendHead puts the head, and the body held so far, into out; final
// means the handler has returned, so the body is complete.
func (w *fastResponse) sendHead(final bool) {
	w.headSent = true
	b := append(w.out, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	for k, vs := range w.hdr {
		if !httpwire.ValidToken(k) || k == "Transfer-Encoding" || k == "Connection" || k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			b = httpwire.AppendHeader(b, k, v)
		}
	}
	if _, ok := w.hdr["Date"]; !ok {
		b = append(b, "Date: "...)
		b = time.Now().UTC().AppendFormat(b, http.TimeFormat)
		b = append(b, "\r\n"...)
	}
	if _, ok := w.hdr["Content-Type"]; !ok && len(w.pre) > 0 && !w.noBody {
		b = httpwire.AppendHeader(b, "Content-Type", http.DetectContentType(w.pre))
	}
	switch {
	case w.noBody:
	case w.cl >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.cl, 10)
		b = append(b, "\r\n"...)
	case final:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(w.pre)), 10)
		b = append(b, "\r\n"...)
	default:
		w.chunked = true
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if w.closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	w.out = append(b, "\r\n"...)
	w.appendBody(w.pre)
	w.pre = w.pre[:0]
}

func (w *fastResponse) flush() {
	if len(w.out) == 0 || w.err != nil {
		return
	}
	_, err := w.c.Write(w.out)
	w.out = w.out[:0]
	if err != nil {
		w.err = err
		w.cancel() // the client is gone
	}
}

// handoffListener feeds connections handed off by the fast server to
// the net/http server.
type handoffListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to the server; false once the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// replayConn replays the bytes the fast server read before the handoff.
type replayConn struct {
	net.Conn
	pre []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http half-close as it does with a *net.TCPConn.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
