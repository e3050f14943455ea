package des

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/engine"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
)

// World is what a policy may observe: the static fleet, the network, the
// health the gateways have detected, and (for policies that scrape
// metrics) each engine's current gauges and counters.
type World struct {
	Scenario *scenario.Scenario
	Control  scenario.Control
	Engines  []EngineInfo
	Clusters []ClusterInfo
	// RTT[c][e] is the round-trip time from cluster c's gateway to
	// engine e.
	RTT [][]time.Duration
	// BlockTokens is the size of the workload's prefix blocks.
	BlockTokens int
	// Stream is the run's workload (read only), for policies that
	// calibrate themselves offline on it.
	Stream *scenario.Stream

	sim *sim
}

// Healthy reports whether the gateways consider engine e up (health
// checks notice a change HealthCheckMs after it happens).
func (w *World) Healthy(e int) bool { return w.sim.slots[e].seenUp }

// Stats returns engine e's gauges and counters summed over its current
// and past instances (a restart or a replica change starts a new
// instance; counters never go backwards).
func (w *World) Stats(e int) engine.Stats {
	var st engine.Stats
	for _, k := range w.sim.slots[e].instances {
		in := w.sim.insts[k]
		s := in.eng.Stats()
		if !in.alive {
			s.Running, s.Waiting, s.KVBlocksUsed = 0, 0, 0
			if k != w.sim.slots[e].cur {
				s.KVBlocksTotal, s.MaxSeqs = 0, 0
			}
		}
		st.Now = max(st.Now, s.Now)
		st.Running += s.Running
		st.Waiting += s.Waiting
		st.MaxSeqs += s.MaxSeqs
		st.KVBlocksUsed += s.KVBlocksUsed
		st.KVBlocksTotal += s.KVBlocksTotal
		st.PromptTokens += s.PromptTokens
		st.GenerationTokens += s.GenerationTokens
		st.PrefixQueryTokens += s.PrefixQueryTokens
		st.PrefixHitTokens += s.PrefixHitTokens
		st.Submitted += s.Submitted
		st.Rejected += s.Rejected
		st.Finished += s.Finished
		st.Canceled += s.Canceled
		st.Steps += s.Steps
		st.BusyTime += s.BusyTime
	}
	return st
}

// Replicas returns engine e's current replica count (0 while down).
func (w *World) Replicas(e int) int {
	s := &w.sim.slots[e]
	if !s.up {
		return 0
	}
	return w.sim.insts[s.cur].eng.Replicas()
}

// PrefixMatch returns how many of r's prompt tokens engine e holds in
// its prefix cache (what a router fed by KV-cache events knows).
func (w *World) PrefixMatch(e int, r *Request) int {
	s := &w.sim.slots[e]
	if !s.up {
		return 0
	}
	return w.sim.insts[s.cur].eng.PrefixMatch(w.sim.hashesFor(r), r.W.PromptTokens)
}

// ErrNotHeld is the error Run returns when a policy dispatches or rejects
// a request that Pick did not hold, or twice, or dispatches one to no
// engine.
var ErrNotHeld = errors.New("dispatch or reject of a request that is not held")

// Dispatch sends r, which Pick held (Held), to engine e at the current
// virtual time, as if Pick had returned e then: its attempt reaches the
// engine half a round trip later and ends with one Done. Call it from a
// Done, Tick or FirstToken callback.
func (w *World) Dispatch(r *Request, e int) {
	if !w.held(r) {
		return
	}
	if e < 0 || e >= len(w.sim.slots) {
		w.sim.breach(fmt.Errorf("%w: request %d dispatched to engine %d of %d", ErrNotHeld, r.Index, e, len(w.sim.slots)))
		return
	}
	w.sim.place(r.Index, e, w.sim.now)
}

// Reject sheds r, which Pick held (Held), at the current virtual time, as
// if Pick had returned -1 then (a held retry fails). Call it from a Done,
// Tick or FirstToken callback.
func (w *World) Reject(r *Request) {
	if !w.held(r) {
		return
	}
	if w.sim.place(r.Index, -1, w.sim.now) {
		w.sim.left++
	}
}

// held reports whether r is held, recording a breach of the contract
// when it is not.
func (w *World) held(r *Request) bool {
	s := w.sim
	if r == nil || r.Index < 0 || r.Index >= len(s.reqs) || s.reqs[r.Index].state != stHeld {
		idx := -1
		if r != nil {
			idx = r.Index
		}
		s.breach(fmt.Errorf("%w: request %d", ErrNotHeld, idx))
		return false
	}
	return true
}
