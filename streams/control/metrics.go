package control

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/obs"
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
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.published, err = obs.Register(reg, m.published); err != nil {
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
	return m, nil
}
