package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// whySnapshot is a snapshot of cluster us over e1 and e2 at version v.
func whySnapshot(v uint64, demand, rttE2 float64, bindE1 ...string) *schemas.WeightSnapshot {
	return &schemas.WeightSnapshot{Version: v, Clusters: []*schemas.ClusterWeights{{Cluster: "us", DemandRps: demand, Weights: []*schemas.EngineWeight{
		{EngineId: "e1", Weight: 0.5, PlannedUtilization: 0.5, Explanation: &schemas.Explanation{NetworkMs: 2, Binding: bindE1}},
		{EngineId: "e2", Weight: 0.5, PlannedUtilization: 0.5, Explanation: &schemas.Explanation{NetworkMs: rttE2}},
	}}}}
}

func whyEstimate(id string, end int64, capacity float64, h schemas.Health, ttftAtHalf float64) *schemas.EngineEstimate {
	return &schemas.EngineEstimate{EngineId: id, WindowEndUnixMs: end, CapacityRps: capacity, Health: h, ReadyReplicas: 1, MaxBatch: 8, CapacitySource: "configured",
		TtftProfile: &schemas.LatencyProfile{Points: []*schemas.ProfilePoint{{Utilization: 0, LatencyMs: ttftAtHalf / 2}, {Utilization: 1, LatencyMs: 1.5 * ttftAtHalf}}}}
}

// TestDiffNamesTheInputsBehindAWeightMove: between two snapshots, e1's
// estimate lost half its capacity and turned degraded, its TTFT rose, the
// cluster's demand rose 40%, the RTT to e2 quadrupled and capacity
// started to bind on e1; each is a row, categorical changes first, and
// e2's unchanged estimate gives none.
func TestDiffNamesTheInputsBehindAWeightMove(t *testing.T) {
	l := newLive(0)
	for _, est := range []*schemas.EngineEstimate{
		whyEstimate("e1", 1000, 10, schemas.Health_HEALTH_HEALTHY, 100),
		whyEstimate("e1", 2000, 5, schemas.Health_HEALTH_DEGRADED, 150),
		whyEstimate("e2", 1000, 8, schemas.Health_HEALTH_HEALTHY, 120),
		whyEstimate("e2", 2000, 8.1, schemas.Health_HEALTH_HEALTHY, 121), // under 5%: unchanged
	} {
		l.addEstimate(&schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: est}}, time.Now())
	}
	got := inputChanges(whySnapshot(1000, 10, 20), whySnapshot(2000, 14, 80, "capacity"), l.estimateAt)
	var rows []string
	for _, c := range got {
		rows = append(rows, fmt.Sprintf("%s %s%s %s: %s → %s (%s)", c.Kind, c.Cluster, c.Engine, c.Input, c.From, c.To, c.Change))
	}
	want := []string{
		"engine e1 health: healthy → degraded (changed)",
		"route use1 binding: - → capacity (changed)",
		"route use2 network RTT: 20.0 ms → 80.0 ms (+300.0%)", // ranked by the change over the larger value: 0.75
		"engine e1 capacity: 10.00 rps → 5.00 rps (-50.0%)",
		"engine e1 TTFT at 50% load: 100.0 ms → 150.0 ms (+50.0%)",
		"cluster us demand: 10.00 rps → 14.00 rps (+40.0%)",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Fatalf("input changes:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

// TestEstimateHistoryAnswersTheWindowASnapshotWasPlannedFrom: estimates
// arrive out of order and are re-estimated; at(v) is the latest window
// ending at or before v, and the history stays bounded.
func TestEstimateHistoryAnswersTheWindowASnapshotWasPlannedFrom(t *testing.T) {
	var e engineLive
	for _, end := range []int64{3000, 1000, 2000, 2000} {
		e.keep(&schemas.EngineEstimate{WindowEndUnixMs: end, CapacityRps: float64(end)})
	}
	for v, want := range map[int64]int64{999: 0, 1000: 1000, 1999: 1000, 2500: 2000, 9999: 3000} {
		if got := e.at(v).GetWindowEndUnixMs(); got != want {
			t.Errorf("at(%d): window %d, want %d", v, got, want)
		}
	}
	if len(e.hist) != 3 {
		t.Fatalf("%d estimates kept, want 3 (a re-estimated window replaces the earlier one)", len(e.hist))
	}
	for i := range 2 * maxEstHist {
		e.keep(&schemas.EngineEstimate{WindowEndUnixMs: int64(10_000 + i)})
	}
	if len(e.hist) != maxEstHist || e.hist[0].GetWindowEndUnixMs() != 10_000+maxEstHist {
		t.Fatalf("history of %d from %d, want the latest %d", len(e.hist), e.hist[0].GetWindowEndUnixMs(), maxEstHist)
	}
}

// TestTimelineShowsOutagesHealthShedAndDeadLetters: a 40 s gap in
// snapshots published every 2 s, an engine turning unhealthy and its
// capacity halving, a cluster starting and stopping to shed, and dead
// letters are events, newest first; a 2 s interval is not a gap.
func TestTimelineShowsOutagesHealthShedAndDeadLetters(t *testing.T) {
	var es []snapEntry
	for _, v := range []uint64{2000, 4000, 6000, 8000, 48000, 50000, 52000} {
		shed := 0.0
		if v == 8000 {
			shed = 0.2
		}
		es = append(es, snapEntry{Snap: &schemas.WeightSnapshot{Version: v, Clusters: []*schemas.ClusterWeights{{Cluster: "us", ShedFraction: shed, DemandRps: 10}}}})
	}
	hist := map[string][]*schemas.EngineEstimate{"e1": {
		{WindowEndUnixMs: 2000, CapacityRps: 10, Health: schemas.Health_HEALTH_HEALTHY},
		{WindowEndUnixMs: 4000, CapacityRps: 10, Health: schemas.Health_HEALTH_HEALTHY},
		{WindowEndUnixMs: 6000, CapacityRps: 5, Health: schemas.Health_HEALTH_UNHEALTHY},
	}}
	dls := []deadLetter{{ms: 31_000, reason: "undecodable", origin: "switchyard.engine.signals"}, {ms: 32_000, reason: "undecodable", origin: "switchyard.engine.signals"}}
	var got []string
	for _, e := range timeline(es, hist, dls, 0, 0) {
		got = append(got, fmt.Sprintf("%d %s %s%s: %s", e.Ms, e.Status, e.Engine, e.Cluster, e.Text))
	}
	want := []string{
		"48000 bad : no snapshot for 40.0s (v8000 at " + unixMs(8000) + " to v48000): the optimizer, its inputs or NATS were down",
		"48000 ok us: v48000 sheds nothing",
		"40000 warn : 2 record(s) of switchyard.engine.signals dead-lettered: undecodable",
		"8000 bad us: v8000 sheds 20.0% of 10.00 rps: demand above capacity",
		"6000 bad e1: health healthy → unhealthy",
		"6000 warn e1: capacity 10.00 → 5.00 rps (-, 0 ready replicas)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(timeline(es, hist, dls, 8000, 40_000)); n != 1 {
		t.Fatalf("timeline of (8000, 40000]: %d events, want the dead letters only", n)
	}
}

// TestGatewaysKeepTheLatestVersionBounded: a gateway's row is its latest
// event's (an older one arriving late changes nothing), and beyond
// maxGateways the gateway heard from longest ago is forgotten.
func TestGatewaysKeepTheLatestVersionBounded(t *testing.T) {
	var c clusterLive
	c.seen("gw", 7, 2000)
	c.seen("gw", 5, 1000) // late, older
	if s := c.gateways["gw"]; s.Version != 7 || s.Ms != 2000 {
		t.Fatalf("gw: %+v, want v7 at 2000", s)
	}
	for i := range maxGateways {
		c.seen(fmt.Sprint("g", i), 1, int64(3000+i))
	}
	if _, ok := c.gateways["gw"]; ok || len(c.gateways) != maxGateways {
		t.Fatalf("%d gateways, gw kept %v: want %d, the oldest forgotten", len(c.gateways), ok, maxGateways)
	}
}
