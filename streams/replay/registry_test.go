package replay

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/replay/replaytest"
)

// TestReplayWithRegistryNeverPlansUnregisteredEngine replays a history
// whose signals and routing events name e1 and e2 with a registry that
// holds only e1: no snapshot names e2, no estimate of e2 (engine or
// network: those only the guard drops) reaches the planner, and e2's
// signals are dead-lettered, as the live processor does. Without the registry the
// same replay plans e2 (the history makes it worth planning).
func TestReplayWithRegistryNeverPlansUnregisteredEngine(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "reg"
	replaytest.History(t, kc, streams.TopicsFor(prefix), t0, 60*time.Second)
	reg, err := fleet.New(fleet.Engine{ID: "e1", URL: "http://e1", Region: "us", GPUClass: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	base := Config{TopicPrefix: prefix, From: t0.Add(20 * time.Second), To: t0.Add(50 * time.Second),
		Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}
	base.Settings.Clusters = []string{"us", "eu"}
	base.Settings.EstimateTTL = time.Hour // the history is an hour old

	// replay runs cfg with a planner that records the engines of the
	// estimates it is given, and returns them, the engines the
	// snapshots name and the result.
	replay := func(t *testing.T, cfg Config) (given, planned map[string]bool, res Result) {
		t.Helper()
		given, planned = map[string]bool{}, map[string]bool{}
		live := OptimizerPlanner(cfg.Settings)
		var mu sync.Mutex
		cfg.Planner = PlannerFunc(func(end time.Time, ests []*schemas.Estimate) (*schemas.WeightSnapshot, error) {
			mu.Lock()
			for _, e := range ests {
				if id := e.GetEngine().GetEngineId() + e.GetNetwork().GetEngineId(); id != "" {
					given[id] = true
				}
			}
			mu.Unlock()
			return live.Plan(end, ests)
		})
		var out bytes.Buffer
		res, err := Run(context.Background(), testenv.Client(t, kc), cfg, &out, Binary)
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := ReadSnapshots(&out, Binary)
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) == 0 || len(snaps) != res.Snapshots {
			t.Fatalf("%d snapshots read, result %+v", len(snaps), res)
		}
		for _, s := range snaps {
			for _, c := range s.GetClusters() {
				for _, w := range c.GetWeights() {
					if w.GetWeight() > 0 {
						planned[w.GetEngineId()] = true
					}
				}
			}
		}
		return given, planned, res
	}

	t.Run("without_registry", func(t *testing.T) {
		given, planned, res := replay(t, base)
		if !given["e2"] || !planned["e2"] || !planned["e1"] {
			t.Fatalf("without a registry: planner given %v, snapshots name %v; want e1 and e2 planned", given, planned)
		}
		if res.DeadLettered != 0 || res.Unregistered != 0 {
			t.Errorf("without a registry: result %+v", res)
		}
	})
	t.Run("with_registry", func(t *testing.T) {
		cfg := base
		cfg.Registry = reg
		given, planned, res := replay(t, cfg)
		if given["e2"] || planned["e2"] {
			t.Errorf("with a registry of e1 only: planner given %v, snapshots name %v", given, planned)
		}
		if !planned["e1"] {
			t.Errorf("with a registry: e1 not planned (%v)", planned)
		}
		if res.DeadLettered == 0 {
			t.Errorf("e2's signals not dead-lettered: %+v", res)
		}
	})
	t.Run("bad_max_gain", func(t *testing.T) {
		cfg := base
		cfg.Registry, cfg.MaxGain = reg, 0.5
		if _, err := Run(context.Background(), testenv.Client(t, kc), cfg, &bytes.Buffer{}, Binary); err == nil {
			t.Error("max gain 0.5 accepted")
		}
	})
}
