package pick

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// TestAdapterRequestsGoWhereTheAdapterIsLoaded: three equal engines that
// hold LoRA adapters (max_lora 2). Requests of adapter "sql", loaded on
// e1 by its signal, go to e1 while its bounded load allows (not by the
// weights' spread over all three); requests of a new adapter "law" keep
// to the engine the first one was sent to; requests of the base model
// spread as the weights say. With AdapterColdMs negative (no adapter
// term) "sql" spreads too: the term is what concentrates it.
func TestAdapterRequestsGoWhereTheAdapterIsLoaded(t *testing.T) {
	base, sql, law := hashkey.String("base"), hashkey.String("sql"), hashkey.String("law")
	run := func(cold, ttftMs float64) (sqlOn, lawOn, baseOn [3]int) {
		p := NewPool()
		tb := mustBuild(t, p, specs(3, func(int) float64 { return 1 }), Options{AdapterColdMs: cold})
		for i := range 3 {
			teach(tb, i, 20, ttftMs, 0.05, 0)
			var active []uint64
			if i == 1 {
				active = []uint64{sql}
			}
			p.SetAdapters(tb.Engine(i).State, base, active, 2, 100)
		}
		send := func(key, model uint64, now int64) int {
			_, i, tk := place(t, tb, &Request{Key: key, PromptTokens: 200, Model: model, NowMs: now})
			tb.FirstToken(i, tk, ttftMs+10)
			tb.Finished(i, tk, true, 10, 0)
			tb.Done(i)
			return i
		}
		for k := range 300 {
			now := int64(100 + k)
			sqlOn[send(uint64(k)*7919+1, sql, now)]++
			lawOn[send(uint64(k)*104729+2, law, now)]++
			baseOn[send(uint64(k)*1299709+3, base, now)]++
		}
		return
	}
	sqlOn, lawOn, baseOn := run(0, 20)
	if sqlOn[1] != 300 {
		t.Errorf("sql (loaded on e1) went to %v, want all 300 on e1", sqlOn)
	}
	// Engines of 2-s first tokens: the score's tolerance (20% + 30 ms) is
	// more than the cold cost, and still the adapter stays where it is
	// loaded (a candidate that would load it wins only with the best
	// score).
	if slow, _, _ := run(0, 2000); slow[1] != 300 {
		t.Errorf("2-s engines: sql went to %v, want all 300 on e1", slow)
	}
	if max(lawOn[0], lawOn[1], lawOn[2]) != 300 {
		t.Errorf("law (loaded nowhere) went to %v, want all 300 on the engine it was first sent to", lawOn)
	}
	for i, n := range baseOn {
		if n < 60 {
			t.Errorf("base model: e%d took %d of 300 (%v): the adapter term applies to adapters only", i, n, baseOn)
		}
	}
	sqlOn, _, _ = run(-1, 20)
	if sqlOn[1] > 200 {
		t.Errorf("without the adapter term sql went to %v: the test does not show the term's effect", sqlOn)
	}
}

// TestAdapterSlotsFullCostMore: an engine whose max_lora adapters are all
// loaded costs twice AdapterColdMs and a mean request time for another
// adapter; an engine that publishes no max_lora costs nothing.
func TestAdapterSlotsFullCostMore(t *testing.T) {
	s := &State{}
	a, b, c := hashkey.String("a"), hashkey.String("b"), hashkey.String("c")
	if got := s.adapterCost(a, 0, 100, 0); got != 0 {
		t.Errorf("engine without adapters: cost %v, want 0", got)
	}
	s.setAdapters(0, []uint64{a}, 2)
	if got := s.adapterCost(b, 0, 100, 0); got != 100 {
		t.Errorf("one slot free: cost %v, want 100", got)
	}
	s.noteAdapter(b, 0)
	if got := s.adapterCost(b, 1000, 100, 0); got != 0 {
		t.Errorf("b just sent there: cost %v, want 0", got)
	}
	if got := s.adapterCost(c, 1000, 100, 900); got != 1100 {
		t.Errorf("slots full (a active, b sent), requests of 900 ms: cost %v, want 2 x 100 + 900", got)
	}
	if got := s.adapterCost(c, 1000+adapterWarmMs+1, 100, 900); got != 100 {
		t.Errorf("b idle past adapterWarmMs: cost %v, want 100", got)
	}
	s.setAdapters(0, nil, 0)
	if got := s.adapterCost(c, 0, 100, 0); got != 0 {
		t.Errorf("max_lora withdrawn: cost %v, want 0", got)
	}
}

// TestAdapterWarmIsTheMostRecentMaxLora: an engine holds max_lora
// adapters, the most recently used: of three adapters sent to an engine
// with two slots, the oldest counts as unloaded again.
func TestAdapterWarmIsTheMostRecentMaxLora(t *testing.T) {
	s := &State{}
	a, b, c := hashkey.String("a"), hashkey.String("b"), hashkey.String("c")
	s.setAdapters(0, nil, 2)
	s.noteAdapter(a, 1)
	s.noteAdapter(b, 2)
	s.noteAdapter(c, 3)
	for _, tc := range []struct {
		name string
		h    uint64
		want float64
	}{{"c", c, 0}, {"b", b, 0}, {"a (evicted)", a, 200}} {
		if got := s.adapterCost(tc.h, 10, 100, 0); got != tc.want {
			t.Errorf("%s: cost %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPickBeyondLimit: with every engine at its hard limit PickRequest
// finds none, PickBeyondLimit places requests up to twice the limit on
// the least loaded engine relative to its share, and then none.
func TestPickBeyondLimit(t *testing.T) {
	p := NewPool()
	tb := mustBuild(t, p, specs(2, func(i int) float64 { return float64(1 + i) }), Options{})
	for i := range 2 {
		tb.Engine(i).State.SetLimit(2)
	}
	for k := range 4 {
		if i, _, _ := tb.PickRequest(&Request{Key: uint64(k)}, nil); i < 0 {
			t.Fatalf("request %d: no engine under its limit", k)
		}
	}
	if i, _, _ := tb.PickRequest(&Request{Key: 9}, nil); i >= 0 {
		t.Fatalf("PickRequest placed a request beyond the limits on e%d", i)
	}
	var on [2]int
	for k := range 4 {
		i, why, _ := tb.PickBeyondLimit(&Request{Key: uint64(10 + k)}, nil)
		if i < 0 || why != Overflow {
			t.Fatalf("beyond-limit request %d: engine %d (%v)", k, i, why)
		}
		on[i]++
	}
	if on != [2]int{2, 2} {
		t.Errorf("beyond the limits: %v, want 2 on each (up to twice the limit of 2)", on)
	}
	if i, _, _ := tb.PickBeyondLimit(&Request{Key: 99}, nil); i >= 0 {
		t.Errorf("placed on e%d at twice its limit", i)
	}
}
