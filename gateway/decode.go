package gateway

import (
	"bytes"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// snapView is what applying a snapshot uses of it: its version and
// creation time, and its entry for the gateway's cluster. decodeView
// reads it from the wire without building the protobuf messages; any
// snapshot it does not read plainly goes through proto.Unmarshal.
type snapView struct {
	version uint64
	created int64
	found   bool // an entry for the cluster
	twice   bool // more than one
	cw      *clusterView
}

// clusterView is a snapshot's entry for one cluster, as applying it
// uses it.
type clusterView struct {
	engines []engineView
	shed    float64
	demand  float64 // demand_rps: the demand the cluster's weights were planned for
	peers   []string
	// raw is the entry's bytes as received (from decodeView), nil when
	// it came from a message; msg is the message, nil when decodeView
	// read the bytes.
	raw []byte
	msg *schemas.ClusterWeights
	// wire: read from the wire (by decodeView), so its strings are valid
	// UTF-8; not so from a message made in the process (InitialSnapshot).
	wire bool
	// models are the entry's plans per model (model_weights), nil when
	// it has none (models.go).
	models map[string]*modelView
}

// modelView is one ModelWeights, as routing uses it.
type modelView struct {
	engines []engineView
	shed    float64
	demand  float64 // demand_rps
}

// engineView is one EngineWeight, as applying it uses it.
type engineView struct {
	id, url         string
	weight          float64
	networkMs       float64 // explanation.network_ms
	cacheResidencyS float64 // explanation.cache_residency_s
	maxConcurrency  uint32  // explanation.max_concurrency
}

// message returns the entry as a message (decoding raw if needed), for
// comparing with proto.Equal.
func (c *clusterView) message() *schemas.ClusterWeights {
	if c.msg != nil || c.raw == nil {
		return c.msg
	}
	var m schemas.ClusterWeights
	if err := proto.Unmarshal(c.raw, &m); err != nil {
		return nil // not reached: raw decoded before
	}
	return &m
}

// sameAs reports whether c and o are equal entries as proto.Equal
// compares them: equal bytes are equal messages.
func (c *clusterView) sameAs(o *clusterView) bool {
	if c.raw != nil && o.raw != nil && bytes.Equal(c.raw, o.raw) {
		return true
	}
	a, b := c.message(), o.message()
	return a != nil && b != nil && proto.Equal(a, b)
}

// viewOf returns snap's view for cluster.
func viewOf(snap *schemas.WeightSnapshot, cluster string) snapView {
	v := snapView{version: snap.GetVersion(), created: snap.GetCreatedUnixMs()}
	for _, c := range snap.GetClusters() {
		if c.GetCluster() != cluster {
			continue
		}
		if v.found {
			v.twice = true
			continue
		}
		v.found = true
		v.cw = clusterViewOf(c)
	}
	return v
}

func clusterViewOf(c *schemas.ClusterWeights) *clusterView {
	cv := &clusterView{shed: c.GetShedFraction(), demand: c.GetDemandRps(), peers: c.GetPeerClusters(), msg: c,
		engines: make([]engineView, len(c.GetWeights()))}
	for i, w := range c.GetWeights() {
		cv.engines[i] = engineViewOf(w)
	}
	if mws := c.GetModelWeights(); len(mws) > 0 {
		cv.models = make(map[string]*modelView, len(mws))
		for _, mw := range mws {
			mv := &modelView{shed: mw.GetShedFraction(), demand: mw.GetDemandRps(), engines: make([]engineView, len(mw.GetWeights()))}
			for i, w := range mw.GetWeights() {
				mv.engines[i] = engineViewOf(w)
			}
			if _, dup := cv.models[mw.GetModel()]; dup {
				mv = nil // validateModels rejects the entry
			}
			cv.models[mw.GetModel()] = mv
		}
	}
	return cv
}

func engineViewOf(w *schemas.EngineWeight) engineView {
	x := w.GetExplanation()
	return engineView{id: w.GetEngineId(), url: w.GetEndpointUrl(), weight: w.GetWeight(),
		networkMs: x.GetNetworkMs(), cacheResidencyS: x.GetCacheResidencyS(), maxConcurrency: x.GetMaxConcurrency()}
}

// decodeView decodes b, a proto-binary WeightSnapshot, into its view for
// cluster, with the outcome of DecodeSnapshot then viewOf (the same
// view, the same error). It reads the wire format itself when b holds
// only the fields it knows, with their wire types, each message field
// once per message (clusters and weights aside) and valid UTF-8; anything
// else goes through DecodeSnapshot. When the cluster's entry has the
// bytes of prev's (the gateway's last applied entry, or nil), it is prev;
// else its strings equal to prev's at the same place are prev's, so a
// plan over the same engines allocates no string.
//
// It keeps proto.Unmarshal's limits: its nesting is the schema's (four
// messages deep; groups, the only other nesting, go to proto), it holds
// no more than the message does, and the number of engines is bounded
// by validateCluster, as before.
func decodeView(b []byte, cluster string, prev *clusterView) (snapView, error) {
	if prev != nil && !prev.wire {
		prev = nil // its strings are taken as checked
	}
	if v, ok := fastView(b, cluster, prev); ok {
		return v, nil
	}
	snap, err := DecodeSnapshot(b)
	if err != nil {
		return snapView{}, err
	}
	v := viewOf(snap, cluster)
	if v.cw != nil {
		v.cw.wire = true
	}
	return v, nil
}

// fastView is decodeView's own reading; ok false: b is not plain, use
// proto.Unmarshal.
func fastView(b []byte, cluster string, prev *clusterView) (v snapView, ok bool) {
	stats := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return v, false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2 || num == 3) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return v, false
			}
			b = b[n:]
			switch num {
			case 2:
				v.version = x
			case 3:
				v.created = int64(x)
			}
		case (num == 4 || num == 5 || num == 6 || num == 15 || num == 16) && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return v, false
			}
			b = b[n:]
			switch num {
			case 4:
				if !v.found && prev != nil && prev.raw != nil && bytes.Equal(m, prev.raw) {
					// The entry applied last, read plainly then: the
					// cluster's, and the same view.
					v.found, v.cw = true, prev
					continue
				}
				// Keep what is read only of the entry that starts with
				// the cluster's name (as proto writes it), unless found.
				keep := !v.found && string(firstName(m)) == cluster
				cv, name, ok := readCluster(m, prev, keep)
				if !ok {
					return v, false
				}
				if string(name) != cluster {
					continue
				}
				if v.found {
					v.twice = true
					continue
				}
				if !keep { // named further on: read it again to keep it
					cv, _, _ = readCluster(m, prev, true)
				}
				v.found, v.cw = true, cv
			case 5, 16:
				if !utf8.Valid(m) {
					return v, false
				}
			case 6:
				if stats || !plainStats(m) { // a second stats merges: leave it to proto
					return v, false
				}
				stats = true
			}
		default:
			return v, false
		}
	}
	return v, true
}

// firstName returns the cluster name that opens a ClusterWeights
// entry, or "" when it does not start with one.
func firstName(b []byte) []byte {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil
	}
	name, _ := protowire.ConsumeBytes(b[n:])
	return name
}

// readCluster reads a ClusterWeights and returns it (nil unless keep)
// and its cluster name (the last one, as proto's).
func readCluster(b []byte, prev *clusterView, keep bool) (cv *clusterView, name []byte, ok bool) {
	var prevEngines []engineView
	var prevPeers []string
	if keep {
		// A copy: b may be the caller's buffer, reused after the apply.
		cv = &clusterView{raw: bytes.Clone(b), wire: true}
		if prev != nil {
			prevEngines, prevPeers = prev.engines, prev.peers
		}
		cv.engines = make([]engineView, 0, max(len(prevEngines), 8))
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2 || num == 6) && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, nil, false
			}
			b = b[n:]
			switch num {
			case 1:
				if !utf8.Valid(m) {
					return nil, nil, false
				}
				name = m
			case 2:
				var e engineView
				var pe *engineView
				if keep && len(cv.engines) < len(prevEngines) {
					pe = &prevEngines[len(cv.engines)]
				}
				if !readEngine(m, &e, pe, keep) {
					return nil, nil, false
				}
				if keep {
					cv.engines = append(cv.engines, e)
				}
			case 6:
				k := 0
				if keep {
					k = len(cv.peers)
				}
				switch {
				case keep && k < len(prevPeers) && prevPeers[k] == string(m): // read before: valid UTF-8
					cv.peers = append(cv.peers, prevPeers[k])
				case !utf8.Valid(m):
					return nil, nil, false
				case keep:
					cv.peers = append(cv.peers, string(m))
				}
			}
		case (num == 3 || num == 4 || num == 5) && typ == protowire.Fixed64Type:
			x, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return nil, nil, false
			}
			b = b[n:]
			switch {
			case num == 3 && keep:
				cv.shed = math.Float64frombits(x)
			case num == 4 && keep:
				cv.demand = math.Float64frombits(x)
			}
		case num == 7 && typ == protowire.BytesType: // demand_estimate: checked, not kept
			m, n := protowire.ConsumeBytes(b)
			if n < 0 || !plainDemand(m) {
				return nil, nil, false
			}
			b = b[n:]
		default:
			return nil, nil, false
		}
	}
	return cv, name, true
}

// plainDemand reports whether b is a DemandEstimate of known fields with
// their wire types and a UTF-8 cluster name, which proto.Unmarshal would
// accept as it is.
func plainDemand(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 2 && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(m) {
				return false
			}
			b = b[n:]
		case (num >= 5 && num <= 8) && typ == protowire.Fixed64Type:
			_, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return false
			}
			b = b[n:]
		case (num == 1 || num == 3 || num == 4 || (num >= 9 && num <= 12)) && typ == protowire.VarintType:
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
		default:
			return false
		}
	}
	return true
}

// readEngine reads an EngineWeight into e, taking prev's strings where
// they are equal.
func readEngine(b []byte, e *engineView, prev *engineView, keep bool) bool {
	explained := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2 || num == 4) && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 1, 2:
				if !keep {
					if !utf8.Valid(m) {
						return false
					}
					continue
				}
				dst, old := &e.id, ""
				if num == 2 {
					dst = &e.url
				}
				if prev != nil {
					old = prev.id
					if num == 2 {
						old = prev.url
					}
				}
				switch {
				case old == string(m): // read before: valid UTF-8
					*dst = old
				case !utf8.Valid(m):
					return false
				default:
					*dst = string(m)
				}
			case 4:
				if explained { // a second explanation merges: leave it to proto
					return false
				}
				explained = true
				// Fields absent from the explanation are zero, as in a
				// message without one.
				if !readExplanation(m, e) {
					return false
				}
			}
		case (num == 3 || num == 5) && typ == protowire.Fixed64Type:
			x, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == 3 {
				e.weight = math.Float64frombits(x)
			}
		default:
			return false
		}
	}
	return true
}

// readExplanation reads the fields of an Explanation the gateway uses
// into e and checks the others.
func readExplanation(b []byte, e *engineView) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2 || num == 3 || num == 8) && typ == protowire.Fixed64Type:
			x, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 1:
				e.networkMs = math.Float64frombits(x)
			case 8:
				e.cacheResidencyS = math.Float64frombits(x)
			}
		case (num == 4 || num == 6) && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(m) {
				return false
			}
			b = b[n:]
		case (num == 5 || num == 7) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == 7 {
				e.maxConcurrency = uint32(x)
			}
		default:
			return false
		}
	}
	return true
}

// plainStats checks a SolveStats.
func plainStats(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(m) {
				return false
			}
			b = b[n:]
		case (num == 2 || num == 3 || num == 5 || num == 6) && typ == protowire.Fixed64Type:
			_, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return false
			}
			b = b[n:]
		case num == 4 && typ == protowire.VarintType:
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
		default:
			return false
		}
	}
	return true
}
