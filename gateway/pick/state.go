package pick

import (
	"math"
	"sync/atomic"
)

// Flags of State.
const (
	flagEjected    uint32 = 1 << iota // passive outlier ejection
	flagDown                          // active health checks say down
	flagSignalDown                    // the engine's signals say down
)

// State is the live, lock-free state of one engine: requests in flight,
// an optional hard in-flight limit, availability flags and a penalty. A
// Pool hands out one State per engine id, so the state survives table
// swaps. All methods are safe for concurrent use.
//
// The fields a pick reads come first: flags to prefill (32 bytes) and the
// model's first 32 bytes fill the first cache line, and the padding makes
// a State 256 bytes, a size class whose objects are 64-byte aligned, so
// PickRequest's checks and score of a candidate touch one line of it
// (two when the engine has a decode model or a batch limit).
type State struct {
	flags    atomic.Uint32 // flagEjected | flagDown
	reject   atomic.Uint32 // penalty: share of keys turned away, in 1/65536
	inflight atomic.Int64
	limit    atomic.Int64 // 0: no limit
	prefill  atomic.Int64 // this gateway's queued prefill tokens (requests with no first token yet)
	model    model

	forgot atomic.Int64 // nowMs/stampMs+1 of the last Forget (not wrapped), 0: never
	// foreign is the prefill tokens other gateways report queued on the
	// engine (SetForeignPrefill); residency how long, in seconds, a
	// prefix stays in the engine's cache (SetCacheResidency; 0: unknown).
	foreign   atomic.Int64
	residency atomic.Int64
	total     *atomic.Int64            // the pool's in-flight total
	ad        atomic.Pointer[adapters] // nil: holds no adapters (adapters.go)
	idx       uint32                   // position in the pool, for the affinity memory
	id        string
	_         [stateSize - stateUsed]byte
}

// stateSize is State's size: a size class of the Go allocator whose
// objects are 64-byte aligned (TestStateLayout checks it).
const (
	stateSize = 256
	stateUsed = 32 + modelSize + 8 + 8 + 8 + 8 + 8 + 8 + 16 // idx is padded to 8
)

// Prefill returns the prompt tokens of this gateway's requests on the
// engine that have no first token yet (uncached part, as estimated).
func (s *State) Prefill() int64 { return s.prefill.Load() }

// SetForeignPrefill sets the prompt tokens other gateways have queued on
// the engine with no first token yet, as they last reported them
// (gateway/peers). PickRequest counts them ahead of a request as it counts
// this gateway's own. Negative values count as 0.
func (s *State) SetForeignPrefill(n int64) { s.foreign.Store(max(n, 0)) }

// ForeignPrefill returns what SetForeignPrefill set.
func (s *State) ForeignPrefill() int64 { return s.foreign.Load() }

// SetCacheResidency sets how long a prefix stays in the engine's prefix
// cache after it was last sent there, as the control plane estimates it
// from the engine's free KV capacity and the rate at which new tokens
// enter it (the snapshot's Explanation.cache_residency_s). PickRequest
// credits an engine only with blocks sent to it within that time. 0 or
// less (unknown): the memory's TTL alone bounds it.
func (s *State) SetCacheResidency(seconds float64) {
	if !(seconds > 0) || math.IsInf(seconds, 1) {
		s.residency.Store(0)
		return
	}
	s.residency.Store(int64(math.Ceil(min(seconds, 1<<20))))
}

// CacheResidency returns what SetCacheResidency set, in whole seconds
// (0: unknown).
func (s *State) CacheResidency() int64 { return s.residency.Load() }

// Forget drops what the gateway remembers and has learned about the
// engine: which keys and prefix blocks it holds (an engine that went down
// comes back with a cold cache) and its latency model. nowMs is the
// caller's clock, as in Request.NowMs.
func (s *State) Forget(nowMs int64) {
	s.forgot.Store(nowMs/stampMs + 1)
	s.model.forget()
}

// fresh reports whether a memory entry stamped st, looked up at nowMs,
// was made after the engine's last Forget. The memory returns only
// entries younger than its TTL, far less than the stamps' wrap (18.2 h),
// so the entry's age from now is exact, and the Forget's time is kept
// unwrapped: a Forget any time ago never makes a later entry look older.
func (s *State) fresh(st uint64, nowMs int64) bool {
	f := s.forgot.Load()
	if f == 0 {
		return true
	}
	now := nowMs / stampMs
	age := int64((uint64(now) - st) & (1<<stampBits - 1))
	return now-age > f-1
}

// Model returns what the gateway has learned of the engine as of nowMs:
// TTFT = interceptMs + msPerToken·(prefill tokens ahead), the mean time
// between output tokens, and whether each part is current.
func (s *State) Model(nowMs int64) (interceptMs, msPerToken, tbotMs float64, known, knownTBOT bool) {
	m := s.model.params(nowMs)
	return m.a, m.p, m.d, m.known, m.knownD
}

// ID returns the engine id.
func (s *State) ID() string { return s.id }

// InFlight returns the number of requests in flight on the engine.
func (s *State) InFlight() int64 { return s.inflight.Load() }

// Release ends one request that Pick started on the engine.
func (s *State) Release() {
	s.inflight.Add(-1)
	s.total.Add(-1)
}

// SetLimit sets the hard in-flight limit (0 or less: none).
func (s *State) SetLimit(n int64) {
	if n < 0 {
		n = 0
	}
	s.limit.Store(n)
}

// Limit returns the hard in-flight limit (0: none).
func (s *State) Limit() int64 { return s.limit.Load() }

// SetEjected marks the engine ejected (or returns it).
func (s *State) SetEjected(v bool) { s.setFlag(flagEjected, v) }

// SetDown marks the engine down by active health checks (or up).
func (s *State) SetDown(v bool) { s.setFlag(flagDown, v) }

// SetSignalDown marks the engine down by its own signals: unhealthy or no
// ready replicas (or up). It is independent of SetDown.
func (s *State) SetSignalDown(v bool) { s.setFlag(flagSignalDown, v) }

// SignalDown reports whether the engine's signals say it is down.
func (s *State) SignalDown() bool { return s.flags.Load()&flagSignalDown != 0 }

// Ejected reports whether the engine is ejected.
func (s *State) Ejected() bool { return s.flags.Load()&flagEjected != 0 }

// Down reports whether the engine is marked down.
func (s *State) Down() bool { return s.flags.Load()&flagDown != 0 }

// Available reports whether the engine is neither ejected nor down (by
// health checks or signals).
func (s *State) Available() bool { return s.flags.Load() == 0 }

func (s *State) setFlag(f uint32, v bool) {
	if v {
		s.flags.Or(f)
	} else {
		s.flags.And(^f)
	}
}

// SetPenalty sets the share of affinity keys, in [0,1], that the engine
// turns away to the next candidate: its weight is scaled by 1-p. NaN and
// values outside [0,1] are clamped (NaN means no penalty).
func (s *State) SetPenalty(p float64) {
	if !(p > 0) { // also NaN
		p = 0
	}
	if p > 1 {
		p = 1
	}
	s.reject.Store(uint32(math.Round(p * 65536)))
}

// Penalty returns the share of keys turned away.
func (s *State) Penalty() float64 { return float64(s.reject.Load()) / 65536 }

// tryAcquire starts a request unless the hard limit is reached.
func (s *State) tryAcquire() bool {
	n := s.inflight.Add(1)
	if l := s.limit.Load(); l > 0 && n > l {
		s.inflight.Add(-1)
		return false
	}
	s.total.Add(1)
	return true
}

// tryAcquireBeyond is tryAcquire up to twice the engine's limit (an
// adapter's home: homeBeyond).
func (s *State) tryAcquireBeyond() bool {
	n := s.inflight.Add(1)
	if l := s.limit.Load(); l > 0 && n > 2*l {
		s.inflight.Add(-1)
		return false
	}
	s.total.Add(1)
	return true
}

// holds reports whether a memory entry stamped st, looked up at nowMs,
// still counts as cached on the engine: made after its last Forget and,
// when the cache residency is known, no older than it.
func (s *State) holds(st uint64, nowMs int64) bool {
	if !s.fresh(st, nowMs) {
		return false
	}
	r := s.residency.Load()
	return r <= 0 || int64((stampOf(nowMs)-st)&(1<<stampBits-1)) <= r
}
