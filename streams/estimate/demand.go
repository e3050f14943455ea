package estimate

import (
	"math"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Demand accumulates one cluster's routing events over a pane.
type Demand struct {
	requests             uint32
	tokened              float64
	promptSum, outputSum float64
}

// Add folds a validated routing event in. Every request counts toward
// demand whatever its outcome (shed and failed requests were demand too);
// the token mix comes from successful ones.
func (d *Demand) Add(ev *schemas.RoutingEvent) {
	d.requests++
	if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_OK {
		d.tokened++
		d.promptSum += float64(ev.GetPromptTokens())
		d.outputSum += float64(ev.GetOutputTokens())
	}
}

// Holt smoothing constants for the forecast over a window's panes.
const (
	holtAlpha = 0.5
	holtBeta  = 0.3
)

// demandEstimate merges a cluster's panes (one entry per pane of the
// window, nil where the cluster had no traffic) into a DemandEstimate.
// The forecast is Holt's linear smoothing of the per-pane rates, one
// slide ahead, floored at zero.
func demandEstimate(cluster string, start, end int64, slideMs int64, panes []*Demand) *schemas.DemandEstimate {
	var tot Demand
	slide := float64(slideMs) / 1000
	var level, trend float64
	for i, p := range panes {
		var rate float64
		if p != nil {
			tot.requests += p.requests
			tot.tokened += p.tokened
			tot.promptSum += p.promptSum
			tot.outputSum += p.outputSum
			rate = float64(p.requests) / slide
		}
		if i == 0 {
			level = rate
			continue
		}
		prev := level
		level = holtAlpha*rate + (1-holtAlpha)*(level+trend)
		trend = holtBeta*(level-prev) + (1-holtBeta)*trend
	}
	out := &schemas.DemandEstimate{
		SchemaVersion: schemas.Version, Cluster: cluster, WindowStartUnixMs: start, WindowEndUnixMs: end,
		RequestCount: tot.requests,
		DemandRps:    float64(tot.requests) / (float64(end-start) / 1000),
		ForecastRps:  math.Max(0, level+trend),
	}
	if tot.tokened > 0 {
		out.MeanPromptTokens = tot.promptSum / tot.tokened
		out.MeanOutputTokens = tot.outputSum / tot.tokened
	}
	return out
}

// Network accumulates one (cluster, engine) pair's latency samples.
type Network struct {
	// Samples with both gateway and engine TTFT.
	diffSum float64
	diffN   uint32
	// Samples with only the gateway TTFT.
	ttftSum float64
	ttftN   uint32
}

// Add folds a successful routing event in.
func (n *Network) Add(ev *schemas.RoutingEvent) {
	if ev.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_OK || ev.GetTtftMs() <= 0 {
		return
	}
	if ev.GetEngineTtftMs() > 0 {
		n.diffSum += ev.GetTtftMs() - ev.GetEngineTtftMs()
		n.diffN++
		return
	}
	n.ttftSum += ev.GetTtftMs()
	n.ttftN++
}

func (n *Network) merge(o *Network) {
	n.diffSum += o.diffSum
	n.diffN += o.diffN
	n.ttftSum += o.ttftSum
	n.ttftN += o.ttftN
}

// networkEstimate sets *out to the mean of gateway TTFT minus engine
// TTFT per request when events carry engine_ttft_ms; otherwise the mean
// gateway TTFT minus the engine's mean reported TTFT over the same window
// (engineTTFT, 0 when unknown, in which case no estimate is made and it
// returns false). Floored at zero.
func networkEstimate(out *schemas.NetworkEstimate, cluster, engine string, end int64, n *Network, engineTTFT float64) bool {
	out.SchemaVersion, out.Cluster, out.EngineId, out.WindowEndUnixMs = schemas.Version, cluster, engine, end
	switch {
	case n.diffN > 0:
		out.RttMs = n.diffSum / float64(n.diffN)
		out.Samples = n.diffN
	case n.ttftN > 0 && engineTTFT > 0:
		out.RttMs = n.ttftSum/float64(n.ttftN) - engineTTFT
		out.Samples = n.ttftN
	default:
		return false
	}
	if !finite(out.RttMs) || out.RttMs < 0 {
		out.RttMs = 0
	}
	return true
}
