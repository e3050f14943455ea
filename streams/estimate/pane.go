package estimate

import (
	"sort"
	"sync"

	"github.com/switchyard-llm/switchyard/schemas"
)

type pair struct{ cluster, engine string }

// Pane is the state of one slice of event time: per-engine, per-cluster
// and per-(cluster, engine) accumulators. Its size grows with the number
// of entities, not records.
type Pane struct {
	engines map[string]*Engine
	demand  map[string]*Demand
	network map[pair]*Network
	// The last demand accumulator used (records come in runs per
	// cluster).
	lastCluster string
	lastDemand  *Demand
}

// NewPane returns an empty pane.
func NewPane() *Pane {
	return &Pane{engines: map[string]*Engine{}, demand: map[string]*Demand{}, network: map[pair]*Network{}}
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
	d := p.lastDemand
	if d == nil || ev.GetCluster() != p.lastCluster {
		if d = p.demand[ev.GetCluster()]; d == nil {
			d = &Demand{}
			p.demand[ev.GetCluster()] = d
		}
		p.lastCluster, p.lastDemand = ev.GetCluster(), d
	}
	d.Add(ev)
	if ev.GetEngineId() == "" {
		return
	}
	k := pair{ev.GetCluster(), ev.GetEngineId()}
	n := p.network[k]
	if n == nil {
		n = &Network{}
		p.network[k] = n
	}
	n.Add(ev)
}

// Entities is the number of accumulators the pane holds.
func (p *Pane) Entities() int { return len(p.engines) + len(p.demand) + len(p.network) }

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
}

// Merge merges the window's panes (the cheap part of Compute).
func Merge(w Window) *Merged {
	engines := map[string]*Engine{}
	network := map[pair]*Network{}
	demand := map[string][]*Demand{}
	np := int((w.End - w.Start) / max(w.Slide, 1))
	for i, p := range w.Panes {
		for id, e := range p.engines {
			m := engines[id]
			if m == nil {
				m = &Engine{}
				engines[id] = m
			}
			m.Merge(e)
		}
		for k, n := range p.network {
			m := network[k]
			if m == nil {
				m = &Network{}
				network[k] = m
			}
			m.merge(n)
		}
		idx := 0
		if i < len(w.PaneStarts) && w.Slide > 0 {
			idx = int((w.PaneStarts[i] - w.Start) / w.Slide)
		}
		if idx < 0 || idx >= np {
			continue
		}
		for c, d := range p.demand {
			s := demand[c]
			if s == nil {
				s = make([]*Demand, np)
				demand[c] = s
			}
			dc := *d
			s[idx] = &dc
		}
	}
	return &Merged{start: w.Start, end: w.End, slide: w.Slide, engines: engines, network: network, demand: demand}
}

// Estimates computes the merged window's estimates (see Compute), with
// the per-engine work spread over up to workers goroutines.
func (m *Merged) Estimates(fit Fitter, workers int) []*schemas.Estimate {
	engines, network, demand := m.engines, m.network, m.demand
	w := Window{Start: m.start, End: m.end, Slide: m.slide}
	ids := sortedKeys(engines)
	out := make([]*schemas.Estimate, len(ids), len(ids)+len(demand)+len(network))
	one := func(i int) {
		out[i] = &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: engines[ids[i]].Estimate(ids[i], w.Start, w.End, fit)}}
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
	for _, c := range sortedKeys(demand) {
		out = append(out, &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: demandEstimate(c, w.Start, w.End, w.Slide, demand[c])}})
	}
	pairs := make([]pair, 0, len(network))
	for k := range network {
		pairs = append(pairs, k)
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].cluster != pairs[j].cluster {
			return pairs[i].cluster < pairs[j].cluster
		}
		return pairs[i].engine < pairs[j].engine
	})
	for _, k := range pairs {
		var ttft float64
		if e := engines[k.engine]; e != nil {
			ttft = e.MeanTTFTMs()
		}
		if n := networkEstimate(k.cluster, k.engine, w.End, network[k], ttft); n != nil {
			out = append(out, &schemas.Estimate{Kind: &schemas.Estimate_Network{Network: n}})
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
