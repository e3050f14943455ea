// Package workload produces LLM request streams for the demo's load
// generator and the simulator: a built-in conversational generator
// (shared system prompts, multi-turn sessions, Poisson arrivals) and
// readers of public traces (JSONL with prefix-block hashes: Mooncake,
// Qwen-Bailian; CSV of arrivals and token counts: Azure, BurstGPT).
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultBlockTokens is the prefix-block size of Mooncake traces.
const DefaultBlockTokens = 512

// Request is one LLM request of a workload.
type Request struct {
	// Arrival is the time since the start of the workload.
	Arrival time.Duration
	// Session identifies the conversation (the OpenAI `user` field).
	Session string
	// Cluster is the gateway cluster the request enters; "" lets the
	// caller assign one.
	Cluster string
	// Blocks are the prefix-block ids of the prompt, BlockTokens tokens
	// each (the last may be partial): equal leading ids mean a reusable
	// KV-cache prefix.
	Blocks       []uint64
	PromptTokens int
	OutputTokens int
	// NonStreaming: the client asked for the whole response at once
	// (stream: false), so nothing reaches it before the last token. The
	// zero value streams, as chat clients do.
	NonStreaming bool
}

// Generator configures the built-in conversational workload.
type Generator struct {
	// RatePerSecond is the mean Poisson arrival rate (per cluster when
	// Clusters is set).
	RatePerSecond float64
	// Clusters the sessions are spread over; each session stays in one.
	Clusters []string
	// Sessions is how many conversations run concurrently (default 64).
	Sessions int
	// SystemPrompts is how many distinct shared system prompts exist
	// (default 4), each SystemTokens long (default 256).
	SystemPrompts int
	SystemTokens  int
	// TurnTokens is the mean user-message length (default 96) and
	// OutputTokens the mean answer length (default 48).
	TurnTokens   int
	OutputTokens int
	// MaxTurns ends a conversation (default 8); a new one replaces it.
	MaxTurns int
	// BlockTokens is the prefix-block size (default 64).
	BlockTokens int
	Seed        uint64
}

type session struct {
	id      string
	cluster string
	blocks  []uint64
	tokens  int
	turns   int
}

// Generate returns the requests arriving in [0, d), sorted by arrival.
func (g Generator) Generate(d time.Duration) []Request {
	if g.Sessions <= 0 {
		g.Sessions = 64
	}
	if g.SystemPrompts <= 0 {
		g.SystemPrompts = 4
	}
	if g.SystemTokens <= 0 {
		g.SystemTokens = 256
	}
	if g.TurnTokens <= 0 {
		g.TurnTokens = 96
	}
	if g.OutputTokens <= 0 {
		g.OutputTokens = 48
	}
	if g.MaxTurns <= 0 {
		g.MaxTurns = 8
	}
	if g.BlockTokens <= 0 {
		g.BlockTokens = 64
	}
	clusters := g.Clusters
	if len(clusters) == 0 {
		clusters = []string{""}
	}
	if g.RatePerSecond <= 0 || d <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(g.Seed, 0x5157))
	var nextBlock uint64 = 1 << 20 // ids below are system-prompt blocks
	sysBlocks := func(k int) []uint64 {
		n := (g.SystemTokens + g.BlockTokens - 1) / g.BlockTokens
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(k*1000 + i)
		}
		return out
	}
	newSession := func(i int, cluster string) *session {
		sys := rng.IntN(g.SystemPrompts)
		return &session{id: fmt.Sprintf("s%d-%d", i, rng.Uint32()), cluster: cluster, blocks: sysBlocks(sys), tokens: g.SystemTokens}
	}
	var out []Request
	for ci, cluster := range clusters {
		sessions := make([]*session, g.Sessions)
		for i := range sessions {
			sessions[i] = newSession(ci*g.Sessions+i, cluster)
		}
		t := 0.0
		for {
			t += rng.ExpFloat64() / g.RatePerSecond
			at := time.Duration(t * float64(time.Second))
			if at >= d {
				break
			}
			si := rng.IntN(len(sessions))
			s := sessions[si]
			if s.turns >= g.MaxTurns {
				s = newSession(ci*g.Sessions+si+rng.IntN(1<<20), cluster)
				sessions[si] = s
			}
			user := 1 + int(rng.ExpFloat64()*float64(g.TurnTokens))
			outTok := 1 + int(rng.ExpFloat64()*float64(g.OutputTokens))
			// The prompt is the history plus the new user message.
			s.tokens += user
			for len(s.blocks)*g.BlockTokens < s.tokens {
				s.blocks = append(s.blocks, nextBlock)
				nextBlock++
			}
			out = append(out, Request{
				Arrival: at, Session: s.id, Cluster: cluster,
				Blocks: append([]uint64(nil), s.blocks...), PromptTokens: s.tokens, OutputTokens: outTok,
			})
			// The answer joins the history of the next turn.
			s.tokens += outTok
			s.turns++
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Arrival < out[j].Arrival })
	return out
}

// Prompt renders a request as prompt text whose leading characters depend
// only on its leading blocks, so requests sharing prefix blocks share a
// text prefix: each block becomes blockTokens×4 characters (about
// blockTokens tokens at four characters a token), and the prompt is cut
// to PromptTokens×4 characters (at most maxTokens tokens when > 0).
func Prompt(r Request, blockTokens, maxTokens int) string {
	if blockTokens <= 0 {
		blockTokens = DefaultBlockTokens
	}
	tokens := r.PromptTokens
	if maxTokens > 0 && tokens > maxTokens {
		tokens = maxTokens
	}
	n := tokens * 4
	var b strings.Builder
	b.Grow(n + 32)
	for _, id := range r.Blocks {
		if b.Len() >= n {
			break
		}
		writeBlock(&b, id, blockTokens*4)
	}
	for b.Len() < n {
		writeBlock(&b, math.MaxUint64, blockTokens*4)
	}
	return b.String()[:n]
}

func writeBlock(b *strings.Builder, id uint64, size int) {
	word := "b" + strconv.FormatUint(id, 36) + " "
	for w := 0; w < size; w += len(word) {
		if size-w < len(word) {
			b.WriteString("..........................."[:size-w])
			return
		}
		b.WriteString(word)
	}
}
