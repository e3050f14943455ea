package httpwire

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// RawIO reads and writes a socket with raw recvfrom(2) and sendto(2)
// calls, which do not enter the Go scheduler's syscall state. A send on
// loopback runs the receiver's TCP processing inline, and a receive
// that opens the window sends an ACK the same way (tens of µs each);
// with one P, sysmon retakes the P of any syscall that outlasts its
// 20 µs tick, starts another thread to run it, and keeps polling every
// 20 µs as long as it finds such syscalls — about a tenth of the
// gateway's CPU in the benchmark. A call on a non-blocking socket never
// blocks, so it can be raw; on EAGAIN the runtime's poller waits for the
// socket as for any read or write (deadlines and Close included).
//
// One Read and one Write may run at the same time, as on a net.Conn.
type RawIO struct {
	rc     syscall.RawConn
	rd, wr rawOp
}

// rawOp is the state of one read or write.
type rawOp struct {
	p     []byte
	n     int
	errno syscall.Errno
	eof   bool
	fn    func(fd uintptr) bool
}

// NewRawIO returns the raw I/O of c, or nil when c is not a socket.
func NewRawIO(c net.Conn) *RawIO {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &RawIO{rc: rc}
	r.rd.fn, r.wr.fn = r.rd.recv, r.wr.send
	return r
}

func (r *rawOp) recv(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)), 0, 0, 0)
		switch e {
		case 0:
			r.n = int(n)
			r.eof = n == 0
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until readable
		default:
			r.errno = e
			return true
		}
	}
}

func (r *rawOp) send(fd uintptr) bool {
	for len(r.p) > 0 {
		n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)), syscall.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			r.p = r.p[n:]
			r.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			r.errno = e
			return true
		}
	}
	return true
}

// Read is net.Conn's Read.
func (r *RawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	o := &r.rd
	o.p, o.n, o.errno, o.eof = p, 0, 0, false
	err := r.rc.Read(o.fn)
	n := o.n
	o.p = nil
	switch {
	case err != nil:
		return n, &net.OpError{Op: "read", Net: "tcp", Err: err}
	case o.errno != 0:
		return n, &net.OpError{Op: "read", Net: "tcp", Err: o.errno}
	case o.eof:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p or fails, as net.Conn's Write.
func (r *RawIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	o := &r.wr
	o.p, o.n, o.errno = p, 0, 0
	err := r.rc.Write(o.fn)
	n := o.n
	o.p = nil
	switch {
	case err != nil:
		return n, &net.OpError{Op: "write", Net: "tcp", Err: err}
	case o.errno != 0:
		return n, &net.OpError{Op: "write", Net: "tcp", Err: o.errno}
	}
	return n, nil
}
