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
	maxBatchSource                    string
	kvCap                             float64  // KV-cache tokens, newest non-zero
	models                            []string // the latest signal's models (shared, never modified)
	signals, unhealthy                uint32
	interval, finished, prompt, gen   float64
	running, waiting, kv, util        float64
	hits, queries                     float64
	ttftCount, ttftSumMs              float64
	tbotCount, tbotSumMs              float64
	ttft, tbot                        bins
	// Running requests per ready replica: the sum and the maximum over
	// all signals, and over the signals in which requests waited (waitN
	// of them), for the batch limit (see batchLimit).
	runSum, runMax     float64
	waitN              uint32
	waitRun, waitRunMx float64
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
			e.maxBatch, e.maxBatchSource = s.GetMaxBatch(), s.GetMaxBatchSource()
		}
		if s.GetKvCapacityTokens() > 0 {
			e.kvCap = s.GetKvCapacityTokens()
		}
		e.models = s.GetModels()
	}
	e.signals++
	r := s.GetRunningRequests() / float64(max(s.GetReadyReplicas(), 1))
	e.runSum += r
	e.runMax = math.Max(e.runMax, r)
	if s.GetWaitingRequests() >= 1 {
		e.waitN++
		e.waitRun += r
		e.waitRunMx = math.Max(e.waitRunMx, r)
	}
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
			e.maxBatch, e.maxBatchSource = o.maxBatch, o.maxBatchSource
		}
		if o.kvCap > 0 {
			e.kvCap = o.kvCap
		}
		e.models = o.models
	}
	e.signals += o.signals
	e.runSum += o.runSum
	e.runMax = math.Max(e.runMax, o.runMax)
	e.waitN += o.waitN
	e.waitRun += o.waitRun
	e.waitRunMx = math.Max(e.waitRunMx, o.waitRunMx)
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

// promptPerRequest is the engine's prompt tokens per request over the
// window (per prefill completed, per finished request without a TTFT
// histogram), 0 when unknown.
func (e *Engine) promptPerRequest() float64 {
	n := e.ttftCount
	if n == 0 {
		n = e.finished
	}
	if !(n > 0) || !(e.prompt > 0) {
		return 0
	}
	if r := e.prompt / n; finite(r) {
		return r
	}
	return 0
}

// Bounds of a known cache_residency_s: at most a day (an idle engine's
// blocks stay cached for as long as nothing new arrives), at least a
// millisecond (a full cache keeps nothing, which is not "unknown").
const (
	maxResidencyS = 86400
	minResidencyS = 0.001
)

// cacheResidency is how long a prefix block survives in the engine's
// prefix cache, in seconds: the free KV capacity, kvCap × (1 − kv) with
// kv the window's mean KV-cache usage, over the rate at which new tokens
// enter the cache (prompt tokens not served from the prefix cache plus
// generated tokens, per second of the signals' intervals). 0 (unknown)
// without a capacity or without new tokens; else within
// [minResidencyS, maxResidencyS]. Each
// product is rounded on its own (explicit conversions), so the result is
// the same bits with or without fused multiply-add.
func (e *Engine) cacheResidency(kv float64) float64 {
	if !(e.kvCap > 0) || !(e.interval > 0) {
		return 0
	}
	entering := math.Max(0, e.prompt-e.hits) + e.gen
	rate := entering / e.interval
	if !(rate > 0) || !finite(rate) {
		return 0
	}
	free := float64(e.kvCap * math.Max(0, 1-kv))
	r := free / rate
	if !finite(r) || r > maxResidencyS {
		return maxResidencyS
	}
	return math.Max(r, minResidencyS)
}

// Sources of an engine estimate's batch limit (capacity_source).
const (
	// SourceConfigured: the agent's engine list sets max_batch.
	SourceConfigured = "configured"
	// SourceEngineMetrics: the engine exports it (also assumed for a
	// non-zero max_batch from an agent that does not say).
	SourceEngineMetrics = "engine_metrics"
	// SourceInferred: requests waited while running stayed at a plateau
	// in this window, so the plateau is the limit.
	SourceInferred = "inferred"
	// SourcePrior: the GPU class's default (Prior.MaxBatch).
	SourcePrior = "prior"
)

// Batch-limit inference (see batchLimit): requests waited (waiting >= 1)
// in at least plateauSignals scrapes and at least plateauShare of the
// window's scrapes; in those scrapes running per replica was at its top
// (their mean within plateauSlack requests of it), and no scrape of the
// window ran more than plateauOver above that top. A continuous-batching
// engine below its limit admits waiting requests at once, so a queue it
// keeps at one fixed running count is its limit (its max_num_seqs, or what
// its KV cache holds); the short queues it forms whenever one step's
// prefill budget is spent come at whatever running count the load gives,
// and fail the plateau test. (A relative tolerance of 10% let those
// through in 5-10% of the simulator's windows on engines with a reported
// limit of 128-256, near saturation; the absolute one in under 1% there.)
//
// At a plateau of at most 2·plateauSlack the queue must also be deeper
// than plateauQueue requests a replica on average in the scrapes where
// requests waited: a request that arrives while a step runs waits for the
// next one on any engine, so a lightly loaded engine shows "1 running,
// 1 waiting" in a good share of its scrapes, and where the slack is half
// the plateau or more the plateau test cannot tell that from a limit (a
// fast engine serving ~2 requests at a time was inferred a limit of 1,
// its capacity cut a hundredfold, and the plan moved its traffic to a 6x
// slower peer).
const (
	plateauSignals = 2
	plateauShare   = 0.25
	plateauSlack   = 1.0
	plateauOver    = 0.5
	plateauQueue   = 2.0
)

// batchLimit is the per-replica batch limit of the window and where it
// came from: the signals' max_batch; else inferred from a queue at a
// running plateau; else the GPU class's prior. Never below the most
// requests the engine ran per replica in the window.
func (e *Engine) batchLimit(p Prior) (uint32, string) {
	top := math.Ceil(e.runMax - 1e-9)
	limit := func(b float64, src string) (uint32, string) {
		b = math.Max(b, top)
		if !finite(b) || b > 1e9 {
			b = 1e9
		}
		return uint32(math.Max(b, 1)), src
	}
	if e.maxBatch > 0 {
		if e.maxBatchSource == SourceConfigured {
			return limit(float64(e.maxBatch), SourceConfigured)
		}
		return limit(float64(e.maxBatch), SourceEngineMetrics)
	}
	m := e.waitRunMx
	queue := 0.0 // mean waiting per replica in the scrapes with a queue
	if e.waitN > 0 {
		queue = e.waiting / float64(e.waitN) / float64(max(e.ready, 1))
	}
	if e.waitN >= plateauSignals && float64(e.waitN) >= plateauShare*float64(e.signals) && m >= 1 &&
		e.waitRun/float64(e.waitN) >= m-plateauSlack && e.runMax <= m+plateauOver && (m > 2*plateauSlack || queue >= plateauQueue) {
		return limit(math.Round(m), SourceInferred)
	}
	return limit(p.MaxBatch, SourcePrior)
}

// Estimate turns the window's accumulated state into an EngineEstimate,
// with the health from the signals alone.
func (e *Engine) Estimate(id string, start, end int64, fit Fitter) *schemas.EngineEstimate {
	return e.estimate(id, start, end, fit, Tries{})
}

// estimate is Estimate with the window's attempts on the engine: an
// engine failing the gateways' attempts is unhealthy or degraded whatever
// its signals say (see Tries.health).
func (e *Engine) estimate(id string, start, end int64, fit Fitter, t Tries) *schemas.EngineEstimate {
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
	out.Health = t.health(out.Health)
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
	batch, source := e.batchLimit(p)
	out.MaxBatch, out.CapacitySource = batch, source
	var running float64
	if n > 0 {
		running = e.runSum / n
	}
	capRPS := windowCapacity{
		rps: rps, waiting: waiting, waitScrapes: int(e.waitN), replicas: replicas, util: out.Utilization,
		batch: float64(batch), running: running,
		healthy: out.Health != schemas.Health_HEALTH_UNHEALTHY, prior: p.ReplicaRPS,
		work: workPerRequest(p, e.prompt, e.ttftCount, miss, e.gen, e.finished),
	}.capacity()
	out.CapacityRps = capRPS
	// Work as if every prompt token were computed: the cache hits an
	// engine earns by affinity count as its speed, not as a lighter mix
	// (see schemas: work_per_request_s).
	out.WorkPerRequestS = workPerRequest(p, e.prompt, e.ttftCount, 1, e.gen, e.finished)
	out.CapacityTokensPerS = capRPS * tokPerReq
	out.KvCapacityTokens = e.kvCap
	out.Models = e.models
	out.CacheResidencyS = e.cacheResidency(out.KvCacheUsage)
	if fit == nil {
		fit = ConvexFit
	}
	out.TtftProfile = fit(e.ttft.obs(), e.gpuClass, TTFT)
	out.TbotProfile = fit(e.tbot.obs(), e.gpuClass, TBOT)
	return out
}
