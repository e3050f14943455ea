package agent

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	scrapes       *prometheus.CounterVec
	published     prometheus.Counter
	publishErrors prometheus.Counter
	duration      prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_agent_scrapes_total", Help: "Engine scrapes by outcome (ok, error).",
		}, []string{"outcome"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_agent_signals_published_total", Help: "Engine signals acknowledged by Kafka.",
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_agent_publish_errors_total", Help: "Engine signals Kafka did not take (buffer full or produce error).",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "switchyard_agent_scrape_duration_seconds", Help: "Time to fetch and parse one engine's /metrics.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.scrapes, err = register(reg, m.scrapes); err != nil {
		return nil, err
	}
	if m.published, err = register(reg, m.published); err != nil {
		return nil, err
	}
	if m.publishErrors, err = register(reg, m.publishErrors); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name (several services in one process may share a Registerer).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if ex, ok := are.ExistingCollector.(T); ok {
				return ex, nil
			}
		}
		return c, fmt.Errorf("registering %s metrics: %w", "agent", err)
	}
	return c, nil
}
