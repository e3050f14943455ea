package pick

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// loraFleet is bench/models' llama pool: two engines of share .37/.35
// and two of .14, max_lora 2 each, all serving base and 8 adapters.
func loraFleet() (weights []float64, base uint64, ads []uint64) {
	base = hashkey.String("llama")
	for k := 1; k <= 8; k++ {
		ads = append(ads, hashkey.String(fmt.Sprintf("lora%d", k)))
	}
	return []float64{.37, .35, .14, .14}, base, ads
}

// loraHomeEngines is loraFleet as placeHomes takes it: four engines of 2
// slots serving the 8 adapters, whose rates are 1/k.
func loraHomeEngines() (w []float64, ads []uint64, engs []homeEngine, rates map[uint64]float64) {
	w, _, ads = loraFleet()
	rates = map[uint64]float64{}
	for k, h := range ads {
		rates[h] = 1 / float64(k+1)
	}
	engs = make([]homeEngine, len(w))
	for i := range engs {
		engs[i] = homeEngine{idx: uint32(i), slots: 2, weight: w[i], serves: ads}
	}
	return w, ads, engs, rates
}

// TestPlaceHomesGivesEachAdapterOneSlotWithinMaxLora: 8 adapters on four
// engines of 2 slots each: every adapter gets exactly one home, no engine
// more than its 2 slots, and the adapters' requests (rates 1/k) land on
// the engines about as their shares say (each engine's part of the
// adapter requests within 0.15 of its share).
func TestPlaceHomesGivesEachAdapterOneSlotWithinMaxLora(t *testing.T) {
	w, ads, engs, rates := loraHomeEngines()
	var sumR float64
	for _, r := range rates {
		sumR += r
	}
	homes := placeHomes(engs, 1, rates, sumR/0.6) // adapters are 60% of the requests
	count := map[uint64]int{}
	for i, hs := range homes {
		if len(hs) > 2 {
			t.Errorf("engine %d got %d homes, max_lora 2", i, len(hs))
		}
		var load float64
		for _, h := range hs {
			count[h]++
			load += rates[h] / sumR
		}
		if math.Abs(load-w[i]) > 0.15 {
			t.Errorf("engine %d (share %.2f) got %.2f of the adapter requests: %v", i, w[i], load, homes)
		}
	}
	for k, h := range ads {
		if count[h] != 1 {
			t.Errorf("lora%d has %d homes, want 1", k+1, count[h])
		}
	}
}

// TestPlaceHomesKeepsHomesWhileNotOverloaded: placed again with rates a
// little different (another interval's counts), every adapter keeps its
// home; moved only when the rates change a lot.
func TestPlaceHomesKeepsHomesWhileNotOverloaded(t *testing.T) {
	_, ads, engs, rates := loraHomeEngines()
	first := placeHomes(engs, 1, rates, 5)
	// Rates in reverse order: fresh placement would put lora8 first.
	rev := map[uint64]float64{}
	for k, h := range ads {
		rev[h] = 1 / float64(len(ads)-k)
	}
	if fresh := placeHomes(engs, 1, rev, 5); slices.EqualFunc(fresh, first, slices.Equal) {
		t.Fatalf("reversed rates place the adapters as before even without previous homes: the test shows nothing")
	}
	for i := range engs {
		engs[i].prev = first[i]
	}
	// 10% noise on every rate.
	r := rand.New(rand.NewPCG(1, 2))
	noisy := map[uint64]float64{}
	for h, v := range rates {
		noisy[h] = v * (0.9 + 0.2*r.Float64())
	}
	if again := placeHomes(engs, 1, noisy, 5); !slices.EqualFunc(again, first, slices.Equal) {
		t.Errorf("placed again with 10%% noise: %v, before %v", again, first)
	}
}

// TestPlaceHomesSpareSlotsGoToTheBusiestAdapter: two adapters, all the
// requests, 9:1, on two equal engines of 4 slots: each gets a home, then
// an adapter whose home is past its share gets another, the busiest per
// home first, so both engines hold both; with slots 1 and 2 the busier
// adapter gets the second engine too and the other stays on one. With
// an adapter of few requests no spare slot is used.
func TestPlaceHomesSpareSlotsGoToTheBusiestAdapter(t *testing.T) {
	a, b := hashkey.String("a"), hashkey.String("b")
	rates := map[uint64]float64{a: 9, b: 1}
	engs := []homeEngine{
		{idx: 0, slots: 4, weight: 1, serves: []uint64{a, b}},
		{idx: 1, slots: 4, weight: 1, serves: []uint64{a, b}},
	}
	homes := placeHomes(engs, 2, rates, 10)
	for i, hs := range homes {
		if len(hs) != 2 {
			t.Errorf("engine %d homes %v, want both adapters", i, hs)
		}
	}
	engs[0].slots, engs[1].slots = 1, 2
	homes = placeHomes(engs, 2, rates, 10)
	onA := 0
	for _, hs := range homes {
		if slices.Contains(hs, a) {
			onA++
		}
	}
	if onA != 2 || len(homes[0])+len(homes[1]) != 3 {
		t.Errorf("slots 1 and 2: homes %v, want a on both engines and b on one", homes)
	}
	engs[0].slots, engs[1].slots = 4, 4
	homes = placeHomes(engs, 2, rates, 100) // a is 9% of the requests
	if len(homes[0])+len(homes[1]) != 2 {
		t.Errorf("adapters of 9%% and 1%% of the requests: homes %v, want one each", homes)
	}
}

// TestPlaceHomesOnlyWhereServed: an adapter goes only to engines that
// list it, even when they are full and others have room.
func TestPlaceHomesOnlyWhereServed(t *testing.T) {
	a, b, c := hashkey.String("a"), hashkey.String("b"), hashkey.String("c")
	engs := []homeEngine{
		{idx: 0, slots: 1, weight: 1, serves: []uint64{a, b}},
		{idx: 1, slots: 4, weight: 1, serves: []uint64{c}},
	}
	homes := placeHomes(engs, 2, nil, 0)
	if !slices.Contains(homes[0], a) || !slices.Contains(homes[0], b) || slices.Contains(homes[1], a) || slices.Contains(homes[1], b) {
		t.Errorf("homes %v: a and b are served by engine 0 only", homes)
	}
}

// TestAdapterRequestsStayOnTheirHomes runs requests of bench/models'
// mix (base 40%, 8 adapters with rates 1/k) through a table of the llama
// pool after PlaceAdapters: each engine gets requests of at most its
// max_lora (2) adapters, and each adapter only on its home. Without
// placement (the recent-sends rule alone) engines see more adapters
// than their slots: the homes are what keeps them loaded.
func TestAdapterRequestsStayOnTheirHomes(t *testing.T) {
	w, base, ads := loraFleet()
	run := func(placed bool) (perEngine []map[uint64]int) {
		p := NewPool()
		tb := mustBuild(t, p, specs(4, func(i int) float64 { return w[i] }), Options{})
		serves := append([]uint64{base}, ads...)
		var engs []AdapterEngine
		for i := range 4 {
			teach(tb, i, 20, 50, 0.05, 0)
			p.SetAdapters(tb.Engine(i).State, base, nil, 2, 0)
			engs = append(engs, AdapterEngine{State: tb.Engine(i).State, Weight: w[i], Serves: serves})
		}
		r := rand.New(rand.NewPCG(3, 4))
		var cum []float64
		sum := 0.0
		for k := range ads {
			sum += 1 / float64(k+1)
			cum = append(cum, sum)
		}
		perEngine = make([]map[uint64]int, 4)
		for i := range perEngine {
			perEngine[i] = map[uint64]int{}
		}
		var inflight []struct {
			i  int
			tk Ticket
		}
		for n := range 2000 {
			now := int64(1000 + n*20)
			if placed && n%500 == 0 {
				p.PlaceAdapters(engs, now) // a snapshot every 10 s
			}
			model := base
			if r.Float64() < 0.6 {
				x := r.Float64() * sum
				k, _ := slices.BinarySearch(cum, x)
				model = ads[min(k, len(ads)-1)]
			}
			_, i, tk := place(t, tb, &Request{Key: r.Uint64(), PromptTokens: 300, Model: model, NowMs: now})
			if model != base && n >= 500 {
				perEngine[i][model]++
			}
			inflight = append(inflight, struct {
				i  int
				tk Ticket
			}{i, tk})
			if len(inflight) > 6 { // about 6 in flight
				f := inflight[0]
				inflight = inflight[1:]
				tb.FirstToken(f.i, f.tk, 60)
				tb.Finished(f.i, f.tk, true, 10, 500)
				tb.Done(f.i)
			}
		}
		return perEngine
	}
	for i, m := range run(true) {
		if len(m) > 2 {
			t.Errorf("engine %d got requests of %d adapters (%v), max_lora 2", i, len(m), m)
		}
	}
	spread := 0
	for _, m := range run(false) {
		spread = max(spread, len(m))
	}
	if spread <= 2 {
		t.Errorf("without placement the most adapters on one engine is %d: the test does not show what placement does", spread)
	}
}

// TestAdapterHomeTakesRequestsBeyondItsLimit: two engines of 2 slots
// (hard limit 3), adapter a homed on e0 and b on e1 (max_lora 1 each).
// With a's home at its limit, the next request for a still goes there
// (its slot wait is less than loading a on the other engine, which waits
// for b's slot and a request time besides), never past twice the limit;
// once the wait costs more than the load, the load wins. Without the
// beyond rule a is loaded on the other engine at once.
func TestAdapterHomeTakesRequestsBeyondItsLimit(t *testing.T) {
	base, a, b := hashkey.String("base"), hashkey.String("a"), hashkey.String("b")
	p := NewPool()
	sp := specs(2, func(int) float64 { return 1 })
	for i := range sp {
		sp[i].MaxConcurrency = 2
	}
	tb := mustBuild(t, p, sp, Options{})
	var engs []AdapterEngine
	for i := range 2 {
		st := tb.Engine(i).State
		teach(tb, i, 20, 50, 0.05, 0)
		tk := Ticket{AtMs: 0}
		st.inflight.Add(1)
		tb.Finished(i, tk, true, 10, 1000) // a request takes 1 s
		st.inflight.Add(-1)
		st.SetLimit(3)
		p.SetAdapters(st, base, nil, 1, 0)
		engs = append(engs, AdapterEngine{State: st, Weight: 1, Serves: []uint64{base, a, b}})
	}
	placeAfter(p, engs, map[uint64]int{a: 100, b: 100, base: 100})
	home := -1
	for i := range 2 {
		if _, h := tb.Engine(i).State.AdapterHome(a); h {
			home = i
		}
	}
	if home < 0 {
		t.Fatal("a has no home")
	}
	var got []int
	for k := range 7 {
		_, i, _ := place(t, tb, &Request{Key: uint64(k)*7919 + 1, PromptTokens: 100, Model: a, NowMs: 10})
		got = append(got, i)
	}
	// The 4th goes past the home's limit of 3: a slot wait of (4+1-2)
	// request times over 2 slots, 1 s, against 1.3 s for loading a on e1
	// (b holds its only slot: twice 150 ms and a request time); the 5th
	// (1.5 s) loads it on e1.
	if want := []int{home, home, home, home, 1 - home}; !slices.Equal(got[:5], want) {
		t.Errorf("requests for a went to %v (home e%d), want %v first", got, home, want)
	}
	if n := tb.Engine(home).State.InFlight(); n > 6 {
		t.Errorf("home has %d in flight, more than twice its limit", n)
	}
}

// placeAfter places p's adapters once the pool has counted n's requests
// (model -> requests, all counted as adapter requests), 10 s after a
// first placement.
func placeAfter(p *Pool, engs []AdapterEngine, n map[uint64]int) {
	p.PlaceAdapters(engs, 0)
	for h, k := range n {
		for range k {
			p.countRequest(h, true)
		}
	}
	p.PlaceAdapters(engs, 10_000)
}

// oneAdapterEngine is a pool of one engine (max_lora 2) serving base
// and adapter a, placed once at time 0.
func oneAdapterEngine() (p *Pool, st *State, engs []AdapterEngine, a uint64) {
	base := hashkey.String("base")
	a = hashkey.String("a")
	p = NewPool()
	st = p.State("e0")
	p.SetAdapters(st, base, nil, 2, 0)
	engs = []AdapterEngine{{State: st, Weight: 1, Serves: []uint64{base, a}}}
	p.PlaceAdapters(engs, 0)
	return p, st, engs, a
}

// TestPlaceAdaptersWaitsForRates: before the pool has counted
// minPlacedRequests requests no engine is placed (the picker goes by what
// runs where); after, every adapter has a home.
func TestPlaceAdaptersWaitsForRates(t *testing.T) {
	p, st, engs, a := oneAdapterEngine()
	for range minPlacedRequests - 1 {
		p.countRequest(a, true)
	}
	if homes, _ := p.PlaceAdapters(engs, 10_000); homes[0] != nil {
		t.Errorf("placed after %d requests: %v", minPlacedRequests-1, homes)
	}
	if _, home := st.AdapterHome(a); home {
		t.Error("a counts as homed on e0 before placement")
	}
	p.countRequest(a, true)
	if homes, _ := p.PlaceAdapters(engs, 20_000); !slices.Equal(homes[0], []uint64{a}) {
		t.Errorf("after %d requests homes %v, want [a]", minPlacedRequests, homes)
	}
}

// TestPlaceAdaptersKeepsCountsAcrossQuickPlacements: a placement soon
// after another (an engine's model list changed between two snapshots)
// takes no rates over its short interval and loses none of the counts:
// the next placement, 10 s on, has them all.
func TestPlaceAdaptersKeepsCountsAcrossQuickPlacements(t *testing.T) {
	p, _, engs, a := oneAdapterEngine()
	for range minPlacedRequests {
		p.countRequest(a, true)
	}
	if homes, _ := p.PlaceAdapters(engs, 100); homes[0] != nil {
		t.Errorf("placed on rates over 100 ms: %v", homes)
	}
	if homes, _ := p.PlaceAdapters(engs, 10_000); !slices.Equal(homes[0], []uint64{a}) {
		t.Errorf("10 s after the first placement, with %d requests counted: homes %v, want [a]", minPlacedRequests, homes)
	}
	// 50 requests over 10 s, smoothed from 0: 0.3 × 5/s.
	if r := p.placed.Load().rate[a]; math.Abs(r-rateAlpha*float64(minPlacedRequests)/10) > 1e-9 {
		t.Errorf("a's rate %v, want %v", r, rateAlpha*float64(minPlacedRequests)/10)
	}
}
