package processor

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	records     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	estimates   *prometheus.CounterVec
	windows     prometheus.Counter
	checkpoints prometheus.Counter
	watermark   prometheus.Gauge
	openPanes   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_processor_records_total",
			Help: "Input records by input (signals, routing_events) and outcome (accepted, late, dead_lettered, replayed).",
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
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.records, m.deadLetters, m.estimates, m.windows, m.checkpoints, m.watermark, m.openPanes} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, fmt.Errorf("registering processor metrics: %w", err)
		}
	}
	return m, nil
}
