package pick

import (
	"cmp"
	"slices"
	"sync"
)

// How the picker tells where a LoRA adapter is loaded. An engine holds
// at most max_lora adapters on its GPU; a request for one that is not
// loaded waits for it to load, and for a free adapter slot when every
// slot is busy. So a request whose model is an adapter costs more on an
// engine that does not hold it.
const (
	// adapterWarmMs is how long after this gateway last sent a request
	// of an adapter to an engine it counts the adapter as loaded there
	// (engines unload an idle adapter only to load another).
	adapterWarmMs = 30_000
	// maxSentAdapters bounds the adapters remembered per engine.
	maxSentAdapters = 32
	// DefaultAdapterColdMs is Options.AdapterColdMs's default: loading an
	// adapter (tens of MB to the GPU) and the slot it takes from the
	// adapters already there.
	DefaultAdapterColdMs = 150
)

// adapters is what the picker knows of an engine's LoRA adapters: from
// its signals, its base model, max_lora and the adapters with requests
// on it; from this gateway, the adapters it sent there and when.
type adapters struct {
	mu      sync.Mutex
	base    uint64
	maxLora int
	active  []uint64
	sent    [maxSentAdapters]sentAdapter
	// homed: PlaceAdapters placed this engine, and homes are the
	// adapters it is to keep loaded (adapterhomes.go).
	homed bool
	homes []uint64
}

type sentAdapter struct {
	h    uint64
	atMs int64
}

// SetAdapters records what engine s's signal at nowMs says of its
// adapters: the hash of its base model (0: unknown), the hashes of the
// adapters with requests on it, and its adapter slots (max_lora; 0: the
// engine serves no adapters or does not say, and the picker then sees
// no adapter cost on it). The active adapters are remembered as held by
// s, so a request for one has s among its candidates. It reports whether
// the base model or max_lora changed (the adapters' homes then need
// placing again: PlaceAdapters).
func (p *Pool) SetAdapters(s *State, base uint64, active []uint64, maxLora int, nowMs int64) bool {
	changed := s.setAdapters(base, active, maxLora)
	if maxLora <= 0 || p.mem == nil || s.idx >= maxMemEngine {
		return changed
	}
	for _, h := range active {
		if h != 0 && h != base {
			p.mem.rememberBlock(h, stampOf(nowMs), s.idx+1)
		}
	}
	return changed
}

func (s *State) setAdapters(base uint64, active []uint64, maxLora int) (changed bool) {
	ad := s.ad.Load()
	if maxLora <= 0 {
		if ad != nil {
			s.ad.Store(nil)
			return true
		}
		return false
	}
	if ad == nil {
		ad = &adapters{}
		if !s.ad.CompareAndSwap(nil, ad) {
			ad = s.ad.Load()
		}
	}
	ad.mu.Lock()
	changed = ad.base != base || ad.maxLora != maxLora
	ad.base, ad.maxLora = base, maxLora
	ad.active = append(ad.active[:0], active...)
	ad.mu.Unlock()
	return changed
}

// adapterCost is the score's adapter term for a request of model h at
// nowMs: 0 when the engine is not known to hold adapters, when h is its
// base model, or when h is loaded there: once PlaceAdapters placed the
// engine, among its homes (an adapter running there but not a home
// costs as one not loaded: it takes a slot a home needs); before that,
// among its signal's active adapters, or the max_lora adapters counting
// those that this gateway sent there most recently, within
// adapterWarmMs; else
// coldMs, and when as many adapters as max_lora are held there (homes
// and active ones, or active and recently sent), twice
// that plus e2eMs, the engine's mean request time (0 unknown): the
// request waits for an adapter's requests to finish to free its slot.
func (s *State) adapterCost(h uint64, nowMs int64, coldMs, e2eMs float64) float64 {
	ad := s.ad.Load()
	if ad == nil || h == 0 {
		return 0
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if h == ad.base {
		return 0
	}
	if ad.homed {
		// Loaded: its homes. An adapter running there that is not one
		// (placed before its homes were, or sent past a full home) is
		// loaded too, but another request for it keeps it in a slot one
		// of the engine's homes needs: it costs a load all the same.
		if hasHash(ad.homes, h) {
			return 0
		}
		held := len(ad.homes)
		for _, a := range ad.active {
			if !hasHash(ad.homes, a) {
				held++
			}
		}
		if held >= ad.maxLora {
			return 2*coldMs + max(e2eMs, 0)
		}
		return coldMs
	}
	if hasHash(ad.active, h) {
		return 0
	}
	// Loaded: the adapters with requests on the engine, then those this
	// gateway sent there most recently, up to max_lora of them (the
	// engine keeps the most recently used adapters, as vLLM's LRU does).
	var recent [maxSentAdapters]sentAdapter
	n := 0
	for _, e := range ad.sent {
		if e.h != 0 && nowMs-e.atMs <= adapterWarmMs && !hasHash(ad.active, e.h) {
			recent[n] = e
			n++
		}
	}
	slices.SortFunc(recent[:n], func(a, b sentAdapter) int { return cmp.Compare(b.atMs, a.atMs) })
	room := max(ad.maxLora-len(ad.active), 0)
	for _, e := range recent[:min(n, room)] {
		if e.h == h {
			return 0
		}
	}
	warm := len(ad.active) + n
	if warm >= ad.maxLora {
		return 2*coldMs + max(e2eMs, 0)
	}
	return coldMs
}

// AdapterHome reports whether model h is a LoRA adapter on the engine
// and, if so, whether the engine is one of its homes (PlaceAdapters) or,
// before the engine was placed, has it running (the gateway counts
// requests sent where their adapter is and is not kept loaded).
func (s *State) AdapterHome(h uint64) (adapter, home bool) {
	ad := s.ad.Load()
	if ad == nil || h == 0 {
		return false, false
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if h == ad.base {
		return false, false
	}
	if ad.homed {
		return true, hasHash(ad.homes, h)
	}
	return true, hasHash(ad.active, h)
}

// isAdapter reports whether model h is a LoRA adapter on the engine: it
// holds adapters and h is not its base model.
func (s *State) isAdapter(h uint64) bool {
	ad := s.ad.Load()
	if ad == nil || h == 0 {
		return false
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	return h != ad.base
}

// noteAdapter records that a request of model h was sent to the engine
// at nowMs, and reports whether h is an adapter there (the engine holds
// adapters and h is not its base model).
func (s *State) noteAdapter(h uint64, nowMs int64) bool {
	ad := s.ad.Load()
	if ad == nil || h == 0 {
		return false
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if h == ad.base {
		return false
	}
	oldest := 0
	for i := range ad.sent {
		e := &ad.sent[i]
		if e.h == h {
			e.atMs = max(e.atMs, nowMs)
			return true
		}
		if e.atMs < ad.sent[oldest].atMs {
			oldest = i
		}
	}
	ad.sent[oldest] = sentAdapter{h: h, atMs: nowMs}
	return true
}

func hasHash(l []uint64, h uint64) bool {
	for _, x := range l {
		if x == h {
			return true
		}
	}
	return false
}
