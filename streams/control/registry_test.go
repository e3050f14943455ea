package control

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/window"
)

const attackerURL = "http://203.0.113.9:8000"

// attackRun is what one run of the pipeline (processor core, optimizer
// screen, planner) made of the same records.
type attackRun struct {
	snaps []*schemas.WeightSnapshot
	// deadLettered counts the processor's dead-letters by reason code;
	// firstDead is the event time of the first one.
	deadLettered map[string]int
	firstDead    time.Time
	log          string
	quarantined  float64
	unregistered float64
	// firstQuarantine is the end of the first window whose plan had a
	// quarantined estimate (zero: none).
	firstQuarantine time.Time
}

func sig(id, url string, at time.Time, maxBatch, ready uint32, finished, ttftS float64) *schemas.EngineSignal {
	return &schemas.EngineSignal{
		SchemaVersion: schemas.Version, EngineId: id, EndpointUrl: url, Region: "us", GpuClass: "h100",
		EventTimeUnixMs: at.UnixMilli(), ReadyReplicas: ready, Health: schemas.Health_HEALTH_HEALTHY,
		RunningRequests: 8, KvCacheUsage: 0.2, IntervalSeconds: 2, RequestsFinished: finished,
		PromptTokens: finished * 500, GenerationTokens: finished * 100, MaxBatch: maxBatch, MaxBatchSource: "configured",
		TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{uint64(finished), 0, 0}, Sum: finished * ttftS, Count: uint64(finished)},
		TbotSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{uint64(finished), 0, 0}, Sum: finished * 0.02, Count: uint64(finished)},
	}
}

// runAttack feeds two minutes of a two-engine cluster's records (agent
// signals every 2 s, 10 requests a second routed by gateways, the same
// in every window) through a processor core with reg and an optimizer
// screen with reg (gain 0: the default), planning every window. With
// attack, from 60 s on an agent's credentials also publish, every
// second, signals for a new engine e9 at the attacker's endpoint
// claiming 1000 free slots and 1 ms TTFT, and signals for e1 at its real
// endpoint claiming 50 replicas of 100000 slots and 1 ms TTFT.
func runAttack(t *testing.T, reg *fleet.Registry, gain float64, attack bool) attackRun {
	t.Helper()
	return runPipeline(t, reg, reg, gain, attack)
}

// runPipeline is runAttack with procReg at the processor and reg at the
// optimizer.
func runPipeline(t *testing.T, procReg, reg *fleet.Registry, gain float64, attack bool) attackRun {
	t.Helper()
	topics := streams.TopicsFor("attack")
	core, err := process.NewCore(topics, window.Spec{Size: 30 * time.Second, Slide: 10 * time.Second, AllowedLateness: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	core.SetRegistry(procReg)
	var logs bytes.Buffer
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &Optimizer{log: slog.New(slog.NewTextHandler(&logs, nil)), m: m}
	if gain != 0 || reg != nil {
		if gain < 0 {
			gain = math.Inf(1)
		}
		if o.guard, err = fleet.NewGuard(reg, gain); err != nil {
			t.Fatal(err)
		}
	}
	planner := plan.NewPlanner(plan.Settings{Clusters: []string{"us"}, ProbeShare: -1})
	run := attackRun{deadLettered: map[string]int{}}
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var off int64
	rec := func(topic string, m proto.Message, key string) *kgo.Record {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		off++
		return &kgo.Record{Topic: topic, Key: []byte(key), Value: b, Offset: off}
	}
	req := 0
	for ms := int64(0); ms <= 140_000; ms += 100 {
		at := from.Add(time.Duration(ms) * time.Millisecond)
		var recs []*kgo.Record
		if ms%2000 == 0 {
			recs = append(recs,
				rec(topics.Signals, sig("e1", "http://e1:8000", at, 64, 1, 20, 0.08), "e1"),
				rec(topics.Signals, sig("e2", "http://e2:8000", at, 64, 1, 20, 0.08), "e2"))
		}
		if attack && ms >= 60_000 && ms%1000 == 0 {
			recs = append(recs,
				rec(topics.Signals, sig("e9", attackerURL, at.Add(time.Millisecond), 1000, 1, 5000, 0.001), "e9"),
				rec(topics.Signals, sig("e1", "http://e1:8000", at.Add(time.Millisecond), 100000, 50, 5000, 0.001), "e1"))
		}
		for _, e := range []string{"e1", "e2"} {
			req++
			recs = append(recs, rec(topics.RoutingEvents, &schemas.RoutingEvent{SchemaVersion: schemas.Version,
				RequestId: fmt.Sprint("r", req), Cluster: "us", EngineId: e, Status: schemas.RequestStatus_REQUEST_STATUS_OK,
				EventTimeUnixMs: at.UnixMilli(), CompletionTimeUnixMs: at.UnixMilli() + 90, Stream: true, TtftMs: 85, EngineTtftMs: 80,
				NetworkRttMs: 5, PromptTokens: 500, OutputTokens: 100, Model: "m"}, fmt.Sprint("r", req)))
		}
		for _, r := range recs {
			out, reason := core.Handle(r)
			if out == process.DeadLettered {
				code, _, _ := strings.Cut(reason, ":")
				if run.deadLettered[code] == 0 {
					run.firstDead = at
				}
				run.deadLettered[code]++
			}
		}
		for _, f := range core.Fire() {
			q := counterValue(o.m.quarantined)
			ests := o.screen(f.Estimates)
			if counterValue(o.m.quarantined) > q && run.firstQuarantine.IsZero() {
				run.firstQuarantine = time.UnixMilli(f.End)
			}
			snap, err := planner.Plan(time.UnixMilli(f.End), ests)
			if err != nil {
				continue // nothing to plan yet
			}
			run.snaps = append(run.snaps, snap)
		}
	}
	run.log = logs.String()
	run.quarantined = counterValue(o.m.quarantined)
	for _, r := range []string{"unregistered_engine", "endpoint_mismatch"} {
		run.unregistered += counterValue(o.m.rejected.WithLabelValues(r))
	}
	return run
}

// weights maps engine id to endpoint and weight in cluster "us".
func weights(s *schemas.WeightSnapshot) map[string]*schemas.EngineWeight {
	out := map[string]*schemas.EngineWeight{}
	for _, cw := range s.GetClusters() {
		if cw.GetCluster() == "us" {
			for _, w := range cw.GetWeights() {
				out[w.GetEngineId()] = w
			}
		}
	}
	return out
}

// TestEngineAttacksMoveNoTraffic is the goal of issue 22's item 1: with
// an agent's Kafka credentials an attacker publishes signals for a new
// engine at its own endpoint and signals that make a registered engine
// look huge and instant. With the engine registry the processor
// dead-letters the fake engine's signals from the first one (its WARN
// line is TestAlarm's), the optimizer plans no engine outside the
// registry, and the inflated claims are quarantined within the first
// window that holds them, so every plan gives the attacker's endpoint
// weight 0 and the registered engines exactly the weights of a run
// without the attack (0 traffic moved). Without registry and guard the
// same records route most of the cluster to the attacker and e1, which
// is what the test would miss if the defences were gone.
func TestEngineAttacksMoveNoTraffic(t *testing.T) {
	reg, err := fleet.New(fleet.Engine{ID: "e1", URL: "http://e1:8000", Region: "us", GPUClass: "h100"},
		fleet.Engine{ID: "e2", URL: "http://e2:8000", Region: "us", GPUClass: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	attackStart := time.Date(2026, 12, 1, 12, 1, 0, 0, time.UTC)
	base := runAttack(t, reg, 0, false)
	hit := runAttack(t, reg, 0, true)
	if base.quarantined != 0 {
		t.Fatalf("steady traffic without an attack had %v estimates quarantined:\n%s", base.quarantined, base.log)
	}
	if len(base.snaps) < 8 || len(hit.snaps) != len(base.snaps) {
		t.Fatalf("%d plans without the attack, %d with", len(base.snaps), len(hit.snaps))
	}
	attacked := 0
	for i, s := range hit.snaps {
		ws, bs := weights(s), weights(base.snaps[i])
		for id, w := range ws {
			if w.GetEndpointUrl() == attackerURL || id == "e9" {
				t.Fatalf("plan %d routes %v to the attacker", s.GetVersion(), w.GetWeight())
			}
			if d := math.Abs(w.GetWeight() - bs[id].GetWeight()); d > 1e-9 {
				t.Errorf("plan %d: %s weight %.4f, %.4f without the attack: an unconfirmed claim moved %.4f",
					s.GetVersion(), id, w.GetWeight(), bs[id].GetWeight(), d)
			}
		}
		if s.GetVersion() > uint64(attackStart.UnixMilli()) {
			attacked++
		}
	}
	if attacked < 5 {
		t.Fatalf("only %d plans under attack", attacked)
	}
	if n := hit.deadLettered["unregistered_engine"]; n != 81 || !hit.firstDead.Equal(attackStart) {
		t.Errorf("processor dead-lettered %d fake-engine signals, the first at %v; want 81 from %v", n, hit.firstDead, attackStart)
	}
	window := 30 * time.Second
	if hit.firstQuarantine.IsZero() || hit.firstQuarantine.Sub(attackStart) > window {
		t.Errorf("first quarantine at %v, attack from %v: not within a window", hit.firstQuarantine, attackStart)
	}
	if !strings.Contains(hit.log, "level=WARN msg=\"engine's estimate quarantined") || !strings.Contains(hit.log, "engine=e1") {
		t.Errorf("no quarantine WARN for e1:\n%s", hit.log)
	}
	t.Logf("%d plans under attack, %d fake-engine signals dead-lettered, %v estimates quarantined, first quarantine %v after the attack began",
		attacked, hit.deadLettered["unregistered_engine"], hit.quarantined, hit.firstQuarantine.Sub(attackStart))

	// Defence in depth: a processor without the registry passes the
	// fake engine on; the optimizer's registry still plans none of it.
	open := runAttackOpenProcessor(t, reg)
	if open.unregistered == 0 {
		t.Errorf("optimizer saw no unregistered estimate from an open processor")
	}
	for _, s := range open.snaps {
		if _, ok := weights(s)["e9"]; ok {
			t.Fatalf("plan %d names e9", s.GetVersion())
		}
	}

	// The test's teeth: the same records without registry and guard.
	bare := runAttack(t, nil, -1, true)
	moved := 0.0
	for i, s := range bare.snaps {
		ws, bs := weights(s), weights(base.snaps[i])
		moved = math.Max(moved, ws["e9"].GetWeight()+math.Abs(ws["e1"].GetWeight()-bs["e1"].GetWeight()))
	}
	if moved < 0.3 {
		t.Errorf("without registry and guard the attack moved only %.3f: the scenario is no attack", moved)
	}
	t.Logf("without registry and guard the attack moved %.3f of the cluster", moved)
}

// runAttackOpenProcessor is runAttack with the registry at the optimizer
// only.
func runAttackOpenProcessor(t *testing.T, reg *fleet.Registry) attackRun {
	t.Helper()
	return runPipeline(t, nil, reg, 0, true)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
