package httpserver

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
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
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":{"message":"` + msg + `","type":"invalid_request_error","param":null,"code":"` + code + `"}}` + "\n"))
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
