package pick

import (
	"math"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// Behavioural tests for rules of the picker that only the replay golden
// (TestPickRequestReplay) caught (issue 26: each was found by a mutant of
// bench/mutation that survived the other tests; see docs/testing.md).

// TestStaleModelRelearnsFromItsNewSamplesAlone: a TTFT model with no
// sample for 30 s is dropped, and the next one starts from nothing: it is
// not used before modelMinSamples (4) new first tokens, and then it is
// their line exactly, nothing of the old one nor a prior pulling it
// towards 0.
func TestStaleModelRelearnsFromItsNewSamplesAlone(t *testing.T) {
	tb := mustBuild(t, NewPool(), specs(1, func(int) float64 { return 1 }), Options{})
	teach(tb, 0, 20, 30, 0.05, 0)
	st := tb.Engine(0).State
	const at = modelStaleMs + 10_000
	for k, w := range []float64{500, 800, 1100, 1400} {
		tb.FirstToken(0, Ticket{Work: w, AtMs: at}, 100+0.1*w)
		a, p, _, known, _ := st.Model(at)
		if k < modelMinSamples-1 {
			if known {
				t.Fatalf("model used after %d new samples (a=%v p=%v), want %d", k+1, a, p, modelMinSamples)
			}
			continue
		}
		if !known || math.Abs(a-100) > 1e-6 || math.Abs(p-0.1) > 1e-9 {
			t.Fatalf("after %d new samples: a=%v p=%v known=%v, want 100, 0.1, true", k+1, a, p, known)
		}
	}
}

// TestRequestTimeIsThePlainMeanOfTheFirstRequests: the mean engine
// request time behind the slot wait is the plain mean of the requests
// seen until its window (32) fills. One engine of 1 batch slot with 1
// request in flight makes the next wait one mean request time: its score
// is 35 ms (30 + 0.05·100) plus the mean of the times seen so far.
func TestRequestTimeIsThePlainMeanOfTheFirstRequests(t *testing.T) {
	sp := specs(1, func(int) float64 { return 1 })
	sp[0].MaxConcurrency = 1
	tb := mustBuild(t, NewPool(), sp, Options{})
	teach(tb, 0, 20, 30, 0.05, 0)
	tb.Engine(0).State.tryAcquire()
	sum := 0.0
	for k, ms := range []float64{1000, 3000, 2000, 6000} {
		tb.Finished(0, Ticket{AtMs: 0}, true, 0, ms)
		sum += ms
		_, _, tk := pickOnce(t, tb, Request{Key: 1, PromptTokens: 100, NowMs: 1})
		if want := 35 + sum/float64(k+1); math.Abs(tk.Score-want) > 1e-9 {
			t.Fatalf("after %d requests: score %v, want %v (the mean request time %v as the wait)", k+1, tk.Score, want, sum/float64(k+1))
		}
	}
}

// overflowTable builds e0 (down, share 0.8) and e1, e2 (0.1 each, e2's
// RTT rtt2 ms), every engine with TTFT = 30 + 0.05·work learned. With
// Floor 0.5 and Slack 0.01 an idle e1 or e2 is past its bounded load
// (1 > 0.1·1.01 + 0.5), so every request overflows; neither is past its
// share for the strict rule (the first request on an engine never is).
func overflowTable(t *testing.T, rtt2 float64) *Table {
	t.Helper()
	sp := specs(3, func(i int) float64 { return []float64{0.8, 0.1, 0.1}[i] })
	sp[2].RTTms = rtt2
	tb := mustBuild(t, NewPool(), sp, Options{Floor: 0.5, Slack: 0.01})
	for i := range 3 {
		teach(tb, i, 20, 30, 0.05, 0)
	}
	tb.Engine(0).State.SetDown(true)
	return tb
}

// TestOverflowOntoTheOnlyEngineLeftIsScored: with one engine left for
// overflow it is scored like any other (not handed to the least-loaded
// fallback): its ticket carries its score and credits the prefix it
// holds, so only the new tokens join its prefill queue.
func TestOverflowOntoTheOnlyEngineLeftIsScored(t *testing.T) {
	tb := overflowTable(t, 0)
	tb.Engine(2).State.SetDown(true)
	chain := prefixChain(100)
	holdPrefix(tb, 1, chain)
	id, why, tk := pickOnce(t, tb, Request{Key: 7, PromptTokens: 6464, Blocks: chain, BlockTokens: 64, NowMs: 1})
	if id != "e1" || why != Overflow {
		t.Fatalf("went to %s by %v, want e1 by overflow", id, why)
	}
	if want := 30 + 0.05*64; tk.Uncached != 64 || math.Abs(tk.Score-want) > 1e-9 {
		t.Fatalf("ticket: %d tokens uncached, score %v; want 64 (the prefix credited) and %v", tk.Uncached, tk.Score, want)
	}
}

// TestOverflowTakesTheBestScoreByAnyMargin: overflow has no tolerance:
// of two idle engines, the one half a millisecond nearer takes every
// key, whichever of them the key's scan reaches first.
func TestOverflowTakesTheBestScoreByAnyMargin(t *testing.T) {
	tb := overflowTable(t, 0.5)
	firstE2 := 0
	for k := uint64(0); k < 60; k++ {
		key := hashkey.Mix(k)
		if key%3 == 2 {
			firstE2++ // the scan starts at e2
		}
		id, why, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1})
		if id != "e1" || why != Overflow {
			t.Fatalf("key %d (scan from e%d) went to %s by %v with score %v, want e1 (35 ms) by overflow",
				k, key%3, id, why, tk.Score)
		}
	}
	if firstE2 == 0 {
		t.Fatal("no key's scan reaches e2 first: the test proves nothing")
	}
}

// TestPenaltyTurnsAwayItsShareOfTheKeysThatLastWentThere: a penalty p
// turns away the share p of the keys whose last engine it is (which then
// take their walk's next engine), not all of them, not none: with p =
// 0.25 on e1, about 75% of 2,000 keys that last went to e1 stay
// (tolerance ±5 points; 2,000 draws put the share within ±2).
func TestPenaltyTurnsAwayItsShareOfTheKeysThatLastWentThere(t *testing.T) {
	tb := mustBuild(t, NewPool(), twoSpecs(), Options{Candidates: 1})
	e1 := tb.Engine(1).State
	e1.SetPenalty(0.25)
	const n = 2000
	stayed := 0
	for k := uint64(0); k < n; k++ {
		key := hashkey.Mix(k + 0x9e37)
		tb.remember(&Request{Key: key, NowMs: 1}, e1)
		if id, _, _ := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1}); id == "e1" {
			stayed++
		}
	}
	if got := float64(stayed) / n; math.Abs(got-0.75) > 0.05 {
		t.Fatalf("%.3f of the keys stayed on their last engine under penalty 0.25, want 0.75", got)
	}
}

// TestPrefixCreditIsHeldBlocksTimesBlockTokens: an engine holding a
// prompt's first k blocks is credited k·BlockTokens tokens, whatever k
// and the block size (one block; blocks of one token), and a block size
// of 0 or less credits nothing: the whole prompt, never more, is queued.
func TestPrefixCreditIsHeldBlocksTimesBlockTokens(t *testing.T) {
	for _, tc := range []struct {
		name        string
		blocks      int
		blockTokens int
		prompt      int
		uncached    int64
	}{
		{"one block", 1, 64, 100, 36},
		{"blocks of one token", 4, 1, 10, 6},
		{"blocks of 64 tokens", 100, 64, 6464, 64},
		{"block size 0", 100, 0, 6464, 6464},
		{"negative block size", 100, -64, 6464, 6464},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := mustBuild(t, NewPool(), specs(1, func(int) float64 { return 1 }), Options{})
			chain := prefixChain(tc.blocks)
			holdPrefix(tb, 0, chain)
			_, _, tk := pickOnce(t, tb, Request{Key: 7, PromptTokens: tc.prompt, Blocks: chain, BlockTokens: tc.blockTokens, NowMs: 1})
			if tk.Uncached != tc.uncached {
				t.Fatalf("%d tokens uncached, want %d", tk.Uncached, tc.uncached)
			}
		})
	}
}

// TestPrefixSentAfterForgetIsCredited: Forget drops what was sent to
// the engine before it (in the same second too: the memory's stamps are
// whole seconds), but a prefix sent in any later second, the next one or
// hours later, is credited.
func TestPrefixSentAfterForgetIsCredited(t *testing.T) {
	const forgetMs = 2_000
	for _, tc := range []struct {
		name     string
		sentMs   int64
		uncached int64
	}{
		{"before the Forget", 1_000, 6464},
		{"in the Forget's second", 2_900, 6464},
		{"the next second", 3_000, 64},
		{"5 hours later", forgetMs + 5*3600_000, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := mustBuild(t, NewPool(), specs(1, func(int) float64 { return 1 }), Options{})
			chain := prefixChain(100)
			st := tb.Engine(0).State
			if tc.sentMs < forgetMs {
				tb.remember(&Request{Key: 1, Blocks: chain, BlockTokens: 64, NowMs: tc.sentMs}, st)
				st.Forget(forgetMs)
			} else {
				st.Forget(forgetMs)
				tb.remember(&Request{Key: 1, Blocks: chain, BlockTokens: 64, NowMs: tc.sentMs}, st)
			}
			r := Request{Key: 7, PromptTokens: 6464, Blocks: chain, BlockTokens: 64, NowMs: max(tc.sentMs, forgetMs)}
			if _, _, tk := pickOnce(t, tb, r); tk.Uncached != tc.uncached {
				t.Fatalf("%d tokens uncached, want %d", tk.Uncached, tc.uncached)
			}
		})
	}
}

// TestPrefixBlockDisplacedByACollisionIsStillCredited: a block's bucket
// keeps two ways, so a block of another prompt that hashes to the same
// bucket moves the prefix's entry to the older way instead of evicting
// it: the engine is still credited with that block and the deeper ones.
func TestPrefixBlockDisplacedByACollisionIsStillCredited(t *testing.T) {
	tb := mustBuild(t, NewPool(), specs(1, func(int) float64 { return 1 }), Options{})
	chain := prefixChain(10)
	holdPrefix(tb, 0, chain)
	// A block of another prompt in the bucket of the prefix's 6th block.
	h := mix(chain[5])
	other := uint64(0)
	for n := uint64(1); other == 0; n++ {
		if b := hashkey.Mix(n << 32); mix(b)&tb.mem.bmask == h&tb.mem.bmask && mix(b)>>(64-tagBits) != h>>(64-tagBits) {
			other = b
		}
	}
	tb.remember(&Request{Key: 2, Blocks: []uint64{other}, BlockTokens: 64, NowMs: 1}, tb.Engine(0).State)
	if e0, e1, _, _ := tb.mem.holders(chain[5], stampOf(1)); e0 != 0 || e1 != 1 {
		t.Fatalf("the 6th block's holders %d, %d; want 0 (displaced), 1 (the older way)", e0, e1)
	}
	_, _, tk := pickOnce(t, tb, Request{Key: 7, PromptTokens: 676, Blocks: chain, BlockTokens: 64, NowMs: 1})
	if tk.Uncached != 36 {
		t.Fatalf("%d tokens uncached, want 36 (all 10 blocks credited)", tk.Uncached)
	}
}

// TestAffinityBoundIsTheShareTimesOnePlusAffinitySlack: the key's last
// engine stays its candidate while its next request is within
// share·(total+1)·(1+AffinitySlack) + Floor, the affinity bound, and
// not beyond; an engine of one batch slot with it taken is held to
// Slack's bound, as any engine at its batch limit. Two equal engines,
// Floor 0.5, 3 in flight on e1.
func TestAffinityBoundIsTheShareTimesOnePlusAffinitySlack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		slots     int
		on0, on1  int
		wantStays bool
	}{
		// 10 on e0: the next is its 11th = 0.5·14·1.5 + 0.5.
		{"at the affinity bound", 0, 10, 3, true},
		// 11 on e0: its 12th > 0.5·15·1.5 + 0.5 = 11.75.
		{"past the affinity bound", 0, 11, 3, false},
		// One slot, taken: its 2nd > 0.5·2·1.25 + 0.5 = 1.75 (the
		// affinity bound would be 2).
		{"one slot, taken", 1, 1, 0, false},
		{"one slot, free", 1, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := twoSpecs()
			for i := range sp {
				sp[i].MaxConcurrency = tc.slots
			}
			tb := mustBuild(t, NewPool(), sp, Options{Floor: 0.5})
			key := uint64(42)
			tb.remember(&Request{Key: key, NowMs: 1}, tb.Engine(0).State)
			for range tc.on0 {
				tb.Engine(0).State.tryAcquire()
			}
			for range tc.on1 {
				tb.Engine(1).State.tryAcquire()
			}
			id, _, _ := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 2})
			if stays := id == "e0"; stays != tc.wantStays {
				t.Fatalf("went to %s; want it on its last engine e0: %v", id, tc.wantStays)
			}
		})
	}
}

// TestAdapterHomeOnlyForAnAdapterModel: AdapterHome says a model is an
// adapter only on an engine that holds adapters and only for a model
// that is not its base (nor 0, no model); before PlaceAdapters placed
// the engine, an adapter is at home where it is running.
func TestAdapterHomeOnlyForAnAdapterModel(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, twoSpecs(), Options{})
	const base, running, other = 0xba5e, 0xada1, 0xada2
	plain, lora := tb.Engine(0).State, tb.Engine(1).State
	p.SetAdapters(lora, base, []uint64{running}, 4, 1)
	for _, tc := range []struct {
		name            string
		s               *State
		h               uint64
		adapter, atHome bool
	}{
		{"an engine without adapters", plain, running, false, false},
		{"no model", lora, 0, false, false},
		{"the base model", lora, base, false, false},
		{"an adapter running there", lora, running, true, true},
		{"an adapter not running there", lora, other, true, false},
	} {
		if adapter, home := tc.s.AdapterHome(tc.h); adapter != tc.adapter || home != tc.atHome {
			t.Errorf("%s: adapter %v, home %v; want %v, %v", tc.name, adapter, home, tc.adapter, tc.atHome)
		}
	}
}

// TestTBOTModelKeepsItsEnvelopeUntilStale: whatever the clock reads, the
// decode model follows an engine's fast samples and only slowly its
// loaded ones while samples keep coming (30 s apart at most), and
// restarts from the next sample once none came for more than 30 s.
func TestTBOTModelKeepsItsEnvelopeUntilStale(t *testing.T) {
	var m model
	const at = 3_600_000 // an hour into the clock
	for k := range 20 {
		m.observeTBOT(20, at+int64(k)*1000)
	}
	for k := range 20 {
		m.observeTBOT(200, at+20_000+int64(k)*1000) // a burst of load
	}
	if x := m.params(at + 40_000); !x.knownD || x.d > 60 {
		t.Fatalf("20 loaded samples moved TBOT to %v ms (known %v); want it near the engine's 20 ms", x.d, x.knownD)
	}
	// A sample 30 s after the last, when the model is still current,
	// goes on from it.
	edge := int64(at + 39_000 + 30_000)
	if m.observeTBOT(200, edge); m.params(edge).d > 60 {
		t.Fatalf("a sample 30 s after the last restarted TBOT at %v ms; want it near 20", m.params(edge).d)
	}
	late := edge + 30_001
	if m.params(late).knownD {
		t.Fatal("TBOT model used with no sample for 30 s")
	}
	m.observeTBOT(200, late)
	if x := m.params(late); !x.knownD || x.d != 200 {
		t.Fatalf("after 30 s without a sample, TBOT %v ms (known %v); want the new sample's 200", x.d, x.knownD)
	}
}

// TestAdapterOfAnyModelHashIsACandidateWhereLoaded: Request.Model is any
// hash but 0 (no model): an adapter whose hash is 1 running on e1 makes
// e1 a candidate of its requests, which go there rather than load it on
// the walk's e0 (150 ms).
func TestAdapterOfAnyModelHashIsACandidateWhereLoaded(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, twoSpecs(), Options{Candidates: 1})
	const base, model = 0xba5e, 1
	p.SetAdapters(tb.Engine(0).State, base, nil, 2, 1)
	p.SetAdapters(tb.Engine(1).State, base, []uint64{model}, 2, 1)
	key := keyWithCandidates(t, tb, 0)
	if id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, Model: model, NowMs: 1}); id != "e1" {
		t.Fatalf("adapter %d went to %s (score %v), want e1 where it runs", model, id, tk.Score)
	}
}

// TestRefusedAcquireLeavesInFlight: an engine takes requests up to its
// hard limit (an adapter's home up to twice it); one refused there (a
// concurrent pick took the last place) leaves its in-flight count, and
// the table's, as they were.
func TestRefusedAcquireLeavesInFlight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		acquire func(s *State) bool
		max     int
	}{
		{"up to the limit", (*State).tryAcquire, 2},
		{"beyond the limit", (*State).tryAcquireBeyond, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := mustBuild(t, NewPool(), twoSpecs(), Options{})
			s := tb.Engine(0).State
			s.SetLimit(2)
			for k := range tc.max + 2 {
				if ok, want := tc.acquire(s), k < tc.max; ok != want {
					t.Fatalf("acquire %d with limit 2: %v, want %v", k+1, ok, want)
				}
			}
			if s.InFlight() != int64(tc.max) || tb.total.Load() != int64(tc.max) {
				t.Fatalf("in flight %d (table total %d) after refused acquires, want %d", s.InFlight(), tb.total.Load(), tc.max)
			}
		})
	}
}

// TestLeastLoadedPickWithEveryEngineExcludedPlacesNothing: a
// least-loaded table (no snapshot yet) returns -1 when every engine is
// excluded, as a weighted one does.
func TestLeastLoadedPickWithEveryEngineExcludedPlacesNothing(t *testing.T) {
	for _, ll := range []bool{true, false} {
		tb := mustBuild(t, NewPool(), twoSpecs(), Options{LeastLoaded: ll})
		if i, why := tb.Pick(1, []int32{0, 1}); i != -1 || why != None {
			t.Errorf("least loaded %v: every engine excluded, picked %d (%v), want -1 (none)", ll, i, why)
		}
	}
}

// TestBlockMemoryHoldsHalfItsBucketsInBlocks: the block memory has 2^18
// buckets of two ways: with 2^17 blocks remembered (one per two
// buckets), a block is lost only where three or more share a bucket,
// about 3% of them (Poisson, mean 1/2); at least 95% are still found.
func TestBlockMemoryHoldsHalfItsBucketsInBlocks(t *testing.T) {
	m := newMemory(memoryKeyBits, memoryBlockBits, memoryTTLMs)
	const n = 1 << (memoryBlockBits - 1)
	now := stampOf(1)
	for k := range uint64(n) {
		m.rememberBlock(hashkey.Mix(k+0xb1), now, 1)
	}
	found := 0
	for k := range uint64(n) {
		if e0, e1, _, _ := m.holders(hashkey.Mix(k+0xb1), now); e0 == 1 || e1 == 1 {
			found++
		}
	}
	if got := float64(found) / n; got < 0.95 {
		t.Fatalf("%.3f of %d blocks still found, want at least 0.95", got, n)
	}
}

// TestStrictRuleFromTheSecondRequestAndAnyWaitOrLoad: the key's own
// engine, 0.5-10 ms slower than the other (within the tolerance), loses
// the key when it is strict: from its second request in flight past its
// share (the first never is), with a slot wait of any length (0.5 ms),
// or when it would load the request's adapter at any cost (0.5 ms).
func TestStrictRuleFromTheSecondRequestAndAnyWaitOrLoad(t *testing.T) {
	const ada = 0xada1
	for _, tc := range []struct {
		name     string
		inflight int // on each engine
		setup    func(tb *Table)
		model    uint64
		want     string
	}{
		{"the first request in flight", 0, func(tb *Table) {
			tb.Engine(0).State.SetForeignPrefill(200) // 10 ms
		}, 0, "e0"},
		// 1 in flight: e0's next is its 2nd > 0.5·2·1.25.
		{"the second request in flight", 0, func(tb *Table) {
			tb.Engine(0).State.SetForeignPrefill(200)
			tb.Engine(0).State.tryAcquire()
		}, 0, "e1"},
		// 4 batch slots, all taken: the next waits 2 ms (a request) / 4.
		{"a 0.5 ms slot wait", 4, func(tb *Table) {
			tb.engines[0].Slots = 4
			for range 20 {
				tb.Finished(0, Ticket{AtMs: 0}, true, 0, 2)
			}
		}, 0, "e1"},
		{"a 0.5 ms adapter load", 2, func(tb *Table) {
			tb.pool.SetAdapters(tb.Engine(0).State, 0xba5e, nil, 2, 1)
			tb.pool.SetAdapters(tb.Engine(1).State, 0xba5e, []uint64{ada}, 2, 1)
		}, ada, "e1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, key := termTable(t, twoSpecs(), Options{Floor: 100, AdapterColdMs: 0.5}, tc.inflight)
			tc.setup(tb)
			id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, Model: tc.model, NowMs: 1})
			if id != tc.want {
				t.Fatalf("went to %s (score %v), want %s", id, tk.Score, tc.want)
			}
		})
	}
}

// TestFirstTokenSampleWithNoWorkAheadCounts: a request with no prefill
// work ahead of it (its prompt cached, nothing queued) teaches the
// model its intercept, as does a TTFT of 0 or under a millisecond; a
// sample with negative, NaN or infinite work or time is ignored,
// whatever the other value.
func TestFirstTokenSampleWithNoWorkAheadCounts(t *testing.T) {
	var m model
	for range modelMinSamples {
		m.observeFirstToken(0, 40, 1000)
	}
	if x := m.params(1000); !x.known || x.a != 40 || x.p != 0 {
		t.Fatalf("after %d samples with no work ahead: a=%v p=%v known=%v, want 40, 0, true", modelMinSamples, x.a, x.p, x.known)
	}
	// Engine-side TTFTs of 0 and under a millisecond (the gateway's TTFT
	// less the round trip) count as well.
	for _, ttft := range []float64{0, 0.5} {
		var fast model
		for range modelMinSamples {
			fast.observeFirstToken(0, ttft, 1000)
		}
		if x := fast.params(1000); !x.known || x.a != ttft {
			t.Fatalf("after %d samples of TTFT %v ms: a=%v known=%v, want %v, true", modelMinSamples, ttft, x.a, x.known, ttft)
		}
	}
	for _, bad := range [][2]float64{{-1, 50}, {math.NaN(), 50}, {math.Inf(1), 50}, {100, -1}, {100, math.NaN()}, {100, math.Inf(1)}} {
		m.observeFirstToken(bad[0], bad[1], 1000)
		if x := m.params(1000); x.a != 40 || x.p != 0 {
			t.Fatalf("after a sample of work %v, TTFT %v: a=%v p=%v, want 40, 0 (the sample ignored)", bad[0], bad[1], x.a, x.p)
		}
	}
}
