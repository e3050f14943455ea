// Package pick chooses an engine for a request: weighted by the published
// snapshot, with KV-cache affinity, bounded load and local guardrails.
//
// # Algorithm
//
// A Table is a weighted Maglev lookup table: M slots (M prime, at least
// 64 per engine up to 256 engines, 16 per engine beyond) are filled from each engine's own permutation of the slot
// numbers, each engine taking a number of slots proportional to its
// weight. A request's affinity key hashes to one slot; the engine there is
// its first choice, so requests sharing a prefix key land on the engine
// that holds their KV cache. Maglev was chosen over weighted rendezvous
// hashing because a lookup is O(1) (rendezvous is O(engines), ~µs at 1,024
// engines) while a weight change still moves close to the minimal share
// of keys; the table is rebuilt off the request path when a snapshot
// arrives.
//
// The first choice is skipped, and the following slots are walked (which
// visits other engines in proportion to their weights), when the engine
//   - was already tried by this request (a retry goes to a different engine),
//   - is ejected or down,
//   - is penalized: a penalty p turns away the share p of keys (decided by
//     a hash of key and engine, so the same keys move each time),
//   - would exceed a bounded slack over its weighted share of the
//     gateway's in-flight requests: inflight+1 > share·(total+1)·(1+Slack)
//   - Floor (consistent hashing with bounded loads), or
//   - is at its hard in-flight limit.
//
// After MaxProbes slots the least loaded acceptable engine (in flight
// relative to penalized weight) is taken; if every engine is ejected or down the
// least loaded one under its limit is used anyway (panic routing, as a
// guardrail must never take the whole cluster down). Only when every
// engine is at its hard limit does Pick fail; the gateway then sheds.
//
// With no snapshot the gateway builds a LeastLoaded table: healthy engines,
// fewest in flight, ties broken by the affinity key.
//
// PickRequest (score.go) is the gateway's picker: it takes the key's last
// engine and the first three acceptable engines of the same walk, and
// scores them by the time the request would take to its first tokens
// there, from this gateway's own queued prefill work, the prefix blocks
// it remembers sending, the network latency and what it learned of each
// engine; the plan's order wins unless another candidate is better by
// more than a tolerance.
package pick

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// Reason says how Pick chose.
type Reason uint8

// Reasons.
const (
	None        Reason = iota
	Affinity           // the key's own slot
	Weighted           // a later slot of the walk
	Overflow           // least loaded after the walk found nothing
	LeastLoaded        // fallback table: fewest in flight
	Panic              // every engine ejected or down: least loaded anyway
)

func (r Reason) String() string {
	switch r {
	case Affinity:
		return "affinity"
	case Weighted:
		return "weighted"
	case Overflow:
		return "overflow"
	case LeastLoaded:
		return "fallback"
	case Panic:
		return "panic"
	}
	return "none"
}

// Spec describes one engine of a table.
type Spec struct {
	ID     string
	URL    string
	Weight float64
	// RTTms is the network round trip to the engine (the snapshot's
	// network estimate), used by PickRequest's scores. 0: unknown.
	RTTms float64
	// MaxConcurrency is how many requests the engine runs at once (its
	// batch limit over all replicas), used by PickRequest's scores: the
	// requests this gateway has in flight beyond it wait for a slot. 0:
	// unknown.
	MaxConcurrency int
}

// Engine is one engine of a built table.
type Engine struct {
	ID    string
	URL   string
	Share float64 // normalized weight
	RTTms float64 // Spec.RTTms
	Slots int     // Spec.MaxConcurrency
	State *State
	salt  uint64
}

// Options tune a table. Zero values take the defaults.
type Options struct {
	// Slack is the allowed excess over an engine's weighted share of
	// in-flight requests before affinity spills over. Default 0.25.
	Slack float64
	// AffinitySlack replaces Slack for the engine that last served the
	// request's key in PickRequest (it likely holds the key's KV cache,
	// whose loss costs a full prefill), while this gateway has fewer
	// requests in flight there than the engine's batch limit (or the
	// limit is unknown). Default 0.5; never below Slack.
	AffinitySlack float64
	// Floor is the absolute excess (requests) always allowed, so that
	// affinity holds at low load. Default 2.
	Floor float64
	// MaxProbes bounds the walk over slots. Default 16.
	MaxProbes int
	// LeastLoaded ignores weights: fewest in flight wins (the fallback
	// when there is no snapshot).
	LeastLoaded bool
	// SlotsPerEngine sizes the table: M is the first prime at least
	// SlotsPerEngine·engines and 4093 up to 256 engines, and grows by
	// SlotsPerEngine/4 an engine beyond (filling the table costs about
	// M·ln M). Default 64, at most 65,536.
	SlotsPerEngine int
	// Candidates is the number of distinct engines of the weighted walk
	// PickRequest scores (besides the key's last engine). Default 3, at
	// most 4.
	Candidates int
	// ScoreSlack and ScoreSlackMs are PickRequest's tolerance: the first
	// candidate in affinity-and-weight order whose score is within
	// ScoreSlack·best + ScoreSlackMs of the best one wins. Defaults 0.2
	// and 30 ms.
	ScoreSlack   float64
	ScoreSlackMs float64
	// LookaheadTokens is how many output tokens PickRequest's score
	// waits for: it estimates the time until the client has that many
	// tokens, so a slow decoder costs something but the plan, not the
	// picker, trades decode speed against everything else. Default 8.
	LookaheadTokens int
	// AdapterColdMs is what a request whose model is a LoRA adapter not
	// loaded on an engine that holds adapters adds to that engine's score
	// (twice that when its adapter slots are full). Default
	// DefaultAdapterColdMs; negative: 0.
	AdapterColdMs float64
}

func (o *Options) defaults() {
	if !(o.Slack >= 0) || math.IsInf(o.Slack, 0) {
		o.Slack = 0.25
	}
	if o.Slack == 0 {
		o.Slack = 0.25
	}
	if !(o.AffinitySlack > 0) || math.IsInf(o.AffinitySlack, 0) {
		o.AffinitySlack = 0.5
	}
	o.AffinitySlack = max(o.AffinitySlack, o.Slack)
	if !(o.Floor > 0) || math.IsInf(o.Floor, 0) {
		o.Floor = 2
	}
	if o.MaxProbes <= 0 {
		o.MaxProbes = 16
	}
	if o.SlotsPerEngine <= 0 {
		o.SlotsPerEngine = 64
	}
	o.SlotsPerEngine = min(o.SlotsPerEngine, maxSlotsPerEngine)
	if o.Candidates <= 0 {
		o.Candidates = 3
	}
	o.Candidates = min(o.Candidates, maxCandidates)
	if !(o.ScoreSlack > 0) || math.IsInf(o.ScoreSlack, 0) {
		o.ScoreSlack = 0.2
	}
	switch {
	case o.AdapterColdMs == 0 || math.IsNaN(o.AdapterColdMs) || math.IsInf(o.AdapterColdMs, 0):
		o.AdapterColdMs = DefaultAdapterColdMs
	case o.AdapterColdMs < 0:
		o.AdapterColdMs = 0
	}
	if o.LookaheadTokens <= 0 {
		o.LookaheadTokens = 8
	}
	if !(o.ScoreSlackMs > 0) || math.IsInf(o.ScoreSlackMs, 0) {
		o.ScoreSlackMs = 30
	}
}

// Errors of Build.
var (
	ErrNoEngines = errors.New("no engines")
	ErrBadWeight = errors.New("invalid weight")
)

// MaxEngines bounds a table.
const MaxEngines = 1 << 16

// maxSlotsPerEngine bounds Options.SlotsPerEngine, so that a table has
// fewer than 2^31 slots (maglevFill keeps slots in 32 bits and squares
// their numbers in 64).
const maxSlotsPerEngine = 1 << 16

// Pool keeps one State per engine id, shared by every table it builds, so
// in-flight counts, ejections and penalties survive snapshot swaps.
// States are never removed; the number of distinct engine ids bounds it.
type Pool struct {
	mu      sync.Mutex
	states  map[string]*State
	total   atomic.Int64
	mem     *memory
	last    maglevTable               // the latest table Build filled (under mu)
	built   *Table                    // the latest table Build made (under mu)
	placed  atomic.Pointer[placement] // adapters' homes (adapterhomes.go)
	placeMu sync.Mutex                // serializes PlaceAdapters
	// placedReqs counts requests placed since PlaceAdapters last ran.
	placedReqs atomic.Int64
}

// maglevTable is a filled Maglev table and what it is a function of:
// its size, the engines' ids in order and their quotas.
type maglevTable struct {
	ids   []string
	quota []int
	slots []int32
	order []int32 // the slots in the order the fill took them
	// shares are engine shares that give these quotas (the quotas are a
	// function of the shares and the size).
	shares []float64
}

// sameShares reports whether engines have t.shares, bit for bit.
func (t *maglevTable) sameShares(engines []Engine) bool {
	if len(t.shares) != len(engines) {
		return false
	}
	for i := range engines {
		if math.Float64bits(t.shares[i]) != math.Float64bits(engines[i].Share) {
			return false
		}
	}
	return true
}

// maglevShares returns the engines' shares.
func maglevShares(engines []Engine) []float64 {
	s := make([]float64, len(engines))
	for i := range engines {
		s[i] = engines[i].Share
	}
	return s
}

// same reports whether t was filled from exactly these engines and
// quotas (so the table would come out the same).
func (t *maglevTable) same(engines []Engine, quota []int) bool {
	return t.sameEngines(engines) && slices.Equal(t.quota, quota)
}

// sameEngines reports whether t was filled from these engines, in this
// order.
func (t *maglevTable) sameEngines(engines []Engine) bool {
	if len(t.slots) == 0 || len(t.ids) != len(engines) {
		return false
	}
	for i := range engines {
		if t.ids[i] != engines[i].ID {
			return false
		}
	}
	return true
}

// Memory sizes of a pool: 2^16 affinity keys and 2^18 two-way buckets of
// prefix blocks (4.5 MiB), remembered for at most memoryTTLMs.
const (
	memoryKeyBits   = 16
	memoryBlockBits = 18
	memoryTTLMs     = 10 * 60 * 1000
)

// NewPool returns an empty pool.
func NewPool() *Pool {
	return &Pool{states: map[string]*State{}, mem: newMemory(memoryKeyBits, memoryBlockBits, memoryTTLMs)}
}

// State returns the state of engine id, creating it.
func (p *Pool) State(id string) *State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked(id)
}

// stateLocked is State under p.mu.
func (p *Pool) stateLocked(id string) *State {
	s, ok := p.states[id]
	if !ok {
		s = &State{id: id, total: &p.total, idx: uint32(len(p.states))}
		p.states[id] = s
	}
	return s
}

// Lookup returns the state of engine id if the pool has it.
func (p *Pool) Lookup(id string) (*State, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.states[id]
	return s, ok
}

// InFlight returns the requests in flight over all engines.
func (p *Pool) InFlight() int64 { return p.total.Load() }

// Table is an immutable routing table over engines; share it freely.
type Table struct {
	engines []Engine
	slots   []int32
	total   *atomic.Int64
	opt     Options
	pool    *Pool
	mem     *memory
	byPool  []int32 // pool index -> engine index, -1: not in the table
}

// Build returns a table over specs. Engines of weight 0 are left out
// (unless opt.LeastLoaded, which ignores weights). Weights must be finite
// and non-negative with a positive sum; ids unique and non-empty.
func (p *Pool) Build(specs []Spec, opt Options) (*Table, error) {
	return p.build(specs, opt, true)
}

// BuildPart returns a table over specs, a part of the pool's engines (the
// ones that serve one model, say), as Build does but leaving the pool's
// latest table and Maglev fill as they are, so that the next Build of the
// whole fleet still reuses them. The part's engines share the pool's
// states: a request placed through either table counts on both.
func (p *Pool) BuildPart(specs []Spec, opt Options) (*Table, error) {
	return p.build(specs, opt, false)
}

func (p *Pool) build(specs []Spec, opt Options, record bool) (*Table, error) {
	opt.defaults()
	if len(specs) > MaxEngines {
		return nil, fmt.Errorf("%d engines, at most %d: %w", len(specs), MaxEngines, ErrBadWeight)
	}
	// The engines' states. When the specs list the engines of the last
	// table built, in order (a new plan over the same fleet), they are
	// that table's, and its ids are unique. Else they are looked up
	// under one lock: duplicates among the ids the pool knows are found
	// by their states' indices, among the others by a map. A failed
	// build creates no state.
	p.mu.Lock()
	prev := p.built
	p.mu.Unlock()
	same := record && prev != nil && len(prev.engines) == len(specs)
	for i := 0; same && i < len(specs); i++ {
		same = prev.engines[i].ID == specs[i].ID
	}
	states := make([]*State, len(specs))
	var seenIdx []bool
	if same {
		for i := range specs {
			states[i] = prev.engines[i].State
		}
	} else {
		p.mu.Lock()
		for i := range specs {
			states[i] = p.states[specs[i].ID]
		}
		seenIdx = make([]bool, len(p.states))
		p.mu.Unlock()
	}
	var seenNew map[string]bool
	var sum float64
	kept := make([]int, 0, len(specs))
	for i := range specs {
		s := &specs[i]
		if s.ID == "" {
			return nil, fmt.Errorf("empty engine id: %w", ErrBadWeight)
		}
		switch st := states[i]; {
		case same: // the last table's ids: unique
		case st != nil:
			if seenIdx[st.idx] {
				return nil, fmt.Errorf("engine %q listed twice: %w", s.ID, ErrBadWeight)
			}
			seenIdx[st.idx] = true
		default:
			if seenNew[s.ID] {
				return nil, fmt.Errorf("engine %q listed twice: %w", s.ID, ErrBadWeight)
			}
			if seenNew == nil {
				seenNew = map[string]bool{}
			}
			seenNew[s.ID] = true
		}
		w := s.Weight
		if opt.LeastLoaded {
			w = 1
		}
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return nil, fmt.Errorf("engine %q weight %v: %w", s.ID, s.Weight, ErrBadWeight)
		}
		if w == 0 {
			continue
		}
		sum += w
		kept = append(kept, i)
	}
	if len(kept) == 0 || !(sum > 0) || math.IsInf(sum, 0) {
		return nil, ErrNoEngines
	}
	t := &Table{engines: make([]Engine, len(kept)), total: &p.total, opt: opt, pool: p, mem: p.mem}
	p.mu.Lock()
	for k, i := range kept {
		s := &specs[i]
		w := s.Weight
		if opt.LeastLoaded {
			w = 1
		}
		rtt := s.RTTms
		if !(rtt > 0) || math.IsInf(rtt, 0) {
			rtt = 0
		}
		st := states[i]
		if st == nil { // new, in the order of the specs
			st = p.stateLocked(s.ID)
		}
		var salt uint64
		if same {
			salt = prev.engines[i].salt
		} else {
			salt = hashString(s.ID, 0x9e3779b97f4a7c15)
		}
		t.engines[k] = Engine{ID: s.ID, URL: s.URL, Share: w / sum, RTTms: rtt, Slots: max(s.MaxConcurrency, 0), State: st, salt: salt}
	}
	t.byPool = make([]int32, len(p.states))
	p.mu.Unlock()
	if same && len(kept) == len(specs) {
		// The last table's engines at the same places; states added since
		// are in neither.
		n := copy(t.byPool, prev.byPool)
		for i := n; i < len(t.byPool); i++ {
			t.byPool[i] = -1
		}
	} else {
		for i := range t.byPool {
			t.byPool[i] = -1
		}
		for i := range t.engines {
			t.byPool[t.engines[i].State.idx] = int32(i)
		}
	}
	switch {
	case opt.LeastLoaded:
	case record:
		t.slots = p.maglev(t.engines, opt.SlotsPerEngine)
	default:
		t.slots = maglev(t.engines, opt.SlotsPerEngine)
	}
	if record {
		p.mu.Lock()
		p.built = t
		p.mu.Unlock()
	}
	return t, nil
}

// maglev returns the Maglev table of engines: the pool's latest one when
// it was filled from the same engines (ids in the same order) with the
// same quotas, since the fill is a function of those alone; else a new
// one, which becomes the latest. Snapshots that leave every engine's
// slot count as it was (the same plan published again, or weights that
// moved by less than a slot) so cost no fill.
func (p *Pool) maglev(engines []Engine, per int) []int32 {
	m := maglevSize(len(engines), per)
	p.mu.Lock()
	last := p.last
	p.mu.Unlock()
	if len(last.slots) == m && last.sameEngines(engines) && last.sameShares(engines) {
		return last.slots // the same quotas, without computing them
	}
	quota := maglevQuotas(engines, m)
	if last.same(engines, quota) {
		// Remember these shares too: the next build with them skips the
		// quotas.
		last.shares = maglevShares(engines)
		p.mu.Lock()
		p.last = last
		p.mu.Unlock()
		return last.slots
	}
	next := maglevTable{ids: make([]string, len(engines)), quota: slices.Clone(quota), shares: maglevShares(engines)}
	for i := range engines {
		next.ids[i] = engines[i].ID
	}
	var from *maglevTable // the fill to resume, see maglevFill
	if last.sameEngines(engines) && len(last.slots) == m {
		from = &last
	}
	next.slots, next.order = maglevFill(engines, m, quota, from)
	p.mu.Lock()
	p.last = next
	p.mu.Unlock()
	return next.slots
}

// Len returns the number of engines.
func (t *Table) Len() int { return len(t.engines) }

// Engine returns engine i (0 <= i < Len()).
func (t *Table) Engine(i int) *Engine { return &t.engines[i] }

// Index returns the index of engine id, or -1.
func (t *Table) Index(id string) int {
	for i := range t.engines {
		if t.engines[i].ID == id {
			return i
		}
	}
	return -1
}

// Done ends a request Pick started on engine i. It is valid after the
// table was replaced.
func (t *Table) Done(i int) { t.engines[i].State.Release() }

// Pick chooses an engine for key, skipping the engines in exclude, and
// counts the request in flight on it (end it with Done). It returns -1
// when every engine is excluded or at its hard limit. Pick does not
// allocate.
func (t *Table) Pick(key uint64, exclude []int32) (int, Reason) {
	if len(t.engines) == 0 {
		return -1, None
	}
	if t.opt.LeastLoaded {
		if i := t.least(key, exclude, false, false); i >= 0 {
			return i, LeastLoaded
		}
		if i := t.least(key, exclude, false, true); i >= 0 {
			return i, Panic
		}
		return -1, None
	}
	h := mix(key)
	m := uint64(len(t.slots))
	pos, _ := bits.Mul64(h, m)
	tot := float64(t.total.Load()) + 1
	grow := 1 + t.opt.Slack
	for p := 0; p < t.opt.MaxProbes; p++ {
		i := t.slots[pos]
		if pos++; pos == m {
			pos = 0
		}
		if excluded(i, exclude) {
			continue
		}
		e := &t.engines[i]
		s := e.State
		if !s.Available() {
			continue
		}
		if rej := s.reject.Load(); rej > 0 && uint32(mix(h^e.salt)>>48) < rej {
			continue
		}
		if float64(s.inflight.Load())+1 > e.Share*tot*grow+t.opt.Floor {
			continue
		}
		if !s.tryAcquire() {
			continue
		}
		if p == 0 {
			return int(i), Affinity
		}
		return int(i), Weighted
	}
	if i := t.least(key, exclude, true, false); i >= 0 {
		return i, Overflow
	}
	if i := t.least(key, exclude, true, true); i >= 0 {
		return i, Panic
	}
	return -1, None
}

// least picks the acceptable engine with the fewest in flight (relative
// to its penalized share when weighted), starting the scan at the key so ties split
// by key. force ignores availability.
func (t *Table) least(key uint64, exclude []int32, weighted, force bool) int {
	n := len(t.engines)
	for attempt := 0; attempt < 3; attempt++ {
		best, bestLoad := -1, math.Inf(1)
		start := int(key % uint64(n))
		for k := 0; k < n; k++ {
			i := start + k
			if i >= n {
				i -= n
			}
			if excluded(int32(i), exclude) {
				continue
			}
			s := t.engines[i].State
			if !force && !s.Available() {
				continue
			}
			in := s.inflight.Load()
			if l := s.limit.Load(); l > 0 && in >= l {
				continue
			}
			load := float64(in)
			if weighted {
				// Relative to the penalized weight, so that an engine that
				// fails fast (and so has nothing in flight) attracts no
				// traffic.
				eff := t.engines[i].Share * (1 - s.Penalty())
				load = (load + 1) / (eff + 1e-12)
			}
			if load < bestLoad {
				best, bestLoad = i, load
			}
		}
		if best < 0 {
			return -1
		}
		if t.engines[best].State.tryAcquire() {
			return best
		}
	}
	return -1
}

func excluded(i int32, ex []int32) bool {
	for _, x := range ex {
		if x == i {
			return true
		}
	}
	return false
}

// maglev fills a weighted Maglev table.
func maglev(engines []Engine, per int) []int32 {
	m := maglevSize(len(engines), per)
	slots, _ := maglevFill(engines, m, maglevQuotas(engines, m), nil)
	return slots
}

// maglevFleet is the number of engines up to which a table has per
// slots for each engine; beyond it, the table grows by per/4 slots an
// engine.
const maglevFleet = 256

// maglevSize is the number of slots of a table of n engines: the first
// prime at least per·min(n, maglevFleet), per/4·n and 4093. Filling a
// table costs about m·ln m probes, so past maglevFleet engines it grows
// four times slower than the fleet; an engine's share of the slots
// stays within 1/m of its weight (under 1/16,384 up to 1,024 engines at the
// default 64, 1/(16·n) beyond).
func maglevSize(n, per int) int {
	return nextPrime(max(per*min(n, maglevFleet), per/4*n, 4093))
}

// maglevProbe is an engine's walk over the slots: its next probe and its
// step (mod m).
type maglevProbe struct{ pos, skip uint64 }

// maglevFill fills m slots, engine i taking quota[i] of them (quota sums
// to m; maglevFill uses it up), in Maglev's order: rounds over the
// engines with quota left, each taking the first free slot of its
// permutation offset, offset+skip, offset+2·skip, … (mod m). It returns
// the table and the order in which its slots were taken.
//
// The result is the textbook population's (maglevByDivision in the
// tests); three things make it cheaper. Occupancy is a bitmap (m/8 bytes,
// in the first-level cache at 64,000 slots) rather than the slot array.
// The last free slots, which a walk finds only after m/free probes
// each, are found by arithmetic instead: the free slot s that engine i
// reaches first is the one of fewest steps (s-pos)·skip⁻¹ mod m from its
// next probe pos, since every slot it walked past is taken and stays
// taken; with at most maglevTail(m) free slots, scanning them costs less
// than walking. And a fill of the same engines with other quotas
// (prev, or nil) starts after the rounds it shares with prev's: see
// maglevResume.
func maglevFill(engines []Engine, m int, quota []int, prev *maglevTable) (slots, order []int32) {
	n := len(engines)
	mm := uint64(m)
	probe := make([]maglevProbe, n)
	for i := range engines {
		probe[i] = maglevProbe{
			pos:  hashString(engines[i].ID, 0x243f6a8885a308d3) % mm,
			skip: hashString(engines[i].ID, 0x13198a2e03707344)%(mm-1) + 1,
		}
	}
	slots = make([]int32, m)
	order = make([]int32, 0, m)
	taken := make([]uint64, (m+63)/64)
	active := make([]int, 0, n)
	filled := 0
	if prev != nil {
		filled = maglevResume(prev, quota, probe, slots, &order, taken, mm)
	}
	if filled == 0 {
		for i := range n { // every engine takes a slot in the first round
			active = append(active, i)
		}
	} else {
		rounds := maglevShared(prev.quota, quota)
		for i := range n {
			if quota[i] -= rounds; quota[i] > 0 {
				active = append(active, i)
			}
		}
	}
	tail := maglevTail(m)
	var (
		free []uint32 // the free slots once at most tail are left
		inv  []uint64 // skip⁻¹ mod m, 0: not computed yet
		red  = newBarrett(mm)
	)
	for filled < m {
		w := 0
		for _, i := range active {
			var c uint64
			if left := m - filled; left > tail {
				c = probe[i].next(taken, mm)
			} else {
				if free == nil {
					free = make([]uint32, 0, left)
					for s := range uint64(m) {
						if taken[s>>6]&(1<<(s&63)) == 0 {
							free = append(free, uint32(s))
						}
					}
					inv = make([]uint64, n)
				}
				if inv[i] == 0 {
					inv[i] = modInverse(probe[i].skip, mm)
				}
				p, k := probe[i], 0
				best := mm
				for j, s := range free {
					d := uint64(s) + mm - p.pos
					if d >= mm {
						d -= mm
					}
					if steps := red.mod(d * inv[i]); steps < best {
						best, k = steps, j
					}
				}
				c = uint64(free[k])
				free[k] = free[len(free)-1]
				free = free[:len(free)-1]
				if p.pos = c + p.skip; p.pos >= mm {
					p.pos -= mm
				}
				probe[i] = p
			}
			taken[c>>6] |= 1 << (c & 63)
			slots[c] = int32(i)
			order = append(order, int32(c))
			filled++
			quota[i]--
			if quota[i] > 0 {
				active[w] = i
				w++
			}
			if filled == m {
				break
			}
		}
		active = active[:w]
	}
	return slots, order
}

// maglevShared is the number of rounds two fills of the same engines
// with quotas a and b have in common: round r's engines are those of
// quota above r, in index order, so up to the smallest quota of an engine
// whose quota differs, the rounds take the same slots. 0 when a and b
// are equal (no fill to share) or of different lengths.
func maglevShared(a, b []int) int {
	if len(a) != len(b) {
		return 0
	}
	r := math.MaxInt
	for i := range a {
		if a[i] != b[i] {
			r = min(r, a[i], b[i])
		}
	}
	if r == math.MaxInt {
		return 0
	}
	return r
}

// maglevResume puts the state of prev's fill after the rounds it shares
// with a fill at quota (maglevShared) into slots, order, taken and the
// probes of the engines that go on, and returns how many slots that is
// (0: none, start afresh). A walk's next probe is the one after the slot
// it took last, in the walk and in the arithmetic alike, and the rounds
// before take the same slots; so the fill goes on as a fresh one would.
func maglevResume(prev *maglevTable, quota []int, probe []maglevProbe, slots []int32, order *[]int32, taken []uint64, m uint64) int {
	r := maglevShared(prev.quota, quota)
	if r == 0 || len(prev.order) != len(slots) || slices.Min(quota) < 1 || slices.Min(prev.quota) < 1 {
		// (A quota of 0, with fewer slots than engines, still takes a
		// slot in the first round, if any is left: start afresh.)
		return 0
	}
	k := 0
	for _, q := range prev.quota {
		k += min(q, r)
	}
	if k >= len(slots) {
		return 0
	}
	copy(slots, prev.slots)
	*order = append(*order, prev.order[:k]...)
	for _, c := range prev.order[:k] {
		taken[c>>6] |= 1 << (c & 63)
		p := &probe[prev.slots[c]]
		p.pos = addMod(uint64(c), p.skip, m)
	}
	return k
}

// next returns the first free slot of p's walk and moves p past it. It
// tests four probes per step, so that the step's branch is mispredicted
// about once per slot rather than once per probe.
func (p *maglevProbe) next(taken []uint64, m uint64) uint64 {
	pos, skip := p.pos, p.skip
	var c [4]uint64
	for {
		c[0] = pos
		c[1] = addMod(c[0], skip, m)
		c[2] = addMod(c[1], skip, m)
		c[3] = addMod(c[2], skip, m)
		free := (^taken[c[0]>>6]>>(c[0]&63))&1 |
			(^taken[c[1]>>6]>>(c[1]&63))&1<<1 |
			(^taken[c[2]>>6]>>(c[2]&63))&1<<2 |
			(^taken[c[3]>>6]>>(c[3]&63))&1<<3
		if free != 0 {
			s := c[bits.TrailingZeros64(free)&3]
			p.pos = addMod(s, skip, m)
			return s
		}
		pos = addMod(c[3], skip, m)
	}
}

// addMod returns a+b mod m for a, b < m < 2^63, without a branch: the
// wrap happens for a share b/m of an engine's probes, at random, which
// a branch predictor cannot learn.
func addMod(a, b, m uint64) uint64 {
	d := a + b - m
	return d + m&uint64(int64(d)>>63)
}

// maglevTail is the number of free slots below which maglevFill finds
// them by arithmetic: a walk costs about m/free cheap probes per slot, a
// scan free multiplications.
func maglevTail(m int) int {
	return int(math.Sqrt(float64(m)))
}

// barrett reduces x < 2^64 mod d without a division.
type barrett struct{ d, r uint64 }

func newBarrett(d uint64) barrett { return barrett{d: d, r: math.MaxUint64 / d} }

func (b barrett) mod(x uint64) uint64 {
	q, _ := bits.Mul64(x, b.r)
	x -= q * b.d
	if x >= b.d {
		x -= b.d
	}
	return x
}

// modInverse returns a⁻¹ mod m for 0 < a < m, gcd(a, m) = 1.
func modInverse(a, m uint64) uint64 {
	t, nt := int64(0), int64(1)
	r, nr := int64(m), int64(a)
	for nr != 0 {
		q := r / nr
		t, nt = nt, t-q*nt
		r, nr = nr, r-q*nr
	}
	if t < 0 {
		t += int64(m)
	}
	return uint64(t)
}

// maglevQuotas gives each engine its slots of m by largest remainder of
// its share, at least one each: the m-Σ⌊share·m⌋ engines of largest
// remainder (ties to the lower index) get one more.
func maglevQuotas(engines []Engine, m int) []int {
	n := len(engines)
	quota := make([]int, n)
	rems := make([]maglevRem, n)
	used := 0
	for i := range engines {
		x := engines[i].Share * float64(m)
		q := int(x)
		if q < 1 {
			q = 1
		}
		quota[i] = q
		used += q
		rems[i] = maglevRem{i, x - math.Floor(x)}
	}
	if k := m - used; k > 0 && k < n {
		// Each of the first k in the order gets one: which ones they are,
		// not their order, matters, so a selection does.
		maglevSelect(rems, k)
		for _, r := range rems[:k] {
			quota[r.i]++
		}
		used = m
	} else if k > 0 {
		slices.SortFunc(rems, maglevRemOrder)
		for k := 0; used < m; k = (k + 1) % n {
			quota[rems[k].i]++
			used++
		}
	}
	for used > m { // minimums pushed us over: take from the largest
		big := 0
		for i := range quota {
			if quota[i] > quota[big] {
				big = i
			}
		}
		quota[big]--
		used--
	}
	return quota
}

// maglevRem is an engine's remainder of its share of the slots.
type maglevRem struct {
	i int
	f float64
}

// maglevRemOrder orders remainders largest first, ties to the lower
// index: a total order, as the indices differ.
func maglevRemOrder(a, b maglevRem) int {
	if c := cmp.Compare(b.f, a.f); c != 0 {
		return c
	}
	return a.i - b.i
}

// maglevSelect moves the first k of r in maglevRemOrder to r[:k] (in
// any order), 0 < k < len(r): a quickselect with median-of-three
// pivots, which sorts what is left after 2·log2(len(r)) partitions, so
// it stays O(n log n) on any input.
func maglevSelect(r []maglevRem, k int) {
	lo, hi := 0, len(r)-1
	target := k - 1
	for budget := 2 * bits.Len(uint(len(r))); lo < hi; budget-- {
		if budget == 0 {
			slices.SortFunc(r[lo:hi+1], maglevRemOrder)
			return
		}
		mid := lo + (hi-lo)/2
		if maglevRemOrder(r[mid], r[lo]) < 0 {
			r[mid], r[lo] = r[lo], r[mid]
		}
		if maglevRemOrder(r[hi], r[lo]) < 0 {
			r[hi], r[lo] = r[lo], r[hi]
		}
		if maglevRemOrder(r[hi], r[mid]) < 0 {
			r[hi], r[mid] = r[mid], r[hi]
		}
		// r[lo] <= r[mid] <= r[hi]: partition around r[mid], kept at hi.
		r[mid], r[hi] = r[hi], r[mid]
		pivot, store := r[hi], lo
		for j := lo; j < hi; j++ {
			if maglevRemOrder(r[j], pivot) < 0 {
				r[j], r[store] = r[store], r[j]
				store++
			}
		}
		r[store], r[hi] = r[hi], r[store]
		switch {
		case store == target:
			return
		case store < target:
			lo = store + 1
		default:
			hi = store - 1
		}
	}
}

func nextPrime(n int) int {
	if n%2 == 0 {
		n++
	}
	for ; ; n += 2 {
		prime := true
		for d := 3; d*d <= n; d += 2 {
			if n%d == 0 {
				prime = false
				break
			}
		}
		if prime {
			return n
		}
	}
}

// mix is the splitmix64 finalizer (internal/hashkey), the mixer of the
// affinity keys, prefix-block chains and Maglev tables.
func mix(x uint64) uint64 { return hashkey.Mix(x) }

// hashString is the hash of s seeded with seed (internal/hashkey).
func hashString(s string, seed uint64) uint64 { return hashkey.Seeded(s, seed) }
