package process

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams"
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

// instanceMetrics are a partitioned processor's metrics (in place of the
// single mode's), counted by kgo hooks on its client (clientOpts).
type instanceMetrics struct {
	inputs   map[string]bool
	partials string

	records   prometheus.Counter
	published prometheus.Counter
}

var (
	_ kgo.HookFetchRecordBuffered     = (*instanceMetrics)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*instanceMetrics)(nil)
)

// newInstanceMetrics registers a partitioned processor's metrics with reg
// (nil: none); owned reports the partitions it processes.
func newInstanceMetrics(reg prometheus.Registerer, topics streams.Topics, partials string, owned func() int) (*instanceMetrics, error) {
	m := &instanceMetrics{
		inputs:   map[string]bool{topics.Signals: true, topics.RoutingEvents: true, topics.RoutingArrivals: true},
		partials: partials,
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_processor_partitioned_records_read_total",
			Help: "Input records (signals, routing events and arrival records) a partitioned instance read, re-reads after a rebalance included.",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_processor_partials_published_total",
			Help: "Partition states (partials) a partitioned instance published and Kafka acknowledged.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.records, err = obs.Register(reg, m.records); err != nil {
		return nil, err
	}
	if m.published, err = obs.Register(reg, m.published); err != nil {
		return nil, err
	}
	if _, err = obs.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_processor_owned_partitions",
		Help: "Input partitions a partitioned instance processes now.",
	}, func() float64 { return float64(owned()) })); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *instanceMetrics) OnFetchRecordBuffered(r *kgo.Record) {
	if m.inputs[r.Topic] {
		m.records.Inc()
	}
}

func (m *instanceMetrics) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err == nil && r.Topic == m.partials && IsPartial(r) {
		m.published.Inc()
	}
}
