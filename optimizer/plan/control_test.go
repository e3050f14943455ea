package plan

import (
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// flatEngine is an engine estimate whose TTFT profile is base·(1, 1.1,
// 1.3) at utilisations (0, 0.5, 1) from n requests, with no TBOT profile.
func flatEngine(id, region, cls string, base, capacity float64, n uint32, end time.Time) *schemas.Estimate {
	est := engineEst(id, region, capacity, end)
	e := est.GetEngine()
	e.GpuClass = cls
	e.TtftProfile = profile([2]float64{0, base}, [2]float64{0.5, 1.1 * base}, [2]float64{1, 1.3 * base})
	e.TtftProfile.Samples = n
	e.TbotProfile = nil
	return est
}

func weightsOf(snap *schemas.WeightSnapshot, cluster string) map[string]float64 {
	out := map[string]float64{}
	for _, cw := range snap.GetClusters() {
		if cw.GetCluster() == cluster {
			for _, w := range cw.GetWeights() {
				out[w.GetEngineId()] = w.GetWeight()
			}
		}
	}
	return out
}

// evenSnapshot is a published snapshot giving cluster c equal weights on
// engines (all usable), created at t.
func evenSnapshot(c string, t time.Time, engines ...string) *schemas.WeightSnapshot {
	cw := &schemas.ClusterWeights{Cluster: c, DemandRps: 50}
	for _, e := range engines {
		cw.Weights = append(cw.Weights, &schemas.EngineWeight{EngineId: e, Weight: 1 / float64(len(engines)), Explanation: &schemas.Explanation{}})
	}
	return &schemas.WeightSnapshot{Version: uint64(t.UnixMilli()), CreatedUnixMs: t.UnixMilli(), Clusters: []*schemas.ClusterWeights{cw}}
}

func TestOutlierNotPooled(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const slow = 6.0
	tests := []struct {
		name    string
		engines func(end time.Time, idle bool) []*schemas.Estimate
		// want is each engine's planned latency at utilisation 0 after
		// the slow engine went idle, relative to the fast base (14 ms).
		want map[string]float64
	}{
		{
			name: "fast and 6x slower engine of one class",
			engines: func(end time.Time, idle bool) []*schemas.Estimate {
				s := flatEngine("slow", "b", "h100", slow*14, 100, 200, end)
				if idle { // no samples: the processor publishes its prior
					s = flatEngine("slow", "b", "h100", 14, 100, 0, end)
				}
				return []*schemas.Estimate{flatEngine("fast", "a", "h100", 14, 100, 200, end), s}
			},
			want: map[string]float64{"fast": 1, "slow": slow},
		},
		{
			name: "two agreeing engines and one 6x slower",
			engines: func(end time.Time, idle bool) []*schemas.Estimate {
				s := flatEngine("slow", "b", "h100", slow*14, 100, 200, end)
				if idle {
					s = flatEngine("slow", "b", "h100", 14, 100, 0, end)
				}
				return []*schemas.Estimate{
					flatEngine("fast-0", "a", "h100", 14, 100, 200, end),
					flatEngine("fast-1", "a", "h100", 15, 100, 200, end), s,
				}
			},
			// fast-0 and fast-1 agree and are pooled: 14.5 each ± their own
			// weight 200/250.
			want: map[string]float64{"fast-0": (200*14 + 50*14.5) / 250 / 14, "fast-1": (200*15 + 50*14.5) / 250 / 14, "slow": slow},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			set := Settings{Clusters: []string{"a"}, MinDemandRPS: 1}
			// Three measured windows, then three idle ones.
			for w := range 6 {
				end := t0.Add(time.Duration(w) * 2 * time.Second)
				for _, e := range tt.engines(end, w >= 3) {
					s.Apply(e)
				}
				in, _, err := s.Instance(end, set)
				if err != nil {
					t.Fatal(err)
				}
				if w < 2 {
					continue
				}
				for _, e := range in.Engines {
					got := e.LatencyMs[0][1] / 14
					if math.Abs(got-tt.want[e.ID]) > 0.02*tt.want[e.ID] {
						t.Errorf("window %d: %s planned at %.3f× the fast base, want %.3f×", w, e.ID, got, tt.want[e.ID])
					}
				}
			}
		})
	}
}

func TestOutlierMemoryExpires(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := NewState()
	set := Settings{Clusters: []string{"a"}, MinDemandRPS: 1}
	for w := range 3 {
		end := t0.Add(time.Duration(w) * 2 * time.Second)
		s.Apply(flatEngine("fast", "a", "h100", 14, 100, 200, end))
		s.Apply(flatEngine("slow", "a", "h100", 84, 100, 200, end))
		if _, _, err := s.Instance(end, set); err != nil {
			t.Fatal(err)
		}
	}
	if !s.outlier("slow", ttft) {
		t.Fatal("slow engine not an outlier after three measured windows")
	}
	// Idle for longer than PoolMemoryMs: forgotten, pooled again.
	end := t0.Add(4*time.Second + PoolMemoryMs*time.Millisecond + time.Second)
	s.Apply(flatEngine("fast", "a", "h100", 14, 100, 200, end))
	s.Apply(flatEngine("slow", "a", "h100", 14, 100, 0, end))
	if _, _, err := s.Instance(end, set); err != nil {
		t.Fatal(err)
	}
	if s.outlier("slow", ttft) {
		t.Fatal("outlier memory older than PoolMemoryMs still used")
	}
}

// TestRelativeChurn: the default churn moves weight on a 30% latency gap
// within three windows at any latency scale, and does not move it on ±5%
// measurement noise; the old absolute 500 ms/rps froze ~100 ms engines.
func TestRelativeChurn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type gap func(w int) (a, b float64) // latency factors of a and b in window w
	tests := []struct {
		name  string
		set   Settings
		base  float64
		gap   gap
		moved bool
	}{
		{"30% gap at 100 ms", Settings{}, 100, func(int) (float64, float64) { return 1, 1.3 }, true},
		{"30% gap at 5 s", Settings{}, 5000, func(int) (float64, float64) { return 1, 1.3 }, true},
		{"±5% noise at 100 ms", Settings{}, 100, func(w int) (float64, float64) {
			if w%2 == 0 {
				return 1.05, 0.95
			}
			return 0.95, 1.05
		}, false},
		{"±5% noise at 5 s", Settings{}, 5000, func(w int) (float64, float64) {
			if w%2 == 0 {
				return 0.95, 1.05
			}
			return 1.05, 0.95
		}, false},
		{"absolute 500 ms/rps freezes 100 ms engines", Settings{ChurnWeight: 500}, 100, func(int) (float64, float64) { return 1, 1.3 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.set.Clusters, tt.set.MinDemandRPS = []string{"r"}, 1
			p := NewPlanner(tt.set)
			p.Remember(evenSnapshot("r", t0, "a", "b"))
			var last map[string]float64
			for w := 1; w <= 3; w++ {
				end := t0.Add(time.Duration(w) * 2 * time.Second)
				fa, fb := tt.gap(w)
				snap, err := p.Plan(end, []*schemas.Estimate{
					flatEngine("a", "r", "h100", fa*tt.base, 100, 500, end),
					flatEngine("b", "r", "h100", fb*tt.base, 100, 500, end),
					demandEst("r", 50, end),
				})
				if err != nil {
					t.Fatal(err)
				}
				last = weightsOf(snap, "r")
				if !tt.moved && math.Abs(last["a"]-0.5) > 0.01 {
					t.Fatalf("window %d: weights %v moved on noise", w, last)
				}
			}
			if tt.moved && last["a"] < 0.6 {
				t.Fatalf("after three windows the faster engine has %.3f of the traffic, want >= 0.6", last["a"])
			}
		})
	}
}

func TestPartialViewReset(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPlanner(Settings{Clusters: []string{"r"}, MinDemandRPS: 1})
	// Window 1: only engine a publishes; everything goes to it.
	snap, err := p.Plan(t0, []*schemas.Estimate{flatEngine("a", "r", "h100", 100, 100, 500, t0), demandEst("r", 50, t0)})
	if err != nil {
		t.Fatal(err)
	}
	if w := weightsOf(snap, "r"); w["a"] != 1 {
		t.Fatalf("one engine: weights %v", w)
	}
	// Window 2: b's agent starts publishing. The plan made without b is
	// no churn reference: the identical engines share the traffic at once.
	t1 := t0.Add(2 * time.Second)
	ests := []*schemas.Estimate{flatEngine("a", "r", "h100", 100, 100, 500, t1), flatEngine("b", "r", "h100", 100, 100, 500, t1), demandEst("r", 50, t1)}
	p.Apply(ests...)
	in, _, err := p.st.Instance(t1, p.set)
	if err != nil {
		t.Fatal(err)
	}
	if in.Previous != nil || in.ChurnWeight != 0 {
		t.Fatalf("new engine: previous %v churn %v, want no reference", in.Previous, in.ChurnWeight)
	}
	snap, err = p.Plan(t1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := weightsOf(snap, "r"); math.Abs(w["a"]-0.5) > 0.05 || math.Abs(w["b"]-0.5) > 0.05 {
		t.Fatalf("after b appeared: weights %v, want about even", w)
	}
	// Window 3: the same fleet: the previous weights are the reference.
	t2 := t1.Add(2 * time.Second)
	p.Apply(flatEngine("a", "r", "h100", 100, 100, 500, t2), flatEngine("b", "r", "h100", 100, 100, 500, t2), demandEst("r", 50, t2))
	in, _, err = p.st.Instance(t2, p.set)
	if err != nil {
		t.Fatal(err)
	}
	if in.Previous["r"] == nil || !(in.ChurnWeight > 0) {
		t.Fatalf("same fleet: previous %v churn %v, want the last plan as reference", in.Previous, in.ChurnWeight)
	}
}

func TestProbeFloor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name   string
		set    Settings
		demand float64
		slowB  float64 // b's latency relative to a's
		want   float64 // b's weight
	}{
		{"idle engine gets ProbeRPS at high demand", Settings{}, 200, 1.5, ProbeRPS / 200},
		{"idle engine gets ProbeShare at low demand", Settings{}, 20, 1.5, DefaultProbeShare},
		{"smaller ProbeShare", Settings{ProbeShare: 0.005}, 20, 1.5, 0.005},
		{"too slow to probe", Settings{}, 20, 3, 0},
		{"probing off", Settings{ProbeShare: -1}, 20, 1.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.set.Clusters, tt.set.MinDemandRPS = []string{"r"}, 1
			p := NewPlanner(tt.set)
			snap, err := p.Plan(t0, []*schemas.Estimate{
				flatEngine("a", "r", "h100", 100, 1000, 500, t0),
				flatEngine("b", "r", "l4", tt.slowB*100, 1000, 0, t0),
				demandEst("r", tt.demand, t0),
			})
			if err != nil {
				t.Fatal(err)
			}
			w := weightsOf(snap, "r")
			if math.Abs(w["b"]-tt.want) > 1e-9 || math.Abs(w["a"]+w["b"]-1) > 1e-9 {
				t.Fatalf("weights %v, want b at %v", w, tt.want)
			}
			if w["b"] > DefaultProbeShare+1e-12 {
				t.Fatalf("probe floor %v above the bound %v", w["b"], DefaultProbeShare)
			}
		})
	}
}

func TestRestartedEngineServesWithinTwoWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPlanner(Settings{Clusters: []string{"r"}, MinDemandRPS: 1})
	step := 2 * time.Second
	plan := func(w int, b *schemas.Estimate) map[string]float64 {
		t.Helper()
		end := t0.Add(time.Duration(w) * step)
		b.GetEngine().WindowEndUnixMs = end.UnixMilli()
		snap, err := p.Plan(end, []*schemas.Estimate{flatEngine("a", "r", "h100", 100, 100, 500, end), b, demandEst("r", 100, end)})
		if err != nil {
			t.Fatal(err)
		}
		return weightsOf(snap, "r")
	}
	for w := range 3 {
		if got := plan(w, flatEngine("b", "r", "h100", 100, 100, 500, t0)); !(got["b"] > 0.3) {
			t.Fatalf("window %d: b has %v before the restart", w, got["b"])
		}
	}
	down := flatEngine("b", "r", "h100", 100, 100, 0, t0)
	down.GetEngine().Health, down.GetEngine().ReadyReplicas = schemas.Health_HEALTH_UNHEALTHY, 0
	for w := 3; w < 6; w++ {
		if got := plan(w, down); got["b"] != 0 {
			t.Fatalf("window %d: b down but weighted %v", w, got["b"])
		}
	}
	// Back, cold: no samples, the prior profile. It serves in the first
	// plan that sees it healthy.
	got := plan(6, flatEngine("b", "r", "h100", 100, 100, 0, t0))
	if !(got["b"] >= ProbeRPS/100) {
		t.Fatalf("restarted engine has weight %v in its first window back", got["b"])
	}
}

func TestEstimatesExpire(t *testing.T) {
	t0 := time.Unix(1000, 0)
	set := Settings{Clusters: []string{"a"}, MinDemandRPS: 1, RegionRTTms: map[string]map[string]float64{"a": {"b": 40}}}
	s := NewState()
	s.Apply(&schemas.Estimate{Kind: &schemas.Estimate_Network{Network: &schemas.NetworkEstimate{
		Cluster: "a", EngineId: "b-0", WindowEndUnixMs: t0.UnixMilli(), RttMs: 5, Samples: 100,
	}}})
	tests := []struct {
		at   time.Duration
		want float64
	}{
		{0, 5},
		{time.Minute, 5},
		{2*time.Minute + time.Second, 40}, // NetworkTTL 2m: back to the static value
	}
	for _, tt := range tests {
		now := t0.Add(tt.at)
		s.Apply(engineEst("b-0", "b", 100, now))
		in, _, err := s.Instance(now, set)
		if err != nil {
			t.Fatal(err)
		}
		if got := in.RTTms["a"]["b-0"]; got != tt.want {
			t.Errorf("%v after the network estimate: rtt %v, want %v", tt.at, got, tt.want)
		}
	}
	// Engine estimates older than EstimateTTL are not planned for, and
	// previous weights older than it are no churn reference.
	now := t0.Add(5 * time.Minute)
	s.Apply(engineEst("a-0", "a", 100, now))
	s.Remember(evenSnapshot("a", now.Add(-31*time.Second), "a-0", "b-0"))
	in, _, err := s.Instance(now, set)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Engines) != 1 || in.Engines[0].ID != "a-0" {
		t.Fatalf("engines %+v, want only the fresh one", in.Engines)
	}
	if in.Previous != nil {
		t.Fatalf("previous weights 31 s old used as churn reference: %v", in.Previous)
	}
}

func TestIdleClusterSpreadsByCapacity(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPlanner(Settings{Clusters: []string{"r"}, MinDemandRPS: 0.1, ProbeShare: -1})
	ests := []*schemas.Estimate{
		flatEngine("r-0", "r", "h100", 100, 100, 0, t0),
		flatEngine("r-1", "r", "h100", 100, 300, 0, t0),
		flatEngine("s-0", "s", "h100", 100, 300, 0, t0),
		demandEst("r", 0.05, t0),
	}
	snap, err := p.Plan(t0, ests)
	if err != nil {
		t.Fatal(err)
	}
	w := weightsOf(snap, "r")
	if math.Abs(w["r-1"]/w["r-0"]-3) > 1e-6 || w["s-0"] > spillShare+1e-12 {
		t.Fatalf("idle cluster weights %v, want r-0:r-1 = 1:3 and only the failover sliver remote", w)
	}
	for _, cw := range snap.GetClusters() {
		for _, ew := range cw.GetWeights() {
			if ew.GetEngineId() == "r-0" && !slices.Contains(ew.GetExplanation().GetBinding(), "idle_spread") {
				t.Fatalf("idle spread not explained: %v", ew.GetExplanation().GetBinding())
			}
		}
	}
}

func TestHoldSmallMoves(t *testing.T) {
	in := func(capB float64, healthyB bool) *opt.Instance {
		return &opt.Instance{
			MaxUtilization: 0.9,
			Engines:        []opt.Engine{{ID: "a", CapacityRPS: 100, Healthy: true}, {ID: "b", CapacityRPS: capB, Healthy: healthyB}},
			Previous:       map[string]map[string]float64{"r": {"a": 0.5, "b": 0.5}},
		}
	}
	cws := func(wa float64) []*schemas.ClusterWeights {
		return []*schemas.ClusterWeights{{Cluster: "r", DemandRps: 100, Weights: []*schemas.EngineWeight{
			{EngineId: "a", Weight: wa}, {EngineId: "b", Weight: 1 - wa},
		}}}
	}
	tests := []struct {
		name     string
		capB     float64
		unhealth bool
		solver   float64 // the solver's weight on a
		want     float64 // published weight on a
		held     bool
	}{
		{"small move held", 100, false, 0.5 + holdShare/2, 0.5, true},
		{"move of holdShare not held", 100, false, 0.5 + 1.01*holdShare, 0.5 + 1.01*holdShare, false},
		// Held, b would carry 50 rps against the band's 0.9 × 50 × 1.05 =
		// 47.25; the solver's 45. The held weights move 55% of the way,
		// to b's band edge, and no further.
		{"moved only to the band's edge of a full engine", 50, false, 0.5 + holdShare/2, 0.5 + 0.55*holdShare/2, true},
		// 50 rps on b against 0.9 × 54 = 48.6: within the 5% band.
		{"held slightly above max utilization", 54, false, 0.5 + holdShare/2, 0.5, true},
		// At MaxUtilization 0.99 the band would be 1.04 × capacity: it stops
		// at capacity (b at 48 rps: held 50 is over, the solver's 45 under).
		{"band never past capacity", -48, false, 0.5 + holdShare/2, 0.5 + (2.0/5)*holdShare/2, true},
		{"not held on an unhealthy engine", 100, true, 0.5 + holdShare/2, 0.5 + holdShare/2, false},
		// The solver's weights load b no less than the held ones: no
		// share of the way fits, so they stand.
		{"not held where the solver does not relieve", 50, false, 0.5 - holdShare/2, 0.5 - holdShare/2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cws(tt.solver)
			inst := in(math.Abs(tt.capB), !tt.unhealth)
			if tt.capB < 0 { // a MaxUtilization near 1
				inst.MaxUtilization = 0.99
			}
			held := hold(inst, holdShare, c)
			if got := c[0].GetWeights()[0].GetWeight(); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("weight on a %v, want %v", got, tt.want)
			}
			if got := c[0].GetWeights()[1].GetWeight(); math.Abs(got-(1-tt.want)) > 1e-12 {
				t.Fatalf("weight on b %v, want %v", got, 1-tt.want)
			}
			if held["r"] != tt.held {
				t.Fatalf("held %v, want %v", held, tt.held)
			}
		})
	}
}

// TestHoldShedding: a cluster whose solver sheds a sliver it can carry
// within the band keeps its previous weights and sheds nothing; one whose
// held weights would overload an engine sheds only the share of the
// solver's shed fraction that brings the engine to its band edge.
func TestHoldShedding(t *testing.T) {
	for _, tt := range []struct {
		name             string
		capB             float64
		solverA, shed    float64
		wantShed, wantLB float64 // b's routed load after hold
	}{
		{"a sliver within the band is not shed", 54, 0.5, 0.02, 0, 50},
		// b's band edge is 0.9 × 50 × 1.05 = 47.25 rps; held it carries 50,
		// the solver's plan 0.98 × 0.45 × 100 = 44.1.
		{"shed only what the band cannot carry", 50, 0.55, 0.02, 0.02 * 2.75 / 5.9, 47.25},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := &opt.Instance{
				MaxUtilization: 0.9,
				Engines:        []opt.Engine{{ID: "a", CapacityRPS: 100, Healthy: true}, {ID: "b", CapacityRPS: tt.capB, Healthy: true}},
				Previous:       map[string]map[string]float64{"r": {"a": 0.5, "b": 0.5}},
			}
			// The solver's weights and shed add up to 1 (solverA is a's
			// share of what is served).
			cw := &schemas.ClusterWeights{Cluster: "r", DemandRps: 100, ShedFraction: tt.shed, Weights: []*schemas.EngineWeight{
				{EngineId: "a", Weight: tt.solverA * (1 - tt.shed)}, {EngineId: "b", Weight: (1 - tt.solverA) * (1 - tt.shed)},
			}}
			if held := hold(in, holdShare, []*schemas.ClusterWeights{cw}); !held["r"] {
				t.Fatalf("not held")
			}
			if math.Abs(cw.GetShedFraction()-tt.wantShed) > 1e-12 {
				t.Fatalf("shed %v, want %v", cw.GetShedFraction(), tt.wantShed)
			}
			wa, wb := cw.GetWeights()[0].GetWeight(), cw.GetWeights()[1].GetWeight()
			if math.Abs(wa+wb+cw.GetShedFraction()-1) > 1e-12 {
				t.Fatalf("weights %v + shed %v = %v, want 1 (gateways reject anything else)", wa+wb, cw.GetShedFraction(), wa+wb+cw.GetShedFraction())
			}
			if lb := 100 * wb; math.Abs(lb-tt.wantLB) > 1e-9 {
				t.Fatalf("b carries %v rps, want %v", lb, tt.wantLB)
			}
		})
	}
}

func TestCapacityMemoryExpires(t *testing.T) {
	t0 := time.Unix(1000, 0)
	est := func(at time.Time, capacity, observed float64) *schemas.EngineEstimate {
		e := engineEst("a", "r", capacity, at).GetEngine()
		e.ObservedRps = observed
		return e
	}
	for _, tt := range []struct {
		gap    time.Duration
		wantLo float64
	}{
		{time.Minute, 50}, // still the measured 50 rps
		{capacityMemoryMs*time.Millisecond + time.Second, unmeasuredHeadroom * 200}, // forgotten: the new bound
	} {
		var s capacityState
		s.observe(est(t0, 50, 50)) // a queue: capacity measured at 50 rps
		e := est(t0.Add(tt.gap), 200, 10)
		s.observe(e)
		if lo, _ := s.capacity(e, 0); math.Abs(lo-tt.wantLo) > 1e-9 {
			t.Errorf("after %v: planned capacity %v, want %v", tt.gap, lo, tt.wantLo)
		}
	}
}

// TestApplyRemembersLikePlan: a planner that only folds in windows
// already published (the optimizer service after a restart) plans the
// next window byte for byte as one that planned them.
func TestApplyRemembersLikePlan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	window := func(w int) (time.Time, []*schemas.Estimate) {
		end := t0.Add(time.Duration(w) * 2 * time.Second)
		n := uint32(200)
		if w == 3 {
			n = 0 // the slow engine idle in the planned window
		}
		fast, slow := flatEngine("fast", "a", "h100", 14, 100, 200, end), flatEngine("slow", "a", "h100", 84, 100, n, end)
		// Work figures that move the class's reference (capacity.go).
		fast.GetEngine().WorkPerRequestS = 0.05 * float64(1+w)
		if n > 0 {
			slow.GetEngine().WorkPerRequestS = 0.08
		}
		return end, []*schemas.Estimate{fast, slow, demandEst("a", 50, end)}
	}
	set := Settings{Clusters: []string{"a"}, MinDemandRPS: 1}
	planned, applied := NewPlanner(set), NewPlanner(set)
	var snap *schemas.WeightSnapshot
	for w := range 3 {
		end, ests := window(w)
		s, err := planned.Plan(end, ests)
		if err != nil {
			t.Fatal(err)
		}
		snap = s
		applied.Apply(ests...)
	}
	applied.Remember(snap)
	end, ests := window(3)
	a, err := planned.Plan(end, ests)
	if err != nil {
		t.Fatal(err)
	}
	b, err := applied.Plan(end, ests)
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	bb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if string(ab) != string(bb) {
		t.Fatalf("restarted planner differs:\n%v\n%v", a, b)
	}
}
