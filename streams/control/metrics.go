package control

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
)

type metrics struct {
	published  prometheus.Counter
	failures   *prometheus.CounterVec
	solveSecs  prometheus.Histogram
	objective  prometheus.Gauge
	shedRPS    prometheus.Gauge
	version    prometheus.Gauge
	estimates  prometheus.Counter
	deadLetter prometheus.Counter
	// Engine registry and plausibility (registry.go).
	rejected     *prometheus.CounterVec // reason
	quarantined  prometheus.Counter
	inQuarantine prometheus.Gauge

	// The latest plan, per cluster and engine (reset on each snapshot so
	// engines and clusters that left it disappear).
	weight      *prometheus.GaugeVec // cluster, engine
	shedFrac    *prometheus.GaugeVec // cluster
	demand      *prometheus.GaugeVec // cluster
	expected    *prometheus.GaugeVec // cluster
	utilization *prometheus.GaugeVec // engine
}

// newMetrics builds the loop's metrics and registers them with reg (nil:
// none).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		published:  prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_optimizer_snapshots_published_total", Help: "Weight snapshots published."}),
		failures:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_optimizer_failures_total", Help: "Windows that published nothing, by stage."}, []string{"stage"}),
		solveSecs:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "switchyard_optimizer_solve_seconds", Help: "Time to build and solve one instance.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		objective:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_optimizer_objective_seconds", Help: "Expected mean end-to-end latency of the latest plan."}),
		shedRPS:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_optimizer_shed_requests_per_second", Help: "Requests per second the latest plan sheds."}),
		version:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_optimizer_snapshot_version", Help: "Version of the latest published snapshot (its window end, Unix ms)."}),
		estimates:  prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_optimizer_estimates_consumed_total", Help: "Estimate records consumed."}),
		deadLetter: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_optimizer_dead_letter_total", Help: "Estimate records sent to the dead-letter topic."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_optimizer_estimates_unregistered_total",
			Help: "Engine estimates not planned because the engine registry does not hold the engine (unregistered_engine) or holds it at another endpoint (endpoint_mismatch)."}, []string{"reason"}),
		quarantined: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_optimizer_estimates_quarantined_total",
			Help: "Engine estimates whose claims were implausible (above the registry's bounds or far better than the engine's baseline): the engine's last trusted estimate was planned instead."}),
		inQuarantine: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_optimizer_engines_quarantined",
			Help: "Engines whose latest estimate is quarantined."}),

		weight:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_optimizer_weight", Help: "Share of a cluster's routed traffic the latest plan sends to an engine."}, []string{"cluster", "engine"}),
		shedFrac:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_optimizer_shed_fraction", Help: "Fraction of a cluster's demand the latest plan sheds."}, []string{"cluster"}),
		demand:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_optimizer_demand_requests_per_second", Help: "Demand of a cluster the latest plan routes (requests per second)."}, []string{"cluster"}),
		expected:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_optimizer_expected_latency_seconds", Help: "Mean end-to-end latency the latest plan expects for a cluster."}, []string{"cluster"}),
		utilization: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_optimizer_planned_utilization", Help: "An engine's utilization under the latest plan (0 to 1)."}, []string{"engine"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.published, err = obs.Register(reg, m.published); err != nil {
		return nil, err
	}
	if m.rejected, err = obs.Register(reg, m.rejected); err != nil {
		return nil, err
	}
	if m.quarantined, err = obs.Register(reg, m.quarantined); err != nil {
		return nil, err
	}
	if m.inQuarantine, err = obs.Register(reg, m.inQuarantine); err != nil {
		return nil, err
	}
	if m.failures, err = obs.Register(reg, m.failures); err != nil {
		return nil, err
	}
	if m.solveSecs, err = obs.Register(reg, m.solveSecs); err != nil {
		return nil, err
	}
	if m.objective, err = obs.Register(reg, m.objective); err != nil {
		return nil, err
	}
	if m.shedRPS, err = obs.Register(reg, m.shedRPS); err != nil {
		return nil, err
	}
	if m.version, err = obs.Register(reg, m.version); err != nil {
		return nil, err
	}
	if m.estimates, err = obs.Register(reg, m.estimates); err != nil {
		return nil, err
	}
	if m.deadLetter, err = obs.Register(reg, m.deadLetter); err != nil {
		return nil, err
	}
	for _, v := range []**prometheus.GaugeVec{&m.weight, &m.shedFrac, &m.demand, &m.expected, &m.utilization} {
		if *v, err = obs.Register(reg, *v); err != nil {
			return nil, err
		}
	}
	// The counters' known label values, exported at 0 from the start.
	for _, s := range []string{"instance", "solve", "publish"} { // Optimizer.round
		m.failures.WithLabelValues(s)
	}
	for _, r := range []error{fleet.ErrUnregistered, fleet.ErrEndpoint} { // fleet.Reason
		m.rejected.WithLabelValues(fleet.Reason(r))
	}
	return m, nil
}

// plan sets the per-cluster and per-engine gauges to snap, a published
// snapshot (one holding every cluster).
func (m *metrics) plan(snap *schemas.WeightSnapshot) {
	for _, v := range []*prometheus.GaugeVec{m.weight, m.shedFrac, m.demand, m.expected, m.utilization} {
		v.Reset()
	}
	for _, c := range snap.GetClusters() {
		m.shedFrac.WithLabelValues(c.GetCluster()).Set(c.GetShedFraction())
		m.demand.WithLabelValues(c.GetCluster()).Set(c.GetDemandRps())
		m.expected.WithLabelValues(c.GetCluster()).Set(c.GetExpectedLatencyMs() / 1000)
		for _, w := range c.GetWeights() {
			m.weight.WithLabelValues(c.GetCluster(), w.GetEngineId()).Set(w.GetWeight())
			m.utilization.WithLabelValues(w.GetEngineId()).Set(w.GetPlannedUtilization())
		}
	}
}
