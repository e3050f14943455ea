// Package scenario is the file format of `switchyard sim`: the fleet
// (regions, their network latencies, gateway clusters, engines), the
// workload (the built-in generator or a Mooncake / Azure trace), the
// control-plane settings and a schedule of events. Files are JSON; the
// JSON Schema is simulator/testdata/scenarios/scenario.schema.json.
package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// Scenario is one simulated world.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// DurationS is the arrival window in seconds: requests arriving at or
	// after it are dropped. 0 means the whole trace (not allowed for the
	// generator).
	DurationS float64 `json:"duration_s,omitempty"`
	// DrainS is how long after the last arrival in-flight requests may
	// finish before they count as failed (default 120).
	DrainS float64 `json:"drain_s,omitempty"`
	// Seed is the default seed (the --seed flag overrides it).
	Seed uint64 `json:"seed,omitempty"`
	SLO  SLO    `json:"slo"`
	// Regions lists the regions; RTTms[a][b] is the round-trip time
	// between them (symmetric: one direction suffices). Within a region
	// the RTT is IntraRegionRTTms (default 1).
	Regions          []string                      `json:"regions"`
	RTTms            map[string]map[string]float64 `json:"rtt_ms"`
	IntraRegionRTTms float64                       `json:"intra_region_rtt_ms,omitempty"`
	Clusters         []Cluster                     `json:"clusters"`
	Engines          []Engine                      `json:"engines"`
	Workload         Workload                      `json:"workload"`
	Control          Control                       `json:"control,omitempty"`
	Events           []Event                       `json:"events,omitempty"`
	// Initial are the weights the gateways route on from time 0, until
	// the simulated control plane's first plan, which also takes them as
	// its previous weights (a digital twin starts from the live snapshot
	// in force at the start of its range). None: no snapshot at first.
	Initial []InitialPlan `json:"initial,omitempty"`

	// dir is the directory of the scenario file, for relative trace paths.
	dir string
}

// InitialPlan is one cluster's part of the snapshot in force at time 0.
type InitialPlan struct {
	Cluster      string             `json:"cluster"`
	DemandRPS    float64            `json:"demand_rps,omitempty"`
	ShedFraction float64            `json:"shed_fraction,omitempty"`
	Weights      map[string]float64 `json:"weights"`
}

// SLO is the service level a request must meet to count towards goodput.
type SLO struct {
	TTFTms float64 `json:"ttft_ms"`
	TBOTms float64 `json:"tbot_ms"`
}

// Cluster is a gateway cluster: where requests enter.
type Cluster struct {
	ID     string `json:"id"`
	Region string `json:"region"`
	// Share is the cluster's share of the workload (normalised over
	// clusters; default equal shares).
	Share float64 `json:"share,omitempty"`
}

// Engine is one serving engine (a group of identical replicas).
type Engine struct {
	ID     string `json:"id"`
	Region string `json:"region"`
	// GPU is the engine model preset: "h100", "a100" or "l4".
	GPU      string `json:"gpu"`
	Replicas int    `json:"replicas,omitempty"`
	// MaxWaiting bounds each replica's queue (default the engine
	// model's: 16 × max seqs).
	MaxWaiting int `json:"max_waiting,omitempty"`
	// MaxModelLen overrides the preset's context limit (long-context
	// traces need more than the default).
	MaxModelLen int `json:"max_model_len,omitempty"`
	// MaxSeqs overrides the preset's batch limit (vLLM's max_num_seqs),
	// as operators tune it to where the GPU saturates.
	MaxSeqs int `json:"max_seqs,omitempty"`
	// KVBlocks overrides a replica's KV-cache capacity in blocks of the
	// preset's block size (vLLM's num_gpu_blocks; enginesim --kv-blocks).
	KVBlocks int `json:"kv_blocks,omitempty"`
	// LatencyMultiplier makes the engine that many times slower than its
	// GPU preset (every prefill and decode step), while it still declares
	// the preset's class: a throttled or misconfigured peer (default 1).
	LatencyMultiplier float64 `json:"latency_multiplier,omitempty"`
	// ReportMaxBatch says whether the engine exports its batch limit
	// (default true). vLLM does not: with false the engine's agent
	// publishes no max batch and the processor must infer or assume one.
	ReportMaxBatch *bool `json:"report_max_batch,omitempty"`
}

// ReportsMaxBatch reports whether the engine exports its batch limit.
func (e Engine) ReportsMaxBatch() bool { return e.ReportMaxBatch == nil || *e.ReportMaxBatch }

// Workload kinds.
const (
	KindGenerator = "generator"
	KindMooncake  = "mooncake"
	KindAzure     = "azure"
)

// Workload says where requests come from.
type Workload struct {
	// Kind is "generator", "mooncake" or "azure".
	Kind string `json:"kind"`
	// Trace is the trace file, relative to the scenario file (mooncake
	// and azure; the --trace flag overrides it).
	Trace string `json:"trace,omitempty"`
	// TimeScale divides trace arrival times (2 replays twice as fast);
	// default 1.
	TimeScale float64 `json:"time_scale,omitempty"`
	// RateRPS is the generator's mean total arrival rate.
	RateRPS float64 `json:"rate_rps,omitempty"`
	// Generator knobs (see workload.Generator; 0 takes its default).
	Sessions      int `json:"sessions,omitempty"`
	SystemPrompts int `json:"system_prompts,omitempty"`
	SystemTokens  int `json:"system_tokens,omitempty"`
	TurnTokens    int `json:"turn_tokens,omitempty"`
	OutputTokens  int `json:"output_tokens,omitempty"`
	MaxTurns      int `json:"max_turns,omitempty"`
	// RateProfile scales the arrival rate over the run: [fraction of
	// DurationS in [0,1], multiplier >= 0] points, interpolated linearly.
	// Requests are thinned by multiplier / max multiplier.
	RateProfile [][2]float64 `json:"rate_profile,omitempty"`
	// NonStreamingShare is the share of conversations whose client asks
	// for a non-streaming response (stream: false), in [0, 1] (default 0:
	// every request streams). A conversation is drawn once, by a hash of
	// its session and the seed, so all its turns agree.
	NonStreamingShare float64 `json:"non_streaming_share,omitempty"`
}

// Control holds the control-plane and gateway settings.
type Control struct {
	// TickMs is the period at which policies observe the world and
	// snapshots can be installed (default 100).
	TickMs float64 `json:"tick_ms,omitempty"`
	// SignalIntervalS is the engine agents' scrape interval (default 1).
	SignalIntervalS float64 `json:"signal_interval_s,omitempty"`
	// WindowS and SlideS are the processor's estimate window (default
	// 10 s sliding by 2 s).
	WindowS float64 `json:"window_s,omitempty"`
	SlideS  float64 `json:"slide_s,omitempty"`
	// AllowedLatenessS is how late (behind the processor's watermark) a
	// routing event may arrive and still count (default 5, the
	// processor's).
	AllowedLatenessS float64 `json:"allowed_lateness_s,omitempty"`
	// OptimizerPeriodS is how often the optimizer solves (default 5).
	OptimizerPeriodS float64 `json:"optimizer_period_s,omitempty"`
	// PropagationMs is the delay from solve to the gateways routing on
	// the snapshot (default 500).
	PropagationMs float64 `json:"propagation_ms,omitempty"`
	// HealthCheckMs is how long gateways take to notice an engine going
	// down or coming back (default 2000).
	HealthCheckMs float64 `json:"health_check_ms,omitempty"`
	// PeerLoadMs is how often each switchyard gateway shares its queued
	// prefill per engine with the other gateways (gateway/peers; default
	// 100, the gateway's --peer-load-interval); negative: never.
	PeerLoadMs float64 `json:"peer_load_ms,omitempty"`
	// MaxUtilization and ChurnWeight are the optimizer settings
	// (defaults 0.9 and 5, the optimizer service's).
	MaxUtilization float64 `json:"max_utilization,omitempty"`
	ChurnWeight    float64 `json:"churn_weight,omitempty"`
	// LegacyPeriodS, LegacyGain and LegacyLagS drive the legacy-irb
	// controller (defaults 5 s, 0.8, 5 s).
	LegacyPeriodS float64 `json:"legacy_period_s,omitempty"`
	LegacyGain    float64 `json:"legacy_gain,omitempty"`
	LegacyLagS    float64 `json:"legacy_lag_s,omitempty"`
}

// Event kinds.
const (
	EventEngineDown = "engine_down"
	EventEngineUp   = "engine_up"
	EventRegionDown = "region_down"
	EventRegionUp   = "region_up"
	EventRate       = "rate"
	EventReplicas   = "replicas"
)

// Event is one scheduled change.
type Event struct {
	AtS  float64 `json:"at_s"`
	Kind string  `json:"kind"`
	// Engine for engine_down, engine_up and replicas.
	Engine string `json:"engine,omitempty"`
	// Region for region_down and region_up.
	Region string `json:"region,omitempty"`
	// Factor multiplies the arrival rate in [AtS, UntilS) for rate
	// events (a flash crowd is a factor > 1: extra new conversations);
	// Cluster limits it to one cluster.
	Factor  float64 `json:"factor,omitempty"`
	UntilS  float64 `json:"until_s,omitempty"`
	Cluster string  `json:"cluster,omitempty"`
	// Replicas is the engine's new replica count (replicas events); the
	// old instance drains what it holds.
	Replicas int `json:"replicas,omitempty"`
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid scenario")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// MaxEngines and MaxClusters bound a scenario.
const (
	MaxEngines  = 4096
	MaxClusters = 1024
)

// Load reads and validates the scenario file at path.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scenario: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.dir = filepath.Dir(path)
	return s, nil
}

// Parse decodes and validates a scenario; unknown fields are errors.
func Parse(b []byte) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("trailing data after the scenario object")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// TracePath resolves the workload's trace path against the scenario
// file's directory.
func (s *Scenario) TracePath() string {
	if s.Workload.Trace == "" || filepath.IsAbs(s.Workload.Trace) || s.dir == "" {
		return s.Workload.Trace
	}
	return filepath.Join(s.dir, s.Workload.Trace)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func nonNeg(field string, v float64) error {
	if !finite(v) || v < 0 {
		return invalid("%s = %v, want finite and >= 0", field, v)
	}
	return nil
}

// Validate checks s and names the first offending field.
func (s *Scenario) Validate() error {
	if s.Name == "" {
		return invalid("name is empty")
	}
	if err := s.validateNumbers(); err != nil {
		return err
	}
	regions, err := s.validateRegions()
	if err != nil {
		return err
	}
	clusters, err := s.validateClusters(regions)
	if err != nil {
		return err
	}
	engines, err := s.validateEngines(regions)
	if err != nil {
		return err
	}
	if err := s.validateWorkload(); err != nil {
		return err
	}
	for i, ev := range s.Events {
		if err := s.validateEvent(i, ev, engines, regions, clusters); err != nil {
			return err
		}
	}
	return validateInitial(s.Initial, clusters, engines)
}

// validateInitial checks the initial weights: known clusters, each once,
// known engines, weights and shed in [0, 1], demand finite and >= 0.
func validateInitial(ps []InitialPlan, clusters, engines map[string]bool) error {
	seen := map[string]bool{}
	for i, p := range ps {
		switch {
		case !clusters[p.Cluster]:
			return invalid("initial[%d].cluster %q is not a cluster", i, p.Cluster)
		case seen[p.Cluster]:
			return invalid("initial[%d].cluster %q is duplicated", i, p.Cluster)
		case !(p.ShedFraction >= 0 && p.ShedFraction <= 1):
			return invalid("initial[%d].shed_fraction %v not in [0, 1]", i, p.ShedFraction)
		case !(p.DemandRPS >= 0) || math.IsInf(p.DemandRPS, 1):
			return invalid("initial[%d].demand_rps %v must be finite and >= 0", i, p.DemandRPS)
		}
		seen[p.Cluster] = true
		for e, w := range p.Weights {
			if !engines[e] {
				return invalid("initial[%d].weights: %q is not an engine", i, e)
			}
			if !(w >= 0 && w <= 1) {
				return invalid("initial[%d].weights[%q] %v not in [0, 1]", i, e, w)
			}
		}
	}
	return nil
}

// validateNumbers checks the scalar settings: durations, rates and the
// control plane's knobs are finite and non-negative, and the SLO positive.
func (s *Scenario) validateNumbers() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"duration_s", s.DurationS}, {"drain_s", s.DrainS}, {"intra_region_rtt_ms", s.IntraRegionRTTms},
		{"workload.time_scale", s.Workload.TimeScale}, {"workload.rate_rps", s.Workload.RateRPS},
		{"workload.non_streaming_share", s.Workload.NonStreamingShare},
		{"control.tick_ms", s.Control.TickMs}, {"control.signal_interval_s", s.Control.SignalIntervalS},
		{"control.window_s", s.Control.WindowS}, {"control.slide_s", s.Control.SlideS},
		{"control.allowed_lateness_s", s.Control.AllowedLatenessS},
		{"control.optimizer_period_s", s.Control.OptimizerPeriodS}, {"control.propagation_ms", s.Control.PropagationMs},
		{"control.health_check_ms", s.Control.HealthCheckMs}, {"control.max_utilization", s.Control.MaxUtilization},
		{"control.churn_weight", s.Control.ChurnWeight}, {"control.legacy_period_s", s.Control.LegacyPeriodS},
		{"control.legacy_gain", s.Control.LegacyGain}, {"control.legacy_lag_s", s.Control.LegacyLagS},
	} {
		if err := nonNeg(f.name, f.v); err != nil {
			return err
		}
	}
	if s.DurationS > 7*24*3600 {
		return invalid("duration_s = %v, want at most a week", s.DurationS)
	}
	if s.Control.MaxUtilization > 1 {
		return invalid("control.max_utilization = %v, want in (0, 1]", s.Control.MaxUtilization)
	}
	if !(s.SLO.TTFTms > 0) || !finite(s.SLO.TTFTms) {
		return invalid("slo.ttft_ms = %v, want > 0", s.SLO.TTFTms)
	}
	if !(s.SLO.TBOTms > 0) || !finite(s.SLO.TBOTms) {
		return invalid("slo.tbot_ms = %v, want > 0", s.SLO.TBOTms)
	}
	return nil
}

// validateRegions checks the region names and the RTT matrix, and
// returns the set of regions.
func (s *Scenario) validateRegions() (map[string]bool, error) {
	if len(s.Regions) == 0 {
		return nil, invalid("regions is empty")
	}
	regions := map[string]bool{}
	for i, r := range s.Regions {
		if r == "" {
			return nil, invalid("regions[%d] is empty", i)
		}
		if regions[r] {
			return nil, invalid("regions[%d] %q is duplicated", i, r)
		}
		regions[r] = true
	}
	for _, a := range sortedKeys(s.RTTms) {
		row := s.RTTms[a]
		if !regions[a] {
			return nil, invalid("rtt_ms[%q]: unknown region", a)
		}
		for _, b := range sortedKeys(row) {
			v := row[b]
			if !regions[b] {
				return nil, invalid("rtt_ms[%q][%q]: unknown region", a, b)
			}
			if !finite(v) || v < 0 || v > 60000 {
				return nil, invalid("rtt_ms[%q][%q] = %v, want in [0, 60000]", a, b, v)
			}
		}
	}
	return regions, nil
}

// validateClusters checks the gateway clusters and returns their ids.
func (s *Scenario) validateClusters(regions map[string]bool) (map[string]bool, error) {
	if len(s.Clusters) == 0 {
		return nil, invalid("clusters is empty")
	}
	if len(s.Clusters) > MaxClusters {
		return nil, invalid("clusters has %d entries, limit %d", len(s.Clusters), MaxClusters)
	}
	clusters := map[string]bool{}
	for i, c := range s.Clusters {
		switch {
		case c.ID == "":
			return nil, invalid("clusters[%d].id is empty", i)
		case clusters[c.ID]:
			return nil, invalid("clusters[%d].id %q is duplicated", i, c.ID)
		case !regions[c.Region]:
			return nil, invalid("clusters[%d].region %q is not in regions", i, c.Region)
		}
		if err := nonNeg(fmt.Sprintf("clusters[%d].share", i), c.Share); err != nil {
			return nil, err
		}
		clusters[c.ID] = true
	}
	return clusters, nil
}

// validateEngines checks the engines and returns their ids.
func (s *Scenario) validateEngines(regions map[string]bool) (map[string]bool, error) {
	if len(s.Engines) == 0 {
		return nil, invalid("engines is empty")
	}
	if len(s.Engines) > MaxEngines {
		return nil, invalid("engines has %d entries, limit %d", len(s.Engines), MaxEngines)
	}
	engines := map[string]bool{}
	for i, e := range s.Engines {
		if err := validateEngine(i, e, regions, engines); err != nil {
			return nil, err
		}
		engines[e.ID] = true
	}
	return engines, nil
}

func validateEngine(i int, e Engine, regions, seen map[string]bool) error {
	switch {
	case e.ID == "":
		return invalid("engines[%d].id is empty", i)
	case seen[e.ID]:
		return invalid("engines[%d].id %q is duplicated", i, e.ID)
	case !regions[e.Region]:
		return invalid("engines[%d].region %q is not in regions", i, e.Region)
	case e.Replicas < 0 || e.Replicas > 1024:
		return invalid("engines[%d].replicas = %d, want in [1, 1024] (0 means 1)", i, e.Replicas)
	case e.MaxWaiting < 0:
		return invalid("engines[%d].max_waiting = %d, want >= 0", i, e.MaxWaiting)
	case e.MaxSeqs < 0 || e.MaxSeqs > 1<<16:
		return invalid("engines[%d].max_seqs = %d, want in [1, %d] (0: the preset's)", i, e.MaxSeqs, 1<<16)
	case e.KVBlocks < 0 || e.KVBlocks > 1<<24:
		return invalid("engines[%d].kv_blocks = %d, want in [1, %d] (0: the preset's)", i, e.KVBlocks, 1<<24)
	case e.MaxModelLen < 0 || e.MaxModelLen == 1 || e.MaxModelLen > 1<<20:
		return invalid("engines[%d].max_model_len = %d, want in [2, %d] (0: the preset's)", i, e.MaxModelLen, 1<<20)
	case !finite(e.LatencyMultiplier) || e.LatencyMultiplier < 0 || e.LatencyMultiplier > 1000:
		return invalid("engines[%d].latency_multiplier = %v, want in (0, 1000] (0 means 1)", i, e.LatencyMultiplier)
	}
	if _, err := engine.LookupPreset(e.GPU); err != nil {
		return invalid("engines[%d].gpu: %v", i, err)
	}
	return nil
}

func (s *Scenario) validateWorkload() error {
	w := s.Workload
	switch w.Kind {
	case KindGenerator:
		if !(w.RateRPS > 0) {
			return invalid("workload.rate_rps = %v, want > 0 for the generator", w.RateRPS)
		}
		if w.RateRPS > 1e6 {
			return invalid("workload.rate_rps = %v, want at most 1e6", w.RateRPS)
		}
		if !(s.DurationS > 0) {
			return invalid("duration_s = %v, want > 0 for the generator", s.DurationS)
		}
	case KindMooncake, KindAzure:
		if w.Trace == "" {
			return invalid("workload.trace is empty for a %s workload", w.Kind)
		}
	default:
		return invalid("workload.kind = %q, want generator, mooncake or azure", w.Kind)
	}
	for i, v := range []int{w.Sessions, w.SystemPrompts, w.SystemTokens, w.TurnTokens, w.OutputTokens, w.MaxTurns} {
		if v < 0 || v > 1<<20 {
			names := []string{"sessions", "system_prompts", "system_tokens", "turn_tokens", "output_tokens", "max_turns"}
			return invalid("workload.%s = %d, want in [0, %d]", names[i], v, 1<<20)
		}
	}
	for i, p := range w.RateProfile {
		if !finite(p[0]) || p[0] < 0 || p[0] > 1 {
			return invalid("workload.rate_profile[%d][0] = %v, want a fraction in [0, 1]", i, p[0])
		}
		if i > 0 && p[0] <= w.RateProfile[i-1][0] {
			return invalid("workload.rate_profile[%d][0] = %v, want increasing", i, p[0])
		}
		if !finite(p[1]) || p[1] < 0 || p[1] > 1000 {
			return invalid("workload.rate_profile[%d][1] = %v, want in [0, 1000]", i, p[1])
		}
	}
	if len(w.RateProfile) > 0 && !(s.DurationS > 0) {
		return invalid("workload.rate_profile needs duration_s > 0")
	}
	if w.NonStreamingShare > 1 {
		return invalid("workload.non_streaming_share = %v, want in [0, 1]", w.NonStreamingShare)
	}
	return nil
}

func (s *Scenario) validateEvent(i int, ev Event, engines, regions, clusters map[string]bool) error {
	if !finite(ev.AtS) || ev.AtS < 0 {
		return invalid("events[%d].at_s = %v, want finite and >= 0", i, ev.AtS)
	}
	switch ev.Kind {
	case EventEngineDown, EventEngineUp:
		if !engines[ev.Engine] {
			return invalid("events[%d].engine %q is not in engines", i, ev.Engine)
		}
	case EventReplicas:
		if !engines[ev.Engine] {
			return invalid("events[%d].engine %q is not in engines", i, ev.Engine)
		}
		if ev.Replicas < 1 || ev.Replicas > 1024 {
			return invalid("events[%d].replicas = %d, want in [1, 1024]", i, ev.Replicas)
		}
	case EventRegionDown, EventRegionUp:
		if !regions[ev.Region] {
			return invalid("events[%d].region %q is not in regions", i, ev.Region)
		}
	case EventRate:
		if !finite(ev.Factor) || ev.Factor < 0 || ev.Factor > 1000 {
			return invalid("events[%d].factor = %v, want in [0, 1000]", i, ev.Factor)
		}
		if !finite(ev.UntilS) || ev.UntilS <= ev.AtS {
			return invalid("events[%d].until_s = %v, want > at_s (%v)", i, ev.UntilS, ev.AtS)
		}
		if ev.Cluster != "" && !clusters[ev.Cluster] {
			return invalid("events[%d].cluster %q is not in clusters", i, ev.Cluster)
		}
	default:
		return invalid("events[%d].kind = %q, want engine_down, engine_up, region_down, region_up, rate or replicas", i, ev.Kind)
	}
	return nil
}

// RTT returns the round-trip time between two regions.
func (s *Scenario) RTT(a, b string) time.Duration {
	ms := s.IntraRegionRTTms
	if a == b {
		if ms == 0 {
			ms = 1
		}
	} else if v, ok := s.RTTms[a][b]; ok {
		ms = v
	} else if v, ok := s.RTTms[b][a]; ok {
		ms = v
	} else {
		ms = 100 // unknown pairs are far apart
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// Defaults returns c with every zero field set to its default.
func (c Control) Defaults() Control {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.TickMs, 100)
	def(&c.SignalIntervalS, 1)
	def(&c.WindowS, 10)
	def(&c.SlideS, 2)
	def(&c.AllowedLatenessS, 5)
	def(&c.OptimizerPeriodS, 5)
	def(&c.PropagationMs, 500)
	def(&c.HealthCheckMs, 2000)
	def(&c.PeerLoadMs, 100)
	def(&c.MaxUtilization, 0.9)
	def(&c.ChurnWeight, plan.DefaultChurnWeight)
	def(&c.LegacyPeriodS, 5)
	def(&c.LegacyGain, 0.8)
	def(&c.LegacyLagS, 5)
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
