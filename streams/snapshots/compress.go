package snapshots

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
)

// Compressions: the values Compression takes.
const (
	// CompressionNone writes the signed protobuf WeightSnapshot itself.
	CompressionNone = "none"
	// CompressionS2 writes ValueMagic followed by the S2 block encoding
	// of the signed protobuf WeightSnapshot.
	CompressionS2 = "s2"
)

// ValueMagic starts a compressed value: 0x00 (field number 0, which no
// valid protobuf message starts with), "s2", and the format version 1.
// What follows is the S2 block encoding (github.com/klauspost/compress/s2,
// s2.Decode; Snappy's block format plus S2's extensions) of the signed
// protobuf bytes the store would write uncompressed.
var ValueMagic = []byte{0x00, 's', '2', 0x01}

// MaxValueBytes bounds a value's decoded size: a compressed value that
// says it decodes to more is rejected before anything is allocated, and
// Publish refuses to compress a snapshot above it (a 20,000-engine
// snapshot is about 2 MB).
const MaxValueBytes = 64 << 20

// Sentinel errors of compressed values.
var (
	// ErrCompression: Compression was given a name it does not know.
	ErrCompression = errors.New("unknown snapshot compression")
	// ErrValue: a stored value starts as a compressed one (a 0x00 byte)
	// but is not one this store reads: an unknown format version, a
	// corrupt block, or a decoded size above MaxValueBytes.
	ErrValue = errors.New("compressed snapshot value invalid")
)

// Compression is how Publish writes the values under the cluster keys:
// CompressionNone (the signed protobuf) or CompressionS2 (ValueMagic and
// the S2 block encoding of those bytes; about half the size at
// 1,000 engines, docs/scaling.md#fan-out). Signatures are over the
// protobuf bytes, so a compressed value verifies after decoding. The
// audit stream is never compressed. Readers (Get, History, the Watcher)
// read both forms whatever this option says. Default CompressionNone;
// "" means the default; any other name fails Open with ErrCompression.
func Compression(name string) Opt { return opt(func(c *cfg) { c.compression = name }) }

// ParseCompression returns Compression(name), or ErrCompression for a
// name it does not know, so a command can reject a flag before it
// opens the store.
func ParseCompression(name string) (Opt, error) {
	if err := checkCompression(name); err != nil {
		return nil, err
	}
	return Compression(name), nil
}

func checkCompression(name string) error {
	switch name {
	case "", CompressionNone, CompressionS2:
		return nil
	}
	return fmt.Errorf("%w %q: want %s or %s", ErrCompression, name, CompressionNone, CompressionS2)
}

// compress returns the value to store for the signed bytes b.
func compress(name string, b []byte) ([]byte, error) {
	if name != CompressionS2 {
		return b, nil
	}
	if len(b) > MaxValueBytes {
		return nil, fmt.Errorf("snapshot of %d bytes: above the %d bytes a compressed value may decode to", len(b), MaxValueBytes)
	}
	out := make([]byte, len(ValueMagic)+s2.MaxEncodedLen(len(b)))
	copy(out, ValueMagic)
	block := s2.EncodeBetter(out[len(ValueMagic):], b) // in place: out has room
	return out[:len(ValueMagic)+len(block)], nil
}

// DecodeValue returns the protobuf bytes of a stored snapshot value: v
// itself when it is not compressed (any value not starting with a 0x00
// byte, returned as stored, not copied), else the decoded S2 block after
// ValueMagic. A value starting with 0x00 that is not ValueMagic and a
// valid block decoding to at most MaxValueBytes fails with ErrValue; the
// decoded size is checked before anything is allocated. Every reader of
// the store's values (Get, GetRaw, History, the Watcher) goes through it.
func DecodeValue(v []byte) ([]byte, error) { return decodeValue(v, MaxValueBytes) }

// decodeValue is DecodeValue with limit in place of MaxValueBytes.
func decodeValue(v []byte, limit int) ([]byte, error) {
	if len(v) == 0 || v[0] != 0x00 {
		return v, nil
	}
	if !bytes.HasPrefix(v, ValueMagic) {
		if len(v) >= len(ValueMagic) && bytes.Equal(v[:len(ValueMagic)-1], ValueMagic[:len(ValueMagic)-1]) {
			return nil, fmt.Errorf("%w: format version %d, this reader knows %d", ErrValue, v[len(ValueMagic)-1], ValueMagic[len(ValueMagic)-1])
		}
		return nil, fmt.Errorf("%w: starts with 0x00 but not with the compressed value's magic % x", ErrValue, ValueMagic)
	}
	block := v[len(ValueMagic):]
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the decoded length: %w", ErrValue, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: decodes to %d bytes, above the limit of %d", ErrValue, n, limit)
	}
	out, err := s2.Decode(nil, block)
	if err != nil {
		return nil, fmt.Errorf("%w: %d-byte block: %w", ErrValue, len(block), err)
	}
	return out, nil
}
