package engine

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cacheView is what a KV-event consumer knows of one engine: the blocks
// each replica holds, built from CacheEvents alone.
type cacheView map[int]map[uint64]bool

func (v cacheView) apply(t *testing.T, evs []CacheEvent) {
	t.Helper()
	for _, ev := range evs {
		if v[ev.Replica] == nil {
			v[ev.Replica] = map[uint64]bool{}
		}
		blocks := v[ev.Replica]
		switch ev.Kind {
		case CacheStored:
			for i, h := range ev.Hashes {
				if blocks[h] {
					t.Fatalf("replica %d: block %x stored twice", ev.Replica, h)
				}
				if i == 0 && ev.HasParent && !blocks[ev.Parent] {
					t.Fatalf("replica %d: block %x stored after parent %x, which is not cached", ev.Replica, h, ev.Parent)
				}
				blocks[h] = true
			}
		case CacheRemoved:
			for _, h := range ev.Hashes {
				if !blocks[h] {
					t.Fatalf("replica %d: block %x removed but not cached", ev.Replica, h)
				}
				delete(blocks, h)
			}
		case CacheCleared:
			clear(blocks)
		default:
			t.Fatalf("event of kind %v", ev.Kind)
		}
	}
}

// cached returns what replica r's cache holds.
func cached(e *Engine, r int) map[uint64]bool {
	out := map[uint64]bool{}
	for h := range e.replicas[r].cache.byHash {
		out[h] = true
	}
	return out
}

// TestCacheEventsRebuildEachReplicasCache drives two replicas with a
// cache small enough to evict, shared prefixes, cancels and a Reset, and
// checks after every call that the blocks the events report equal what
// each replica's cache holds, and that they count what Stats counts.
func TestCacheEventsRebuildEachReplicasCache(t *testing.T) {
	e := newEngine(t, "h100", func(c *Config) {
		c.Replicas = 2
		c.Preset.KVBlocks = 400 // 6,400 tokens: evicts under this load
		c.CacheEvents = true
	})
	view := cacheView{}
	var stored, removed int64
	check := func(when string) {
		t.Helper()
		evs := e.CacheEvents()
		for _, ev := range evs {
			switch ev.Kind {
			case CacheStored:
				stored += int64(len(ev.Hashes))
			case CacheRemoved:
				removed += int64(len(ev.Hashes))
			}
		}
		view.apply(t, evs)
		for r := range e.Replicas() {
			if got, want := view[r], cached(e, r); !maps.Equal(got, want) {
				t.Fatalf("%s: replica %d: events give %d blocks, the cache holds %d", when, r, len(got), len(want))
			}
		}
		if st := e.Stats(); st.KVBlocksStored != stored || st.KVBlocksEvicted != removed {
			t.Fatalf("%s: events stored %d and removed %d blocks, Stats counts %d and %d", when, stored, removed, st.KVBlocksStored, st.KVBlocksEvicted)
		}
	}
	check("start")
	if len(view) != 2 {
		t.Fatalf("the start cleared %d replicas, want 2", len(view))
	}
	rng := rand.New(rand.NewPCG(7, 8))
	var at time.Duration
	for i := range 600 {
		at += time.Duration(rng.ExpFloat64() * float64(15*time.Millisecond))
		e.Advance(at)
		check("advance")
		prompt := 200 + rng.IntN(1200)
		hashes := make([]uint64, prompt/16)
		sys := uint64(rng.IntN(8))
		for j := range hashes {
			if j < 20 { // 320 tokens of one of 8 system prompts
				hashes[j] = sys<<32 | uint64(j)
			} else {
				hashes[j] = uint64(i+1)<<40 | uint64(j)
			}
		}
		if err := e.Submit(at, Request{ID: uint64(i), PromptTokens: prompt, OutputTokens: 1 + rng.IntN(100), PrefixHashes: hashes}); err != nil {
			t.Fatal(err)
		}
		check("submit")
		if i%7 == 3 {
			e.Cancel(at, uint64(i-1))
			check("cancel")
		}
		if i == 300 {
			e.Reset(at)
			check("reset")
			if len(view[0])+len(view[1]) != 0 {
				t.Fatal("blocks left after Reset")
			}
		}
	}
	for {
		next, ok := e.NextEvent()
		if !ok {
			break
		}
		e.Advance(next)
		check("drain")
	}
	if st := e.Stats(); st.KVBlocksEvicted == 0 || st.PrefixHitTokens == 0 {
		t.Fatalf("the workload neither evicted (%d) nor hit the cache (%d tokens): the test checks little", st.KVBlocksEvicted, st.PrefixHitTokens)
	}
}

// TestCacheEventsChainStoredRuns checks one prompt's blocks come as one
// BlockStored run whose parent is the block before the first new one.
func TestCacheEventsChainStoredRuns(t *testing.T) {
	e := newEngine(t, "h100", func(c *Config) { c.CacheEvents = true })
	e.CacheEvents() // the start's AllBlocksCleared
	first := []uint64{1, 2, 3}
	drive(t, e, []arrival{{0, Request{ID: 1, PromptTokens: 3*16 + 5, OutputTokens: 2, PrefixHashes: first}}})
	evs := e.CacheEvents()
	if len(evs) != 1 || evs[0].Kind != CacheStored || evs[0].HasParent || !slices.Equal(evs[0].Hashes, first) {
		t.Fatalf("first prompt: events %+v, want one BlockStored of %v without parent", evs, first)
	}
	// Shares blocks 1 and 2: block 2 is the parent of the new ones.
	drive(t, e, []arrival{{e.Now(), Request{ID: 2, PromptTokens: 4*16 + 1, OutputTokens: 2, PrefixHashes: []uint64{1, 2, 7, 8}}}})
	evs = e.CacheEvents()
	if len(evs) != 1 || evs[0].Kind != CacheStored || !evs[0].HasParent || evs[0].Parent != 2 || !slices.Equal(evs[0].Hashes, []uint64{7, 8}) {
		t.Fatalf("second prompt: events %+v, want one BlockStored of [7 8] with parent 2", evs)
	}
	if evs := e.CacheEvents(); evs != nil {
		t.Fatalf("nothing happened, got %+v", evs)
	}
}

// TestCacheEventsOffRecordNothing: without Config.CacheEvents nothing is
// recorded and driving the engine allocates nothing per request.
func TestCacheEventsOffRecordNothing(t *testing.T) {
	e := newEngine(t, "h100", func(c *Config) { c.Preset.KVBlocks = 1000 })
	hashes := make([]uint64, 60)
	var id uint64
	run := func() {
		id++
		for j := range hashes {
			hashes[j] = id<<32 | uint64(j)
		}
		at := time.Duration(id) * time.Second // each alone: the previous one finished
		e.Advance(at)
		if err := e.Submit(at, Request{ID: id, PromptTokens: 1000, OutputTokens: 4, PrefixHashes: hashes}); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // grows the cache's map and free lists to their size
		run()
	}
	if allocs := testing.AllocsPerRun(200, run); allocs > 0 {
		t.Fatalf("%v allocations per request with cache events off", allocs)
	}
	if evs := e.CacheEvents(); evs != nil {
		t.Fatalf("cache events off, got %d", len(evs))
	}
	if st := e.Stats(); st.KVBlocksStored == 0 || st.KVBlocksEvicted == 0 {
		t.Fatalf("stored %d, evicted %d blocks: the requests did not reach the cache's limits", st.KVBlocksStored, st.KVBlocksEvicted)
	}
}
