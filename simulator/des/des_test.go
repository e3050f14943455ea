package des_test

import (
	"encoding/json"
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

func TestSwitchyardPublishesWeightsAndRoutesAcrossRegions(t *testing.T) {
	sc, wl := load(t, small)
	r := run(t, sc, wl, "switchyard", 1)
	if r.Series.Weight == nil {
		t.Fatal("switchyard reports no weights")
	}
	nonzero := false
	for _, w := range r.Series.Weight {
		for _, v := range w {
			if v > 0 {
				nonzero = true
			}
		}
	}
	if !nonzero {
		t.Fatal("no snapshot was ever installed")
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
