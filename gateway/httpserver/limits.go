package httpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults of BodyLimits.
const (
	// DefaultBodyTimeout bounds the arrival of a whole request body,
	// from the end of its head.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultMinBodyRate is the least average rate, in bytes per second,
	// at which a body must arrive once DefaultBodyGrace has passed.
	DefaultMinBodyRate = 1024
	// DefaultBodyGrace is the time a body may take before the minimum
	// rate applies.
	DefaultBodyGrace = 5 * time.Second
)

// ErrBodyTimeout is read from a request body that did not arrive within
// the BodyLimits. The connection is closed after the response.
var ErrBodyTimeout = errors.New("request body arrived too slowly")

// BodyLimits bound how long a request body may take to arrive, on both
// servers: the body must be complete within Timeout of the end of the
// head, and after Grace it must have arrived at an average of at least
// MinRate bytes per second (so the n-th byte is due by head end + Grace
// + n/MinRate). A body that misses either deadline reads
// ErrBodyTimeout. The zero value means the defaults.
type BodyLimits struct {
	// Timeout: default DefaultBodyTimeout; negative means none.
	Timeout time.Duration
	// MinRate in bytes per second: default DefaultMinBodyRate; negative
	// means none.
	MinRate int64
	// Grace: default DefaultBodyGrace; negative means none.
	Grace time.Duration
}

// withDefaults fills in the zero fields.
func (l BodyLimits) withDefaults() BodyLimits {
	if l.Timeout == 0 {
		l.Timeout = DefaultBodyTimeout
	}
	if l.MinRate == 0 {
		l.MinRate = DefaultMinBodyRate
	}
	if l.Grace == 0 {
		l.Grace = DefaultBodyGrace
	}
	return l
}

// deadline is when the byte after the first n of a body whose head ended
// at start is due; zero means no deadline.
func (l BodyLimits) deadline(start time.Time, n int64) time.Time {
	var d time.Time
	if l.Timeout > 0 {
		d = start.Add(l.Timeout)
	}
	if l.MinRate > 0 {
		grace := max(l.Grace, 0)
		// n/MinRate seconds, saturating at 2^32 s (no overflow).
		due := time.Duration(min(float64(n)/float64(l.MinRate), 1<<32) * float64(time.Second))
		if r := start.Add(grace + due); d.IsZero() || r.Before(d) {
			d = r
		}
	}
	return d
}

// Harden makes the net/http server srv enforce the body limits l (each
// request's body reads ErrBodyTimeout when it comes too slowly) and
// answer 400, closing the connection, to a request that has both
// Content-Length and Transfer-Encoding (net/http itself drops the
// Content-Length and reads the chunked body; RFC 9112 section 6.3 lets a
// server treat the message as an error, which closes the door to request
// smuggling). It wraps srv.Handler and sets srv.ConnContext; the
// connections must come from GuardListener (New hands its connections
// off that way).
func Harden(srv *http.Server, l BodyLimits) {
	l = l.withDefaults()
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux
	}
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		if gc, ok := c.(*guardConn); ok {
			ctx = context.WithValue(ctx, guardKey{}, gc)
		}
		return ctx
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gc, _ := r.Context().Value(guardKey{}).(*guardConn)
		if gc != nil && len(r.TransferEncoding) > 0 && gc.conflict.Load() {
			w.Header().Set("Connection", "close")
			writeJSONError(w, http.StatusBadRequest, "invalid_request",
				"a request must not have both Content-Length and Transfer-Encoding")
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &slowBody{rc: r.Body, ctl: http.NewResponseController(w), l: l, start: time.Now()}
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSONError writes an OpenAI-style error.
func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	b := errorBody(code, msg)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// errorBody is an OpenAI-style error body of type invalid_request_error,
// ending in a newline.
func errorBody(code, msg string) []byte {
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	}
	b, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: strings.ToValidUTF8(msg, ""), Type: "invalid_request_error", Code: code}})
	return append(b, '\n')
}

type guardKey struct{}

// slowBody is a net/http request body read under BodyLimits: each Read
// runs under the read deadline of the bytes read so far.
type slowBody struct {
	rc    interface{ Read([]byte) (int, error) }
	ctl   *http.ResponseController
	l     BodyLimits
	start time.Time
	n     int64
	done  bool
	err   error
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, b.err
	}
	if d := b.l.deadline(b.start, b.n); !d.IsZero() {
		_ = b.ctl.SetReadDeadline(d)
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err != nil {
		b.done = true
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = ErrBodyTimeout
		}
		b.err = err
		// The body is over: no deadline on the connection's next reads
		// (net/http's own, or its watch for the client going away).
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *slowBody) Close() error {
	if c, ok := b.rc.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// GuardListener wraps ln's connections for a server set up by Harden.
func GuardListener(ln net.Listener) net.Listener { return guardListener{ln} }

type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c}, nil
}

// guardConn watches the bytes a net/http server reads for a message head
// with both Content-Length and Transfer-Encoding header lines (conflict,
// sticky). It looks at every line, bodies included: a body holding such
// a head is no valid request body anyway (JSON has no line starting
// with a header name), and the check applies only to requests with a
// Transfer-Encoding.
type guardConn struct {
	net.Conn
	scan     framingScan
	conflict atomic.Bool
}

func (c *guardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.scan.feed(p[:n]) {
		c.conflict.Store(true)
	}
	return n, err
}

// Write passes p on, except the error responses net/http writes itself
// before any handler runs (a malformed head: two Content-Lengths, an
// unknown Transfer-Encoding, no Host, a head too large, an Expect it
// does not know), which it rewrites from text/plain into OpenAI-style
// JSON (stdErrorJSON), so that every error the HTTP layer answers is one
// an OpenAI SDK reads.
func (c *guardConn) Write(p []byte) (int, error) {
	if out, ok := stdErrorJSON(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// stdErrorHeaders follow the status line of net/http's own error
// responses (net/http server.go, conn.serve): in this order no handler's
// response has them, since net/http sorts a response's header lines
// (Connection before Content-Type).
const stdErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// stdExpectationFailed starts net/http's answer to an Expect other than
// 100-continue: 417, Connection: close, a Date, an empty body
// (stdEmptyEnd). A handler's empty 417 that closes the connection reads
// the same and is rewritten too.
const (
	stdExpectationFailed = "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\n"
	stdEmptyEnd          = "\r\nContent-Length: 0\r\n\r\n"
)

// stdErrorJSON returns the OpenAI-style equivalent of p when p is one of
// net/http's own error responses (see guardConn.Write): the same status
// and Connection: close, the text net/http gives as the message.
func stdErrorJSON(p []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if len(p) < len(proto)+3 || string(p[:len(proto)]) != proto {
		return nil, false
	}
	status, err := strconv.Atoi(string(p[len(proto) : len(proto)+3]))
	if err != nil || status < 400 || status > 599 {
		return nil, false
	}
	var msg string
	switch {
	case bytes.HasPrefix(p, []byte(stdExpectationFailed)) && bytes.HasSuffix(p, []byte(stdEmptyEnd)) &&
		bytes.Count(p, []byte("\r\n\r\n")) == 1 && !bytes.Contains(p, []byte("\r\nContent-Type:")):
		msg = "the Expect header must be 100-continue or absent"
	default:
		eol := bytes.Index(p, []byte("\r\n"))
		if eol < 0 || !bytes.HasPrefix(p[eol:], []byte(stdErrorHeaders)) {
			return nil, false
		}
		msg = string(p[eol+len(stdErrorHeaders):])
		// "400 Bad Request: missing required Host header" -> the part
		// after the status.
		if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, strconv.Itoa(status)+" ") {
			msg = msg[i+2:]
		}
	}
	body := errorBody(stdErrorCode(status), msg)
	out := make([]byte, 0, 128+len(body))
	out = append(out, proto...)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(status)...)
	out = append(out, "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n\r\n"...)
	return append(out, body...), true
}

// stdErrorCode is the OpenAI error code of a status net/http answers a
// malformed request with.
func stdErrorCode(status int) string {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return "request_header_too_large"
	case http.StatusNotImplemented:
		return "unsupported_transfer_encoding"
	case http.StatusExpectationFailed:
		return "expectation_failed"
	case http.StatusHTTPVersionNotSupported:
		return "http_version_not_supported"
	default:
		return "invalid_request"
	}
}

// CloseWrite lets net/http half-close as it does with a *net.TCPConn.
func (c *guardConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// framingScan finds message heads (runs of lines up to an empty one)
// with both a Content-Length and a Transfer-Encoding line.
type framingScan struct {
	pre     [18]byte // the current line's first bytes, lower-cased
	lineLen int
	cl, te  bool
}

var (
	clName = []byte("content-length:")
	teName = []byte("transfer-encoding:")
)

// feed scans p and reports whether a conflicting head ended in it.
func (s *framingScan) feed(p []byte) bool {
	found := false
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		for _, c := range seg {
			if s.lineLen < len(s.pre) {
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				s.pre[s.lineLen] = c
			}
			s.lineLen++
			if s.lineLen > len(s.pre) {
				break
			}
		}
		if i < 0 {
			return found
		}
		switch n := min(s.lineLen, len(s.pre)); {
		case s.lineLen == 0 || (s.lineLen == 1 && s.pre[0] == '\r'):
			found = found || (s.cl && s.te)
			s.cl, s.te = false, false
		case n >= len(clName) && bytes.Equal(s.pre[:len(clName)], clName):
			s.cl = true
		case n >= len(teName) && bytes.Equal(s.pre[:len(teName)], teName):
			s.te = true
		}
		s.lineLen = 0
		p = p[i+1:]
	}
	return found
}
