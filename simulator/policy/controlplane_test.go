package policy

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// testWindow returns a fired window ending at end (Unix ms) with one engine's
// and one cluster's estimates, enough for the planner to plan it.
func testWindow(end int64) process.Fired {
	prof := func(pts ...[2]float64) *schemas.LatencyProfile {
		p := &schemas.LatencyProfile{}
		for _, pt := range pts {
			p.Points = append(p.Points, &schemas.ProfilePoint{Utilization: pt[0], LatencyMs: pt[1]})
		}
		return p
	}
	return process.Fired{Start: end - 10000, End: end, Estimates: []*schemas.Estimate{
		{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
			SchemaVersion: schemas.Version, EngineId: "e", Region: "r", GpuClass: "h100",
			WindowEndUnixMs: end, CapacityRps: 100, Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1,
			TtftProfile: prof([2]float64{0, 100}, [2]float64{0.9, 400}),
		}}},
		{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{
			SchemaVersion: schemas.Version, Cluster: "r", WindowEndUnixMs: end, DemandRps: 10,
		}}},
	}}
}

// TestSimControlPlansLikeControl: the simulated optimizer loop plans a
// window when the next window's estimates arrive or after the settle
// delay, whichever comes first (streams/control's loop), with the
// window's end as the snapshot's version, and the snapshot reaches the
// gateways the propagation delay after it is planned.
func TestSimControlPlansLikeControl(t *testing.T) {
	const prop = 300 * time.Millisecond
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	type arrival struct {
		at      time.Duration
		version uint64
	}
	for _, tc := range []struct {
		name  string
		fires map[time.Duration][]int64 // tick -> ends of the windows fired then
		ticks []time.Duration
		want  []arrival
	}{
		{
			name:  "one window waits for the settle delay",
			fires: map[time.Duration][]int64{s(7): {2000}},
			ticks: []time.Duration{s(7), s(7.1), s(7.4), s(7.5), s(7.7), s(7.8), s(9)},
			want:  []arrival{{s(7.5) + prop, 2000}},
		},
		{
			name:  "a burst plans all but its last window at once",
			fires: map[time.Duration][]int64{s(7): {2000, 4000, 6000}},
			ticks: []time.Duration{s(7), s(7.5), s(9)},
			want:  []arrival{{s(7) + prop, 2000}, {s(7) + prop, 4000}, {s(7.5) + prop, 6000}},
		},
		{
			name:  "the next window flushes one not settled yet",
			fires: map[time.Duration][]int64{s(7): {2000}, s(7.2): {4000}},
			ticks: []time.Duration{s(7), s(7.2), s(8), s(9)},
			want:  []arrival{{s(7.2) + prop, 2000}, {s(7.7) + prop, 4000}},
		},
		{
			name:  "a settled window is planned at its settle time, seen late",
			fires: map[time.Duration][]int64{s(7): {2000}, s(9): {4000}},
			ticks: []time.Duration{s(7), s(9), s(10)},
			want:  []arrival{{s(7.5) + prop, 2000}, {s(9.5) + prop, 4000}},
		},
		{
			name:  "a window already planned is not planned again",
			fires: map[time.Duration][]int64{s(7): {4000}, s(9): {2000, 4000}},
			ticks: []time.Duration{s(7), s(9), s(10)},
			want:  []arrival{{s(7.5) + prop, 4000}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := simControl{planner: plan.NewPlanner(plan.Settings{}), propagation: prop}
			var got []arrival
			for _, now := range tc.ticks {
				var fired []process.Fired
				for _, end := range tc.fires[now] {
					fired = append(fired, testWindow(end))
				}
				c.advance(now, fired)
				for _, p := range c.pending {
					got = append(got, arrival{p.at, p.snap.GetVersion()})
				}
				c.pending = c.pending[:0]
			}
			if len(got) != len(tc.want) {
				t.Fatalf("snapshots %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("snapshots %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// installs records the version and virtual time of every snapshot the
// gateways install.
type installs struct {
	*switchyard
	at       []time.Duration
	versions []uint64
}

func (p *installs) Tick(now time.Duration) {
	p.switchyard.Tick(now)
	if n := len(p.versions); n == 0 || p.version != p.versions[n-1] {
		if p.version != 0 {
			p.at = append(p.at, now)
			p.versions = append(p.versions, p.version)
		}
	}
}

// TestSwitchyardInstallsEveryWindow runs the switchyard policy on a small
// fleet and checks the control plane's cadence end to end: every record
// the simulated agents and gateways produce is valid to the processor
// core; the gateways install one snapshot per window, each versioned by
// its window's end; and each arrives when live's would: allowed lateness
// after the window's end (plus up to a signal interval until a signal
// moves the watermark past it), then the settle delay and propagation.
func TestSwitchyardInstallsEveryWindow(t *testing.T) {
	sc, err := scenario.Parse([]byte(`{
  "name": "cadence", "duration_s": 40, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b"], "rtt_ms": {"a": {"b": 30}},
  "clusters": [{"id": "a", "region": "a"}, {"id": "b", "region": "b"}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "b-0", "region": "b", "gpu": "a100"}],
  "workload": {"kind": "generator", "rate_rps": 20},
  "control": {"window_s": 4, "slide_s": 1, "allowed_lateness_s": 2, "propagation_ms": 300}
}`))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := sc.Build(scenario.BuildOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var p *installs
	if _, err := des.Run(sc, wl, "switchyard", func(w *des.World) (des.Policy, error) {
		sy, err := newSwitchyard(w, 1)
		p = &installs{switchyard: sy}
		return p, err
	}, des.Options{}); err != nil {
		t.Fatal(err)
	}
	if p.proc.dead != 0 {
		t.Fatalf("%d records dead-lettered by the processor core", p.proc.dead)
	}
	if len(p.versions) < 30 {
		t.Fatalf("%d snapshots installed over 40 s of traffic, want one per 1 s window (at least 30): %v", len(p.versions), p.versions)
	}
	for i, v := range p.versions {
		end := time.Duration(int64(v)-simEpochMs) * time.Millisecond
		if end%time.Second != 0 || (i > 0 && v != p.versions[i-1]+1000) {
			t.Fatalf("versions %v: want consecutive window ends, 1 s apart", p.versions)
		}
		lo := end + 2*time.Second + controlSettle + 300*time.Millisecond
		if hi := lo + time.Second + 100*time.Millisecond; p.at[i] < lo || p.at[i] > hi {
			t.Fatalf("window ending at %v installed at %v, want in [%v, %v]", end, p.at[i], lo, hi)
		}
	}
}

// TestTwinStartsFromTheInitialSnapshot: a scenario's initial weights
// (a twin's: the live snapshot in force at its range's start) route the
// requests that arrive before the simulated control plane's first plan;
// without them the gateways spread those requests over every engine.
func TestTwinStartsFromTheInitialSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial string
		only    bool
	}{
		{"initial weights", `, "initial": [{"cluster": "a", "demand_rps": 20, "weights": {"a-1": 1}}]`, true},
		{"none", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := scenario.Parse([]byte(`{
  "name": "initial", "duration_s": 3, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a"], "rtt_ms": {},
  "clusters": [{"id": "a", "region": "a"}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "a-1", "region": "a", "gpu": "h100"}],
  "workload": {"kind": "generator", "rate_rps": 20},
  "control": {"window_s": 4, "slide_s": 1, "allowed_lateness_s": 2}` + tc.initial + `
}`))
			if err != nil {
				t.Fatal(err)
			}
			wl, err := sc.Build(scenario.BuildOptions{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			engines := map[string]int{}
			if _, err := des.Run(sc, wl, "switchyard", func(w *des.World) (des.Policy, error) {
				sy, err := newSwitchyard(w, 1)
				if sy != nil {
					sy.observe = func(ev *schemas.RoutingEvent) { engines[ev.GetEngineId()]++ }
				}
				return sy, err
			}, des.Options{}); err != nil {
				t.Fatal(err)
			}
			if n := engines["a-0"] + engines["a-1"]; n < 40 {
				t.Fatalf("%d requests routed, want the 3 s of 20 rps", n)
			}
			if only := engines["a-0"] == 0; only != tc.only {
				t.Fatalf("requests per engine %v: only a-1 %v, want %v", engines, only, tc.only)
			}
		})
	}
}
