package pick

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// place picks r and returns the engine id.
func place(t *testing.T, tb *Table, r *Request) (string, int, Ticket) {
	t.Helper()
	i, why, tk := tb.PickRequest(r, nil)
	if i < 0 {
		t.Fatalf("no engine for key %x (%v)", r.Key, why)
	}
	return tb.Engine(i).ID, i, tk
}

// teach gives engine i of tb n first tokens following TTFT = a + p·work.
func teach(tb *Table, i int, n int, a, p float64, nowMs int64) {
	for k := range n {
		w := float64(500 + 300*(k%7))
		tb.FirstToken(i, Ticket{Work: w, AtMs: nowMs}, a+p*w)
	}
}

// TestModelLearnsLine: the engine model recovers intercept and slope of
// TTFT against queued work from 200 noiseless samples, and a non-negative
// fit from degenerate ones.
func TestModelLearnsLine(t *testing.T) {
	var m model
	for k := range 200 {
		w := float64(100 * (k % 13))
		m.observeFirstToken(w, 40+0.05*w, 1000)
	}
	x := m.params(1000)
	a, p, known := x.a, x.p, x.known
	if !known || math.Abs(a-40) > 1e-6 || math.Abs(p-0.05) > 1e-9 {
		t.Fatalf("a=%v p=%v known=%v, want 40, 0.05, true", a, p, known)
	}
	var flat model
	for range 10 {
		flat.observeFirstToken(300, 90, 1000)
	}
	if x := flat.params(1000); x.a != 90 || x.p != 0 {
		t.Fatalf("constant work: a=%v p=%v, want 90, 0", x.a, x.p)
	}
	if flat.params(1000 + modelStaleMs + 1).known {
		t.Fatal("a model with no sample for modelStaleMs is still used")
	}
}

// TestModelTBOTTracksSpeedNotLoad: the decode term follows an engine's
// fast periods at once and its slow (loaded) ones only slowly.
func TestModelTBOTTracksSpeedNotLoad(t *testing.T) {
	var m model
	for range 20 {
		m.observeTBOT(20, 0)
	}
	for range 20 {
		m.observeTBOT(200, 0) // a burst of load
	}
	if d := m.params(0).d; d > 60 {
		t.Fatalf("20 loaded samples moved TBOT to %v ms; want it near the engine's 20 ms", d)
	}
	m.observeTBOT(10, 0)
	m.observeTBOT(10, 0)
	if d := m.params(0).d; d > 30 {
		t.Fatalf("TBOT %v ms after faster samples, want it to follow down", d)
	}
}

// TestPickRequestAvoidsQueue: of two equally weighted engines, a key
// whose first choice has a queue of this gateway's requests (that
// costs more than the tolerance) goes to the other one.
func TestPickRequestAvoidsQueue(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(2, func(int) float64 { return 1 }), Options{Floor: 100})
	for i := range 2 {
		teach(tb, i, 20, 30, 0.1, 0)
	}
	// Find a key whose first choice is e0, then queue 20k tokens on e0.
	var key uint64
	for k := uint64(1); ; k++ {
		if id, _, _ := place(t, tb, &Request{Key: k, PromptTokens: 100}); id == "e0" {
			key = k
			break
		}
	}
	tb.engines[0].State.prefill.Store(20000)
	id, _, tk := place(t, tb, &Request{Key: key, PromptTokens: 100, NowMs: 1})
	if id != "e1" {
		t.Fatalf("key went to %s with 20k queued tokens there (2 s), want e1", id)
	}
	if tk.Uncached != 100 || tk.Work < 100 {
		t.Fatalf("ticket %+v, want 100 uncached tokens", tk)
	}
}

// TestPickRequestStickyAcrossWeightChange: a key keeps the engine that
// served it when a new snapshot moves its Maglev slot elsewhere.
func TestPickRequestStickyAcrossWeightChange(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(4, func(int) float64 { return 1 }), Options{})
	moved := 0
	for k := uint64(1); k <= 200; k++ {
		first, i, tk := place(t, tb, &Request{Key: k, NowMs: 10})
		tb.Finished(i, tk, false, 0, 0)
		tb.Done(i)
		w := []float64{1, 1, 1, 1}
		w[i] = 0.2 // the engine that served the key now has a small weight
		tb2 := mustBuild(t, p, specs(4, func(j int) float64 { return w[j] }), Options{})
		if j, _ := pickDone(tb2, k, nil); tb2.Engine(j).ID != first {
			moved++ // plain Maglev would move this key
		}
		again, j, tk2 := place(t, tb2, &Request{Key: k, NowMs: 20})
		tb2.Finished(j, tk2, false, 0, 0)
		tb2.Done(j)
		if again != first {
			t.Fatalf("key %d moved from %s to %s after a weight change", k, first, again)
		}
	}
	if moved == 0 {
		t.Fatal("no key's Maglev slot moved: the test proves nothing")
	}
}

// TestPickRequestPrefersCachedPrefix: a new key whose prompt shares a long
// prefix with a request already sent to an engine goes to an engine that
// holds it (the memory remembers the newest two holders of each block)
// whenever one is among its candidates.
func TestPickRequestPrefersCachedPrefix(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(3, func(int) float64 { return 1 }), Options{})
	for i := range 3 {
		teach(tb, i, 20, 20, 0.05, 0)
	}
	chain := make([]uint64, 100) // 100 blocks of 64 tokens: 6,400 tokens
	for k := range chain {
		chain[k] = uint64(k)*0x9e3779b97f4a7c15 + 7
	}
	_, i, tk := place(t, tb, &Request{Key: 1, PromptTokens: 6400, Blocks: chain, BlockTokens: 64, NowMs: 5})
	tb.FirstToken(i, tk, 20+0.05*tk.Work)
	tb.Finished(i, tk, true, 10, 0)
	tb.Done(i)
	hits := 0
	for k := uint64(2); k < 50; k++ {
		_, j, tk := place(t, tb, &Request{Key: k * 7919, PromptTokens: 6500, Blocks: chain, BlockTokens: 64, NowMs: 6})
		if tk.Uncached == 100 {
			hits++
		}
		tb.Finished(j, tk, false, 0, 0)
		tb.Done(j)
	}
	if hits < 45 {
		t.Fatalf("%d of 48 keys went to an engine holding their 6,400-token prefix", hits)
	}
}

// TestPickRequestKeepsShares: with nothing queued and nothing cached,
// 40,000 distinct keys land in proportion to weight within 1.5 points:
// the score does not move traffic off the plan when it has no reason to.
func TestPickRequestKeepsShares(t *testing.T) {
	w := []float64{0.5, 0.3, 0.2}
	p := NewPool()
	tb := mustBuild(t, p, specs(3, func(i int) float64 { return w[i] }), Options{})
	for i := range 3 {
		teach(tb, i, 20, 30, 0.05, 0)
	}
	checkShares(t, tb, w, 40000, 200, 0.015, rand.New(rand.NewPCG(1, 2)))
}

// checkShares places n requests of prompt tokens with random keys, one
// in flight at a time, and fails unless each engine of tb took its share
// w[i] of them within tol.
func checkShares(t *testing.T, tb *Table, w []float64, n, prompt int, tol float64, r *rand.Rand) {
	t.Helper()
	got := make([]int, len(w))
	for range n {
		_, i, tk := place(t, tb, &Request{Key: r.Uint64(), PromptTokens: prompt, NowMs: 1})
		tb.Finished(i, tk, false, 0, 0)
		tb.Done(i)
		got[i]++
	}
	for i := range w {
		if s := float64(got[i]) / float64(n); math.Abs(s-w[i]) > tol {
			t.Errorf("engine %d share %.3f, want %.2f±%g (%v)", i, s, w[i], tol, got)
		}
	}
}

// TestPickRequestSmallShareStillServed: with one request in flight at a
// time, each engine keeps its share of keys although the engines' models
// differ and one, restarted (Forget), has none: with few requests in
// flight share·(total+1)·(1+Slack) is below one for every engine, and
// counting the first request on an engine as beyond its share made every
// candidate strict, so the best-scored engine took everything and the
// restarted one, scored at the others' mean, nothing.
func TestPickRequestSmallShareStillServed(t *testing.T) {
	w := []float64{0.05, 0.45, 0.5}
	p := NewPool()
	tb := mustBuild(t, p, specs(3, func(i int) float64 { return w[i] }), Options{})
	teach(tb, 1, 20, 30, 0.05, 0)
	teach(tb, 2, 20, 40, 0.05, 0)
	tb.Engine(0).State.Forget(0)
	checkShares(t, tb, w, 4000, 47, 0.02, rand.New(rand.NewPCG(3, 4)))
}

// TestForgetDropsAffinity: after an engine went down and came back
// (Forget), a key it served is no longer sent back to it for affinity's
// sake, and its model is relearned.
func TestForgetDropsAffinity(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(4, func(int) float64 { return 1 }), Options{})
	teach(tb, 0, 20, 30, 0.05, 0)
	// Serve 300 keys; remember which went to e0.
	var onE0 []uint64
	for k := uint64(1); k <= 300; k++ {
		id, i, tk := place(t, tb, &Request{Key: k, NowMs: 1000})
		tb.Finished(i, tk, false, 0, 0)
		tb.Done(i)
		if id == "e0" {
			onE0 = append(onE0, k)
		}
	}
	st := tb.Engine(0).State
	st.Forget(5000)
	if _, _, _, known, _ := st.Model(5000); known {
		t.Fatal("model kept after Forget")
	}
	// With e0's weight now tiny, the keys' walks lead elsewhere; before
	// Forget they would have stuck to e0.
	tb2 := mustBuild(t, p, specs(4, func(i int) float64 { return []float64{0.01, 1, 1, 1}[i] }), Options{})
	back := 0
	for _, k := range onE0 {
		id, i, tk := place(t, tb2, &Request{Key: k, NowMs: 9000})
		tb2.Finished(i, tk, false, 0, 0)
		tb2.Done(i)
		if id == "e0" {
			back++
		}
	}
	if len(onE0) == 0 || back > len(onE0)/5 {
		t.Fatalf("%d of %d keys went back to e0 after Forget", back, len(onE0))
	}
}

// TestPrefillAccounting: the queue term rises by a request's uncached
// tokens at pick and falls at its first token (or at its end without
// one), so it returns to zero.
func TestPrefillAccounting(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(2, func(int) float64 { return 1 }), Options{})
	type placed struct {
		i  int
		tk Ticket
	}
	var all []placed
	for k := uint64(0); k < 100; k++ {
		_, i, tk := place(t, tb, &Request{Key: k, PromptTokens: 1000, NowMs: 1})
		all = append(all, placed{i, tk})
	}
	if q := tb.Engine(0).State.Prefill() + tb.Engine(1).State.Prefill(); q != 100*1000 {
		t.Fatalf("queued %d tokens, want 100,000", q)
	}
	for k, x := range all {
		if k%2 == 0 {
			tb.FirstToken(x.i, x.tk, 50)
			tb.Finished(x.i, x.tk, true, 10, 0)
		} else {
			tb.Finished(x.i, x.tk, false, 0, 0)
		}
		tb.Done(x.i)
	}
	for i := range 2 {
		if q := tb.Engine(i).State.Prefill(); q != 0 {
			t.Fatalf("engine %d has %d queued tokens after every request ended", i, q)
		}
	}
}

func TestMemoryTTLAndTags(t *testing.T) {
	m := newMemory(4, 4, 10_000)
	m.rememberKey(42, stampOf(0), 3)
	if e, _ := m.lastEngine(42, stampOf(5_000)); e != 3 {
		t.Fatalf("key engine %d, want 3", e)
	}
	if e, _ := m.lastEngine(43, stampOf(5_000)); e != 0 {
		t.Fatalf("another key read engine %d", e)
	}
	if e, _ := m.lastEngine(42, stampOf(20_000)); e != 0 {
		t.Fatal("entry outlived its TTL")
	}
	m.rememberBlock(7, stampOf(0), 1)
	m.rememberBlock(7, stampOf(0), 2)
	if e0, e1, _, _ := m.holders(7, stampOf(0)); e0 != 2 || e1 != 1 {
		t.Fatalf("holders %d %d, want 2 then 1", e0, e1)
	}
}

func BenchmarkPickRequest(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	p := NewPool()
	tb := mustBuild(b, p, specs(1024, func(int) float64 { return r.Float64() + 0.01 }), Options{})
	keys := make([]uint64, 4096)
	for i := range keys {
		keys[i] = hashkey.String(fmt.Sprint("conversation-", r.IntN(2000)))
	}
	for i := 0; i < 1024; i += 16 {
		tb.Engine(i).State.SetPenalty(0.3)
		teach(tb, i, 8, 30, 0.05, 0)
	}
	tb.Engine(5).State.SetEjected(true)
	var ex [2]int32
	ex[0], ex[1] = 9, 10
	req := Request{PromptTokens: 800, NowMs: 1}
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; b.Loop(); k++ {
		req.Key = keys[k&4095]
		i, _, tk := tb.PickRequest(&req, ex[:])
		if i >= 0 {
			tb.Finished(i, tk, false, 0, 0)
			tb.Done(i)
		}
	}
}

// TestOverflowGoesWhereServedSoonest: when one of a cluster's two local
// engines is lost and the survivor is past its bounded load, the excess
// goes to the remote engine with a short queue (the plan gave it only a
// sliver), not onto the survivor's growing queue, as least-loaded-by-share
// would do; the survivor is used again once its queue is gone.
func TestOverflowGoesWhereServedSoonest(t *testing.T) {
	p := NewPool()
	s := []Spec{{ID: "local-0", Weight: 0.499}, {ID: "local-1", Weight: 0.499}, {ID: "remote", Weight: 0.002, RTTms: 40}}
	tb := mustBuild(t, p, s, Options{})
	for i := range 3 {
		teach(tb, i, 20, 30, 0.05, 0)
	}
	tb.Engine(1).State.SetDown(true)
	type placed struct {
		i  int
		tk Ticket
	}
	var all []placed
	remote := 0
	for k := uint64(0); k < 200; k++ {
		i, _, tk := tb.PickRequest(&Request{Key: k * 0x9e3779b97f4a7c15, PromptTokens: 2000, NowMs: 1}, nil)
		if i < 0 {
			t.Fatal("no engine")
		}
		if tb.Engine(i).ID == "remote" {
			remote++
		}
		all = append(all, placed{i, tk})
	}
	// 200 requests of 2,000 tokens at 0.05 ms/token is 20 s of prefill on
	// one engine: splitting it with the remote engine (40 ms away) halves
	// that, so the remote engine must take a large share.
	if remote < 60 {
		t.Fatalf("remote engine took %d of 200 overflow requests", remote)
	}
	for _, x := range all {
		tb.Finished(x.i, x.tk, false, 0, 0)
		tb.Done(x.i)
	}
	if id, _, _ := place(t, tb, &Request{Key: 1, PromptTokens: 2000, NowMs: 2}); id != "local-0" {
		t.Fatalf("with the queues gone the key went to %s, want local-0", id)
	}
}

// TestSlotWaitSpillsPastBatchLimit: an engine whose batch limit (16) is
// full of this gateway's requests makes the next one wait for a slot
// (about a request time over 16 per request beyond the limit), so past
// the limit new keys go to the engine with free slots even though it is
// 40 ms away; with no known limit, the same load does not move them.
func TestSlotWaitSpillsPastBatchLimit(t *testing.T) {
	for _, slots := range []int{16, 0} {
		p := NewPool()
		s := []Spec{{ID: "near", Weight: 0.9, MaxConcurrency: slots}, {ID: "far", Weight: 0.1, RTTms: 40, MaxConcurrency: slots}}
		tb := mustBuild(t, p, s, Options{Floor: 1000}) // no bounded-load spill: only the score decides
		for i := range 2 {
			teach(tb, i, 20, 30, 0.05, 0)
			for range 20 {
				tb.Finished(i, Ticket{AtMs: 0}, true, 10, 2000) // 2 s per request
			}
		}
		near := tb.Index("near")
		for range 32 { // 32 in flight on near: 17 beyond its 16 slots
			if !tb.engines[near].State.tryAcquire() {
				t.Fatal("acquire")
			}
		}
		far := 0
		for k := uint64(0); k < 100; k++ {
			i, _, tk := tb.PickRequest(&Request{Key: k * 0x9e3779b97f4a7c15, PromptTokens: 100, NowMs: 1}, nil)
			if tb.Engine(i).ID == "far" {
				far++
			}
			tb.Finished(i, tk, false, 0, 0)
			tb.Done(i)
		}
		// far has a tenth of the slots, so a key's 16-slot walk misses it
		// with probability 0.9^16 = 19%: those keys can only stay near.
		if slots > 0 && far < 70 {
			t.Fatalf("with 16 slots full, %d of 100 new keys went to the engine with free slots", far)
		}
		if slots == 0 && far > 20 {
			t.Fatalf("with no known limit, %d of 100 keys left the near engine", far)
		}
	}
}

// TestOverflowAvoidsPenalizedEngine: an engine that fails fast (so it
// has no queue) but carries a penalty p scores in overflow as if it
// served only its unpenalized share, its score scaled by 1/(1-p), so the
// keys its penalty does not turn away do not all go to it either. Both
// engines are past their bounded load (a third is down): "failing" has
// penalty 0.5 and an empty queue (35 ms, 70 ms as penalized), "busy"
// 500 tokens queued (60 ms): busy takes every key; without the penalty
// failing takes every key that reaches it.
func TestOverflowAvoidsPenalizedEngine(t *testing.T) {
	for _, penalty := range []float64{0.5, 0} {
		p := NewPool()
		s := []Spec{{ID: "busy", Weight: 0.45}, {ID: "failing", Weight: 0.1}, {ID: "lost", Weight: 0.45}}
		tb := mustBuild(t, p, s, Options{Floor: 0.5, Slack: 0.01})
		for i := range 3 {
			teach(tb, i, 20, 30, 0.05, 0)
		}
		busy, failing := tb.Engine(0).State, tb.Engine(1).State
		tb.Engine(2).State.SetDown(true)
		failing.SetPenalty(penalty)
		busy.prefill.Store(500)
		// 9 in flight: busy's next would be its 9th > 0.45·10·1.01 + 0.5,
		// failing's its 2nd > 0.1·10·1.01 + 0.5: overflow decides.
		for range 8 {
			busy.tryAcquire()
		}
		failing.tryAcquire()
		reached, toFailing := 0, 0
		for k := uint64(0); k < 200; k++ {
			key := k * 0x9e3779b97f4a7c15
			i, why, tk := tb.PickRequest(&Request{Key: key, PromptTokens: 100, NowMs: 1}, nil)
			if why != Overflow {
				t.Fatalf("key %d placed by %v, want overflow", k, why)
			}
			// The keys failing's penalty does not turn away.
			if uint32(mix(mix(key)^tb.engines[1].salt)>>48) >= failing.reject.Load() {
				reached++
				if tb.Engine(i).ID == "failing" {
					toFailing++
				}
			}
			tb.Finished(i, tk, false, 0, 0)
			tb.Done(i)
		}
		if reached < 50 {
			t.Fatalf("penalty %v: only %d of 200 keys reach the failing engine: the test proves nothing", penalty, reached)
		}
		if penalty > 0 && toFailing > 0 {
			t.Errorf("penalty %v: the failing engine took %d of the %d keys it does not turn away", penalty, toFailing, reached)
		}
		if penalty == 0 && toFailing != reached {
			t.Errorf("no penalty: the idle engine took %d of %d keys, want all", toFailing, reached)
		}
	}
}

// TestSharedPrefixDoesNotHideDeeperBlocks: every prompt starts with the
// same system-prompt block, sent to every engine, so the memory keeps
// only the last two engines for it; an engine that was sent a
// conversation's deeper blocks is still credited with them (block k's
// hash covers blocks 0..k), and a follow-up of the conversation under
// another key goes there, with only its new tokens uncached.
func TestSharedPrefixDoesNotHideDeeperBlocks(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(3, func(int) float64 { return 1 }), Options{})
	for i := range 3 {
		teach(tb, i, 20, 20, 0.05, 0)
	}
	chain := func(conv uint64, n int) []uint64 {
		out := []uint64{hashkey.Mix(0x5eed)} // the shared first block
		for k := 1; k < n; k++ {
			out = append(out, hashkey.Mix(out[k-1]^(conv<<20|uint64(k))))
		}
		return out
	}
	send := func(key uint64, blocks []uint64) int {
		_, i, tk := place(t, tb, &Request{Key: key, PromptTokens: 64 * len(blocks), Blocks: blocks, BlockTokens: 64, NowMs: 5})
		tb.FirstToken(i, tk, 20)
		tb.Finished(i, tk, true, 10, 0)
		tb.Done(i)
		return i
	}
	held := send(1, chain(1, 40))
	// Other conversations refresh the shared block's holders until
	// neither of the two remembered is the engine holding conversation 1
	// (two sends to one other engine leave it the older holder).
	id := uint32(tb.Engine(held).State.idx + 1)
	sharedHeld := func() bool {
		e0, e1, _, _ := tb.mem.holders(chain(1, 1)[0], stampOf(5))
		return e0 == id || e1 == id || e0 == 0 || e1 == 0
	}
	for k := uint64(2); sharedHeld() && k < 1000; k++ {
		send(k*7919, chain(k, 3))
	}
	if sharedHeld() {
		t.Fatal("could not make the shared block's holders two other engines")
	}
	// A follow-up under another key: all three engines are candidates.
	_, i, tk := place(t, tb, &Request{Key: 1 << 40, PromptTokens: 64 * 50, Blocks: chain(1, 50), BlockTokens: 64, NowMs: 6})
	if i != held || tk.Uncached != 64*10 {
		t.Fatalf("follow-up went to e%d with %d tokens uncached; want e%d (holding 40 of its 50 blocks) with %d",
			i, tk.Uncached, held, 64*10)
	}
}

// TestAffinitySlackBelowBatchLimit: the key's last engine stays its
// candidate up to share·(1+AffinitySlack) of the in-flight requests plus
// Floor, but only Slack's bound applies once this gateway has the
// engine's batch limit in flight there.
func TestAffinitySlackBelowBatchLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots int
		want  bool // the key still goes to its last engine
	}{
		{"limit unknown", 0, true},
		{"below the limit", 100, true},
		{"one below the limit", 8, true},
		{"at the limit", 7, false},
		{"past the limit", 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool()
			sp := specs(2, func(int) float64 { return 1 })
			for i := range sp {
				sp[i].MaxConcurrency = tc.slots
			}
			tb := mustBuild(t, p, sp, Options{Floor: 0.5})
			// The key's last engine is e0 (placed there by the walk or not:
			// remember it directly).
			key := uint64(42)
			tb.remember(&Request{Key: key, NowMs: 1}, tb.Engine(0).State)
			// 10 in flight: e0 holds 7, e1 3. e0's share bound is
			// 0.5·11·1.25+0.5 = 7.4 (full with one more), its affinity
			// bound 0.5·11·1.5+0.5 = 8.75.
			for range 7 {
				tb.Engine(0).State.tryAcquire()
			}
			for range 3 {
				tb.Engine(1).State.tryAcquire()
			}
			i, _, tk := tb.PickRequest(&Request{Key: key, PromptTokens: 100, NowMs: 2}, nil)
			tb.Finished(i, tk, false, 0, 0)
			if got := i == 0; got != tc.want {
				t.Fatalf("went to e%d; want e0: %v", i, tc.want)
			}
		})
	}
}
