// Package wire reads the compact binary encodings of the processor's
// panes and partials: varints and length-prefixed byte strings, with the
// first error sticking so a decoder checks once at the end.
package wire

import (
	"encoding/binary"
	"fmt"
)

// Reader reads B from the front. After the first failure Err is set
// (wrapping Malformed) and every read returns zero values.
type Reader struct {
	B   []byte
	Err error
	// Malformed is the sentinel error Err wraps.
	Malformed error
}

// Fail records that what could not be read, unless an error already was.
func (r *Reader) Fail(what string) {
	if r.Err == nil {
		r.Err = fmt.Errorf("%w: truncated or malformed %s", r.Malformed, what)
	}
	r.B = nil
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Fail(what)
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a signed (zig-zag) varint.
func (r *Reader) Varint(what string) int64 {
	v, n := binary.Varint(r.B)
	if n <= 0 {
		r.Fail(what)
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Bytes reads a uvarint length and that many bytes (aliasing B).
func (r *Reader) Bytes(what string) []byte {
	n := r.Uvarint(what)
	if n > uint64(len(r.B)) {
		r.Fail(what)
		return nil
	}
	b := r.B[:n]
	r.B = r.B[n:]
	return b
}
