package gateway

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/obs"
)

// metrics are the gateway's Prometheus metrics, all labelled by cluster so
// several gateways can share one registry.
type metrics struct {
	requests      *prometheus.CounterVec   // cluster, outcome
	ttft          *prometheus.HistogramVec // cluster
	e2e           *prometheus.HistogramVec // cluster
	retries       *prometheus.CounterVec   // cluster
	budgetDenied  *prometheus.CounterVec   // cluster
	shed          *prometheus.CounterVec   // cluster, reason, priority
	ejections     *prometheus.CounterVec   // cluster, engine
	upstreamFails *prometheus.CounterVec   // cluster, reason
	picks         *prometheus.CounterVec   // cluster, reason
	adapterPicks  *prometheus.CounterVec   // cluster, placement
	applied       *prometheus.CounterVec   // cluster
	rejected      *prometheus.CounterVec   // cluster, reason
	signals       *prometheus.CounterVec   // cluster, result
	// signalsClamped: cluster, field (registry_signals.go).
	signalsClamped *prometheus.CounterVec
}

var (
	latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// newMetrics registers the metrics with reg, sharing those another
// gateway of the same registry registered first.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var errs []error
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "switchyard", Subsystem: "gateway", Name: name, Help: help}, labels))
		errs = append(errs, err)
		return c
	}
	hv := func(name, help string) *prometheus.HistogramVec {
		h, err := obs.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "switchyard", Subsystem: "gateway", Name: name, Help: help, Buckets: latencyBuckets}, []string{"cluster"}))
		errs = append(errs, err)
		return h
	}
	m := &metrics{
		requests:       cv("requests_total", "Requests by outcome: ok, error, shed, client_error, canceled.", "cluster", "outcome"),
		ttft:           hv("ttft_seconds", "Time from request arrival to the first token (first SSE data event; whole response when not streaming)."),
		e2e:            hv("request_duration_seconds", "End-to-end request latency at the gateway."),
		retries:        cv("retries_total", "Attempts after the first, to a different engine.", "cluster"),
		budgetDenied:   cv("retry_budget_exhausted_total", "Retries not made because the retry budget was spent.", "cluster"),
		shed:           cv("shed_total", "Requests answered 429: reason snapshot (the plan sheds) or capacity (every engine at its in-flight cap).", "cluster", "reason", "priority"),
		ejections:      cv("ejections_total", "Outlier ejections of an engine.", "cluster", "engine"),
		upstreamFails:  cv("upstream_failures_total", "Failed attempts by reason: connect, status_5xx, first_token_timeout, idle_timeout, stream.", "cluster", "reason"),
		picks:          cv("picks_total", "Engine choices by reason: affinity, weighted, overflow, fallback, panic.", "cluster", "reason"),
		adapterPicks:   cv("adapter_picks_total", "Engine choices for LoRA adapter requests: placement home (an engine the adapter is to stay loaded on, or running on before homes are placed) or elsewhere (the engine loads it).", "cluster", "placement"),
		applied:        cv("snapshots_applied_total", "Snapshots validated and swapped in.", "cluster"),
		rejected:       cv("snapshots_rejected_total", "Snapshots rejected by reason: decode, schema, cluster, invalid, stale, unsigned, signature, future.", "cluster", "reason"),
		signals:        cv("signals_total", "Engine signals read, by result: applied, malformed, stale, unknown_engine; with --engine-registry also unregistered_engine and endpoint_mismatch (ignored).", "cluster", "result"),
		signalsClamped: cv("signals_clamped_total", "Fields of engine signals lowered to the engine registry's bounds, by field: max_batch, ready_replicas, running_requests (the signal is applied clamped).", "cluster", "field"),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("gateway metrics: %w", err)
	}
	return m, nil
}

// hotMetrics are the series every request touches, resolved for the
// gateway's cluster once instead of by label lookup per request.
type hotMetrics struct {
	ttft, e2e prometheus.Observer
	requests  map[string]prometheus.Counter // by outcome
	picks     [pick.Panic + 1]prometheus.Counter
}

// Label values the gateway's counters take, each series exported at 0
// from the start (zero), so a rate over it has data before the first
// event and the first event is counted in it.
var (
	shedReasons         = []string{"snapshot", "admission", "capacity"} // proxy.go, Gateway.shed
	shedPriorities      = []string{"low", "normal", "high"}             // shed.Priority
	upstreamFailReasons = []string{"connect", "saturated", "status_5xx", "first_token_timeout", "idle_timeout", "stream"}
	// snapshotRejectReasons are rejectReason's results.
	snapshotRejectReasons = []string{"decode", "schema", "cluster", "invalid", "stale", "unsigned", "signature", "future", "unregistered"}
	signalResults         = []string{"applied", "malformed", "stale", "unknown_engine", "unregistered_engine", "endpoint_mismatch"}
)

// zero exports every counter of cluster at 0 for its known label values,
// the engines' ejections for engines (those known at start).
func (m *metrics) zero(cluster string, engines []string) {
	m.retries.WithLabelValues(cluster)
	m.budgetDenied.WithLabelValues(cluster)
	m.applied.WithLabelValues(cluster)
	for _, r := range shedReasons {
		for _, p := range shedPriorities {
			m.shed.WithLabelValues(cluster, r, p)
		}
	}
	for _, r := range upstreamFailReasons {
		m.upstreamFails.WithLabelValues(cluster, r)
	}
	for _, r := range snapshotRejectReasons {
		m.rejected.WithLabelValues(cluster, r)
	}
	for _, r := range signalResults {
		m.signals.WithLabelValues(cluster, r)
	}
	for _, f := range []string{clampMaxBatch, clampReplicas, clampRunning} {
		m.signalsClamped.WithLabelValues(cluster, f)
	}
	for _, e := range engines {
		m.ejections.WithLabelValues(cluster, e)
	}
}

// knownEngines are the ids of the static engines and the registry's.
func knownEngines(c cfg) []string {
	var ids []string
	for _, e := range c.engines {
		ids = append(ids, e.ID)
	}
	for _, e := range c.registry.Engines() {
		if !slices.Contains(ids, e.ID) {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

func (m *metrics) hot(cluster string) hotMetrics {
	h := hotMetrics{
		ttft:     m.ttft.WithLabelValues(cluster),
		e2e:      m.e2e.WithLabelValues(cluster),
		requests: map[string]prometheus.Counter{},
	}
	for _, o := range []string{"ok", "error", "shed", "client_error", "canceled"} {
		h.requests[o] = m.requests.WithLabelValues(cluster, o)
	}
	for r := pick.Affinity; r <= pick.Panic; r++ {
		h.picks[r] = m.picks.WithLabelValues(cluster, r.String())
	}
	return h
}
