package pick

import (
	"fmt"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// The tests of this file hold PickRequest's score to each of its terms
// and rules (score.go): every one sets up two engines whose scores differ
// only by the term under test, once so that the difference decides the
// pick and once, as a control, so that it does not. Each fails when its
// term is dropped from the score or its rule from chooseBest.

// Every test's engines learn TTFT = termA + termP·(tokens queued ahead),
// so a candidate's score is RTT + termA + termP·(work + redo) + TBOT·8 +
// slot wait.
const (
	termA = 30.0
	termP = 0.05
)

// termTable builds a table over sp with both engines' TTFT models learned
// and inflight requests in flight on each, and returns it with a key whose
// candidates are e0 then e1 (e0 is the key's own slot: the plan's first
// choice, which the tolerance keeps). With 2 in flight on each of two
// equal engines, neither is past its share (3 <= 0.5·5·1.25), so neither
// is strict; with none, both are (1 > 0.5·1·1.25).
func termTable(t *testing.T, sp []Spec, opt Options, inflight int) (*Table, uint64) {
	t.Helper()
	tb := mustBuild(t, NewPool(), sp, opt)
	for i := range tb.Len() {
		teach(tb, i, 20, termA, termP, 0)
		for range inflight {
			tb.Engine(i).State.tryAcquire()
		}
	}
	return tb, keyWithCandidates(t, tb, 0, 1)
}

// keyWithCandidates returns a key whose PickRequest candidates, with the
// table as it is, are exactly the engines ids, in that order.
func keyWithCandidates(t *testing.T, tb *Table, ids ...int32) uint64 {
	t.Helper()
	for k := uint64(1); k < 100_000; k++ {
		key := hashkey.Mix(k)
		var buf [maxCollected]scored
		c, _, _ := tb.collect(&Request{Key: key, NowMs: 1}, nil, buf[:0])
		got := make([]int32, len(c))
		for j := range c {
			got[j] = c[j].i
		}
		if fmt.Sprint(got) == fmt.Sprint(ids) {
			return key
		}
	}
	t.Fatalf("no key has candidates %v", ids)
	return 0
}

// pickOnce places r and ends it at once, so the table is unchanged.
func pickOnce(t *testing.T, tb *Table, r Request) (string, Reason, Ticket) {
	t.Helper()
	i, why, tk := tb.PickRequest(&r, nil)
	if i < 0 {
		t.Fatalf("no engine (%v)", why)
	}
	tb.Finished(i, tk, false, 0, 0)
	tb.Done(i)
	return tb.Engine(i).ID, why, tk
}

func twoSpecs() []Spec { return specs(2, func(int) float64 { return 1 }) }

// TestScoreCountsNetworkRTT: a key's own engine 200 ms away loses it to
// a near one (score 235 against 35 ms); 20 ms away, within the tolerance,
// it keeps it.
func TestScoreCountsNetworkRTT(t *testing.T) {
	for _, tc := range []struct {
		rtt  float64
		want string
	}{{200, "e1"}, {20, "e0"}} {
		sp := twoSpecs()
		sp[0].RTTms = tc.rtt
		tb, key := termTable(t, sp, Options{}, 2)
		if id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1}); id != tc.want {
			t.Errorf("e0 at %v ms: key went to %s (score %.1f), want %s", tc.rtt, id, tk.Score, tc.want)
		}
	}
}

// TestScoreCountsOtherGatewaysQueue: prefill other gateways report
// queued on the key's own engine (SetForeignPrefill) counts as this
// gateway's own does: 4,000 tokens (200 ms) move the key, 400 (20 ms) do
// not.
func TestScoreCountsOtherGatewaysQueue(t *testing.T) {
	for _, tc := range []struct {
		foreign int64
		want    string
	}{{4000, "e1"}, {400, "e0"}} {
		tb, key := termTable(t, twoSpecs(), Options{}, 2)
		tb.Engine(0).State.SetForeignPrefill(tc.foreign)
		id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1})
		if id != tc.want {
			t.Errorf("%d foreign tokens on e0: key went to %s, want %s", tc.foreign, id, tc.want)
		}
		if want := float64(100); tc.want == "e1" && tk.Work != want {
			t.Errorf("work ahead on e1 %v, want %v (its own prompt only)", tk.Work, want)
		}
	}
}

// TestScoreCountsDecodeSpeed: the score waits for the first 8 tokens, so
// an engine decoding at 100 ms a token (800 ms) loses the key to one at
// 10 ms (80 ms); at 12 ms (96 ms), within the tolerance, it keeps it.
func TestScoreCountsDecodeSpeed(t *testing.T) {
	for _, tc := range []struct {
		tbot float64
		want string
	}{{100, "e1"}, {12, "e0"}} {
		tb, key := termTable(t, twoSpecs(), Options{}, 2)
		tb.Finished(0, Ticket{AtMs: 0}, true, tc.tbot, 0)
		tb.Finished(1, Ticket{AtMs: 0}, true, 10, 0)
		if id, _, _ := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1}); id != tc.want {
			t.Errorf("e0 decoding at %v ms/token: key went to %s, want %s", tc.tbot, id, tc.want)
		}
	}
}

// holdPrefix records that engine i was sent the n blocks of chain (as a
// request of another key would have been).
func holdPrefix(tb *Table, i int, chain []uint64) {
	tb.remember(&Request{Key: hashkey.Mix(0xb10c), Blocks: chain, BlockTokens: 64, NowMs: 1}, tb.Engine(i).State)
}

func prefixChain(n int) []uint64 {
	c := make([]uint64, n)
	for k := range c {
		c[k] = hashkey.Mix(uint64(k) + 0xc4a1)
	}
	return c
}

// TestScoreCreditsCachedPrefix: an engine that was sent a prompt's first
// 100 blocks (6,400 tokens) is credited with them: the key leaves its own
// engine for it (score 30 ms against 670), and the ticket counts only
// the 64 new tokens as queued prefill. With the prefix on the key's own
// engine the key stays, with the same credit.
func TestScoreCreditsCachedPrefix(t *testing.T) {
	chain := prefixChain(100)
	r := Request{PromptTokens: 6464, Blocks: chain, BlockTokens: 64, NowMs: 1}
	for _, holder := range []int{1, 0} {
		tb, key := termTable(t, twoSpecs(), Options{}, 2)
		holdPrefix(tb, holder, chain)
		r.Key = key
		id, _, tk := pickOnce(t, tb, r)
		if want := fmt.Sprint("e", holder); id != want || tk.Uncached != 64 || tk.Work != 64 {
			t.Errorf("prefix on e%d: key went to %s with %d tokens uncached and work %v, want %s with 64 and 64",
				holder, id, tk.Uncached, tk.Work, want)
		}
	}
}

// TestScoreCountsRedoOfAnotherCandidatesCache: moving a request away
// from the engine holding its prefix costs the fleet a second prefill of
// it, so a candidate without the prefix is charged it twice. e1 holds
// the prompt's 2,000 tokens but has 2,000 tokens queued; e0 holds
// nothing: both would start the request after 2,000 tokens (130 ms), and
// only the redo (another 100 ms) moves the key to e1. Without the
// prefix anywhere the key stays on e0.
func TestScoreCountsRedoOfAnotherCandidatesCache(t *testing.T) {
	chain := prefixChain(32) // 2,048 tokens
	for _, tc := range []struct {
		held bool
		want string
	}{{true, "e1"}, {false, "e0"}} {
		tb, key := termTable(t, twoSpecs(), Options{}, 2)
		tb.Engine(1).State.SetForeignPrefill(2048)
		if tc.held {
			holdPrefix(tb, 1, chain)
		}
		id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 2048, Blocks: chain, BlockTokens: 64, NowMs: 1})
		if id != tc.want {
			t.Errorf("prefix held on e1: %v: key went to %s (score %.1f), want %s", tc.held, id, tk.Score, tc.want)
		}
	}
}

// TestScoreToleranceKeepsPlanOrder: the key's own engine keeps it while
// its score is within ScoreSlack·best + ScoreSlackMs (20% + 30 ms) of
// the best candidate's, and loses it beyond: both parts of the tolerance
// count, the relative one on slow scores and the absolute one on fast.
func TestScoreToleranceKeepsPlanOrder(t *testing.T) {
	for _, tc := range []struct {
		name         string
		queue0       int64 // tokens queued on e0 (the key's own engine)
		queue1       int64
		want         string
		best, scoreE float64 // expected scores of e1 and e0, ms
	}{
		// e1 35 ms, e0 60: within 35·1.2 + 30 = 72.
		{"within the absolute part", 500, 0, "e0", 35, 60},
		// e1 35 ms, e0 80: beyond 72.
		{"beyond the absolute part", 900, 0, "e1", 35, 80},
		// e1 1,035 ms, e0 1,235: within 1,035·1.2 + 30 = 1,272.
		{"within the relative part", 24000, 20000, "e0", 1035, 1235},
		// e1 1,035 ms, e0 1,285: beyond 1,272.
		{"beyond the relative part", 25000, 20000, "e1", 1035, 1285},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, key := termTable(t, twoSpecs(), Options{}, 2)
			tb.Engine(0).State.SetForeignPrefill(tc.queue0)
			tb.Engine(1).State.SetForeignPrefill(tc.queue1)
			id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1})
			want := tc.scoreE
			if tc.want == "e1" {
				want = tc.best
			}
			if id != tc.want || tk.Score != want {
				t.Fatalf("went to %s with score %v, want %s with %v", id, tk.Score, tc.want, want)
			}
		})
	}
}

// TestStrictRuleOverShare: a candidate with more than its share·(1+Slack)
// of this gateway's requests in flight gets no tolerance: the key's own
// engine, 10 ms slower than the other, keeps it at its share and loses it
// one request past it.
func TestStrictRuleOverShare(t *testing.T) {
	for _, tc := range []struct {
		on0, on1 int // in flight on e0, e1
		want     string
	}{
		// 10 in flight: e0's next is its 7th > 0.5·11·1.25 = 6.875 (and
		// within the bounded load's 6.875 + Floor 2).
		{6, 4, "e1"},
		// 7 in flight: e0's next is its 5th = 0.5·8·1.25, its share
		// exactly: not past it.
		{4, 3, "e0"},
	} {
		tb, key := termTable(t, twoSpecs(), Options{}, 0)
		for range tc.on0 {
			tb.Engine(0).State.tryAcquire()
		}
		for range tc.on1 {
			tb.Engine(1).State.tryAcquire()
		}
		tb.Engine(0).State.SetForeignPrefill(200) // 10 ms
		if id, _, _ := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1}); id != tc.want {
			t.Errorf("%d and %d in flight: key went to %s, want %s", tc.on0, tc.on1, id, tc.want)
		}
	}
}

// TestStrictRuleSlotWait: a candidate whose batch limit this gateway
// fills gets no tolerance, even when its slot wait is small: with 4 of
// its 4 slots taken (a wait of 40 ms / 4 = 10 ms) the key's own engine
// loses the key; with 3 taken (no wait) it keeps it.
func TestStrictRuleSlotWait(t *testing.T) {
	for _, tc := range []struct {
		inflight int
		want     string
	}{{4, "e1"}, {3, "e0"}} {
		sp := twoSpecs()
		sp[0].MaxConcurrency = 4
		tb, key := termTable(t, sp, Options{Floor: 100}, 0)
		for i := range 2 {
			for range 20 {
				tb.Finished(i, Ticket{AtMs: 0}, true, 0, 40) // 40 ms a request
			}
		}
		for range tc.inflight { // as many on each: neither over its share
			tb.Engine(0).State.tryAcquire()
			tb.Engine(1).State.tryAcquire()
		}
		id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1})
		if id != tc.want {
			t.Errorf("%d of e0's 4 slots taken: key went to %s (score %.1f), want %s", tc.inflight, id, tk.Score, tc.want)
		}
	}
}

// TestHardLimitNeverExceeded: the walk skips an engine at its hard
// limit, so the key's next engine serves it (Weighted, not a fallback),
// and PickRequest never puts more than the limit in flight there; with
// every engine at its limit it places nothing.
func TestHardLimitNeverExceeded(t *testing.T) {
	tb := mustBuild(t, NewPool(), twoSpecs(), Options{Candidates: 1, Floor: 100})
	key := keyWithCandidates(t, tb, 0)
	e0, e1 := tb.Engine(0).State, tb.Engine(1).State
	e0.SetLimit(2)
	e1.SetLimit(3)
	var got []string
	for range 6 {
		i, why, _ := tb.PickRequest(&Request{Key: key, PromptTokens: 100, NowMs: 1}, nil)
		if i < 0 {
			got = append(got, "none")
			continue
		}
		got = append(got, fmt.Sprintf("%s/%v", tb.Engine(i).ID, why))
		if e0.InFlight() > 2 || e1.InFlight() > 3 {
			t.Fatalf("in flight %d and %d past limits 2 and 3", e0.InFlight(), e1.InFlight())
		}
	}
	// e1 serves the key once e0 is full, and is its last engine after.
	want := "[e0/affinity e0/affinity e1/weighted e1/affinity e1/affinity none]"
	if fmt.Sprint(got) != want {
		t.Fatalf("picks %v, want %s", got, want)
	}
}

// TestSlotWaitIsRequestTimeOverSlots: a request sent to an engine whose
// 16 batch slots this gateway fills waits a mean request time (2 s)
// over 16 slots, 125 ms, for each request in flight from the 16th on:
// the 16th does not wait, the 17th waits 125 ms (score 160), more than
// an engine 100 ms away (135) but less than one 200 ms away (235); the
// 19th waits 375 ms (410).
func TestSlotWaitIsRequestTimeOverSlots(t *testing.T) {
	for _, tc := range []struct {
		rtt      float64 // of e1
		inflight int     // on e0 before the request
		want     string
	}{
		{100, 15, "e0"},
		{100, 16, "e1"},
		{200, 16, "e0"},
		{200, 18, "e1"},
	} {
		sp := twoSpecs()
		sp[0].MaxConcurrency = 16
		sp[1].RTTms = tc.rtt
		tb := mustBuild(t, NewPool(), sp, Options{Floor: 1000}) // only the score decides
		for i := range 2 {
			teach(tb, i, 20, termA, termP, 0)
			for range 20 {
				tb.Finished(i, Ticket{AtMs: 0}, true, 0, 2000)
			}
		}
		for range tc.inflight {
			tb.Engine(0).State.tryAcquire()
		}
		key := keyWithCandidates(t, tb, 0, 1)
		if id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 100, NowMs: 1}); id != tc.want {
			t.Errorf("%d of e0's 16 slots taken, e1 %v ms away: key went to %s (score %.1f), want %s",
				tc.inflight, tc.rtt, id, tk.Score, tc.want)
		}
	}
}

// TestPrefixCreditsOlderHolder: the memory keeps a block's two newest
// holders, and both are credited: a prompt's prefix sent to e1 and then
// to e0 still counts as cached on e1, which serves the follow-up with
// only its new tokens uncached when e0 is busy; unless e1 was forgotten
// since (it came back with a cold cache).
func TestPrefixCreditsOlderHolder(t *testing.T) {
	chain := prefixChain(100)
	for _, forgot := range []bool{false, true} {
		tb, key := termTable(t, twoSpecs(), Options{}, 2)
		holdPrefix(tb, 1, chain)
		holdPrefix(tb, 0, chain) // e0 the newest holder, e1 the older
		if forgot {
			tb.Engine(1).State.Forget(1)
		}
		tb.Engine(0).State.SetForeignPrefill(20000)
		id, _, tk := pickOnce(t, tb, Request{Key: key, PromptTokens: 6464, Blocks: chain, BlockTokens: 64, NowMs: 1})
		want := int64(64)
		if forgot {
			want = 6464
		}
		if id != "e1" || tk.Uncached != want {
			t.Errorf("e1 forgotten %v: went to %s with %d tokens uncached, want e1 with %d", forgot, id, tk.Uncached, want)
		}
	}
}

// TestPrefixCreditEndsWithResidencyAndForget: a prefix counts as cached
// on an engine only while it was sent there within the engine's cache
// residency, and not after the engine was forgotten (it came back with a
// cold cache).
func TestPrefixCreditEndsWithResidencyAndForget(t *testing.T) {
	chain := prefixChain(100)
	for _, tc := range []struct {
		name     string
		set      func(s *State)
		nowMs    int64
		uncached int64
	}{
		{"within the residency", func(s *State) { s.SetCacheResidency(10) }, 9_000, 64},
		{"at the residency", func(s *State) { s.SetCacheResidency(10) }, 10_500, 64},
		{"past the residency", func(s *State) { s.SetCacheResidency(10) }, 15_000, 6464},
		{"residency unknown: the memory's TTL", func(s *State) {}, 15_000, 64},
		{"forgotten", func(s *State) { s.Forget(2_000) }, 3_000, 6464},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := mustBuild(t, NewPool(), specs(1, func(int) float64 { return 1 }), Options{})
			holdPrefix(tb, 0, chain) // at 1 ms
			tc.set(tb.Engine(0).State)
			_, _, tk := pickOnce(t, tb, Request{Key: 7, PromptTokens: 6464, Blocks: chain, BlockTokens: 64, NowMs: tc.nowMs})
			if tk.Uncached != tc.uncached {
				t.Fatalf("%d tokens uncached, want %d", tk.Uncached, tc.uncached)
			}
		})
	}
}

// TestForgetLongAgoLeavesLaterPrefixesCredited: an engine forgotten once
// (it went down and came back) is credited with what it was sent later,
// however long after: the memory's 16-bit stamps wrap every 18.2 hours,
// and a Forget compared by its wrapped stamp made every entry of the
// second half of each wrap look older than it (no prefix credit, no key
// affinity for 9.1 hours of every 18.2).
func TestForgetLongAgoLeavesLaterPrefixesCredited(t *testing.T) {
	chain := prefixChain(100)
	for _, afterMs := range []int64{10 * 3600_000, 18*3600_000 + 1000_000, 30 * 3600_000} {
		t.Run(fmt.Sprintf("%dh", afterMs/3600_000), func(t *testing.T) {
			tb := mustBuild(t, NewPool(), specs(1, func(int) float64 { return 1 }), Options{})
			st := tb.Engine(0).State
			st.Forget(1_000)
			sent := 1_000 + afterMs
			tb.remember(&Request{Key: hashkey.Mix(0xb10c), Blocks: chain, BlockTokens: 64, NowMs: sent}, st)
			_, _, tk := pickOnce(t, tb, Request{Key: 7, PromptTokens: 6464, Blocks: chain, BlockTokens: 64, NowMs: sent + 5_000})
			if tk.Uncached != 64 {
				t.Fatalf("%d tokens uncached, want 64: the prefix sent %d h after the Forget is not credited", tk.Uncached, afterMs/3600_000)
			}
			if !st.fresh(stampOf(sent), sent+5_000) {
				t.Fatal("an entry made after the Forget reads as older than it")
			}
			if st.fresh(stampOf(900), 1_500) {
				t.Fatal("an entry made before the Forget reads as fresh")
			}
		})
	}
}
