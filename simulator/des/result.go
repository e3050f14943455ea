package des

import (
	"math"
	"slices"
	"time"
)

// Result is one policy's run.
type Result struct {
	Policy  string  `json:"-"`
	Metrics Metrics `json:"metrics"`
	// Series is set when Options.Series was.
	Series *Series `json:"-"`
	// Requests holds every request's outcome, in workload order, when
	// Options.Requests was set.
	Requests []RequestResult `json:"-"`
}

// RequestResult is one request's outcome in a run.
type RequestResult struct {
	// Index is the request's position in the workload.
	Index int `json:"index"`
	// ArrivalMs is its arrival since the workload's start.
	ArrivalMs float64 `json:"arrival_ms"`
	Cluster   string  `json:"cluster"`
	// Engine served it (the last attempt's); "" when shed.
	Engine string `json:"engine"`
	// Status is "ok", "shed" or "failed".
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Stream   bool   `json:"stream"`
	// TTFTms is at the gateway (network included; a non-streaming
	// request's is its E2E); EngineTTFTms the engine's own, from the
	// attempt reaching it. Both 0 unless Status is "ok".
	TTFTms       float64 `json:"ttft_ms"`
	EngineTTFTms float64 `json:"engine_ttft_ms"`
	E2Ems        float64 `json:"e2e_ms"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	OutputTokens int     `json:"output_tokens"`
}

// Percentiles of a latency, in ms.
type Percentiles struct {
	P50 float64 `json:"p50,omitempty"`
	P90 float64 `json:"p90,omitempty"`
	P99 float64 `json:"p99"`
}

// Metrics are the per-policy numbers of `switchyard sim --json`.
type Metrics struct {
	// TTFTms and TBOTms are over completed streaming requests only: a
	// non-streaming client sees no first token and no token gaps, only
	// its E2E. E2Ems is over every completed request.
	TTFTms Percentiles `json:"ttft_ms"`
	TBOTms Percentiles `json:"tbot_ms"`
	E2Ems  Percentiles `json:"e2e_ms"`
	// GoodputRPS is completed requests meeting the scenario's SLO per
	// second of the arrival window. A non-streaming request meets it when
	// its E2E is within the time a streaming response meeting both
	// bounds could take: slo.ttft_ms + (output tokens − 1) × slo.tbot_ms.
	GoodputRPS float64 `json:"goodput_rps"`
	// KVHitRate is the share of prompt tokens served from prefix caches.
	KVHitRate float64 `json:"kv_hit_rate"`
	// Shed counts requests the router refused; Failed those that got an
	// error (engine lost mid-response, attempts exhausted, timed out).
	Shed   int `json:"shed"`
	Failed int `json:"failed"`
	// WeightReversals counts changes of direction of a (cluster, engine)
	// weight (a move back of at least 0.01 from the extreme reached);
	// the amplitude is the mean swing between consecutive extremes.
	// Policies without weights have none.
	WeightReversals         int     `json:"weight_reversals"`
	WeightReversalAmplitude float64 `json:"weight_reversal_amplitude"`
	// CrossRegionShare is the share of completed requests served outside
	// the cluster's region.
	CrossRegionShare float64 `json:"cross_region_share"`
	Requests         int     `json:"requests"`
	Completed        int     `json:"completed"`
	// NonStreaming counts the completed requests that were not streamed
	// (absent when every request streams).
	NonStreaming int `json:"non_streaming,omitempty"`
	// FailedAttempts counts attempts that failed (retried or not).
	FailedAttempts int `json:"failed_attempts"`
	// SLOAttainment is the share of all requests that met the SLO.
	SLOAttainment float64 `json:"slo_attainment"`
}

// Series are time series for plots.
type Series struct {
	Engines []string
	// T is the sample time in seconds.
	T []float64
	// Util[e] is engine e's utilization: max(running / max seqs, KV
	// usage); NaN-free, 0 while down.
	Util [][]float64
	// Weight[e] is engine e's weight averaged over clusters (nil for
	// policies without weights).
	Weight [][]float64
	// TTFTms holds every completed streaming request's TTFT, sorted.
	TTFTms []float64
}

// reversalEps is the smallest weight change that counts as a move.
const reversalEps = 0.01

type collector struct {
	name          string
	keep          bool
	ttft, tbot    []float32
	e2e           []float32
	good, cross   int
	completed     int
	nonStr        int
	shed, failed  int
	attemptFailed int
	sloTTFT       time.Duration
	sloTBOT       time.Duration
	reqs          []RequestResult // per request when kept (Options.Requests)

	wver   uint64
	dir    [][]int8    // current direction of each weight (0: not yet moved)
	anchor [][]float64 // the last extreme (where the direction last changed)
	ext    [][]float64 // the extreme reached in the current direction
	revs   int
	revAmp float64
	series *Series
}

func newCollector(name string, s *sim, keep bool) *collector {
	n := len(s.wl.Requests)
	c := &collector{
		name: name, keep: keep,
		ttft: make([]float32, 0, n), tbot: make([]float32, 0, n), e2e: make([]float32, 0, n),
		sloTTFT: time.Duration(s.sc.SLO.TTFTms * float64(time.Millisecond)),
		sloTBOT: time.Duration(s.sc.SLO.TBOTms * float64(time.Millisecond)),
	}
	if keep {
		c.series = &Series{}
		for _, e := range s.world.Engines {
			c.series.Engines = append(c.series.Engines, e.ID)
		}
		c.series.Util = make([][]float64, len(s.slots))
		if s.weight != nil {
			c.series.Weight = make([][]float64, len(s.slots))
		}
	}
	return c
}

func ms(d time.Duration) float32 { return float32(float64(d) / 1e6) }

// msRound is d in ms to the microsecond.
func msRound(d time.Duration) float64 { return round(float64(d)/1e6, 3) }

func (c *collector) done(s *sim, v *Request, e int, o Outcome) {
	if c.reqs != nil {
		c.reqs[v.Index] = RequestResult{Engine: s.world.Engines[e].ID, Status: "ok",
			TTFTms: msRound(o.TTFT), EngineTTFTms: msRound(o.EngineTTFT), E2Ems: msRound(o.E2E),
			PromptTokens: o.PromptTokens, CachedTokens: o.CachedTokens, OutputTokens: o.OutputTokens}
	}
	c.completed++
	c.e2e = append(c.e2e, ms(o.E2E))
	if v.W.NonStreaming {
		c.nonStr++
		if o.E2E <= c.sloTTFT+time.Duration(max(o.OutputTokens-1, 0))*c.sloTBOT {
			c.good++
		}
	} else {
		c.ttft = append(c.ttft, ms(o.TTFT))
		c.tbot = append(c.tbot, ms(o.MeanTBOT))
		if o.TTFT <= c.sloTTFT && o.MeanTBOT <= c.sloTBOT {
			c.good++
		}
	}
	if s.world.Clusters[v.Cluster].Region != s.world.Engines[e].Region {
		c.cross++
	}
}

// tick samples the policy's weights and counts reversals: per (cluster,
// engine) weight it tracks the current direction and its extreme; a move
// of at least reversalEps back from the extreme is a reversal, whose
// amplitude is the swing between the last two extremes.
func (c *collector) tick(s *sim, _ time.Duration) {
	if s.weight == nil {
		return
	}
	ver, w := s.weight.Weights()
	if ver == c.wver && c.anchor != nil {
		return
	}
	c.wver = ver
	if len(w) == 0 {
		return
	}
	if len(c.anchor) != len(w) {
		c.dir = make([][]int8, len(w))
		c.anchor = make([][]float64, len(w))
		c.ext = make([][]float64, len(w))
		for i := range w {
			c.dir[i] = make([]int8, len(w[i]))
			c.anchor[i] = slices.Clone(w[i])
			c.ext[i] = slices.Clone(w[i])
		}
		return
	}
	for i := range w {
		for e, x := range w[i] {
			switch d := c.dir[i][e]; {
			case d == 0:
				if math.Abs(x-c.anchor[i][e]) >= reversalEps {
					c.dir[i][e] = sign(x - c.anchor[i][e])
					c.ext[i][e] = x
				}
			case float64(d)*(x-c.ext[i][e]) > 0:
				c.ext[i][e] = x
			case float64(d)*(c.ext[i][e]-x) >= reversalEps:
				c.revs++
				c.revAmp += math.Abs(c.ext[i][e] - c.anchor[i][e])
				c.anchor[i][e] = c.ext[i][e]
				c.ext[i][e] = x
				c.dir[i][e] = -d
			}
		}
	}
}

func sign(v float64) int8 {
	if v < 0 {
		return -1
	}
	return 1
}

func (c *collector) sample(s *sim, t time.Duration) {
	if !c.keep {
		return
	}
	c.series.T = append(c.series.T, t.Seconds())
	for e := range s.slots {
		st := s.world.Stats(e)
		u := 0.0
		if st.MaxSeqs > 0 {
			u = float64(st.Running) / float64(st.MaxSeqs)
		}
		u = math.Max(u, st.KVUsage())
		c.series.Util[e] = append(c.series.Util[e], u)
	}
	if s.weight != nil {
		_, w := s.weight.Weights()
		for e := range s.slots {
			sum, n := 0.0, 0
			for i := range w {
				if e < len(w[i]) {
					sum += w[i][e]
					n++
				}
			}
			if n > 0 {
				sum /= float64(n)
			}
			c.series.Weight[e] = append(c.series.Weight[e], sum)
		}
	}
}

func (c *collector) result(s *sim) *Result {
	m := Metrics{
		Requests: len(s.wl.Requests), Completed: c.completed, NonStreaming: c.nonStr,
		Shed: c.shed, Failed: c.failed, FailedAttempts: c.attemptFailed,
		WeightReversals: c.revs,
	}
	if c.revs > 0 {
		m.WeightReversalAmplitude = round(c.revAmp/float64(c.revs), 4)
	}
	ttft := sorted(c.ttft)
	tbot := sorted(c.tbot)
	e2e := sorted(c.e2e)
	m.TTFTms = Percentiles{P50: pct(ttft, 50), P90: pct(ttft, 90), P99: pct(ttft, 99)}
	m.TBOTms = Percentiles{P99: pct(tbot, 99)}
	m.E2Ems = Percentiles{P50: pct(e2e, 50), P99: pct(e2e, 99)}
	if span := s.wl.Span.Seconds(); span > 0 {
		m.GoodputRPS = round(float64(c.good)/span, 3)
	}
	if m.Requests > 0 {
		m.SLOAttainment = round(float64(c.good)/float64(m.Requests), 4)
	}
	if m.Completed > 0 {
		m.CrossRegionShare = round(float64(c.cross)/float64(m.Completed), 4)
	}
	var hit, query int64
	for e := range s.slots {
		st := s.world.Stats(e)
		hit += st.PrefixHitTokens
		query += st.PrefixQueryTokens
	}
	if query > 0 {
		m.KVHitRate = round(float64(hit)/float64(query), 4)
	}
	r := &Result{Policy: c.name, Metrics: m, Series: c.series, Requests: c.requests(s)}
	if c.keep {
		c.series.TTFTms = make([]float64, len(ttft))
		for i, v := range ttft {
			c.series.TTFTms[i] = float64(v)
		}
	}
	return r
}

// requests completes the kept per-request outcomes with what every
// request's final state says (nil when none were kept).
func (c *collector) requests(s *sim) []RequestResult {
	if c.reqs == nil {
		return nil
	}
	for i := range c.reqs {
		r := &c.reqs[i]
		st := &s.reqs[i]
		v := &s.views[i]
		r.Index, r.ArrivalMs = i, msRound(v.W.Arrival)
		r.Cluster, r.Stream, r.Attempts = s.world.Clusters[v.Cluster].ID, !v.W.NonStreaming, int(st.attempt)
		switch st.state {
		case stDone:
		case stShed:
			r.Status = "shed"
		default:
			r.Status = "failed"
		}
		if r.Status != "ok" && st.slot >= 0 {
			r.Engine = s.world.Engines[st.slot].ID
		}
	}
	return c.reqs
}

func sorted(x []float32) []float32 {
	out := slices.Clone(x)
	slices.Sort(out)
	return out
}

// pct is the nearest-rank percentile (0 for no data).
func pct(x []float32, p float64) float64 {
	if len(x) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(x)))) - 1
	k = min(max(k, 0), len(x)-1)
	return round(float64(x[k]), 1)
}

func round(v float64, digits int) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
