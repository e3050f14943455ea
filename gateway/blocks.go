package gateway

import (
	"encoding/binary"

	"github.com/switchyard-llm/switchyard/gateway/internal/jscan"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// Prefix blocks of a prompt, as engines hash token blocks: the prompt's
// text is cut into fixed blocks of blockBytes bytes (about blockTokens
// tokens at 4 bytes a token), and block k's hash covers the whole prefix
// up to its end: h_k = mix(h_{k-1} ^ hash(block_k)). Two prompts share
// h_k exactly when they share their first k+1 blocks, so a picker that
// remembers where h_k went knows which engine may hold that prefix's KV
// cache. A trailing partial block is not hashed (engines cache whole
// blocks only).
const (
	blockBytes  = 4 * blockTokens
	blockTokens = pick.PromptBlockTokens
	// maxBlocks bounds the chain (the first 512 KiB of a prompt).
	maxBlocks = pick.MaxPromptBlocks
)

// chain hashes text written in pieces into prefix blocks.
type chain struct {
	buf    [blockBytes]byte
	n      int // bytes in buf
	h      uint64
	blocks []uint64
	total  int // bytes written
}

// write adds b to the text.
func (c *chain) write(b []byte) {
	c.total += len(b)
	for len(b) > 0 && len(c.blocks) < maxBlocks {
		if c.n == 0 && len(b) >= blockBytes {
			c.block(b[:blockBytes])
			b = b[blockBytes:]
			continue
		}
		m := copy(c.buf[c.n:], b)
		c.n += m
		b = b[m:]
		if c.n == blockBytes {
			c.block(c.buf[:])
			c.n = 0
		}
	}
}

func (c *chain) block(b []byte) {
	c.h = hashkey.Mix(c.h ^ hashBlock(b))
	n := len(c.blocks)
	if n == cap(c.blocks) {
		// Grown by hand: an append through c would move the caller's
		// stack array to the heap.
		nb := make([]uint64, n, 2*n+16)
		copy(nb, c.blocks)
		c.blocks = nb
	}
	c.blocks = c.blocks[:n+1]
	c.blocks[n] = c.h
}

// hashBlock hashes one block eight bytes at a time.
func hashBlock(b []byte) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for len(b) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(b)) * 0x100000001b3
		h ^= h >> 29
		b = b[8:]
	}
	for _, c := range b {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	return hashkey.Mix(h)
}

// promptChain appends to dst the prefix-block hashes of the request's
// prompt text and returns them with the text's length in bytes: for a
// chat completion the messages in order, each as its role then its
// content (a string's raw JSON text, escapes kept; any other content,
// such as an array of parts, as its raw JSON); for a completion the
// prompt (a string's raw text, else its raw JSON). Messages that the
// scanner cannot read field by field are hashed as their raw JSON. It
// reads only the messages or prompt value the request parse kept.
func promptChain(dst []uint64, messages, prompt []byte) ([]uint64, int) {
	c := chain{blocks: dst[:0]}
	switch {
	case len(messages) > 0 && string(messages) != "null":
		if !c.messages(messages) {
			c = chain{blocks: dst[:0]}
			c.write(messages)
		}
	case len(prompt) > 0 && string(prompt) != "null":
		c.write(stringText(prompt))
	}
	return c.blocks, c.total
}

// responsesChain is promptChain for a Responses API request: its
// instructions (a string's raw text), then its input, a string's raw text
// or an array of items hashed as messages are (role then content; an
// item without them, such as a function call's output, adds nothing
// unless the array cannot be read that way, then the raw JSON is hashed).
func responsesChain(dst []uint64, instructions, input []byte) ([]uint64, int) {
	c := chain{blocks: dst[:0]}
	c.write(stringText(instructions))
	if len(input) > 0 && input[0] == '[' {
		if !c.messages(input) {
			c = chain{blocks: dst[:0]}
			c.write(stringText(instructions))
			c.write(input)
		}
	} else {
		c.write(stringText(input))
	}
	return c.blocks, c.total
}

var messageFields = []string{"role", "content"}

// messages writes role and content of each message of the array b and
// reports whether b was read that way.
func (c *chain) messages(b []byte) bool {
	s := jscan.Scanner{B: b}
	s.WS()
	if s.I >= len(b) || b[s.I] != '[' {
		return false
	}
	s.I++
	s.WS()
	if s.I < len(b) && b[s.I] == ']' {
		return true
	}
	for {
		var role, content []byte
		ok := s.Object(messageFields, func(i int) bool {
			start := s.I
			if !s.Value() {
				return false
			}
			switch i {
			case 0:
				role = stringText(b[start:s.I])
			case 1:
				content = stringText(b[start:s.I])
			}
			return true
		})
		if !ok {
			return false
		}
		c.write(role)
		c.write(content)
		s.WS()
		if s.I >= len(b) {
			return false
		}
		switch b[s.I] {
		case ',':
			s.I++
			s.WS()
		case ']':
			return true
		default:
			return false
		}
	}
}

// stringText returns a JSON string's raw text between its quotes, or v
// itself when it is not a string.
func stringText(v []byte) []byte {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	if string(v) == "null" {
		return nil
	}
	return v
}
