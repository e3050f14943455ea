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
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/internal/wire"
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
// recvfrom/sendto calls (wire.RawIO, Linux only), which skip the
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
	raw       *wire.RawIO // nc's raw syscalls; nil: nc's own Read and Write
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
// engine: the base URL's path, without a trailing /v1 when path starts
// with /v1/ (as the gateway's upstream URL).
func (hp *Host) AppendTarget(b []byte, path string) []byte {
	p := hp.path
	if strings.HasSuffix(p, "/v1") && strings.HasPrefix(path, "/v1/") {
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
		ec.raw = wire.NewRawIO(nc)
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
	for range 8 {
		r, err := ec.readHead()
		if err != nil {
			return nil, err
		}
		if r.resp.StatusCode >= 200 {
			return r, nil
		}
		// 1xx informational responses precede the real one.
	}
	return nil, errors.New("too many 1xx responses")
}

// readHead reads a response head and frames its body. Of the headers it
// keeps only Content-Type and Retry-After (all the proxy passes on); the
// shared Header values must not be modified.
func (ec *engineConn) readHead() (*engineResponse, error) {
	line, err := ec.br.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	// HTTP/1.x NNN reason
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' || (len(line) > 12 && line[12] != ' ' && line[12] != '\r' && line[12] != '\n') {
		return nil, fmt.Errorf("%w: status line %q", errMalformedResponse, bytes.TrimSpace(line))
	}
	status := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil, fmt.Errorf("%w: status line %q", errMalformedResponse, bytes.TrimSpace(line))
		}
		status = status*10 + int(c-'0')
	}
	r := &engineResponse{}
	r.resp.StatusCode = status
	r.resp.ProtoMajor, r.resp.ProtoMinor = 1, int(line[7]-'0')
	r.body.keep = line[7] == '1'
	r.resp.Header = noHeader
	b := &r.body
	b.br = ec.br
	b.remain = -1
	chunked := false
	retryAfter := "" // a copy: the line is overwritten by the next read
	for n := 0; ; n++ {
		line, err := ec.br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if n > maxHeaderLines {
			return nil, fmt.Errorf("%w: more than %d header lines", errMalformedResponse, maxHeaderLines)
		}
		line = wire.TrimEOL(line)
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(k) == 0 || k[0] == ' ' || k[0] == '\t' || k[len(k)-1] == ' ' {
			return nil, fmt.Errorf("%w: header line %q", errMalformedResponse, line)
		}
		v = bytes.Trim(v, " \t")
		switch {
		case bytes.EqualFold(k, []byte("Content-Type")):
			switch string(v) {
			case "text/event-stream":
				r.resp.Header = sseHeader
			case "application/json":
				r.resp.Header = jsonHeader
			default:
				r.resp.Header = http.Header{"Content-Type": {string(v)}}
			}
		case bytes.EqualFold(k, []byte("Retry-After")):
			retryAfter = string(v)
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(v, []byte("chunked")) {
				return nil, fmt.Errorf("%w: transfer encoding %q", errMalformedResponse, v)
			}
			chunked = true
		case bytes.EqualFold(k, []byte("Content-Length")):
			cl, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || cl < 0 || (b.remain >= 0 && cl != b.remain) {
				return nil, fmt.Errorf("%w: content length %q", errMalformedResponse, v)
			}
			b.remain = cl
		case bytes.EqualFold(k, []byte("Connection")):
			for t := range bytes.SplitSeq(v, []byte{','}) {
				switch t = bytes.TrimSpace(t); {
				case bytes.EqualFold(t, []byte("close")):
					b.keep = false
				case bytes.EqualFold(t, []byte("keep-alive")):
					b.keep = true
				}
			}
		}
	}
	if retryAfter != "" {
		h := http.Header{"Retry-After": {retryAfter}}
		if ct := r.resp.Header["Content-Type"]; len(ct) > 0 {
			h["Content-Type"] = ct
		}
		r.resp.Header = h
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
// to its empty line, and reports io.EOF.
func (b *engineBody) readTrailer() error {
	for range maxHeaderLines {
		line, err := b.br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) <= 2 && (string(line) == "\r\n" || string(line) == "\n") {
			return io.EOF
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
