package gateway

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/switchyard-llm/switchyard/schemas"
)

// The routing event of a request (schemas.RoutingEvent) is built here:
// newEvent when the request arrives, noteAttempt after each attempt,
// finishEvent when the response is done. The proxy fills in the rest
// (engine, tokens, latencies) as it goes.

const (
	// HeaderTenant names the tenant a request is billed to when no API
	// key says (RoutingEvent.tenant): printable ASCII of at most
	// maxTenantBytes; another value counts as DefaultTenant.
	HeaderTenant = "X-Switchyard-Tenant"
	// DefaultTenant is the tenant of a request without one.
	DefaultTenant = "default"

	maxTenantBytes = 128
)

// RoutingEvent.tenant_source: where the request's tenant came from.
const (
	TenantSourceAPIKey = "api_key" // the API key's tenant (Tenants)
	TenantSourceHeader = "header"  // X-Switchyard-Tenant (TrustTenantHeader)
	TenantSourceNone   = "none"    // neither: DefaultTenant
)

// newEvent starts the routing event of r, received at start. Its Tenant
// is DefaultTenant (source "none"), or, without API keys and with
// TrustTenantHeader, a valid X-Switchyard-Tenant header (source
// "header"); with keys (Tenants) authorize sets the key's tenant (source
// "api_key") and the header is ignored. authorize also sets Priority.
func (g *Gateway) newEvent(r *http.Request, start time.Time) *schemas.RoutingEvent {
	tenant, source := DefaultTenant, TenantSourceNone
	if g.cfg.tenants == nil && g.cfg.trustTenantHeader {
		if t, ok := tenantOf(r.Header); ok {
			tenant, source = t, TenantSourceHeader
		}
	}
	return &schemas.RoutingEvent{
		SchemaVersion:   schemas.Version,
		Cluster:         g.cfg.cluster,
		EventTimeUnixMs: start.UnixMilli(),
		Tenant:          tenant,
		TenantSource:    source,
		Route:           routeOf(r.URL.Path),
		GatewayId:       g.cfg.instanceID,
	}
}

// routeOf is the RoutingEvent.route of a request for path: the served
// inference route it names (one of a fixed set of strings, never the
// client's bytes), "" for any other path.
func routeOf(path string) string {
	if generates(path) {
		return path
	}
	for _, p := range otherRoutes {
		if p == path {
			return p
		}
	}
	return ""
}

// tenantOf is the header tenant of h, if it has a valid one (printable
// ASCII of at most maxTenantBytes).
func tenantOf(h http.Header) (string, bool) {
	v := h[HeaderTenant]
	if len(v) == 0 || v[0] == "" || len(v[0]) > maxTenantBytes || !validHeaderValue(v[0]) {
		return "", false
	}
	return v[0], true
}

// identify gives the request of ev its own id (RoutingEvent.request_id,
// the X-Switchyard-Request-Id response header) and keeps the client's
// X-Request-Id as client_request_id. The X-Request-Id answered (and sent
// to the engine) is the client's when it sent one, else the gateway's
// id, so OpenAI SDKs read a request id either way. A client id that is
// not printable ASCII of at most 256 bytes reports false: the caller
// answers 400 (the answer then carries the gateway's id as both).
func (g *Gateway) identify(w http.ResponseWriter, r *http.Request, ev *schemas.RoutingEvent) bool {
	ev.RequestId = newRequestID()
	id := []string{ev.RequestId}
	h := w.Header()
	h[HeaderGatewayRequestID] = id
	if v := r.Header[HeaderRequestID]; len(v) > 0 && v[0] != "" {
		if !validHeaderValue(v[0]) {
			h[HeaderRequestID] = id
			return false
		}
		ev.ClientRequestId = v[0]
		h[HeaderRequestID] = v[:1] // echoed: share the value
		return true
	}
	h[HeaderRequestID] = id
	return true
}

// newRequestID returns a new UUIDv7 (RFC 9562) in its text form: 48 bits
// of Unix ms, then the library's 12-bit sub-millisecond sequence
// (ordered within the process), then 62 random bits, so ids sort by time
// and are unique across gateways. The random bits come from math/rand/v2
// (a request id is an identifier, not a secret): crypto/rand made an id
// cost 850 ns against 370 ns (go test -bench, 2 cores).
func newRequestID() string {
	// NewV7FromReader fails only when its reader does, and fastRand
	// never does.
	id, _ := uuid.NewV7FromReader(fastRand{})
	return id.String()
}

// fastRand reads math/rand/v2's goroutine-safe generator.
type fastRand struct{}

func (fastRand) Read(p []byte) (int, error) {
	for i := 0; i < len(p); i += 8 {
		v := rand.Uint64()
		for j := i; j < len(p) && j < i+8; j++ {
			p[j] = byte(v)
			v >>= 8
		}
	}
	return len(p), nil
}

// estimatePrompt sets ev.PromptTokens to the gateway's estimate of the
// prompt (estimated, the picker's tokens: the prompt's bytes over 4) when
// the attempt res reached the engine and did not end, so the engine did
// (or began) the prefill, but it reported no prompt tokens: the client
// went away (canceled) or the stream broke before the usage, which an
// engine sends at the end unless it reports usage with every chunk
// (vLLM's stream_options continuous_usage_stats, read as any usage is).
// It reports whether it set one.
func estimatePrompt(ev *schemas.RoutingEvent, res *attemptResult, estimated int, canceled bool) bool {
	if ev.PromptTokens > 0 || estimated <= 0 || res.complete {
		return false
	}
	accepted := res.status >= 200 && res.status < 300
	// Canceled before the engine answered (res.status 0, a whole
	// response being generated): taken as sent. A cancel while
	// connecting is counted too; the transport's error does not tell
	// the two apart, and connecting takes a round trip.
	sent := res.status == 0 && canceled
	if !accepted && !sent {
		return false
	}
	ev.PromptTokens = uint32(min(estimated, 1<<31))
	return true
}

// noteAttempt appends one attempt on engine (started at began) to ev.Tried
// and stamps the engine's region and GPU class; canceled: the client
// went away.
func (g *Gateway) noteAttempt(ev *schemas.RoutingEvent, engine string, res *attemptResult, began time.Time, canceled bool) {
	a := addAttempt(ev)
	a.EngineId, a.HttpStatus, a.DurationMs = engine, uint32(res.status), ms(g.cfg.now().Sub(began))
	switch {
	case res.complete:
		a.Status = schemas.RequestStatus_REQUEST_STATUS_OK
	case canceled:
		a.Status, a.FailureReason = schemas.RequestStatus_REQUEST_STATUS_CANCELED, schemas.FailureReason_FAILURE_REASON_CLIENT_CANCELED
	case res.failReason != "":
		a.Status, a.FailureReason = schemas.RequestStatus_REQUEST_STATUS_ERROR, failureReason(res.failReason)
	case res.committed && res.status >= 400:
		a.Status, a.FailureReason = schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR, schemas.FailureReason_FAILURE_REASON_INVALID_REQUEST
	default:
		a.Status = schemas.RequestStatus_REQUEST_STATUS_OK
	}
	ev.FinishReason = res.usage.FinishReason
	ev.EngineRegion, ev.EngineGpuClass = "", ""
	if v, ok := g.engineInfo.Load(engine); ok {
		info := v.(*engineInfo)
		ev.EngineRegion, ev.EngineGpuClass = info.region, info.gpuClass
	}
}

// firstAttempt is a request's first attempt and the slice listing it,
// allocated together (most requests have one attempt).
type firstAttempt struct {
	a    schemas.Attempt
	list [1]*schemas.Attempt
}

// addAttempt appends a new attempt to ev.Tried and returns it.
func addAttempt(ev *schemas.RoutingEvent) *schemas.Attempt {
	if len(ev.Tried) == 0 {
		fa := &firstAttempt{}
		fa.list[0] = &fa.a
		ev.Tried = fa.list[:1:1]
		return &fa.a
	}
	a := &schemas.Attempt{}
	ev.Tried = append(ev.Tried, a)
	return a
}

// failureReason maps the proxy's fail reasons (relay.FailReason and
// attempt) to the enum.
func failureReason(s string) schemas.FailureReason {
	switch s {
	case "connect":
		return schemas.FailureReason_FAILURE_REASON_CONNECT
	case "status_5xx":
		return schemas.FailureReason_FAILURE_REASON_STATUS_5XX
	case "first_token_timeout":
		return schemas.FailureReason_FAILURE_REASON_FIRST_TOKEN_TIMEOUT
	case "idle_timeout":
		return schemas.FailureReason_FAILURE_REASON_IDLE_TIMEOUT
	case "saturated":
		return schemas.FailureReason_FAILURE_REASON_SATURATED
	case "":
		return schemas.FailureReason_FAILURE_REASON_UNSPECIFIED
	}
	return schemas.FailureReason_FAILURE_REASON_STREAM
}

// decision maps RoutingEvent.decision_reason to the enum.
func decision(reason string) schemas.DecisionReason {
	switch reason {
	case "affinity":
		return schemas.DecisionReason_DECISION_REASON_AFFINITY
	case "weighted":
		return schemas.DecisionReason_DECISION_REASON_WEIGHTED
	case "overflow":
		return schemas.DecisionReason_DECISION_REASON_OVERFLOW
	case "fallback":
		return schemas.DecisionReason_DECISION_REASON_FALLBACK
	case "panic":
		return schemas.DecisionReason_DECISION_REASON_PANIC
	case "retry":
		return schemas.DecisionReason_DECISION_REASON_RETRY
	case "shed":
		return schemas.DecisionReason_DECISION_REASON_SHED
	}
	return schemas.DecisionReason_DECISION_REASON_UNSPECIFIED
}

// finishEvent completes ev once the request is answered with out: the
// status, the completion time, the decision enum and, for a request that
// did not succeed, the failure reason when the proxy set none (a shed
// sets its own).
func (g *Gateway) finishEvent(ev *schemas.RoutingEvent, out outcome) {
	ev.Status, ev.HttpStatus = out.status, uint32(out.httpStatus)
	ev.CompletionTimeUnixMs = g.cfg.now().UnixMilli()
	ev.Decision = decision(ev.DecisionReason)
	if ev.FailureReason != schemas.FailureReason_FAILURE_REASON_UNSPECIFIED {
		return
	}
	switch out.status {
	case schemas.RequestStatus_REQUEST_STATUS_OK:
	case schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR:
		ev.FailureReason = schemas.FailureReason_FAILURE_REASON_INVALID_REQUEST
	case schemas.RequestStatus_REQUEST_STATUS_CANCELED:
		ev.FailureReason = schemas.FailureReason_FAILURE_REASON_CLIENT_CANCELED
	default:
		if n := len(ev.Tried); n > 0 {
			ev.FailureReason = ev.Tried[n-1].GetFailureReason()
		}
		if ev.FailureReason == schemas.FailureReason_FAILURE_REASON_UNSPECIFIED && len(ev.Tried) == 0 {
			ev.FailureReason = schemas.FailureReason_FAILURE_REASON_NO_ENGINES
		}
	}
}

// eventKey is the Kafka key of ev: its request id, so that events spread
// evenly over the partitions while all records of one request stay in
// one (docs/topics.md).
func eventKey(ev *schemas.RoutingEvent) string {
	if ev.RequestId != "" {
		return ev.RequestId
	}
	return ev.Cluster
}

// engineInfo is what the gateway knows of an engine from its signals.
type engineInfo struct {
	region, gpuClass string
}

// noteEngine keeps s's region and GPU class for routing events.
func (g *Gateway) noteEngine(s *schemas.EngineSignal) {
	if s.GetRegion() == "" && s.GetGpuClass() == "" {
		return
	}
	if v, ok := g.engineInfo.Load(s.GetEngineId()); ok {
		if in := v.(*engineInfo); in.region == s.GetRegion() && in.gpuClass == s.GetGpuClass() {
			return
		}
	}
	g.engineInfo.Store(s.GetEngineId(), &engineInfo{region: s.GetRegion(), gpuClass: s.GetGpuClass()})
}
