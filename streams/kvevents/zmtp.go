package kvevents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// This file is the client half of ZMTP 3.0 (rfc.zeromq.org/spec/23) with
// the NULL mechanism: a SUB socket for an engine's PUB endpoint and a
// DEALER for its ROUTER replay endpoint, one TCP connection each. It is
// written here instead of using a general ZeroMQ library because the
// relay reads frames from engines it does not trust: every frame's
// declared length is checked against MaxFrameBytes before a byte is
// allocated, and a message has at most MaxFrames frames. (go-zeromq/zmq4,
// which the tests publish with, allocates whatever length a peer
// declares.) TestRelayPublishesBatchesInOrderReplaysGapsAndResyncsRestarts
// runs it against zmq4's PUB and ROUTER sockets.

// ZMTP limits and errors.
var (
	// ErrFrameTooLarge: a peer declared a frame above the limit.
	ErrFrameTooLarge = errors.New("zmtp frame too large")
	// ErrTooManyFrames: a peer sent a message of more frames than the limit.
	ErrTooManyFrames = errors.New("zmtp message has too many frames")
	// ErrHandshake: the peer is not a ZMTP 3 peer of the expected socket type.
	ErrHandshake = errors.New("zmtp handshake")
)

const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04

	greetingLen = 64
)

// conn is one ZMTP connection. Reads and writes are not concurrent-safe;
// the relay uses each conn from one goroutine.
type conn struct {
	nc        net.Conn
	r         *bufio.Reader
	maxFrame  int
	maxFrames int
}

// dialZMTP connects to endpoint ("tcp://host:port"), sends the greeting and
// READY as socketType ("SUB" or "DEALER") and checks that the peer is
// peerType ("PUB" or "ROUTER"; XPUB is accepted for PUB).
func dialZMTP(ctx context.Context, endpoint, socketType, peerType string, maxFrame, maxFrames int) (*conn, error) {
	addr, err := tcpAddr(endpoint)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", endpoint, err)
	}
	c := &conn{nc: nc, r: bufio.NewReaderSize(nc, 64<<10), maxFrame: maxFrame, maxFrames: maxFrames}
	// The handshake gets the context's deadline (or 10s): a peer that
	// accepts TCP and says nothing must not hold the relay.
	stop := c.watch(ctx, 10*time.Second)
	err = c.handshake(socketType, peerType)
	stop()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	return c, nil
}

// tcpAddr returns host:port of a tcp:// endpoint.
func tcpAddr(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("endpoint %q: only tcp://host:port is supported", endpoint)
	}
	if _, _, err := net.SplitHostPort(rest); err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	return rest, nil
}

// watch closes the connection's deadline when ctx is done, and bounds the
// time until stop by limit (0: none). stop clears the deadline.
func (c *conn) watch(ctx context.Context, limit time.Duration) (stop func()) {
	if limit > 0 {
		dl := time.Now().Add(limit)
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		_ = c.nc.SetDeadline(dl)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-ctx.Done():
			_ = c.nc.SetDeadline(time.Unix(1, 0)) // unblocks reads and writes now
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-finished
		_ = c.nc.SetDeadline(time.Time{})
	}
}

func (c *conn) Close() error { return c.nc.Close() }

func (c *conn) handshake(socketType, peerType string) error {
	var g [greetingLen]byte
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0 // ZMTP 3.0: subscriptions are messages, not commands
	copy(g[12:32], "NULL")
	if _, err := c.nc.Write(g[:]); err != nil {
		return fmt.Errorf("writing greeting: %w", err)
	}
	var pg [greetingLen]byte
	if _, err := io.ReadFull(c.r, pg[:]); err != nil {
		return fmt.Errorf("%w: reading greeting: %w", ErrHandshake, err)
	}
	if pg[0] != 0xff || pg[9] != 0x7f {
		return fmt.Errorf("%w: not a ZMTP greeting", ErrHandshake)
	}
	if pg[10] < 3 {
		return fmt.Errorf("%w: ZMTP version %d.%d, want 3.x", ErrHandshake, pg[10], pg[11])
	}
	if mech := string(bytes.TrimRight(pg[12:32], "\x00")); mech != "NULL" {
		return fmt.Errorf("%w: security mechanism %q, only NULL is supported", ErrHandshake, mech)
	}
	if err := c.writeFrame(flagCommand, readyCommand(socketType)); err != nil {
		return fmt.Errorf("writing READY: %w", err)
	}
	flags, body, err := c.readFrame()
	if err != nil {
		return fmt.Errorf("%w: reading READY: %w", ErrHandshake, err)
	}
	if flags&flagCommand == 0 {
		return fmt.Errorf("%w: expected the READY command, got a message frame", ErrHandshake)
	}
	name, props, err := parseCommand(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	if name != "READY" {
		return fmt.Errorf("%w: expected READY, got %q", ErrHandshake, name)
	}
	got := strings.ToUpper(props["socket-type"])
	if got != peerType && !(peerType == "PUB" && got == "XPUB") {
		return fmt.Errorf("%w: peer is a %q socket, want %s", ErrHandshake, got, peerType)
	}
	return nil
}

// readyCommand is the READY command body announcing socketType.
func readyCommand(socketType string) []byte {
	b := []byte{5}
	b = append(b, "READY"...)
	b = appendProp(b, "Socket-Type", socketType)
	return b
}

func appendProp(b []byte, name, value string) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// parseCommand splits a command body into its name and properties (names
// lowercased). Only READY carries properties; other commands' bodies are
// returned unparsed as no properties.
func parseCommand(b []byte) (string, map[string]string, error) {
	if len(b) < 1 || int(b[0]) > len(b)-1 {
		return "", nil, errors.New("malformed command")
	}
	name := string(b[1 : 1+b[0]])
	b = b[1+b[0]:]
	props := map[string]string{}
	if name != "READY" {
		return name, props, nil
	}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+4 {
			return "", nil, errors.New("malformed READY property")
		}
		key := strings.ToLower(string(b[1 : 1+n]))
		vl := binary.BigEndian.Uint32(b[1+n:])
		b = b[1+n+4:]
		if uint64(vl) > uint64(len(b)) {
			return "", nil, errors.New("malformed READY property value")
		}
		props[key] = string(b[:vl])
		b = b[vl:]
	}
	return name, props, nil
}

func (c *conn) writeFrame(flags byte, body []byte) error {
	var hdr [9]byte
	n := 2
	hdr[0] = flags
	if len(body) > 255 {
		hdr[0] |= flagLong
		binary.BigEndian.PutUint64(hdr[1:], uint64(len(body)))
		n = 9
	} else {
		hdr[1] = byte(len(body))
	}
	if _, err := c.nc.Write(append(hdr[:n:n], body...)); err != nil {
		return err
	}
	return nil
}

// writeMessage sends frames as one message.
func (c *conn) writeMessage(frames ...[]byte) error {
	for i, f := range frames {
		var fl byte
		if i < len(frames)-1 {
			fl = flagMore
		}
		if err := c.writeFrame(fl, f); err != nil {
			return err
		}
	}
	return nil
}

// readFrame reads one frame, refusing a declared length above maxFrame
// before allocating it.
func (c *conn) readFrame() (flags byte, body []byte, err error) {
	var hdr [9]byte
	if _, err := io.ReadFull(c.r, hdr[:2]); err != nil {
		return 0, nil, err
	}
	flags = hdr[0]
	size := uint64(hdr[1])
	if flags&flagLong != 0 {
		if _, err := io.ReadFull(c.r, hdr[2:9]); err != nil {
			return 0, nil, err
		}
		size = binary.BigEndian.Uint64(hdr[1:9])
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return 0, nil, fmt.Errorf("%w: reserved frame flag bits %#x set", ErrHandshake, flags)
	}
	if size > uint64(c.maxFrame) {
		return 0, nil, fmt.Errorf("%w: %d bytes declared, at most %d", ErrFrameTooLarge, size, c.maxFrame)
	}
	body = make([]byte, size)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return 0, nil, err
	}
	return flags, body, nil
}

// readMessage returns the next message's frames, answering PING commands
// and skipping other commands between messages.
func (c *conn) readMessage() ([][]byte, error) {
	var frames [][]byte
	for {
		flags, body, err := c.readFrame()
		if err != nil {
			return nil, err
		}
		if flags&flagCommand != 0 {
			if len(frames) > 0 {
				return nil, fmt.Errorf("%w: command inside a message", ErrHandshake)
			}
			if name, _, err := parseCommand(body); err == nil && name == "PING" {
				if err := c.writeFrame(flagCommand, pong(body)); err != nil {
					return nil, fmt.Errorf("answering PING: %w", err)
				}
			}
			continue
		}
		if len(frames) == c.maxFrames {
			return nil, fmt.Errorf("%w: more than %d", ErrTooManyFrames, c.maxFrames)
		}
		frames = append(frames, body)
		if flags&flagMore == 0 {
			return frames, nil
		}
	}
}

// pong answers a PING command body (name, 2-byte TTL, context) with PONG
// and the same context.
func pong(ping []byte) []byte {
	b := []byte{4}
	b = append(b, "PONG"...)
	if len(ping) > 1+4+2 {
		b = append(b, ping[1+4+2:]...)
	}
	return b
}

// subscribe sends the ZMTP 3.0 subscription message for topic prefix.
func (c *conn) subscribe(prefix []byte) error {
	return c.writeMessage(append([]byte{1}, prefix...))
}
