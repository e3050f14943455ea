//go:build !linux

package httpwire

import "net"

// RawIO is only used on Linux; elsewhere NewRawIO returns nil and the
// connection's own Read and Write are used.
type RawIO struct{ net.Conn }

// NewRawIO returns nil: raw I/O is Linux only.
func NewRawIO(net.Conn) *RawIO { return nil }
