package estimate

import (
	"math"
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

// engineOf returns the engine estimate of id in out.
func engineOf(t *testing.T, out []*schemas.Estimate, id string) *schemas.EngineEstimate {
	t.Helper()
	for _, e := range out {
		if en := e.GetEngine(); en != nil && en.GetEngineId() == id {
			return en
		}
	}
	t.Fatalf("no estimate for engine %q in %v", id, out)
	return nil
}

func networkOf(out []*schemas.Estimate, cluster, engine string) *schemas.NetworkEstimate {
	for _, e := range out {
		if n := e.GetNetwork(); n != nil && n.GetCluster() == cluster && n.GetEngineId() == engine {
			return n
		}
	}
	return nil
}

func demandOf(t *testing.T, out []*schemas.Estimate, cluster string) *schemas.DemandEstimate {
	t.Helper()
	for _, e := range out {
		if d := e.GetDemand(); d != nil && d.GetCluster() == cluster {
			return d
		}
	}
	t.Fatalf("no demand estimate for %q", cluster)
	return nil
}

// TestNetworkFromStreamingOrMeasuredOnly: a non-streaming response's TTFT
// is its whole response time, so it never makes a network sample; the
// gateway's own round-trip measurement wins over TTFT differences.
func TestNetworkFromStreamingOrMeasuredOnly(t *testing.T) {
	ok := schemas.RequestStatus_REQUEST_STATUS_OK
	ev := func(stream bool, ttft, engineTTFT, rtt float64) *schemas.RoutingEvent {
		return &schemas.RoutingEvent{SchemaVersion: schemas.Version, Cluster: "us", EngineId: "e", EventTimeUnixMs: 1,
			Status: ok, Stream: stream, TtftMs: ttft, EngineTtftMs: engineTTFT, NetworkRttMs: rtt, PromptTokens: 10, OutputTokens: 5}
	}
	for _, tc := range []struct {
		name    string
		evs     []*schemas.RoutingEvent
		want    float64 // -1: no network estimate
		samples uint32
	}{
		{"non-streaming with engine TTFT: none", []*schemas.RoutingEvent{ev(false, 900, 60, 0), ev(false, 800, 50, 0)}, -1, 0},
		{"non-streaming without engine TTFT: none", []*schemas.RoutingEvent{ev(false, 900, 0, 0)}, -1, 0},
		{"streaming: TTFT difference", []*schemas.RoutingEvent{ev(true, 90, 60, 0), ev(false, 900, 60, 0), ev(true, 70, 60, 0)}, 20, 2},
		{"streaming without engine TTFT: against the engine's mean", []*schemas.RoutingEvent{ev(true, 500, 0, 0)}, 500 - 400.0/6, 1},
		{"measured round trip wins, any stream flag", []*schemas.RoutingEvent{ev(true, 90, 60, 4), ev(false, 900, 60, 6), ev(true, 95, 60, 0)}, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := computeAll(t, []*schemas.EngineSignal{validSignal()}, tc.evs)
			n := networkOf(out, "us", "e")
			if tc.want < 0 {
				if n != nil {
					t.Fatalf("network estimate %v, want none", n)
				}
				return
			}
			if n == nil || math.Abs(n.GetRttMs()-tc.want) > 1e-9 || n.GetSamples() != tc.samples {
				t.Fatalf("network estimate %v, want rtt %v from %d samples", n, tc.want, tc.samples)
			}
		})
	}
}

// saturatedSignals are 10 one-second scrapes of an h100 engine serving 40
// short requests/s (100 prompt, 20 generated tokens) with running and
// waiting requests from run and wait; maxBatch and source as given.
func saturatedSignals(run, wait func(i int) float64, maxBatch uint32, source string) []*schemas.EngineSignal {
	var out []*schemas.EngineSignal
	for i := range 10 {
		out = append(out, &schemas.EngineSignal{
			SchemaVersion: schemas.Version, EngineId: "e", GpuClass: "h100", EventTimeUnixMs: 1_700_000_000_000 + int64(i)*1000,
			ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY, RunningRequests: run(i), WaitingRequests: wait(i),
			IntervalSeconds: 1, RequestsFinished: 40, PromptTokens: 40 * 100, GenerationTokens: 40 * 20,
			MaxBatch: maxBatch, MaxBatchSource: source,
			TtftSeconds: &schemas.Histogram{Sum: 40 * 0.5, Count: 40},
		})
	}
	return out
}

// TestBatchLimitSources: the batch limit comes from the signal when it
// carries one, else from a queue kept at a running plateau, else from the
// prior; the estimate says which, and capacity respects it. The inferred
// case is the one seen on a real engine: 16 running, 16 waiting, no batch
// limit exported, and a token-mix bound from the prior 3x the throughput.
func TestBatchLimitSources(t *testing.T) {
	const rps = 40.0
	constant := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	for _, tc := range []struct {
		name      string
		sigs      []*schemas.EngineSignal
		wantBatch uint32
		wantSrc   string
		wantCap   float64 // 0: only check capacity > throughput
	}{
		{"configured", saturatedSignals(constant(16), constant(16), 16, "configured"), 16, SourceConfigured, rps},
		{"exported by the engine", saturatedSignals(constant(16), constant(16), 16, "engine_metrics"), 16, SourceEngineMetrics, rps},
		{"from an agent that does not say: the engine's", saturatedSignals(constant(16), constant(0), 32, ""), 32, SourceEngineMetrics, rps * 32 / 16},
		{"configured below what ran: what ran", saturatedSignals(constant(20), constant(3), 16, "configured"), 20, SourceConfigured, rps},
		{"queue at a plateau: inferred", saturatedSignals(constant(16), constant(16), 0, ""), 16, SourceInferred, rps},
		{"plateau with a little noise: inferred", saturatedSignals(func(i int) float64 { return float64(15 + i%2) }, constant(12), 0, ""), 16, SourceInferred, rps * 16 / 15.5},
		{"queue in a quarter of the scrapes: inferred, bound above throughput",
			saturatedSignals(func(i int) float64 { return []float64{16, 10}[min(i/3, 1)] }, func(i int) float64 { return []float64{5, 0}[min(i/3, 1)] }, 0, ""),
			16, SourceInferred, rps * 16 / 11.8},
		{"prefill-budget queues at varying running counts: prior",
			saturatedSignals(func(i int) float64 { return float64(30 + 3*i) }, func(i int) float64 { return float64(i % 2) }, 0, ""), 256, SourcePrior, 0},
		{"queue at running counts 20% apart: prior",
			saturatedSignals(func(i int) float64 { return float64(13 + 3*(i%2)) }, constant(4), 0, ""), 256, SourcePrior, 0},
		{"one scrape with a queue: prior", saturatedSignals(constant(16), func(i int) float64 { return float64(16 * (i / 9)) }, 0, ""), 256, SourcePrior, 0},
		{"running above where requests waited: prior",
			saturatedSignals(func(i int) float64 { return float64(16 + 10*(i/5)) }, func(i int) float64 { return float64(4 * (1 - i/5)) }, 0, ""), 256, SourcePrior, 0},
		{"no queue: prior", saturatedSignals(constant(16), constant(0), 0, ""), 256, SourcePrior, 0},
		// A lightly loaded engine: one request running, and in 4 of 10
		// scrapes one more arrived and waits for the next step.
		{"one request waiting for the next step at running 1: prior",
			saturatedSignals(constant(1), func(i int) float64 { return float64(1 - min(i%3, 1)) }, 0, ""), 256, SourcePrior, 0},
		{"a queue of one at a plateau of 2: prior", saturatedSignals(constant(2), constant(1), 0, ""), 256, SourcePrior, 0},
		{"a queue of two at a plateau of 2: inferred", saturatedSignals(constant(2), constant(2), 0, ""), 2, SourceInferred, rps},
		{"a queue of one at a plateau of 16: inferred", saturatedSignals(constant(16), constant(1), 0, ""), 16, SourceInferred, rps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			en := engineOf(t, computeAll(t, tc.sigs, nil), "e")
			if en.GetMaxBatch() != tc.wantBatch || en.GetCapacitySource() != tc.wantSrc {
				t.Fatalf("max_batch %d from %q, want %d from %q", en.GetMaxBatch(), en.GetCapacitySource(), tc.wantBatch, tc.wantSrc)
			}
			if math.Abs(en.GetObservedRps()-rps) > 1e-9 {
				t.Fatalf("observed %v rps, want %v", en.GetObservedRps(), rps)
			}
			if tc.wantCap > 0 && math.Abs(en.GetCapacityRps()-tc.wantCap) > 1e-6*tc.wantCap {
				t.Fatalf("capacity %v rps, want %v", en.GetCapacityRps(), tc.wantCap)
			}
			if tc.wantCap == 0 && !(en.GetCapacityRps() > 2*rps) {
				t.Fatalf("capacity %v rps, want the prior's bound, above 2x the throughput", en.GetCapacityRps())
			}
		})
	}
}

// TestBatchLimitAcrossPanes: inference state merges across panes like
// one pane holding every signal.
func TestBatchLimitAcrossPanes(t *testing.T) {
	sigs := saturatedSignals(func(i int) float64 { return float64(15 + i%2) }, func(i int) float64 { return float64(3 * (i % 3)) }, 0, "")
	one := NewPane()
	a, b := NewPane(), NewPane()
	for i, s := range sigs {
		one.AddSignal(s)
		if i < 5 {
			a.AddSignal(s)
		} else {
			b.AddSignal(s)
		}
	}
	w1 := Compute(Window{End: 10_000, Slide: 10_000, PaneStarts: []int64{0}, Panes: []*Pane{one}}, nil)
	w2 := Compute(Window{End: 10_000, Slide: 5_000, PaneStarts: []int64{0, 5_000}, Panes: []*Pane{a, b}}, nil)
	e1, e2 := engineOf(t, w1, "e"), engineOf(t, w2, "e")
	if e1.GetCapacitySource() != SourceInferred || e1.GetMaxBatch() != 16 {
		t.Fatalf("one pane: max_batch %d from %q, want 16 inferred", e1.GetMaxBatch(), e1.GetCapacitySource())
	}
	if e2.GetCapacitySource() != e1.GetCapacitySource() || e2.GetMaxBatch() != e1.GetMaxBatch() || math.Abs(e2.GetCapacityRps()-e1.GetCapacityRps()) > 1e-9 {
		t.Fatalf("two panes %v, one pane %v", e2, e1)
	}
}

// TestDemandPromptTokens: mean_prompt_tokens comes from the events'
// prompt_tokens where they carry it; requests whose events lack it get
// their engine's prompt tokens per request from its signals.
func TestDemandPromptTokens(t *testing.T) {
	ok := schemas.RequestStatus_REQUEST_STATUS_OK
	ev := func(engine string, prompt uint32, status schemas.RequestStatus) *schemas.RoutingEvent {
		return &schemas.RoutingEvent{SchemaVersion: schemas.Version, Cluster: "us", EngineId: engine, EventTimeUnixMs: 1,
			Status: status, Stream: true, TtftMs: 80, PromptTokens: prompt, OutputTokens: 10}
	}
	sig := func(id string, promptPerReq float64) *schemas.EngineSignal {
		s := validSignal() // 6 prefills
		s.EngineId, s.PromptTokens = id, 6*promptPerReq
		return s
	}
	sigs := []*schemas.EngineSignal{sig("a", 1000), sig("b", 300)}
	for _, tc := range []struct {
		name string
		evs  []*schemas.RoutingEvent
		want float64
	}{
		{"from the events", []*schemas.RoutingEvent{ev("a", 100, ok), ev("b", 200, ok)}, 150},
		{"none in the events: from the engines", []*schemas.RoutingEvent{ev("a", 0, ok), ev("a", 0, ok), ev("b", 0, ok)}, (2*1000 + 300) / 3.0},
		{"some in the events", []*schemas.RoutingEvent{ev("a", 100, ok), ev("b", 0, ok)}, (100 + 300) / 2.0},
		{"failed requests and unknown engines do not count", []*schemas.RoutingEvent{
			ev("a", 100, ok), ev("b", 0, schemas.RequestStatus_REQUEST_STATUS_ERROR), ev("", 0, ok), ev("c", 0, ok)}, 100},
		{"nothing known: 0", []*schemas.RoutingEvent{ev("c", 0, ok)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := demandOf(t, computeAll(t, sigs, tc.evs), "us")
			if math.Abs(d.GetMeanPromptTokens()-tc.want) > 1e-9 {
				t.Fatalf("mean_prompt_tokens %v, want %v", d.GetMeanPromptTokens(), tc.want)
			}
			if d.GetMeanOutputTokens() != 10 {
				t.Fatalf("mean_output_tokens %v, want 10", d.GetMeanOutputTokens())
			}
		})
	}
}

// residencySignals: ten 1-second scrapes of one engine with the given KV
// capacity (per signal), KV usage, and per-scrape prompt, prefix-hit and
// generated tokens.
func residencySignals(kvCap func(i int) float64, kv, prompt, hits, gen float64) []*schemas.EngineSignal {
	var out []*schemas.EngineSignal
	for i := range 10 {
		out = append(out, &schemas.EngineSignal{
			SchemaVersion: schemas.Version, EngineId: "e", GpuClass: "h100", EventTimeUnixMs: 1_700_000_000_000 + int64(i)*1000,
			ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY, RunningRequests: 4, KvCacheUsage: kv,
			IntervalSeconds: 1, RequestsFinished: 10, PromptTokens: prompt, PrefixCacheHits: hits, PrefixCacheQueries: prompt,
			GenerationTokens: gen, KvCapacityTokens: kvCap(i), TtftSeconds: &schemas.Histogram{Sum: 10 * 0.2, Count: 10},
		})
	}
	return out
}

// TestCacheResidency: cache_residency_s is the free KV capacity over the
// rate of tokens entering the cache (prompt tokens not served from the
// prefix cache plus generated tokens); 0 when the capacity is unknown or
// nothing enters; at most a day, at least a millisecond when known; the
// capacity is the newest signal's that carries one.
func TestCacheResidency(t *testing.T) {
	constant := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	for _, tc := range []struct {
		name          string
		sigs          []*schemas.EngineSignal
		wantCap, want float64
	}{
		// 60,000 free tokens, 3,000 + 800 new tokens a second.
		{"free over entering", residencySignals(constant(100_000), 0.4, 4000, 1000, 800), 100_000, 60_000.0 / 3800},
		{"unknown capacity", residencySignals(constant(0), 0.4, 4000, 1000, 800), 0, 0},
		{"nothing enters", residencySignals(constant(100_000), 0.4, 0, 0, 0), 100_000, 0},
		{"all prompt tokens hit: generated tokens only", residencySignals(constant(100_000), 0.5, 4000, 4000, 500), 100_000, 100},
		{"hits above prompt count as all hit", residencySignals(constant(100_000), 0.5, 4000, 5000, 500), 100_000, 100},
		{"nearly idle: a day", residencySignals(constant(1e9), 0, 0, 0, 1), 1e9, 86400},
		{"full cache: a millisecond, not unknown", residencySignals(constant(100_000), 1, 4000, 0, 0), 100_000, 0.001},
		{"newest capacity", residencySignals(func(i int) float64 { return float64(1000 * (i + 1)) }, 0, 1000, 0, 0), 10_000, 10},
		{"newest non-zero capacity", residencySignals(func(i int) float64 { return float64(5000 * (1 - i/9)) }, 0, 1000, 0, 0), 5000, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			en := engineOf(t, computeAll(t, tc.sigs, nil), "e")
			if en.GetKvCapacityTokens() != tc.wantCap {
				t.Fatalf("kv_capacity_tokens %v, want %v", en.GetKvCapacityTokens(), tc.wantCap)
			}
			if got := en.GetCacheResidencyS(); math.Abs(got-tc.want) > 1e-9*tc.want || (tc.want == 0) != (got == 0) {
				t.Fatalf("cache_residency_s %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCacheResidencyAcrossPanes: a window of two panes gives the KV
// capacity of one pane holding every signal and its residency (up to
// the order of the sums), and panes that went through the pane codec
// give the same bits as the panes themselves.
func TestCacheResidencyAcrossPanes(t *testing.T) {
	sigs := residencySignals(func(i int) float64 { return float64(7000 * (1 + i%4)) }, 0.37, 4100, 1300, 710)
	one, a, b := NewPane(), NewPane(), NewPane()
	for i, s := range sigs {
		one.AddSignal(s)
		if i%2 == 0 {
			a.AddSignal(s)
		} else {
			b.AddSignal(s)
		}
	}
	ra, err := DecodePane(AppendPane(nil, a))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := DecodePane(AppendPane(nil, b))
	if err != nil {
		t.Fatal(err)
	}
	two := func(a, b *Pane) *schemas.EngineEstimate {
		return engineOf(t, Compute(Window{End: 10_000, Slide: 5_000, PaneStarts: []int64{0, 5_000}, Panes: []*Pane{a, b}}, nil), "e")
	}
	e1 := engineOf(t, Compute(Window{End: 10_000, Slide: 10_000, PaneStarts: []int64{0}, Panes: []*Pane{one}}, nil), "e")
	e2, e3 := two(a, b), two(ra, rb)
	if e1.GetKvCapacityTokens() != 7000*(1+9%4) || !(e1.GetCacheResidencyS() > 0) {
		t.Fatalf("one pane: kv_capacity_tokens %v, cache_residency_s %v", e1.GetKvCapacityTokens(), e1.GetCacheResidencyS())
	}
	if e2.GetKvCapacityTokens() != e1.GetKvCapacityTokens() || math.Abs(e2.GetCacheResidencyS()-e1.GetCacheResidencyS()) > 1e-12*e1.GetCacheResidencyS() {
		t.Fatalf("two panes: %v tokens, %v s; one pane: %v tokens, %v s",
			e2.GetKvCapacityTokens(), e2.GetCacheResidencyS(), e1.GetKvCapacityTokens(), e1.GetCacheResidencyS())
	}
	if math.Float64bits(e3.GetKvCapacityTokens()) != math.Float64bits(e2.GetKvCapacityTokens()) ||
		math.Float64bits(e3.GetCacheResidencyS()) != math.Float64bits(e2.GetCacheResidencyS()) {
		t.Fatalf("decoded panes: %v tokens, %v s; panes: %v tokens, %v s",
			e3.GetKvCapacityTokens(), e3.GetCacheResidencyS(), e2.GetKvCapacityTokens(), e2.GetCacheResidencyS())
	}
}

// TestWorkPerRequestField: work_per_request_s is the window's prompt tokens per
// prefill over the class's prefill rate plus generated tokens per finished
// request over its decode rate, counting every prompt token (a prefix-cache
// hit makes the engine faster, not the request lighter); without cache
// hits capacity_rps × work_per_request_s of an unmeasured engine (the
// prior's work bound) does not depend on the token mix; an idle window
// has none.
func TestWorkPerRequestField(t *testing.T) {
	constant := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	p := PriorFor("h100")
	sigs := saturatedSignals(constant(4), constant(0), 0, "")
	for _, s := range sigs {
		s.PrefixCacheHits, s.PrefixCacheQueries = 50, 100 // half the prompt cached
	}
	en := engineOf(t, computeAll(t, sigs, nil), "e")
	want := 100/p.PrefillTokensPerS + 20/p.DecodeTokensPerS
	if got := en.GetWorkPerRequestS(); math.Abs(got-want) > 1e-12*want {
		t.Fatalf("work per request %v s, want %v", got, want)
	}
	// Without cache hits, the prior's bound in work is the same at any mix.
	short := engineOf(t, computeAll(t, saturatedSignals(constant(4), constant(0), 0, ""), nil), "e")
	long := saturatedSignals(constant(4), constant(0), 0, "")
	for _, s := range long {
		s.PromptTokens *= 3
	}
	el := engineOf(t, computeAll(t, long, nil), "e")
	if a, b := short.GetCapacityRps()*short.GetWorkPerRequestS(), el.GetCapacityRps()*el.GetWorkPerRequestS(); !(el.GetCapacityRps() < short.GetCapacityRps()/2) || math.Abs(a-b) > 1e-9*a {
		t.Fatalf("capacity %v rps at short prompts, %v at 3x longer; in work %v and %v, want equal", short.GetCapacityRps(), el.GetCapacityRps(), a, b)
	}
	idle := saturatedSignals(constant(0), constant(0), 0, "")
	for _, s := range idle {
		s.RequestsFinished, s.PromptTokens, s.GenerationTokens, s.TtftSeconds = 0, 0, 0, nil
	}
	if w := engineOf(t, computeAll(t, idle, nil), "e").GetWorkPerRequestS(); w != 0 {
		t.Fatalf("idle window: work per request %v, want 0", w)
	}
}

// TestOneScrapeQueueIsNoCapacityMeasurement: a window in which a single
// scrape saw a request waiting (an engine's first window at start-up has
// one scrape) does not publish its throughput as measured capacity
// (capacity_rps == observed_rps); the same queue in two scrapes does. The
// twin of a live demo was planned for minutes on an H100 "measured" at
// 1 rps from such a window (docs/notes/2026-12-twin-p99.md).
func TestOneScrapeQueueIsNoCapacityMeasurement(t *testing.T) {
	one := func(i int) float64 { return 1 }
	for _, tc := range []struct {
		name     string
		scrapes  int
		measured bool
	}{
		{"one scrape", 1, false},
		{"two scrapes", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 1 request/s, 1 running and 1 waiting at every scrape.
			sigs := saturatedSignals(one, one, 256, "engine_metrics")[:tc.scrapes]
			for _, s := range sigs {
				s.RequestsFinished, s.PromptTokens, s.GenerationTokens = 1, 100, 20
				s.TtftSeconds = &schemas.Histogram{Sum: 0.05, Count: 1}
			}
			en := engineOf(t, computeAll(t, sigs, nil), "e")
			if got := en.GetCapacityRps() == en.GetObservedRps(); got != tc.measured {
				t.Fatalf("capacity %v rps at %v rps observed: measured %v, want %v", en.GetCapacityRps(), en.GetObservedRps(), got, tc.measured)
			}
		})
	}
}
