package pick

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

func specs(n int, weight func(i int) float64) []Spec {
	out := make([]Spec, n)
	for i := range out {
		out[i] = Spec{ID: fmt.Sprintf("e%d", i), URL: fmt.Sprintf("http://e%d", i), Weight: weight(i)}
	}
	return out
}

func mustBuild(t testing.TB, p *Pool, s []Spec, opt Options) *Table {
	t.Helper()
	tb, err := p.Build(s, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// pickDone picks and immediately ends the request, so load stays zero.
func pickDone(tb *Table, key uint64, ex []int32) (int, Reason) {
	i, r := tb.Pick(key, ex)
	if i >= 0 {
		tb.Done(i)
	}
	return i, r
}

func TestBuildErrors(t *testing.T) {
	for name, s := range map[string][]Spec{
		"empty":     nil,
		"all zero":  {{ID: "a"}, {ID: "b"}},
		"negative":  {{ID: "a", Weight: -1}},
		"nan":       {{ID: "a", Weight: math.NaN()}},
		"inf":       {{ID: "a", Weight: math.Inf(1)}},
		"no id":     {{Weight: 1}},
		"duplicate": {{ID: "a", Weight: 1}, {ID: "a", Weight: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewPool().Build(s, Options{}); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

// TestWeightedShare: 200,000 random keys over 5 engines land in proportion
// to weight within 1 percentage point.
func TestWeightedShare(t *testing.T) {
	w := []float64{0.5, 0.25, 0.15, 0.1, 0}
	p := NewPool()
	tb := mustBuild(t, p, specs(len(w), func(i int) float64 { return w[i] }), Options{})
	if tb.Len() != 4 {
		t.Fatalf("zero-weight engine kept: %d engines", tb.Len())
	}
	const n = 200000
	count := map[string]int{}
	r := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < n; k++ {
		i, reason := pickDone(tb, r.Uint64(), nil)
		if reason != Affinity {
			t.Fatalf("reason %v at zero load", reason)
		}
		count[tb.Engine(i).ID]++
	}
	for i, want := range w {
		got := float64(count[fmt.Sprintf("e%d", i)]) / n
		if math.Abs(got-want) > 0.01 {
			t.Errorf("e%d share %.4f, want %.2f", i, got, want)
		}
	}
}

// TestAffinityAndMinimalDisruption: the same key picks the same engine;
// moving 10% of the weight between two of 20 engines moves at most ~2x
// the minimal share of 50,000 keys.
func TestAffinityAndMinimalDisruption(t *testing.T) {
	p := NewPool()
	before := specs(20, func(int) float64 { return 0.05 })
	after := specs(20, func(int) float64 { return 0.05 })
	after[0].Weight, after[1].Weight = 0.10, 0.0
	after[2].Weight, after[3].Weight = 0.07, 0.03
	t1 := mustBuild(t, p, before, Options{})
	t2 := mustBuild(t, p, after, Options{})
	const n = 50000
	moved := 0
	for k := uint64(0); k < n; k++ {
		key := hashkey.String(fmt.Sprint("session-", k))
		a, _ := pickDone(t1, key, nil)
		if b, _ := pickDone(t1, key, nil); a != b {
			t.Fatal("same key, different engine")
		}
		b, _ := pickDone(t2, key, nil)
		if t1.Engine(a).ID != t2.Engine(b).ID {
			moved++
		}
	}
	minimal := 0.07 // weight that had to move: 0.05 + 0.02
	if got := float64(moved) / n; got > 2*minimal || got < minimal*0.8 {
		t.Errorf("moved %.3f of keys, minimal %.3f", got, minimal)
	}
}

func TestExcludeEjectDownLimit(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(3, func(int) float64 { return 1 }), Options{})
	key := uint64(42)
	first, _ := pickDone(tb, key, nil)
	second, _ := pickDone(tb, key, []int32{int32(first)})
	if second == first || second < 0 {
		t.Fatalf("exclude ignored: %d then %d", first, second)
	}
	tb.Engine(first).State.SetEjected(true)
	if i, _ := pickDone(tb, key, nil); i == first {
		t.Fatal("picked an ejected engine")
	}
	tb.Engine(first).State.SetEjected(false)
	tb.Engine(first).State.SetDown(true)
	if i, _ := pickDone(tb, key, nil); i == first {
		t.Fatal("picked a down engine")
	}
	tb.Engine(first).State.SetDown(false)
	// Everything down: panic routing still serves.
	for i := 0; i < 3; i++ {
		tb.Engine(i).State.SetDown(true)
	}
	if i, r := pickDone(tb, key, nil); i < 0 || r != Panic {
		t.Fatalf("all down: got %d %v, want panic pick", i, r)
	}
	for i := 0; i < 3; i++ {
		tb.Engine(i).State.SetDown(false)
		tb.Engine(i).State.SetLimit(1)
	}
	var held []int
	for k := 0; k < 3; k++ {
		i, _ := tb.Pick(uint64(k), nil)
		if i < 0 {
			t.Fatalf("pick %d failed below limits", k)
		}
		held = append(held, i)
	}
	if i, _ := tb.Pick(7, nil); i >= 0 {
		t.Fatal("picked above every hard limit")
	}
	for _, i := range held {
		tb.Done(i)
	}
	if p.InFlight() != 0 {
		t.Fatalf("in flight %d after Done", p.InFlight())
	}
}

// TestBoundedLoad: one hot key cannot put more than its bounded share on
// one engine: with 4 equal engines and 100 concurrent requests of the same
// key, no engine holds more than share·total·1.25+2+1.
func TestBoundedLoad(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(4, func(int) float64 { return 1 }), Options{})
	per := map[int]int{}
	for k := 0; k < 100; k++ {
		i, _ := tb.Pick(7, nil)
		per[i]++
	}
	for i, c := range per {
		if c > 31+3 {
			t.Errorf("engine %d holds %d of 100", i, c)
		}
	}
	if len(per) != 4 {
		t.Errorf("spilled to %d engines, want 4", len(per))
	}
}

// TestPenalty: a penalty of 0.5 halves an engine's share of 100,000 keys
// (tolerance 2 points).
func TestPenalty(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(2, func(int) float64 { return 0.5 }), Options{})
	tb.Engine(0).State.SetPenalty(0.5)
	const n = 100000
	c := 0
	for k := uint64(0); k < n; k++ {
		if i, _ := pickDone(tb, mix(k), nil); i == 0 {
			c++
		}
	}
	if got := float64(c) / n; math.Abs(got-0.25) > 0.02 {
		t.Errorf("penalized share %.3f, want 0.25", got)
	}
	tb.Engine(0).State.SetPenalty(math.NaN())
	if tb.Engine(0).State.Penalty() != 0 {
		t.Error("NaN penalty not cleared")
	}
}

func TestLeastLoaded(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(3, func(int) float64 { return 0 }), Options{LeastLoaded: true})
	a, r := tb.Pick(1, nil)
	if r != LeastLoaded {
		t.Fatalf("reason %v", r)
	}
	b, _ := tb.Pick(1, nil)
	c, _ := tb.Pick(1, nil)
	if a == b || b == c || a == c {
		t.Fatalf("not fewest in flight: %d %d %d", a, b, c)
	}
	tb.Done(a)
	if d, _ := tb.Pick(99, nil); d != a {
		t.Fatalf("picked %d, want the idle %d", d, a)
	}
}

// BenchmarkPick: 1,024 weighted engines, random affinity keys, pick and
// done per op. Goal ≤200 ns/op, 0 allocs/op.
func BenchmarkPick(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	p := NewPool()
	tb := mustBuild(b, p, specs(1024, func(int) float64 { return r.Float64() + 0.01 }), Options{})
	keys := make([]uint64, 4096)
	for i := range keys {
		keys[i] = hashkey.String(fmt.Sprint("conversation-", r.IntN(2000)))
	}
	// Some background load and guardrails so the walk does real work.
	for i := 0; i < 1024; i += 16 {
		tb.Engine(i).State.SetPenalty(0.3)
	}
	tb.Engine(5).State.SetEjected(true)
	var ex [2]int32
	ex[0], ex[1] = 9, 10
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; b.Loop(); k++ {
		i, _ := tb.Pick(keys[k&4095], ex[:])
		if i >= 0 {
			tb.Done(i)
		}
	}
}

// TestOverflowAvoidsPenalized: when the walk finds nothing, the least
// loaded choice weighs in penalties, so an idle engine that fails fast
// does not attract the overflow.
func TestOverflowAvoidsPenalized(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(2, func(int) float64 { return 0.5 }), Options{Floor: 0.5, MaxProbes: 1})
	tb.Engine(0).State.SetPenalty(0.99)
	var held []int
	for k := uint64(0); k < 20; k++ {
		i, _ := tb.Pick(mix(k), nil)
		held = append(held, i)
	}
	n0 := 0
	for _, i := range held {
		if i == 0 {
			n0++
		}
		tb.Done(i)
	}
	if n0 > 1 {
		t.Fatalf("penalized engine got %d of 20 overflow picks", n0)
	}
}
