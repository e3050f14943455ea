package httpwire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestRawIO exercises the raw recvfrom/sendto path directly: data in
// both directions (more than a socket buffer, so sends hit EAGAIN and
// wait in the poller), read deadlines, EOF and errors after Close.
func TestRawIO(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := NewRawIO(a), NewRawIO(b)
	if ra == nil || rb == nil {
		t.Fatal("NewRawIO returned nil for a TCP connection")
	}
	if NewRawIO(struct{ net.Conn }{a}) != nil {
		t.Error("NewRawIO of a non-socket is not nil")
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	errc := make(chan error, 1)
	go func() {
		n, err := ra.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		errc <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(rb, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
	if n, err := ra.Read(nil); n != 0 || err != nil {
		t.Errorf("empty read: %d, %v", n, err)
	}

	// A read deadline fails a raw read that would wait.
	_ = a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := ra.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v", err)
	}
	_ = a.SetReadDeadline(time.Time{})

	// Back the other way, then EOF when the peer closes.
	if _, err := rb.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, err := io.ReadAtLeast(ra, buf, 4); err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	b.Close()
	if _, err := ra.Read(buf); err != io.EOF {
		t.Errorf("read after the peer closed: %v, want EOF", err)
	}
	a.Close()
	if _, err := ra.Write([]byte("x")); err == nil {
		t.Error("write after Close succeeded")
	}
	if _, err := ra.Read(buf); err == nil {
		t.Error("read after Close succeeded")
	}
}

// TestRawIOReset: writing to a connection the peer reset fails with an
// error (EPIPE or ECONNRESET from sendto), not a signal.
func TestRawIOReset(t *testing.T) {
	a, b := tcpPair(t)
	if tc, ok := b.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	b.Close()
	ra := NewRawIO(a)
	var err error
	for range 100 {
		if _, err = ra.Write(bytes.Repeat([]byte("x"), 1<<16)); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("writes to a reset connection kept succeeding")
	}
}
