package fleet

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Warmup is the number of an engine's first estimates taken as its
// baseline (within the registry's bounds): three slides, one 30 s window
// at the processor's defaults.
const Warmup = 3

// DefaultMaxGain is how much better than its baseline an engine's
// estimate may look before it is quarantined (Guard).
const DefaultMaxGain = 2.0

// Guard filters the estimates the optimizer plans from (docs/security.md
// #engine-registry):
//
//   - an estimate for an engine the registry does not hold, or at another
//     endpoint, is dropped (Verdict Rejected), as are network estimates
//     for such engines; a registered engine's estimate takes the
//     registry's endpoint, region and GPU class;
//   - a registered engine's estimate that claims more than the registry
//     allows (max_batch, ready replicas), a capacity above MaxGain × its
//     baseline, or a TTFT or TBOT profile whose lowest latency is below
//     its baseline's / MaxGain is quarantined: the planner gets the
//     engine's last trusted estimate (dated to the new window, with the
//     worse of the two healths) instead, so the claim moves no traffic
//     (Verdict Quarantined). An engine with no trusted estimate yet is
//     left out of the plan while its claim is implausible.
//
// The baseline capacity is the largest of the engine's first Warmup
// estimates' (a window's worth: the first windows of a processor are
// partial, and these are taken as they are), raised to the
// rate the gateways observed the engine serving (its network estimates'
// samples over the window): gateways confirm a capacity by routing that
// much to the engine, so an engine that really grew gets there by
// MaxGain per window while it is busy, and a claim alone never does. The
// baseline latencies are the lowest of the trusted estimates'.
//
// Without a registry (nil) Guard only applies the plausibility bounds.
// It is pure (no clock, no I/O) and not safe for concurrent use.
type Guard struct {
	reg     *Registry
	gain    float64
	engines map[string]*history
}

type history struct {
	trusted          *schemas.EngineEstimate
	seen             int // estimates trusted, up to Warmup
	baseCap          float64
	baseTTFT         float64 // ms, 0 unknown
	baseTBOT         float64
	quarantined      bool
	servedRPS        float64 // gateways' observed rate in the latest window
	servedEnd        int64   // that window's end
	servedSamplesSum uint64
}

// Kind of a Verdict.
type Kind int

const (
	// Rejected: the engine is not registered at that endpoint; its
	// estimate was dropped.
	Rejected Kind = iota + 1
	// Quarantined: the estimate's claims are implausible; the last
	// trusted estimate (or nothing) was planned instead.
	Quarantined
	// Confirmed: an engine in quarantine has a plausible estimate again.
	Confirmed
)

// Verdict is what Guard did to one engine's estimate.
type Verdict struct {
	Kind   Kind
	Engine string
	// Reason: for Rejected the Check reason code, for Quarantined what
	// was implausible.
	Reason string
	// Entered is true for a Quarantined verdict on an engine that was
	// not in quarantine.
	Entered bool
}

// NewGuard returns a guard over reg (nil: no registry) that quarantines
// claims more than maxGain times better than the baseline (0:
// DefaultMaxGain; it must be > 1; +Inf: no plausibility bounds, only
// the registry).
func NewGuard(reg *Registry, maxGain float64) (*Guard, error) {
	if maxGain == 0 {
		maxGain = DefaultMaxGain
	}
	if !(maxGain > 1) {
		return nil, fmt.Errorf("max gain %v: want a number > 1", maxGain)
	}
	return &Guard{reg: reg, gain: maxGain, engines: map[string]*history{}}, nil
}

// GuardFor returns the guard the optimizer and replay filter estimates
// through, given their registry and max gain settings: with a registry
// or a maxGain above 0 a guard over reg (maxGain 0: DefaultMaxGain;
// negative: no plausibility bounds, the registry only); with neither,
// nil: every estimate is planned as it is.
func GuardFor(reg *Registry, maxGain float64) (*Guard, error) {
	if reg == nil && maxGain <= 0 {
		return nil, nil
	}
	if maxGain < 0 {
		maxGain = math.Inf(1)
	}
	return NewGuard(reg, maxGain)
}

// Quarantined is the number of engines in quarantine.
func (g *Guard) Quarantined() int {
	n := 0
	for _, h := range g.engines {
		if h.quarantined {
			n++
		}
	}
	return n
}

// Filter returns the estimates of one window as the planner may see
// them, and a verdict per estimate it dropped or changed (and per engine
// leaving quarantine). ests is not modified.
func (g *Guard) Filter(ests []*schemas.Estimate) ([]*schemas.Estimate, []Verdict) {
	out := make([]*schemas.Estimate, 0, len(ests))
	var verdicts []Verdict
	windowS := 0.0
	for _, est := range ests {
		if e := est.GetEngine(); e != nil && e.GetWindowEndUnixMs() > e.GetWindowStartUnixMs() {
			windowS = float64(e.GetWindowEndUnixMs()-e.GetWindowStartUnixMs()) / 1000
			break
		}
	}
	// The gateways' observations first: they confirm the engines' claims
	// of the same window.
	for _, est := range ests {
		n := est.GetNetwork()
		if n == nil {
			continue
		}
		if g.reg.Check(n.GetEngineId(), "") != nil {
			continue // nothing of an unregistered engine reaches the plan
		}
		h := g.history(n.GetEngineId())
		if n.GetWindowEndUnixMs() != h.servedEnd {
			h.servedEnd, h.servedSamplesSum = n.GetWindowEndUnixMs(), 0
		}
		h.servedSamplesSum += uint64(n.GetSamples())
		if windowS > 0 {
			h.servedRPS = float64(h.servedSamplesSum) / windowS
		}
	}
	for _, est := range ests {
		switch k := est.GetKind().(type) {
		case *schemas.Estimate_Network:
			if g.reg.Check(k.Network.GetEngineId(), "") == nil {
				out = append(out, est)
			}
		case *schemas.Estimate_Engine:
			e, v := g.engine(k.Engine)
			if v.Kind != 0 {
				verdicts = append(verdicts, v)
			}
			if e != nil {
				if e == k.Engine {
					out = append(out, est)
				} else {
					out = append(out, &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: e}})
				}
			}
		default:
			out = append(out, est)
		}
	}
	return out, verdicts
}

func (g *Guard) history(id string) *history {
	h := g.engines[id]
	if h == nil {
		h = &history{}
		g.engines[id] = h
	}
	return h
}

// engine judges one engine estimate: the estimate to plan (nil: none)
// and the verdict (Kind 0: passed unchanged).
func (g *Guard) engine(e *schemas.EngineEstimate) (*schemas.EngineEstimate, Verdict) {
	id := e.GetEngineId()
	if err := g.reg.Check(id, e.GetEndpointUrl()); err != nil {
		return nil, Verdict{Kind: Rejected, Engine: id, Reason: Reason(err)}
	}
	reg, registered := g.reg.Lookup(id)
	if registered && (e.GetEndpointUrl() != reg.URL ||
		(reg.Region != "" && e.GetRegion() != reg.Region) || (reg.GPUClass != "" && e.GetGpuClass() != reg.GPUClass)) {
		e = proto.Clone(e).(*schemas.EngineEstimate)
		e.EndpointUrl = reg.URL
		if reg.Region != "" {
			e.Region = reg.Region
		}
		if reg.GPUClass != "" {
			e.GpuClass = reg.GPUClass
		}
	}
	h := g.history(id)
	h.baseCap = math.Max(h.baseCap, h.servedRPS)
	reason := g.implausible(e, reg, h)
	if reason == "" {
		was := h.quarantined
		g.trust(h, e)
		if was {
			return e, Verdict{Kind: Confirmed, Engine: id}
		}
		return e, Verdict{}
	}
	v := Verdict{Kind: Quarantined, Engine: id, Reason: reason, Entered: !h.quarantined}
	h.quarantined = true
	if h.trusted == nil {
		return nil, v
	}
	q := proto.Clone(h.trusted).(*schemas.EngineEstimate)
	q.WindowStartUnixMs, q.WindowEndUnixMs = e.GetWindowStartUnixMs(), e.GetWindowEndUnixMs()
	q.Health = max(q.GetHealth(), e.GetHealth()) // the enum orders healthy < degraded < unhealthy
	return q, v
}

// trust makes e the engine's trusted estimate.
func (g *Guard) trust(h *history, e *schemas.EngineEstimate) {
	h.quarantined = false
	h.trusted = e
	if h.seen < Warmup {
		h.seen++
		h.baseCap = math.Max(h.baseCap, e.GetCapacityRps())
	}
	if l, ok := lowest(e.GetTtftProfile()); ok && l > 0 && (h.baseTTFT == 0 || l < h.baseTTFT) {
		h.baseTTFT = l
	}
	if l, ok := lowest(e.GetTbotProfile()); ok && l > 0 && (h.baseTBOT == 0 || l < h.baseTBOT) {
		h.baseTBOT = l
	}
}

// implausible returns what about e is implausible, or "".
func (g *Guard) implausible(e *schemas.EngineEstimate, reg Engine, h *history) string {
	if reg.MaxBatch > 0 && e.GetMaxBatch() > reg.MaxBatch {
		return fmt.Sprintf("max_batch %d above the registry's %d", e.GetMaxBatch(), reg.MaxBatch)
	}
	if reg.MaxReplicas > 0 && e.GetReadyReplicas() > reg.MaxReplicas {
		return fmt.Sprintf("ready_replicas %d above the registry's %d", e.GetReadyReplicas(), reg.MaxReplicas)
	}
	if h.seen < Warmup {
		return "" // the first estimates are the baseline
	}
	if c := e.GetCapacityRps(); c > g.gain*h.baseCap {
		return fmt.Sprintf("capacity %.3g rps above %g x its baseline %.3g rps (gateways observed %.3g rps)", c, g.gain, h.baseCap, h.servedRPS)
	}
	if l, ok := lowest(e.GetTtftProfile()); ok && h.baseTTFT > 0 && l*g.gain < h.baseTTFT {
		return fmt.Sprintf("ttft %.3g ms below its baseline %.3g ms / %g", l, h.baseTTFT, g.gain)
	}
	if l, ok := lowest(e.GetTbotProfile()); ok && h.baseTBOT > 0 && l*g.gain < h.baseTBOT {
		return fmt.Sprintf("tbot %.3g ms below its baseline %.3g ms / %g", l, h.baseTBOT, g.gain)
	}
	return ""
}

// lowest is a profile's lowest latency (ms, NaN and below 0 read as 0);
// false without points.
func lowest(p *schemas.LatencyProfile) (float64, bool) {
	pts := p.GetPoints()
	if len(pts) == 0 {
		return 0, false
	}
	l := math.Inf(1)
	for _, pt := range pts {
		v := pt.GetLatencyMs()
		if !(v > 0) {
			v = 0
		}
		l = math.Min(l, v)
	}
	return l, true
}
