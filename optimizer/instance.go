package optimizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Instance is one optimisation problem. Its JSON form is the instance
// format read by `switchyard solve`.
type Instance struct {
	// MaxUtilization caps every engine's load at this fraction of its
	// capacity, in (0, 1].
	MaxUtilization float64 `json:"max_utilization"`
	// ChurnWeight is the cost in ms of moving one rps of traffic away from
	// (or onto) an engine relative to Previous.
	ChurnWeight float64                       `json:"churn_weight"`
	Clusters    []Cluster                     `json:"clusters"`
	Engines     []Engine                      `json:"engines"`
	RTTms       map[string]map[string]float64 `json:"rtt_ms"`
	// Previous holds the previous weights per cluster and engine; optional.
	Previous map[string]map[string]float64 `json:"previous,omitempty"`
}

// Cluster is a source of demand (a gateway cluster).
type Cluster struct {
	ID        string  `json:"id"`
	DemandRPS float64 `json:"demand_rps"`
}

// Engine is a serving engine. LatencyMs is a list of [utilization, ms]
// points interpolated linearly; it must be convex and non-decreasing.
// Beyond the last point the last segment is extended; before the first
// point the first latency is held constant.
type Engine struct {
	ID          string       `json:"id"`
	CapacityRPS float64      `json:"capacity_rps"`
	Healthy     bool         `json:"healthy"`
	LatencyMs   [][2]float64 `json:"latency_ms"`
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid instance")

// Limits on instance size, so a hostile input cannot exhaust memory.
const (
	MaxClusters      = 4096
	MaxEngines       = 65536
	MaxProfilePoints = 64
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// MaxValue bounds demands, capacities, latencies and network latencies,
// keeping every sum the solver forms far from overflow.
const MaxValue = 1e9

func inRange(v float64) bool { return finite(v) && v >= 0 && v <= MaxValue }

// convexTol is the relative slack allowed when checking convexity and
// monotonicity of a profile (fitted profiles carry rounding noise).
const convexTol = 1e-9

// Validate checks in against the instance format and returns an error
// wrapping ErrInvalid that names the offending field.
func (in *Instance) Validate() error {
	clusters, engines, err := in.validateFields(true)
	if err != nil {
		return err
	}
	// Maps are checked in any order (fast); on an error they are checked
	// again in sorted order so the reported field is deterministic.
	if err := in.validateMaps(clusters, engines, false); err != nil {
		return in.validateMaps(clusters, engines, true)
	}
	return nil
}

// validateFields checks the scalars and each cluster and engine and,
// when sets is true, that ids are unique, returning the id sets. Solve
// checks ids and maps while indexing the instance (newProblem) and
// asks Validate for the error when either finds a problem.
func (in *Instance) validateFields(sets bool) (clusters, engines map[string]bool, err error) {
	if in == nil {
		return nil, nil, invalid("instance is null")
	}
	if !finite(in.MaxUtilization) || in.MaxUtilization <= 0 || in.MaxUtilization > 1 {
		return nil, nil, invalid("max_utilization = %v, want in (0, 1]", in.MaxUtilization)
	}
	if !finite(in.ChurnWeight) || in.ChurnWeight < 0 {
		return nil, nil, invalid("churn_weight = %v, want finite and >= 0", in.ChurnWeight)
	}
	if len(in.Clusters) == 0 {
		return nil, nil, invalid("clusters is empty")
	}
	if len(in.Engines) == 0 {
		return nil, nil, invalid("engines is empty (empty fleet)")
	}
	if len(in.Clusters) > MaxClusters {
		return nil, nil, invalid("clusters has %d entries, limit %d", len(in.Clusters), MaxClusters)
	}
	if len(in.Engines) > MaxEngines {
		return nil, nil, invalid("engines has %d entries, limit %d", len(in.Engines), MaxEngines)
	}
	if sets {
		clusters = make(map[string]bool, len(in.Clusters))
	}
	for k, c := range in.Clusters {
		if c.ID == "" {
			return nil, nil, invalid("clusters[%d].id is empty", k)
		}
		if sets {
			if clusters[c.ID] {
				return nil, nil, invalid("clusters[%d].id %q is duplicated", k, c.ID)
			}
			clusters[c.ID] = true
		}
		if !inRange(c.DemandRPS) {
			return nil, nil, invalid("clusters[%d] (%q).demand_rps = %v, want in [0, %g]", k, c.ID, c.DemandRPS, MaxValue)
		}
	}
	if sets {
		engines = make(map[string]bool, len(in.Engines))
	}
	for k, e := range in.Engines {
		if e.ID == "" {
			return nil, nil, invalid("engines[%d].id is empty", k)
		}
		if sets {
			if engines[e.ID] {
				return nil, nil, invalid("engines[%d].id %q is duplicated", k, e.ID)
			}
			engines[e.ID] = true
		}
		if !inRange(e.CapacityRPS) {
			return nil, nil, invalid("engines[%d] (%q).capacity_rps = %v, want in [0, %g]", k, e.ID, e.CapacityRPS, MaxValue)
		}
		if err := validateProfile(e.LatencyMs); err != nil {
			return nil, nil, invalid("engines[%d] (%q).latency_ms: %v", k, e.ID, err)
		}
	}
	return clusters, engines, nil
}

func (in *Instance) validateMaps(clusters, engines map[string]bool, sorted bool) error {
	keys := func(m map[string]float64) []string {
		if sorted {
			return sortedKeys(m)
		}
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	cids := make([]string, 0, len(in.RTTms))
	for k := range in.RTTms {
		cids = append(cids, k)
	}
	if sorted {
		slices.Sort(cids)
	}
	for _, cid := range cids {
		if !clusters[cid] {
			return invalid("rtt_ms[%q]: unknown cluster", cid)
		}
		row := in.RTTms[cid]
		for _, eid := range keys(row) {
			if !engines[eid] {
				return invalid("rtt_ms[%q][%q]: unknown engine", cid, eid)
			}
			if v := row[eid]; !inRange(v) {
				return invalid("rtt_ms[%q][%q] = %v, want in [0, %g]", cid, eid, v, MaxValue)
			}
		}
	}
	for _, cid := range sortedKeys(in.Previous) {
		if !clusters[cid] {
			return invalid("previous[%q]: unknown cluster", cid)
		}
		sum := 0.0
		for _, eid := range sortedKeys(in.Previous[cid]) {
			if !engines[eid] {
				return invalid("previous[%q][%q]: unknown engine", cid, eid)
			}
			v := in.Previous[cid][eid]
			if !finite(v) || v < 0 || v > 1 {
				return invalid("previous[%q][%q] = %v, want in [0, 1]", cid, eid, v)
			}
			sum += v
		}
		if sum > 1+1e-6 {
			return invalid("previous[%q] sums to %v, want <= 1", cid, sum)
		}
	}
	return nil
}

func validateProfile(pts [][2]float64) error {
	if len(pts) == 0 {
		return errors.New("no points")
	}
	if len(pts) > MaxProfilePoints {
		return fmt.Errorf("%d points, limit %d", len(pts), MaxProfilePoints)
	}
	scale := 0.0
	for k, p := range pts {
		if !finite(p[0]) || !finite(p[1]) {
			return fmt.Errorf("point %d is not finite", k)
		}
		if p[0] < 0 {
			return fmt.Errorf("point %d: utilization %v < 0", k, p[0])
		}
		if p[1] < 0 || p[1] > MaxValue {
			return fmt.Errorf("point %d: latency %v outside [0, %g]", k, p[1], MaxValue)
		}
		if p[0] > MaxValue {
			return fmt.Errorf("point %d: utilization %v above %g", k, p[0], MaxValue)
		}
		if k > 0 && p[0] <= pts[k-1][0] {
			return fmt.Errorf("point %d: utilization %v not increasing", k, p[0])
		}
		scale = math.Max(scale, p[1])
	}
	prev := 0.0
	for k := 1; k < len(pts); k++ {
		s := (pts[k][1] - pts[k-1][1]) / (pts[k][0] - pts[k-1][0])
		if !finite(s) {
			return fmt.Errorf("segment %d slope is not finite", k)
		}
		tol := convexTol * (1 + math.Abs(prev) + scale)
		if s < -tol {
			return fmt.Errorf("decreasing between points %d and %d", k-1, k)
		}
		if s < prev-tol {
			return fmt.Errorf("not convex at point %d (slope %v after %v)", k-1, s, prev)
		}
		prev = math.Max(prev, s)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Digest is the hex SHA-256 of a canonical encoding of in: clusters and
// engines sorted by id, maps in key order, floats in Go's shortest
// round-trip form. Two instances with the same digest give the same
// Solution.
func (in *Instance) Digest() string {
	c := *in
	c.Clusters = slices.Clone(in.Clusters)
	slices.SortFunc(c.Clusters, func(a, b Cluster) int { return strings.Compare(a.ID, b.ID) })
	c.Engines = slices.Clone(in.Engines)
	slices.SortFunc(c.Engines, func(a, b Engine) int { return strings.Compare(a.ID, b.ID) })
	// encoding/json writes map keys sorted, so the encoding is canonical.
	b, err := json.Marshal(&c)
	if err != nil {
		// Only NaN/Inf can fail; hash their textual form instead.
		b = fmt.Appendf(nil, "%v", c)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
