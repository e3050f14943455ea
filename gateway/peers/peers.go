// Package peers shares, between the gateways that route to the same
// engines, the prefill work each has queued on each engine. A gateway
// sees only its own requests; with several gateways (of several clusters,
// or replicas of one) a short prompt can land behind another gateway's
// long prefill. A Sharer publishes this gateway's per-engine queued
// prefill tokens (and requests in flight, for operators) as one
// GatewayLoad on core NATS every interval, keeps the latest report of
// every peer gateway, and sets each engine's pick.State.SetForeignPrefill
// to the sum its live peers report, which PickRequest counts ahead of a
// request as it counts the gateway's own queue (docs/gateway.md, "Peer
// load sharing").
package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Conn is the part of a NATS connection a Sharer uses: core publish and
// subscribe (internal/peerconn adapts a *nats.Conn). Publish must copy
// data before it returns. Subscribe calls fn with the payload of every
// message published to subject, one call at a time, until the
// Subscription is ended; fn owns data (the Conn never reuses it) and must
// not block for long. A Conn that also has IsConnected() bool is not
// published to while it reports false (nothing stale is buffered for
// after a reconnect); one that has MaxPayload() int64 bounds the reports
// sent (when positive).
type Conn interface {
	Publish(subject string, data []byte) error
	Subscribe(subject string, fn func(data []byte)) (Subscription, error)
}

// Subscription is one subject a Conn delivers. Unsubscribe ends it:
// after it returns, fn is not called again for it. A Subscription that
// also has SetPendingLimits(msgs, bytes int) error (a *nats.Subscription)
// is limited to as many messages waiting for fn as the Sharer queues
// itself, and one that has Dropped() (int, error) has the messages it
// dropped for exceeding them counted as overflow.
type Subscription interface {
	Unsubscribe() error
}

// pendingLimiter bounds the messages a Subscription holds for its
// handler (a *nats.Subscription).
type pendingLimiter interface {
	SetPendingLimits(msgs, bytes int) error
}

// Engines lists the engine states whose load is shared and set: it
// appends every state to dst, each at a position that never changes (a
// *pick.Pool).
type Engines interface {
	States(dst []*pick.State) []*pick.State
}

var _ Engines = (*pick.Pool)(nil)

// Sharer publishes this gateway's load and applies its peers'. Build it
// with New; Run does the work.
type Sharer struct {
	cfg      Config
	nc       Conn
	engines  Engines
	m        *metrics
	subject  string
	wildcard string
	forget   time.Duration            // a silent peer is forgotten after it
	in       chan []byte              // received reports, not yet applied
	queued   atomic.Int64             // their bytes
	maxQueue int64                    // bound on queued
	live     atomic.Int64             // peers tracked
	subjects atomic.Pointer[[]string] // subscribed to, sorted

	// Owned by Run's goroutine.
	dec      decoder
	states   []*pick.State
	index    map[string]int32 // engine id -> position in states
	sums     []int64          // foreign prefill by position
	peers    map[string]*peer
	touched  []int32
	scratch  []load // a report's loads being merged
	elems    []*schemas.EngineLoad
	buf      []byte
	lastSent time.Time
	sentLoad bool // the last report sent had engines
	lastWarn time.Time
	subs     map[string]*subscription // by subject
	heard    []string                 // the peer clusters subscribed for
	resub    bool                     // the subscriptions differ from heard's
}

// subscription is one subject subscribed to.
type subscription struct {
	sub   Subscription
	drops dropCounter // sub, if it counts drops
	seen  int         // its drops already counted
}

// dropCounter is what a Sharer reads of its subscription: the messages
// the NATS client dropped because too many waited for the handler (a
// *nats.Subscription).
type dropCounter interface {
	Dropped() (int, error)
}

// peer is the latest report of one peer gateway.
type peer struct {
	last  time.Time // arrival, by this gateway's clock
	loads []load    // its queued prefill on engines of ours, by position
}

type load struct {
	idx     int32
	prefill int64
}

// New returns a Sharer publishing and subscribing on nc for the engines
// of engines. It registers its metrics; nothing else happens until Run.
func New(nc Conn, engines Engines, cfg Config) (*Sharer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if nc == nil || engines == nil {
		return nil, fmt.Errorf("%w: no connection or engines", ErrConfig)
	}
	m, err := newMetrics(cfg.Registerer, cfg.Cluster)
	if err != nil {
		return nil, err
	}
	return &Sharer{
		cfg:      cfg,
		nc:       nc,
		engines:  engines,
		m:        m,
		subject:  Subject(cfg.Prefix, cfg.Cluster),
		wildcard: Wildcard(cfg.Prefix),
		forget:   max(cfg.Staleness, 3*Heartbeat),
		in:       make(chan []byte, queueLen),
		maxQueue: max(queueBytes, 2*int64(cfg.MaxMessageBytes)),
		index:    map[string]int32{},
		peers:    map[string]*peer{},
		subs:     map[string]*subscription{},
	}, nil
}

// Peers returns the number of peer gateways tracked now.
func (s *Sharer) Peers() int { return int(s.live.Load()) }

// Run subscribes to the reports of the gateways of its peer clusters
// (Config.PeerClusters; every gateway's without them) and publishes this
// one's every Interval until ctx is done; then it returns nil, having set
// every engine's foreign prefill back to 0. It fails only when it cannot
// subscribe at the start; later subscription changes that fail are
// logged and retried every Interval. Run once.
func (s *Sharer) Run(ctx context.Context) error {
	defer s.reset()
	defer func() {
		s.unsubscribe(nil)
		s.publishSubjects()
	}()
	if err := s.follow(s.peerClusters(), true); err != nil {
		return err
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	s.tick()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.tick()
		case b := <-s.in:
			s.apply(b)
			s.queued.Add(-int64(len(b)))
		}
	}
}

// receive queues one report for Run (the Conn's delivery goroutine),
// unless queueLen reports or maxQueue bytes are waiting.
func (s *Sharer) receive(data []byte) {
	if len(data) > s.cfg.MaxMessageBytes {
		s.m.dropped[reasonOversized].Inc()
		return
	}
	n := int64(len(data))
	if s.queued.Add(n) > s.maxQueue {
		s.queued.Add(-n)
		s.m.dropped[reasonOverflow].Inc()
		return
	}
	select {
	case s.in <- data:
	default:
		s.queued.Add(-n)
		s.m.dropped[reasonOverflow].Inc()
	}
}

// tick follows the peer clusters, publishes this gateway's load and
// drops stale peers.
func (s *Sharer) tick() {
	now := s.cfg.Now()
	if err := s.follow(s.peerClusters(), false); err != nil {
		s.warn(now, "peer load subscriptions not updated", "err", err)
	}
	s.countClientDrops()
	s.refresh()
	s.publish(now)
	s.expire(now)
}

// countClientDrops counts the reports the NATS client dropped since the
// last call as overflow.
func (s *Sharer) countClientDrops() {
	for _, sb := range s.subs {
		if sb.drops == nil {
			continue
		}
		n, err := sb.drops.Dropped()
		if err != nil || n <= sb.seen {
			continue
		}
		s.m.dropped[reasonOverflow].Add(float64(n - sb.seen))
		sb.seen = n
	}
}

// peerClusters returns Config.PeerClusters' clusters, or nil.
func (s *Sharer) peerClusters() []string {
	if s.cfg.PeerClusters == nil {
		return nil
	}
	return s.cfg.PeerClusters()
}

// follow subscribes to the subjects of clusters and this gateway's own
// cluster and unsubscribes from the others (new subscriptions first, so
// no report is missed in between); with no clusters, or more subjects
// than MaxSubscriptions, to Wildcard. It does nothing when clusters are
// those it followed last, successfully. With first, the first
// subscription failing is an error; otherwise a failure keeps the old
// subscriptions too and is retried on the next call.
func (s *Sharer) follow(clusters []string, first bool) error {
	if !first && !s.resub && slices.Equal(clusters, s.heard) {
		return nil
	}
	s.heard = append(s.heard[:0], clusters...)
	want := map[string]bool{}
	if len(clusters) > 0 {
		want[Subject(s.cfg.Prefix, s.cfg.Cluster)] = true
		for _, c := range clusters {
			want[Subject(s.cfg.Prefix, c)] = true
			if len(want) > s.cfg.MaxSubscriptions {
				break
			}
		}
	}
	if len(want) == 0 || len(want) > s.cfg.MaxSubscriptions {
		want = map[string]bool{s.wildcard: true}
	}
	var errs []error
	for subject := range want {
		if s.subs[subject] != nil {
			continue
		}
		sb, err := s.subscribe(subject)
		if err != nil {
			if first {
				return err
			}
			errs = append(errs, err)
			continue
		}
		s.subs[subject] = sb
	}
	if len(errs) == 0 {
		s.unsubscribe(want) // after a failure the old ones stay, in case
	}
	s.publishSubjects()
	s.resub = len(errs) > 0
	return errors.Join(errs...)
}

// subscribe subscribes to subject's reports.
func (s *Sharer) subscribe(subject string) (*subscription, error) {
	sub, err := s.nc.Subscribe(subject, s.receive)
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", subject, err)
	}
	sb := &subscription{sub: sub}
	// The client's own queue of messages for the handler holds no more
	// than the Sharer's (nats.go's default is 64 MB).
	if l, ok := sub.(pendingLimiter); ok {
		if err := l.SetPendingLimits(queueLen, int(s.maxQueue)); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("limiting the pending reports of %s: %w", subject, err)
		}
	}
	sb.drops, _ = sub.(dropCounter)
	return sb, nil
}

// unsubscribe ends the subscriptions to subjects not in keep.
func (s *Sharer) unsubscribe(keep map[string]bool) {
	for subject, sb := range s.subs {
		if keep[subject] {
			continue
		}
		if sb.sub != nil {
			_ = sb.sub.Unsubscribe()
		}
		delete(s.subs, subject)
	}
}

// Subjects returns the subjects Run subscribes to now, sorted.
func (s *Sharer) Subjects() []string {
	if p := s.subjects.Load(); p != nil {
		return *p
	}
	return nil
}

// publishSubjects stores the subjects subscribed to for Subjects.
func (s *Sharer) publishSubjects() {
	out := make([]string, 0, len(s.subs))
	for subject := range s.subs {
		out = append(out, subject)
	}
	slices.Sort(out)
	s.subjects.Store(&out)
}

// refresh picks up the engines the pool gained since the last tick.
func (s *Sharer) refresh() {
	s.states = s.engines.States(s.states[:0])
	for i := len(s.sums); i < len(s.states); i++ {
		s.index[s.states[i].ID()] = int32(i)
	}
	if n := len(s.states); n > len(s.sums) {
		s.sums = append(s.sums, make([]int64, n-len(s.sums))...)
	}
}

// publish sends the engines with something queued or in flight; with
// none, an empty report once after the last non-empty one and then once
// per Heartbeat.
func (s *Sharer) publish(now time.Time) {
	if c, ok := s.nc.(interface{ IsConnected() bool }); ok && !c.IsConnected() {
		return
	}
	msg := &schemas.GatewayLoad{SchemaVersion: schemas.Version, GatewayId: s.cfg.ID, Cluster: s.cfg.Cluster, SentAtUnixMs: now.UnixMilli()}
	n := 0
	for _, st := range s.states {
		p, f := max(st.Prefill(), 0), max(st.InFlight(), 0)
		if p == 0 && f == 0 {
			continue
		}
		if n == len(s.elems) {
			s.elems = append(s.elems, &schemas.EngineLoad{})
		}
		e := s.elems[n]
		e.EngineId, e.QueuedPrefillTokens, e.InFlight = st.ID(), p, f
		n++
	}
	if n == 0 && !s.sentLoad && !s.lastSent.IsZero() && now.Sub(s.lastSent) < Heartbeat {
		return
	}
	msg.Engines = s.elems[:n]
	limit := s.cfg.MaxMessageBytes
	if c, ok := s.nc.(interface{ MaxPayload() int64 }); ok {
		if mp := c.MaxPayload(); mp > 0 && mp < int64(limit) {
			limit = int(mp)
		}
	}
	b, left, err := encode(s.buf[:0], msg, limit)
	s.buf = b
	if err == nil {
		err = s.nc.Publish(s.subject, b)
	}
	if err != nil {
		s.m.sendFailed.Inc()
		s.warn(now, "peer load report not sent", "err", err)
		return
	}
	if left > 0 {
		s.warn(now, "peer load report truncated to the most loaded engines", "engines_left_out", left, "limit_bytes", limit)
	}
	s.m.sent.Inc()
	s.lastSent, s.sentLoad = now, n > 0
}

// warn logs at most once a minute.
func (s *Sharer) warn(now time.Time, msg string, args ...any) {
	if now.Sub(s.lastWarn) < time.Minute && !s.lastWarn.IsZero() {
		return
	}
	s.lastWarn = now
	s.cfg.Logger.Warn(msg, args...)
}

// apply takes one received report: it replaces the sender's previous
// one and sets the foreign prefill of every engine either names.
func (s *Sharer) apply(b []byte) {
	r, err := s.dec.decode(b, s.cfg.MaxMessageBytes, s.cfg.MaxEngines)
	if err != nil {
		reason := reasonMalformed
		if errors.Is(err, ErrOversized) {
			reason = reasonOversized
		}
		s.m.dropped[reason].Inc()
		s.cfg.Logger.Debug("peer load report dropped", "err", err)
		return
	}
	if string(r.id) == s.cfg.ID {
		return // our own
	}
	p, ok := s.peers[string(r.id)]
	if !ok {
		if len(s.peers) >= s.cfg.MaxPeers {
			s.m.dropped[reasonTooMany].Inc()
			return
		}
		p = &peer{}
		s.peers[string(r.id)] = p
		s.setLive()
	}
	s.touched = s.touched[:0]
	s.unload(p)
	s.scratch = s.scratch[:0]
	for _, e := range r.engines {
		i, ok := s.index[string(e.id)]
		if !ok || e.prefill == 0 {
			continue // not an engine of ours, or nothing queued
		}
		s.scratch = append(s.scratch, load{idx: i, prefill: e.prefill})
	}
	s.scratch = merge(s.scratch)
	// A peer keeps at most one entry per engine of ours it reports
	// loaded, however many its report listed.
	if cap(p.loads) < len(s.scratch) || cap(p.loads) > 2*len(s.scratch)+8 {
		p.loads = make([]load, 0, len(s.scratch))
	}
	p.loads = append(p.loads[:0], s.scratch...)
	for _, l := range p.loads {
		s.sums[l.idx] += l.prefill
		s.touched = append(s.touched, l.idx)
	}
	p.last = s.cfg.Now()
	s.set()
	s.m.received.Inc()
}

// merge sorts loads by engine and sums an engine's repeats (clamped).
func merge(loads []load) []load {
	slices.SortFunc(loads, func(a, b load) int { return int(a.idx) - int(b.idx) })
	out := loads[:0]
	for _, l := range loads {
		if k := len(out) - 1; k >= 0 && out[k].idx == l.idx {
			out[k].prefill = min(out[k].prefill+l.prefill, MaxPrefillTokens)
			continue
		}
		out = append(out, l)
	}
	return out
}

// unload takes p's loads out of the sums, marking their engines touched.
func (s *Sharer) unload(p *peer) {
	for _, l := range p.loads {
		s.sums[l.idx] -= l.prefill
		s.touched = append(s.touched, l.idx)
	}
	p.loads = p.loads[:0]
}

// set stores the sums of the touched engines in their states.
func (s *Sharer) set() {
	for _, i := range s.touched {
		s.states[i].SetForeignPrefill(s.sums[i])
	}
}

// expire drops the loads of peers silent for Staleness and forgets peers
// silent for 3 heartbeats.
func (s *Sharer) expire(now time.Time) {
	s.touched = s.touched[:0]
	for id, p := range s.peers {
		age := now.Sub(p.last)
		if age > s.cfg.Staleness {
			s.unload(p)
		}
		if age > s.forget {
			delete(s.peers, id)
		}
	}
	s.set()
	s.setLive()
}

func (s *Sharer) setLive() {
	s.live.Store(int64(len(s.peers)))
	s.m.peers.Set(float64(len(s.peers)))
}

// reset forgets every peer and sets every engine's foreign prefill to 0.
func (s *Sharer) reset() {
	clear(s.peers)
	clear(s.sums)
	for _, st := range s.states {
		st.SetForeignPrefill(0)
	}
	s.setLive()
}
