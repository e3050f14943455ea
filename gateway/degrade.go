package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Loud degradation (docs/gateway.md, "Degradation"): a gateway that
// answers more than degradeRatio of its requests with 429 over the last
// degradeSpan, or holds an engine below its batch limit while that engine
// has no queue, says so in its log (WARN, at most once per degradeWarnEvery
// per condition, and one INFO when an announced condition ends) and in the
// gauges switchyard_gateway_rejected_ratio and
// switchyard_gateway_degraded{reason}.
const (
	// degradeSpan is the window the rejected ratio is taken over.
	degradeSpan = time.Minute
	// degradeRatio: a gateway rejecting more than this share of its
	// requests over degradeSpan is degraded.
	degradeRatio = 0.05
	// degradeMinRequests: with fewer requests in the span a gateway is
	// not judged (one 429 in three requests is noise, not degradation).
	degradeMinRequests = 20
	// degradeWarnEvery bounds the WARN lines of one condition.
	degradeWarnEvery = time.Minute
	// degradeStep is the spacing of the counter samples the span is
	// measured with: the span's ends are exact to this.
	degradeStep = time.Second
)

// Reasons of switchyard_gateway_degraded.
const (
	degradedRejecting = "rejecting"
	degradedHeld      = "held_below_batch_limit"
)

// rejection is how a request counts toward the rejected ratio.
type rejection uint8

const (
	// notCounted: not a request of demand (the gateway's own 4xx for a
	// malformed or unauthenticated request, a tenant over its quota);
	// the processor does not count it either (estimate.CountsAsDemand).
	notCounted rejection = iota
	// served: not rejected (answered by an engine, failed, canceled).
	served
	// Answered 429 by the gateway: shed by the snapshot's shed
	// fraction, by admission control, or with every engine at its limit
	// (or a shed without a reason).
	rejectedSnapshot
	rejectedAdmission
	rejectedCapacity
)

// rejectionOf is how the request of ev, answered with out, counts.
func rejectionOf(ev *schemas.RoutingEvent, out outcome) rejection {
	switch {
	case ev.FailureReason == schemas.FailureReason_FAILURE_REASON_TENANT_LIMIT:
		return notCounted
	case out.status == statusClientErr && ev.EngineId == "":
		return notCounted
	case out.status != statusShed:
		return served
	case ev.FailureReason == schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT:
		return rejectedSnapshot
	case ev.FailureReason == schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION:
		return rejectedAdmission
	}
	return rejectedCapacity
}

// degrade watches a gateway for degradation. observe is called once per
// request (two atomic adds); check, on the control loop's tick, turns the
// counts into the last minute's ratio, the gauges and the log lines;
// heldBelow is told by admission which engines it holds below their batch
// limit. Every time comes from the caller or the injected clock.
type degrade struct {
	log *slog.Logger
	now func() time.Time

	// Requests counted and rejected since start, by observe; by[i] the
	// rejected of rejection rejectedSnapshot+i.
	total, rejected atomic.Uint64
	by              [3]atomic.Uint64

	ratio     prometheus.Gauge
	rejecting prometheus.Gauge // degraded{reason="rejecting"}
	holding   prometheus.Gauge // degraded{reason="held_below_batch_limit"}

	mu       sync.Mutex
	samples  []degradeSample // oldest first, degradeStep apart, the oldest at or before now - degradeSpan
	rej      episode
	lastRej  time.Time // last WARN about rejections
	held     map[string]*episode
	lastHeld map[string]time.Time // last WARN about each engine
}

// degradeSample is the counters at a time.
type degradeSample struct {
	at              time.Time
	total, rejected uint64
	by              [3]uint64
}

// episode is a condition that holds since a time; announced: a WARN said
// so (so its end gets an INFO line).
type episode struct {
	active    bool
	since     time.Time
	announced bool
}

// newDegrade registers the degradation gauges of cluster on reg (shared
// with the gateways of the same registry) and starts the span at now().
func newDegrade(cluster string, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*degrade, error) {
	ratio, err1 := obs.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "rejected_ratio",
		Help: "Share of the requests of the last minute the gateway answered 429 (shed by the snapshot, admission control or every engine at its limit; not tenant quotas).",
	}, []string{"cluster"}))
	degraded, err2 := obs.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "degraded",
		Help: "1 while the gateway is degraded, by reason: rejecting (over 5% of the last minute's requests answered 429, with at least 20 requests), held_below_batch_limit (admission holds an engine below its batch limit while it has no queue).",
	}, []string{"cluster", "reason"}))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("degradation metrics: %w", err)
	}
	d := &degrade{
		log: log, now: now,
		ratio:     ratio.WithLabelValues(cluster),
		rejecting: degraded.WithLabelValues(cluster, degradedRejecting),
		holding:   degraded.WithLabelValues(cluster, degradedHeld),
		held:      map[string]*episode{},
		lastHeld:  map[string]time.Time{},
	}
	d.ratio.Set(0)
	d.rejecting.Set(0)
	d.holding.Set(0)
	d.samples = []degradeSample{{at: now()}}
	return d, nil
}

// observe counts one request (r: how, see rejectionOf).
func (d *degrade) observe(r rejection) {
	if r == notCounted {
		return
	}
	d.total.Add(1)
	if r >= rejectedSnapshot {
		d.rejected.Add(1)
		d.by[r-rejectedSnapshot].Add(1)
	}
}

// degradeWindow is the counts over the last degradeSpan at now.
type degradeWindow struct {
	span            time.Duration // how much of degradeSpan there is (less for a young gateway)
	total, rejected uint64
	by              [3]uint64 // snapshot, admission, capacity
}

func (w degradeWindow) ratio() float64 {
	if w.total == 0 {
		return 0
	}
	return float64(w.rejected) / float64(w.total)
}

// sample records the counters at now and returns the counts since the
// span's start. Under d.mu.
func (d *degrade) sample(now time.Time) degradeWindow {
	cur := degradeSample{at: now, total: d.total.Load(), rejected: d.rejected.Load()}
	for i := range cur.by {
		cur.by[i] = d.by[i].Load()
	}
	if last := d.samples[len(d.samples)-1]; now.Sub(last.at) >= degradeStep {
		d.samples = append(d.samples, cur)
	}
	// Keep one sample at or before the span's start: the base.
	start := now.Add(-degradeSpan)
	i := 0
	for i+1 < len(d.samples) && !d.samples[i+1].at.After(start) {
		i++
	}
	if i > 0 {
		d.samples = append(d.samples[:0], d.samples[i:]...)
	}
	base := d.samples[0]
	w := degradeWindow{span: min(now.Sub(base.at), degradeSpan), total: cur.total - base.total, rejected: cur.rejected - base.rejected}
	for i := range w.by {
		w.by[i] = cur.by[i] - base.by[i]
	}
	return w
}

// check updates the gauges and logs at now: a WARN when the gateway
// starts rejecting more than degradeRatio of the last minute's requests
// and once per degradeWarnEvery while it goes on, an INFO when it ends;
// a WARN per degradeWarnEvery for each engine still held below its
// batch limit. The control loop calls it on every tick.
func (d *degrade) check(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.sample(now)
	d.ratio.Set(w.ratio())
	bad := w.total >= degradeMinRequests && w.ratio() > degradeRatio
	attrs := func() []any {
		return []any{"rejected_ratio", w.ratio(), "rejected", w.rejected, "requests", w.total, "window", w.span,
			"shed_snapshot", w.by[0], "shed_admission", w.by[1], "shed_capacity", w.by[2]}
	}
	switch {
	case bad && !d.rej.active:
		d.rej = episode{active: true, since: now}
		d.rejecting.Set(1)
		if now.Sub(d.lastRej) >= degradeWarnEvery {
			d.rej.announced, d.lastRej = true, now
			d.log.Warn("gateway rejecting requests", attrs()...)
		}
	case bad && now.Sub(d.lastRej) >= degradeWarnEvery:
		d.rej.announced, d.lastRej = true, now
		d.log.Warn("gateway still rejecting requests", append(attrs(), "for", now.Sub(d.rej.since))...)
	case !bad && d.rej.active:
		if d.rej.announced {
			d.log.Info("gateway no longer rejecting requests", append(attrs(), "lasted", now.Sub(d.rej.since))...)
		}
		d.rej = episode{}
		d.rejecting.Set(0)
	}
	for engine, h := range d.held {
		if now.Sub(d.lastHeld[engine]) >= degradeWarnEvery {
			h.announced, d.lastHeld[engine] = true, now
			d.log.Warn("gateway still holding an engine below its batch limit while it has no queue", "engine", engine, "for", now.Sub(h.since))
		}
	}
	for engine, at := range d.lastHeld {
		if d.held[engine] == nil && now.Sub(at) >= degradeWarnEvery {
			delete(d.lastHeld, engine) // bounded by the engines held in the last minute
		}
	}
}

// heldBelow tells whether admission holds engine below its batch limit
// while the engine has no queue (its own waiting count is zero), which
// keeps requests out of free batch slots. held true starts the condition
// (a WARN naming the engine, at most once per degradeWarnEvery for it,
// repeated by check while it lasts), false ends it (an INFO if it was
// announced); switchyard_gateway_degraded{reason="held_below_batch_limit"}
// is 1 while any engine is held. Call it when the condition changes (a
// repeated call with the same value does nothing: one lock and map
// lookup), and with false for an engine that leaves the table while
// held. Safe for concurrent use; the time is the gateway's clock.
func (d *degrade) heldBelow(engine string, held bool) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.held[engine]
	switch {
	case held && h == nil:
		h = &episode{active: true, since: now}
		d.held[engine] = h
		if now.Sub(d.lastHeld[engine]) >= degradeWarnEvery {
			h.announced, d.lastHeld[engine] = true, now
			d.log.Warn("gateway holding an engine below its batch limit while it has no queue", "engine", engine)
		}
	case !held && h != nil:
		delete(d.held, engine)
		if h.announced {
			d.log.Info("gateway no longer holding an engine below its batch limit", "engine", engine, "lasted", now.Sub(h.since))
		}
	default:
		return
	}
	if len(d.held) > 0 {
		d.holding.Set(1)
	} else {
		d.holding.Set(0)
	}
}
