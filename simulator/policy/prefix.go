package policy

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/simulator/des"
)

// chwbl is consistent hashing with bounded loads (Mirrokni, Thorup and
// Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018), as
// HAProxy's hash-balance-factor and KubeAI's PrefixHash load balancer use
// it for LLM prefix affinity: a ring of 100 virtual nodes per engine, the
// request's prefix key walks clockwise to the first engine whose load
// stays within c = 1.25 times the average. The key is the conversation
// key (the same one Switchyard's gateway gets), which is CHWBL's best
// case: every turn of a conversation hashes alike.
type chwbl struct {
	base
	ring []ringNode
	c    float64
}

type ringNode struct {
	h uint64
	e int
}

func newCHWBL(w *des.World, seed uint64) *chwbl {
	p := &chwbl{base: newBase(w, seed), c: 1.25}
	for e, info := range w.Engines {
		for k := range 100 {
			p.ring = append(p.ring, ringNode{h: hashID(info.ID, uint64(k)), e: e})
		}
	}
	sort.Slice(p.ring, func(i, j int) bool {
		if p.ring[i].h != p.ring[j].h {
			return p.ring[i].h < p.ring[j].h
		}
		return p.ring[i].e < p.ring[j].e
	})
	return p
}

func (p *chwbl) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	if len(c) == 0 {
		return -1
	}
	in := p.inflight[r.Cluster]
	total := 0
	for _, e := range c {
		total += in[e]
	}
	bound := int(math.Ceil(p.c * float64(total+1) / float64(len(c))))
	start := sort.Search(len(p.ring), func(i int) bool { return p.ring[i].h >= r.Key })
	for k := range p.ring {
		n := p.ring[(start+k)%len(p.ring)]
		if !p.w.Healthy(n.e) || slices.Contains(exclude, int32(n.e)) {
			continue
		}
		if in[n.e]+1 <= bound {
			return p.picked(r, n.e)
		}
	}
	return p.picked(r, c[0])
}

// prefixAware is the SGLang router's cache-aware policy (sgl-router,
// "cache_aware"; Zheng et al., "SGLang: Efficient Execution of Structured
// Language Model Programs", 2024): the router keeps an approximate radix
// tree per worker of the prefixes it sent there. When load is imbalanced
// (max − min in-flight > 64 and max > 1.5 × min) the least loaded worker
// wins; otherwise the worker with the longest matched prefix, if the
// match covers more than 30% of the prompt, else the worker with the
// smallest tree (most free cache). Trees are bounded by each engine's KV
// capacity and evict least recently used prefixes.
type prefixAware struct {
	base
	trees     [][]*lruSet // [cluster][engine]
	absThresh int
	relThresh float64
	cacheThr  float64
	chain     []uint64
	now       int64
}

func newPrefixAware(w *des.World, seed uint64) *prefixAware {
	p := &prefixAware{base: newBase(w, seed), absThresh: 64, relThresh: 1.5, cacheThr: 0.3}
	p.trees = make([][]*lruSet, len(w.Clusters))
	for c := range p.trees {
		for _, e := range w.Engines {
			capBlocks := e.Preset.KVBlocks * e.Preset.BlockSize * max(e.Replicas, 1) / max(w.BlockTokens, 1)
			p.trees[c] = append(p.trees[c], newLRUSet(max(capBlocks, 16)))
		}
	}
	return p
}

func (p *prefixAware) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	if len(c) == 0 {
		return -1
	}
	p.now++
	in := p.inflight[r.Cluster]
	lo, hi := c[0], c[0]
	for _, e := range c {
		if in[e] < in[lo] {
			lo = e
		}
		if in[e] > in[hi] {
			hi = e
		}
	}
	p.chain = chainHashes(p.chain[:0], r)
	var pick int
	if in[hi]-in[lo] > p.absThresh && float64(in[hi]) > p.relThresh*float64(in[lo]) {
		pick = lo
	} else {
		best, bestN := -1, -1
		for _, e := range c {
			if n := p.trees[r.Cluster][e].match(p.chain); n > bestN {
				best, bestN = e, n
			}
		}
		rate := 0.0
		if len(p.chain) > 0 {
			rate = float64(bestN) / float64(len(p.chain))
		}
		if rate > p.cacheThr {
			pick = best
		} else {
			pick = c[0]
			for _, e := range c {
				if p.trees[r.Cluster][e].len() < p.trees[r.Cluster][pick].len() {
					pick = e
				}
			}
		}
	}
	p.trees[r.Cluster][pick].insert(p.chain, p.now)
	return p.picked(r, pick)
}

// llmd is llm-d's endpoint picker (the Gateway API Inference Extension
// EPP with llm-d's inference-scheduler plugins): every candidate gets a
// weighted sum of scorer outputs in [0, 1] — prefix-cache-scorer (share of
// the prompt's blocks the endpoint holds, here from KV-cache events, i.e.
// exact) weight 3, queue-scorer (min-max normalised waiting queue, fewer
// is better) weight 2, kv-cache-utilization-scorer (1 − KV usage) weight
// 2 — and the max-score picker takes the best. Metrics are scraped every
// 50 ms, as the EPP does, so they lag a little.
type llmd struct {
	base
	scrapeEvery time.Duration
	lastScrape  time.Duration
	waiting     []float64
	kv          []float64
	wPrefix     float64
	wQueue      float64
	wKV         float64
}

func newLLMD(w *des.World, seed uint64) *llmd {
	n := len(w.Engines)
	return &llmd{base: newBase(w, seed), scrapeEvery: 50 * time.Millisecond, lastScrape: -time.Hour,
		waiting: make([]float64, n), kv: make([]float64, n), wPrefix: 3, wQueue: 2, wKV: 2}
}

func (p *llmd) scrape(now time.Duration) {
	if now-p.lastScrape < p.scrapeEvery {
		return
	}
	p.lastScrape = now
	for e := range p.w.Engines {
		st := p.w.Stats(e)
		p.waiting[e] = float64(st.Waiting)
		p.kv[e] = st.KVUsage()
	}
}

func (p *llmd) Pick(now time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	if len(c) == 0 {
		return -1
	}
	p.scrape(now)
	qmin, qmax := math.Inf(1), math.Inf(-1)
	for _, e := range c {
		qmin = math.Min(qmin, p.waiting[e])
		qmax = math.Max(qmax, p.waiting[e])
	}
	best, bestScore := -1, math.Inf(-1)
	start := p.rng.IntN(len(c)) // ties broken at random, as the picker does
	for k := range c {
		e := c[(start+k)%len(c)]
		q := 1.0
		if qmax > qmin {
			q = 1 - (p.waiting[e]-qmin)/(qmax-qmin)
		}
		pre := 0.0
		if r.W.PromptTokens > 0 {
			pre = float64(p.w.PrefixMatch(e, r)) / float64(r.W.PromptTokens)
		}
		s := p.wPrefix*pre + p.wQueue*q + p.wKV*(1-p.kv[e])
		if s > bestScore {
			best, bestScore = e, s
		}
	}
	return p.picked(r, best)
}

// chainHashes appends the prefix hashes of r's workload blocks: entry k
// identifies blocks 0..k.
func chainHashes(dst []uint64, r *des.Request) []uint64 {
	var h uint64 = 0x51ed27
	for _, b := range r.W.Blocks {
		h = hashkey.Mix(h ^ (b + 0x9e3779b97f4a7c15))
		dst = append(dst, h)
	}
	return dst
}

// lruSet is a bounded set of prefix hashes with least-recently-used
// eviction (deterministic: ties by hash).
type lruSet struct {
	cap  int
	last map[uint64]int64
}

func newLRUSet(capacity int) *lruSet { return &lruSet{cap: capacity, last: map[uint64]int64{}} }

func (s *lruSet) len() int { return len(s.last) }

func (s *lruSet) match(chain []uint64) int {
	n := 0
	for _, h := range chain {
		if _, ok := s.last[h]; !ok {
			break
		}
		n++
	}
	return n
}

func (s *lruSet) insert(chain []uint64, now int64) {
	for _, h := range chain {
		s.last[h] = now
	}
	if len(s.last) <= 2*s.cap {
		return
	}
	type kv struct {
		h uint64
		t int64
	}
	all := make([]kv, 0, len(s.last))
	for h, t := range s.last {
		all = append(all, kv{h, t})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].t != all[j].t {
			return all[i].t > all[j].t
		}
		return all[i].h < all[j].h
	})
	for _, x := range all[s.cap:] {
		delete(s.last, x.h)
	}
}

func hashID(id string, k uint64) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return hashkey.Mix(h ^ (k+1)*0x9e3779b97f4a7c15)
}
