package console

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// Bounds of the state the console keeps from Kafka.
const (
	// maxObs is how many observations per engine and latency kind the
	// profile charts show (the latest).
	maxObs = 300
	// bucketMs is the width of a request-rate bucket.
	bucketMs = 10_000
	// rateSpan is the span the live rates are averaged over.
	rateSpan = time.Minute
	// maxEstHist is how many of each engine's estimates (windows) the
	// console keeps for the diff page's input changes and the timeline:
	// two hours at the processor's default 10 s slide.
	maxEstHist = 720
	// maxDeadLetters is how many recent dead letters the timeline keeps.
	maxDeadLetters = 200
)

// live is what the console has read from Kafka.
type live struct {
	history time.Duration

	mu        sync.Mutex
	engines   map[string]*engineLive
	clusters  map[string]*clusterLive
	watermark int64 // latest estimate window end, Unix ms
	estSeen   time.Time
	counts    counts
	// deadLetters are the latest maxDeadLetters dead letters, oldest
	// first.
	deadLetters []deadLetter
}

// deadLetter is one record on the dead-letter topic.
type deadLetter struct {
	ms             int64
	reason, origin string
}

// counts are the records the console consumed.
type counts struct {
	Estimates, Signals, RoutingEvents, Invalid, DeadLetters uint64
}

// engineLive is one engine's latest estimate and recent observations.
type engineLive struct {
	est *schemas.EngineEstimate
	// hist holds the engine's latest maxEstHist estimates, by window end.
	hist      []*schemas.EngineEstimate
	ttft      ring
	tbot      ring
	lastSigMs int64
}

// obsPoint is one observation at an event time.
type obsPoint struct {
	ms int64
	estimate.Obs
}

// ring keeps the latest maxObs observations.
type ring struct {
	pts  []obsPoint
	next int
}

func (r *ring) add(p obsPoint) {
	if len(r.pts) < maxObs {
		r.pts = append(r.pts, p)
		return
	}
	r.pts[r.next] = p
	r.next = (r.next + 1) % maxObs
}

func (r *ring) all() []obsPoint { return append([]obsPoint(nil), r.pts...) }

// clusterLive is one cluster's request counts by time bucket and its
// latest demand estimate.
type clusterLive struct {
	buckets map[int64]*rateBucket
	demand  *schemas.DemandEstimate
	// gateways: each gateway instance's latest routing event (by event
	// time), at most maxGateways per cluster.
	gateways map[string]gatewaySeen
}

// maxGateways bounds the gateway instances the console tracks per
// cluster; beyond it the one heard from longest ago is forgotten.
const maxGateways = 256

// gatewaySeen is what a gateway's latest routing event says: the
// snapshot version it routed on, and when.
type gatewaySeen struct {
	Version uint64
	Ms      int64
}

// seen records gateway id's event at ms routed on version.
func (c *clusterLive) seen(id string, version uint64, ms int64) {
	if c.gateways == nil {
		c.gateways = map[string]gatewaySeen{}
	}
	if old, ok := c.gateways[id]; ok && old.Ms > ms {
		return
	}
	if _, ok := c.gateways[id]; !ok && len(c.gateways) >= maxGateways {
		oldest := ""
		for g, s := range c.gateways {
			if oldest == "" || s.Ms < c.gateways[oldest].Ms {
				oldest = g
			}
		}
		delete(c.gateways, oldest)
	}
	c.gateways[id] = gatewaySeen{Version: version, Ms: ms}
}

// gatewayRow is one gateway of a cluster as the console saw it.
type gatewayRow struct {
	ID string
	gatewaySeen
}

// gateways lists cluster's gateways by id.
func (l *live) gateways(cluster string) []gatewayRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clusters[cluster]
	if c == nil {
		return nil
	}
	out := make([]gatewayRow, 0, len(c.gateways))
	for id, s := range c.gateways {
		out = append(out, gatewayRow{ID: id, gatewaySeen: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// rateBucket counts one bucket's requests: answered, by outcome (Total:
// every request answered, from its final record), and offered (the
// requests that count as demand, estimate.CountsAsDemand, once each: a
// long request's arrival record counts, its final record does not) with
// those of them the gateways answered 429 (Rejected), by reason.
type rateBucket struct {
	Total, OK, Errors, Shed, ClientErrors, Canceled uint64
	Offered, Rejected, RejSnapshot, RejAdmission    uint64
	// TTFTSumMs over TTFTCount and E2ESumMs over E2ECount: the
	// gateway-measured TTFT and end-to-end latency of the served requests
	// (status OK), for the observed series beside the expected latency.
	TTFTSumMs, E2ESumMs float64
	TTFTCount, E2ECount uint64
}

func newLive(history time.Duration) *live {
	return &live{history: history, engines: map[string]*engineLive{}, clusters: map[string]*clusterLive{}}
}

func (l *live) engine(id string) *engineLive {
	e := l.engines[id]
	if e == nil {
		e = &engineLive{}
		l.engines[id] = e
	}
	return e
}

func (l *live) cluster(id string) *clusterLive {
	c := l.clusters[id]
	if c == nil {
		c = &clusterLive{buckets: map[int64]*rateBucket{}}
		l.clusters[id] = c
	}
	return c
}

// addEstimate keeps the latest estimate of each engine and cluster.
func (l *live) addEstimate(est *schemas.Estimate, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts.Estimates++
	end := est.WindowEndUnixMs()
	if end > l.watermark {
		l.watermark = end
		l.estSeen = now
	}
	switch k := est.GetKind().(type) {
	case *schemas.Estimate_Engine:
		e := l.engine(k.Engine.GetEngineId())
		if e.est == nil || k.Engine.GetWindowEndUnixMs() >= e.est.GetWindowEndUnixMs() {
			e.est = k.Engine
		}
		e.keep(k.Engine)
	case *schemas.Estimate_Demand:
		c := l.cluster(k.Demand.GetCluster())
		if c.demand == nil || k.Demand.GetWindowEndUnixMs() >= c.demand.GetWindowEndUnixMs() {
			c.demand = k.Demand
		}
	}
}

// keep inserts est into the engine's history by window end (a window
// estimated again replaces the earlier estimate), dropping the oldest
// beyond maxEstHist.
func (e *engineLive) keep(est *schemas.EngineEstimate) {
	end := est.GetWindowEndUnixMs()
	i := sort.Search(len(e.hist), func(i int) bool { return e.hist[i].GetWindowEndUnixMs() >= end })
	switch {
	case i < len(e.hist) && e.hist[i].GetWindowEndUnixMs() == end:
		e.hist[i] = est
		return
	case i == 0 && len(e.hist) >= maxEstHist:
		return // older than everything kept
	}
	e.hist = slices.Insert(e.hist, i, est)
	if len(e.hist) > maxEstHist {
		e.hist = slices.Delete(e.hist, 0, len(e.hist)-maxEstHist)
	}
}

// at returns the engine's latest estimate of a window ending at or
// before ms (nil: none kept).
func (e *engineLive) at(ms int64) *schemas.EngineEstimate {
	i := sort.Search(len(e.hist), func(i int) bool { return e.hist[i].GetWindowEndUnixMs() > ms })
	if i == 0 {
		return nil
	}
	return e.hist[i-1]
}

// estimateAt returns engine id's latest estimate of a window ending at or
// before ms: the estimate the optimizer planned snapshot version ms with
// (nil: the console keeps none).
func (l *live) estimateAt(id string, ms int64) *schemas.EngineEstimate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.engines[id]; e != nil {
		return e.at(ms)
	}
	return nil
}

// histories returns a copy of every engine's estimate history.
func (l *live) histories() map[string][]*schemas.EngineEstimate {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]*schemas.EngineEstimate, len(l.engines))
	for id, e := range l.engines {
		if len(e.hist) > 0 {
			out[id] = slices.Clone(e.hist)
		}
	}
	return out
}

// addDeadLetter records one dead letter.
func (l *live) addDeadLetter(d deadLetter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts.DeadLetters++
	l.deadLetters = append(l.deadLetters, d)
	if len(l.deadLetters) > maxDeadLetters {
		l.deadLetters = slices.Delete(l.deadLetters, 0, len(l.deadLetters)-maxDeadLetters)
	}
}

func (l *live) recentDeadLetters() []deadLetter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.deadLetters)
}

// addSignal records the signal's latency observations.
func (l *live) addSignal(s *schemas.EngineSignal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts.Signals++
	e := l.engine(s.GetEngineId())
	e.lastSigMs = max(e.lastSigMs, s.GetEventTimeUnixMs())
	if o, ok := estimate.SignalObs(s, estimate.TTFT); ok {
		e.ttft.add(obsPoint{ms: s.GetEventTimeUnixMs(), Obs: o})
	}
	if o, ok := estimate.SignalObs(s, estimate.TBOT); ok {
		e.tbot.add(obsPoint{ms: s.GetEventTimeUnixMs(), Obs: o})
	}
}

// addEvent counts a routing event in its cluster's bucket, dropping
// buckets older than the history.
func (l *live) addEvent(ev *schemas.RoutingEvent, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts.RoutingEvents++
	oldest := now.Add(-l.history).UnixMilli() / bucketMs
	k := ev.GetEventTimeUnixMs() / bucketMs
	if k < oldest {
		return
	}
	c := l.cluster(ev.GetCluster())
	if id := ev.GetGatewayId(); id != "" && ev.GetSnapshotVersion() > 0 {
		c.seen(id, ev.GetSnapshotVersion(), ev.GetEventTimeUnixMs())
	}
	b := c.buckets[k]
	if b == nil {
		b = &rateBucket{}
		c.buckets[k] = b
		if len(c.buckets) > int(l.history.Milliseconds()/bucketMs)+8 {
			for old := range c.buckets {
				if old < oldest {
					delete(c.buckets, old)
				}
			}
		}
	}
	if estimate.CountsAsDemand(ev) {
		b.Offered++
		if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_SHED {
			b.Rejected++
			switch ev.GetFailureReason() {
			case schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT:
				b.RejSnapshot++
			case schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION:
				b.RejAdmission++
			}
		}
	}
	if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS {
		return // an arrival record: the request's final record answers it
	}
	b.Total++
	switch ev.GetStatus() {
	case schemas.RequestStatus_REQUEST_STATUS_OK:
		b.OK++
		if t := ev.GetTtftMs(); t > 0 && !math.IsInf(t, 0) {
			b.TTFTSumMs += t
			b.TTFTCount++
		}
		if t := ev.GetE2EMs(); t > 0 && !math.IsInf(t, 0) {
			b.E2ESumMs += t
			b.E2ECount++
		}
	case schemas.RequestStatus_REQUEST_STATUS_ERROR:
		b.Errors++
	case schemas.RequestStatus_REQUEST_STATUS_SHED:
		b.Shed++
	case schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR:
		b.ClientErrors++
	case schemas.RequestStatus_REQUEST_STATUS_CANCELED:
		b.Canceled++
	}
}

func (l *live) invalid() {
	l.mu.Lock()
	l.counts.Invalid++
	l.mu.Unlock()
}

// rates are a cluster's request rates over rateSpan, per second.
type rates struct {
	RPS, ErrorRPS, ShedRPS, ClientErrorRPS float64
	// ErrorRatio is errors over requests (0 without requests).
	ErrorRatio float64
	// Offered requests (those that count as demand) and their rate; of
	// them, the share the gateways answered 429, in all and by reason
	// (shed by the snapshot, by admission, every engine at its limit).
	Offered, Rejected                                                    uint64
	OfferedRPS                                                           float64
	RejectedRatio, RejSnapshotRatio, RejAdmissionRatio, RejCapacityRatio float64
}

// The console's banner says a cluster's gateways are rejecting when, as
// a gateway's own degradation check does (gateway/degrade.go), more than
// bannerRatio of at least bannerMinRequests requests over the last
// minute were answered 429.
const (
	bannerRatio       = 0.05
	bannerMinRequests = 20
)

// Rejecting reports whether the gateways rejected more than bannerRatio
// of the last minute's offered requests.
func (r rates) Rejecting() bool {
	return r.Offered >= bannerMinRequests && r.RejectedRatio > bannerRatio
}

// rateSeries is one bucket of a cluster's rate chart.
type ratePoint struct {
	at time.Time
	rateBucket
}

// clusterRates returns the rates of cluster over the complete buckets of
// the last rateSpan, and every bucket of the history, oldest first.
func (l *live) clusterRates(cluster string, now time.Time) (rates, []ratePoint) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clusters[cluster]
	if c == nil {
		return rates{}, nil
	}
	end := now.UnixMilli() / bucketMs // the current, incomplete bucket
	start := end - rateSpan.Milliseconds()/bucketMs
	oldest := now.Add(-l.history).UnixMilli() / bucketMs
	var sum rateBucket
	var pts []ratePoint
	for k, b := range c.buckets {
		if k >= start && k < end {
			sum.Total += b.Total
			sum.Errors += b.Errors
			sum.Shed += b.Shed
			sum.ClientErrors += b.ClientErrors
			sum.Offered += b.Offered
			sum.Rejected += b.Rejected
			sum.RejSnapshot += b.RejSnapshot
			sum.RejAdmission += b.RejAdmission
		}
		if k >= oldest && k < end {
			pts = append(pts, ratePoint{at: time.UnixMilli(k * bucketMs), rateBucket: *b})
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].at.Before(pts[j].at) })
	span := rateSpan.Seconds()
	r := rates{
		RPS: float64(sum.Total) / span, ErrorRPS: float64(sum.Errors) / span,
		ShedRPS: float64(sum.Shed) / span, ClientErrorRPS: float64(sum.ClientErrors) / span,
	}
	if sum.Total > 0 {
		r.ErrorRatio = float64(sum.Errors) / float64(sum.Total)
	}
	r.Offered, r.Rejected, r.OfferedRPS = sum.Offered, sum.Rejected, float64(sum.Offered)/span
	if n := float64(sum.Offered); n > 0 {
		r.RejectedRatio = float64(sum.Rejected) / n
		r.RejSnapshotRatio, r.RejAdmissionRatio = float64(sum.RejSnapshot)/n, float64(sum.RejAdmission)/n
		r.RejCapacityRatio = float64(sum.Rejected-min(sum.Rejected, sum.RejSnapshot+sum.RejAdmission)) / n
	}
	return r, pts
}

// clusterIDs lists the clusters with routing events or a demand
// estimate, sorted.
func (l *live) clusterIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.clusters))
	for id := range l.clusters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// engineView is a copy of one engine's state.
type engineView struct {
	ID         string
	Est        *schemas.EngineEstimate
	TTFT, TBOT []obsPoint
	LastSigMs  int64
}

// engineIDs lists the engines seen, sorted.
func (l *live) engineIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.engines))
	for id := range l.engines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (l *live) engineView(id string) (engineView, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.engines[id]
	if e == nil {
		return engineView{}, false
	}
	return engineView{ID: id, Est: e.est, TTFT: e.ttft.all(), TBOT: e.tbot.all(), LastSigMs: e.lastSigMs}, true
}

func (l *live) demand(cluster string) *schemas.DemandEstimate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.clusters[cluster]; c != nil {
		return c.demand
	}
	return nil
}

// pipelineView is the live part of the pipeline's health.
type pipelineView struct {
	Watermark int64
	EstSeen   time.Time
	Counts    counts
}

func (l *live) pipeline() pipelineView {
	l.mu.Lock()
	defer l.mu.Unlock()
	return pipelineView{Watermark: l.watermark, EstSeen: l.estSeen, Counts: l.counts}
}

// consume polls the topics into the live state until ctx is done or the
// client is closed. Records that do not decode or validate are counted
// and skipped: the console only reads, the processor dead-letters them.
func (c *Console) consume(ctx context.Context) {
	for {
		fetches := c.cfg.Kafka.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			c.log.Warn("fetching", "topic", t, "partition", p, "err", err)
		})
		now := c.cfg.Now()
		fetches.EachRecord(func(r *kgo.Record) { c.record(r, now) })
	}
}

// record folds one record in.
func (c *Console) record(r *kgo.Record, now time.Time) {
	switch r.Topic {
	case c.topics.Estimates:
		var est schemas.Estimate
		if err := proto.Unmarshal(r.Value, &est); err != nil || est.GetKind() == nil || est.WindowEndUnixMs() <= 0 {
			c.live.invalid()
			return
		}
		c.live.addEstimate(&est, now)
	case c.topics.Signals:
		s, err := estimate.DecodeSignal(r.Value, r.Timestamp)
		if err != nil {
			c.live.invalid()
			return
		}
		c.live.addSignal(s)
	case c.topics.RoutingEvents, c.topics.RoutingArrivals:
		ev, err := estimate.DecodeRoutingEvent(r.Value, r.Timestamp)
		if err != nil {
			c.live.invalid()
			return
		}
		c.live.addEvent(ev, now)
	case c.topics.DeadLetter:
		c.live.addDeadLetter(deadLetter{ms: r.Timestamp.UnixMilli(), reason: streams.Reason(r), origin: header(r, streams.HeaderDLQTopic)})
	}
}

// header returns rec's header key, or "".
func header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
