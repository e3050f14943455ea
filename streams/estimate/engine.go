package estimate

import (
	"math"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Latency observations are bucketed by utilization so an engine's state
// has a fixed size however many signals a window holds.
const (
	numBins  = 24
	binWidth = 0.0625 // bins cover [0, 1.5); higher utilizations share the last
)

type bin struct{ w, wu, wl float64 }

type bins [numBins]bin

func (b *bins) add(u, l, w float64) {
	i := int(u / binWidth)
	if i >= numBins {
		i = numBins - 1
	}
	if i < 0 {
		i = 0
	}
	b[i].w += w
	b[i].wu += w * u
	b[i].wl += w * l
}

func (b *bins) merge(o *bins) {
	for i := range b {
		b[i].w += o[i].w
		b[i].wu += o[i].wu
		b[i].wl += o[i].wl
	}
}

// obs returns one observation per non-empty bin, by utilization.
func (b *bins) obs() []Obs {
	var out []Obs
	for _, x := range b {
		if x.w > 0 {
			out = append(out, Obs{Utilization: x.wu / x.w, LatencyMs: x.wl / x.w, Weight: x.w})
		}
	}
	return out
}

// Engine accumulates one engine's signals over a pane or a window.
type Engine struct {
	// Latest values (by event time).
	lastMs                            int64
	endpoint, region, gpuClass, model string
	ready                             uint32
	health                            schemas.Health
	maxBatch                          uint32
	signals, unhealthy                uint32
	interval, finished, prompt, gen   float64
	running, waiting, kv, util        float64
	hits, queries                     float64
	ttftCount, ttftSumMs              float64
	tbotCount, tbotSumMs              float64
	ttft, tbot                        bins
}

// utilization of one signal: running requests over the concurrent
// capacity (max batch × ready replicas), or KV-cache usage when that is
// higher (memory-bound engines saturate before their batch limit).
func signalUtil(s *schemas.EngineSignal) float64 {
	mb := float64(s.GetMaxBatch())
	if mb == 0 {
		mb = priorFor(s.GetGpuClass()).MaxBatch
	}
	r := float64(s.GetReadyReplicas())
	if r == 0 {
		r = 1
	}
	return math.Max(s.GetRunningRequests()/(mb*r), s.GetKvCacheUsage())
}

func histMeanMs(h *schemas.Histogram) (count, sumMs float64) {
	if h == nil || h.GetCount() == 0 {
		return 0, 0
	}
	return float64(h.GetCount()), h.GetSum() * 1000
}

// Add folds a validated signal in.
func (e *Engine) Add(s *schemas.EngineSignal) {
	if s.GetEventTimeUnixMs() >= e.lastMs {
		e.lastMs = s.GetEventTimeUnixMs()
		e.endpoint, e.region, e.gpuClass, e.model = s.GetEndpointUrl(), s.GetRegion(), s.GetGpuClass(), s.GetModel()
		e.ready, e.health = s.GetReadyReplicas(), s.GetHealth()
		if s.GetMaxBatch() > 0 {
			e.maxBatch = s.GetMaxBatch()
		}
	}
	e.signals++
	if s.GetHealth() == schemas.Health_HEALTH_UNHEALTHY || s.GetHealth() == schemas.Health_HEALTH_DEGRADED {
		e.unhealthy++
	}
	e.interval += s.GetIntervalSeconds()
	e.finished += s.GetRequestsFinished()
	e.prompt += s.GetPromptTokens()
	e.gen += s.GetGenerationTokens()
	e.running += s.GetRunningRequests()
	e.waiting += s.GetWaitingRequests()
	e.kv += s.GetKvCacheUsage()
	u := signalUtil(s)
	e.util += u
	e.hits += s.GetPrefixCacheHits()
	e.queries += s.GetPrefixCacheQueries()
	if n, sum := histMeanMs(s.GetTtftSeconds()); n > 0 {
		e.ttftCount += n
		e.ttftSumMs += sum
		e.ttft.add(u, sum/n, n)
	}
	if n, sum := histMeanMs(s.GetTbotSeconds()); n > 0 {
		e.tbotCount += n
		e.tbotSumMs += sum
		e.tbot.add(u, sum/n, n)
	}
}

// Merge folds o (a later pane) into e.
func (e *Engine) Merge(o *Engine) {
	if o.lastMs >= e.lastMs {
		e.lastMs = o.lastMs
		e.endpoint, e.region, e.gpuClass, e.model = o.endpoint, o.region, o.gpuClass, o.model
		e.ready, e.health = o.ready, o.health
		if o.maxBatch > 0 {
			e.maxBatch = o.maxBatch
		}
	}
	e.signals += o.signals
	e.unhealthy += o.unhealthy
	e.interval += o.interval
	e.finished += o.finished
	e.prompt += o.prompt
	e.gen += o.gen
	e.running += o.running
	e.waiting += o.waiting
	e.kv += o.kv
	e.util += o.util
	e.hits += o.hits
	e.queries += o.queries
	e.ttftCount += o.ttftCount
	e.ttftSumMs += o.ttftSumMs
	e.tbotCount += o.tbotCount
	e.tbotSumMs += o.tbotSumMs
	e.ttft.merge(&o.ttft)
	e.tbot.merge(&o.tbot)
}

// MeanTTFTMs is the mean engine-reported TTFT (0 without data).
func (e *Engine) MeanTTFTMs() float64 {
	if e.ttftCount == 0 {
		return 0
	}
	return e.ttftSumMs / e.ttftCount
}

// Estimate turns the window's accumulated state into an EngineEstimate.
func (e *Engine) Estimate(id string, start, end int64, fit Fitter) *schemas.EngineEstimate {
	p := priorFor(e.gpuClass)
	n := float64(e.signals)
	out := &schemas.EngineEstimate{
		SchemaVersion: schemas.Version, EngineId: id, EndpointUrl: e.endpoint, Region: e.region, GpuClass: e.gpuClass,
		WindowStartUnixMs: start, WindowEndUnixMs: end,
		Health: e.health, ReadyReplicas: e.ready, SignalCount: e.signals,
	}
	if out.Health == schemas.Health_HEALTH_HEALTHY && e.unhealthy > 0 {
		out.Health = schemas.Health_HEALTH_DEGRADED
	}
	if n > 0 {
		out.KvCacheUsage = e.kv / n
		out.Utilization = e.util / n
	}
	if e.queries > 0 {
		out.PrefixHitRate = math.Min(1, e.hits/e.queries)
	}
	// Throughput: prefills completed per second (the TTFT histogram's
	// count), which does not lag the work as finished requests do; the
	// finished rate without a histogram.
	var rps, tokPerReq float64
	if e.interval > 0 {
		rps = e.finished / e.interval
		if e.ttftCount > 0 {
			rps = e.ttftCount / e.interval
		}
	}
	out.ObservedRps = rps
	tokPerReq = p.TokensPerRequest
	if e.finished > 0 {
		tokPerReq = e.gen / e.finished
	}
	replicas := float64(e.ready)
	if replicas == 0 && out.Health != schemas.Health_HEALTH_UNHEALTHY {
		replicas = 1
	}
	waiting := 0.0
	if n > 0 {
		waiting = e.waiting / n
	}
	miss := 1.0
	if e.queries > 0 {
		miss = 1 - out.PrefixHitRate
	}
	capRPS := windowCapacity{
		rps: rps, waiting: waiting, replicas: replicas, util: out.Utilization,
		healthy: out.Health != schemas.Health_HEALTH_UNHEALTHY, prior: p.ReplicaRPS,
		work: workPerRequest(p, e.prompt, e.ttftCount, miss, e.gen, e.finished),
	}.capacity()
	out.CapacityRps = capRPS
	out.CapacityTokensPerS = capRPS * tokPerReq
	if fit == nil {
		fit = ConvexFit
	}
	out.TtftProfile = fit(e.ttft.obs(), e.gpuClass, TTFT)
	out.TbotProfile = fit(e.tbot.obs(), e.gpuClass, TBOT)
	return out
}
