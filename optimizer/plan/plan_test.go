package plan

import (
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

func profile(pts ...[2]float64) *schemas.LatencyProfile {
	p := &schemas.LatencyProfile{}
	for _, pt := range pts {
		p.Points = append(p.Points, &schemas.ProfilePoint{Utilization: pt[0], LatencyMs: pt[1]})
	}
	return p
}

func engineEst(id, region string, capacity float64, end time.Time) *schemas.Estimate {
	return &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
		SchemaVersion: schemas.Version, EngineId: id, EndpointUrl: "http://" + id, Region: region, GpuClass: "h100",
		WindowEndUnixMs: end.UnixMilli(), CapacityRps: capacity, Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1,
		TtftProfile: profile([2]float64{0, 100}, [2]float64{0.5, 200}, [2]float64{0.9, 1000}),
		TbotProfile: profile([2]float64{0, 10}, [2]float64{1, 30}),
	}}}
}

func demandEst(cluster string, rps float64, end time.Time) *schemas.Estimate {
	return &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{
		SchemaVersion: schemas.Version, Cluster: cluster, WindowEndUnixMs: end.UnixMilli(), DemandRps: rps, MeanOutputTokens: 10,
	}}}
}

func TestStateInstance(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewState()
	s.Apply(engineEst("b-0", "region-b", 100, now))
	s.Apply(engineEst("c-0", "region-c", 80, now))
	s.Apply(engineEst("stale", "region-c", 80, now.Add(-time.Hour)))
	s.Apply(demandEst("region-b", 120, now))
	s.Apply(demandEst("region-b", 5, now.Add(-time.Minute))) // older window: ignored
	in, eps, err := s.Instance(now, Settings{
		Clusters: []string{"region-c"}, MinDemandRPS: 1,
		RegionRTTms: map[string]map[string]float64{"region-b": {"region-b": 2, "region-c": 40}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Engines) != 2 || len(eps) != 2 || eps["b-0"] != "http://b-0" {
		t.Fatalf("engines %+v endpoints %v", in.Engines, eps)
	}
	if len(in.Clusters) != 2 || in.Clusters[0].ID != "region-b" || in.Clusters[0].DemandRPS != 120 || in.Clusters[1].DemandRPS != 1 {
		t.Fatalf("clusters %+v", in.Clusters)
	}
	if in.RTTms["region-b"]["c-0"] != 40 || in.RTTms["region-c"]["c-0"] != 0 || in.RTTms["region-c"]["b-0"] != 50 {
		t.Fatalf("rtt %v", in.RTTms)
	}
	// e2e(u) = TTFT(u) + 10 tokens × TBOT(u), on the union of knots.
	got := in.Engines[0].LatencyMs
	want := [][2]float64{{0, 200}, {0.5, 400}, {0.9, 1280}, {1, 1300 + 200}}
	if len(got) != len(want) {
		t.Fatalf("profile %v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i][0]-want[i][0]) > 1e-9 || math.Abs(got[i][1]-want[i][1]) > 1e-6 {
			t.Fatalf("profile %v, want %v", got, want)
		}
	}
	if _, _, err := NewState().Instance(now, Settings{}); !errors.Is(err, ErrNothingToPlan) {
		t.Fatalf("empty state: %v", err)
	}
}

func TestPlanDeterministic(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewState()
	s.Apply(engineEst("b-0", "region-b", 100, now))
	s.Apply(engineEst("c-0", "region-c", 80, now))
	s.Apply(demandEst("region-b", 120, now))
	s.Apply(demandEst("region-c", 40, now))
	in, eps, err := s.Instance(now, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Solve(in, eps, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Solve(in, eps, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	bb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if string(ab) != string(bb) {
		t.Fatal("same instance gave different snapshots")
	}
	for _, cw := range a.GetClusters() {
		sum := cw.GetShedFraction()
		for _, w := range cw.GetWeights() {
			sum += w.GetWeight()
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Fatalf("cluster %s weights sum to %v", cw.GetCluster(), sum)
		}
	}
}

func TestPlannerVersionsAreWindowEnds(t *testing.T) {
	p := NewPlanner(Settings{})
	w1 := time.Unix(1000, 0)
	snap, err := p.Plan(w1, []*schemas.Estimate{
		engineEst("b-0", "region-b", 100, w1), engineEst("c-0", "region-c", 80, w1), demandEst("region-b", 120, w1),
	})
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetVersion() != uint64(w1.UnixMilli()) || snap.GetCreatedUnixMs() != w1.UnixMilli() {
		t.Fatalf("version %d created %d, want %d", snap.GetVersion(), snap.GetCreatedUnixMs(), w1.UnixMilli())
	}
	if _, err := p.Plan(w1, nil); !errors.Is(err, ErrOldWindow) {
		t.Fatalf("re-planning a window: %v", err)
	}
	w2 := w1.Add(2 * time.Second)
	snap2, err := p.Plan(w2, []*schemas.Estimate{demandEst("region-b", 120, w2)})
	if err != nil {
		t.Fatal(err)
	}
	if snap2.GetVersion() <= snap.GetVersion() {
		t.Fatalf("versions %d then %d", snap.GetVersion(), snap2.GetVersion())
	}
	// A second planner fed the same history gives the same bytes.
	q := NewPlanner(Settings{})
	_, _ = q.Plan(w1, []*schemas.Estimate{
		engineEst("b-0", "region-b", 100, w1), engineEst("c-0", "region-c", 80, w1), demandEst("region-b", 120, w1),
	})
	again, err := q.Plan(w2, []*schemas.Estimate{demandEst("region-b", 120, w2)})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(snap2)
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(again)
	if string(a) != string(b) {
		t.Fatal("same history, different snapshot bytes")
	}
}

// TestPlanShedsOnlyAboveCapacity: MaxUtilization is headroom spent before
// shedding. Two engines of 100 rps: 190 rps of demand (above 0.9 × 200,
// within 200) is routed whole; 250 rps sheds the 50 above capacity.
func TestPlanShedsOnlyAboveCapacity(t *testing.T) {
	for _, tc := range []struct {
		demand, shed float64
	}{
		{150, 0},   // within the headroom
		{190, 0},   // above 0.9 × capacity, within capacity
		{250, 0.2}, // 50 of 250 above capacity
	} {
		now := time.Unix(1000, 0)
		s := NewState()
		s.Apply(engineEst("b-0", "region-b", 100, now))
		s.Apply(engineEst("b-1", "region-b", 100, now))
		s.Apply(demandEst("region-b", tc.demand, now))
		in, eps, err := s.Instance(now, Settings{})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := Solve(in, eps, 3, now)
		if err != nil {
			t.Fatal(err)
		}
		cw := snap.GetClusters()[0]
		if got := cw.GetShedFraction(); math.Abs(got-tc.shed) > 1e-3 {
			t.Errorf("demand %v rps on 200 rps of capacity: shed %.4f, want %.4f", tc.demand, got, tc.shed)
		}
		for _, w := range cw.GetWeights() {
			if u := w.GetPlannedUtilization(); u > 1+1e-6 {
				t.Errorf("demand %v: %s planned at utilization %v", tc.demand, w.GetEngineId(), u)
			}
		}
	}
}

// TestPlanAbsorbsBurstsShedsSustainedExcess: a window's demand above
// capacity after a minute below it is a burst the gateways' queues
// absorb: nothing is shed; the same demand held for a minute is a
// sustained excess, and the plan sheds it.
func TestPlanAbsorbsBurstsShedsSustainedExcess(t *testing.T) {
	s := NewState()
	start := time.Unix(1000, 0)
	shedAt := func(now time.Time, rps float64) float64 {
		t.Helper()
		s.Apply(engineEst("b-0", "region-b", 100, now))
		s.Apply(engineEst("b-1", "region-b", 100, now))
		s.Apply(demandEst("region-b", rps, now))
		in, eps, err := s.Instance(now, Settings{})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := Solve(in, eps, 3, now)
		if err != nil {
			t.Fatal(err)
		}
		return snap.GetClusters()[0].GetShedFraction()
	}
	now := start
	for range 30 { // a minute at 150 rps on 200 rps of capacity
		if shed := shedAt(now, 150); shed != 0 {
			t.Fatalf("shed %.3f at 150 rps", shed)
		}
		now = now.Add(2 * time.Second)
	}
	if shed := shedAt(now, 250); shed > 1e-6 {
		t.Fatalf("a burst to 250 rps after a minute at 150: shed %.3f, want 0", shed)
	}
	var shed float64
	for range 150 { // five minutes at 250
		now = now.Add(2 * time.Second)
		shed = shedAt(now, 250)
	}
	if math.Abs(shed-0.2) > 0.01 {
		t.Fatalf("250 rps held for five minutes on 200 rps of capacity: shed %.3f, want about 0.2", shed)
	}
}
