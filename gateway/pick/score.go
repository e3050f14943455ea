package pick

import (
	"math"
	"math/bits"
)

// Request is what PickRequest knows of a request. Only Key is required;
// every other field sharpens the estimate when present.
type Request struct {
	// Key is the affinity key (session, user or prompt prefix hash).
	Key uint64
	// NowMs is the caller's clock in milliseconds (any epoch, monotonic
	// enough for the memory's TTL).
	NowMs int64
	// PromptTokens is the prompt's length in tokens (an estimate is fine).
	PromptTokens int
	// Blocks are the prompt's prefix-block hashes, Blocks[k] covering the
	// prompt up to the end of block k, BlockTokens tokens each.
	Blocks      []uint64
	BlockTokens int
	// Model is the hash of the request's model (hashkey.String; 0: none):
	// on engines that hold LoRA adapters, one whose model is an adapter
	// not loaded there costs Options.AdapterColdMs more (adapters.go).
	Model uint64
}

// The prefix blocks a gateway cuts a prompt into (gateway/blocks.go),
// and the simulator's gateways too: about PromptBlockTokens tokens each
// (256 bytes of text), at most MaxPromptBlocks of them (the first
// 512 KiB of text, about 128k tokens, a long model context), so a
// long prompt's reuse is seen as deep as an engine could hold it.
const (
	PromptBlockTokens = 64
	MaxPromptBlocks   = 2048
)

// Ticket is what the caller hands back about a placed request: the
// prefill work it added to its engine's queue and the work that was
// ahead of it (its own included), for FirstToken.
type Ticket struct {
	Uncached int64   // tokens this request adds to the engine's prefill queue
	Work     float64 // prefill tokens ahead of it when sent, its own included
	Score    float64 // the score it was placed on, ms
	AtMs     int64   // Request.NowMs
}

// maxCandidates bounds Options.Candidates.
const maxCandidates = 4

// maxCollected bounds collect's candidates: the key's last engine, the
// walk's, and the two engines this gateway last sent the request's
// adapter to.
const maxCollected = maxCandidates + 3

// scored is one candidate of PickRequest (72 bytes).
type scored struct {
	i        int32
	uncached int64
	work     float64
	score    float64
	// strict: no tolerance (a slot wait, or more than its share of this
	// gateway's requests in flight).
	strict bool
	// beyond: an adapter's home at or past its hard limit, taken up to
	// twice it (adapterHolders).
	beyond bool
	m      cand
}

// cand is a candidate's engine model as score reads it: a and p are set
// only when known, d only when knownD (score fills in the others).
type cand struct {
	a, p, d       float64
	known, knownD bool
}

// PickRequest chooses an engine for r, skipping exclude, and counts the
// request in flight on it (end it with Done, and FirstToken when the
// first token arrives).
//
// # Algorithm
//
// The candidates are, in order: the engine that last served r.Key (so
// affinity survives weight changes; its bounded load uses
// Options.AffinitySlack, 0.5, while this gateway has fewer requests in
// flight there than the engine's batch limit), then the first distinct acceptable
// engines of r.Key's walk over the weighted Maglev table (acceptable as
// in Pick: not excluded, available, not turned away by its penalty,
// within its bounded load and hard limit), Options.Candidates (3) of
// them. Each is scored by the time until the client would have its first
// Options.LookaheadTokens (8) tokens from it, as this gateway can tell:
//
//	RTT + a + p·(queued + uncached + redo) + d·8 + slot wait + adapter
//
// where RTT is the snapshot's network latency to the engine, queued the
// prefill tokens of this gateway's requests on the engine that have no
// first token yet plus those other gateways last reported queued there
// (State.SetForeignPrefill), uncached the part of this prompt beyond the
// deepest prefix block the engine was sent within its cache residency
// (see cached and State.SetCacheResidency), redo the
// tokens another candidate holds and this one does not (prefilling them
// again costs the fleet that time on top of this request's wait, so a
// move away from the cache is counted twice), a and p the intercept and slope of
// the engine's TTFT against queued prefill work (learned from this
// gateway's own requests, dropped after 30 s without one; engines with
// nothing current take the mean of the candidates that have), d the
// engine's decode speed (the low envelope of its requests' time between
// tokens: its hardware, not its momentary load, which would lag and make
// traffic swing), the slot wait, when the snapshot gives the
// engine's concurrency limit, the requests this gateway has in flight
// beyond it times a mean engine request time over the limit, and adapter
// the cost of a LoRA adapter not loaded there (adapters.go; the engines
// holding the request's adapter are candidates too). The first
// candidate in that order whose score is within the tolerance
// (Options.ScoreSlack·best + Options.ScoreSlackMs, 20% + 30 ms) of the
// best wins, so the plan's shares and affinity hold unless a queue, a
// slower engine or a cache miss costs more than the tolerance. Two kinds
// of candidate get no tolerance (they win only with the best score): one
// with a slot wait, since the tolerance keeps the plan's order among
// engines that would start the request at once, but the requests this
// gateway sees beyond an engine's batch limit are a lower bound on the
// queue there (other gateways' requests wait in it too); and one with
// more than its share·(1+Slack) of this gateway's requests in flight,
// rounded up to whole requests (the first request on an engine never
// is; the key's last engine stays a candidate up to 1+AffinitySlack, but
// past the normal slack it must win on its score), since the score sees
// queued prefill and not a full batch whose limit is not known yet.
//
// # Deviation from the weights
//
// Every candidate satisfies Pick's bounded-load guard, so an engine gets
// at most its share·(1+AffinitySlack) of this gateway's requests in
// flight plus Floor (share·(1+Slack) + Floor of the requests it was not
// the key's last engine for), whatever the scores say; with nothing queued and nothing cached
// the walk's order decides and keys land in proportion to the weights
// (TestPickRequestKeepsShares).
//
// When no candidate is within its bounded load (an engine of the cluster
// is lost, or a burst exceeds the plan), overflow scores every available
// engine of the table and takes the best (see overflow); only with none
// available do Pick's panic fallbacks apply. LeastLoaded tables ignore
// scores and behave like Pick.
func (t *Table) PickRequest(r *Request, exclude []int32) (int, Reason, Ticket) {
	if len(t.engines) == 0 {
		return -1, None, Ticket{}
	}
	if t.opt.LeastLoaded {
		i, why := t.Pick(r.Key, exclude)
		return i, why, t.ticket(i, r)
	}
	var buf [maxCollected]scored
	c, sticky, own := t.collect(r, exclude, buf[:0])
	if len(c) == 0 {
		return t.overflow(r, exclude)
	}
	best := t.score(r, c)
	for len(c) > 0 {
		k := chooseBest(c, best, t.opt.ScoreSlack, t.opt.ScoreSlackMs)
		e := &t.engines[c[k].i]
		if e.State.tryAcquire() || (c[k].beyond && e.State.tryAcquireBeyond()) {
			addPrefill(e.State, c[k].uncached)
			t.remember(r, e.State)
			why := Weighted
			if k == 0 && (sticky || c[0].i == own) {
				why = Affinity
			}
			return int(c[k].i), why, Ticket{Uncached: c[k].uncached, Work: c[k].work, Score: c[k].score, AtMs: r.NowMs}
		}
		c = append(c[:k], c[k+1:]...)
		best = minScore(c)
	}
	i, why := t.fallback(r.Key, exclude)
	return i, why, t.ticket(i, r)
}

// overflowScan bounds the engines overflow scores.
const overflowScan = 64

// overflow places r when no candidate is within its bounded load (an
// engine of the cluster is lost, or a burst exceeds the plan): every
// available engine of the table under its hard limit (at most
// overflowScan of them, starting at the key's position) is scored as in
// PickRequest and the best one wins, so the excess goes where this
// gateway's queues and the network say it is served soonest, whatever
// the engines' shares. Penalties apply as in the walk (a penalized
// engine turns away its share of keys, and the rest see its score scaled
// up by 1/(1-penalty)). With no such engine, Pick's fallbacks apply.
func (t *Table) overflow(r *Request, exclude []int32) (int, Reason, Ticket) {
	var buf [overflowScan]scored
	c := buf[:0]
	h := mix(r.Key)
	n := len(t.engines)
	start := int(r.Key % uint64(n))
	for k := 0; k < n && len(c) < overflowScan; k++ {
		i := start + k
		if i >= n {
			i -= n
		}
		e := &t.engines[i]
		s := e.State
		if excluded(int32(i), exclude) || !s.Available() {
			continue
		}
		if rej := s.reject.Load(); rej > 0 && uint32(mix(h^e.salt)>>48) < rej {
			continue // its penalty turns this key away, as in the walk
		}
		if l := s.limit.Load(); l > 0 && s.inflight.Load() >= l {
			continue
		}
		c = append(c, scored{i: int32(i)})
	}
	if len(c) > 0 {
		t.score(r, c)
		for k := range c {
			// A penalized engine (failing, or answering 429) scores as if
			// it served only its unpenalized share: one that fails fast has
			// an empty queue and would otherwise draw the whole overflow.
			c[k].score /= max(1-t.engines[c[k].i].State.Penalty(), 1.0/64)
		}
		for len(c) > 0 {
			k := choose(c, 0, 0)
			e := &t.engines[c[k].i]
			if e.State.tryAcquire() {
				addPrefill(e.State, c[k].uncached)
				t.remember(r, e.State)
				return int(c[k].i), Overflow, Ticket{Uncached: c[k].uncached, Work: c[k].work, Score: c[k].score, AtMs: r.NowMs}
			}
			c = append(c[:k], c[k+1:]...)
		}
	}
	i, why := t.fallback(r.Key, exclude)
	return i, why, t.ticket(i, r)
}

// fallback is Pick's behaviour after its walk: least loaded, then panic.
func (t *Table) fallback(key uint64, exclude []int32) (int, Reason) {
	if i := t.least(key, exclude, true, false); i >= 0 {
		return i, Overflow
	}
	if i := t.least(key, exclude, true, true); i >= 0 {
		return i, Panic
	}
	return -1, None
}

// ticket accounts a request placed by a fallback: all of its prompt is
// queued prefill work on the engine.
func (t *Table) ticket(i int, r *Request) Ticket {
	if i < 0 {
		return Ticket{}
	}
	s := t.engines[i].State
	u := int64(max(r.PromptTokens, 0))
	w := float64(addPrefill(s, u))
	t.remember(r, s)
	return Ticket{Uncached: u, Work: w, AtMs: r.NowMs}
}

// addPrefill adds n tokens to s's prefill queue and returns the new
// total, skipping the locked add when n is 0 (a fully cached prompt).
func addPrefill(s *State, n int64) int64 {
	if n == 0 {
		return s.prefill.Load()
	}
	return s.prefill.Add(n)
}

// acceptable applies Pick's per-engine checks, except the hard limit
// (tryAcquire enforces it when the engine is chosen).
func (t *Table) acceptable(i int32, h uint64, tot, grow float64, exclude []int32) bool {
	if excluded(i, exclude) {
		return false
	}
	e := &t.engines[i]
	s := e.State
	if !s.Available() {
		return false
	}
	if rej := s.reject.Load(); rej > 0 && uint32(mix(h^e.salt)>>48) < rej {
		return false
	}
	if l := s.limit.Load(); l > 0 && s.inflight.Load() >= l {
		return false
	}
	return float64(s.inflight.Load())+1 <= e.Share*tot*grow+t.opt.Floor
}

// collect appends the candidates: the key's last engine when it is in
// the table and acceptable, then the walk's first distinct acceptable
// engines. It also returns whether the first is the key's last engine
// and the engine of the key's own slot.
func (t *Table) collect(r *Request, exclude []int32, c []scored) ([]scored, bool, int32) {
	h := mix(r.Key)
	tot := float64(t.total.Load()) + 1
	grow := 1 + t.opt.Slack
	sticky := false
	if mem := t.mem; mem != nil {
		if id, st := mem.lastEngine(r.Key, stampOf(r.NowMs)); id > 0 && int(id) <= len(t.byPool) {
			if i := t.byPool[id-1]; i >= 0 && t.engines[i].State.fresh(st, r.NowMs) && t.acceptable(i, h, tot, t.affinityGrow(i, grow), exclude) {
				c = add(c, i)
				sticky = true
			}
		}
	}
	m := uint64(len(t.slots))
	pos, _ := bits.Mul64(h, m)
	own := t.slots[pos]
	floor := t.opt.Floor
	for p, probes, want := 0, t.opt.MaxProbes, t.opt.Candidates; p < probes && len(c) < want; p++ {
		i := t.slots[pos]
		if pos++; pos == m {
			pos = 0
		}
		// acceptable, written out: this loop is most of collect's time.
		if has(c, i) || excluded(i, exclude) {
			continue
		}
		e := &t.engines[i]
		s := e.State
		if s.flags.Load() != 0 { // !s.Available()
			continue
		}
		if rej := s.reject.Load(); rej > 0 && uint32(mix(h^e.salt)>>48) < rej {
			continue
		}
		n := s.inflight.Load()
		if l := s.limit.Load(); l > 0 && n >= l {
			continue
		}
		if !(float64(n)+1 <= e.Share*tot*grow+floor) {
			continue
		}
		c = add(c, i)
	}
	return t.adapterHolders(r, exclude, h, tot, grow, c), sticky, own
}

// adapterHolders adds to c the engines that hold r's model loaded where
// it is a LoRA adapter, when acceptable (the walk may not reach them): its
// homes once PlaceAdapters placed it (adapterhomes.go), as many as c has
// room for, past their bounded load and up to twice their hard limit (an
// adapter moved off its home costs a load there and another when it
// comes back: the score weighs that against the home's queue and slot
// wait, and a home past its share or limit wins only with the best
// score); else the (up to two) engines this gateway last sent it to.
func (t *Table) adapterHolders(r *Request, exclude []int32, h uint64, tot, grow float64, c []scored) []scored {
	mem := t.mem
	if r.Model == 0 || mem == nil {
		return c
	}
	if pl := t.pool.placed.Load(); pl != nil {
		if hs := pl.homes[r.Model]; len(hs) > 0 {
			for _, idx := range hs {
				if len(c) == maxCollected {
					break
				}
				if int(idx) < len(t.byPool) {
					if i := t.byPool[idx]; i >= 0 && !has(c, i) {
						if t.acceptable(i, h, tot, math.Inf(1), exclude) {
							c = add(c, i)
						} else if t.homeBeyond(i, h, exclude) {
							c = add(c, i)
							c[len(c)-1].beyond = true
						}
					}
				}
			}
			return c
		}
	}
	e0, e1, _, _ := mem.holders(r.Model, stampOf(r.NowMs))
	for _, id := range [2]uint32{e0, e1} {
		if id == 0 || int(id) > len(t.byPool) {
			continue
		}
		i := t.byPool[id-1]
		if i < 0 || has(c, i) || !t.engines[i].State.isAdapter(r.Model) || !t.acceptable(i, h, tot, grow, exclude) {
			continue
		}
		c = add(c, i)
	}
	return c
}

// homeBeyond reports whether engine i, a home of the request's adapter
// at its hard limit, may take it beyond the limit: available, not turned
// away by its penalty, its batch limit known (the score's slot wait
// counts the queue) and under twice its hard limit. Waiting there for a slot
// (the score's slot wait) may beat loading the adapter elsewhere, which
// takes a slot another adapter's requests hold and evicts one of that
// engine's homes.
func (t *Table) homeBeyond(i int32, h uint64, exclude []int32) bool {
	e := &t.engines[i]
	s := e.State
	if excluded(i, exclude) || !s.Available() {
		return false
	}
	if rej := s.reject.Load(); rej > 0 && uint32(mix(h^e.salt)>>48) < rej {
		return false
	}
	l := s.limit.Load()
	return e.Slots > 0 && l > 0 && s.inflight.Load() < 2*l
}

// affinityGrow is the bounded-load factor of the key's last engine i:
// 1+AffinitySlack while this gateway has fewer requests in flight there
// than the engine's batch limit (or the limit is unknown), else grow: past
// the limit the request would wait for a slot, which costs more than the
// cache saves.
func (t *Table) affinityGrow(i int32, grow float64) float64 {
	e := &t.engines[i]
	if e.Slots > 0 && e.State.inflight.Load() >= int64(e.Slots) {
		return grow
	}
	return 1 + t.opt.AffinitySlack
}

// add appends candidate i to c (within its capacity), setting only what
// score reads before it writes (copying a whole zero scored costs more
// than the rest of a pick).
func add(c []scored, i int32) []scored {
	n := len(c)
	c = c[:n+1]
	c[n].i, c[n].uncached, c[n].strict, c[n].beyond = i, 0, false, false
	return c
}

func has(c []scored, i int32) bool {
	for k := range c {
		if c[k].i == i {
			return true
		}
	}
	return false
}

// score fills each candidate's uncached tokens, work ahead and score,
// and returns the best (least) score, as minScore(c).
func (t *Table) score(r *Request, c []scored) float64 {
	prompt := int64(max(r.PromptTokens, 0))
	t.cached(r, c)
	look := float64(t.opt.LookaheadTokens)
	// Engines with nothing learned take the mean of those with something.
	var sa, sp, sd float64
	var na, nd int
	var held int64 // the most tokens any candidate holds
	now := r.NowMs
	for k := range c {
		m := &c[k].m
		md := &t.engines[c[k].i].State.model
		// As model.load, reading only what is used below.
		m.known = md.known.Load() && now-md.lastMs.Load() <= modelStaleMs
		if m.known {
			m.a, m.p = math.Float64frombits(md.a.Load()), math.Float64frombits(md.p.Load())
			sa, sp, na = sa+m.a, sp+m.p, na+1
		}
		m.knownD = md.knownD.Load() && now-md.lastDMs.Load() <= modelStaleMs
		if m.knownD {
			m.d = math.Float64frombits(md.d.Load())
			sd, nd = sd+m.d, nd+1
		}
		held = max(held, min(c[k].uncached, prompt))
	}
	da, dp, dd := 0.0, defaultMsPerToken, 0.0
	if na > 0 {
		da, dp = sa/float64(na), sp/float64(na)
	}
	if nd > 0 {
		dd = sd / float64(nd)
	}
	best := math.Inf(1)
	fair := (float64(t.total.Load()) + 1) * (1 + t.opt.Slack)
	for k := range c {
		e := &t.engines[c[k].i]
		m := &c[k].m
		if !m.known {
			m.a, m.p = da, dp
		}
		if !m.knownD {
			m.d = dd
		}
		cached := min(c[k].uncached, prompt) // c[k].uncached holds the cached tokens here
		u := max(prompt-cached, 0)
		c[k].uncached = u
		c[k].work = float64(max(e.State.prefill.Load(), 0) + e.State.foreign.Load() + u)
		// Prefilling again what another candidate holds costs the fleet
		// that prefill's time as well as this request: it is counted twice.
		redo := float64(max(held-cached, 0))
		var wait float64
		if e.Slots > 0 {
			wait = slotWait(e, math.Float64frombits(e.State.model.e2e.Load()))
		}

		e2e := math.Float64frombits(e.State.model.e2e.Load())
		adapter := e.State.adapterCost(r.Model, r.NowMs, t.opt.AdapterColdMs, e2e)
		c[k].score = e.RTTms + m.a + m.p*(c[k].work+redo) + m.d*look + wait + adapter
		// More than its share: rounded up to whole requests, so the first
		// request in flight on an engine never is (with few requests in
		// flight, share·fair is below one for most engines, and a strict
		// engine whose model is unknown, scored at the candidates' mean,
		// could never be the best: a restarted engine with a small share
		// took no request at all, TestPickRequestSmallShareStillServed).
		// A candidate that would load the request's adapter is strict too:
		// the tolerance must not move an adapter's requests off the
		// engines that hold it.
		c[k].strict = wait > 0 || adapter > 0 || float64(e.State.inflight.Load())+1 > math.Max(1, e.Share*fair)
		best = min(best, c[k].score)
	}
	return best
}

// slotWait is how long a request sent to e now waits for a batch slot:
// the requests this gateway has in flight there beyond the engine's
// batch limit, each freeing its slot after a mean request time (e2eMs)
// over the limit's slots. 0 when the limit or the time is unknown.
func slotWait(e *Engine, e2eMs float64) float64 {
	if e.Slots <= 0 || !(e2eMs > 0) {
		return 0
	}
	over := e.State.inflight.Load() + 1 - int64(e.Slots)
	if over <= 0 {
		return 0
	}
	return float64(over) * e2eMs / float64(e.Slots)
}

// defaultMsPerToken is the prefill cost assumed before any engine of the
// candidates has been measured (10,000 tokens/s): it only orders queues
// against network latency until the first measurements arrive.
const defaultMsPerToken = 0.1

// cached sets each candidate's uncached field to the tokens of r's
// prompt the engine is expected to hold: up to the deepest block the
// memory says was sent to it. A block's hash covers the whole prefix up
// to its end, so an engine sent block k was sent blocks 0..k-1 with it;
// a shared prefix (a system prompt every conversation starts with) is
// sent to many engines while the memory keeps only its two most recent
// holders, so a candidate missing from an earlier block's holders is
// still credited with a deeper block it holds. The scan ends at the
// first block with no holder at all (nothing deeper was sent anywhere,
// barring an entry lost to a collision).
func (t *Table) cached(r *Request, c []scored) {
	mem := t.mem
	if mem == nil || len(r.Blocks) == 0 || r.BlockTokens <= 0 {
		return
	}
	now := stampOf(r.NowMs)
	// Overflow scores up to overflowScan candidates, PickRequest up to
	// maxCandidates+1.
	var ids [overflowScan]uint32
	var sts [overflowScan]*State
	for k := range c {
		sts[k] = t.engines[c[k].i].State
		ids[k] = sts[k].idx + 1
	}
	for b, h := range r.Blocks {
		e0, e1, s0, s1 := mem.holders(h, now)
		if e0 == 0 && e1 == 0 {
			break
		}
		for k := range c {
			if (e0 == ids[k] && sts[k].holds(s0, r.NowMs)) || (e1 == ids[k] && sts[k].holds(s1, r.NowMs)) {
				c[k].uncached = int64((b + 1) * r.BlockTokens)
			}
		}
	}
}

// choose returns the index of the first candidate whose score is within
// the tolerance of the best.
func choose(c []scored, slack, slackMs float64) int {
	return chooseBest(c, minScore(c), slack, slackMs)
}

// minScore returns the least score of c (+Inf when empty, NaN when any
// is NaN).
func minScore(c []scored) float64 {
	best := math.Inf(1)
	for k := range c {
		best = min(best, c[k].score)
	}
	return best
}

// chooseBest is choose with best = minScore(c) given. A strict
// candidate is chosen only with the best score.
func chooseBest(c []scored, best, slack, slackMs float64) int {
	lim := best + slack*best + slackMs
	for k := range c {
		if c[k].score <= lim && (!c[k].strict || c[k].score <= best) {
			return k
		}
	}
	return 0
}

// remember records r's key, blocks and model (adapters.go) as served by
// s.
func (t *Table) remember(r *Request, s *State) {
	t.pool.countRequest(r.Model, s.noteAdapter(r.Model, r.NowMs))
	mem := t.mem
	if mem == nil || s.idx >= maxMemEngine {
		return
	}
	now := stampOf(r.NowMs)
	id := s.idx + 1
	mem.rememberKey(r.Key, now, id)
	if s.isAdapter(r.Model) {
		mem.rememberBlock(r.Model, now, id)
	}
	for _, h := range r.Blocks {
		mem.rememberBlock(h, now, id)
	}
}

// FirstToken tells the table that the request placed with tk on engine i
// produced its first token after engineTTFTms at the engine (the
// gateway's TTFT less the network round trip): its prefill work leaves
// the engine's queue and the engine's model learns from it.
func (t *Table) FirstToken(i int, tk Ticket, engineTTFTms float64) {
	s := t.engines[i].State
	addPrefill(s, -tk.Uncached)
	s.model.observeFirstToken(tk.Work, engineTTFTms, tk.AtMs)
}

// Finished tells the table that the request placed with tk on engine i
// ended, whether or not Done was called yet. When it had no first token
// its prefill work leaves the queue now; tbotMs, its mean time between
// output tokens (0 when unknown, as for a non-streaming response), feeds
// the engine's model.
func (t *Table) Finished(i int, tk Ticket, firstToken bool, tbotMs, e2eMs float64) {
	s := t.engines[i].State
	if e2eMs > 0 {
		s.model.observeE2E(e2eMs)
	}
	if !firstToken {
		addPrefill(s, -tk.Uncached)
	}
	if tbotMs > 0 {
		s.model.observeTBOT(tbotMs, tk.AtMs)
	}
}

// PickBeyondLimit places r when PickRequest found every engine of the
// table at its hard limit: on the available, not excluded engine with
// the fewest requests in flight relative to its share, as long as that
// is under twice its limit (a batch queued in the engine beyond the
// admitted ones); -1 when there is none. It is for a table of the
// engines that serve one model: the gateway's admission counts the slots
// of the whole cluster, so a request it admitted can find its model's
// engines full while the cluster has room, and waiting in its model's
// engine beats a 429 (least-connections proxies queue it there too).
func (t *Table) PickBeyondLimit(r *Request, exclude []int32) (int, Reason, Ticket) {
	best, bestLoad := -1, math.Inf(1)
	for i := range t.engines {
		s := t.engines[i].State
		if excluded(int32(i), exclude) || !s.Available() {
			continue
		}
		n, l := s.inflight.Load(), s.limit.Load()
		if l > 0 && n >= 2*l {
			continue
		}
		if load := float64(n+1) / (t.engines[i].Share + 1e-12); load < bestLoad {
			best, bestLoad = i, load
		}
	}
	if best < 0 {
		return -1, None, Ticket{}
	}
	s := t.engines[best].State
	if n := s.inflight.Add(1); s.limit.Load() > 0 && n > 2*s.limit.Load() {
		s.inflight.Add(-1)
		return -1, None, Ticket{}
	}
	s.total.Add(1)
	return best, Overflow, t.ticket(best, r)
}
