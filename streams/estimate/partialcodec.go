package estimate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/switchyard-llm/switchyard/internal/wire"
	"github.com/switchyard-llm/switchyard/schemas"
)

// paneCodecVersion is the first byte of an encoded pane. Version 2
// added the attempt counts (Tries) at the end, version 3 each engine's
// KV-cache capacity after its sums, version 4 each cluster's rejected
// requests after its demand sums, version 5 each cluster's requests by
// model after those and each engine's models after its profiles;
// DecodePane still reads versions 1 (a pane without attempts) to 4, so
// partials written before an upgrade are not lost.
const (
	paneCodecVersion   = 5
	paneCodecVersionV1 = 1
)

// ErrPaneEncoding is returned by DecodePane for bytes that are not an
// encoded pane.
var ErrPaneEncoding = errors.New("invalid pane encoding")

// AppendPane appends p's exact state to buf, so that a pane handed from
// one processor instance to another (partitioned processing, see
// Pane.Absorb) decodes to the same estimates: floats are kept bit for
// bit. Entities are written in key order, so equal panes encode to equal
// bytes.
func AppendPane(buf []byte, p *Pane) []byte {
	buf = append(buf, paneCodecVersion)
	buf = binary.AppendUvarint(buf, uint64(len(p.engines)))
	for _, id := range sortedKeys(p.engines) {
		buf = appendPaneString(buf, id)
		buf = appendPaneEngine(buf, p.engines[id])
	}
	buf = binary.AppendUvarint(buf, uint64(len(p.clusters)))
	for _, name := range sortedKeys(p.clusters) {
		c := p.clusters[name]
		ids := make([]string, 0, len(c.network))
		for id := range c.network {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		buf = appendPaneCluster(buf, name, &c.demand, c.network, ids)
	}
	buf = binary.AppendUvarint(buf, uint64(len(p.tries)))
	for _, id := range sortedKeys(p.tries) {
		buf = appendPaneTries(buf, id, p.tries[id])
	}
	return buf
}

// appendPaneCluster appends a cluster's name, demand and the network
// accumulators of ids, in that order.
func appendPaneCluster(buf []byte, name string, d *Demand, network map[string]*Network, ids []string) []byte {
	buf = appendPaneString(buf, name)
	buf = binary.AppendUvarint(buf, uint64(d.requests))
	buf = appendPaneFloats(buf, d.tokened, d.promptSum, d.outputSum, d.prompted)
	for _, v := range []uint32{d.rejected, d.shedSnapshot, d.shedAdmission} {
		buf = binary.AppendUvarint(buf, uint64(v))
	}
	buf = binary.AppendUvarint(buf, uint64(len(d.models)))
	for _, m := range sortedKeys(d.models) {
		buf = appendPaneString(buf, m)
		buf = binary.AppendUvarint(buf, uint64(d.models[m]))
	}
	buf = binary.AppendUvarint(buf, uint64(len(ids)))
	for _, id := range ids {
		n := network[id]
		buf = appendPaneString(buf, id)
		buf = binary.AppendVarint(buf, n.rttSum)
		buf = binary.AppendVarint(buf, n.diffSum)
		buf = binary.AppendVarint(buf, n.ttftSum)
		for _, v := range []uint32{n.rttN, n.diffN, n.ttftN, n.unsized} {
			buf = binary.AppendUvarint(buf, uint64(v))
		}
	}
	return buf
}

func appendPaneTries(buf []byte, id string, t *Tries) []byte {
	buf = appendPaneString(buf, id)
	buf = binary.AppendUvarint(buf, uint64(t.attempts))
	return binary.AppendUvarint(buf, uint64(t.failures))
}

func appendPaneEngine(buf []byte, e *Engine) []byte {
	buf = binary.AppendVarint(buf, e.lastMs)
	for _, s := range []string{e.endpoint, e.region, e.gpuClass, e.model, e.maxBatchSource} {
		buf = appendPaneString(buf, s)
	}
	for _, v := range []uint32{e.ready, uint32(e.health), e.maxBatch, e.signals, e.unhealthy, e.waitN} {
		buf = binary.AppendUvarint(buf, uint64(v))
	}
	buf = appendPaneFloats(buf, e.interval, e.finished, e.prompt, e.gen, e.running, e.waiting, e.kv, e.util,
		e.hits, e.queries, e.ttftCount, e.ttftSumMs, e.tbotCount, e.tbotSumMs, e.runSum, e.runMax, e.waitRun, e.waitRunMx,
		e.kvCap)
	for _, b := range []*bins{&e.ttft, &e.tbot} {
		for _, x := range b {
			buf = appendPaneFloats(buf, x.w, x.wu, x.wl)
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(e.models)))
	for _, m := range e.models {
		buf = appendPaneString(buf, m)
	}
	return buf
}

func appendPaneString(buf []byte, s string) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(s))), s...)
}

func appendPaneFloats(buf []byte, fs ...float64) []byte {
	for _, f := range fs {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(f))
	}
	return buf
}

// paneReader reads an encoded pane; the first error sticks.
type paneReader struct{ wire.Reader }

func (r *paneReader) u32(what string) uint32 {
	v := r.Uvarint(what)
	if v > math.MaxUint32 {
		r.Fail(what)
		return 0
	}
	return uint32(v)
}

func (r *paneReader) str(what string) string {
	n := r.Uvarint(what)
	if n > uint64(len(r.B)) {
		r.Fail(what)
		return ""
	}
	s := string(r.B[:n])
	r.B = r.B[n:]
	return s
}

func (r *paneReader) floats(what string, fs ...*float64) {
	for _, f := range fs {
		if len(r.B) < 8 {
			r.Fail(what)
			return
		}
		*f = math.Float64frombits(binary.LittleEndian.Uint64(r.B))
		r.B = r.B[8:]
	}
}

// count reads a count of entries of at least min bytes each.
func (r *paneReader) count(what string, minBytes int) int {
	n := r.Uvarint(what)
	if n > uint64(len(r.B)/minBytes) {
		r.Fail(what)
		return 0
	}
	return int(n)
}

// DecodePane decodes a pane encoded by AppendPane.
func DecodePane(b []byte) (*Pane, error) {
	if len(b) == 0 || b[0] < paneCodecVersionV1 || b[0] > paneCodecVersion {
		return nil, fmt.Errorf("%w: unknown version", ErrPaneEncoding)
	}
	r := &paneReader{wire.Reader{B: b[1:], Malformed: ErrPaneEncoding}}
	p := NewPane()
	for range r.count("engine count", 2) {
		id := r.str("engine id")
		e := &Engine{}
		e.lastMs = r.Varint("engine time")
		for _, s := range []*string{&e.endpoint, &e.region, &e.gpuClass, &e.model, &e.maxBatchSource} {
			*s = r.str("engine label")
		}
		var health uint32
		for _, v := range []*uint32{&e.ready, &health, &e.maxBatch, &e.signals, &e.unhealthy, &e.waitN} {
			*v = r.u32("engine count field")
		}
		e.health = schemas.Health(health)
		r.floats("engine sums", &e.interval, &e.finished, &e.prompt, &e.gen, &e.running, &e.waiting, &e.kv, &e.util,
			&e.hits, &e.queries, &e.ttftCount, &e.ttftSumMs, &e.tbotCount, &e.tbotSumMs, &e.runSum, &e.runMax, &e.waitRun, &e.waitRunMx)
		if b[0] >= 3 {
			r.floats("engine KV capacity", &e.kvCap)
		}
		for _, bs := range []*bins{&e.ttft, &e.tbot} {
			for i := range bs {
				r.floats("engine profile", &bs[i].w, &bs[i].wu, &bs[i].wl)
			}
		}
		if b[0] >= 5 {
			n := r.count("engine model count", 1)
			if n > schemas.MaxSignalModels {
				return nil, fmt.Errorf("%w: engine %q with %d models", ErrPaneEncoding, id, n)
			}
			for range n {
				e.models = append(e.models, r.str("engine model"))
			}
		}
		if r.Err != nil {
			return nil, r.Err
		}
		if _, dup := p.engines[id]; dup {
			return nil, fmt.Errorf("%w: engine %q twice", ErrPaneEncoding, id)
		}
		p.engines[id] = e
	}
	for range r.count("cluster count", 2) {
		name := r.str("cluster")
		c := &clusterPane{network: map[string]*Network{}}
		c.demand.requests = r.u32("demand")
		r.floats("demand", &c.demand.tokened, &c.demand.promptSum, &c.demand.outputSum, &c.demand.prompted)
		if b[0] >= 4 {
			c.demand.rejected, c.demand.shedSnapshot, c.demand.shedAdmission = r.u32("rejected"), r.u32("rejected"), r.u32("rejected")
		}
		if b[0] >= 5 {
			for range r.count("model count", 2) {
				m := r.str("model")
				n := r.u32("model requests")
				if _, dup := c.demand.models[m]; dup || r.Err != nil {
					return nil, fmt.Errorf("%w: model %q of cluster %q twice or cut", ErrPaneEncoding, m, name)
				}
				c.demand.addModel(m, n)
			}
		}
		for range r.count("network count", 2) {
			id := r.str("network engine")
			n := &Network{rttSum: r.Varint("network"), diffSum: r.Varint("network"), ttftSum: r.Varint("network")}
			n.rttN, n.diffN, n.ttftN, n.unsized = r.u32("network"), r.u32("network"), r.u32("network"), r.u32("network")
			if r.Err != nil {
				return nil, r.Err
			}
			if _, dup := c.network[id]; dup {
				return nil, fmt.Errorf("%w: network %q/%q twice", ErrPaneEncoding, name, id)
			}
			c.network[id] = n
			p.networks++
		}
		if r.Err != nil {
			return nil, r.Err
		}
		if _, dup := p.clusters[name]; dup {
			return nil, fmt.Errorf("%w: cluster %q twice", ErrPaneEncoding, name)
		}
		p.clusters[name] = c
	}
	if b[0] >= 2 {
		for range r.count("tries count", 3) {
			id := r.str("tries engine")
			t := &Tries{attempts: r.u32("tries"), failures: r.u32("tries")}
			if r.Err != nil {
				return nil, r.Err
			}
			if _, dup := p.tries[id]; dup {
				return nil, fmt.Errorf("%w: tries %q twice", ErrPaneEncoding, id)
			}
			p.tries[id] = t
		}
	}
	if r.Err != nil {
		return nil, r.Err
	}
	if len(r.B) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrPaneEncoding, len(r.B))
	}
	return p, nil
}
