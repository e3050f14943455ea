package wire

import (
	"encoding/binary"
	"errors"
	"testing"
)

var errBad = errors.New("bad")

// TestReaderReadsAndSticks: values written with encoding/binary read
// back in order; a truncated input fails once, wrapping Malformed and
// naming the first field that could not be read, and later reads return
// zero values.
func TestReaderReadsAndSticks(t *testing.T) {
	var b []byte
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -7)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	r := Reader{B: b, Malformed: errBad}
	if u, v, s := r.Uvarint("u"), r.Varint("v"), string(r.Bytes("s")); u != 300 || v != -7 || s != "abc" || r.Err != nil || len(r.B) != 0 {
		t.Fatalf("read %d, %d, %q, err %v, %d left", u, v, s, r.Err, len(r.B))
	}
	r = Reader{B: binary.AppendUvarint(nil, 10), Malformed: errBad} // a length of 10, no bytes
	if got := r.Bytes("name"); got != nil || !errors.Is(r.Err, errBad) || r.Err.Error() != "bad: truncated or malformed name" {
		t.Fatalf("truncated bytes: %q, err %v", got, r.Err)
	}
	if v := r.Uvarint("next"); v != 0 || r.Err.Error() != "bad: truncated or malformed name" {
		t.Fatalf("after a failure: %d, err %v (want the first error kept)", v, r.Err)
	}
}
