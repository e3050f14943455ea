package gateway

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/gateway/pick"
)

// applyView validates v, a snapshot's view for the gateway's cluster,
// and swaps it in (apply's work).
func (g *Gateway) applyView(v snapView) error {
	err := g.applyViewErr(v)
	if errors.Is(err, errSnapshotRepeated) {
		g.log.Debug("snapshot repeated", "version", v.version)
		return nil
	}
	if err != nil {
		g.m.rejected.WithLabelValues(g.cfg.cluster, rejectReason(err)).Inc()
		return err
	}
	g.m.applied.WithLabelValues(g.cfg.cluster).Inc()
	return nil
}

// applyViewErr checks v and routes on it. When the cluster's engines
// are those of the snapshot held (ids, endpoints, weights, explanations
// as the gateway uses them, bit for bit) and so is the shed fraction,
// the entry's checks passed already and are not run again; when the
// held table's round trips all came from its snapshot, the table (a
// function of those engines and the options alone) is the held one.
func (g *Gateway) applyViewErr(v snapView) error {
	if err := validateHead(v, g.cfg.cluster); err != nil {
		return err
	}
	old := g.cur.Load()
	held := old != nil && !old.fallback
	same := held && sameEngines(v.cw, old.cw)
	if !same {
		var checked *clusterView // passed validateCluster (snapshot.go)
		if held {
			checked = old.cw
		}
		if err := validateCluster(v.cw, checked); err != nil {
			return err
		}
		if err := checkRegistered(g.cfg.registry, v.cw); err != nil {
			return err
		}
	}
	if err := validateModels(v.cw); err != nil { // models.go
		return err
	}
	if held && v.version == old.version && v.cw.sameAs(old.cw) {
		// The version held, again (an optimizer restarted, or a replica
		// wrote the same plan): nothing to apply and nothing wrong.
		return errSnapshotRepeated
	}
	// The version held with another entry replaces it: a publish the
	// store refused can reach the gateway first (streams/snapshots.Watcher's
	// key subscription), and the store's value of that version follows.
	if held && v.version < old.version {
		return fmt.Errorf("%w: got %d, hold %d", ErrSnapshotStale, v.version, old.version)
	}
	rt := &routing{version: v.version, shed: v.cw.shed, created: time.UnixMilli(v.created), cw: v.cw,
		versionHeader: []string{strconv.FormatUint(v.version, 10)}, rttFromSnapshot: true, models: &modelTables{}}
	if v.created <= 0 {
		rt.created = g.cfg.now()
	}
	if same && old.rttFromSnapshot && old.table != nil {
		rt.table, rt.specs = old.table, old.specs
		g.admit.refresh(g.cfg.cluster, rt.table, g.cfg.now()) // admission.go
		g.outlier.SetClusterSize(rt.table.Len())
		g.cur.Store(rt)
		g.placeAdapters() // models.go
		g.log.Info("snapshot applied", "version", rt.version, "engines", len(v.cw.engines), "shed_fraction", rt.shed)
		return nil
	}
	specs := make([]pick.Spec, 0, len(v.cw.engines))
	for i := range v.cw.engines {
		w := &v.cw.engines[i]
		sp := pick.Spec{ID: w.id, URL: strings.TrimRight(w.url, "/"), Weight: w.weight,
			RTTms: w.networkMs, MaxConcurrency: int(w.maxConcurrency)}
		if !(sp.RTTms > 0) {
			rt.rttFromSnapshot = false
			sp.RTTms = 0
			if st, ok := g.pool.Lookup(sp.ID); ok {
				sp.RTTms = ms(g.engineRTT(st, sp.URL))
			}
		}
		specs = append(specs, sp)
	}
	rt.specs = specs
	t, err := g.pool.Build(specs, g.cfg.pick)
	switch {
	case errors.Is(err, pick.ErrNoEngines) && rt.shed >= 1-sumTolerance:
		rt.shed = 1 // the plan sheds everything
	case err != nil:
		return fmt.Errorf("%w: %w", ErrSnapshotInvalid, err)
	default:
		// Each engine's prefix-cache residency (how long the picker credits
		// prefixes sent to it); the table keeps the weights' order. An
		// engine listed at the same place in the held snapshot, in its
		// table, with the same residency has it already: only this loop
		// sets it (a kept table's engines have the residencies of the
		// apply that built it).
		ws := v.cw.engines
		var hw []engineView
		if held && old.table != nil {
			hw = old.cw.engines
		}
		for i, j := 0, 0; i < t.Len(); i++ {
			e := t.Engine(i)
			for j < len(ws) && ws[j].id != e.ID {
				j++
			}
			if j >= len(ws) {
				continue
			}
			if j < len(hw) && hw[j].id == e.ID && (g.cfg.pick.LeastLoaded || hw[j].weight != 0) &&
				math.Float64bits(hw[j].cacheResidencyS) == math.Float64bits(ws[j].cacheResidencyS) {
				continue
			}
			e.State.SetCacheResidency(ws[j].cacheResidencyS)
		}
		g.setLimits(t)
		rt.table = t
		g.outlier.SetClusterSize(t.Len())
	}
	g.cur.Store(rt)
	g.placeAdapters() // models.go
	g.log.Info("snapshot applied", "version", rt.version, "engines", len(specs), "shed_fraction", rt.shed)
	if rt.table != nil {
		for i := 0; i < rt.table.Len(); i++ {
			if rt.table.Engine(i).State.Down() {
				g.checkSoon() // routed again while the health checks hold it down
				break
			}
		}
	}
	return nil
}

// checkRegistered reports the first engine of cw that reg (nil: none)
// does not hold at its endpoint.
func checkRegistered(reg *fleet.Registry, cw *clusterView) error {
	if reg == nil {
		return nil
	}
	for i := range cw.engines {
		e := &cw.engines[i]
		if err := reg.Check(e.id, e.url); err != nil {
			return fmt.Errorf("%w: %w", ErrSnapshotUnregistered, err)
		}
	}
	return nil
}

// sameEngines reports whether a and b have the same engines and shed
// fraction, floats compared bit for bit.
func sameEngines(a, b *clusterView) bool {
	if a == b {
		return true
	}
	if b == nil || len(a.engines) != len(b.engines) || math.Float64bits(a.shed) != math.Float64bits(b.shed) {
		return false
	}
	for i := range a.engines {
		x, y := &a.engines[i], &b.engines[i]
		if x.id != y.id || x.url != y.url || x.maxConcurrency != y.maxConcurrency ||
			math.Float64bits(x.weight) != math.Float64bits(y.weight) ||
			math.Float64bits(x.networkMs) != math.Float64bits(y.networkMs) ||
			math.Float64bits(x.cacheResidencyS) != math.Float64bits(y.cacheResidencyS) {
			return false
		}
	}
	return true
}
