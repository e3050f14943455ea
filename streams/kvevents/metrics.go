package kvevents

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/schemas"
)

// metrics are the relay's; every label is an engine from the
// configuration, an event type or a resync reason, all bounded.
type metrics struct {
	batches, gaps, replayed, decodeErrors, publishErrors *prometheus.CounterVec
	events, resyncs                                      *prometheus.CounterVec
	connected                                            *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, engines []Engine) (*metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_kvevents_" + name, Help: help}, labels)
	}
	m := &metrics{
		batches:       counter("batches_total", "KV event batches published to Kafka, by engine.", "engine"),
		events:        counter("events_total", "KV events received, by engine and type (BlockStored, BlockRemoved, AllBlocksCleared, other: not relayed).", "engine", "type"),
		gaps:          counter("gaps_total", "Sequence gaps: batches an engine published that the relay did not receive live.", "engine"),
		replayed:      counter("replayed_batches_total", "Batches fetched from engines' replay sockets.", "engine"),
		resyncs:       counter("resyncs_total", "Records telling consumers to drop an engine's blocks, by reason (first_contact, gap, restart).", "engine", "reason"),
		decodeErrors:  counter("decode_errors_total", "ZMQ messages that were not KV event batches, dead-lettered.", "engine"),
		publishErrors: counter("publish_errors_total", "Records Kafka did not take.", "engine"),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_kvevents_connected",
			Help: "1 while the relay is connected to the engine's PUB socket."}, []string{"engine"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.batches, m.events, m.gaps, m.replayed, m.resyncs, m.decodeErrors, m.publishErrors, m.connected} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering kv events metrics: %w", err)
			}
		}
	}
	for _, e := range engines { // exported as 0 before anything happens
		for _, v := range []*prometheus.CounterVec{m.batches, m.gaps, m.replayed, m.decodeErrors, m.publishErrors} {
			v.WithLabelValues(e.ID)
		}
		for _, k := range []Kind{KindStored, KindRemoved, KindCleared, KindOther} {
			m.events.WithLabelValues(e.ID, eventLabel(k))
		}
		m.connected.WithLabelValues(e.ID)
	}
	return m, nil
}

func eventLabel(k Kind) string { return k.String() }

func resyncLabel(r schemas.KVResyncReason) string {
	switch r {
	case schemas.KVResyncReason_KV_RESYNC_REASON_FIRST_CONTACT:
		return "first_contact"
	case schemas.KVResyncReason_KV_RESYNC_REASON_GAP:
		return "gap"
	case schemas.KVResyncReason_KV_RESYNC_REASON_RESTART:
		return "restart"
	}
	return "other"
}
