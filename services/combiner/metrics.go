package combiner

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// metrics are the combiner's, counted by kgo hooks on its client
// (process.RunCombiner counts nothing itself).
type metrics struct {
	partials, estimates string

	read      prometheus.Counter
	published prometheus.Counter
	windows   prometheus.Counter
	windowEnd prometheus.Gauge

	mu      sync.Mutex
	lastEnd int64 // window end (Unix ms) of the last estimate acknowledged
}

var (
	_ kgo.HookFetchRecordBuffered     = (*metrics)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*metrics)(nil)
)

// Metrics registers the combiner's metrics with reg and returns the hooks
// (kgo.WithHooks) of the combiner's client that count them.
func Metrics(reg prometheus.Registerer, topicPrefix string) (kgo.Hook, error) {
	return newMetrics(reg, process.PartialsTopic(topicPrefix), streams.TopicsFor(topicPrefix).Estimates)
}

func newMetrics(reg prometheus.Registerer, partials, estimates string) (*metrics, error) {
	m := &metrics{
		partials: partials, estimates: estimates,
		read: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_combiner_partials_read_total", Help: "Partition states (partials) the combiner read.",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_combiner_estimates_published_total", Help: "Estimates the combiner published and Kafka acknowledged.",
		}),
		windows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_combiner_windows_fired_total", Help: "Windows every input partition had passed, whose estimates the combiner published.",
		}),
		windowEnd: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_combiner_window_end_seconds", Help: "End (Unix seconds) of the last window the combiner published.",
		}),
	}
	var err error
	if m.read, err = obs.Register(reg, m.read); err != nil {
		return nil, err
	}
	if m.published, err = obs.Register(reg, m.published); err != nil {
		return nil, err
	}
	if m.windows, err = obs.Register(reg, m.windows); err != nil {
		return nil, err
	}
	if m.windowEnd, err = obs.Register(reg, m.windowEnd); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) OnFetchRecordBuffered(r *kgo.Record) {
	if r.Topic == m.partials && process.IsPartial(r) {
		m.read.Inc()
	}
}

// OnProduceRecordUnbuffered counts an estimate and, at the first estimate
// of a later window (windows are published in order, each estimate dated
// its window's end), a window.
func (m *metrics) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil || r.Topic != m.estimates {
		return
	}
	m.published.Inc()
	end := r.Timestamp.UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	if end > m.lastEnd {
		m.lastEnd = end
		m.windows.Inc()
		m.windowEnd.Set(float64(end) / 1000)
	}
}
