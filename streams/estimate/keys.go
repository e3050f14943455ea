// Package estimate turns engine signals and routing events into the
// estimates the optimizer consumes: per-engine capacity, health and latency
// profiles, per-cluster demand with a short-horizon forecast, and
// cluster→engine network latency. It is pure (no I/O, no clocks): the
// stream processor and the discrete-event simulator both feed it records
// and read estimates back.
//
// State lives in Panes (one slice of event time each, see streams/window);
// Compute merges the panes of one window into estimates. Every estimate is
// a deterministic function of its window's records, so replaying the same
// records gives byte-identical estimates (see Marshal).
package estimate

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Key prefixes of the estimates topic.
const (
	KindEngine  = "engine"
	KindDemand  = "demand"
	KindNetwork = "network"
)

// EngineKey is the estimates-topic key of an engine estimate.
func EngineKey(engine string) string { return KindEngine + "/" + engine }

// DemandKey is the estimates-topic key of a cluster's demand estimate.
func DemandKey(cluster string) string { return KindDemand + "/" + cluster }

// NetworkKey is the estimates-topic key of a cluster→engine network estimate.
func NetworkKey(cluster, engine string) string { return KindNetwork + "/" + cluster + "/" + engine }

// Key returns the estimates-topic key of e, or "" when e is empty.
func Key(e *schemas.Estimate) string {
	switch k := e.GetKind().(type) {
	case *schemas.Estimate_Engine:
		return EngineKey(k.Engine.GetEngineId())
	case *schemas.Estimate_Demand:
		return DemandKey(k.Demand.GetCluster())
	case *schemas.Estimate_Network:
		return NetworkKey(k.Network.GetCluster(), k.Network.GetEngineId())
	}
	return ""
}

// AppendKey appends Key(e) to b.
func AppendKey(b []byte, e *schemas.Estimate) []byte {
	switch k := e.GetKind().(type) {
	case *schemas.Estimate_Engine:
		return append(append(b, KindEngine+"/"...), k.Engine.GetEngineId()...)
	case *schemas.Estimate_Demand:
		return append(append(b, KindDemand+"/"...), k.Demand.GetCluster()...)
	case *schemas.Estimate_Network:
		b = append(append(b, KindNetwork+"/"...), k.Network.GetCluster()...)
		return append(append(b, '/'), k.Network.GetEngineId()...)
	}
	return b
}

// Marshal encodes e deterministically (same estimate, same bytes: those
// of proto.MarshalOptions{Deterministic: true}).
func Marshal(e *schemas.Estimate) ([]byte, error) { return AppendMarshal(nil, e) }

// AppendMarshal appends Marshal's encoding of e to b. It writes the wire
// format directly (no protobuf reflection) and falls back to
// proto.MarshalOptions{Deterministic: true} for anything unusual, so the
// bytes are always the same as proto's.
func AppendMarshal(b []byte, e *schemas.Estimate) ([]byte, error) {
	if out, ok := appendEstimate(b, e, nil); ok {
		return out, nil
	}
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, e)
	if err != nil {
		return b, fmt.Errorf("encoding estimate %q: %w", Key(e), err)
	}
	return out, nil
}

// ErrKey is returned by ParseKey for a key of no known kind.
var ErrKey = errors.New("unknown estimate key")

// ParseKey splits an estimates-topic key into its kind ("engine", "demand",
// "network") and its parts (engine id; cluster; cluster and engine id).
func ParseKey(key string) (kind string, parts []string, err error) {
	kind, rest, ok := strings.Cut(key, "/")
	if !ok || rest == "" {
		return "", nil, fmt.Errorf("%w: %q", ErrKey, key)
	}
	switch kind {
	case KindEngine, KindDemand:
		return kind, []string{rest}, nil
	case KindNetwork:
		c, e, ok := strings.Cut(rest, "/")
		if !ok || c == "" || e == "" {
			return "", nil, fmt.Errorf("%w: %q", ErrKey, key)
		}
		return kind, []string{c, e}, nil
	}
	return "", nil, fmt.Errorf("%w: %q", ErrKey, key)
}
