package peers

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/obs"
)

// Drop reasons (the reason label), besides ErrMalformed and ErrOversized.
const (
	reasonMalformed = "malformed"
	reasonOversized = "oversized"
	reasonTooMany   = "too_many_peers"
	reasonOverflow  = "overflow"
)

// metrics are a Sharer's series, resolved for its cluster. They are
// labelled by cluster so several gateways can share one registry.
type metrics struct {
	peers            prometheus.Gauge
	received         prometheus.Counter
	sent, sendFailed prometheus.Counter
	dropped          map[string]prometheus.Counter // by reason
}

func newMetrics(reg prometheus.Registerer, cluster string) (*metrics, error) {
	var errs []error
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "gateway", Name: name, Help: help}, append([]string{"cluster"}, labels...)))
		errs = append(errs, err)
		return c
	}
	peers, err := obs.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "peers",
		Help: "Peer gateways heard from within 3 heartbeats (3 s) that share engine load with this one."}, []string{"cluster"}))
	errs = append(errs, err)
	received := cv("peer_reports_received_total", "Load reports of peer gateways applied.")
	dropped := cv("peer_reports_dropped_total", "Load reports of peer gateways dropped, by reason: malformed, oversized, too_many_peers, overflow (arriving faster than applied).", "reason")
	sent := cv("peer_reports_sent_total", "Load reports this gateway published, by result: ok, error.", "result")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("peer load metrics: %w", err)
	}
	m := &metrics{
		peers:      peers.WithLabelValues(cluster),
		received:   received.WithLabelValues(cluster),
		sent:       sent.WithLabelValues(cluster, "ok"),
		sendFailed: sent.WithLabelValues(cluster, "error"),
		dropped:    map[string]prometheus.Counter{},
	}
	for _, r := range []string{reasonMalformed, reasonOversized, reasonTooMany, reasonOverflow} {
		m.dropped[r] = dropped.WithLabelValues(cluster, r)
	}
	return m, nil
}
