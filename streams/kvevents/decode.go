package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrMalformed is wrapped by every error of ParseMessage and DecodeBatch:
// the message is not a vLLM KV-event message.
var ErrMalformed = errors.New("malformed kv event message")

// Kind is the type of an Event.
type Kind uint8

// Event kinds.
const (
	// KindOther is an event type this package does not know (a newer
	// engine's); Type names it and nothing else is decoded.
	KindOther Kind = iota
	// KindStored: BlockStored, blocks became cached.
	KindStored
	// KindRemoved: BlockRemoved, blocks were evicted.
	KindRemoved
	// KindCleared: AllBlocksCleared, the engine's cache was emptied.
	KindCleared
)

func (k Kind) String() string {
	switch k {
	case KindStored:
		return "BlockStored"
	case KindRemoved:
		return "BlockRemoved"
	case KindCleared:
		return "AllBlocksCleared"
	}
	return "other"
}

// MaxHashBytes bounds one block hash given as bytes (vLLM's are 32-byte
// SHA-256 digests); a longer one is malformed.
const MaxHashBytes = 64

// A Hash is a block hash, normalised to bytes: a hash the engine sent as
// bytes is kept as is (1 to MaxHashBytes bytes); one it sent as an
// integer (older vLLM, int64 or uint64) is its 64-bit two's-complement
// value, 8 bytes big-endian. So -1 and 2^64-1 are the same hash, as they
// are the same 64 bits; equal hashes of one engine compare equal with
// bytes.Equal whichever form it uses.
type Hash []byte

// IntHash returns the Hash of an integer block hash.
func IntHash(v uint64) Hash { return binary.BigEndian.AppendUint64(make(Hash, 0, 8), v) }

// Event is one KV-cache event.
type Event struct {
	Kind Kind
	// Type is the engine's tag ("BlockStored", ...), kept for KindOther.
	Type string
	// BlockHashes are the blocks stored or removed, in order (a stored
	// run is a chain: each block's parent is the one before it).
	BlockHashes []Hash
	// ParentHash is the block before the first stored one; nil for a run
	// starting the sequence. BlockStored only.
	ParentHash Hash
	// TokenIDs are the stored blocks' tokens. BlockStored only.
	TokenIDs []uint32
	// BlockSize is tokens per block. BlockStored only.
	BlockSize int
	// LoRAID is vLLM's integer adapter id; 0 means none (vLLM numbers
	// adapters from 1). LoRAName is the adapter's name, "" for none.
	LoRAID   int64
	LoRAName string
	// Medium is where the blocks live ("GPU", "CPU", ...); "" when the
	// engine did not say.
	Medium string
}

// Batch is one message of an engine's KV-event stream.
type Batch struct {
	// Topic is the message's ZMQ topic frame.
	Topic string
	// Seq is the publisher's sequence number.
	Seq int64
	// TS is the engine's time of the batch, seconds since the Unix epoch.
	TS float64
	// DataParallelRank is the publishing rank when HasRank.
	DataParallelRank int64
	HasRank          bool
	Events           []Event
}

// ParseMessage decodes one message of an engine's PUB socket: the frames
// [topic, sequence (8 bytes, big-endian, signed), payload]. A replayed
// message (from the ROUTER replay socket, without routing frames) has the
// same shape; older engines reply [sequence, payload], which is accepted
// with an empty topic.
func ParseMessage(frames [][]byte) (Batch, error) {
	var b Batch
	switch len(frames) {
	case 3:
		b.Topic = string(frames[0])
		frames = frames[1:]
	case 2:
	default:
		return b, fmt.Errorf("%w: %d frames, want [topic, sequence, payload]", ErrMalformed, len(frames))
	}
	if len(frames[0]) != 8 {
		return b, fmt.Errorf("%w: sequence frame of %d bytes, want 8", ErrMalformed, len(frames[0]))
	}
	b.Seq = int64(binary.BigEndian.Uint64(frames[0]))
	if b.Seq < 0 {
		return b, fmt.Errorf("%w: negative sequence %d", ErrMalformed, b.Seq)
	}
	ts, rank, hasRank, evs, err := DecodeBatch(frames[1])
	if err != nil {
		return b, err
	}
	b.TS, b.DataParallelRank, b.HasRank, b.Events = ts, rank, hasRank, evs
	return b, nil
}

// DecodeBatch decodes a msgpack KVEventBatch in either encoding: vLLM's
// array form [ts, events, data_parallel_rank?, ...] or the map form
// {"ts":..., "events":[...], "data_parallel_rank":...}; each event is
// likewise an array whose first element is its tag or a map with a "type"
// key. Trailing fields may be missing and unknown ones are skipped.
// Allocation is bounded by the payload's length: no declared count is
// believed beyond what the remaining bytes can hold.
func DecodeBatch(payload []byte) (ts float64, rank int64, hasRank bool, events []Event, err error) {
	p := newParser(payload)
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrMalformed, err)
		}
	}()
	c, err := p.d.PeekCode()
	if err != nil {
		return 0, 0, false, nil, fmt.Errorf("empty payload: %w", err)
	}
	field := func(name string) error {
		switch name {
		case "ts":
			ts, err = p.float()
		case "events":
			events, err = p.events()
		case "data_parallel_rank":
			rank, hasRank, err = p.optInt()
		default:
			err = p.skip(0)
		}
		if err != nil {
			return fmt.Errorf("batch %s: %w", name, err)
		}
		return nil
	}
	switch {
	case isArray(c):
		n, err := p.arrayLen()
		if err != nil {
			return 0, 0, false, nil, err
		}
		if n < 2 {
			return 0, 0, false, nil, fmt.Errorf("batch array of %d elements, want [ts, events, ...]", n)
		}
		for i := range n {
			name := ""
			if i < len(batchFields) {
				name = batchFields[i]
			}
			if err := field(name); err != nil {
				return 0, 0, false, nil, err
			}
		}
	case isMap(c):
		n, err := p.mapLen()
		if err != nil {
			return 0, 0, false, nil, err
		}
		seen := false
		for range n {
			k, err := p.key()
			if err != nil {
				return 0, 0, false, nil, err
			}
			seen = seen || k == "events"
			if err := field(k); err != nil {
				return 0, 0, false, nil, err
			}
		}
		if !seen {
			return 0, 0, false, nil, errors.New(`batch map without "events"`)
		}
	default:
		return 0, 0, false, nil, fmt.Errorf("batch is msgpack type %#x, want an array or a map", c)
	}
	if p.br.Len() != 0 {
		return 0, 0, false, nil, fmt.Errorf("%d bytes after the batch", p.br.Len())
	}
	return ts, rank, hasRank, events, nil
}

var batchFields = []string{"ts", "events", "data_parallel_rank"}

// Array positions of each event's fields after the tag (vLLM's order).
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}
	removedFields = []string{"block_hashes", "medium"}
)

// maxDepth bounds the nesting of skipped values.
const maxDepth = 32

type parser struct {
	br *bytes.Reader
	d  *msgpack.Decoder
}

func newParser(b []byte) *parser {
	br := bytes.NewReader(b)
	return &parser{br: br, d: msgpack.NewDecoder(br)}
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }

// arrayLen reads an array header whose count the remaining bytes can hold
// (every element takes at least one byte).
func (p *parser) arrayLen() (int, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if !isArray(c) {
		return 0, fmt.Errorf("msgpack type %#x, want an array", c)
	}
	n, err := p.d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n > p.br.Len() {
		return 0, fmt.Errorf("array declares %d elements, %d bytes left", n, p.br.Len())
	}
	return n, nil
}

func (p *parser) mapLen() (int, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if !isMap(c) {
		return 0, fmt.Errorf("msgpack type %#x, want a map", c)
	}
	n, err := p.d.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	if n > p.br.Len()/2 {
		return 0, fmt.Errorf("map declares %d entries, %d bytes left", n, p.br.Len())
	}
	return n, nil
}

func (p *parser) key() (string, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("map key of msgpack type %#x, want a string", c)
	}
	return p.d.DecodeString()
}

// isNil consumes a nil and reports whether there was one.
func (p *parser) isNil() (bool, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	return true, p.d.DecodeNil()
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

func (p *parser) float() (float64, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		return 0, fmt.Errorf("msgpack type %#x, want a number", c)
	}
	f, err := p.d.DecodeFloat64()
	if err != nil {
		return 0, err
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a finite number: %v", f)
	}
	return f, nil
}

func (p *parser) int() (int64, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if !isInt(c) {
		return 0, fmt.Errorf("msgpack type %#x, want an integer", c)
	}
	if c == msgpcode.Uint64 {
		u, err := p.d.DecodeUint64()
		if err != nil {
			return 0, err
		}
		if u > math.MaxInt64 {
			return 0, fmt.Errorf("integer %d out of range", u)
		}
		return int64(u), nil
	}
	return p.d.DecodeInt64()
}

func (p *parser) optInt() (int64, bool, error) {
	if null, err := p.isNil(); err != nil || null {
		return 0, false, err
	}
	v, err := p.int()
	return v, err == nil, err
}

func (p *parser) optString() (string, error) {
	if null, err := p.isNil(); err != nil || null {
		return "", err
	}
	c, err := p.d.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("msgpack type %#x, want a string", c)
	}
	return p.d.DecodeString()
}

// hash reads a block hash: an integer or 1 to MaxHashBytes bytes.
func (p *parser) hash() (Hash, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case isInt(c):
		if c == msgpcode.Uint64 {
			u, err := p.d.DecodeUint64()
			return IntHash(u), err
		}
		v, err := p.d.DecodeInt64()
		return IntHash(uint64(v)), err
	case msgpcode.IsBin(c):
		n, err := p.d.DecodeBytesLen()
		if err != nil {
			return nil, err
		}
		if n < 1 || n > MaxHashBytes {
			return nil, fmt.Errorf("block hash of %d bytes, want 1 to %d", n, MaxHashBytes)
		}
		if n > p.br.Len() {
			return nil, fmt.Errorf("block hash declares %d bytes, %d left", n, p.br.Len())
		}
		h := make(Hash, n)
		if _, err := p.br.Read(h); err != nil {
			return nil, err
		}
		return h, nil
	}
	return nil, fmt.Errorf("block hash of msgpack type %#x, want an integer or bytes", c)
}

func (p *parser) hashes() ([]Hash, error) {
	n, err := p.arrayLen()
	if err != nil {
		return nil, err
	}
	hs := make([]Hash, 0, n)
	for range n {
		h, err := p.hash()
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func (p *parser) tokens() ([]uint32, error) {
	n, err := p.arrayLen()
	if err != nil {
		return nil, err
	}
	ts := make([]uint32, 0, n)
	for range n {
		v, err := p.int()
		if err != nil {
			return nil, err
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("token id %d out of range", v)
		}
		ts = append(ts, uint32(v))
	}
	return ts, nil
}

// blockSize reads block_size, or the first element of the list
// num_toks_per_block that the earliest vLLM versions sent in its place.
func (p *parser) blockSize() (int, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if isArray(c) {
		n, err := p.arrayLen()
		if err != nil {
			return 0, err
		}
		bs := int64(0)
		for i := range n {
			v, err := p.int()
			if err != nil {
				return 0, err
			}
			if i == 0 {
				bs = v
			}
		}
		if bs < 0 || bs > math.MaxInt32 {
			return 0, fmt.Errorf("block size %d out of range", bs)
		}
		return int(bs), nil
	}
	v, err := p.int()
	if err != nil {
		return 0, err
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, fmt.Errorf("block size %d out of range", v)
	}
	return int(v), nil
}

// eventField decodes field name of e.
func (p *parser) eventField(e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		e.BlockHashes, err = p.hashes()
	case "parent_block_hash":
		var null bool
		if null, err = p.isNil(); err == nil && !null {
			e.ParentHash, err = p.hash()
		}
	case "token_ids":
		e.TokenIDs, err = p.tokens()
	case "block_size":
		e.BlockSize, err = p.blockSize()
	case "lora_id":
		e.LoRAID, _, err = p.optInt()
	case "medium":
		e.Medium, err = p.optString()
	case "lora_name":
		e.LoRAName, err = p.optString()
	default:
		err = p.skip(0)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", e.Type, name, err)
	}
	return nil
}

func kindOf(tag string) (Kind, []string) {
	switch tag {
	case "BlockStored":
		return KindStored, storedFields
	case "BlockRemoved":
		return KindRemoved, removedFields
	case "AllBlocksCleared":
		return KindCleared, nil
	}
	return KindOther, nil
}

func (p *parser) events() ([]Event, error) {
	n, err := p.arrayLen()
	if err != nil {
		return nil, err
	}
	evs := make([]Event, 0, n)
	for i := range n {
		e, err := p.event()
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

func (p *parser) event() (Event, error) {
	var e Event
	c, err := p.d.PeekCode()
	if err != nil {
		return e, err
	}
	switch {
	case isArray(c):
		n, err := p.arrayLen()
		if err != nil {
			return e, err
		}
		if n < 1 {
			return e, errors.New("empty event array, want [tag, ...]")
		}
		if e.Type, err = p.key(); err != nil {
			return e, fmt.Errorf("event tag: %w", err)
		}
		var fields []string
		e.Kind, fields = kindOf(e.Type)
		for i := 1; i < n; i++ {
			name := ""
			if i-1 < len(fields) {
				name = fields[i-1]
			}
			if err := p.eventField(&e, name); err != nil {
				return e, err
			}
		}
	case isMap(c):
		n, err := p.mapLen()
		if err != nil {
			return e, err
		}
		// The tag may come anywhere; fields are decoded by name whatever
		// the type, and fields of other types left as decoded.
		for range n {
			k, err := p.key()
			if err != nil {
				return e, err
			}
			if k == "type" {
				if e.Type, err = p.key(); err != nil {
					return e, fmt.Errorf("event type: %w", err)
				}
				continue
			}
			if err := p.eventField(&e, k); err != nil {
				return e, err
			}
		}
		if e.Type == "" {
			return e, errors.New(`event map without "type"`)
		}
		e.Kind, _ = kindOf(e.Type)
	default:
		return e, fmt.Errorf("event of msgpack type %#x, want an array or a map", c)
	}
	switch e.Kind {
	case KindStored:
		if len(e.BlockHashes) == 0 {
			return e, errors.New("BlockStored without block_hashes")
		}
	case KindRemoved:
		if len(e.BlockHashes) == 0 {
			return e, errors.New("BlockRemoved without block_hashes")
		}
		e.ParentHash, e.TokenIDs, e.BlockSize, e.LoRAID, e.LoRAName = nil, nil, 0, 0, ""
	case KindCleared, KindOther:
		e = Event{Kind: e.Kind, Type: e.Type, Medium: e.Medium}
	}
	return e, nil
}

// skip skips one value of any type, refusing nesting deeper than maxDepth
// (the library's Skip recurses without a bound).
func (p *parser) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	c, err := p.d.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case isArray(c):
		n, err := p.arrayLen()
		if err != nil {
			return err
		}
		for range n {
			if err := p.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isMap(c):
		n, err := p.mapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := p.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return p.d.Skip()
}
