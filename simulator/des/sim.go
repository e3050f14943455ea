// Package des is Switchyard's discrete-event policy simulator: it replays
// a workload through a fleet of engine models (simulator/engine, the model
// enginesim serves in real time, here on a virtual clock) behind one
// gateway per cluster whose routing decisions a Policy makes, with
// network latencies between regions, health checks, retries and a
// schedule of outages and capacity changes. It is single-threaded and
// deterministic: the same inputs give the same Result, bit for bit.
//
// # Model
//
// A request enters its cluster's gateway at its arrival time; the policy
// picks an engine (or sheds); the request reaches the engine half a
// round trip later and its tokens come back half a round trip after the
// engine produces them, so gateway TTFT = engine TTFT + RTT (plus any
// retries). An attempt to an engine that is down, or whose queue is full,
// fails back to the gateway after the round trip and is retried on
// another engine, at most three attempts in all. An engine going down
// fails what it holds (retried when no token has reached the client yet:
// before the first token, or at any point of a non-streaming response)
// and comes back with a cold cache. A non-streaming request's response
// reaches the gateway whole, so the gateway's TTFT for it is its E2E. Gateways notice an engine going down
// or up HealthCheckMs after the fact. A region outage takes down the
// region's engines; its gateway cluster keeps serving its users (the edge
// is elsewhere).
package des

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/simulator/engine"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
)

// MaxAttempts bounds the attempts per request (the gateway's retry rule).
const MaxAttempts = 3

// Options tune a run.
type Options struct {
	// Series records utilization and weights over time, and the TTFT
	// samples, for plots (default off).
	Series bool
	// SampleEvery is the series' sampling period (default: the run's
	// span / 240, at least one tick).
	SampleEvery time.Duration
	// Requests keeps every request's outcome in Result.Requests
	// (default off).
	Requests bool
}

// Factory builds a policy over the world of a run.
type Factory func(w *World) (Policy, error)

type inst struct {
	slot  int
	eng   *engine.Engine
	alive bool
	busy  bool
	next  time.Duration
}

type slot struct {
	info      EngineInfo
	cfg       engine.Config
	instances []int
	cur       int
	up        bool // actual state
	seenUp    bool // what the gateways' health checks say
}

const (
	stPending uint8 = iota
	stInFlight
	stDone
	stShed
	stFailed
	stHeld // Pick answered Held: waiting for World.Dispatch or Reject
)

type reqState struct {
	slot, inst int32
	tried      [MaxAttempts]int32
	attempt    uint8
	state      uint8
	gotFirst   bool
	sentAt     time.Duration // when the current attempt reached its engine
}

const (
	pDispatch uint8 = iota // an attempt reaches its engine
	pRetry                 // a failed attempt is noticed by the gateway
	pDetect                // health checks notice a change (idx slot, up)
)

type pending struct {
	t    time.Duration
	seq  uint64
	kind uint8
	up   bool
	idx  int32
}

type sim struct {
	sc     *scenario.Scenario
	wl     *scenario.Stream
	ctl    scenario.Control
	world  *World
	policy Policy
	// firstTok is policy when it observes first tokens.
	firstTok FirstTokenObserver
	weight   Weighted
	slots    []slot
	insts    []*inst
	reqs     []reqState
	views    []Request
	heap     []pending
	seq      uint64
	col      *collector

	hashReq int
	hashBuf []uint64

	// now is the virtual time of the event being handled, at which a
	// held request is dispatched or rejected (World.Dispatch, Reject);
	// left counts the held requests rejected since the run loop last
	// took them; misuse is the first breach of the Policy contract.
	now    time.Duration
	left   int
	misuse error
}

// Run simulates the workload under the policy made by mk and returns its
// metrics.
func Run(sc *scenario.Scenario, wl *scenario.Stream, name string, mk Factory, opt Options) (*Result, error) {
	s, err := newSim(sc, wl)
	if err != nil {
		return nil, err
	}
	p, err := mk(s.world)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	s.policy = p
	s.firstTok, _ = p.(FirstTokenObserver)
	s.weight, _ = p.(Weighted)
	tick := time.Duration(s.ctl.TickMs * float64(time.Millisecond))
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	sample := opt.SampleEvery
	if sample <= 0 {
		sample = max(tick, wl.Span/240)
	}
	sample = max(tick, sample/tick*tick)
	s.col = newCollector(name, s, opt.Series)
	if opt.Requests {
		s.col.reqs = make([]RequestResult, len(wl.Requests))
	}
	s.run(tick, sample)
	if s.misuse != nil {
		return nil, fmt.Errorf("policy %s: %w", name, s.misuse)
	}
	return s.col.result(s), nil
}

func newSim(sc *scenario.Scenario, wl *scenario.Stream) (*sim, error) {
	if sc == nil || wl == nil {
		return nil, errors.New("nil scenario or workload")
	}
	s := &sim{sc: sc, wl: wl, ctl: sc.Control.Defaults(), hashReq: -1}
	w := &World{Scenario: sc, Control: s.ctl, BlockTokens: max(wl.BlockTokens, 1), Stream: wl, sim: s}
	s.world = w
	clusterIdx := map[string]int{}
	for i, c := range sc.Clusters {
		w.Clusters = append(w.Clusters, ClusterInfo{ID: c.ID, Region: c.Region})
		clusterIdx[c.ID] = i
	}
	for i, e := range sc.Engines {
		p, err := engine.LookupPreset(e.GPU)
		if err != nil {
			return nil, fmt.Errorf("engines[%d]: %w", i, err)
		}
		if e.MaxModelLen > 0 {
			p.MaxModelLen = e.MaxModelLen
		}
		if e.MaxSeqs > 0 {
			p.MaxSeqs = e.MaxSeqs
			p.MaxBatchedTokens = max(p.MaxBatchedTokens, e.MaxSeqs+1)
		}
		if e.KVBlocks > 0 {
			p.KVBlocks = e.KVBlocks
		}
		reps := max(e.Replicas, 1)
		info := EngineInfo{ID: e.ID, Region: e.Region, GPU: e.GPU, Preset: p, Replicas: reps, MaxBatchHidden: !e.ReportsMaxBatch()}
		w.Engines = append(w.Engines, info)
		cfg := engine.Config{Preset: p, Replicas: reps, MaxWaiting: e.MaxWaiting, LatencyMultiplier: e.LatencyMultiplier}
		s.slots = append(s.slots, slot{info: info, cfg: cfg, up: true, seenUp: true})
		if err := s.startInstance(i, reps); err != nil {
			return nil, err
		}
	}
	w.RTT = make([][]time.Duration, len(w.Clusters))
	for c := range w.Clusters {
		w.RTT[c] = make([]time.Duration, len(w.Engines))
		for e := range w.Engines {
			w.RTT[c][e] = sc.RTT(w.Clusters[c].Region, w.Engines[e].Region)
		}
	}
	s.reqs = make([]reqState, len(wl.Requests))
	s.views = make([]Request, len(wl.Requests))
	for i := range wl.Requests {
		r := &wl.Requests[i]
		c, ok := clusterIdx[r.Cluster]
		if !ok {
			return nil, fmt.Errorf("request %d: unknown cluster %q", i, r.Cluster)
		}
		s.views[i] = Request{Index: i, Cluster: c, Key: hashkey.String("s:" + r.Session), W: r}
		s.reqs[i] = reqState{slot: -1, inst: -1, tried: [MaxAttempts]int32{-1, -1, -1}}
	}
	return s, nil
}

func (s *sim) startInstance(slotIdx, replicas int) error {
	sl := &s.slots[slotIdx]
	cfg := sl.cfg
	cfg.Replicas = replicas
	eng, err := engine.New(cfg)
	if err != nil {
		return fmt.Errorf("engine %s: %w", sl.info.ID, err)
	}
	sl.cfg = cfg
	s.insts = append(s.insts, &inst{slot: slotIdx, eng: eng, alive: true})
	sl.cur = len(s.insts) - 1
	sl.instances = append(sl.instances, sl.cur)
	return nil
}

// hashesFor returns r's prompt as engine prefix-block hashes (each
// covering the whole prefix up to the end of its block), computed once
// per request and reused while it is the one being routed.
func (s *sim) hashesFor(r *Request) []uint64 {
	if s.hashReq == r.Index {
		return s.hashBuf
	}
	s.hashReq = r.Index
	bs := s.slots[0].info.Preset.BlockSize
	wb := s.world.BlockTokens
	per := max(wb/bs, 1)
	n := r.W.PromptTokens / bs
	buf := s.hashBuf[:0]
	var h uint64 = 0x9e3779b97f4a7c15
	for _, id := range r.W.Blocks {
		for k := 0; k < per && len(buf) < n; k++ {
			h = hashkey.Mix(h ^ (id*0x100000001b3 + uint64(k) + 1))
			buf = append(buf, h)
		}
		if len(buf) >= n {
			break
		}
	}
	s.hashBuf = buf
	return buf
}

func (s *sim) push(p pending) {
	s.seq++
	p.seq = s.seq
	s.heap = append(s.heap, p)
	i := len(s.heap) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !less(&s.heap[i], &s.heap[parent]) {
			break
		}
		s.heap[i], s.heap[parent] = s.heap[parent], s.heap[i]
		i = parent
	}
}

func less(a, b *pending) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

func (s *sim) pop() pending {
	top := s.heap[0]
	n := len(s.heap) - 1
	s.heap[0] = s.heap[n]
	s.heap = s.heap[:n]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < n && less(&s.heap[l], &s.heap[m]) {
			m = l
		}
		if r := l + 1; r < n && less(&s.heap[r], &s.heap[m]) {
			m = r
		}
		if m == i {
			break
		}
		s.heap[i], s.heap[m] = s.heap[m], s.heap[i]
		i = m
	}
	return top
}

func (s *sim) refresh(k int) {
	in := s.insts[k]
	if !in.alive {
		in.busy = false
		return
	}
	in.next, in.busy = in.eng.NextEvent()
}

const forever = time.Duration(1<<63 - 1)

func (s *sim) run(tick, sample time.Duration) {
	reqs := s.wl.Requests
	events := s.scheduled()
	var lastArrival time.Duration
	if n := len(reqs); n > 0 {
		lastArrival = reqs[n-1].Arrival
	}
	end := max(lastArrival, s.wl.Span) + time.Duration(s.drain()*float64(time.Second))
	next, ev := 0, 0
	nextTick, nextSample := time.Duration(0), time.Duration(0)
	outstanding := 0
	for {
		// The earliest of: an engine step, a pending delivery, a
		// scheduled event, an arrival, a tick.
		tE, kE := forever, -1
		for k, in := range s.insts {
			if in.busy && in.next < tE {
				tE, kE = in.next, k
			}
		}
		tP := forever
		if len(s.heap) > 0 {
			tP = s.heap[0].t
		}
		tS := forever
		if ev < len(events) {
			tS = events[ev].at
		}
		tA := forever
		if next < len(reqs) {
			tA = reqs[next].Arrival
		}
		if next >= len(reqs) && outstanding == 0 && len(s.heap) == 0 {
			break
		}
		t := min(tE, tP, tS, tA, nextTick)
		if t > end {
			break
		}
		s.now = t
		switch t {
		case tE:
			outstanding -= s.engineEvents(kE, t)
		case tP:
			p := s.pop()
			switch p.kind {
			case pDispatch:
				s.dispatch(int(p.idx), t)
			case pRetry:
				outstanding -= s.retry(int(p.idx), t)
			case pDetect:
				if s.slots[p.idx].up == p.up {
					s.slots[p.idx].seenUp = p.up
				}
			}
		case tS:
			outstanding -= s.apply(events[ev].ev, t)
			ev++
		case tA:
			outstanding++
			if s.route(next, t) {
				outstanding--
			}
			next++
		default:
			s.policy.Tick(t)
			s.col.tick(s, t)
			if t >= nextSample {
				s.col.sample(s, t)
				nextSample += sample
			}
			nextTick += tick
		}
		outstanding -= s.left
		s.left = 0
	}
	// Whatever is still in flight timed out.
	for i := range s.reqs {
		st := &s.reqs[i]
		if st.state == stPending || st.state == stInFlight || st.state == stHeld {
			st.state = stFailed
			s.col.failed++
		}
	}
}

func (s *sim) drain() float64 {
	if s.sc.DrainS > 0 {
		return s.sc.DrainS
	}
	return 120
}

type timed struct {
	at time.Duration
	ev scenario.Event
}

func (s *sim) scheduled() []timed {
	var out []timed
	for _, ev := range s.sc.Events {
		if ev.Kind == scenario.EventRate {
			continue // shapes the workload, not the fleet
		}
		out = append(out, timed{at: time.Duration(ev.AtS * float64(time.Second)), ev: ev})
	}
	// Stable by time, keeping file order for equal times.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].at < out[j-1].at; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// route asks the policy for an engine; it reports whether the request
// left the system (shed).
func (s *sim) route(i int, now time.Duration) bool {
	st := &s.reqs[i]
	v := &s.views[i]
	st.attempt++
	v.Attempt = int(st.attempt)
	e := s.policy.Pick(now, v, st.tried[:st.attempt-1])
	if e == Held {
		st.state = stHeld
		return false
	}
	return s.place(i, e, now)
}

// place sends request i's current attempt to engine e, or sheds it (or,
// for a retry, fails it) when e is no engine; it reports whether the
// request left the system.
func (s *sim) place(i, e int, now time.Duration) bool {
	st := &s.reqs[i]
	v := &s.views[i]
	if e < 0 || e >= len(s.slots) {
		if st.attempt > 1 {
			// A retry with nowhere left to go: the request failed.
			st.state = stFailed
			s.col.failed++
			return true
		}
		st.state = stShed
		s.col.shed++
		return true
	}
	st.tried[st.attempt-1] = int32(e)
	st.slot = int32(e)
	st.state = stPending
	s.push(pending{t: now + s.world.RTT[v.Cluster][e]/2, kind: pDispatch, idx: int32(i)})
	return false
}

func (s *sim) dispatch(i int, now time.Duration) {
	st := &s.reqs[i]
	v := &s.views[i]
	sl := &s.slots[st.slot]
	half := s.world.RTT[v.Cluster][st.slot] / 2
	if !sl.up {
		s.push(pending{t: now + half, kind: pRetry, idx: int32(i)})
		return
	}
	k := sl.cur
	in := s.insts[k]
	err := in.eng.Submit(now, engine.Request{
		ID: uint64(i)*4 + uint64(st.attempt), PromptTokens: v.W.PromptTokens, OutputTokens: v.W.OutputTokens,
		PrefixHashes: s.hashesFor(v),
	})
	s.refresh(k)
	if err != nil {
		if errors.Is(err, engine.ErrTooLong) || errors.Is(err, engine.ErrInvalidRequest) {
			st.attempt = MaxAttempts // a client error: no retry
		}
		s.push(pending{t: now + half, kind: pRetry, idx: int32(i)})
		return
	}
	st.inst = int32(k)
	st.state = stInFlight
	st.gotFirst = false
	st.sentAt = now
}

// retry ends a failed attempt and starts the next; it reports whether
// the request left the system.
func (s *sim) retry(i int, now time.Duration) int {
	st := &s.reqs[i]
	v := &s.views[i]
	s.policy.Done(now, v, int(st.slot), Outcome{Retry: int(st.attempt) < MaxAttempts})
	s.col.attemptFailed++
	if int(st.attempt) >= MaxAttempts {
		st.state = stFailed
		s.col.failed++
		return 1
	}
	if s.route(i, now) {
		return 1
	}
	return 0
}

// engineEvents processes instance k's events up to t; it returns how
// many requests left the system.
func (s *sim) engineEvents(k int, t time.Duration) int {
	in := s.insts[k]
	evs := in.eng.Advance(t)
	left := 0
	for idx := range evs {
		ev := &evs[idx]
		i := int(ev.ID / 4)
		st := &s.reqs[i]
		switch ev.Kind {
		case engine.EventFirstToken:
			st.gotFirst = true
			if s.firstTok != nil {
				s.firstTok.FirstToken(t, &s.views[i], int(st.slot), ev.Time-st.sentAt)
			}
		case engine.EventFinished:
			v := &s.views[i]
			res := &ev.Result
			half := s.world.RTT[v.Cluster][st.slot] / 2
			o := Outcome{
				OK:           true,
				TTFT:         res.FirstToken + half - v.W.Arrival,
				E2E:          res.Finish + half - v.W.Arrival,
				EngineTTFT:   res.TTFT(),
				MeanTBOT:     res.MeanITL(),
				PromptTokens: res.PromptTokens, OutputTokens: res.OutputTokens, CachedTokens: res.CachedTokens,
			}
			if v.W.NonStreaming {
				o.TTFT = o.E2E // the first byte arrives with the whole body
			}
			st.state = stDone
			s.policy.Done(t, v, int(st.slot), o)
			s.col.done(s, v, int(st.slot), o)
			left++
		}
	}
	s.refresh(k)
	return left
}

// apply runs a scheduled fleet event; it returns how many requests left
// the system.
func (s *sim) apply(ev scenario.Event, now time.Duration) int {
	left := 0
	for e := range s.slots {
		sl := &s.slots[e]
		match := sl.info.ID == ev.Engine || (ev.Region != "" && sl.info.Region == ev.Region)
		if !match {
			continue
		}
		switch ev.Kind {
		case scenario.EventEngineDown, scenario.EventRegionDown:
			if !sl.up {
				continue
			}
			sl.up = false
			for _, k := range sl.instances {
				left += s.kill(k, now)
			}
			s.detect(e, false, now)
		case scenario.EventEngineUp, scenario.EventRegionUp:
			if sl.up {
				continue
			}
			if err := s.startInstance(e, sl.cfg.Replicas); err != nil {
				continue // the config was valid at start; cannot happen
			}
			sl.up = true
			s.detect(e, true, now)
		case scenario.EventReplicas:
			if !sl.up {
				sl.cfg.Replicas = ev.Replicas // applies when it comes back
				continue
			}
			// The old instance keeps draining what it holds.
			if err := s.startInstance(e, ev.Replicas); err != nil {
				continue
			}
		}
	}
	return left
}

func (s *sim) detect(e int, up bool, now time.Duration) {
	d := time.Duration(s.ctl.HealthCheckMs * float64(time.Millisecond))
	s.push(pending{t: now + d, kind: pDetect, up: up, idx: int32(e)})
}

// kill fails every request instance k holds.
func (s *sim) kill(k int, now time.Duration) int {
	in := s.insts[k]
	if !in.alive {
		return 0
	}
	in.eng.Advance(now) // events up to now were already handled
	in.alive = false
	in.busy = false
	left := 0
	for i := range s.reqs {
		st := &s.reqs[i]
		if st.state != stInFlight || int(st.inst) != k {
			continue
		}
		v := &s.views[i]
		half := s.world.RTT[v.Cluster][st.slot] / 2
		if !st.gotFirst || v.W.NonStreaming {
			// Nothing has reached the client yet: the gateway retries.
			st.state = stPending
			s.push(pending{t: now + half, kind: pRetry, idx: int32(i)})
			continue
		}
		st.state = stFailed
		s.policy.Done(now, v, int(st.slot), Outcome{})
		s.col.failed++
		s.col.attemptFailed++
		left++
	}
	return left
}

// breach records the first breach of the Policy contract; Run returns it.
func (s *sim) breach(err error) {
	if s.misuse == nil {
		s.misuse = err
	}
}
