package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestRequestsGoOnlyToEnginesServingTheirModel: four engines, two serving
// model "a" (one with its LoRA adapter "a-sql"), one "b", one without a
// model list (unknown: it may get anything). Requests for each model
// reach only the engines whose signalled list holds it, or the unknown
// one; a model no engine lists, like a request without a model, may go
// to any engine (the engines judge: SGLang and TGI serve any model
// name); a model listed only by an engine outside the cluster's snapshot
// is answered 404 model_not_found in OpenAI's form and reaches no
// engine. An engine the plan gives no weight gets its model's requests
// when it is the only engine that serves the model.
func TestRequestsGoOnlyToEnginesServingTheirModel(t *testing.T) {
	es := map[string]*fakeEngine{}
	ws := map[*fakeEngine]float64{}
	for _, id := range []string{"a1", "a2", "b1", "u1"} {
		e := newFakeEngine(t, id)
		es[id] = e
		ws[e] = 1.0 / 3
	}
	ws[es["b1"]] = 0 // the plan gives b1 nothing: it still serves "b"
	g, base := startGateway(t)
	if err := g.ApplySnapshot(marshal(t, snapshot(1, "us-east", 0, ws))); err != nil {
		t.Fatal(err)
	}
	lists := map[string][]string{"a1": {"a", "a-sql"}, "a2": {"a"}, "b1": {"b"}}
	for id, l := range lists {
		g.applySignal(marshal(t, &schemas.EngineSignal{SchemaVersion: 1, EngineId: id, EndpointUrl: es[id].url(),
			EventTimeUnixMs: time.Now().UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, Models: l}))
	}
	send := func(model string, n int) map[string]int64 {
		t.Helper()
		before := map[string]int64{}
		for id, e := range es {
			before[id] = e.requests.Load()
		}
		for i := range n {
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"q%d"}]}`, model, i)
			if model == "" {
				body = fmt.Sprintf(`{"messages":[{"role":"user","content":"q%d"}]}`, i)
			}
			if code, _, out := post(t, context.Background(), base, body, nil); code != http.StatusOK {
				t.Fatalf("model %q: status %d: %s", model, code, out)
			}
		}
		got := map[string]int64{}
		for id, e := range es {
			if d := e.requests.Load() - before[id]; d > 0 {
				got[id] = d
			}
		}
		return got
	}
	for _, c := range []struct {
		model   string
		allowed string
		each    bool // every allowed engine gets some of 200
	}{
		{"a", "a1 a2 u1", true},
		{"a-sql", "a1 u1", true},
		{"b", "b1 u1", false}, // u1 only: the plan gives b1 none
		{"z", "a1 a2 b1 u1", false},
		{"", "a1 a2 b1 u1", false},
	} {
		got := send(c.model, 200)
		for id, n := range got {
			if !strings.Contains(c.allowed, id) {
				t.Errorf("model %q: %d requests reached %s, which does not serve it (%v)", c.model, n, id, got)
			}
		}
		for _, id := range strings.Fields(c.allowed) {
			if c.each && got[id] == 0 {
				t.Errorf("model %q: %s served none of 200 (%v)", c.model, id, got)
			}
		}
	}
	g.applySignal(marshal(t, &schemas.EngineSignal{SchemaVersion: 1, EngineId: "u1", EndpointUrl: es["u1"].url(),
		EventTimeUnixMs: time.Now().UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, Models: []string{"u"}}))
	// x9, outside the cluster's snapshot, is the only engine serving "x".
	g.applySignal(marshal(t, &schemas.EngineSignal{SchemaVersion: 1, EngineId: "x9", EndpointUrl: "http://x9.example:8000",
		EventTimeUnixMs: time.Now().UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, Models: []string{"x"}}))
	var total int64
	for _, e := range es {
		total += e.requests.Load()
	}
	code, _, out := post(t, context.Background(), base, `{"model":"x","messages":[{"role":"user","content":"hi"}]}`, nil)
	if code != http.StatusNotFound || !strings.Contains(out, `"code":"model_not_found"`) || !strings.Contains(out, `"param":"model"`) {
		t.Errorf("model no engine of the cluster serves: %d %s, want 404 model_not_found", code, out)
	}
	var after int64
	for _, e := range es {
		after += e.requests.Load()
	}
	if after != total {
		t.Errorf("the 404 reached an engine (%d requests, was %d)", after, total)
	}
	if got := send("b", 20); got["b1"] != 20 {
		t.Errorf("model b after u1 listed its models: %v, want all 20 on b1", got)
	}
	// Every engine listed: GET /v1/models is the union of the lists.
	code, out = get(t, base+"/v1/models")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != http.StatusOK || list.Object != "list" {
		t.Fatalf("GET /v1/models: %d %s (%v)", code, out, err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if want := "a a-sql b u"; strings.Join(ids, " ") != want { // x9 is not the cluster's
		t.Errorf("GET /v1/models lists %q, want %q", ids, want)
	}
	if code, out := get(t, base+"/v1/models/a-sql"); code != http.StatusOK || !strings.Contains(out, `"id":"a-sql"`) {
		t.Errorf("GET /v1/models/a-sql: %d %s", code, out)
	}
	if code, _ := get(t, base+"/v1/models/z"); code != http.StatusNotFound {
		t.Errorf("GET /v1/models/z: %d, want 404", code)
	}
}

// TestAdapterRequestsGoWhereSignalsSayItIsLoaded: three engines serve the
// base model and the LoRA adapter "sql" (max_lora 2); the signals say
// "sql" has requests on e2 only. Requests for "sql" all go to e2, and
// their routing events say adapter_placement HOME; requests for the base
// model spread over the three, with no adapter placement.
func TestAdapterRequestsGoWhereSignalsSayItIsLoaded(t *testing.T) {
	es := map[string]*fakeEngine{}
	ws := map[*fakeEngine]float64{}
	for _, id := range []string{"e0", "e1", "e2"} {
		e := newFakeEngine(t, id)
		es[id] = e
		ws[e] = 1.0 / 3
	}
	sink := make(eventSink, 1024)
	g, base := startGateway(t, Events(sink))
	if err := g.ApplySnapshot(marshal(t, snapshot(1, "us-east", 0, ws))); err != nil {
		t.Fatal(err)
	}
	for id, e := range es {
		var active []string
		if id == "e2" {
			active = []string{"sql"}
		}
		g.applySignal(marshal(t, &schemas.EngineSignal{SchemaVersion: 1, EngineId: id, EndpointUrl: e.url(), Model: "base",
			EventTimeUnixMs: time.Now().UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1,
			Models: []string{"base", "sql"}, ActiveAdapters: active, MaxLora: 2}))
	}
	count := func(model string) map[string]int64 {
		before := map[string]int64{}
		for id, e := range es {
			before[id] = e.requests.Load()
		}
		for i := range 60 {
			// Distinct conversations per model: a conversation's engine
			// is kept whatever its model.
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"%s %d"}]}`, model, model, i)
			if code, _, out := post(t, context.Background(), base, body, nil); code != http.StatusOK {
				t.Fatalf("%s: %d %s", model, code, out)
			}
		}
		got := map[string]int64{}
		for id, e := range es {
			got[id] = e.requests.Load() - before[id]
		}
		return got
	}
	if got := count("sql"); got["e2"] != 60 {
		t.Errorf("adapter sql went to %v, want all 60 on e2 where it is loaded", got)
	}
	if got := count("base"); got["e0"] == 0 || got["e1"] == 0 || got["e2"] == 0 {
		t.Errorf("base model went to %v, want all three engines", got)
	}
	// The routing events say where each adapter request was placed.
	placements := map[string]map[schemas.AdapterPlacement]int{"sql": {}, "base": {}}
	for len(sink) > 0 {
		ev := <-sink
		if ev.GetEngineId() != "" && placements[ev.GetModel()] != nil {
			placements[ev.GetModel()][ev.GetAdapterPlacement()]++
		}
	}
	if p := placements["sql"]; p[schemas.AdapterPlacement_ADAPTER_PLACEMENT_HOME] != 60 || len(p) != 1 {
		t.Errorf("sql's events: placements %v, want 60 home", p)
	}
	if p := placements["base"]; p[schemas.AdapterPlacement_ADAPTER_PLACEMENT_UNSPECIFIED] != 60 || len(p) != 1 {
		t.Errorf("base model's events: placements %v, want 60 unspecified (no adapter)", p)
	}
}

// TestModelPlansRouteTheirModel: a snapshot whose entry plans model "a"
// apart (model_weights: all of it on e1) sends every request for "a" to
// e1 while other requests follow the cluster's weights over the three
// engines; a model plan that sheds everything answers 429; a snapshot
// whose model plan names an engine outside the entry is rejected and the
// last good one kept.
func TestModelPlansRouteTheirModel(t *testing.T) {
	es := []*fakeEngine{newFakeEngine(t, "e0"), newFakeEngine(t, "e1"), newFakeEngine(t, "e2")}
	ws := map[*fakeEngine]float64{es[0]: 1.0 / 3, es[1]: 1.0 / 3, es[2]: 1.0 / 3}
	g, base := startGateway(t)
	snap := snapshot(1, "us-east", 0, ws)
	cw := snap.Clusters[0]
	weight := func(e *fakeEngine, w float64) *schemas.EngineWeight {
		return &schemas.EngineWeight{EngineId: e.id, EndpointUrl: e.url(), Weight: w}
	}
	cw.ModelWeights = []*schemas.ModelWeights{
		{Model: "a", Weights: []*schemas.EngineWeight{weight(es[1], 1)}},
		{Model: "z", Weights: []*schemas.EngineWeight{weight(es[2], 0)}, ShedFraction: 1},
	}
	if err := g.ApplySnapshot(marshal(t, snap)); err != nil {
		t.Fatal(err)
	}
	count := func(model string, n int) ([3]int64, int) {
		var before [3]int64
		for i, e := range es {
			before[i] = e.requests.Load()
		}
		shed := 0
		for i := range n {
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"%s %d"}]}`, model, model, i)
			code, _, out := post(t, context.Background(), base, body, nil)
			switch code {
			case http.StatusOK:
			case http.StatusTooManyRequests:
				shed++
			default:
				t.Fatalf("%s: %d %s", model, code, out)
			}
		}
		var got [3]int64
		for i, e := range es {
			got[i] = e.requests.Load() - before[i]
		}
		return got, shed
	}
	if got, _ := count("a", 40); got[1] != 40 {
		t.Errorf("model a (planned on e1) went to %v, want all 40 on e1", got)
	}
	if got, _ := count("b", 60); got[0] == 0 || got[1] == 0 || got[2] == 0 {
		t.Errorf("model b (no plan of its own) went to %v, want all three engines", got)
	}
	if got, shed := count("z", 10); shed != 10 || got != [3]int64{} {
		t.Errorf("model z (its plan sheds all): %d of 10 shed, %v served", shed, got)
	}
	bad := snapshot(2, "us-east", 0, ws)
	bad.Clusters[0].ModelWeights = []*schemas.ModelWeights{{Model: "a", Weights: []*schemas.EngineWeight{{EngineId: "x", EndpointUrl: "http://x.example", Weight: 1}}}}
	if err := g.ApplySnapshot(marshal(t, bad)); !errors.Is(err, ErrSnapshotInvalid) {
		t.Fatalf("model plan with an engine outside the entry: %v, want ErrSnapshotInvalid", err)
	}
	if got, _ := count("a", 10); got[1] != 10 {
		t.Errorf("after the rejected snapshot model a went to %v, want the last good plan (all on e1)", got)
	}
}

// TestModelEnginesFullQueueInsteadOf429: admission counts the cluster's
// slots, so a request for model "b", whose only engine is at its hard
// limit while the other engine is idle, is admitted; it then waits in
// b's engine (up to twice its limit) instead of being answered 429.
func TestModelEnginesFullQueueInsteadOf429(t *testing.T) {
	ea, eb := newFakeEngine(t, "ea"), newFakeEngine(t, "eb")
	eb.mode.Store("block")
	g, base := startGateway(t, MaxInFlightPerEngine(1))
	if err := g.ApplySnapshot(marshal(t, snapshot(1, "us-east", 0, map[*fakeEngine]float64{ea: 0.5, eb: 0.5}))); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		f     *fakeEngine
		model string
	}{{ea, "a"}, {eb, "b"}} {
		g.applySignal(marshal(t, &schemas.EngineSignal{SchemaVersion: 1, EngineId: e.f.id, EndpointUrl: e.f.url(),
			EventTimeUnixMs: time.Now().UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, Models: []string{e.model}}))
	}
	codes := make(chan int, 2)
	for i := range 2 {
		go func() {
			code, _, _ := post(t, context.Background(), base, fmt.Sprintf(`{"model":"b","messages":[{"role":"user","content":"b %d"}]}`, i), nil)
			codes <- code
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for eb.requests.Load() < 2 && time.Now().Before(deadline) {
		select {
		case code := <-codes:
			t.Fatalf("a request for b ended with %d while b's engine held the other", code)
		case <-time.After(10 * time.Millisecond): // poll interval
		}
	}
	if n := eb.requests.Load(); n != 2 {
		t.Fatalf("b's engine got %d of the 2 requests", n)
	}
	close(eb.release)
	for range 2 {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("status %d, want 200", code)
		}
	}
}
