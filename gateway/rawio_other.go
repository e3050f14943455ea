//go:build !linux

package gateway

import "net"

// rawIO is only used on Linux; elsewhere newRawIO returns nil and the
// connection's own Read and Write are used.
type rawIO struct{ net.Conn }

func newRawIO(net.Conn) *rawIO { return nil }
