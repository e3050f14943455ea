package estimate

import (
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/switchyard-llm/switchyard/schemas"
)

type pair struct{ cluster, engine string }

// Pane is the state of one slice of event time: per-engine, per-cluster
// and per-(cluster, engine) accumulators. Its size grows with the number
// of entities, not records.
type Pane struct {
	engines  map[string]*Engine
	clusters map[string]*clusterPane
	networks int // network accumulators in clusters
	// Attempts and engine-fault failures by engine id (RoutingEvent
	// tried), for the engines' health.
	tries map[string]*Tries
	// The last cluster used (records come in runs per cluster).
	lastCluster string
	last        *clusterPane
}

// clusterPane is one cluster's demand and its network accumulators by
// engine id (one string lookup per routing event once the cluster is
// known, instead of hashing a (cluster, engine) pair).
type clusterPane struct {
	demand  Demand
	network map[string]*Network
}

// NewPane returns an empty pane.
func NewPane() *Pane {
	return &Pane{engines: map[string]*Engine{}, clusters: map[string]*clusterPane{}, tries: map[string]*Tries{}}
}

// AddSignal folds in a validated signal.
func (p *Pane) AddSignal(s *schemas.EngineSignal) {
	e := p.engines[s.GetEngineId()]
	if e == nil {
		e = &Engine{}
		p.engines[s.GetEngineId()] = e
	}
	e.Add(s)
}

// AddRoutingEvent folds in a validated routing event.
func (p *Pane) AddRoutingEvent(ev *schemas.RoutingEvent) {
	c := p.last
	if c == nil || ev.GetCluster() != p.lastCluster {
		if c = p.clusters[ev.GetCluster()]; c == nil {
			c = &clusterPane{network: map[string]*Network{}}
			p.clusters[ev.GetCluster()] = c
		}
		p.lastCluster, p.last = ev.GetCluster(), c
	}
	c.demand.Add(ev)
	for _, a := range ev.GetTried() {
		if !counts(a) {
			continue
		}
		t := p.tries[a.GetEngineId()]
		if t == nil {
			t = &Tries{}
			p.tries[a.GetEngineId()] = t
		}
		t.attempts++
		if engineFault(a) {
			t.failures++
		}
	}
	if ev.GetEngineId() == "" {
		return
	}
	n := c.network[ev.GetEngineId()]
	if n == nil {
		n = &Network{}
		c.network[ev.GetEngineId()] = n
		p.networks++
	}
	n.Add(ev)
}

// Entities is the number of accumulators the pane holds.
func (p *Pane) Entities() int { return len(p.engines) + len(p.clusters) + p.networks + len(p.tries) }

// Window describes the window being computed: its bounds (Unix ms), the
// slide (pane length, ms), and its panes with their start times, in order.
type Window struct {
	Start, End, Slide int64
	PaneStarts        []int64
	Panes             []*Pane
}

// Compute merges the window's panes and returns its estimates in a fixed
// order: engines by id, then demand by cluster, then network by (cluster,
// engine). fit nil means ConvexFit.
func Compute(w Window, fit Fitter) []*schemas.Estimate { return ComputeParallel(w, fit, 1) }

// ComputeParallel is Compute with the per-engine work (profile fits)
// spread over up to workers goroutines; the result is identical.
func ComputeParallel(w Window, fit Fitter, workers int) []*schemas.Estimate {
	return Merge(w).Estimates(fit, workers)
}

// Merged is a window's state merged from its panes. It shares nothing
// with the panes, so its estimates can be computed later, on another
// goroutine, while the panes keep taking records.
type Merged struct {
	start, end, slide int64
	engines           map[string]*Engine
	network           map[pair]*Network
	demand            map[string][]*Demand
	tries             map[string]Tries
}

// Merge merges the window's panes (the cheap part of Compute).
func Merge(w Window) *Merged {
	// Sized for the largest pane; the accumulators in one slab each.
	var ne, nn int
	for _, p := range w.Panes {
		ne, nn = max(ne, len(p.engines)), max(nn, p.networks)
	}
	engines := make(map[string]*Engine, ne)
	network := make(map[pair]*Network, nn)
	demand := map[string][]*Demand{}
	tries := map[string]Tries{}
	engineSlab, networkSlab := make([]Engine, 0, ne), make([]Network, 0, nn)
	np := int((w.End - w.Start) / max(w.Slide, 1))
	for i, p := range w.Panes {
		for id, e := range p.engines {
			m := engines[id]
			if m == nil {
				if len(engineSlab) == cap(engineSlab) {
					engineSlab = make([]Engine, 0, ne)
				}
				engineSlab = engineSlab[:len(engineSlab)+1]
				m = &engineSlab[len(engineSlab)-1]
				engines[id] = m
			}
			m.Merge(e)
		}
		for c, cp := range p.clusters {
			for e, n := range cp.network {
				k := pair{c, e}
				m := network[k]
				if m == nil {
					if len(networkSlab) == cap(networkSlab) {
						networkSlab = make([]Network, 0, max(nn, 16))
					}
					networkSlab = networkSlab[:len(networkSlab)+1]
					m = &networkSlab[len(networkSlab)-1]
					network[k] = m
				}
				m.merge(n)
			}
		}
		for id, t := range p.tries {
			m := tries[id]
			m.merge(t)
			tries[id] = m
		}
		idx := 0
		if i < len(w.PaneStarts) && w.Slide > 0 {
			idx = int((w.PaneStarts[i] - w.Start) / w.Slide)
		}
		if idx < 0 || idx >= np {
			continue
		}
		for c, cp := range p.clusters {
			s := demand[c]
			if s == nil {
				s = make([]*Demand, np)
				demand[c] = s
			}
			dc := cp.demand
			s[idx] = &dc
		}
	}
	return &Merged{start: w.Start, end: w.End, slide: w.Slide, engines: engines, network: network, demand: demand, tries: tries}
}

// Estimates computes the merged window's estimates (see Compute), with
// the per-engine work spread over up to workers goroutines.
func (m *Merged) Estimates(fit Fitter, workers int) []*schemas.Estimate {
	engines, network, demand := m.engines, m.network, m.demand
	w := Window{Start: m.start, End: m.end, Slide: m.slide}
	ids := sortedKeys(engines)
	// The envelopes in slabs: a few allocations per window instead of
	// two per estimate.
	n := len(ids) + len(demand) + len(network)
	out := make([]*schemas.Estimate, len(ids), n)
	envs := make([]schemas.Estimate, n)
	engineKinds := make([]schemas.Estimate_Engine, len(ids))
	one := func(i int) {
		engineKinds[i].Engine = engines[ids[i]].estimate(ids[i], w.Start, w.End, fit, m.tries[ids[i]])
		envs[i].Kind = &engineKinds[i]
		out[i] = &envs[i]
	}
	if workers <= 1 || len(ids) < 64 {
		for i := range ids {
			one(i)
		}
	} else {
		var wg sync.WaitGroup
		chunk := (len(ids) + workers - 1) / workers
		for lo := 0; lo < len(ids); lo += chunk {
			hi := min(lo+chunk, len(ids))
			wg.Go(func() {
				for i := lo; i < hi; i++ {
					one(i)
				}
			})
		}
		wg.Wait()
	}
	pairs := make([]pair, 0, len(network))
	for k := range network {
		pairs = append(pairs, k)
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := strings.Compare(a.cluster, b.cluster); c != 0 {
			return c
		}
		return strings.Compare(a.engine, b.engine)
	})
	// Prompt sizes of requests whose events lack prompt_tokens, from
	// their engines' counters (summed in pair order: deterministic).
	var unsized map[string]promptFallback
	for _, k := range pairs {
		n := network[k]
		if n.unsized == 0 {
			continue
		}
		e := engines[k.engine]
		if e == nil {
			continue
		}
		if ppr := e.promptPerRequest(); ppr > 0 {
			if unsized == nil {
				unsized = map[string]promptFallback{}
			}
			f := unsized[k.cluster]
			f.n += float64(n.unsized)
			f.sum += float64(n.unsized) * ppr
			unsized[k.cluster] = f
		}
	}
	for _, c := range sortedKeys(demand) {
		e := &envs[len(out)]
		e.Kind = &schemas.Estimate_Demand{Demand: demandEstimate(c, w.Start, w.End, w.Slide, demand[c], unsized[c])}
		out = append(out, e)
	}
	nets := make([]schemas.NetworkEstimate, len(pairs))
	netKinds := make([]schemas.Estimate_Network, len(pairs))
	for i, k := range pairs {
		var ttft float64
		if e := engines[k.engine]; e != nil {
			ttft = e.MeanTTFTMs()
		}
		if networkEstimate(&nets[i], k.cluster, k.engine, w.End, network[k], ttft) {
			netKinds[i].Network = &nets[i]
			e := &envs[len(out)]
			e.Kind = &netKinds[i]
			out = append(out, e)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
