package processor

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// instanceMetrics are a partitioned instance's metrics, counted by kgo
// hooks on its client (the library's Instance counts nothing itself).
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

// PartitionedMetrics registers a partitioned instance's metrics with reg
// and returns the hooks (kgo.WithHooks) of the instance's client that
// count them; owned reports the partitions the instance processes.
func PartitionedMetrics(reg prometheus.Registerer, topicPrefix string, owned func() int) (kgo.Hook, error) {
	return newInstanceMetrics(reg, streams.TopicsFor(topicPrefix), process.PartialsTopic(topicPrefix), owned)
}

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
	if err == nil && r.Topic == m.partials && process.IsPartial(r) {
		m.published.Inc()
	}
}
