package estimate

// Absorb folds o, the same slice of event time read from other input
// partitions, into p, so that partial panes kept per input partition
// (several processor instances, each owning some partitions) combine into
// the pane one processor reading every partition would hold.
//
// The result is exact whatever the order panes are absorbed in, given
// the topics' keys: an engine's signals are keyed by engine id, so an
// engine is in one partition's pane and is copied; per-cluster demand
// sums counts and integer token counts (exact in float64 below 2^53)
// and network sums are fixed point; attempt counts (Tries) are integers. An engine found in two partial panes
// (signals produced with another key) is merged with Engine.Merge in the
// order of the calls, which is deterministic but may differ from a
// single reader's in the last bits.
func (p *Pane) Absorb(o *Pane) {
	if o == nil {
		return
	}
	for _, id := range sortedKeys(o.engines) {
		e := o.engines[id]
		if m := p.engines[id]; m != nil {
			m.Merge(e)
			continue
		}
		c := *e
		p.engines[id] = &c
	}
	for name, oc := range o.clusters {
		c := p.clusters[name]
		if c == nil {
			c = &clusterPane{network: make(map[string]*Network, len(oc.network))}
			p.clusters[name] = c
		}
		c.demand.merge(&oc.demand)
		for id, n := range oc.network {
			m := c.network[id]
			if m == nil {
				m = &Network{}
				c.network[id] = m
				p.networks++
			}
			m.merge(n)
		}
	}
	for id, t := range o.tries {
		m := p.tries[id]
		if m == nil {
			m = &Tries{}
			p.tries[id] = m
		}
		m.merge(t)
	}
	p.last, p.lastCluster = nil, ""
}

// Clone returns a copy of p that shares nothing with it.
func (p *Pane) Clone() *Pane {
	c := NewPane()
	c.Absorb(p)
	return c
}

func (d *Demand) merge(o *Demand) {
	d.requests += o.requests
	d.tokened += o.tokened
	d.promptSum += o.promptSum
	d.outputSum += o.outputSum
	d.prompted += o.prompted
	d.rejected += o.rejected
	d.shedSnapshot += o.shedSnapshot
	d.shedAdmission += o.shedAdmission
	for _, m := range sortedKeys(o.models) {
		d.addModel(m, o.models[m])
	}
}
