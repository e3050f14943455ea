package pick

import (
	"cmp"
	"math"
	"slices"
	"sync/atomic"
)

// Adapter homes: where each LoRA adapter is meant to stay loaded.
//
// An engine holds at most max_lora adapters on its GPU and evicts the
// least recently used idle one to load another. Left to per-request
// scores, an adapter's requests follow the plan's shares over every
// engine that serves it, and with more adapters than one engine's slots
// every engine keeps loading and evicting them. So the gateway assigns
// each adapter its homes: engines that serve it, at most max_lora
// adapters to an engine while the slots go round, each adapter's
// requests balanced against the engines' planned shares. The picker
// counts an adapter as loaded on its homes (and where the engine's
// signal says it runs), adds its homes to its requests' candidates,
// and counts the cold-load cost elsewhere, so an adapter leaves its
// homes only when their queues cost more than a load.
//
// The assignment is a function of the engines (their shares, slots and
// lists) and of the adapters' request rates, so gateways seeing the same
// plan and a similar mix agree. It keeps an adapter's homes while
// they are not overloaded (moving an adapter costs a load on each side).

// AdapterEngine is one engine as PlaceAdapters sees it.
type AdapterEngine struct {
	State *State
	// Weight is the engine's share of the cluster's requests in the plan
	// (any scale; none positive: equal shares).
	Weight float64
	// Serves are the hashes of the models its signal lists (its base
	// model among them is skipped).
	Serves []uint64
}

// placement is a PlaceAdapters result: each adapter's homes (pool
// indices) and request counters, read by picks.
type placement struct {
	homes  map[uint64][]uint32
	counts map[uint64]*atomic.Int64
	rate   map[uint64]float64 // requests per second, smoothed
	total  float64            // all requests per second, smoothed
	seen   int64              // requests counted since the first placement
	atMs   int64
}

// maxPlacedAdapters bounds the adapters PlaceAdapters places.
const maxPlacedAdapters = 1024

// maxExtraHomes and maxExtraWork bound placeHomes' spare-slot rounds
// (each costs adapters × engines).
const (
	maxExtraHomes = 1024
	maxExtraWork  = 1 << 14
)

// minPlacedRequests is how many requests the pool counts before it
// places homes: fewer make an adapter's rate noise.
const minPlacedRequests = 50

// rateAlpha is the weight of the latest interval in an adapter's rate,
// and rateIntervalMs the shortest interval the rates are taken over.
const (
	rateAlpha      = 0.3
	rateIntervalMs = 5_000
)

// PlaceAdapters assigns each LoRA adapter that engines serve its homes
// (see the section above) from the engines' states (max_lora and base
// model as SetAdapters set them) and the request rates this pool counted
// since the last call, and makes the picker use them. Until the pool has
// counted minPlacedRequests requests it places nothing, and the picker
// goes by the adapters the signals say run where and those it sent where
// (adapterCost).
// Engines that report no max_lora, or list nothing, take no part but for
// their weight (an adapter's requests and an engine's share are both
// fractions of all the requests).
//
// It returns each engine's homes (nil for one that takes no part) and
// whether any changed.
func (p *Pool) PlaceAdapters(engines []AdapterEngine, nowMs int64) (homes [][]uint64, changed bool) {
	p.placeMu.Lock()
	defer p.placeMu.Unlock()
	prev := p.placed.Load()
	rates := map[uint64]float64{}
	var total float64
	var seen int64
	atMs := nowMs
	if prev != nil {
		// The rates move on once an interval of at least rateIntervalMs
		// has passed (a placement for a changed model list between two
		// snapshots leaves them, and the counts, as they are).
		dtMs := nowMs - prev.atMs
		update := dtMs >= rateIntervalMs
		if !update {
			atMs = prev.atMs
		}
		dt := float64(dtMs) / 1000
		for h, c := range prev.counts {
			r := prev.rate[h]
			if update {
				r += rateAlpha * (float64(c.Swap(0))/dt - r)
			}
			rates[h] = r
		}
		total, seen = prev.total, prev.seen
		if update {
			n := p.placedReqs.Swap(0)
			seen += n
			total += rateAlpha * (float64(n)/dt - total)
		}
	}
	// Homes are placed once rates are known; until then (and for
	// engines not placed) the picker goes by what is running where and
	// what it sent where (adapterCost).
	informed := total > 0 && seen >= minPlacedRequests
	in := make([]homeEngine, 0, len(engines))
	var sumW float64
	for _, e := range engines {
		w := e.Weight
		if !(w > 0) || math.IsInf(w, 0) {
			w = 0
		}
		sumW += w
		ad := e.State.ad.Load()
		if ad == nil || len(e.Serves) == 0 {
			continue
		}
		ad.mu.Lock()
		he := homeEngine{idx: e.State.idx, slots: ad.maxLora, weight: w, prev: slices.Clone(ad.homes)}
		for _, h := range e.Serves {
			if h != 0 && h != ad.base && len(he.serves) < maxPlacedAdapters {
				he.serves = append(he.serves, h)
			}
		}
		ad.mu.Unlock()
		if len(he.serves) > 0 && he.slots > 0 {
			in = append(in, he)
		}
	}
	if !(sumW > 0) {
		// No weights: equal shares.
		for i := range in {
			in[i].weight = 1
		}
		sumW = float64(len(engines))
	}
	next := &placement{homes: map[uint64][]uint32{}, counts: map[uint64]*atomic.Int64{}, rate: rates, total: total, seen: seen, atMs: atMs}
	for i := range in {
		for _, h := range in[i].serves {
			if next.counts[h] != nil {
				continue
			}
			next.counts[h] = &atomic.Int64{}
			if prev != nil && prev.counts[h] != nil {
				next.counts[h] = prev.counts[h] // what it counted since it was last read
			}
		}
	}
	placedHomes := make([][]uint64, len(in))
	if informed {
		placedHomes = placeHomes(in, sumW, rates, total)
	}
	for i := range in {
		for _, h := range placedHomes[i] {
			next.homes[h] = append(next.homes[h], in[i].idx)
		}
	}
	for h := range rates {
		if next.counts[h] == nil {
			delete(rates, h) // no engine serves it any more
		}
	}
	placed := map[uint32][]uint64{}
	for i := range in {
		if informed {
			placed[in[i].idx] = placedHomes[i]
		}
	}
	homes = make([][]uint64, len(engines))
	for k, e := range engines {
		ad := e.State.ad.Load()
		if ad == nil {
			continue
		}
		hs, ok := placed[e.State.idx]
		homes[k] = hs
		ad.mu.Lock()
		changed = changed || ad.homed != ok || !slices.Equal(ad.homes, hs)
		ad.homed, ad.homes = ok, hs
		ad.mu.Unlock()
	}
	p.placed.Store(next)
	return homes, changed
}

// countRequest counts a placed request, of model h when h is an adapter
// on its engine (adapter).
func (p *Pool) countRequest(h uint64, adapter bool) {
	p.placedReqs.Add(1)
	if !adapter {
		return
	}
	if pl := p.placed.Load(); pl != nil {
		if c := pl.counts[h]; c != nil {
			c.Add(1)
		}
	}
}

// homeEngine is an engine as placeHomes sees it.
type homeEngine struct {
	idx    uint32
	slots  int
	weight float64
	serves []uint64 // adapters it serves
	prev   []uint64 // its homes before
}

// placeHomes returns each engine's home adapters. rates are the
// adapters' request rates and total the rate of all requests (any
// model), sumW the sum of the weights of all the cluster's engines, so
// that an adapter's fraction of the requests and an engine's share of
// them compare. Every adapter an engine serves gets one home first, most
// requested first: its previous home if that engine still has a slot
// and is not past its share by more than half; then the others, most
// requested first, on the engine with a slot that is furthest below its
// share (its share less the adapter requests placed there). When no
// engine that serves an adapter has a slot left, it goes where it is
// furthest below its share anyway (more adapters than slots: those
// engines load in turn). Then, while an adapter has a
// home past its share, the one with the most requests per home gets
// another home on an engine with a slot and room below its share.
func placeHomes(engs []homeEngine, sumW float64, rates map[uint64]float64, total float64) [][]uint64 {
	homes := make([][]uint64, len(engs))
	if !(sumW > 0) {
		for i := range engs {
			sumW += engs[i].weight
		}
	}
	if !(sumW > 0) {
		return homes
	}
	// The adapters, with their fraction of all requests.
	type adapter struct {
		h     uint64
		frac  float64
		homes int
	}
	var ads []adapter
	seen := map[uint64]bool{}
	for i := range engs {
		for _, h := range engs[i].serves {
			if !seen[h] && len(ads) < maxPlacedAdapters {
				seen[h] = true
				f := 0.0
				if total > 0 {
					f = min(max(rates[h], 0)/total, 1)
				}
				ads = append(ads, adapter{h: h, frac: f})
			}
		}
	}
	slices.SortFunc(ads, func(a, b adapter) int {
		if c := cmp.Compare(b.frac, a.frac); c != 0 {
			return c
		}
		return cmp.Compare(a.h, b.h)
	})
	load := make([]float64, len(engs)) // adapter requests placed, fraction
	room := func(i int) float64 { return engs[i].weight/sumW - load[i] }
	best := func(h uint64, needSlot bool) int {
		b := -1
		for i := range engs {
			if !slices.Contains(engs[i].serves, h) || slices.Contains(homes[i], h) {
				continue
			}
			if needSlot && len(homes[i]) >= engs[i].slots {
				continue
			}
			if b < 0 || room(i) > room(b)+1e-12 {
				b = i
			}
		}
		return b
	}
	// First every adapter keeps its previous home while that engine has
	// a slot and is not past its share by more than half (moves cost
	// loads on both sides), most requested first; then the others go
	// where there is most room.
	keep := func(j int, a *adapter) bool {
		return slices.Contains(engs[j].prev, a.h) && slices.Contains(engs[j].serves, a.h) &&
			len(homes[j]) < engs[j].slots && room(j)-a.frac >= -engs[j].weight/sumW/2
	}
	put := func(i int, a *adapter) {
		homes[i] = append(homes[i], a.h)
		load[i] += a.frac
		a.homes = 1
	}
	for k := range ads {
		for j := range engs {
			if keep(j, &ads[k]) {
				put(j, &ads[k])
				break
			}
		}
	}
	for k := range ads {
		a := &ads[k]
		if a.homes > 0 {
			continue
		}
		i := best(a.h, true)
		if i < 0 {
			i = best(a.h, false)
		}
		if i >= 0 {
			put(i, a)
		}
	}
	// Spare slots: while an adapter has a home past its share, the one
	// with the most requests per home gets another (bounded: a large
	// fleet keeps one home per adapter and its spare slots for what
	// comes).
	over := func(h uint64) bool {
		for i := range engs {
			if room(i) < 0 && slices.Contains(homes[i], h) {
				return true
			}
		}
		return false
	}
	for n := 0; n < maxExtraHomes && len(ads)*len(engs) <= maxExtraWork; n++ {
		kb, ib := -1, -1
		for k := range ads {
			a := &ads[k]
			if a.homes == 0 || (kb >= 0 && a.frac/float64(a.homes) <= ads[kb].frac/float64(ads[kb].homes)) || !over(a.h) {
				continue
			}
			if i := best(a.h, true); i >= 0 && room(i) > 0 {
				kb, ib = k, i
			}
		}
		if kb < 0 {
			break
		}
		a := &ads[kb]
		// The new home takes its part of the adapter's requests from the
		// old ones.
		per := a.frac / float64(a.homes)
		next := a.frac / float64(a.homes+1)
		for i := range engs {
			if slices.Contains(homes[i], a.h) {
				load[i] -= per - next
			}
		}
		homes[ib] = append(homes[ib], a.h)
		load[ib] += next
		a.homes++
	}
	for i := range homes {
		slices.Sort(homes[i])
	}
	return homes
}
