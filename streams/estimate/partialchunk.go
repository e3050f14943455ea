package estimate

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// PaneParts encodes p as one or more AppendPane encodings of disjoint
// parts of p, so that a pane too large for one Kafka record travels in
// several: each part is at most about maxBytes (a part holds at least one
// accumulator, so one larger than maxBytes gets a part of its own).
// Accumulators are taken in key order, so equal panes give equal parts.
// A cluster whose network accumulators do not fit in one part is split:
// its first part carries its demand, the later ones zero demand. An empty
// pane gives one part. Join puts the decoded parts back together into the
// pane, exactly.
func PaneParts(p *Pane, maxBytes int) [][]byte {
	var (
		parts   [][]byte
		cur     panePart
		scratch []byte
	)
	flush := func() {
		parts = append(parts, cur.encode(p))
		cur = panePart{}
	}
	// fits makes room for n more bytes: a new part unless the current
	// one is empty or has room.
	fits := func(n int) {
		if cur.size+n > maxBytes && !cur.empty() {
			flush()
		}
		cur.size += n
	}
	for _, id := range sortedKeys(p.engines) {
		scratch = appendPaneEngine(appendPaneString(scratch[:0], id), p.engines[id])
		fits(len(scratch))
		cur.engines = append(cur.engines, id)
	}
	var zero Demand
	for _, name := range sortedKeys(p.clusters) {
		c := p.clusters[name]
		// The cluster's name, demand and network count.
		head := binaryMaxVarint + len(name) + 5*binaryMaxVarint + 4*8 + binaryMaxVarint
		for m := range c.demand.models {
			head += 2*binaryMaxVarint + len(m)
		}
		fits(head)
		cur.clusters = append(cur.clusters, partCluster{name: name, demand: &c.demand, c: c})
		ids := make([]string, 0, len(c.network))
		for id := range c.network {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		from := 0
		for i, id := range ids {
			need := binaryMaxVarint + len(id) + 3*binaryMaxVarint + 4*5
			if cur.size+need > maxBytes {
				cur.clusters[len(cur.clusters)-1].ids = ids[from:i]
				flush()
				from = i
				cur.size += head
				// Zero demand: the first part has it.
				cur.clusters = append(cur.clusters, partCluster{name: name, demand: &zero, c: c})
			}
			cur.size += need
		}
		cur.clusters[len(cur.clusters)-1].ids = ids[from:]
	}
	for _, id := range sortedKeys(p.tries) {
		fits(binaryMaxVarint + len(id) + 2*5)
		cur.tries = append(cur.tries, id)
	}
	if !cur.empty() || len(parts) == 0 {
		flush()
	}
	return parts
}

// panePart is the accumulators of one part, in key order, and its size
// estimate.
type panePart struct {
	engines  []string
	clusters []partCluster
	tries    []string
	size     int
}

type partCluster struct {
	name   string
	demand *Demand
	c      *clusterPane
	ids    []string // its network accumulators in the part
}

func (pp *panePart) empty() bool {
	return len(pp.engines) == 0 && len(pp.clusters) == 0 && len(pp.tries) == 0
}

// encode writes the part as AppendPane writes a pane holding only its
// accumulators.
func (pp *panePart) encode(p *Pane) []byte {
	buf := make([]byte, 0, pp.size+1+3*binaryMaxVarint)
	buf = append(buf, paneCodecVersion)
	buf = binary.AppendUvarint(buf, uint64(len(pp.engines)))
	for _, id := range pp.engines {
		buf = appendPaneString(buf, id)
		buf = appendPaneEngine(buf, p.engines[id])
	}
	buf = binary.AppendUvarint(buf, uint64(len(pp.clusters)))
	for _, c := range pp.clusters {
		buf = appendPaneCluster(buf, c.name, c.demand, c.c.network, c.ids)
	}
	buf = binary.AppendUvarint(buf, uint64(len(pp.tries)))
	for _, id := range pp.tries {
		buf = appendPaneTries(buf, id, p.tries[id])
	}
	return buf
}

// binaryMaxVarint bounds a uvarint's bytes for the sizes PaneParts
// estimates (counts and lengths below 2^35, int64 sums).
const binaryMaxVarint = 10

// Join adds o, another part of the pane p is being rebuilt from (see
// PaneParts), to p: accumulators are moved, not merged, so the result is
// the pane the parts were cut from, bit for bit. An engine, network
// accumulator or attempt count in both is an error, as is a cluster in
// both with demand in o (only a split cluster's first part has demand).
// o must not be used afterwards.
func (p *Pane) Join(o *Pane) error {
	for id := range o.engines {
		if _, dup := p.engines[id]; dup {
			return fmt.Errorf("%w: engine %q in two parts", ErrPaneEncoding, id)
		}
	}
	for name, oc := range o.clusters {
		c := p.clusters[name]
		if c == nil {
			continue
		}
		if !oc.demand.empty() {
			return fmt.Errorf("%w: cluster %q with demand in two parts", ErrPaneEncoding, name)
		}
		for id := range oc.network {
			if _, dup := c.network[id]; dup {
				return fmt.Errorf("%w: network %q/%q in two parts", ErrPaneEncoding, name, id)
			}
		}
	}
	for id := range o.tries {
		if _, dup := p.tries[id]; dup {
			return fmt.Errorf("%w: tries %q in two parts", ErrPaneEncoding, id)
		}
	}
	for id, e := range o.engines {
		p.engines[id] = e
	}
	for name, oc := range o.clusters {
		c := p.clusters[name]
		if c == nil {
			p.clusters[name] = oc
			p.networks += len(oc.network)
			continue
		}
		for id, n := range oc.network {
			c.network[id] = n
			p.networks++
		}
	}
	for id, t := range o.tries {
		p.tries[id] = t
	}
	p.last, p.lastCluster = nil, ""
	return nil
}
