package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestPlanShedSkippedWhileAnEngineHasAFreeSlot: a plan that sheds half
// the cluster's requests, on an engine of 4 slots. While the engine's
// signals show nobody waiting in its queue and the gateway has fewer
// than 4 requests there, every request is served (a refused one would
// leave a slot idle); once its signals show a queue, the plan's shed
// applies again.
func TestPlanShedSkippedWhileAnEngineHasAFreeSlot(t *testing.T) {
	e := newFakeEngine(t, "a")
	snap := snapshot(1, "us-east", 0.5, map[*fakeEngine]float64{e: 0.5})
	snap.Clusters[0].Weights[0].Explanation = &schemas.Explanation{MaxConcurrency: 4}
	g, base := startGateway(t, InitialSnapshot(snap))
	signal := func(running, waiting float64) { queueSignal(t, g, e, running, waiting) }
	send := func(n int) int {
		return countShed(t, n, func(int) (int, string) {
			status, _, out := post(t, context.Background(), base, chatBody(false, "x"), nil)
			return status, out
		})
	}
	// Queueing: the plan's shed applies (poll: the shedder takes in the
	// plan's fraction at its next update).
	shedding := func(what string) {
		signal(4, 3)
		deadline := time.Now().Add(10 * time.Second)
		for send(1) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: engine queueing, and no request shed in 10 s", what)
			}
		}
		if shed := send(40); shed < 8 {
			t.Errorf("%s: engine queueing: %d of 40 shed, want about half (at least 8)", what, shed)
		}
	}
	shedding("before")
	signal(0, 0)
	if shed := send(40); shed != 0 {
		t.Errorf("engine idle with free slots: %d of 40 shed, want 0", shed)
	}
	shedding("after")
}

// TestModelPlanShedSkippedWhileItsEngineHasAFreeSlot: the same for a
// model's own plan (model_weights): half of model a's requests are shed
// by its plan only while its engine's signals show a queue.
func TestModelPlanShedSkippedWhileItsEngineHasAFreeSlot(t *testing.T) {
	e := newFakeEngine(t, "a")
	snap := snapshot(1, "us-east", 0, map[*fakeEngine]float64{e: 1})
	snap.Clusters[0].Weights[0].Explanation = &schemas.Explanation{MaxConcurrency: 4}
	snap.Clusters[0].ModelWeights = []*schemas.ModelWeights{{Model: "m", ShedFraction: 0.5,
		Weights: []*schemas.EngineWeight{{EngineId: "a", EndpointUrl: e.url(), Weight: 0.5, Explanation: &schemas.Explanation{MaxConcurrency: 4}}}}}
	g, base := startGateway(t, InitialSnapshot(snap))
	signal := func(running, waiting float64) { queueSignal(t, g, e, running, waiting) }
	send := func(n int) int {
		return countShed(t, n, func(i int) (int, string) {
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"x %d"}]}`, i)
			status, _, out := post(t, context.Background(), base, body, nil)
			return status, out
		})
	}
	signal(4, 3)
	if shed := send(40); shed < 8 {
		t.Errorf("engine queueing: %d of 40 shed, want about half (at least 8)", shed)
	}
	signal(0, 0)
	if shed := send(40); shed != 0 {
		t.Errorf("engine idle with free slots: %d of 40 shed, want 0", shed)
	}
}

// queueSignal applies a healthy signal of engine e (batch limit 4) with
// running and waiting requests.
func queueSignal(t *testing.T, g *Gateway, e *fakeEngine, running, waiting float64) {
	t.Helper()
	g.applySignal(marshal(t, &schemas.EngineSignal{SchemaVersion: 1, EngineId: e.id, EndpointUrl: e.url(),
		EventTimeUnixMs: time.Now().UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1,
		MaxBatch: 4, RunningRequests: running, WaitingRequests: waiting}))
}

// countShed sends n requests with do and returns how many were answered
// 429; any status but 200 and 429 fails the test.
func countShed(t *testing.T, n int, do func(i int) (status int, body string)) (shed int) {
	t.Helper()
	for i := range n {
		switch status, out := do(i); status {
		case 200:
		case 429:
			shed++
		default:
			t.Fatalf("status %d: %s", status, out)
		}
	}
	return shed
}
