package httpserver

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

func TestBodyDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		l    BodyLimits
		n    int64
		want time.Duration // after t0; -1: none
	}{
		{"defaults, first byte", BodyLimits{}.withDefaults(), 0, DefaultBodyGrace},
		{"defaults, 10 KiB in", BodyLimits{}.withDefaults(), 10 << 10, DefaultBodyGrace + 10*time.Second},
		{"defaults, capped by the timeout", BodyLimits{}.withDefaults(), 1 << 20, DefaultBodyTimeout},
		{"no rate", BodyLimits{Timeout: time.Second, MinRate: -1}, 1 << 30, time.Second},
		{"no timeout", BodyLimits{Timeout: -1, MinRate: 100, Grace: -1}, 50, 500 * time.Millisecond},
		{"nothing", BodyLimits{Timeout: -1, MinRate: -1}, 5, -1},
		{"huge count", BodyLimits{Timeout: -1, MinRate: 1, Grace: -1}, 1 << 62, (1 << 32) * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.l.deadline(t0, tt.n)
			if tt.want < 0 {
				if !d.IsZero() {
					t.Fatalf("deadline %v, want none", d)
				}
				return
			}
			if got := d.Sub(t0); got != tt.want {
				t.Fatalf("deadline after %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReadBodyGrowsWithArrivals: a body declared at 4 MiB of which 110
// bytes arrive costs a buffer of a few KiB, not 4 MiB, and the read
// stops at the body deadline with ErrBodyTimeout.
func TestReadBodyGrowsWithArrivals(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := &Server{limits: BodyLimits{Timeout: 200 * time.Millisecond, MinRate: -1}}
	fc := &fastConn{s: s, c: a, br: bufio.NewReaderSize(a, fastReadBufSize)}
	go func() { _, _ = b.Write([]byte(strings.Repeat("x", 110))) }()
	err := fc.readBody(4<<20, time.Now())
	if err == nil {
		t.Fatal("no error reading a body that never completes")
	}
	if len(fc.body) != 110 || cap(fc.body) > bodyChunk {
		t.Errorf("body len %d cap %d, want 110 and at most %d", len(fc.body), cap(fc.body), bodyChunk)
	}
	got, rerr := io.ReadAll(&fc.bodyR)
	if len(got) != 110 || !errors.Is(rerr, ErrBodyTimeout) {
		t.Errorf("handler reads %d bytes, %v; want 110, ErrBodyTimeout", len(got), rerr)
	}
}

// TestReadBodyWhole: a body that arrives in pieces is read whole, its
// buffer grown to its length.
func TestReadBodyWhole(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := &Server{limits: BodyLimits{}.withDefaults()}
	fc := &fastConn{s: s, c: a, br: bufio.NewReaderSize(a, fastReadBufSize)}
	want := strings.Repeat("0123456789", 3000)
	go func() {
		for i := 0; i < len(want); i += 1000 {
			_, _ = b.Write([]byte(want[i : i+1000]))
		}
	}()
	if err := fc.readBody(int64(len(want)), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(&fc.bodyR); string(got) != want || err != nil {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
}

func TestBareLF(t *testing.T) {
	for _, tt := range []struct {
		b    string
		from int
		want bool
	}{
		{"a\r\nb\r\n", 0, false}, {"a\nb", 0, true}, {"\n", 0, true}, {"a\r\nb\n", 3, true}, {"a\r", 0, false},
		{"a\r\n", 2, false}, // the CR before from still counts
	} {
		if got := bareLF([]byte(tt.b), tt.from); got != tt.want {
			t.Errorf("bareLF(%q, %d) = %v", tt.b, tt.from, got)
		}
	}
}

func TestFramingScan(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"POST / HTTP/1.1\ntransfer-encoding: chunked\ncontent-length:3\n\n", true},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", false},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nPOST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"POST / HTTP/1.1\r\nX-Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n", false}, // not ended yet
	} {
		for split := range len(tt.in) {
			var s framingScan
			got := s.feed([]byte(tt.in[:split]))
			got = s.feed([]byte(tt.in[split:])) || got
			if got != tt.want {
				t.Fatalf("%q split at %d: %v, want %v", tt.in, split, got, tt.want)
			}
		}
	}
}

// FuzzFramingScan: the scan finds a head with both Content-Length and
// Transfer-Encoding exactly when net/textproto (what net/http's server
// reads heads with) parses one, however the bytes are split.
func FuzzFramingScan(f *testing.F) {
	f.Add("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 7)
	f.Add("POST / HTTP/1.1\nhost: a\ncontent-LENGTH: 3\n\n", 20)
	f.Add("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n Content-Length: 1\r\n\r\n", 3)
	f.Fuzz(func(t *testing.T, head string, split int) {
		if !strings.HasSuffix(head, "\n\n") && !strings.HasSuffix(head, "\r\n\r\n") {
			return
		}
		tp := textproto.NewReader(bufio.NewReader(strings.NewReader(head)))
		if _, err := tp.ReadLine(); err != nil {
			return
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		if rest, _ := io.ReadAll(tp.R); len(rest) > 0 {
			return // more than one head
		}
		_, cl := h["Content-Length"]
		_, te := h["Transfer-Encoding"]
		split = min(max(split, 0), len(head))
		var s framingScan
		got := s.feed([]byte(head[:split]))
		got = s.feed([]byte(head[split:])) || got
		if got != (cl && te) {
			t.Fatalf("scan %v, textproto Content-Length %v Transfer-Encoding %v: %q", got, cl, te, head)
		}
	})
}
