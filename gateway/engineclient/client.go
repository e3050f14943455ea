// Package engineclient is the gateway's own HTTP/1.1 client to
// plain-http engines: pooled keep-alive connections, the request written
// in one write, the response head parsed in place. It does what the
// proxy needs of net/http.Transport at a fraction of its cost per
// request.
package engineclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/internal/httpwire"
)

// Client is the gateway's own HTTP/1.1 client to plain-http engines,
// used unless the gateway is given a Transport. It does what the proxy
// needs of net/http.Transport at a fraction of its cost per request: a
// pool of keep-alive connections per engine, the request (head and body)
// written in one write from the handler's goroutine, the response head
// read by http.ReadResponse (which also decodes chunked bodies) on the
// connection's own bufio.Reader. There are no per-connection read and
// write goroutines and no channel hand-offs.
//
// A connection goes back to the pool only after its response body ended
// cleanly (io.EOF, nothing left over, no Connection: close) and before
// the request's context ended; the end of the context closes the
// connection, which fails a blocked dial, write or read.
type Client struct {
	dialer      net.Dialer
	maxIdle     int           // idle connections kept per engine
	idleTimeout time.Duration // an idle connection older than this is closed
	now         func() time.Time
	raw         bool // raw recvfrom/sendto (RawSyscalls)

	mu    sync.RWMutex
	hosts map[string]*Host // by engine base URL; nil entry: not plain http
}

// Opt is an option of New.
type Opt interface{ apply(*Client) }

type clientOpt func(*Client)

func (o clientOpt) apply(c *Client) { o(c) }

// RawSyscalls makes the client read and write its connections with raw
// recvfrom/sendto calls (httpwire.RawIO, Linux only), which skip the
// scheduler's syscall bookkeeping. Default false: the connections' own
// Read and Write.
func RawSyscalls(on bool) Opt { return clientOpt(func(c *Client) { c.raw = on }) }

// New returns a client that dials with connectTimeout and reads the
// time from now.
func New(connectTimeout time.Duration, now func() time.Time, opts ...Opt) *Client {
	c := &Client{
		dialer:      net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second},
		maxIdle:     1024,
		idleTimeout: 90 * time.Second,
		now:         now,
		hosts:       map[string]*Host{},
	}
	for _, o := range opts {
		o.apply(c)
	}
	return c
}

// Host is one engine's idle connections and request-line parts.
type Host struct {
	addr string // host:port to dial
	host string // Host header value
	path string // escaped path of the base URL ("" or "/v1" or a prefix)

	mu       sync.Mutex
	idle     []*engineConn // most recently used last
	lastUsed time.Time
	dials    [connectSamples]dialSample // the last connect times, a ring
	nDials   int
}

// connectSamples is how many connect times a Host keeps.
const connectSamples = 4

type dialSample struct {
	d  time.Duration
	at time.Time
}

// ConnectRTT returns the shortest TCP connect time of the last few new
// connections to the engine made since maxAge before now (a connect
// takes one network round trip), or 0 when there is none.
func (hp *Host) ConnectRTT(now time.Time, maxAge time.Duration) time.Duration {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	var best time.Duration
	for _, s := range hp.dials[:min(hp.nDials, connectSamples)] {
		if now.Sub(s.at) <= maxAge && s.d > 0 && (best == 0 || s.d < best) {
			best = s.d
		}
	}
	return best
}

// engineConn is one connection to an engine.
type engineConn struct {
	nc        net.Conn
	raw       *httpwire.RawIO // nc's raw syscalls; nil: nc's own Read and Write
	br        *bufio.Reader
	pool      *Host
	nread     int64 // bytes read from nc, to tell a stale connection
	idleSince time.Time
	reused    bool
}

func (c *engineConn) Read(p []byte) (int, error) {
	var n int
	var err error
	if c.raw != nil {
		n, err = c.raw.Read(p)
	} else {
		n, err = c.nc.Read(p)
	}
	c.nread += int64(n)
	return n, err
}

// Host returns the pool of the engine at base, or nil when base is not a
// plain http URL (then net/http's transport is used).
func (c *Client) Host(base string) *Host {
	c.mu.RLock()
	hp, ok := c.hosts[base]
	c.mu.RUnlock()
	if ok {
		return hp
	}
	u, err := url.Parse(base)
	if err == nil && u.Scheme == "http" && u.Host != "" && u.User == nil && u.RawQuery == "" && u.Fragment == "" {
		port := u.Port()
		if port == "" {
			port = "80"
		}
		hp = &Host{addr: net.JoinHostPort(u.Hostname(), port), host: u.Host, path: strings.TrimRight(u.EscapedPath(), "/")}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.hosts[base]; ok {
		return old
	}
	c.hosts[base] = hp
	return hp
}

// AppendTarget appends the request target of path (escaped) on this
// engine: the base URL's path, without a trailing /v1 (an OpenAI base
// URL: /v1/... and the root routes such as /tokenize are the server's),
// as the gateway's upstream URL.
func (hp *Host) AppendTarget(b []byte, path string) []byte {
	p := hp.path
	if strings.HasSuffix(p, "/v1") && strings.HasPrefix(path, "/") {
		p = p[:len(p)-3]
	}
	return append(append(b, p...), path...)
}

// AppendRequestLine appends "method target HTTP/1.1" and the Host
// header of a request for path on this engine.
func (hp *Host) AppendRequestLine(b []byte, method, path string) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = hp.AppendTarget(b, path)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, hp.host...)
	return append(b, "\r\n"...)
}

// get returns an idle connection, or dials one.
func (hp *Host) get(ctx context.Context, c *Client, fresh bool) (*engineConn, error) {
	if !fresh {
		now := c.now()
		hp.mu.Lock()
		hp.lastUsed = now
		for n := len(hp.idle); n > 0; n = len(hp.idle) {
			ec := hp.idle[n-1]
			hp.idle[n-1] = nil
			hp.idle = hp.idle[:n-1]
			if now.Sub(ec.idleSince) < c.idleTimeout {
				hp.mu.Unlock()
				ec.reused = true
				return ec, nil
			}
			ec.nc.Close()
		}
		hp.mu.Unlock()
	}
	t0 := c.now()
	nc, err := c.dialer.DialContext(ctx, "tcp", hp.addr)
	if err != nil {
		return nil, err
	}
	t1 := c.now()
	hp.mu.Lock()
	hp.dials[hp.nDials%connectSamples] = dialSample{d: t1.Sub(t0), at: t1}
	hp.nDials++
	hp.mu.Unlock()
	ec := &engineConn{nc: nc, pool: hp}
	if c.raw {
		ec.raw = httpwire.NewRawIO(nc)
	}
	ec.br = bufio.NewReaderSize(ec, ReadBufSize)
	return ec, nil
}

// put returns a connection whose last response ended cleanly.
func (hp *Host) put(c *Client, ec *engineConn) {
	ec.idleSince = c.now()
	hp.mu.Lock()
	if len(hp.idle) < c.maxIdle {
		hp.idle = append(hp.idle, ec)
		ec = nil
	}
	hp.mu.Unlock()
	if ec != nil {
		ec.nc.Close()
	}
}

// CloseIdle closes the idle connections unused since before cutoff and
// forgets engines unused since then.
func (c *Client) CloseIdle(cutoff time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for base, hp := range c.hosts {
		if hp == nil {
			continue
		}
		hp.mu.Lock()
		keep := hp.idle[:0]
		for _, ec := range hp.idle {
			if ec.idleSince.Before(cutoff) {
				ec.nc.Close()
			} else {
				keep = append(keep, ec)
			}
		}
		clear(hp.idle[len(keep):])
		hp.idle = keep
		unused := len(keep) == 0 && hp.lastUsed.Before(cutoff)
		hp.mu.Unlock()
		if unused {
			delete(c.hosts, base)
		}
	}
}

// IdleTimeout is the age at which an idle connection is closed rather
// than reused.
func (c *Client) IdleTimeout() time.Duration { return c.idleTimeout }

// IdleConns counts the idle connections of every engine.
func (c *Client) IdleConns() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, hp := range c.hosts {
		if hp != nil {
			hp.mu.Lock()
			n += len(hp.idle)
			hp.mu.Unlock()
		}
	}
	return n
}

// CloseAll closes every idle connection.
func (c *Client) CloseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, hp := range c.hosts {
		if hp == nil {
			continue
		}
		hp.mu.Lock()
		for _, ec := range hp.idle {
			ec.nc.Close()
		}
		hp.idle = nil
		hp.mu.Unlock()
	}
}

// ReadBufSize is the read buffer of a connection: room for every event
// of a stream that arrives in one read (the relay's buffer is as big).
const ReadBufSize = 32 << 10

// errBodyClosed is read from a body after Close.
var errBodyClosed = errors.New("engine response body closed")

// Do sends req, a complete HTTP/1.1 request (head and body), to hp and
// reads the response head. The response body must be read to io.EOF
// (the connection then goes back to the pool) or closed. A kept-alive
// connection that the engine had closed (it fails before any byte of the
// response) is replaced by a new one, once.
func (c *Client) Do(ctx context.Context, hp *Host, req []byte) (*http.Response, error) {
	fresh := false
	for {
		ec, err := hp.get(ctx, c, fresh)
		if err != nil {
			return nil, err
		}
		nc := ec.nc
		stop := context.AfterFunc(ctx, func() { nc.Close() })
		n0 := ec.nread
		resp, err := ec.roundTrip(req)
		if err == nil {
			resp.body.c, resp.body.ec, resp.body.stop = c, ec, stop
			return &resp.resp, nil
		}
		stopped := stop()
		nc.Close()
		if !stopped || ctx.Err() != nil || !ec.reused || ec.nread != n0 || fresh {
			return nil, err
		}
		fresh = true
	}
}

// engineResponse is a response and its body, allocated together.
type engineResponse struct {
	resp http.Response
	body engineBody
}

// Response headers shared (read-only) by every response with that
// Content-Type; others get their own.
var (
	sseHeader  = http.Header{"Content-Type": {"text/event-stream"}}
	jsonHeader = http.Header{"Content-Type": {"application/json"}}
	noHeader   = http.Header{}
)

// maxHeaderLines bounds a response head.
const maxHeaderLines = 256

var errMalformedResponse = errors.New("malformed response from engine")

func (ec *engineConn) roundTrip(req []byte) (*engineResponse, error) {
	var err error
	if ec.raw != nil {
		_, err = ec.raw.Write(req)
	} else {
		_, err = ec.nc.Write(req)
	}
	if err != nil {
		return nil, err
	}
	return ec.readResponse()
}

// max1xx is how many 1xx informational responses may precede the final
// one (as net/http.Transport).
const max1xx = 5

// readResponse reads the final response: 1xx informational responses
// (103 Early Hints, a 100 Continue) are skipped as net/http.Transport
// skips them; a 101 Switching Protocols, which the gateway never asks
// for, is an error.
func (ec *engineConn) readResponse() (*engineResponse, error) {
	for n := 0; ; n++ {
		r, err := ec.readHead()
		if err != nil {
			return nil, err
		}
		switch st := r.resp.StatusCode; {
		case st == http.StatusSwitchingProtocols:
			return nil, fmt.Errorf("%w: unexpected 101 Switching Protocols", errMalformedResponse)
		case st >= 200:
			return r, nil
		}
		if n == max1xx {
			return nil, fmt.Errorf("%w: more than %d 1xx responses", errMalformedResponse, max1xx)
		}
	}
}

// readHead reads a response head and frames its body as
// http.ReadResponse does (FuzzClientMatchesNetHTTP checks it), except
// that it refuses statuses below 100, versions other than HTTP/1.0 and
// HTTP/1.1, obs-folded header lines and lines longer than the read
// buffer. Of the headers it keeps only Content-Type and Retry-After (all
// the proxy passes on; the first of each, as Header.Get); the shared
// Header values must not be modified.
func (ec *engineConn) readHead() (*engineResponse, error) {
	line, err := ec.readLine()
	if err != nil {
		return nil, err
	}
	// HTTP/1.x NNN[ reason]
	bad := func() error { return fmt.Errorf("%w: status line %q", errMalformedResponse, line) }
	if len(line) < 9 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' {
		return nil, bad()
	}
	code := bytes.TrimLeft(line[9:], " ")
	if len(code) < 3 || (len(code) > 3 && code[3] != ' ') {
		return nil, bad()
	}
	status := 0
	for _, c := range code[:3] {
		if c < '0' || c > '9' {
			return nil, bad()
		}
		status = status*10 + int(c-'0')
	}
	if status < 100 {
		return nil, bad()
	}
	r := &engineResponse{}
	r.resp.StatusCode = status
	r.resp.ProtoMajor, r.resp.ProtoMinor = 1, int(line[7]-'0')
	http10 := line[7] == '0'
	r.resp.Header = noHeader
	b := &r.body
	b.br = ec.br
	b.remain = -1
	var (
		retryAfter      string // a copy: the line is overwritten by the next read
		haveCT, haveRA  bool
		lbuf            [20]byte // the first Content-Length value
		length          []byte
		haveLength      bool
		teChunked       bool // the last Transfer-Encoding is chunked
		teValue         string
		nTE             int
		hasClose, hasKA bool
	)
	for n := 0; ; n++ {
		line, err := ec.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			break
		}
		if n >= maxHeaderLines {
			return nil, fmt.Errorf("%w: more than %d header lines", errMalformedResponse, maxHeaderLines)
		}
		k, v, err := headerField(line)
		if err != nil {
			return nil, err
		}
		switch {
		case bytes.EqualFold(k, []byte("Content-Type")):
			if !haveCT {
				haveCT = true
				switch string(v) {
				case "text/event-stream":
					r.resp.Header = sseHeader
				case "application/json":
					r.resp.Header = jsonHeader
				default:
					r.resp.Header = http.Header{"Content-Type": {string(v)}}
				}
			}
		case bytes.EqualFold(k, []byte("Retry-After")):
			if !haveRA {
				haveRA, retryAfter = true, string(v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			nTE++
			if teChunked = bytes.EqualFold(v, []byte("chunked")); !teChunked {
				teValue = string(v)
			}
		case bytes.EqualFold(k, []byte("Content-Length")):
			if haveLength && !bytes.Equal(length, v) {
				return nil, fmt.Errorf("%w: content lengths %q and %q", errMalformedResponse, length, v)
			}
			haveLength, length = true, append(lbuf[:0], v...) // allocates only above 20 bytes
		case bytes.EqualFold(k, []byte("Connection")):
			for t := range bytes.SplitSeq(v, []byte{','}) {
				switch t = bytes.Trim(t, " \t"); {
				case bytes.EqualFold(t, []byte("close")):
					hasClose = true
				case bytes.EqualFold(t, []byte("keep-alive")):
					hasKA = true
				}
			}
		}
	}
	if haveRA {
		h := http.Header{"Retry-After": {retryAfter}}
		if haveCT {
			h["Content-Type"] = r.resp.Header["Content-Type"]
		}
		r.resp.Header = h
	}
	// As net/http: HTTP/1.0 keeps the connection only with keep-alive,
	// HTTP/1.1 unless close; HTTP/1.0 ignores Transfer-Encoding.
	b.keep = !hasClose && (!http10 || hasKA)
	chunked := false
	if nTE > 0 && !http10 {
		if nTE > 1 || !teChunked {
			return nil, fmt.Errorf("%w: %d transfer encodings, the last %q", errMalformedResponse, nTE, teValue)
		}
		chunked = true
	}
	if haveLength {
		n, ok := parseLength(length)
		if !ok {
			return nil, fmt.Errorf("%w: content length %q", errMalformedResponse, length)
		}
		b.remain = n
	}
	switch {
	case status < 200 || status == http.StatusNoContent || status == http.StatusNotModified:
		b.remain = 0
	case chunked:
		b.remain = -1
		b.cr = httputil.NewChunkedReader(ec.br)
	case b.remain < 0:
		b.keep = false // the body ends when the engine closes
	}
	r.resp.ContentLength = b.remain
	r.resp.Close = !b.keep
	r.resp.Body = b
	return r, nil
}

// readLine reads a line as bufio.Reader.ReadLine returns it: without its
// LF and one CR before it. A line longer than the buffer is an error.
func (ec *engineConn) readLine() ([]byte, error) {
	return readLine(ec.br)
}

func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// headerField splits a header line (not empty) as net/textproto does:
// the line trimmed of spaces and tabs, the name up to the first colon
// (token bytes, or spaces, which make a name net/http keeps but never
// matches), the value of visible bytes, spaces and tabs, trimmed. A line
// starting with a space or tab (obs-fold) is refused.
func headerField(line []byte) (k, v []byte, err error) {
	if line[0] == ' ' || line[0] == '\t' {
		return nil, nil, fmt.Errorf("%w: folded header line %q", errMalformedResponse, line)
	}
	line = bytes.TrimRight(line, " \t")
	k, v, ok := bytes.Cut(line, []byte{':'})
	if !ok || len(k) == 0 {
		return nil, nil, fmt.Errorf("%w: header line %q", errMalformedResponse, line)
	}
	for _, c := range k {
		if c != ' ' && !tokenByte(c) {
			return nil, nil, fmt.Errorf("%w: header line %q", errMalformedResponse, line)
		}
	}
	for _, c := range v {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return nil, nil, fmt.Errorf("%w: header line %q", errMalformedResponse, line)
		}
	}
	return k, bytes.TrimLeft(v, " \t"), nil
}

// tokenByte reports whether c may appear in an RFC 9110 token.
func tokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseLength parses a Content-Length value as net/http: decimal digits
// only, below 2^63.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// engineBody is a response body on a pooled connection: chunked (cr), of
// a known length (remain >= 0) or up to the connection's end.
type engineBody struct {
	br      *bufio.Reader
	cr      io.Reader // chunked decoder, or nil
	remain  int64     // bytes left when not chunked; -1: up to EOF
	trailer bool      // the chunked body ended; its trailer is still to read
	c       *Client
	ec      *engineConn // nil once released
	stop    func() bool // stops closing the connection at the context's end
	keep    bool        // the connection may serve another request after this body
	err     error       // what Read returns once released
}

func (b *engineBody) Read(p []byte) (int, error) {
	if b.ec == nil {
		return 0, b.err
	}
	n, err := b.read(p)
	if err != nil {
		b.release(err == io.EOF)
		b.err = err
	}
	return n, err
}

func (b *engineBody) read(p []byte) (int, error) {
	switch {
	case b.trailer:
		return 0, b.readTrailer()
	case b.cr != nil:
		n, err := b.cr.Read(p)
		if err != io.EOF {
			return n, err
		}
		b.trailer = true
		if n > 0 {
			// Give the data now; end with it only if the trailer is
			// already here (never wait for it holding data).
			if t, _ := b.br.Peek(b.br.Buffered()); !bytes.HasPrefix(t, []byte("\r\n")) {
				return n, nil
			}
		}
		return n, b.readTrailer()
	case b.remain == 0:
		return 0, io.EOF
	case b.remain > 0:
		if int64(len(p)) > b.remain {
			p = p[:b.remain]
		}
		n, err := b.br.Read(p)
		b.remain -= int64(n)
		if b.remain == 0 {
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	default:
		return b.br.Read(p)
	}
}

// readTrailer reads the trailer section of a chunked body (ignored) up
// to its empty line, and reports io.EOF. As net/http: CRLF alone ends
// it; otherwise a CRLF CRLF must be in sight (within the read buffer)
// and the header lines up to an empty line must be well formed.
func (b *engineBody) readTrailer() error {
	if p, _ := b.br.Peek(2); string(p) == "\r\n" {
		_, _ = b.br.Discard(2)
		return io.EOF
	}
	for n := 4; ; n++ {
		p, err := b.br.Peek(n)
		if bytes.HasSuffix(p, []byte("\r\n\r\n")) {
			break
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%w: trailer: %w", errMalformedResponse, err)
		}
	}
	for range maxHeaderLines {
		line, err := readLine(b.br)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return io.EOF
		}
		if _, _, err := headerField(line); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: trailer too long", errMalformedResponse)
}

func (b *engineBody) Close() error {
	if b.ec != nil {
		b.release(false)
		b.err = errBodyClosed
	}
	return nil
}

// release pools the connection after a clean end of a reusable response,
// else closes it.
func (b *engineBody) release(clean bool) {
	ec := b.ec
	b.ec = nil
	if b.stop() && clean && b.keep && ec.br.Buffered() == 0 {
		ec.pool.put(b.c, ec)
		return
	}
	ec.nc.Close()
}
