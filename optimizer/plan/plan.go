// Package plan turns the processor's estimates into the optimizer's
// problem and the optimizer's solution into a weight snapshot. It is pure
// (no I/O, no clock: times are arguments), so the live optimizer service,
// replay and the simulator plan identically: the same estimate history
// gives byte-identical snapshots.
package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Settings are the planning knobs.
type Settings struct {
	// MaxUtilization caps each engine's planned load (default 0.9).
	MaxUtilization float64
	// ChurnWeight, when positive, is an absolute churn weight: ms per
	// rps of traffic moved from the previous weights (see
	// optimizer.Instance.ChurnWeight), whatever the latencies at stake.
	// 0 (the default) plans with the relative weight ChurnRelative;
	// negative turns the churn term off.
	ChurnWeight float64
	// ChurnRelative (κ) sets the churn weight of each instance to κ × the
	// demand-weighted expected latency of the previous weights at the
	// current estimates (see churn.go); default DefaultChurnRelative,
	// negative turns the churn term off. Used when ChurnWeight is 0.
	ChurnRelative float64
	// EstimateTTL drops engine and demand estimates older than this
	// (default 30s): a silent engine is not planned for. The previous
	// weights expire after it too (no churn against an old plan).
	EstimateTTL time.Duration
	// NetworkTTL drops measured network estimates older than this
	// (default 2m); the pair then falls back to the static RegionRTTms /
	// DefaultRTTms value.
	NetworkTTL time.Duration
	// Clusters are always planned for, with at least MinDemandRPS, so
	// every gateway gets a snapshot before traffic flows.
	Clusters     []string
	MinDemandRPS float64
	// IdleDemandRPS: a cluster whose demand estimate is at most
	// max(IdleDemandRPS, MinDemandRPS) is idle, and its weights are spread
	// by capacity over its nearest engines unless its previous weights
	// were made under real demand (see idle.go). Default 0.5; negative:
	// never idle.
	IdleDemandRPS float64
	// ProbeShare is the most any one probe floor takes of a cluster's
	// traffic (see probe.go); default DefaultProbeShare, negative: no
	// probe floors.
	ProbeShare float64
	// RegionRTTms is the static region→region network latency used when
	// no network estimate exists for a (cluster, engine) pair. A missing
	// pair falls back to DefaultRTTms (0 in the same region); with
	// StrictResidency a missing pair makes the engine unusable for the
	// cluster instead.
	RegionRTTms     map[string]map[string]float64
	DefaultRTTms    float64
	StrictResidency bool
	// MinNetworkSamples is how many samples a measured network estimate
	// needs before it replaces the static value (default 20).
	MinNetworkSamples uint32
	// ReplicaCapacityRPS pins the per-replica capacity (rps) of the
	// engines it names, e.g. from an operator's load test: the planner
	// plans on it × the estimate's ready replicas (at least 1) instead of
	// the capacity it tracks from the estimates (capacity.go). Default
	// none. The simulator's switchyard-calibrated diagnostic uses it.
	ReplicaCapacityRPS map[string]float64
}

func (s *Settings) defaults() {
	if s.MaxUtilization <= 0 || s.MaxUtilization > 1 {
		s.MaxUtilization = 0.9
	}
	if s.ChurnRelative == 0 {
		s.ChurnRelative = DefaultChurnRelative
	}
	if s.EstimateTTL <= 0 {
		s.EstimateTTL = 30 * time.Second
	}
	if s.NetworkTTL <= 0 {
		s.NetworkTTL = 2 * time.Minute
	}
	if s.IdleDemandRPS == 0 {
		s.IdleDemandRPS = 0.5
	}
	if s.ProbeShare == 0 {
		s.ProbeShare = DefaultProbeShare
	}
	if s.DefaultRTTms <= 0 {
		s.DefaultRTTms = 50
	}
	if s.MinNetworkSamples == 0 {
		s.MinNetworkSamples = 20
	}
}

// DefaultChurnWeight is the absolute churn weight the optimizer service
// and the simulator use unless told otherwise: 0, i.e. the relative churn
// weight (DefaultChurnRelative). The former default, 500 ms per rps, needed
// a second of latency gap to move anything on ~100 ms engines and let
// weights chase noise where latencies are seconds.
const DefaultChurnWeight = 0.0

// ErrNothingToPlan: no fresh engine or no cluster to plan for.
var ErrNothingToPlan = errors.New("no fresh engine estimates or no clusters to plan for")

// State is the latest estimate per entity plus the last published
// weights. It is not safe for concurrent use.
type State struct {
	engines  map[string]*schemas.EngineEstimate
	demand   map[string]*schemas.DemandEstimate
	network  map[[2]string]*schemas.NetworkEstimate
	rtt      map[[2]string]float64 // the measured round trips planned on (heldRTT)
	previous map[string]*previousPlan
	capacity map[string]*capacityState
	pools    map[string]*poolMemory
	refWork  map[string]*refState // per GPU class (capacity.go)
	// sustained is each cluster's demand smoothed over sustainMs
	// (burst.go).
	sustained map[string]*sustainedDemand
	// planned is what Instance learned for the instance it built last,
	// for State.Solve's post-processing (idle spreading, probe floors).
	planned *planContext
}

// previousPlan is one cluster's last published weights and the view of the
// fleet they were made from.
type previousPlan struct {
	weights map[string]float64
	// usable: the engines the cluster could use then (healthy, reachable).
	usable map[string]bool
	// createdMs: the snapshot's creation time.
	createdMs int64
	// real: made under real demand (not at the idle floor).
	real bool
}

// planContext is what State.Solve needs to know about the instance that
// Instance built.
type planContext struct {
	in     *opt.Instance
	set    Settings
	region map[string]string
	// idle clusters (demand at the floor) whose weights are spread by
	// capacity after the solve.
	idle map[string]bool
	// demand is each cluster's demand estimate the instance was built
	// from, published with its weights (ClusterWeights.demand_estimate).
	demand map[string]*schemas.DemandEstimate
	// members are the models of each model part (models.go), by
	// instance cluster id.
	members map[string][]modelShare
}

// NewState returns an empty state.
func NewState() *State {
	return &State{
		engines:  map[string]*schemas.EngineEstimate{},
		demand:   map[string]*schemas.DemandEstimate{},
		network:  map[[2]string]*schemas.NetworkEstimate{},
		rtt:      map[[2]string]float64{},
		previous: map[string]*previousPlan{},
		capacity: map[string]*capacityState{},
		pools:    map[string]*poolMemory{},
		refWork:  map[string]*refState{},

		sustained: map[string]*sustainedDemand{},
	}
}

// Apply records est, keeping the newest window per entity, and folds an
// engine estimate into the engine's tracked capacity (see capacityState).
func (s *State) Apply(est *schemas.Estimate) {
	switch k := est.GetKind().(type) {
	case *schemas.Estimate_Engine:
		e := k.Engine
		cs := s.capacity[e.GetEngineId()]
		if cs == nil {
			cs = &capacityState{}
			s.capacity[e.GetEngineId()] = cs
		}
		cs.observe(e)
		if cur, ok := s.engines[e.GetEngineId()]; !ok || cur.GetWindowEndUnixMs() <= e.GetWindowEndUnixMs() {
			s.engines[e.GetEngineId()] = e
		}
	case *schemas.Estimate_Demand:
		d := k.Demand
		if cur, ok := s.demand[d.GetCluster()]; !ok || cur.GetWindowEndUnixMs() <= d.GetWindowEndUnixMs() {
			s.demand[d.GetCluster()] = d
		}
		s.sustainDemand(d)
	case *schemas.Estimate_Network:
		n := k.Network
		key := [2]string{n.GetCluster(), n.GetEngineId()}
		if cur, ok := s.network[key]; !ok || cur.GetWindowEndUnixMs() <= n.GetWindowEndUnixMs() {
			s.network[key] = n
		}
	}
}

// Remember records the weights of a published snapshot as the previous
// weights for the churn term, with the engines each cluster could use
// when they were made (an engine the snapshot explains as "unhealthy" or
// "residency" could not be used) and whether they were made under real
// demand (see idle.go).
func (s *State) Remember(snap *schemas.WeightSnapshot) {
	idleRPS := 0.5
	if pc := s.planned; pc != nil {
		idleRPS = pc.set.idleRPS()
	}
	for _, cw := range snap.GetClusters() {
		s.rememberCluster(cw.GetCluster(), cw.GetWeights(), cw.GetDemandRps(), snap.GetCreatedUnixMs(), idleRPS)
		for _, mw := range cw.GetModelWeights() { // models.go
			s.rememberCluster(modelClusterID(cw.GetCluster(), mw.GetModel()), mw.GetWeights(), mw.GetDemandRps(), snap.GetCreatedUnixMs(), idleRPS)
		}
	}
}

// rememberCluster records the weights of instance cluster id (a cluster,
// or a model's part of one) planned for demandRPS, for Remember.
func (s *State) rememberCluster(id string, weights []*schemas.EngineWeight, demandRPS float64, createdMs int64, idleRPS float64) {
	p := &previousPlan{weights: map[string]float64{}, usable: map[string]bool{}, createdMs: createdMs,
		real: demandRPS > idleRPS}
	for _, w := range weights {
		if w.GetWeight() > 0 {
			p.weights[w.GetEngineId()] = w.GetWeight()
		}
		if !slices.Contains(w.GetExplanation().GetBinding(), "unhealthy") && !slices.Contains(w.GetExplanation().GetBinding(), "residency") {
			p.usable[w.GetEngineId()] = true
		}
	}
	// An idle cluster's weights held from real-demand weights stay
	// real (they are kept through the idle period); weights spread by
	// capacity are a fine churn reference for the next burst but not
	// a reason to keep anything.
	if old := s.previous[id]; !p.real && old != nil && old.real && s.planned != nil && s.planned.idle[id] {
		p.real = true
	}
	s.previous[id] = p
}

// Instance builds the optimisation problem from the estimates fresh at
// now, and the endpoint URL of every engine in it.
func (s *State) Instance(now time.Time, set Settings) (*opt.Instance, map[string]string, error) {
	set.defaults()
	cutoff := now.Add(-set.EstimateTTL).UnixMilli()
	in := &opt.Instance{MaxUtilization: set.MaxUtilization, RTTms: map[string]map[string]float64{}}
	endpoints := map[string]string{}
	region := map[string]string{}

	// Mean output tokens across clusters weighs TBOT into the engine
	// latency: e2e(u) = TTFT(u) + outputTokens × TBOT(u).
	var outTok, outW float64
	demand := map[string]float64{}
	raw := map[string]float64{}
	used := map[string]*schemas.DemandEstimate{}
	for _, id := range set.Clusters {
		demand[id] = set.MinDemandRPS
	}
	fresh := s.freshEngines(cutoff)
	served := servedModels(fresh) // models.go
	members := map[string][]modelShare{}
	for _, id := range sortedKeys(s.demand) {
		d := s.demand[id]
		if d.GetWindowEndUnixMs() < cutoff {
			continue
		}
		rps, ok := plannedDemand(d)
		if !ok {
			continue
		}
		used[id] = d
		parts, rest := modelParts(d, rps, fresh, served)
		raw[id] = rest
		demand[id] = math.Max(rest, set.MinDemandRPS)
		if len(parts) > 0 {
			// The parts split a real demand: --min-demand-rps, a floor for
			// clusters without traffic, would add phantom load to each.
			demand[id] = math.Max(rest, math.Min(set.MinDemandRPS, partFloorRPS))
		}
		for m, ms := range parts {
			p := partDemand(ms)
			raw[modelClusterID(id, m)] = p
			demand[modelClusterID(id, m)] = math.Max(p, math.Min(set.MinDemandRPS, partFloorRPS))
			members[modelClusterID(id, m)] = ms
		}
		if mo := d.GetMeanOutputTokens(); finite(mo) && mo > 0 {
			outTok += float64(mo * rps)
			outW += rps
		}
	}
	meanOut := 0.0
	if outW > 0 {
		meanOut = outTok / outW
	}
	for _, id := range sortedKeys(demand) {
		in.Clusters = append(in.Clusters, opt.Cluster{ID: id, DemandRPS: demand[id]})
	}
	s.observePools(fresh)
	s.observeRef(fresh)
	ttftPool, tbotPool := s.profilePools(fresh)
	var his []float64
	var sumLo, sumHi float64
	ref := s.reference()
	for _, e := range fresh {
		id := e.GetEngineId()
		prof, err := engineLatency(id,
			s.plannedProfile(e, ttft, ttftPool),
			s.plannedProfile(e, tbot, tbotPool),
			meanOut)
		if err != nil {
			continue
		}
		lo, hi := s.capacity[id].capacity(e, ref[e.GetGpuClass()])
		if c, ok := set.ReplicaCapacityRPS[id]; ok && finite(c) && c > 0 {
			lo = c * float64(max(e.GetReadyReplicas(), 1))
			hi = lo
		}
		lo, hi = boundedCapacity(lo), boundedCapacity(hi)
		healthy := e.GetHealth() != schemas.Health_HEALTH_UNHEALTHY && e.GetReadyReplicas() > 0
		if healthy {
			sumLo += lo
			sumHi += hi
		}
		his = append(his, hi)
		in.Engines = append(in.Engines, opt.Engine{
			ID:          id,
			CapacityRPS: lo,
			Healthy:     healthy,
			LatencyMs:   prof,
		})
		endpoints[id] = e.GetEndpointUrl()
		region[id] = e.GetRegion()
	}
	if len(in.Clusters) == 0 || len(in.Engines) == 0 {
		return nil, nil, ErrNothingToPlan
	}
	// Shed only when capacity is certainly short: when the demand does not
	// fit the capacities planned on, unmeasured engines' reserves are
	// released, evenly, as far as needed (see capacityState.capacity).
	var total float64
	for _, c := range in.Clusters {
		total += c.DemandRPS
	}
	release := make([]float64, len(in.Engines))
	if need := total / set.MaxUtilization; need > sumLo && sumHi > sumLo {
		t := math.Min(1, (need-sumLo)/(sumHi-sumLo))
		for i := range release {
			release[i] = t
		}
	}
	maxU := releaseForModels(in, his, served, set.MaxUtilization, release) // models.go
	for i := range in.Engines {
		in.Engines[i].CapacityRPS += float64(release[i] * (his[i] - in.Engines[i].CapacityRPS))
	}
	if planned := s.burstAbsorbed(in.Clusters, total, sumHi, cutoff); planned < total {
		for i := range in.Clusters {
			in.Clusters[i].DemandRPS *= planned / total
		}
		total = planned
	}
	in.MaxUtilization = max(spendHeadroom(set.MaxUtilization, total, sumHi), maxU)
	netCutoff := now.Add(-set.NetworkTTL).UnixMilli()
	for _, c := range in.Clusters {
		row := map[string]float64{}
		cid, model, part := splitModelCluster(c.ID) // models.go: a model's part of cluster cid
		for _, e := range in.Engines {
			if part && !serves(served, e.ID, model) {
				continue
			}
			key := [2]string{cid, e.ID}
			if n, ok := s.network[key]; ok && n.GetWindowEndUnixMs() >= netCutoff &&
				n.GetSamples() >= set.MinNetworkSamples && finite(n.GetRttMs()) && n.GetRttMs() >= 0 && n.GetRttMs() <= opt.MaxValue {
				row[e.ID] = s.heldRTT(key, n.GetRttMs())
				continue
			}
			if v, ok := set.RegionRTTms[cid][region[e.ID]]; ok {
				row[e.ID] = v
				continue
			}
			if set.StrictResidency {
				continue
			}
			if region[e.ID] == cid {
				row[e.ID] = 0
			} else {
				row[e.ID] = set.DefaultRTTms
			}
		}
		in.RTTms[c.ID] = row
	}
	in.Previous = s.churnReference(in, now, set)
	in.ChurnWeight = churnWeight(in, set)
	if err := in.Validate(); err != nil {
		return nil, nil, fmt.Errorf("building instance: %w", err)
	}
	s.planned = &planContext{in: in, set: set, region: region, idle: idleClusters(in, raw, set), demand: used, members: members}
	return in, endpoints, nil
}

// boundedCapacity is v within [0, opt.MaxValue] (0 for NaN): an engine
// estimate the processor's checks let through (they bound no capacity)
// or an overflowing product must not make the instance invalid, which
// would fail the whole plan.
func boundedCapacity(v float64) float64 {
	if !(v >= 0) {
		return 0
	}
	return math.Min(v, opt.MaxValue)
}

// Solve solves in and returns the snapshot with the given version,
// created at now: the optimizer's weights as they are (State.Solve adds
// the failover split that is published). Its stats carry no wall-clock
// solve time, so the bytes depend only on the inputs.
func Solve(in *opt.Instance, endpoints map[string]string, version uint64, now time.Time) (*schemas.WeightSnapshot, error) {
	sol, err := opt.Solve(in)
	if err != nil {
		return nil, fmt.Errorf("solving: %w", err)
	}
	stats := sol.Stats()
	stats.SolveMs = 0
	return &schemas.WeightSnapshot{
		SchemaVersion: schemas.Version,
		Version:       version,
		CreatedUnixMs: now.UnixMilli(),
		Clusters:      sol.ClusterWeights(endpoints),
		InputsDigest:  in.Digest(),
		Stats:         stats,
	}, nil
}

// Solve is the package's Solve followed by the planner's post-processing,
// which needs the engines' regions from the state's estimates: idle
// clusters spread by capacity (idle.go), the failover split (spill.go)
// and the probe floors (probe.go); then each cluster's peer clusters
// (peerclusters.go), and each cluster's demand estimate (what was offered
// and what the gateways rejected, for explain). It is what the optimizer service,
// replay and the simulator publish. The idle spreading and probe floors
// apply when in is the instance this state's Instance built last.
func (s *State) Solve(in *opt.Instance, endpoints map[string]string, version uint64, now time.Time) (*schemas.WeightSnapshot, error) {
	snap, err := Solve(in, endpoints, version, now)
	if err != nil {
		return nil, err
	}
	region := make(map[string]string, len(in.Engines))
	for _, e := range in.Engines {
		region[e.ID] = s.engines[e.ID].GetRegion()
	}
	pc := s.planned
	var held map[string]bool
	if pc != nil && pc.in == in && pc.set.holdShare() > 0 {
		held = hold(in, pc.set.holdShare(), snap.GetClusters())
		if len(held) > 0 && snap.GetStats() != nil { // hold may shed less
			var shed float64
			for _, cw := range snap.GetClusters() {
				shed += cw.GetDemandRps() * cw.GetShedFraction()
			}
			snap.Stats.TotalShedRps = shed
		}
	}
	if pc != nil && pc.in == in {
		spreadIdle(in, pc.idle, s.previous, snap.GetClusters())
	}
	spill(in, region, held, snap.GetClusters())
	if pc != nil && pc.in == in {
		probe(in, pc.set, snap.GetClusters())
	}
	explainCapacity(s.engines, s.capacity, snap.GetClusters())
	fillPeerClusters(snap.GetClusters())
	if pc != nil && pc.in == in {
		for _, cw := range snap.GetClusters() {
			if d := pc.demand[cw.GetCluster()]; d != nil {
				cw.DemandEstimate = proto.CloneOf(d)
			}
		}
	}
	var members map[string][]modelShare
	if pc != nil && pc.in == in {
		members = pc.members
	}
	foldModelClusters(snap, members) // models.go
	return snap, nil
}

// Planner plans one snapshot per completed processor window: it folds the
// window's estimates into its state, builds the instance as of the
// window's end, solves it and remembers the weights for the churn term.
// The snapshot's version is the window end in Unix milliseconds and its
// created time the window end, so versions only go up and re-planning a
// window gives the same version (an idempotent publish). Not safe for
// concurrent use.
type Planner struct {
	set  Settings
	st   *State
	last int64
}

// NewPlanner returns a planner with an empty state.
func NewPlanner(set Settings) *Planner {
	set.defaults()
	return &Planner{set: set, st: NewState()}
}

// ErrOldWindow: the window ends at or before one already planned.
var ErrOldWindow = errors.New("window already planned")

// Plan plans the window ending at end. It returns ErrNothingToPlan when
// there is no fresh engine or cluster, and ErrOldWindow for a window at or
// before the last planned one (its estimates are still folded in).
func (p *Planner) Plan(end time.Time, ests []*schemas.Estimate) (*schemas.WeightSnapshot, error) {
	for _, e := range ests {
		p.st.Apply(e)
	}
	if end.UnixMilli() <= p.last {
		return nil, fmt.Errorf("%w: %d <= %d", ErrOldWindow, end.UnixMilli(), p.last)
	}
	in, endpoints, err := p.st.Instance(end, p.set)
	if err != nil {
		return nil, err
	}
	snap, err := p.st.Solve(in, endpoints, uint64(end.UnixMilli()), end)
	if err != nil {
		return nil, err
	}
	p.last = end.UnixMilli()
	p.st.Remember(snap)
	return snap, nil
}

// Apply folds estimates into the state without planning.
// Like Plan, it folds the window (the newest among ests) into the
// engines' class-deviation memories (outliers.go), so a planner that
// skips windows already published (the optimizer service after a
// restart) remembers what one that planned them does.
func (p *Planner) Apply(ests ...*schemas.Estimate) {
	var end int64
	for _, e := range ests {
		p.st.Apply(e)
		end = max(end, e.WindowEndUnixMs())
	}
	if end > 0 {
		fresh := p.st.freshEngines(time.UnixMilli(end).Add(-p.set.EstimateTTL).UnixMilli())
		p.st.observePools(fresh)
		p.st.observeRef(fresh)
	}
}

// freshEngines are the engine estimates ending at or after cutoff (Unix
// ms) with a capacity, sorted by engine id.
func (s *State) freshEngines(cutoff int64) []*schemas.EngineEstimate {
	var fresh []*schemas.EngineEstimate
	for _, id := range sortedKeys(s.engines) {
		e := s.engines[id]
		if e.GetWindowEndUnixMs() < cutoff || !finite(e.GetCapacityRps()) || e.GetCapacityRps() <= 0 {
			continue
		}
		fresh = append(fresh, e)
	}
	return fresh
}

// Remember seeds the previous weights (for the churn term) and the last
// planned window from an already published snapshot, e.g. on restart.
func (p *Planner) Remember(snap *schemas.WeightSnapshot) {
	p.st.Remember(snap)
	if v := int64(snap.GetVersion()); v > p.last {
		p.last = v
	}
}

// LastWindow is the end of the last planned window (0: none).
func (p *Planner) LastWindow() time.Time {
	if p.last == 0 {
		return time.Time{}
	}
	return time.UnixMilli(p.last)
}

// engineLatency merges the TTFT and TBOT profiles (pooled, see pool.go)
// into one end-to-end profile on the union of their knots; a sum of convex
// non-decreasing piecewise-linear curves is one too.
func engineLatency(id string, ttft, tbot [][2]float64, outTokens float64) ([][2]float64, error) {
	if len(ttft) == 0 {
		return nil, fmt.Errorf("engine %q has no TTFT profile", id)
	}
	if len(tbot) == 0 || outTokens <= 0 {
		return ttft, nil
	}
	knots := map[float64]bool{}
	for _, p := range ttft {
		knots[p[0]] = true
	}
	for _, p := range tbot {
		knots[p[0]] = true
	}
	us := make([]float64, 0, len(knots))
	for u := range knots {
		us = append(us, u)
	}
	sort.Float64s(us)
	out := make([][2]float64, 0, len(us))
	for _, u := range us {
		out = append(out, [2]float64{u, interp(ttft, u) + float64(outTokens*interp(tbot, u))})
	}
	return out, nil
}

func points(p *schemas.LatencyProfile) [][2]float64 {
	var out [][2]float64
	for _, pt := range p.GetPoints() {
		if finite(pt.GetUtilization()) && finite(pt.GetLatencyMs()) {
			out = append(out, [2]float64{pt.GetUtilization(), pt.GetLatencyMs()})
		}
	}
	return out
}

// interp evaluates a piecewise-linear curve, holding the first value
// before the first knot and extending the last segment after the last.
func interp(pts [][2]float64, u float64) float64 {
	if len(pts) == 1 || u <= pts[0][0] {
		return pts[0][1]
	}
	for i := 1; i < len(pts); i++ {
		if u <= pts[i][0] {
			a, b := pts[i-1], pts[i]
			if b[0] <= a[0] {
				return b[1]
			}
			return a[1] + (b[1]-a[1])*(u-a[0])/(b[0]-a[0])
		}
	}
	a, b := pts[len(pts)-2], pts[len(pts)-1]
	if b[0] <= a[0] {
		return b[1]
	}
	return b[1] + (b[1]-a[1])*(u-b[0])/(b[0]-a[0])
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A measured round trip moves the plan (and the network_ms gateways
// score with) only when it departs from the one planned on by more than
// rttBand of it or rttBandMs, whichever is more: a window's estimate
// moves by a few percent with its samples, and a round trip that changes
// every window makes every snapshot a new plan to the gateways (a new
// picker table, 0.35 ms of a gateway's CPU at 1,000 engines where an
// unchanged plan costs 0.06: docs/optimizer.md, fan-out).
const (
	rttBand   = 0.1
	rttBandMs = 1.0
)

// heldRTT returns the round trip to plan on for key given the measured
// v: the one planned on last while v stays within the band of it, else
// v (which is then the one planned on).
func (s *State) heldRTT(key [2]string, v float64) float64 {
	if h, ok := s.rtt[key]; ok && math.Abs(v-h) <= max(rttBandMs, rttBand*h) {
		return h
	}
	s.rtt[key] = v
	return v
}
