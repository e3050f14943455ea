package gateway

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/gateway/tenant"
	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TestRoutingEventForBilling: a served request's event carries the
// tenant, the hash of the OpenAI user (never the user), the priority,
// tokens, finish reason, the engine's region and GPU class from its
// signal, start and completion times and its one attempt.
func TestRoutingEventForBilling(t *testing.T) {
	e := newFakeEngine(t, "a")
	sink := make(eventSink, 16)
	g, base := startGateway(t, Engines(static(e)...), Events(sink), PriorityHeader(true), TrustTenantHeader(true))
	sig, err := proto.Marshal(&schemas.EngineSignal{SchemaVersion: schemas.Version + 1, EngineId: "a", Region: "us-east-1",
		GpuClass: "h100", EventTimeUnixMs: time.Now().UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	g.applySignal(sig) // a newer schema_version is read, not rejected
	body := `{"model":"sim","user":"alice@example.com","messages":[{"role":"user","content":"hi"}]}`
	before := time.Now().UnixMilli()
	status, _, out := post(t, context.Background(), base, body, map[string]string{HeaderTenant: "acme", HeaderPriority: "high"})
	if status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	ev := sink.next(t)
	want := &schemas.RoutingEvent{
		Tenant: "acme", AffinityKeyHash: hashkey.String("u:alice@example.com"), Priority: schemas.Priority_PRIORITY_HIGH,
		PromptTokens: 11, OutputTokens: 5, FinishReason: "stop", EngineRegion: "us-east-1", EngineGpuClass: "h100",
		Status: schemas.RequestStatus_REQUEST_STATUS_OK, HttpStatus: 200, Decision: schemas.DecisionReason_DECISION_REASON_FALLBACK,
		DecisionReason: "fallback", EngineId: "a", Attempts: 1,
	}
	got := &schemas.RoutingEvent{
		Tenant: ev.Tenant, AffinityKeyHash: ev.AffinityKeyHash, Priority: ev.Priority,
		PromptTokens: ev.PromptTokens, OutputTokens: ev.OutputTokens, FinishReason: ev.FinishReason,
		EngineRegion: ev.EngineRegion, EngineGpuClass: ev.EngineGpuClass, Status: ev.Status, HttpStatus: ev.HttpStatus,
		Decision: ev.Decision, DecisionReason: ev.DecisionReason, EngineId: ev.EngineId, Attempts: ev.Attempts,
	}
	if !proto.Equal(got, want) {
		t.Fatalf("event\n%v\nwant\n%v", got, want)
	}
	if ev.AffinityKeyHash == 0 {
		t.Fatal("no affinity key hash")
	}
	if ev.TenantSource != TenantSourceHeader {
		t.Errorf("tenant source %q, want %q", ev.TenantSource, TenantSourceHeader)
	}
	if ev.EventTimeUnixMs < before || ev.CompletionTimeUnixMs < ev.EventTimeUnixMs {
		t.Errorf("start %d, completion %d, request sent at %d", ev.EventTimeUnixMs, ev.CompletionTimeUnixMs, before)
	}
	if len(ev.Tried) != 1 || ev.Tried[0].EngineId != "a" || ev.Tried[0].Status != schemas.RequestStatus_REQUEST_STATUS_OK ||
		ev.Tried[0].HttpStatus != 200 || ev.Tried[0].FailureReason != schemas.FailureReason_FAILURE_REASON_UNSPECIFIED {
		t.Errorf("tried %v", ev.Tried)
	}
	if ev.FailureReason != schemas.FailureReason_FAILURE_REASON_UNSPECIFIED {
		t.Errorf("failure reason %v on success", ev.FailureReason)
	}
	if eventKey(ev) != ev.RequestId || ev.RequestId == "" {
		t.Errorf("key %q, request id %q", eventKey(ev), ev.RequestId)
	}
}

// TestRoutingEventFailures: the default tenant; a request both engines
// fail lists both attempts with their reason; a shed request says why.
func TestRoutingEventFailures(t *testing.T) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	a.setMode("500")
	b.setMode("503")
	sink := make(eventSink, 16)
	_, base := startGateway(t, Engines(static(a, b)...), Events(sink))
	status, _, _ := post(t, context.Background(), base, chatBody(false, "x"), nil)
	if status < 500 {
		t.Fatalf("status %d", status)
	}
	ev := sink.next(t)
	if ev.Tenant != DefaultTenant || ev.Priority != schemas.Priority_PRIORITY_NORMAL || ev.Status != schemas.RequestStatus_REQUEST_STATUS_ERROR {
		t.Errorf("tenant %q priority %v status %v", ev.Tenant, ev.Priority, ev.Status)
	}
	if len(ev.Tried) != 2 || uint32(len(ev.Tried)) != ev.Attempts {
		t.Fatalf("tried %v, attempts %d", ev.Tried, ev.Attempts)
	}
	reasons := map[string]schemas.FailureReason{}
	for _, at := range ev.Tried {
		if at.Status != schemas.RequestStatus_REQUEST_STATUS_ERROR {
			t.Errorf("attempt %v", at)
		}
		reasons[at.EngineId] = at.FailureReason
	}
	if reasons["a"] != schemas.FailureReason_FAILURE_REASON_STATUS_5XX || reasons["b"] != schemas.FailureReason_FAILURE_REASON_SATURATED {
		t.Errorf("attempt reasons %v", reasons)
	}
	if ev.FailureReason != ev.Tried[1].FailureReason || ev.Decision != schemas.DecisionReason_DECISION_REASON_RETRY {
		t.Errorf("failure reason %v, decision %v", ev.FailureReason, ev.Decision)
	}

	sink2 := make(eventSink, 16)
	_, base = startGateway(t, InitialSnapshot(snapshot(1, "us-east", 1, map[*fakeEngine]float64{a: 0})), Events(sink2), PriorityHeader(true))
	if status, _, _ := post(t, context.Background(), base, chatBody(false, "x"), map[string]string{HeaderPriority: "low", HeaderTenant: "bad tenant"}); status != 429 {
		t.Fatalf("shed: status %d", status)
	}
	ev = sink2.next(t)
	if ev.Status != schemas.RequestStatus_REQUEST_STATUS_SHED || ev.FailureReason != schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT ||
		ev.Decision != schemas.DecisionReason_DECISION_REASON_SHED || ev.Priority != schemas.Priority_PRIORITY_LOW ||
		ev.AffinityKeyHash == 0 || len(ev.Tried) != 0 || ev.Tenant != DefaultTenant {
		t.Errorf("shed event %v", ev)
	}
}

// TestRoutingEventTenantFromKey: with API keys the event's tenant is the
// key's, and X-Switchyard-Tenant cannot override it.
func TestRoutingEventTenantFromKey(t *testing.T) {
	keys, err := tenant.Parse([]byte("tenants:\n  - name: acme\n    keys: ["+tenant.HashKey("sk-acme")+"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newFakeEngine(t, "a")
	sink := make(eventSink, 4)
	_, base := startGateway(t, Engines(static(e)...), Tenants(keys), Events(sink))
	status, _, body := post(t, context.Background(), base, chatBody(false, "x"), map[string]string{"Authorization": "Bearer sk-acme", HeaderTenant: "someone-else"})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if ev := sink.next(t); ev.Tenant != "acme" {
		t.Fatalf("tenant %q, want the key's acme", ev.Tenant)
	}
}
