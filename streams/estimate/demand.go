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
	// prompted counts the successful requests whose event carries
	// prompt_tokens (the others' prompt size comes from the engines'
	// counters, see demandEstimate).
	prompted float64
	// Of requests, those a gateway answered 429 itself (status SHED), and
	// of those the snapshot's and admission control's.
	rejected, shedSnapshot, shedAdmission uint32
	// models counts requests by the model they named (see addModel).
	models map[string]uint32
}

// empty reports whether d counted nothing.
func (d *Demand) empty() bool {
	return d.requests == 0 && d.tokened == 0 && d.promptSum == 0 && d.outputSum == 0 && d.prompted == 0 &&
		d.rejected == 0 && d.shedSnapshot == 0 && d.shedAdmission == 0 && len(d.models) == 0
}

// maxPaneModels bounds the entries of a cluster's pane's requests by
// model: 63 models and "", which counts the requests of later models
// with those naming none.
const maxPaneModels = 64

// addModel counts n requests of model m: under "" when m is empty,
// longer than a model id may be, or new past maxPaneModels models.
func (d *Demand) addModel(m string, n uint32) {
	if len(m) > schemas.MaxModelIDBytes {
		m = ""
	}
	if _, ok := d.models[m]; !ok && m != "" && len(d.models) >= maxPaneModels-1 {
		m = "" // the last entry is kept for ""
	}
	if d.models == nil {
		d.models = map[string]uint32{}
	}
	d.models[m] += n
}

// Add folds a validated routing event in. A request counts toward demand
// once, at its arrival, whatever its outcome (shed, rejected and failed
// requests were demand too; see CountsAsDemand): demand is what was
// offered, not what was served. Those the gateway answered 429 are also
// counted as rejected, by reason. The token mix comes from successful
// ones. prompt_tokens 0 means the gateway did not learn the usage, not an
// empty prompt; an estimated one (usage_estimated) is not the engine's
// count and stays out of the mix too.
func (d *Demand) Add(ev *schemas.RoutingEvent) {
	if CountsAsDemand(ev) {
		d.requests++
		d.addModel(ev.GetModel(), 1)
		if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_SHED {
			d.rejected++
			switch ev.GetFailureReason() {
			case schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT:
				d.shedSnapshot++
			case schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION:
				d.shedAdmission++
			}
		}
	}
	if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_OK {
		d.tokened++
		d.outputSum += float64(ev.GetOutputTokens())
		if pt := ev.GetPromptTokens(); pt > 0 && !ev.GetUsageEstimated() {
			d.prompted++
			d.promptSum += float64(pt)
		}
	}
}

// CountsAsDemand reports whether a routing event counts one request of
// demand in the pane of its event time (the request's arrival). Every
// request counts once: the arrival record of a long request
// (REQUEST_STATUS_IN_PROGRESS) counts and its final record
// (counted_at_arrival) does not; shed and rejected requests count; a
// request the gateway itself refused as malformed or unauthenticated (a
// client error with no engine tried) and one over its tenant's own quota
// do not, so cheap bad requests cannot make the optimizer shed the
// well-behaved ones.
func CountsAsDemand(ev *schemas.RoutingEvent) bool {
	switch {
	case ev.GetCountedAtArrival():
		return false
	case ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR && ev.GetEngineId() == "":
		return false
	case ev.GetFailureReason() == schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT:
		return false
	}
	return true
}

// Holt smoothing constants for the forecast over a window's panes.
const (
	holtAlpha = 0.5
	holtBeta  = 0.3
)

// demandEstimate merges a cluster's panes (one entry per pane of the
// window, nil where the cluster had no traffic) into a DemandEstimate.
// The forecast is Holt's linear smoothing of the per-pane rates, one
// slide ahead, floored at zero. mean_prompt_tokens averages the events'
// prompt_tokens where they carry it and, for the successful requests
// whose events do not, the prompt tokens per request the serving engine
// reported over the window (unsized: their count and that sum, see
// promptFallback).
func demandEstimate(cluster string, start, end int64, slideMs int64, panes []*Demand, unsized promptFallback) *schemas.DemandEstimate {
	var tot Demand
	slide := float64(slideMs) / 1000
	var level, trend float64
	for i, p := range panes {
		var rate float64
		if p != nil {
			tot.merge(p)
			rate = float64(p.requests) / slide
		}
		if i == 0 {
			level = rate
			continue
		}
		prev := level
		level = float64(holtAlpha*rate) + float64((1-holtAlpha)*(level+trend))
		trend = float64(holtBeta*(level-prev)) + float64((1-holtBeta)*trend)
	}
	out := &schemas.DemandEstimate{
		SchemaVersion: schemas.Version, Cluster: cluster, WindowStartUnixMs: start, WindowEndUnixMs: end,
		RequestCount:  tot.requests,
		RejectedCount: tot.rejected, ShedSnapshotCount: tot.shedSnapshot, ShedAdmissionCount: tot.shedAdmission,
		DemandRps:   float64(tot.requests) / (float64(end-start) / 1000),
		ForecastRps: math.Max(0, level+trend),
	}
	if tot.tokened > 0 {
		out.MeanOutputTokens = tot.outputSum / tot.tokened
	}
	out.Models = modelDemand(tot.models, float64(end-start)/1000)
	if n := tot.prompted + unsized.n; n > 0 {
		out.MeanPromptTokens = (tot.promptSum + unsized.sum) / n
	}
	return out
}

// promptFallback is the prompt size of a cluster's successful requests
// whose events lack prompt_tokens: n requests, sum their estimated prompt
// tokens (each its engine's prompt tokens per request over the window).
type promptFallback struct{ n, sum float64 }

// Network accumulates one (cluster, engine) pair's latency samples, and
// the pair's successful requests whose events lack prompt_tokens.
//
// Network latency comes, in order of preference, from the gateway's own
// round-trip measurement (network_rtt_ms), from streaming requests'
// gateway TTFT minus the engine's TTFT (per request when the event has
// engine_ttft_ms, else against the engine's mean over the window). A
// non-streaming response's "TTFT" is its whole response time, so it is
// never a network sample.
type Network struct {
	// Sums are fixed point (see toFixed). Direct round-trip
	// measurements.
	rttSum int64
	rttN   uint32
	// Streaming samples with both gateway and engine TTFT.
	diffSum int64
	diffN   uint32
	// Streaming samples with only the gateway TTFT.
	ttftSum int64
	ttftN   uint32
	// Successful requests without prompt_tokens.
	unsized uint32
}

// Add folds a validated routing event in.
func (n *Network) Add(ev *schemas.RoutingEvent) {
	if rtt := ev.GetNetworkRttMs(); rtt > 0 {
		n.rttSum += toFixed(rtt)
		n.rttN++
	}
	if ev.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_OK {
		return
	}
	if ev.GetPromptTokens() == 0 {
		n.unsized++
	}
	if !ev.GetStream() || ev.GetTtftMs() <= 0 {
		return
	}
	if ev.GetEngineTtftMs() > 0 {
		n.diffSum += toFixed(ev.GetTtftMs() - ev.GetEngineTtftMs())
		n.diffN++
		return
	}
	n.ttftSum += toFixed(ev.GetTtftMs())
	n.ttftN++
}

// Network sums are kept in fixed point, fixedScale units per ms (about a
// nanosecond each): integer sums are exact, so an estimate does not
// depend on the order its samples were added in. The routing events of
// one (cluster, engine) come from several partitions, read in an order
// that differs between the live processor and a replay; float sums made
// their means differ in the last bit. Samples are clamped to
// ±maxSampleMs so sums cannot overflow.
const (
	fixedScale  = 1 << 20
	maxSampleMs = 1e7
)

func toFixed(ms float64) int64 {
	return int64(math.Round(math.Max(-maxSampleMs, math.Min(maxSampleMs, ms)) * fixedScale))
}

// fixedMean is the mean of n samples summing to sum (fixed point), in ms.
func fixedMean(sum int64, n uint32) float64 { return float64(sum) / fixedScale / float64(n) }

func (n *Network) merge(o *Network) {
	n.rttSum += o.rttSum
	n.rttN += o.rttN
	n.diffSum += o.diffSum
	n.diffN += o.diffN
	n.ttftSum += o.ttftSum
	n.ttftN += o.ttftN
	n.unsized += o.unsized
}

// networkEstimate sets *out to the mean directly measured round trip when
// events carry network_rtt_ms; otherwise the mean of gateway TTFT minus
// engine TTFT per streaming request when they carry engine_ttft_ms;
// otherwise the mean streaming gateway TTFT minus the engine's mean
// reported TTFT over the same window (engineTTFT, 0 when unknown, in which
// case no estimate is made and it returns false). Floored at zero.
func networkEstimate(out *schemas.NetworkEstimate, cluster, engine string, end int64, n *Network, engineTTFT float64) bool {
	out.SchemaVersion, out.Cluster, out.EngineId, out.WindowEndUnixMs = schemas.Version, cluster, engine, end
	switch {
	case n.rttN > 0:
		out.RttMs = fixedMean(n.rttSum, n.rttN)
		out.Samples = n.rttN
	case n.diffN > 0:
		out.RttMs = fixedMean(n.diffSum, n.diffN)
		out.Samples = n.diffN
	case n.ttftN > 0 && engineTTFT > 0:
		out.RttMs = fixedMean(n.ttftSum, n.ttftN) - engineTTFT
		out.Samples = n.ttftN
	default:
		return false
	}
	if !finite(out.RttMs) || out.RttMs < 0 {
		out.RttMs = 0
	}
	return true
}

// modelDemand returns counts as ModelDemand sorted by model over a window
// of secs seconds; nil when no request named a model.
func modelDemand(counts map[string]uint32, secs float64) []*schemas.ModelDemand {
	named := false
	for m := range counts {
		named = named || m != ""
	}
	if !named {
		return nil
	}
	out := make([]*schemas.ModelDemand, 0, len(counts))
	for _, m := range sortedKeys(counts) {
		n := counts[m]
		out = append(out, &schemas.ModelDemand{Model: m, RequestCount: n, DemandRps: float64(n) / secs})
	}
	return out
}
