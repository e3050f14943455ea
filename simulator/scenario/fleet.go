package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// Fleet is a live fleet as the processor estimated it over a time range:
// what `switchyard export-fleet` writes and `switchyard sim --fleet-from`
// simulates (docs/sim.md, "Digital twin"). Every field comes from the
// estimates topic's records (schemas.Estimate) and the recorded settings.
type Fleet struct {
	// From and To bound the estimate windows read (RFC 3339).
	From string `json:"from"`
	To   string `json:"to"`
	// Windows is how many estimate windows the fleet was built from.
	Windows  int            `json:"windows"`
	Engines  []FleetEngine  `json:"engines"`
	Clusters []FleetCluster `json:"clusters"`
	// Control holds the processor's and optimizer's recorded settings the
	// simulator's control plane runs with (window, slide, allowed
	// lateness, max utilization, churn weight).
	Control Control `json:"control"`
	// Initial is the snapshot in force at From, as the live optimizer
	// planned it (absent when none was: the range starts with the
	// pipeline): the twin's gateways route on it until its first plan.
	Initial []InitialPlan `json:"initial,omitempty"`
}

// InitialFrom is snap's weights as a fleet's or scenario's Initial.
func InitialFrom(snap *schemas.WeightSnapshot) []InitialPlan {
	var out []InitialPlan
	for _, cw := range snap.GetClusters() {
		p := InitialPlan{Cluster: cw.GetCluster(), DemandRPS: cw.GetDemandRps(), ShedFraction: cw.GetShedFraction(), Weights: map[string]float64{}}
		for _, w := range cw.GetWeights() {
			if w.GetWeight() > 0 {
				p.Weights[w.GetEngineId()] = w.GetWeight()
			}
		}
		out = append(out, p)
	}
	return out
}

// FleetEngine is one engine as its estimates describe it.
type FleetEngine struct {
	ID       string `json:"id"`
	Region   string `json:"region"`
	GPUClass string `json:"gpu_class"`
	// Replicas is the most ready replicas a window saw.
	Replicas int `json:"replicas"`
	// MaxBatch is the per-replica batch limit of the newest window whose
	// limit came from evidence (configured, engine_metrics, inferred), and
	// CapacitySource that evidence; 0 and "prior" when only the class
	// prior was known.
	MaxBatch       int    `json:"max_batch"`
	CapacitySource string `json:"capacity_source"`
	// KVCapacityTokens is the KV cache over the ready replicas, in
	// tokens, from the newest window that knew it (0 unknown).
	KVCapacityTokens float64 `json:"kv_capacity_tokens"`
	// CacheResidencyS is the median over the windows of the prefix-cache
	// residency (0 unknown).
	CacheResidencyS float64 `json:"cache_residency_s"`
	// CapacityRPS is the median capacity estimate.
	CapacityRPS float64 `json:"capacity_rps"`
	// TTFTProfile and TBOTProfile are the fitted profiles ([utilization,
	// ms] points) of the window whose TBOT fit had the most samples, not
	// the prior; ProfileSamples is that fit's sample count (0: only the
	// prior was known, the profiles are the prior's).
	TTFTProfile    [][2]float64 `json:"ttft_profile"`
	TBOTProfile    [][2]float64 `json:"tbot_profile"`
	ProfileSamples int          `json:"profile_samples"`
	// LatencyMultiplier is how many times slower than its GPU class's
	// preset the fitted TBOT profile shows the engine (see
	// LatencyMultiplierFrom); 1 where the profile agrees with the preset.
	LatencyMultiplier float64 `json:"latency_multiplier"`
}

// FleetCluster is one gateway cluster.
type FleetCluster struct {
	ID string `json:"id"`
	// Region is the region of the engine nearest to the cluster
	// (its lowest measured RTT), or the cluster's id when an engine
	// region has that name.
	Region string `json:"region"`
	// DemandRPS is the mean offered demand over the windows.
	DemandRPS float64 `json:"demand_rps"`
	// RTTms is the median measured round trip to each engine, over the
	// windows measured on 20 samples or more where there are any.
	RTTms map[string]float64 `json:"rtt_ms"`
}

// minRTTSamples is the fewest samples behind a network estimate the
// fleet takes, the planner's default (plan.Settings.MinNetworkSamples).
const minRTTSamples = 20

// ErrNoEstimates is returned by FleetFromEstimates when no engine
// estimate was read.
var ErrNoEstimates = errors.New("no engine estimates in the range")

// FleetFromEstimates builds the fleet from the estimates of windows
// ending in [from, to] (others are ignored), in any order.
func FleetFromEstimates(ests []*schemas.Estimate, from, to time.Time) (*Fleet, error) {
	in := func(end int64) bool { return end >= from.UnixMilli() && end <= to.UnixMilli() }
	engines := map[string][]*schemas.EngineEstimate{}
	demand := map[string][]float64{}
	rtt := map[string]map[string][]float64{}    // windows of minRTTSamples or more
	rttFew := map[string]map[string][]float64{} // windows of fewer
	windows := map[int64]bool{}
	for _, e := range ests {
		switch k := e.GetKind().(type) {
		case *schemas.Estimate_Engine:
			if ee := k.Engine; ee.GetEngineId() != "" && in(ee.GetWindowEndUnixMs()) {
				engines[ee.GetEngineId()] = append(engines[ee.GetEngineId()], ee)
				windows[ee.GetWindowEndUnixMs()] = true
			}
		case *schemas.Estimate_Demand:
			if d := k.Demand; d.GetCluster() != "" && in(d.GetWindowEndUnixMs()) && finiteNonNeg(d.GetDemandRps()) {
				demand[d.GetCluster()] = append(demand[d.GetCluster()], d.GetDemandRps())
			}
		case *schemas.Estimate_Network:
			n := k.Network
			if n.GetCluster() == "" || n.GetEngineId() == "" || !in(n.GetWindowEndUnixMs()) || n.GetSamples() == 0 || !finiteNonNeg(n.GetRttMs()) {
				continue
			}
			// As the planner, trust a round trip measured on enough
			// samples: a pair that has such windows takes only them.
			m := rtt
			if n.GetSamples() < minRTTSamples {
				m = rttFew
			}
			if m[n.GetCluster()] == nil {
				m[n.GetCluster()] = map[string][]float64{}
			}
			m[n.GetCluster()][n.GetEngineId()] = append(m[n.GetCluster()][n.GetEngineId()], n.GetRttMs())
		}
	}
	if len(engines) == 0 {
		return nil, ErrNoEstimates
	}
	f := &Fleet{From: from.UTC().Format(time.RFC3339Nano), To: to.UTC().Format(time.RFC3339Nano), Windows: len(windows)}
	regions := map[string]string{}
	for _, id := range sortedKeys(engines) {
		fe := fleetEngine(engines[id])
		f.Engines = append(f.Engines, fe)
		regions[id] = fe.Region
	}
	ids := map[string]bool{}
	for c := range demand {
		ids[c] = true
	}
	for c := range rtt {
		ids[c] = true
	}
	for c, es := range rttFew {
		ids[c] = true
		for e, xs := range es {
			if len(rtt[c][e]) == 0 {
				if rtt[c] == nil {
					rtt[c] = map[string][]float64{}
				}
				rtt[c][e] = xs
			}
		}
	}
	for _, c := range sortedKeys(ids) {
		fc := FleetCluster{ID: c, DemandRPS: mean(demand[c]), RTTms: map[string]float64{}}
		for e, xs := range rtt[c] {
			if _, ok := regions[e]; ok {
				fc.RTTms[e] = median(xs)
			}
		}
		fc.Region = clusterRegion(c, fc.RTTms, regions)
		f.Clusters = append(f.Clusters, fc)
	}
	f.Control.SignalIntervalS = scrapeInterval(engines)
	return f, nil
}

// scrapeInterval is the engine agents' scrape interval the estimates
// show: the median over engine windows of the window's length over its
// signals (0: none counted). The agent's flag is in no settings record,
// and a twin that scrapes twice as often as live sees queues live did
// not: bench/live's agent scrapes every 2 s, the simulator's default is
// 1 s.
func scrapeInterval(engines map[string][]*schemas.EngineEstimate) float64 {
	var xs []float64
	for _, es := range engines {
		for _, e := range es {
			if n, span := e.GetSignalCount(), e.GetWindowEndUnixMs()-e.GetWindowStartUnixMs(); n > 0 && span > 0 {
				xs = append(xs, float64(span)/1000/float64(n))
			}
		}
	}
	return math.Round(median(xs)*1000) / 1000
}

// fleetEngine summarises one engine's estimates.
func fleetEngine(es []*schemas.EngineEstimate) FleetEngine {
	sort.SliceStable(es, func(a, b int) bool { return es[a].GetWindowEndUnixMs() < es[b].GetWindowEndUnixMs() })
	last := es[len(es)-1]
	fe := FleetEngine{ID: last.GetEngineId(), Region: last.GetRegion(), GPUClass: last.GetGpuClass(), CapacitySource: "prior", LatencyMultiplier: 1}
	var res, caps []float64
	var best *schemas.EngineEstimate
	for _, e := range es {
		fe.Replicas = max(fe.Replicas, int(e.GetReadyReplicas()))
		if src := e.GetCapacitySource(); e.GetMaxBatch() > 0 && src != "" && src != "prior" {
			fe.MaxBatch, fe.CapacitySource = int(e.GetMaxBatch()), src
		}
		if k := e.GetKvCapacityTokens(); k > 0 && finiteNonNeg(k) {
			fe.KVCapacityTokens = k
		}
		if r := e.GetCacheResidencyS(); r > 0 && finiteNonNeg(r) {
			res = append(res, r)
		}
		if c := e.GetCapacityRps(); c > 0 && finiteNonNeg(c) {
			caps = append(caps, c)
		}
		if p := e.GetTbotProfile(); !p.GetPrior() && len(p.GetPoints()) > 0 && (best == nil || p.GetSamples() > best.GetTbotProfile().GetSamples()) {
			best = e
		}
	}
	fe.Replicas = max(fe.Replicas, 1)
	fe.CacheResidencyS, fe.CapacityRPS = median(res), median(caps)
	src := best
	if src == nil {
		src = last
	} else {
		fe.ProfileSamples = int(best.GetTbotProfile().GetSamples())
	}
	fe.TTFTProfile, fe.TBOTProfile = points(src.GetTtftProfile()), points(src.GetTbotProfile())
	if best != nil {
		if p, err := engine.LookupPreset(fe.GPUClass); err == nil {
			fe.LatencyMultiplier = LatencyMultiplierFrom(fe.TBOTProfile, p)
		}
	}
	return fe
}

// MultiplierEvidence is how far (as a ratio either way) a fitted TBOT
// profile must be from its GPU preset's lone decode step before the twin
// reads the engine as slower or faster than the preset: the fitted TBOT
// at the lowest utilization seen carries the batch the engine ran then
// (more sequences, longer contexts), which puts a preset engine's ratio
// above 1 (1.0–1.3 on the demo's h100, a100 and l4 engines), while a
// throttled engine (enginesim --latency-multiplier) is 2× or more.
const MultiplierEvidence = 1.5

// LatencyMultiplierFrom is the latency multiplier a fitted TBOT profile
// shows against preset p: the profile's TBOT at its lowest utilization
// over the preset's lone decode step (StepBase + StepPerSeq), read as 1
// when within MultiplierEvidence either way.
func LatencyMultiplierFrom(tbot [][2]float64, p engine.Preset) float64 {
	base := float64(p.StepBase+p.StepPerSeq) / float64(time.Millisecond)
	if len(tbot) == 0 || !(base > 0) {
		return 1
	}
	lo := tbot[0]
	for _, pt := range tbot[1:] {
		if pt[0] < lo[0] {
			lo = pt
		}
	}
	m := lo[1] / base
	if !finiteNonNeg(m) || !(m > 0) || (m < MultiplierEvidence && m > 1/MultiplierEvidence) {
		return 1
	}
	return math.Round(m*100) / 100
}

// clusterRegion is the cluster's region: its own id when an engine
// region has that name, else the region of its nearest engine (lowest
// RTT; ties by engine id), else the id itself.
func clusterRegion(id string, rtt map[string]float64, regions map[string]string) string {
	for _, r := range regions {
		if r == id {
			return id
		}
	}
	best, bestMs := "", math.Inf(1)
	for _, e := range sortedKeys(rtt) {
		if rtt[e] < bestMs {
			best, bestMs = regions[e], rtt[e]
		}
	}
	if best == "" {
		return id
	}
	return best
}

func points(p *schemas.LatencyProfile) [][2]float64 {
	var out [][2]float64
	for _, pt := range p.GetPoints() {
		if finiteNonNeg(pt.GetUtilization()) && finiteNonNeg(pt.GetLatencyMs()) {
			out = append(out, [2]float64{pt.GetUtilization(), pt.GetLatencyMs()})
		}
	}
	return out
}

// DefaultTwinSLO is the SLO a fleet's scenario is scored against: the
// twin predicts latencies, and goodput needs some SLO.
var DefaultTwinSLO = SLO{TTFTms: 2000, TBOTms: 100}

// Scenario turns the fleet into a scenario replaying trace (a file
// `switchyard export-trace` wrote): one engine per fleet engine (its GPU
// preset, ready replicas, batch limit where evidence showed one, KV
// blocks from the KV capacity, latency multiplier from the fitted
// profile), one cluster per fleet cluster in its region, the RTT between
// two regions the median measured round trip from the clusters of one to
// the engines of the other (in a region: intra_region_rtt_ms), and the
// recorded control settings.
func (f *Fleet) Scenario(trace string) (*Scenario, error) {
	if len(f.Engines) == 0 {
		return nil, invalid("fleet has no engines")
	}
	s := &Scenario{Name: "twin " + f.From, SLO: DefaultTwinSLO, RTTms: map[string]map[string]float64{},
		Workload: Workload{Kind: KindMooncake, Trace: trace}, Control: f.Control, Initial: f.Initial}
	seen := map[string]bool{}
	addRegion := func(r string) {
		if !seen[r] {
			seen[r] = true
			s.Regions = append(s.Regions, r)
		}
	}
	region := map[string]string{}
	for _, e := range f.Engines {
		p, err := engine.LookupPreset(e.GPUClass)
		if err != nil {
			return nil, invalid("engine %s: gpu class %q has no engine model preset (h100, a100, l4)", e.ID, e.GPUClass)
		}
		addRegion(e.Region)
		region[e.ID] = e.Region
		se := Engine{ID: e.ID, Region: e.Region, GPU: p.Name, Replicas: max(e.Replicas, 1)}
		if e.MaxBatch > 0 && e.MaxBatch != p.MaxSeqs && e.MaxBatch < p.MaxBatchedTokens {
			se.MaxSeqs = e.MaxBatch
		}
		if e.CapacitySource == "inferred" || e.CapacitySource == "prior" {
			no := false
			se.ReportMaxBatch = &no // the engine exported none
		}
		if kv := int(e.KVCapacityTokens) / se.Replicas / p.BlockSize; kv > 0 && kv != p.KVBlocks {
			se.KVBlocks = min(kv, 1<<24)
		}
		if m := e.LatencyMultiplier; m > 0 && m != 1 {
			se.LatencyMultiplier = m
		}
		s.Engines = append(s.Engines, se)
	}
	pairs := map[[2]string][]float64{}
	var intra []float64
	for _, c := range f.Clusters {
		addRegion(c.Region)
		s.Clusters = append(s.Clusters, Cluster{ID: c.ID, Region: c.Region, Share: c.DemandRPS})
		for e, ms := range c.RTTms {
			r, ok := region[e]
			switch {
			case !ok:
			case r == c.Region:
				intra = append(intra, ms)
			default:
				k := [2]string{min(r, c.Region), max(r, c.Region)}
				pairs[k] = append(pairs[k], ms)
			}
		}
	}
	if len(s.Clusters) == 0 {
		return nil, invalid("fleet has no clusters (no demand or network estimates)")
	}
	if !slices.ContainsFunc(s.Clusters, func(c Cluster) bool { return c.Share > 0 }) {
		for i := range s.Clusters {
			s.Clusters[i].Share = 1
		}
	}
	for k, xs := range pairs {
		if s.RTTms[k[0]] == nil {
			s.RTTms[k[0]] = map[string]float64{}
		}
		s.RTTms[k[0]][k[1]] = median(xs)
	}
	if len(intra) > 0 {
		s.IntraRegionRTTms = median(intra)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// WriteFleet writes f as indented JSON.
func WriteFleet(w io.Writer, f *Fleet) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding fleet: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// LoadFleet reads a fleet file; unknown fields are errors.
func LoadFleet(path string) (*Fleet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading fleet: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f Fleet
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrInvalid, err)
	}
	return &f, nil
}

func finiteNonNeg(v float64) bool { return finite(v) && v >= 0 }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
