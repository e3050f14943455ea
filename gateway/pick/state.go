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
type State struct {
	id       string
	inflight atomic.Int64
	limit    atomic.Int64  // 0: no limit
	flags    atomic.Uint32 // flagEjected | flagDown
	reject   atomic.Uint32 // penalty: share of keys turned away, in 1/65536
	total    *atomic.Int64 // the pool's in-flight total
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
