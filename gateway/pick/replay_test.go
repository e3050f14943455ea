package pick

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// replayChunk is how many picks each summary line of the golden file
// totals, and replayDetail how often a pick is written out in full.
const (
	replayChunk  = 2000
	replayDetail = 200
)

// replayCase is one deterministic sequence of PickRequest calls.
type replayCase struct {
	name    string
	engines int
	opt     Options
	steps   int
	hold    int // outstanding requests kept at most
}

// replay runs c and returns its decision table: every replayDetail-th
// pick in full (the request, each candidate's score terms, the choice)
// and one summary line per chunk of picks (the count of each reason, the
// mean uncached tokens and the mean score of the tickets).
func replay(c replayCase) []string {
	r := rand.New(rand.NewPCG(uint64(len(c.name)), 42))
	p := NewPool()
	sp := make([]Spec, c.engines)
	for i := range sp {
		sp[i] = Spec{ID: fmt.Sprintf("e%d", i), Weight: r.Float64() + 0.01, RTTms: float64(r.IntN(4)) * 10}
		if r.IntN(3) == 0 {
			sp[i].MaxConcurrency = 2 + r.IntN(6)
		}
	}
	tb, err := p.Build(sp, c.opt)
	if err != nil {
		panic(err)
	}
	// Per-engine truth the simulated responses follow.
	speed := make([]float64, c.engines)
	for i := range speed {
		speed[i] = 0.02 + 0.1*r.Float64()
	}
	type out struct {
		i     int
		tk    Ticket
		first bool
	}
	var held []out
	now := int64(1_000)
	var lines []string
	var reasons [8]int
	var sumUncached, sumScore float64
	convs := 300
	finish := func(k int) {
		o := held[k]
		held[k] = held[len(held)-1]
		held = held[:len(held)-1]
		tb2 := tb
		if !o.first && r.IntN(4) != 0 {
			ttft := 5 + speed[o.i%c.engines]*o.tk.Work + float64(r.IntN(20))
			tb2.FirstToken(o.i, o.tk, ttft)
			o.first = true
		}
		tbot := 0.0
		if r.IntN(3) != 0 {
			tbot = 10 + float64(r.IntN(40))
		}
		tb2.Finished(o.i, o.tk, o.first, tbot, float64(100+r.IntN(2000)))
		tb2.Done(o.i)
	}
	for step := range c.steps {
		// Time: mostly small steps, sometimes past the models' staleness.
		switch x := r.IntN(1000); {
		case x < 3:
			now += 31_000 + int64(r.IntN(10_000))
		case x < 10:
			now += 2_000
		default:
			now += int64(r.IntN(40))
		}
		// Guardrails.
		switch x := r.IntN(400); x {
		case 0, 1:
			tb.Engine(r.IntN(tb.Len())).State.SetPenalty(r.Float64() * 0.8)
		case 2:
			tb.Engine(r.IntN(tb.Len())).State.SetPenalty(0)
		case 3:
			tb.Engine(r.IntN(tb.Len())).State.SetEjected(r.IntN(2) == 0)
		case 4:
			tb.Engine(r.IntN(tb.Len())).State.SetDown(r.IntN(2) == 0)
		case 5:
			tb.Engine(r.IntN(tb.Len())).State.SetSignalDown(r.IntN(2) == 0)
		case 6:
			tb.Engine(r.IntN(tb.Len())).State.SetLimit(int64(r.IntN(5) * 3))
		case 7:
			tb.Engine(r.IntN(tb.Len())).State.Forget(now)
		case 9, 10, 11:
			// Recoveries, so the guardrails do not accumulate for good.
			s := tb.Engine(r.IntN(tb.Len())).State
			s.SetEjected(false)
			s.SetDown(false)
			s.SetSignalDown(false)
			s.SetLimit(0)
		case 8:
			// A new snapshot over the same pool: weights move, an engine
			// may drop out (weight 0).
			for i := range sp {
				sp[i].Weight = r.Float64() + 0.01
				if r.IntN(10) == 0 {
					sp[i].Weight = 0
				}
			}
			if t2, err := p.Build(sp, c.opt); err == nil {
				// Outstanding requests index the old table: end them there.
				for len(held) > 0 {
					finish(len(held) - 1)
				}
				tb = t2
			}
		}
		// Completions.
		for len(held) > 0 && (len(held) >= c.hold || r.IntN(3) == 0) {
			finish(r.IntN(len(held)))
		}
		// The request.
		conv := r.IntN(convs)
		req := Request{Key: hashkey.String(fmt.Sprint("conversation-", conv)), NowMs: now}
		if r.IntN(10) != 0 {
			req.BlockTokens = 16
			nb := 1 + r.IntN(40)
			req.PromptTokens = nb*16 - r.IntN(16)
			req.Blocks = make([]uint64, nb)
			shared := r.IntN(3) // a shared system prompt of 0-2 blocks
			for b := range req.Blocks {
				if b < shared {
					req.Blocks[b] = mix(uint64(b) + 7)
				} else {
					req.Blocks[b] = mix(req.Key ^ uint64(b)*0x9e3779b97f4a7c15)
				}
			}
		} else {
			req.PromptTokens = r.IntN(3000) - 10
		}
		var ex []int32
		if r.IntN(8) == 0 {
			ex = []int32{int32(r.IntN(tb.Len()))}
			if r.IntN(2) == 0 {
				ex = append(ex, int32(r.IntN(tb.Len())))
			}
		}
		var cands []string
		if step%replayDetail == 0 && !c.opt.LeastLoaded {
			cands = candidateTerms(tb, &req, ex)
		}
		i, why, tk := tb.PickRequest(&req, ex)
		if step%replayDetail == 0 {
			chosen := "none"
			if i >= 0 {
				chosen = tb.Engine(i).ID
			}
			lines = append(lines, fmt.Sprintf("%s #%d conv %d prompt %d tokens %d blocks exclude %v at %d ms -> %s %v uncached %d work %.0f score %.1f",
				c.name, step, conv, req.PromptTokens, len(req.Blocks), ex, now, chosen, why, tk.Uncached, tk.Work, tk.Score))
			lines = append(lines, cands...)
		}
		reasons[why]++
		sumUncached += float64(tk.Uncached)
		sumScore += tk.Score
		if i >= 0 {
			held = append(held, out{i: i, tk: tk})
		}
		if (step+1)%replayChunk == 0 || step+1 == c.steps {
			n := float64(step%replayChunk + 1)
			lines = append(lines, fmt.Sprintf("%s picks %d-%d: affinity %d weighted %d overflow %d fallback %d panic %d none %d, mean uncached %.1f, mean score %.3f ms",
				c.name, step/replayChunk*replayChunk, step, reasons[Affinity], reasons[Weighted], reasons[Overflow], reasons[LeastLoaded], reasons[Panic], reasons[None],
				sumUncached/n, sumScore/n))
			reasons = [8]int{}
			sumUncached, sumScore = 0, 0
		}
	}
	return lines
}

// candidateTerms returns one line per candidate PickRequest would score
// for r, as it stands: the engine and its score's terms in ms (network
// round trip, intercept, queued prefill work, redo of another
// candidate's cache, decode of the lookahead tokens, slot wait), the
// score, and whether it is strict (wins only with the best score).
// collect and score only read the table.
func candidateTerms(tb *Table, r *Request, ex []int32) []string {
	var buf [maxCollected]scored
	c, _, _ := tb.collect(r, ex, buf[:0])
	if len(c) == 0 {
		return []string{"    (no candidate within its bounded load: overflow)"}
	}
	tb.score(r, c)
	prompt := int64(max(r.PromptTokens, 0))
	var held int64 // the most tokens a candidate holds, as score has it
	for _, x := range c {
		held = max(held, prompt-x.uncached)
	}
	out := make([]string, 0, len(c))
	for _, x := range c {
		e := tb.Engine(int(x.i))
		queue := x.m.p * x.work
		decode := x.m.d * float64(tb.opt.LookaheadTokens)
		var wait float64
		if e.Slots > 0 {
			wait = slotWait(e, e.State.model.params(r.NowMs).e2e)
		}
		redo := x.m.p * float64(held-(prompt-x.uncached))
		strict := ""
		if x.strict {
			strict = " strict"
		}
		out = append(out, fmt.Sprintf("    %-4s rtt %3.0f  a %6.1f  queue %7.1f  redo %7.1f  decode %6.1f  wait %6.1f  = %7.1f%s",
			e.ID, e.RTTms, x.m.a, queue, redo, decode, wait, x.score, strict))
	}
	return out
}

// TestPickRequestReplay replays long deterministic sequences of
// PickRequest calls (keys, prompts with shared and private prefix blocks,
// requests in flight and completing with first tokens, TBOT and request
// times, penalties, ejections, limits, Forget, models going stale, table
// swaps, exclusions) and compares their decision table with
// testdata/replay.golden: every 200th pick with its candidates' score
// terms and the choice, and per 2,000 picks the count of each reason and
// the tickets' mean uncached tokens and score. An optimisation must leave
// it unchanged; a change of behaviour shows in its diff, which a
// reviewer reads. -update rewrites it.
func TestPickRequestReplay(t *testing.T) {
	cases := []replayCase{
		{name: "fleet-64", engines: 64, steps: 30_000, hold: 120},
		{name: "small-3-overloaded", engines: 3, steps: 10_000, hold: 40},
		{name: "wide-4-candidates", engines: 16, opt: Options{Candidates: 4, MaxProbes: 6, Floor: 0.5}, steps: 10_000, hold: 30},
		{name: "least-loaded", engines: 8, opt: Options{LeastLoaded: true}, steps: 4_000, hold: 30},
	}
	var got []string
	for _, c := range cases {
		got = append(got, replay(c)...)
	}
	path := filepath.Join("testdata", "replay.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(want) != len(got) {
		t.Fatalf("%d lines, golden has %d (go test ./gateway/pick/ -run TestPickRequestReplay -update rewrites it)", len(got), len(want))
	}
	bad := 0
	for k := range want {
		if got[k] != want[k] {
			if bad++; bad <= 20 {
				t.Errorf("line %d differs:\n got  %s\n want %s", k+1, got[k], want[k])
			}
		}
	}
	if bad > 20 {
		t.Errorf("%d lines differ in all (go test ./gateway/pick/ -run TestPickRequestReplay -update rewrites the table; read its diff)", bad)
	}
}
