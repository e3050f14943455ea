package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/gateway/outlier"
	"github.com/switchyard-llm/switchyard/gateway/tenant"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// openAIError decodes an OpenAI-style error body.
func openAIError(t *testing.T, body string) (typ, code string) {
	t.Helper()
	var v struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error == nil || v.Error.Message == "" {
		t.Fatalf("not an OpenAI error: %q", body)
	}
	if v.Error.Code != nil {
		code = *v.Error.Code
	}
	return v.Error.Type, code
}

// drainEvents takes the n next events of sink.
func drainEvents(t *testing.T, sink eventSink, n int) []*schemas.RoutingEvent {
	t.Helper()
	out := make([]*schemas.RoutingEvent, n)
	for i := range out {
		out[i] = sink.next(t)
	}
	return out
}

// TestTenantKeys: with API keys configured a request without a valid key
// gets 401 invalid_api_key and never reaches an engine; a key's tenant
// names the request, sets its priority (the client's header is ignored)
// and its limits: over its rate or concurrency it gets 429 with
// Retry-After. The client's key is not passed to the engine. Neither the
// 401s nor the tenant-limit 429s count as demand.
func TestTenantKeys(t *testing.T) { forEachServer(t, testTenantKeys) }

func testTenantKeys(t *testing.T, server string) {
	keys, err := tenant.Parse([]byte(`tenants:
  - name: acme
    priority: high
    max_concurrency: 1
    keys: [`+tenant.HashKey("sk-acme")+`]
  - name: free
    priority: low
    rate: 0.001
    burst: 1
    keys: [`+tenant.HashKey("sk-free")+`]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newFakeEngine(t, "a")
	sink := make(eventSink, 64)
	g, base := startGateway(t, HTTPServer(server), Engines(static(e)...), Tenants(keys), Events(sink))
	auth := func(k string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + k, HeaderPriority: "low"}
	}

	for _, hdr := range []map[string]string{nil, auth("sk-wrong"), {"Authorization": "sk-acme"}} {
		status, h, body := post(t, context.Background(), base, chatBody(false, "x"), hdr)
		if typ, code := openAIError(t, body); status != 401 || typ != "invalid_request_error" || code != "invalid_api_key" || h.Get("WWW-Authenticate") == "" {
			t.Fatalf("%v: %d %s %s", hdr, status, typ, code)
		}
	}
	if n := e.requests.Load(); n != 0 {
		t.Fatalf("%d unauthenticated requests reached the engine", n)
	}
	for key, want := range map[string]int{"": 401, "sk-wrong": 401, "sk-acme": 200} {
		req, err := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /v1/models with key %q: %d, want %d", key, resp.StatusCode, want)
		}
	}
	for _, ev := range drainEvents(t, sink, 3) {
		if ev.Status != schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR || ev.HttpStatus != 401 ||
			ev.FailureReason != schemas.FailureReason_FAILURE_REASON_UNAUTHENTICATED || estimate.CountsAsDemand(ev) {
			t.Errorf("401 event %v", ev)
		}
	}

	// acme: served at its key's priority; the engine never sees the key.
	if status, _, body := post(t, context.Background(), base, chatBody(false, "x"), auth("sk-acme")); status != 200 {
		t.Fatalf("acme: %d %s", status, body)
	}
	if ev := sink.next(t); ev.Tenant != "acme" || ev.Priority != schemas.Priority_PRIORITY_HIGH || !estimate.CountsAsDemand(ev) {
		t.Errorf("acme event: tenant %q priority %v", ev.Tenant, ev.Priority)
	}
	e.mu.Lock()
	if got := e.headers[0].Get("Authorization"); got != "" {
		t.Errorf("the engine got the client's key %q", got)
	}
	e.mu.Unlock()

	// free: a burst of one, then 429 with Retry-After.
	if status, _, _ := post(t, context.Background(), base, chatBody(false, "x"), auth("sk-free")); status != 200 {
		t.Fatalf("free, first: %d", status)
	}
	status, h, body := post(t, context.Background(), base, chatBody(false, "x"), auth("sk-free"))
	if typ, code := openAIError(t, body); status != 429 || h.Get("Retry-After") == "" || typ != "rate_limit_error" || code != "rate_limit_exceeded" {
		t.Fatalf("free, second: %d %v %s", status, h, body)
	}
	for _, ev := range drainEvents(t, sink, 2) {
		if ev.Tenant != "free" || ev.Priority != schemas.Priority_PRIORITY_LOW {
			t.Errorf("free event: tenant %q priority %v", ev.Tenant, ev.Priority)
		}
		if ev.HttpStatus == 429 && (ev.FailureReason != schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT || estimate.CountsAsDemand(ev)) {
			t.Errorf("tenant-limit event %v", ev)
		}
	}

	// acme: one request in flight at most.
	e.setMode("block")
	done := make(chan int, 1)
	go func() {
		s, _, _ := post(t, context.Background(), base, chatBody(false, "x"), auth("sk-acme"))
		done <- s
	}()
	waitFor(t, 5*time.Second, func() bool { return g.Stats().InFlight == 1 }, "acme's request not in flight")
	if status, h, _ := post(t, context.Background(), base, chatBody(false, "x"), auth("sk-acme")); status != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("acme over its concurrency: %d", status)
	}
	close(e.release)
	if s := <-done; s != 200 {
		t.Fatalf("acme's blocked request: %d", s)
	}
}

// TestPriorityHeaderIgnoredByDefault: without PriorityHeader the client's
// priority header is neither read nor validated.
func TestPriorityHeaderIgnoredByDefault(t *testing.T) {
	e := newFakeEngine(t, "a")
	sink := make(eventSink, 4)
	_, base := startGateway(t, Engines(static(e)...), Events(sink))
	if status, _, _ := post(t, context.Background(), base, chatBody(false, "x"), map[string]string{HeaderPriority: "urgent"}); status != 200 {
		t.Fatalf("status %d", status)
	}
	if ev := sink.next(t); ev.Priority != schemas.Priority_PRIORITY_NORMAL {
		t.Fatalf("priority %v from an ignored header", ev.Priority)
	}
}

// TestAdminListen: /health and /metrics move to the admin listener.
func TestAdminListen(t *testing.T) {
	e := newFakeEngine(t, "a")
	g, base := startGateway(t, Engines(static(e)...), AdminListen("127.0.0.1:0"))
	admin := "http://" + g.AdminAddr()
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if s, b := get(admin + "/health"); s != 200 || !strings.Contains(b, `"status":"ok"`) {
		t.Fatalf("admin /health: %d %s", s, b)
	}
	if s, b := get(admin + "/metrics"); s != 200 || !strings.Contains(b, "switchyard_gateway_admission_capacity") {
		t.Fatalf("admin /metrics: %d", s)
	}
	for _, p := range []string{"/health", "/metrics"} {
		if s, _ := get(base + p); s != 404 {
			t.Errorf("API listener %s: %d, want 404", p, s)
		}
	}
	if s, _ := get(admin + "/v1/models"); s != 404 {
		t.Errorf("admin listener serves the API: %d", s)
	}
}

// TestTimeoutsDoNotEject: an engine that times out (busy) is penalized
// but never ejected, however many times in a row; one that fails with
// errors is.
func TestTimeoutsDoNotEject(t *testing.T) {
	for _, mode := range []string{"hang", "500"} {
		t.Run(mode, func(t *testing.T) {
			e := newFakeEngine(t, "a")
			e.setMode(mode)
			g, base := startGateway(t, Engines(static(e)...), FirstTokenTimeout(20*time.Millisecond),
				Outlier(outlier.Config{Consecutive: 2, MaxEjectedShare: 1}))
			for range 4 {
				if status, _, _ := post(t, context.Background(), base, chatBody(true, "x"), nil); status < 500 {
					t.Fatalf("status %d", status)
				}
			}
			ejected := g.outlier.Ejected()
			if mode == "hang" && ejected != 0 {
				t.Fatal("a busy (timing out) engine was ejected")
			}
			if mode == "500" && ejected != 1 {
				t.Fatal("a failing engine was not ejected")
			}
		})
	}
}

// TestArrivalRecord: a request still running after ArrivalRecordAfter
// gets an arrival record (IN_PROGRESS, its request id and arrival time),
// counted as demand, to the arrivals sink; its final record, the only
// one in the events sink, is counted_at_arrival and not counted again.
// A short request has only its final record.
func TestArrivalRecord(t *testing.T) {
	e := newFakeEngine(t, "a")
	sink, arrivals := make(eventSink, 8), make(eventSink, 8)
	_, base := startGateway(t, Engines(static(e)...), Events(sink), Arrivals(arrivals), ArrivalRecordAfter(20*time.Millisecond))
	if status, _, _ := post(t, context.Background(), base, chatBody(false, "x"), nil); status != 200 {
		t.Fatalf("short request: %d", status)
	}
	if ev := sink.next(t); ev.Status != schemas.RequestStatus_REQUEST_STATUS_OK || ev.CountedAtArrival || !estimate.CountsAsDemand(ev) {
		t.Fatalf("short request's record %v", ev)
	}
	e.setMode("block")
	done := make(chan int, 1)
	go func() {
		s, _, _ := post(t, context.Background(), base, chatBody(false, "x"), nil)
		done <- s
	}()
	arr := arrivals.next(t)
	if arr.Status != schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS || arr.RequestId == "" || arr.Model != "sim" || !estimate.CountsAsDemand(arr) {
		t.Fatalf("arrival record %v", arr)
	}
	close(e.release)
	if s := <-done; s != 200 {
		t.Fatalf("long request: %d", s)
	}
	fin := sink.next(t)
	if fin.RequestId != arr.RequestId || fin.EventTimeUnixMs != arr.EventTimeUnixMs || !fin.CountedAtArrival ||
		fin.Status != schemas.RequestStatus_REQUEST_STATUS_OK || estimate.CountsAsDemand(fin) {
		t.Fatalf("final record %v after arrival %v", fin, arr)
	}
	if len(sink) != 0 || len(arrivals) != 0 {
		t.Fatalf("%d more events and %d more arrival records, want none", len(sink), len(arrivals))
	}
}

// TestMalformedIsNotDemand: a request the gateway answers 4xx itself is
// recorded but never demand; a shed one is.
func TestMalformedIsNotDemand(t *testing.T) {
	e := newFakeEngine(t, "a")
	sink := make(eventSink, 8)
	_, base := startGateway(t, InitialSnapshot(snapshot(1, "us-east", 1, map[*fakeEngine]float64{e: 0})), Events(sink))
	for _, body := range []string{`{"model":`, "{\"model\":\"\xff\"}", `[1]`} {
		if status, _, _ := post(t, context.Background(), base, body, nil); status != 400 {
			t.Fatalf("%s: %d", body, status)
		}
		if ev := sink.next(t); ev.Status != schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR || estimate.CountsAsDemand(ev) {
			t.Fatalf("malformed %s: event %v", body, ev)
		}
	}
	if status, _, _ := post(t, context.Background(), base, chatBody(false, "x"), nil); status != 429 {
		t.Fatalf("shed: %d", status)
	}
	if ev := sink.next(t); ev.Status != schemas.RequestStatus_REQUEST_STATUS_SHED || !estimate.CountsAsDemand(ev) {
		t.Fatalf("shed event %v", ev)
	}
}

// TestAdmissionQueuesThenServes: with every engine at its limit a
// request waits in the admission queue and is served when a slot frees
// (slots were freed recently, so the predicted wait is short); with the
// queue full the next one gets 429 at once.
func TestAdmissionQueuesThenServes(t *testing.T) {
	e := newFakeEngine(t, "a")
	g, base := startGateway(t, Engines(static(e)...), MaxInFlightPerEngine(1), AdaptiveConcurrency(false),
		AdmissionQueue(admit.QueueConfig{MaxQueue: 1, Timeout: time.Minute}))
	for range 5 { // slots freed lately: a short predicted wait
		if status, _, _ := post(t, context.Background(), base, chatBody(false, "x"), nil); status != 200 {
			t.Fatalf("warm-up: %d", status)
		}
	}
	e.setMode("block")
	statuses := make(chan int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _, _ := post(t, context.Background(), base, chatBody(false, "x"), nil)
			statuses <- s
		}()
		if i == 0 {
			waitFor(t, 5*time.Second, func() bool { return g.Stats().InFlight == 1 }, "first request not in flight")
		}
	}
	waitFor(t, 5*time.Second, func() bool { return g.admit.q.Len() == 1 }, "second request not queued")
	if status, h, _ := post(t, context.Background(), base, chatBody(false, "x"), nil); status != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("with the queue full: %d", status)
	}
	close(e.release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("queued or in-flight request ended %d", s)
		}
	}
	if s := settled(t, g); s.Shed != 1 || s.Succeeded != 7 {
		t.Errorf("stats %+v", s)
	}
}
