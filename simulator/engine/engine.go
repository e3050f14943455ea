package engine

import (
	"fmt"
	"slices"
	"time"
)

// Request is one inference request as the model sees it.
type Request struct {
	// ID identifies the request in events and Cancel; unique among the
	// requests in the engine at once.
	ID uint64
	// PromptTokens is the prompt length (>= 1).
	PromptTokens int
	// OutputTokens is the number of tokens to generate (>= 1).
	OutputTokens int
	// PrefixHashes are the hashes of the prompt's consecutive full blocks
	// of Preset.BlockSize tokens, each identifying the whole prefix up to
	// the end of its block. Extra entries beyond PromptTokens/BlockSize are
	// ignored. The engine copies them.
	PrefixHashes []uint64
	// Adapter is the LoRA adapter the request runs with, 1 to 65536 (0:
	// the base model). A replica holds Config.MaxLoRAs adapters on its GPU
	// at once; a request whose adapter is not loaded when every slot is in
	// use waits (requests behind it may start), and loading one makes that
	// step Config.LoRALoad longer. Prefix hashes are the caller's: give
	// each adapter its own, as vLLM does.
	Adapter int
}

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventFirstToken: the request's prefill finished and its first token
	// was produced (Tokens == 1).
	EventFirstToken EventKind = iota + 1
	// EventToken: one more output token (Tokens counts them so far). Only
	// emitted with Config.TokenEvents, and never for the last token.
	EventToken
	// EventFinished: the request produced its last token and left the
	// engine; Result is set.
	EventFinished
)

func (k EventKind) String() string {
	switch k {
	case EventFirstToken:
		return "first_token"
	case EventToken:
		return "token"
	case EventFinished:
		return "finished"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something that happened to one request at Time.
type Event struct {
	Kind EventKind
	ID   uint64
	Time time.Duration
	// Tokens is the number of output tokens produced so far, including
	// this event's.
	Tokens int
	// Result is set on EventFinished.
	Result Result
}

// Result summarises a finished request.
type Result struct {
	ID      uint64
	Replica int
	// Arrival, Admitted (into the batch), FirstToken and Finish are
	// virtual times.
	Arrival, Admitted, FirstToken, Finish time.Duration
	PromptTokens                          int
	// CachedTokens is the part of the prompt served from the prefix cache.
	CachedTokens int
	OutputTokens int
}

// TTFT is the time from arrival to the first token.
func (r Result) TTFT() time.Duration { return r.FirstToken - r.Arrival }

// QueueTime is the time from arrival to admission into the batch.
func (r Result) QueueTime() time.Duration { return r.Admitted - r.Arrival }

// E2E is the time from arrival to the last token.
func (r Result) E2E() time.Duration { return r.Finish - r.Arrival }

// MeanITL is the mean time between consecutive output tokens (0 for a
// single-token output).
func (r Result) MeanITL() time.Duration {
	if r.OutputTokens < 2 {
		return 0
	}
	return (r.Finish - r.FirstToken) / time.Duration(r.OutputTokens-1)
}

// Stats are the engine's gauges and counters, summed over replicas.
type Stats struct {
	// Now is the engine's virtual time.
	Now time.Duration
	// Running counts admitted requests (prefilling or decoding); Waiting
	// counts queued ones.
	Running, Waiting int
	// MaxSeqs is the maximum number of running requests (all replicas).
	MaxSeqs int
	// KVBlocksUsed counts blocks held by admitted requests; KVBlocksTotal
	// is the capacity. Blocks only cached (held by nobody) count as free.
	KVBlocksUsed, KVBlocksTotal int
	// PromptTokens and GenerationTokens count tokens processed: a prompt
	// when its prefill completes, each output token when produced.
	PromptTokens, GenerationTokens int64
	// PrefixQueryTokens counts prompt tokens looked up in the prefix cache
	// (once per admitted request); PrefixHitTokens those found.
	PrefixQueryTokens, PrefixHitTokens int64
	// Submitted counts accepted requests, Rejected refused ones; Finished
	// and Canceled count requests that left.
	Submitted, Rejected, Finished, Canceled int64
	// Steps counts forward passes; BusyTime sums their durations.
	Steps    int64
	BusyTime time.Duration
	// KVBlocksStored counts blocks that entered the prefix cache (a
	// prefill's new full blocks not cached already); KVBlocksEvicted
	// those evicted to make room. Reset empties the caches without
	// counting evictions.
	KVBlocksStored, KVBlocksEvicted int64
	// LoRARequests counts requests of a LoRA adapter admitted to a batch;
	// LoRALoads counts adapters loaded onto a replica's GPU. An adapter
	// request that needed no load found its adapter loaded:
	// 1 - LoRALoads/LoRARequests of them did.
	LoRARequests, LoRALoads int64
}

// KVUsage is the fraction of KV-cache blocks in use, in [0, 1].
func (s Stats) KVUsage() float64 {
	if s.KVBlocksTotal <= 0 {
		return 0
	}
	return float64(s.KVBlocksUsed) / float64(s.KVBlocksTotal)
}

// Config configures an Engine.
type Config struct {
	// Preset is the replica's GPU class; see LookupPreset.
	Preset Preset
	// Replicas is the number of identical replicas behind the engine
	// (default 1).
	Replicas int
	// MaxWaiting bounds each replica's waiting queue; Submit returns
	// ErrQueueFull beyond it (default 16*Preset.MaxSeqs).
	MaxWaiting int
	// TokenEvents makes Advance emit an EventToken per output token, for
	// drivers that stream tokens (default off: first-token and finished
	// events only, which is all a simulator needs and much faster).
	TokenEvents bool
	// LatencyMultiplier scales every step's duration (prefill and decode
	// alike): 6 makes an engine six times slower than its preset, as a
	// throttled or misconfigured GPU of the same declared class is. The
	// preset, and so Preset() and Stats, stay the class's own (default
	// 1; must be in (0, 1000]).
	LatencyMultiplier float64
	// CacheEvents makes the engine record every change to its replicas'
	// prefix caches for CacheEvents, as vLLM's KV events report them
	// (default off: nothing is recorded).
	CacheEvents bool
	// MaxLoRAs is the number of LoRA adapters a replica holds on its GPU
	// at once (vLLM's --max-loras); 0: the engine serves no adapters and
	// refuses requests that name one.
	MaxLoRAs int
	// LoRALoad is the time loading one adapter adds to a step (default
	// DefaultLoRALoad when MaxLoRAs > 0).
	LoRALoad time.Duration
}

// Engine is the model. Create it with New; it is not safe for concurrent
// use.
type Engine struct {
	cfg      Config
	prefill  float64 // nanoseconds per prefill token
	now      time.Duration
	replicas []*replica
	byID     map[uint64]*seq
	events   []Event // buffered for the next Advance
	prev     []Event // returned by the last Advance
	spare    []*seq
	st       Stats     // counters only; gauges are computed in Stats()
	clog     *cacheLog // nil unless Config.CacheEvents
	clogPrev cacheLog  // the buffers CacheEvents handed out last
}

// New validates cfg and returns an idle engine at virtual time 0.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Preset.Validate(); err != nil {
		return nil, fmt.Errorf("preset %q: %w", cfg.Preset.Name, err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Replicas < 1 || cfg.Replicas > 1024 {
		return nil, fmt.Errorf("%w: replicas must be in [1, 1024], got %d", ErrInvalidConfig, cfg.Replicas)
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = 16 * cfg.Preset.MaxSeqs
	}
	if cfg.MaxWaiting < 1 {
		return nil, fmt.Errorf("%w: max waiting must be positive, got %d", ErrInvalidConfig, cfg.MaxWaiting)
	}
	if cfg.LatencyMultiplier == 0 {
		cfg.LatencyMultiplier = 1
	}
	if !(cfg.LatencyMultiplier > 0) || cfg.LatencyMultiplier > 1000 {
		return nil, fmt.Errorf("%w: latency multiplier must be in (0, 1000], got %v", ErrInvalidConfig, cfg.LatencyMultiplier)
	}
	if cfg.MaxLoRAs < 0 || cfg.MaxLoRAs > maxAdapter || cfg.LoRALoad < 0 {
		return nil, fmt.Errorf("%w: max LoRAs must be in [0, %d] and the load time non-negative, got %d and %v", ErrInvalidConfig, maxAdapter, cfg.MaxLoRAs, cfg.LoRALoad)
	}
	if cfg.MaxLoRAs > 0 && cfg.LoRALoad == 0 {
		cfg.LoRALoad = DefaultLoRALoad
	}
	e := &Engine{
		cfg:     cfg,
		prefill: 1e9 / cfg.Preset.PrefillTokensPerSec,
		byID:    make(map[uint64]*seq),
	}
	if cfg.CacheEvents {
		e.clog = &cacheLog{}
	}
	for i := range cfg.Replicas {
		e.replicas = append(e.replicas, &replica{idx: i, cache: newBlockCache(cfg.Preset.KVBlocks, i, e.clog)})
	}
	return e, nil
}

// Preset returns the engine's preset.
func (e *Engine) Preset() Preset { return e.cfg.Preset }

// Replicas returns the number of replicas.
func (e *Engine) Replicas() int { return len(e.replicas) }

// Now returns the engine's virtual time: the latest time passed to
// Submit, Cancel or Advance.
func (e *Engine) Now() time.Duration { return e.now }

// Submit advances the model to now (buffering the events for the next
// Advance) and queues r on the least-loaded replica. A time before Now is
// taken as Now. It returns an error wrapping ErrInvalidRequest, ErrTooLong,
// ErrDuplicateID or ErrQueueFull when r is refused.
func (e *Engine) Submit(now time.Duration, r Request) error {
	e.advance(now)
	p := &e.cfg.Preset
	switch {
	case r.PromptTokens < 1 || r.OutputTokens < 1:
		e.st.Rejected++
		return fmt.Errorf("%w: prompt and output tokens must be positive, got %d and %d", ErrInvalidRequest, r.PromptTokens, r.OutputTokens)
	case r.PromptTokens > p.MaxModelLen-r.OutputTokens || blocksFor(r.PromptTokens+r.OutputTokens, p.BlockSize) > p.KVBlocks:
		e.st.Rejected++
		return fmt.Errorf("%w: %d prompt + %d output tokens exceed the model's %d-token context or %d-block cache",
			ErrTooLong, r.PromptTokens, r.OutputTokens, p.MaxModelLen, p.KVBlocks)
	}
	if r.Adapter != 0 && (e.cfg.MaxLoRAs == 0 || r.Adapter < 0 || r.Adapter > maxAdapter) {
		e.st.Rejected++
		return fmt.Errorf("%w: adapter %d (the engine holds %d adapters)", ErrInvalidRequest, r.Adapter, e.cfg.MaxLoRAs)
	}
	if _, dup := e.byID[r.ID]; dup {
		e.st.Rejected++
		return fmt.Errorf("%w: %d", ErrDuplicateID, r.ID)
	}
	var rep *replica
	for _, c := range e.replicas {
		if c.nWaiting >= e.cfg.MaxWaiting {
			continue
		}
		if rep == nil || c.load() < rep.load() {
			rep = c
		}
	}
	if rep == nil {
		e.st.Rejected++
		return fmt.Errorf("%w: %d waiting per replica", ErrQueueFull, e.cfg.MaxWaiting)
	}
	s := e.newSeq()
	s.id, s.rep, s.state = r.ID, rep, stateWaiting
	s.arrival = e.now
	s.prompt, s.output, s.adapter = r.PromptTokens, r.OutputTokens, r.Adapter
	full := min(len(r.PrefixHashes), r.PromptTokens/p.BlockSize)
	s.hashes = append(s.hashes[:0], r.PrefixHashes[:full]...)
	e.byID[r.ID] = s
	rep.enqueue(s)
	e.st.Submitted++
	if !rep.busy {
		e.schedule(rep, e.now)
	}
	return nil
}

// Cancel advances the model to now and removes request id wherever it is,
// freeing its batch slot and KV blocks. It reports whether the request was
// in the engine. A canceled request emits no more events.
func (e *Engine) Cancel(now time.Duration, id uint64) bool {
	e.advance(now)
	s, ok := e.byID[id]
	if !ok {
		return false
	}
	delete(e.byID, id)
	r := s.rep
	switch s.state {
	case stateWaiting:
		// Left in the queue and skipped (and recycled) when it reaches
		// the head.
		r.nWaiting--
		s.state = stateCanceled
	case statePrefilling:
		for i, x := range r.prefilling {
			if x == s {
				r.prefilling = append(r.prefilling[:i], r.prefilling[i+1:]...)
				break
			}
		}
		r.cache.release(s.held, s.private)
		r.lora.release(s.adapter)
		e.recycle(s)
	case stateDecoding:
		r.decoding.remove(s)
		r.ctxSum -= int64(s.prompt + s.generated(r.step))
		r.cache.release(s.held, s.private)
		r.lora.release(s.adapter)
		e.recycle(s)
	}
	e.st.Canceled++
	return true
}

// Reset advances the model to now and then drops every request and empties
// every replica's KV cache, as when an engine is lost and restarted. It
// returns the ids of the dropped requests in increasing order (counted as
// canceled); counters are kept.
func (e *Engine) Reset(now time.Duration) []uint64 {
	e.advance(now)
	ids := make([]uint64, 0, len(e.byID))
	for id := range e.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		e.Cancel(now, id)
	}
	for _, r := range e.replicas {
		r.head(e) // recycles the canceled queue entries
		r.busy = false
		r.cache.reset()
		r.lora = loraSlots{}
	}
	return ids
}

// NextEvent returns the virtual time at which the model's state next
// changes (the end of the earliest running step), or false when idle.
// Advance to that time to receive its events.
func (e *Engine) NextEvent() (time.Duration, bool) {
	var t time.Duration
	ok := false
	for _, r := range e.replicas {
		if r.busy && (!ok || r.stepEnd < t) {
			t, ok = r.stepEnd, true
		}
	}
	return t, ok
}

// Advance runs every step that ends at or before now and returns the
// events produced since the previous Advance (including those buffered by
// Submit and Cancel), in time order. The returned slice is reused by the
// next call of Advance; copy what must outlive it.
func (e *Engine) Advance(now time.Duration) []Event {
	e.advance(now)
	out := e.events
	e.events, e.prev = e.prev[:0], out
	return out
}

// PrefixMatch returns the number of prompt tokens that would be served
// from the cache of the replica holding the longest cached prefix of
// hashes, for a prompt of promptTokens tokens.
func (e *Engine) PrefixMatch(hashes []uint64, promptTokens int) int {
	if promptTokens < 1 {
		return 0
	}
	bs := e.cfg.Preset.BlockSize
	best := 0
	for _, r := range e.replicas {
		best = max(best, r.cache.match(hashes, (promptTokens-1)/bs))
	}
	return best * bs
}

// Stats returns the current gauges and counters.
func (e *Engine) Stats() Stats {
	st := e.st
	st.Now = e.now
	for _, r := range e.replicas {
		st.Running += r.running()
		st.Waiting += r.nWaiting
		st.KVBlocksUsed += r.cache.used
		st.KVBlocksTotal += r.cache.capacity
		st.MaxSeqs += e.cfg.Preset.MaxSeqs
		st.KVBlocksStored += r.cache.stored
		st.KVBlocksEvicted += r.cache.evicted
	}
	return st
}

func (e *Engine) advance(now time.Duration) {
	if now < e.now {
		now = e.now
	}
	for {
		var next *replica
		for _, r := range e.replicas {
			if r.busy && r.stepEnd <= now && (next == nil || r.stepEnd < next.stepEnd) {
				next = r
			}
		}
		if next == nil {
			break
		}
		e.now = next.stepEnd
		e.endStep(next)
	}
	e.now = now
}

func (e *Engine) emit(ev Event) { e.events = append(e.events, ev) }

func (e *Engine) newSeq() *seq {
	if n := len(e.spare); n > 0 {
		s := e.spare[n-1]
		e.spare = e.spare[:n-1]
		return s
	}
	return &seq{}
}

func (e *Engine) recycle(s *seq) {
	hashes, held := s.hashes[:0], s.held[:0]
	clear(s.held)
	*s = seq{hashes: hashes, held: held}
	if len(e.spare) < 4096 {
		e.spare = append(e.spare, s)
	}
}

func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }
