package process

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

type metrics struct {
	records     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	estimates   *prometheus.CounterVec
	windows     prometheus.Counter
	checkpoints prometheus.Counter
	watermark   prometheus.Gauge
	openPanes   prometheus.Gauge

	// outcomes[input][Outcome] are the records counters, resolved once.
	outcomes [2][4]prometheus.Counter
	// published[estimateKind] are the estimates counters, resolved once.
	published [3]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_processor_records_total",
			Help: "Input records by input (signals, routing_events: routing events and arrival records) and outcome (accepted, late, dead_lettered, replayed).",
		}, []string{"input", "outcome"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_processor_dead_letters_total",
			Help: "Records written to the dead-letter topic, by reason code.",
		}, []string{"reason"}),
		estimates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_processor_estimates_published_total",
			Help: "Estimates acknowledged by Kafka, by kind (engine, demand, network).",
		}, []string{"kind"}),
		windows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_processor_windows_fired_total", Help: "Windows completed by the watermark.",
		}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_processor_checkpoints_total", Help: "Checkpoints written.",
		}),
		watermark: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_processor_watermark_seconds", Help: "Event-time watermark (Unix seconds).",
		}),
		openPanes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_processor_open_panes", Help: "Panes (slide-long slices of window state) held in memory.",
		}),
	}
	if reg == nil {
		m.resolve()
		return m, nil
	}
	var err error
	if m.records, err = obs.Register(reg, m.records); err != nil {
		return nil, err
	}
	if m.deadLetters, err = obs.Register(reg, m.deadLetters); err != nil {
		return nil, err
	}
	if m.estimates, err = obs.Register(reg, m.estimates); err != nil {
		return nil, err
	}
	if m.windows, err = obs.Register(reg, m.windows); err != nil {
		return nil, err
	}
	if m.checkpoints, err = obs.Register(reg, m.checkpoints); err != nil {
		return nil, err
	}
	if m.watermark, err = obs.Register(reg, m.watermark); err != nil {
		return nil, err
	}
	if m.openPanes, err = obs.Register(reg, m.openPanes); err != nil {
		return nil, err
	}
	m.resolve()
	return m, nil
}

func (m *metrics) resolve() {
	for i, in := range []string{"signals", "routing_events"} {
		for o, out := range []string{"accepted", "late", "dead_lettered", "replayed"} {
			m.outcomes[i][o] = m.records.WithLabelValues(in, out)
		}
	}
	for k, kind := range [3]string{estimate.KindEngine, estimate.KindDemand, estimate.KindNetwork} { // estimateKind order
		m.published[k] = m.estimates.WithLabelValues(kind)
	}
	// The dead-letter codes Handle produces, exported at 0.
	for _, code := range []string{estimate.ReasonUndecodable, estimate.ReasonMissingField, estimate.ReasonInvalidValue,
		estimate.ReasonFutureTime, estimate.ReasonInvalidTime, fleet.ErrUnregistered.Error(), fleet.ErrEndpoint.Error()} {
		m.deadLetters.WithLabelValues(code)
	}
}
