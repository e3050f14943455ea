package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/schemas"
)

// servedModels is what the engines' signals say each engine serves
// (EngineSignal.models: base models and LoRA adapters). An engine with no
// list is unknown and may get any model. It is immutable; the gateway
// swaps in a new one when a list changes.
type servedModels struct {
	byEngine map[string][]string // engine id -> sorted model ids
	listed   map[string]bool     // union of the lists
	ver      uint64
}

// serves reports whether engine id may get model (its list holds it, or
// it has none).
func (s *servedModels) serves(id, model string) bool {
	l, ok := s.byEngine[id]
	if !ok {
		return true
	}
	_, found := slices.BinarySearch(l, model)
	return found
}

// noteModels records signal s's model list for its engine and reports
// whether it changed what the gateway knows.
func (g *Gateway) noteModels(s *schemas.EngineSignal) bool {
	g.servedMu.Lock()
	defer g.servedMu.Unlock()
	cur := g.served.Load()
	id, l := s.GetEngineId(), s.GetModels()
	if old, ok := cur.byEngine[id]; ok == (len(l) > 0) && slices.Equal(old, l) {
		return false
	}
	next := &servedModels{byEngine: make(map[string][]string, len(cur.byEngine)+1), listed: map[string]bool{}, ver: cur.ver + 1}
	for e, ms := range cur.byEngine {
		if e != id {
			next.byEngine[e] = ms
		}
	}
	if len(l) > 0 {
		l = slices.Clone(l)
		slices.Sort(l)
		next.byEngine[id] = slices.Compact(l)
	}
	for _, ms := range next.byEngine {
		for _, m := range ms {
			next.listed[m] = true
		}
	}
	g.served.Store(next)
	return true
}

// modelTables are a routing's tables of the engines that serve one model
// (each a part of the routing's engines, sharing their states), built
// when a request first asks for the model under the current model lists.
// Only models the signals list or the snapshot plans get a table, so
// their number is bounded by what those list.
type modelTables struct {
	m sync.Map // model -> *modelTable
}

type modelTable struct {
	ver uint64      // servedModels.ver it was built under
	t   *pick.Table // nil: no engine serves the model
}

// tableFor returns the table to route a request for model on, and the
// snapshot's plan for the model if it has one: the table of the plan's
// engines for the model (those the signals say serve it) when the
// snapshot plans the model apart; else rt's own when every engine of it
// may serve the model (no lists known, no model named, all serve it, or
// no engine lists it), else the table of the engines that serve it; ok
// is false when the model is listed but none of rt's engines serves it.
func (g *Gateway) tableFor(rt *routing, model string) (t *pick.Table, mv *modelView, ok bool) {
	sm := g.served.Load()
	if rt.cw != nil && model != "" {
		mv = rt.cw.models[model]
	}
	if (len(sm.byEngine) == 0 && mv == nil) || model == "" || rt.table == nil || rt.models == nil {
		return rt.table, nil, rt.table != nil
	}
	if mv == nil && !sm.listed[model] {
		// No engine lists it: the engines judge (vLLM answers 404; SGLang
		// and TGI serve any model name).
		return rt.table, nil, true
	}
	key := model
	if v, hit := rt.models.m.Load(key); hit {
		if mt := v.(*modelTable); mt.ver == sm.ver {
			return mt.t, mv, mt.t != nil
		}
	}
	mt := &modelTable{ver: sm.ver, t: g.buildModelTable(rt, sm, key, mv)}
	rt.models.m.Store(key, mt)
	return mt.t, mv, mt.t != nil
}

// buildModelTable returns the table of the engines that serve model
// key: the engines of mv, the
// snapshot's plan for the model, with its weights, when there is one;
// else rt's, with the plan's weights. Either way only engines the
// signals do not rule out, and when the weights give all of them none,
// with equal weights (they are the only engines that serve it). nil when
// there is no such engine.
func (g *Gateway) buildModelTable(rt *routing, sm *servedModels, key string, mv *modelView) *pick.Table {
	specs := rt.specs
	if mv != nil {
		specs = g.modelSpecs(mv)
	}
	var part []pick.Spec
	all, sum := mv == nil, 0.0
	for _, sp := range specs {
		if !sm.serves(sp.ID, key) {
			all = false
			continue
		}
		part = append(part, sp)
		sum += sp.Weight
	}
	switch {
	case len(part) == 0:
		return nil
	case all:
		return rt.table
	case !(sum > 0):
		for i := range part {
			part[i].Weight = 1
		}
	}
	opt := g.cfg.pick
	opt.LeastLoaded = opt.LeastLoaded || rt.fallback
	t, err := g.pool.BuildPart(part, opt)
	if err != nil {
		g.log.Warn("table of a model's engines", "model", key, "engines", len(part), "err", err)
		return nil
	}
	return t
}

// modelSpecs returns the engines of a model's plan as the picker takes
// them (as apply does for the cluster's).
func (g *Gateway) modelSpecs(mv *modelView) []pick.Spec {
	specs := make([]pick.Spec, 0, len(mv.engines))
	for i := range mv.engines {
		w := &mv.engines[i]
		sp := pick.Spec{ID: w.id, URL: strings.TrimRight(w.url, "/"), Weight: w.weight, RTTms: w.networkMs, MaxConcurrency: int(w.maxConcurrency)}
		if !(sp.RTTms > 0) {
			sp.RTTms = 0
			if st, ok := g.pool.Lookup(sp.ID); ok {
				sp.RTTms = ms(g.engineRTT(st, sp.URL))
			}
		}
		specs = append(specs, sp)
	}
	return specs
}

// listedModels returns the union of the model lists of rt's engines,
// sorted, when the signals gave a list for every one of them.
func (g *Gateway) listedModels(rt *routing) ([]string, bool) {
	sm := g.served.Load()
	if len(sm.byEngine) == 0 || len(rt.specs) == 0 {
		return nil, false
	}
	seen := map[string]bool{}
	for _, sp := range rt.specs {
		l, ok := sm.byEngine[sp.ID]
		if !ok {
			return nil, false
		}
		for _, m := range l {
			seen[m] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for m := range seen {
		ids = append(ids, m)
	}
	slices.Sort(ids)
	return ids, true
}

// writeModelList writes OpenAI's model list of ids.
func writeModelList(w http.ResponseWriter, ids []string) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: make([]model, len(ids))}
	for i, id := range ids {
		list.Data[i] = model{ID: id, Object: "model", OwnedBy: "switchyard"}
	}
	b, err := json.Marshal(list)
	if err != nil {
		writeError(w, http.StatusInternalServerError, typeServer, "internal_error", "", "encoding the model list")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// setAdapters hands the picker what signal s says of engine st's LoRA
// adapters (its base model, the adapters with requests on it, max_lora),
// so that a request for an adapter prefers engines where it is loaded,
// and reports whether its base model or max_lora changed.
func (g *Gateway) setAdapters(st *pick.State, s *schemas.EngineSignal) bool {
	var base uint64
	if m := s.GetModel(); m != "" {
		base = hashkey.String(m)
	}
	var active []uint64
	if n := len(s.GetActiveAdapters()); n > 0 {
		active = make([]uint64, 0, min(n, schemas.MaxSignalModels))
		for _, a := range s.GetActiveAdapters()[:min(n, schemas.MaxSignalModels)] {
			active = append(active, hashkey.String(a))
		}
	}
	return g.pool.SetAdapters(st, base, active, int(min(s.GetMaxLora(), schemas.MaxSignalMaxLoRA)), g.cfg.now().UnixMilli())
}

// placeAdapters has the picker assign each LoRA adapter its homes
// (pick/adapterhomes.go) among the engines of the routing in force, with
// their planned shares and the models their signals list. It runs when
// a snapshot or static list is applied (the adapters' request rates are
// taken anew then) and when an engine's models or adapter slots change.
func (g *Gateway) placeAdapters() {
	rt := g.cur.Load()
	if rt == nil {
		return
	}
	sm := g.served.Load()
	engs := make([]pick.AdapterEngine, 0, len(rt.specs))
	for _, sp := range rt.specs {
		l := sm.byEngine[sp.ID]
		st, ok := g.pool.Lookup(sp.ID)
		if !ok || len(l) == 0 {
			continue
		}
		hs := make([]uint64, len(l))
		for i, m := range l {
			hs[i] = modelHash(m)
		}
		engs = append(engs, pick.AdapterEngine{State: st, Weight: sp.Weight, Serves: hs})
	}
	if planned := plannedRPS(rt.cw); planned != nil {
		for i := range engs {
			engs[i].Weight = planned[engs[i].State.ID()]
		}
	}
	homes, changed := g.pool.PlaceAdapters(engs, g.cfg.now().UnixMilli())
	if !changed {
		return
	}
	// Logged by name: which adapters each engine is to keep loaded.
	names := map[uint64]string{}
	for _, l := range sm.byEngine {
		for _, m := range l {
			names[modelHash(m)] = m
		}
	}
	attrs := make([]any, 0, 2*len(homes))
	for k, hs := range homes {
		if hs == nil {
			continue
		}
		ns := make([]string, len(hs))
		for i, h := range hs {
			ns[i] = names[h]
		}
		slices.Sort(ns)
		attrs = append(attrs, engs[k].State.ID(), strings.Join(ns, ","))
	}
	g.log.Info("adapter homes", attrs...)
}

// modelHash is the picker's hash of a request's model (0: none named).
func modelHash(model string) uint64 {
	if model == "" {
		return 0
	}
	return hashkey.String(model)
}

// plannedRPS returns each engine's planned requests per second in cw when
// it plans models apart (nil otherwise): the cluster weights at the
// cluster's demand plus each model plan's weights at the model's. Only
// then are an engine's weights in the plan of the requests it is to take
// (a model planned apart is in no cluster weight: with every model
// planned apart the cluster's weights are an idle spread, or all zero on
// the engines those models use), so the adapter homes' shares come from
// it (PlaceAdapters compares an engine's share with an adapter's share of
// all requests).
func plannedRPS(cw *clusterView) map[string]float64 {
	if cw == nil || len(cw.models) == 0 {
		return nil
	}
	out := map[string]float64{}
	var total float64
	add := func(es []engineView, demand float64) {
		if !(demand > 0) || math.IsInf(demand, 1) {
			return
		}
		for _, e := range es {
			if w := e.weight * demand; w > 0 && !math.IsInf(w, 1) {
				out[e.id] += w
				total += w
			}
		}
	}
	add(cw.engines, cw.demand)
	for _, mv := range cw.models {
		if mv != nil {
			add(mv.engines, mv.demand)
		}
	}
	if !(total > 0) || math.IsInf(total, 1) {
		return nil
	}
	return out
}

// validateModels checks an entry's plans per model: model ids of 1-256
// bytes, each once; every engine one of the entry's own, at the same
// endpoint; weights in [0,1] that with the shed fraction add up to 1.
func validateModels(cw *clusterView) error {
	if len(cw.models) == 0 {
		return nil
	}
	if len(cw.models) > schemas.MaxSignalModels*4 {
		return fmt.Errorf("%w: %d model plans", ErrSnapshotInvalid, len(cw.models))
	}
	url := make(map[string]string, len(cw.engines))
	for i := range cw.engines {
		url[cw.engines[i].id] = cw.engines[i].url
	}
	for m, mv := range cw.models {
		if m == "" || len(m) > schemas.MaxModelIDBytes || mv == nil {
			return fmt.Errorf("%w: model plan %.40q empty, too long or twice", ErrSnapshotInvalid, m)
		}
		if !(mv.shed >= 0 && mv.shed <= 1) {
			return fmt.Errorf("%w: model %q shed fraction %v", ErrSnapshotInvalid, m, mv.shed)
		}
		sum := 0.0
		seen := make(map[string]bool, len(mv.engines))
		for i := range mv.engines {
			w := &mv.engines[i]
			if seen[w.id] {
				return fmt.Errorf("%w: model %q: engine %q listed twice", ErrSnapshotInvalid, m, w.id)
			}
			seen[w.id] = true
			if u, ok := url[w.id]; !ok || u != w.url {
				return fmt.Errorf("%w: model %q: engine %q is not the entry's", ErrSnapshotInvalid, m, w.id)
			}
			if !(w.weight >= 0 && w.weight <= 1) {
				return fmt.Errorf("%w: model %q: engine %q weight %v", ErrSnapshotInvalid, m, w.id, w.weight)
			}
			sum += w.weight
		}
		if math.Abs(sum+mv.shed-1) > sumTolerance {
			return fmt.Errorf("%w: model %q: weights %.6f + shed %.6f != 1", ErrSnapshotInvalid, m, sum, mv.shed)
		}
	}
	return nil
}
