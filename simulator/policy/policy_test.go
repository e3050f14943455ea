package policy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/policy"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
)

const fleet = `{
  "name": "fleet", "duration_s": 30, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b", "c"], "rtt_ms": {"a": {"b": 30, "c": 60}, "b": {"c": 30}},
  "clusters": [{"id": "a", "region": "a", "share": 2}, {"id": "b", "region": "b"}, {"id": "c", "region": "c"}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "a-1", "region": "a", "gpu": "a100"},
              {"id": "b-0", "region": "b", "gpu": "l4"}, {"id": "b-1", "region": "b", "gpu": "h100"},
              {"id": "c-0", "region": "c", "gpu": "a100"}],
  "workload": {"kind": "generator", "rate_rps": 90},
  "control": {"optimizer_period_s": 2, "window_s": 4, "slide_s": 1, "allowed_lateness_s": 1, "legacy_period_s": 2, "legacy_lag_s": 2},
  "events": [{"at_s": 10, "kind": "region_down", "region": "a"}, {"at_s": 18, "kind": "region_up", "region": "a"}]
}`

// checker wraps a policy and checks the Policy contract on every call.
type checker struct {
	t        *testing.T
	w        *des.World
	inner    des.Policy
	fallback bool // the policy may pick a down engine deliberately
	inflight []int
	picks    int
}

func (c *checker) Pick(now time.Duration, r *des.Request, exclude []int32) int {
	e := c.inner.Pick(now, r, exclude)
	if e < 0 {
		return e
	}
	c.picks++
	if e >= len(c.w.Engines) {
		c.t.Fatalf("picked engine %d of %d", e, len(c.w.Engines))
	}
	if slices.Contains(exclude, int32(e)) {
		c.t.Fatalf("picked excluded engine %d (exclude %v)", e, exclude)
	}
	if !c.fallback && !c.w.Healthy(e) {
		c.t.Fatalf("picked engine %d, which the gateway knows is down", e)
	}
	c.inflight[e]++
	return e
}

func (c *checker) Done(now time.Duration, r *des.Request, e int, o des.Outcome) {
	c.inflight[e]--
	if c.inflight[e] < 0 {
		c.t.Fatalf("Done without Pick on engine %d", e)
	}
	c.inner.Done(now, r, e, o)
}

func (c *checker) Tick(now time.Duration) { c.inner.Tick(now) }

func load(t *testing.T) (*scenario.Scenario, *scenario.Stream) {
	t.Helper()
	sc, err := scenario.Parse([]byte(fleet))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := sc.Build(scenario.BuildOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	return sc, wl
}

func TestPoliciesKeepTheContract(t *testing.T) {
	sc, wl := load(t)
	for _, name := range append(policy.Names(), policy.Calibrated) {
		t.Run(name, func(t *testing.T) {
			f, err := policy.New(name, 1)
			if err != nil {
				t.Fatal(err)
			}
			var c *checker
			res, err := des.Run(sc, wl, name, func(w *des.World) (des.Policy, error) {
				p, err := f(w)
				if err != nil {
					return nil, err
				}
				// The gateway selector falls back to any engine when every
				// candidate is down or ejected (pick's panic routing).
				fallback := name == "switchyard" || name == "legacy-irb" || name == policy.Calibrated
				c = &checker{t: t, w: w, inner: p, fallback: fallback, inflight: make([]int, len(w.Engines))}
				return c, nil
			}, des.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// Every request is picked at least once or shed on purpose
			// (Pick returns -1): switchyard sheds what its capacity
			// estimates cannot place, e.g. while region a is down.
			if c.picks+res.Metrics.Shed < len(wl.Requests) {
				t.Fatalf("%d picks and %d shed for %d requests", c.picks, res.Metrics.Shed, len(wl.Requests))
			}
			if res.Metrics.Completed < len(wl.Requests)/2 {
				t.Fatalf("only %d of %d completed", res.Metrics.Completed, len(wl.Requests))
			}
		})
	}
}

func TestUnknownPolicy(t *testing.T) {
	if _, err := policy.New("magic", 1); err == nil {
		t.Fatal("no error for an unknown policy")
	}
	if got := policy.Names(); len(got) != 10 || got[0] != "switchyard" {
		t.Fatalf("names %v", got)
	}
}

// The old design oscillates on a heterogeneous fleet: its weights swing
// back and forth by more than 10 points.
func TestLegacyOscillates(t *testing.T) {
	sc, wl := load(t)
	sc.Events = nil
	f, _ := policy.New("legacy-irb", 1)
	res, err := des.Run(sc, wl, "legacy-irb", f, des.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Metrics; m.WeightReversals < 3 || m.WeightReversalAmplitude < 0.1 {
		t.Fatalf("legacy-irb: %d reversals of mean swing %.3f, want an oscillation", m.WeightReversals, m.WeightReversalAmplitude)
	}
}

// Affinity policies keep conversations on their engine, so they hit the
// prefix cache more than round-robin.
func TestAffinityRaisesHitRate(t *testing.T) {
	sc, wl := load(t)
	sc.Events = nil
	hit := map[string]float64{}
	for _, name := range []string{"round-robin", "chwbl", "prefix-aware", "llmd-scorer"} {
		f, _ := policy.New(name, 1)
		res, err := des.Run(sc, wl, name, f, des.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hit[name] = res.Metrics.KVHitRate
	}
	for _, name := range []string{"chwbl", "prefix-aware", "llmd-scorer"} {
		if hit[name] <= hit["round-robin"] {
			t.Errorf("%s hit rate %.3f <= round-robin's %.3f", name, hit[name], hit["round-robin"])
		}
	}
}
