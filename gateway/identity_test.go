package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/switchyard-llm/switchyard/gateway/tenant"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TestRequestIDsUniqueWhenClientsReuseOne: two tenants sending the same
// X-Request-Id get two events with distinct request ids (UUIDv7s, each
// the answer's X-Switchyard-Request-Id), the client's id kept as
// client_request_id and echoed in X-Request-Id; a request without one
// answers the gateway's id in both headers. Ids of requests made one
// after another sort in that order. Both servers.
func TestRequestIDsUniqueWhenClientsReuseOne(t *testing.T) {
	forEachServer(t, testRequestIDsUniqueWhenClientsReuseOne)
}

func testRequestIDsUniqueWhenClientsReuseOne(t *testing.T, server string) {
	keys, err := tenant.Parse([]byte("tenants:\n  - name: acme\n    keys: ["+tenant.HashKey("sk-acme")+"]\n  - name: globex\n    keys: ["+tenant.HashKey("sk-globex")+"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newFakeEngine(t, "a")
	sink := make(eventSink, 128)
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), Tenants(keys), Events(sink))
	seen := map[string]bool{}
	check := func(key, clientID string) *schemas.RoutingEvent {
		t.Helper()
		hdr := map[string]string{"Authorization": "Bearer " + key}
		if clientID != "" {
			hdr[HeaderRequestID] = clientID
		}
		status, h, body := post(t, context.Background(), base, chatBody(false, "x"), hdr)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		ev := sink.next(t)
		id, err := uuid.Parse(ev.RequestId)
		if err != nil || id.Version() != 7 || id.String() != ev.RequestId {
			t.Fatalf("request id %q is not a UUIDv7 in text form (%v)", ev.RequestId, err)
		}
		if seen[ev.RequestId] {
			t.Fatalf("request id %q given twice", ev.RequestId)
		}
		seen[ev.RequestId] = true
		wantEcho := cmpOr(clientID, ev.RequestId)
		if got := h.Get(HeaderGatewayRequestID); got != ev.RequestId {
			t.Errorf("%s %q, want the event's %q", HeaderGatewayRequestID, got, ev.RequestId)
		}
		if got := h.Get(HeaderRequestID); got != wantEcho {
			t.Errorf("%s %q, want %q", HeaderRequestID, got, wantEcho)
		}
		if ev.ClientRequestId != clientID || ev.TenantSource != TenantSourceAPIKey {
			t.Errorf("client_request_id %q tenant_source %q, want %q and %q", ev.ClientRequestId, ev.TenantSource, clientID, TenantSourceAPIKey)
		}
		return ev
	}
	a, b := check("sk-acme", "dup-1"), check("sk-globex", "dup-1")
	if a.Tenant != "acme" || b.Tenant != "globex" || a.RequestId == b.RequestId {
		t.Fatalf("tenants %q and %q with request ids %q and %q", a.Tenant, b.Tenant, a.RequestId, b.RequestId)
	}
	var ids []string
	for range 50 {
		ids = append(ids, check("sk-acme", "").RequestId)
	}
	if !slices.IsSorted(ids) {
		t.Errorf("request ids made one after another are not in order: %v", ids)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestInvalidClientRequestIDAnswersGatewayID: an X-Request-Id that is
// not printable ASCII gets 400, and the answer and the event carry the
// gateway's id.
func TestInvalidClientRequestIDAnswersGatewayID(t *testing.T) {
	e := newFakeEngine(t, "a")
	sink := make(eventSink, 4)
	_, base := startGateway(t, Engines(static(e)...), Events(sink))
	status, h, _ := post(t, context.Background(), base, chatBody(false, "x"), map[string]string{HeaderRequestID: "a b"})
	ev := sink.next(t)
	if status != 400 || ev.RequestId == "" || h.Get(HeaderRequestID) != ev.RequestId || h.Get(HeaderGatewayRequestID) != ev.RequestId || ev.ClientRequestId != "" {
		t.Fatalf("status %d, headers %q %q, event id %q client id %q", status, h.Get(HeaderRequestID), h.Get(HeaderGatewayRequestID), ev.RequestId, ev.ClientRequestId)
	}
}

// TestTenantHeaderTrustedOnlyWhenAsked: X-Switchyard-Tenant names the
// tenant only with TrustTenantHeader and no API keys; otherwise the
// tenant is the key's or "default", and tenant_source says which.
func TestTenantHeaderTrustedOnlyWhenAsked(t *testing.T) {
	keys, err := tenant.Parse([]byte("tenants:\n  - name: acme\n    keys: ["+tenant.HashKey("sk-acme")+"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name           string
		opts           []Opt
		hdr            map[string]string
		tenant, source string
	}{
		{"untrusted header", nil, map[string]string{HeaderTenant: "mallory"}, DefaultTenant, TenantSourceNone},
		{"no header", nil, nil, DefaultTenant, TenantSourceNone},
		{"trusted header", []Opt{TrustTenantHeader(true)}, map[string]string{HeaderTenant: "acme-proxy"}, "acme-proxy", TenantSourceHeader},
		{"trusted, invalid", []Opt{TrustTenantHeader(true)}, map[string]string{HeaderTenant: "bad tenant"}, DefaultTenant, TenantSourceNone},
		{"trusted, absent", []Opt{TrustTenantHeader(true)}, nil, DefaultTenant, TenantSourceNone},
		{"key wins over a trusted header", []Opt{TrustTenantHeader(true), Tenants(keys)},
			map[string]string{"Authorization": "Bearer sk-acme", HeaderTenant: "mallory"}, "acme", TenantSourceAPIKey},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newFakeEngine(t, "a")
			sink := make(eventSink, 4)
			_, base := startGateway(t, append([]Opt{Engines(static(e)...), Events(sink)}, tt.opts...)...)
			if status, _, body := post(t, context.Background(), base, chatBody(false, "x"), tt.hdr); status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			if ev := sink.next(t); ev.Tenant != tt.tenant || ev.TenantSource != tt.source {
				t.Fatalf("tenant %q from %q, want %q from %q", ev.Tenant, ev.TenantSource, tt.tenant, tt.source)
			}
		})
	}
}

// TestCanceledStreamKeepsPromptTokens: a client that leaves a stream
// after its first chunk leaves an event with prompt tokens: the engine's
// when it reports usage in every chunk (vLLM's continuous_usage_stats),
// else the gateway's estimate of the prompt (its bytes over 4, what the
// picker uses), marked usage_estimated. A stream that completes has the
// engine's usage, not estimated.
func TestCanceledStreamKeepsPromptTokens(t *testing.T) {
	plain := chatBody(true, strings.Repeat("long prompt ", 40))
	continuous := strings.Replace(plain, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`, 1)
	in, err := parseInference([]byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	_, promptBytes := promptChain(nil, in.Messages, in.Prompt)
	estimate := uint32(promptBytes / 4)
	if estimate == 0 || estimate == 11 {
		t.Fatalf("estimate %d: the test cannot tell it from the engine's 11", estimate)
	}
	for _, tt := range []struct {
		name      string
		body      string
		cancel    bool
		prompt    uint32
		estimated bool
	}{
		{"canceled, usage per chunk", continuous, true, 11, false},
		{"canceled, usage only at the end", plain, true, estimate, true},
		{"complete", plain, false, 11, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newFakeEngine(t, "a")
			if tt.cancel {
				e.setMode("slow") // one chunk, then waits for the client to leave
			}
			sink := make(eventSink, 4)
			_, base := startGateway(t, Engines(static(e)...), Events(sink))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			if _, err := resp.Body.Read(buf); err != nil {
				t.Fatal(err)
			}
			if tt.cancel {
				cancel()
			} else {
				for err == nil {
					_, err = resp.Body.Read(buf)
				}
			}
			resp.Body.Close()
			ev := sink.next(t)
			wantStatus := schemas.RequestStatus_REQUEST_STATUS_OK
			if tt.cancel {
				wantStatus = schemas.RequestStatus_REQUEST_STATUS_CANCELED
			}
			if ev.Status != wantStatus || ev.PromptTokens != tt.prompt || ev.UsageEstimated != tt.estimated {
				t.Fatalf("status %v prompt tokens %d estimated %v, want %v %d %v", ev.Status, ev.PromptTokens, ev.UsageEstimated, wantStatus, tt.prompt, tt.estimated)
			}
		})
	}
}

// TestEstimatePromptOnlyWhenTheEngineTookIt: no estimate for an attempt
// the engine refused (4xx, 5xx, saturated), one that failed to connect
// without a cancel, or one whose usage is known.
func TestEstimatePromptOnlyWhenTheEngineTookIt(t *testing.T) {
	for _, tt := range []struct {
		name     string
		res      attemptResult
		prompt   uint32
		canceled bool
		want     bool
	}{
		{"stream broke after 200", attemptResult{status: 200, failReason: "stream"}, 0, false, true},
		{"canceled after 200", attemptResult{status: 200}, 0, true, true},
		{"canceled waiting for the answer", attemptResult{failReason: "connect"}, 0, true, true},
		{"connect failed", attemptResult{failReason: "connect"}, 0, false, false},
		{"engine 400", attemptResult{status: 400, committed: true}, 0, false, false},
		{"engine 503", attemptResult{status: 503, saturated: true, failReason: "saturated"}, 0, true, false},
		{"engine 500", attemptResult{status: 500, failReason: "status_5xx"}, 0, false, false},
		{"complete without usage", attemptResult{status: 200, complete: true}, 0, false, false},
		{"usage known", attemptResult{status: 200}, 11, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := &schemas.RoutingEvent{PromptTokens: tt.prompt}
			got := estimatePrompt(ev, &tt.res, 300, tt.canceled)
			if got != tt.want || (got && ev.PromptTokens != 300) || (!got && ev.PromptTokens != tt.prompt) {
				t.Fatalf("estimated %v with prompt tokens %d, want %v", got, ev.PromptTokens, tt.want)
			}
		})
	}
}
