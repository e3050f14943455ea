package engineserver

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// charsPerToken is the rule of thumb used to estimate tokens from text.
const charsPerToken = 4

// maxHashBlockTokens bounds the "hash_block_tokens" extension field.
const maxHashBlockTokens = 1 << 16

// fnv-1a 64-bit.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// estimateTokens estimates the token count of text (about 4 characters a
// token, at least 1).
func estimateTokens(textLen int) int {
	return max(1, (textLen+charsPerToken-1)/charsPerToken)
}

// textBlockHashes returns the hashes of text's full blocks of blockSize
// tokens (blockSize*4 bytes): hash i is the FNV-1a hash of the text up to
// the end of block i, so two prompts share hash i exactly when their first
// i+1 blocks are equal. At most limit hashes are returned.
func textBlockHashes(text string, blockSize, limit int) []uint64 {
	chunk := blockSize * charsPerToken
	n := min(len(text)/chunk, limit)
	if n <= 0 {
		return nil
	}
	out := make([]uint64, n)
	h := uint64(fnvOffset)
	for i := range n {
		for _, c := range []byte(text[i*chunk : (i+1)*chunk]) {
			h ^= uint64(c)
			h *= fnvPrime
		}
		out[i] = h
	}
	return out
}

// tokenBlockHashes is textBlockHashes over token ids.
func tokenBlockHashes(tokens []int64, blockSize, limit int) []uint64 {
	n := min(len(tokens)/blockSize, limit)
	if n <= 0 {
		return nil
	}
	out := make([]uint64, n)
	h := uint64(fnvOffset)
	var buf [8]byte
	for i := range n {
		for _, t := range tokens[i*blockSize : (i+1)*blockSize] {
			binary.LittleEndian.PutUint64(buf[:], uint64(t))
			for _, c := range buf {
				h ^= uint64(c)
				h *= fnvPrime
			}
		}
		out[i] = h
	}
	return out
}

// idBlockHashes expands trace hash ids (each covering idTokens tokens, as
// Mooncake's hash_ids cover 512) into hashes of the engine's blockSize
// blocks, chained so that equal hashes mean equal prefixes. At most limit
// hashes are returned.
func idBlockHashes(ids []uint64, idTokens, blockSize, limit int) ([]uint64, error) {
	if idTokens < 1 || idTokens > maxHashBlockTokens {
		return nil, fmt.Errorf("hash_block_tokens must be in [1, %d], got %d", maxHashBlockTokens, idTokens)
	}
	per := max(1, idTokens/blockSize)
	n := min(len(ids)*per, limit)
	if n <= 0 {
		return nil, nil
	}
	out := make([]uint64, n)
	h := uint64(fnvOffset)
	for i := range n {
		h = hashkey.Mix(h ^ hashkey.Mix(ids[i/per]+uint64(i%per)))
		out[i] = h
	}
	return out, nil
}

// vocabulary is the simulated output; one word is one token.
const vocabulary = "the engine routes tokens across regions with low latency and a shared " +
	"prefix cache so every request finds its way through the batch quickly while " +
	"gateways watch weights from the optimizer ."

// newVocab splits vocabulary into tokens, each with its leading space.
func newVocab() []string {
	f := strings.Fields(vocabulary)
	for i := range f {
		f[i] = " " + f[i]
	}
	return f
}

// word returns output token i of request id.
func word(vocab []string, seed int64, id uint64, i int) string {
	return vocab[hashkey.Mix(uint64(seed)^hashkey.Mix(id)+uint64(i))%uint64(len(vocab))]
}
