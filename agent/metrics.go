package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/obs"
)

type metrics struct {
	scrapes       *prometheus.CounterVec
	scrapeErrors  *prometheus.CounterVec
	published     prometheus.Counter
	publishErrors prometheus.Counter
	duration      prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_agent_scrapes_total", Help: "Engine scrapes by outcome (ok, error).",
		}, []string{"outcome"}),
		scrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_agent_scrape_errors_total", Help: "Failed scrapes (no answer, non-200 status or unparsable /metrics) by engine.",
		}, []string{"engine"}),
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
	if m.scrapes, err = obs.Register(reg, m.scrapes); err != nil {
		return nil, err
	}
	if m.scrapeErrors, err = obs.Register(reg, m.scrapeErrors); err != nil {
		return nil, err
	}
	if m.published, err = obs.Register(reg, m.published); err != nil {
		return nil, err
	}
	if m.publishErrors, err = obs.Register(reg, m.publishErrors); err != nil {
		return nil, err
	}
	if m.duration, err = obs.Register(reg, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}
