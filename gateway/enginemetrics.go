package gateway

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// engineCollector exports, at each scrape, the state of every engine of
// the gateway's current table: its requests in flight from this gateway,
// its share of the plan, and whether the picker may send it requests
// (and if not, why). These are what decide whether an engine gets
// traffic, read from the picker itself, so an engine the plan weights
// that takes no requests shows why (docs/gateway.md, metrics).
type engineCollector struct {
	g                        *Gateway
	inFlight, share, blocked *prometheus.Desc
}

func newEngineCollector(g *Gateway) *engineCollector {
	labels := prometheus.Labels{"cluster": g.cfg.cluster}
	return &engineCollector{
		g: g,
		inFlight: prometheus.NewDesc("switchyard_gateway_engine_in_flight",
			"Requests this gateway has in flight on the engine (an engine of the current plan).", []string{"engine"}, labels),
		share: prometheus.NewDesc("switchyard_gateway_engine_share",
			"The engine's share of the cluster's traffic in the plan the gateway routes on (its weight, normalised).", []string{"engine"}, labels),
		blocked: prometheus.NewDesc("switchyard_gateway_engine_unavailable",
			"1 while the picker sends the engine no request for the reason: ejected (outlier ejection), health (failed active health checks), signal (its own signals say unhealthy or no ready replica).",
			[]string{"engine", "reason"}, labels),
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.share
	ch <- c.blocked
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	rt := c.g.cur.Load()
	if rt == nil || rt.table == nil {
		return
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for i := 0; i < rt.table.Len(); i++ {
		e := rt.table.Engine(i)
		s := e.State
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight()), e.ID)
		ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, e.Share, e.ID)
		ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, b(s.Ejected()), e.ID, "ejected")
		ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, b(s.Down()), e.ID, "health")
		ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, b(s.SignalDown()), e.ID, "signal")
	}
}

// registerEngineCollector registers g's engine collector (one per
// gateway: the cluster label tells gateways sharing a registry apart).
func registerEngineCollector(g *Gateway) error {
	if err := g.cfg.registerer.Register(newEngineCollector(g)); err != nil {
		return fmt.Errorf("gateway engine metrics: %w", err)
	}
	return nil
}
