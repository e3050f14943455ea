package gateway

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/shed"
	"github.com/switchyard-llm/switchyard/gateway/tenant"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TenantKeys maps an API key (the bearer token of the Authorization
// header) to its tenant, or nil for an unknown key. *tenant.File and
// *tenant.Set satisfy it.
type TenantKeys interface {
	Lookup(apiKey string) *tenant.Tenant
}

// Tenants requires an API key on every inference and model request: an
// unknown or missing one gets 401 invalid_api_key; the key's tenant sets the
// request's priority, rate and concurrency limits, and names it in the
// routing event; the client's Authorization header is then not passed to
// the engines. Default none: no keys, every request is accepted.
func Tenants(k TenantKeys) Opt { return opt(func(c *cfg) { c.tenants = k }) }

// PriorityHeader trusts the client's X-Switchyard-Priority header (with
// Tenants, never above the key's priority). Default false: the header is
// ignored, and a request's priority is its key's (normal without keys).
func PriorityHeader(trust bool) Opt { return opt(func(c *cfg) { c.priorityHeader = trust }) }

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// authorize finds the request's tenant (into ev), priority and the
// tenant's admission weight (1 without a tenant). It answers the
// request itself (ok false) when keys are configured and the key is
// unknown (401), or the tenant is over its rate or concurrency (429),
// or the priority header is trusted and invalid (400). done ends the
// tenant's request in flight (nil when none was counted).
func (g *Gateway) authorize(w http.ResponseWriter, r *http.Request, ev *schemas.RoutingEvent) (prio shed.Priority, weight float64, done func(), out outcome, ok bool) {
	prio, weight = shed.Normal, 1
	t, known := g.keyTenant(w, r)
	if !known {
		ev.FailureReason = schemas.FailureReason_FAILURE_REASON_UNAUTHENTICATED
		return prio, weight, nil, outcome{statusClientErr, http.StatusUnauthorized}, false
	}
	if t != nil {
		ev.Tenant, ev.TenantSource = t.Name, TenantSourceAPIKey
		prio, weight = t.Priority, t.Weight
	}
	if g.cfg.priorityHeader {
		p, err := shed.ParsePriority(r.Header.Get(HeaderPriority))
		if err != nil {
			return prio, weight, nil, clientError(w, 400, "invalid_header", HeaderPriority, "header "+HeaderPriority+": "+err.Error()), false
		}
		if t == nil || p < prio {
			prio = p
		}
	}
	ev.Priority = schemas.Priority(int32(prio) + 1) // shed.Low..High -> PRIORITY_LOW..HIGH
	if t == nil {
		return prio, weight, nil, outcome{}, true
	}
	if allowed, after := t.Allow(g.cfg.now()); !allowed {
		return prio, weight, nil, g.tenantLimited(w, ev, t, "tenant_rate", after), false
	}
	if !t.Start() {
		return prio, weight, nil, g.tenantLimited(w, ev, t, "tenant_concurrency", time.Second), false
	}
	return prio, weight, t.Done, outcome{}, true
}

// keyTenant returns the tenant of r's API key (nil without Tenants); with
// Tenants and no valid key it answers 401 invalid_api_key and returns ok
// false.
func (g *Gateway) keyTenant(w http.ResponseWriter, r *http.Request) (t *tenant.Tenant, ok bool) {
	if g.cfg.tenants == nil {
		return nil, true
	}
	if t = g.cfg.tenants.Lookup(bearer(r.Header)); t != nil {
		return t, true
	}
	g.admit.unauth.Inc()
	w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
	writeError(w, http.StatusUnauthorized, typeInvalid, "invalid_api_key", "", "Incorrect API key provided. Send a valid key as Authorization: Bearer <key>.")
	return nil, false
}

// tenantLimited answers 429 for a tenant over its own limit: not demand
// on the cluster (FAILURE_REASON_TENANT_LIMIT).
func (g *Gateway) tenantLimited(w http.ResponseWriter, ev *schemas.RoutingEvent, t *tenant.Tenant, reason string, after time.Duration) outcome {
	g.tenantRejected(t.Name, reason)
	ev.DecisionReason, ev.FailureReason = "shed", schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(after.Seconds())))))
	msg := "rate limit reached for your API key's requests per second"
	if reason == "tenant_concurrency" {
		msg = "your API key has as many requests in flight as it may"
	}
	writeError(w, http.StatusTooManyRequests, typeRateLimit, "rate_limit_exceeded", "", msg)
	return outcome{statusShed, http.StatusTooManyRequests}
}

func (g *Gateway) tenantRejected(name, reason string) {
	g.admit.rej.WithLabelValues(g.cfg.cluster, reason).Inc()
	g.admit.tenantRej.WithLabelValues(g.cfg.cluster, name, reason).Inc()
}
