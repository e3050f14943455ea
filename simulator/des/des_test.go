package des_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/policy"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
)

const small = `{
  "name": "small", "duration_s": 20, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b"], "rtt_ms": {"a": {"b": 40}},
  "clusters": [{"id": "a", "region": "a", "share": 3}, {"id": "b", "region": "b", "share": 1}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "b-0", "region": "b", "gpu": "h100"}, {"id": "b-1", "region": "b", "gpu": "a100"}],
  "workload": {"kind": "generator", "rate_rps": 60},
  "control": {"optimizer_period_s": 2, "window_s": 4, "slide_s": 1, "allowed_lateness_s": 1},
  "events": [{"at_s": 8, "kind": "engine_down", "engine": "a-0"}, {"at_s": 12, "kind": "engine_up", "engine": "a-0"},
             {"at_s": 14, "kind": "replicas", "engine": "b-1", "replicas": 2}]
}`

func load(t testing.TB, js string) (*scenario.Scenario, *scenario.Stream) {
	t.Helper()
	sc, err := scenario.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := sc.Build(scenario.BuildOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return sc, wl
}

func run(t testing.TB, sc *scenario.Scenario, wl *scenario.Stream, name string, seed uint64) *des.Result {
	t.Helper()
	f, err := policy.New(name, seed)
	if err != nil {
		t.Fatal(err)
	}
	r, err := des.Run(sc, wl, name, f, des.Options{Series: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every policy accounts for every request (completed + shed + failed),
// survives an outage, and gives the same numbers on a second run.
func TestEveryPolicyAccountsAndIsDeterministic(t *testing.T) {
	sc, wl := load(t, small)
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			r1 := run(t, sc, wl, name, 1)
			r2 := run(t, sc, wl, name, 1)
			b1, _ := json.Marshal(r1.Metrics)
			b2, _ := json.Marshal(r2.Metrics)
			if string(b1) != string(b2) {
				t.Fatalf("two runs differ:\n%s\n%s", b1, b2)
			}
			m := r1.Metrics
			if m.Completed+m.Shed+m.Failed != m.Requests || m.Requests != len(wl.Requests) {
				t.Fatalf("completed %d + shed %d + failed %d != requests %d", m.Completed, m.Shed, m.Failed, m.Requests)
			}
			if m.Completed < m.Requests/2 {
				t.Fatalf("only %d of %d completed: %s", m.Completed, m.Requests, b1)
			}
			if m.TTFTms.P50 <= 0 || m.TTFTms.P50 > m.TTFTms.P90 || m.TTFTms.P90 > m.TTFTms.P99 {
				t.Fatalf("bad percentiles %+v", m.TTFTms)
			}
			if m.KVHitRate <= 0 || m.KVHitRate > 1 || m.CrossRegionShare < 0 || m.CrossRegionShare > 1 {
				t.Fatalf("bad rates: %s", b1)
			}
			if len(r1.Series.T) == 0 || len(r1.Series.Util) != 3 {
				t.Fatalf("no series")
			}
		})
	}
}

func TestNearestStaysLocalUntilItsRegionIsDown(t *testing.T) {
	sc, wl := load(t, small)
	sc.Events = nil
	r := run(t, sc, wl, "nearest", 1)
	if r.Metrics.CrossRegionShare != 0 {
		t.Fatalf("nearest sent %.3f of traffic across regions", r.Metrics.CrossRegionShare)
	}
	sc2, wl2 := load(t, small)
	r2 := run(t, sc2, wl2, "nearest", 1)
	if r2.Metrics.CrossRegionShare == 0 {
		t.Fatal("nearest did not fail over while a's only engine was down")
	}
}

// shortLocal is region-bc in small: cluster a's demand (100 rps) is
// about 1.4x its one local H100's capacity, while region b, 40 ms away,
// has an H100 serving 20 rps.
const shortLocal = `{
  "name": "short-local", "duration_s": 60, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b"], "rtt_ms": {"a": {"b": 40}},
  "clusters": [{"id": "a", "region": "a", "share": 5}, {"id": "b", "region": "b", "share": 1}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "b-0", "region": "b", "gpu": "h100"}],
  "workload": {"kind": "generator", "rate_rps": 120, "sessions": 256},
  "control": {"optimizer_period_s": 2, "window_s": 4, "slide_s": 1, "allowed_lateness_s": 1}
}`

// When a region's demand exceeds its local capacity, switchyard's
// snapshots send part of that region's traffic to the other region and
// requests are actually served there, which keeps the tail far below
// nearest-only routing's.
func TestSwitchyardPublishesWeightsAndRoutesAcrossRegions(t *testing.T) {
	sc, wl := load(t, shortLocal)
	f, err := policy.New("switchyard", 1)
	if err != nil {
		t.Fatal(err)
	}
	var pol des.Policy
	capture := func(w *des.World) (des.Policy, error) {
		p, err := f(w)
		pol = p
		return p, err
	}
	r, err := des.Run(sc, wl, "switchyard", capture, des.Options{Series: true})
	if err != nil {
		t.Fatal(err)
	}
	_, w := pol.(des.Weighted).Weights()
	if len(w) != 2 || len(w[0]) != 2 {
		t.Fatalf("no snapshot was installed: weights %v", w)
	}
	// Cluster a (index 0) puts a real share on b-0 (index 1).
	if w[0][1] < 0.2 {
		t.Fatalf("cluster a's weight on b-0 is %.3f, want >= 0.2 (weights %v)", w[0][1], w)
	}
	m := r.Metrics
	// b's own traffic is 1/6 of the total and stays local; a's spill
	// (about 0.3 of a's traffic) is served in b.
	if m.CrossRegionShare < 0.2 {
		t.Fatalf("cross-region share %.3f, want >= 0.2", m.CrossRegionShare)
	}
	near := run(t, sc, wl, "nearest", 1)
	if near.Metrics.CrossRegionShare != 0 {
		t.Fatalf("nearest crossed regions: %.3f", near.Metrics.CrossRegionShare)
	}
	if m.TTFTms.P99 >= near.Metrics.TTFTms.P99/2 {
		t.Fatalf("switchyard p99 TTFT %.0f ms, nearest %.0f ms: spilling should at least halve it", m.TTFTms.P99, near.Metrics.TTFTms.P99)
	}
}

func BenchmarkRun(b *testing.B) {
	js := `{
  "name": "bench", "duration_s": 60, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b"], "rtt_ms": {"a": {"b": 40}},
  "clusters": [{"id": "a", "region": "a"}, {"id": "b", "region": "b"}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "a-1", "region": "a", "gpu": "h100"},
              {"id": "b-0", "region": "b", "gpu": "h100"}, {"id": "b-1", "region": "b", "gpu": "h100"}],
  "workload": {"kind": "generator", "rate_rps": 200, "sessions": 512}
}`
	sc, wl := load(b, js)
	for _, name := range []string{"switchyard", "round-robin", "prefix-aware", "llmd-scorer"} {
		b.Run(name, func(b *testing.B) {
			f, _ := policy.New(name, 1)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := des.Run(sc, wl, name, f, des.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(wl.Requests)*b.N)/b.Elapsed().Seconds(), "requests/s")
		})
	}
}

// flipper alternates its weights between two plans every tick.
type flipper struct {
	ver uint64
	w   [][]float64
}

func (f *flipper) Pick(time.Duration, *des.Request, []int32) int      { return 0 }
func (f *flipper) Done(time.Duration, *des.Request, int, des.Outcome) {}
func (f *flipper) Tick(time.Duration) {
	f.ver++
	a := 0.2
	if f.ver%2 == 0 {
		a = 0.8
	}
	f.w = [][]float64{{a, 1 - a, 0}, {0.5, 0.5, 0}}
}
func (f *flipper) Weights() (uint64, [][]float64) { return f.ver, f.w }

func TestWeightReversalsAndAmplitude(t *testing.T) {
	sc, wl := load(t, small)
	sc.Events = nil
	var f *flipper
	r, err := des.Run(sc, wl, "flipper", func(*des.World) (des.Policy, error) { f = &flipper{}; return f, nil }, des.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Two weights swing by 0.6 every tick after the first two.
	ticks := int(f.ver)
	if got, want := r.Metrics.WeightReversals, 2*(ticks-3); got < want-2 || got > want+2 {
		t.Fatalf("reversals %d, want about %d over %d ticks", got, want, ticks)
	}
	if a := r.Metrics.WeightReversalAmplitude; a < 0.59 || a > 0.61 {
		t.Fatalf("amplitude %v, want 0.6", a)
	}
}

func TestCalibratedVariantRuns(t *testing.T) {
	sc, wl := load(t, small)
	r := run(t, sc, wl, policy.Calibrated, 1)
	if r.Metrics.Completed == 0 {
		t.Fatal("nothing completed")
	}
}

// recorder picks the first engine not yet tried and records, per
// request, its picks and how its attempts ended.
type recorder struct {
	picks, retries, last map[int]int
}

func (r *recorder) Pick(_ time.Duration, q *des.Request, exclude []int32) int {
	for e := 0; e < 3; e++ {
		tried := false
		for _, x := range exclude {
			tried = tried || int(x) == e
		}
		if !tried {
			r.picks[q.Index]++
			return e
		}
	}
	return -1
}

func (r *recorder) Done(_ time.Duration, q *des.Request, _ int, o des.Outcome) {
	if o.Retry {
		r.retries[q.Index]++
		return
	}
	r.last[q.Index]++
}

func (r *recorder) Tick(time.Duration) {}

// An attempt's outcome says whether the request will be tried again, so a
// gateway can report each request once, after its last attempt.
func TestOutcomeRetryMarksAllButTheLastAttempt(t *testing.T) {
	sc, wl := load(t, small)
	rec := &recorder{picks: map[int]int{}, retries: map[int]int{}, last: map[int]int{}}
	if _, err := des.Run(sc, wl, "recorder", func(*des.World) (des.Policy, error) { return rec, nil }, des.Options{}); err != nil {
		t.Fatal(err)
	}
	retried := 0
	for i, n := range rec.picks {
		if rec.last[i] != 1 || rec.retries[i] != n-1 {
			t.Fatalf("request %d: %d picks, %d retried attempts, %d last attempts", i, n, rec.retries[i], rec.last[i])
		}
		if n > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Fatal("no request was retried while a-0 was down")
	}
}

// outcomes records every attempt's outcome and the world it ran in.
type outcomes struct {
	w    *des.World
	next int
	by   map[int]des.Outcome
	eng  map[int]int
}

func (o *outcomes) Pick(_ time.Duration, q *des.Request, exclude []int32) int {
	for k := range o.w.Engines {
		e := (o.next + k) % len(o.w.Engines)
		tried := false
		for _, x := range exclude {
			tried = tried || int(x) == e
		}
		if !tried && o.w.Healthy(e) {
			o.next = e + 1
			return e
		}
	}
	return -1
}

func (o *outcomes) Done(_ time.Duration, q *des.Request, e int, out des.Outcome) {
	if out.OK {
		o.by[q.Index] = out
		o.eng[q.Index] = e
	}
}

func (o *outcomes) Tick(time.Duration) {}

func runOutcomes(t *testing.T, sc *scenario.Scenario, wl *scenario.Stream) (*outcomes, *des.Result) {
	t.Helper()
	o := &outcomes{by: map[int]des.Outcome{}, eng: map[int]int{}}
	r, err := des.Run(sc, wl, "outcomes", func(w *des.World) (des.Policy, error) { o.w = w; return o, nil }, des.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return o, r
}

// A non-streaming response reaches the gateway whole: its observed TTFT
// is its E2E, and the TTFT percentiles cover streaming requests only.
func TestNonStreamingTTFTIsE2E(t *testing.T) {
	js := strings.Replace(small, `"rate_rps": 60}`, `"rate_rps": 60, "non_streaming_share": 0.5}`, 1)
	sc, wl := load(t, js)
	sc.Events = nil
	o, r := runOutcomes(t, sc, wl)
	var streamTTFT []float64
	nonStr := 0
	for i, out := range o.by {
		req := &wl.Requests[i]
		if req.NonStreaming {
			nonStr++
			if out.TTFT != out.E2E {
				t.Fatalf("non-streaming request %d: TTFT %v != E2E %v", i, out.TTFT, out.E2E)
			}
			continue
		}
		if req.OutputTokens > 1 && out.TTFT >= out.E2E {
			t.Fatalf("streaming request %d: TTFT %v >= E2E %v", i, out.TTFT, out.E2E)
		}
		streamTTFT = append(streamTTFT, float64(out.TTFT)/1e6)
	}
	m := r.Metrics
	if n := len(o.by); nonStr < n/3 || nonStr > 2*n/3 {
		t.Fatalf("%d of %d completed requests are non-streaming, want about half", nonStr, n)
	}
	if m.NonStreaming != nonStr || m.Completed != len(o.by) {
		t.Fatalf("metrics count %d non-streaming of %d, outcomes %d of %d", m.NonStreaming, m.Completed, nonStr, len(o.by))
	}
	slices.Sort(streamTTFT)
	k := int(math.Ceil(0.99*float64(len(streamTTFT)))) - 1
	if want := math.Round(streamTTFT[k]*10) / 10; math.Abs(m.TTFTms.P99-want) > 0.11 {
		t.Fatalf("p99 TTFT %v, want %v (streaming requests only)", m.TTFTms.P99, want)
	}
}

// An engine with latency_multiplier 6 is six times slower than its
// same-class peer, while the world still shows the class's preset.
func TestLatencyMultiplierSlowsOneEngine(t *testing.T) {
	js := strings.Replace(small, `{"id": "b-0", "region": "b", "gpu": "h100"}`, `{"id": "b-0", "region": "b", "gpu": "h100", "latency_multiplier": 6}`, 1)
	js = strings.Replace(js, `"rate_rps": 60}`, `"rate_rps": 2}`, 1) // light load: small batches
	sc, wl := load(t, js)
	sc.Events = nil
	o, _ := runOutcomes(t, sc, wl)
	var sum [3]time.Duration
	var tok [3]int
	for i, out := range o.by {
		e := o.eng[i]
		sum[e] += out.E2E - out.TTFT
		tok[e] += wl.Requests[i].OutputTokens - 1
	}
	perTok := func(e int) float64 { return float64(sum[e]) / float64(tok[e]) }
	if ratio := perTok(1) / perTok(0); ratio < 5.5 || ratio > 6.5 {
		t.Fatalf("b-0 decodes %.2fx slower than a-0, want 6x", ratio)
	}
	if o.w.Engines[1].Preset != o.w.Engines[0].Preset {
		t.Fatal("the slowed engine shows a different preset")
	}
}

// An engine flagged report_max_batch: false exports no batch limit.
func TestReportedMaxBatch(t *testing.T) {
	js := strings.Replace(small, `{"id": "b-0", "region": "b", "gpu": "h100"}`, `{"id": "b-0", "region": "b", "gpu": "h100", "report_max_batch": false}`, 1)
	sc, wl := load(t, js)
	o, _ := runOutcomes(t, sc, wl)
	if got := o.w.Engines[1].ReportedMaxBatch(); got != 0 {
		t.Fatalf("b-0 reports max batch %d, want 0", got)
	}
	if got, want := o.w.Engines[0].ReportedMaxBatch(), o.w.Engines[0].Preset.MaxSeqs; got != want || want == 0 {
		t.Fatalf("a-0 reports max batch %d, want the preset's %d", got, want)
	}
}

// restartProbe routes every request to engine 0 and asks, at every tick,
// how much of the first request's prompt engine 0's cache holds.
type restartProbe struct {
	w     *des.World
	first *des.Request
	held  map[time.Duration]int
}

func (p *restartProbe) Pick(_ time.Duration, q *des.Request, exclude []int32) int {
	if p.first == nil {
		p.first = q
	}
	if len(exclude) > 0 {
		return -1
	}
	return 0
}
func (p *restartProbe) Done(time.Duration, *des.Request, int, des.Outcome) {}
func (p *restartProbe) Tick(now time.Duration) {
	if p.first != nil {
		p.held[now] = p.w.PrefixMatch(0, p.first)
	}
}

// An engine killed and restarted comes back with a cold cache.
func TestRestartedEngineIsCold(t *testing.T) {
	js := strings.Replace(small, `"rate_rps": 60}`, `"rate_rps": 5, "sessions": 4}`, 1)
	sc, wl := load(t, js)
	p := &restartProbe{held: map[time.Duration]int{}}
	if _, err := des.Run(sc, wl, "probe", func(w *des.World) (des.Policy, error) { p.w = w; return p, nil }, des.Options{}); err != nil {
		t.Fatal(err)
	}
	// a-0 is down from 8 s to 12 s; nothing routes there until the
	// gateways notice it is back (14 s), and the probe's prompt was cached
	// before 8 s.
	if p.held[7900*time.Millisecond] == 0 {
		t.Fatal("the first prompt was not cached before the kill")
	}
	if got := p.held[12100*time.Millisecond]; got != 0 {
		t.Fatalf("after the restart engine 0 holds %d tokens of the first prompt, want a cold cache", got)
	}
}
