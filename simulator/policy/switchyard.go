package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/engine"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// switchyard is the product, wired as in production but on the virtual
// clock: engine agents scrape every engine each signal interval into
// schemas.EngineSignal; gateways emit a schemas.RoutingEvent per request;
// the processor core (streams/process) turns a sliding window of both
// into estimates; the optimizer's planner (optimizer/plan's Planner) plans
// every window the core fires, at streams/control's cadence, with the
// window's end as the snapshot's version (see controlplane.go for what
// of the I/O between them is modelled); after the propagation delay
// every gateway installs its cluster's weights in the real selector
// (gateway/pick's PickRequest: weighted Maglev with affinity and
// bounded load, candidates scored by this gateway's queued prefill,
// remembered prefix blocks, network latency and learned engine speed)
// and sheds the planned fraction. In front of the picker each gateway
// runs the gateway's admission (admission.go): per-engine limits in batch
// slots and a queue that admits, holds or rejects a request's first
// attempt. Before the first snapshot gateways use pick's least-loaded
// fallback table, as the gateway does without a snapshot.
type switchyard struct {
	// peerEvery is the peer load sharing period (0: off), nextPeer the
	// next share, peerSum its scratch.
	peerEvery, nextPeer time.Duration
	peerSum             []int64
	w                   *des.World
	ctl                 struct {
		signal, slide, window, lateness time.Duration
	}
	rng *rand.Rand
	// now is the virtual time of the call being handled: the clock of
	// the gateways' admission queues.
	now time.Duration

	gw []*gateway

	// agent state per engine: the previous scrape and what finished since.
	// The agent library (agent.Scraper) reads an engine's Prometheus text
	// over HTTP; the simulated agent builds the same signal from the
	// engine model's counters instead.
	prev    []engine.Stats
	ttft    []acc
	tbot    []acc
	sig     schemas.EngineSignal
	ev      schemas.RoutingEvent
	ttftH   schemas.Histogram
	tbotH   schemas.Histogram
	nextSig time.Duration

	// proc is the processor; ctlp the optimizer's loop, whose planner is
	// made at the first plan (from planSet and capacity).
	proc    *simProcessor
	ctlp    simControl
	planSet plan.Settings

	version uint64      // installed snapshot's version (its window end)
	weights [][]float64 // installed, [cluster][engine]
	// capacity, when set before the first plan, pins each engine's
	// capacity (rps, with its configured replicas) for the planner (the
	// switchyard-calibrated diagnostic).
	capacity []float64
	// observe, when set, sees every routing event the gateways record
	// (tests).
	observe func(*schemas.RoutingEvent)
	// initial is the scenario's snapshot in force at time 0 (nil: none),
	// installed at once and remembered by the planner when it is made.
	initial *schemas.WeightSnapshot
}

type acc struct{ n, sum float64 }

// snapTables is a snapshot's weights and explanations (the plan's network
// latency and concurrency limit, which the gateway's picker scores
// candidates by), indexed [cluster][engine], and shed fractions.
type snapTables struct {
	version uint64
	weights [][]float64
	expl    [][]*schemas.Explanation
	shed    []float64
	peers   [][]int // each cluster's peer_clusters, by index; nil: none
}

// gateway is one cluster's gateway: its pick pool and current table.
type gateway struct {
	pool    *pick.Pool
	table   *pick.Table
	toWorld []int // table index -> engine
	toTable []int // engine -> table index, -1 when absent
	states  []*pick.State
	shed    float64
	ex      []int32
	up      []bool // health as last seen, to forget an engine that went down
	// placed holds each request's attempt in flight: the table it was
	// placed on and its ticket (the gateway's attempt state).
	placed map[int]placement
	chain  []uint64
	// peers are the clusters whose gateways it hears (the installed
	// snapshot's peer_clusters, by index); nil: every cluster's.
	peers []int
	adm   *admission
}

type placement struct {
	table *pick.Table
	i     int
	tk    pick.Ticket
	first bool
}

func newSwitchyard(w *des.World, seed uint64) (*switchyard, error) {
	p := &switchyard{w: w, rng: rand.New(rand.NewPCG(seed, 0x5717))}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	p.ctl.signal = sec(w.Control.SignalIntervalS)
	p.ctl.slide = sec(w.Control.SlideS)
	p.ctl.window = max(sec(w.Control.WindowS), p.ctl.slide)
	p.ctl.window = p.ctl.window / p.ctl.slide * p.ctl.slide
	p.ctl.lateness = sec(w.Control.AllowedLatenessS)
	p.ctlp.propagation = time.Duration(w.Control.PropagationMs * float64(time.Millisecond))
	if w.Control.PeerLoadMs > 0 {
		p.peerEvery = time.Duration(w.Control.PeerLoadMs * float64(time.Millisecond))
	}
	n := len(w.Engines)
	p.prev = make([]engine.Stats, n)
	p.ttft = make([]acc, n)
	p.tbot = make([]acc, n)
	p.nextSig = p.ctl.signal
	proc, err := newSimProcessor(window.Spec{Size: p.ctl.window, Slide: p.ctl.slide, AllowedLateness: p.ctl.lateness})
	if err != nil {
		return nil, err
	}
	p.proc = proc
	p.planSet = plan.Settings{
		MaxUtilization: w.Control.MaxUtilization, ChurnWeight: w.Control.ChurnWeight,
		MinDemandRPS: minDemandRPS, RegionRTTms: map[string]map[string]float64{},
	}
	for c, ci := range w.Clusters {
		p.planSet.Clusters = append(p.planSet.Clusters, ci.ID)
		row := map[string]float64{}
		for e, info := range w.Engines {
			row[info.Region] = float64(w.RTT[c][e]) / 1e6
		}
		p.planSet.RegionRTTms[ci.ID] = row
	}
	for range w.Clusters {
		g := &gateway{pool: pick.NewPool(), placed: map[int]placement{}, adm: newAdmission(n, p.clock)}
		for _, e := range w.Engines {
			g.states = append(g.states, g.pool.State(e.ID))
			g.up = append(g.up, true)
		}
		specs := make([]pick.Spec, n)
		for e, info := range w.Engines {
			specs[e] = pick.Spec{ID: info.ID, Weight: 1}
		}
		t, err := g.pool.Build(specs, pick.Options{LeastLoaded: true})
		if err != nil {
			return nil, err
		}
		g.install(t, w)
		p.gw = append(p.gw, g)
	}
	if w.Scenario != nil && len(w.Scenario.Initial) > 0 {
		p.initial = initialSnapshot(w)
		p.installSnap(p.tables(p.initial))
	}
	return p, nil
}

// initialSnapshot is the scenario's Initial as the snapshot the gateways
// and the planner start from: made at time 0 (the snapshot that versions
// the first plan is later), each weight explained by its pair's RTT.
func initialSnapshot(w *des.World) *schemas.WeightSnapshot {
	snap := &schemas.WeightSnapshot{SchemaVersion: schemas.Version, CreatedUnixMs: simEpochMs}
	for _, ip := range w.Scenario.Initial {
		c := slices.IndexFunc(w.Clusters, func(ci des.ClusterInfo) bool { return ci.ID == ip.Cluster })
		if c < 0 {
			continue // Validate has refused it
		}
		cw := &schemas.ClusterWeights{Cluster: ip.Cluster, DemandRps: ip.DemandRPS, ShedFraction: ip.ShedFraction}
		for e, info := range w.Engines {
			if v := ip.Weights[info.ID]; v > 0 {
				cw.Weights = append(cw.Weights, &schemas.EngineWeight{EngineId: info.ID, Weight: v,
					Explanation: &schemas.Explanation{NetworkMs: float64(w.RTT[c][e]) / 1e6}})
			}
		}
		snap.Clusters = append(snap.Clusters, cw)
	}
	return snap
}

func (g *gateway) install(t *pick.Table, w *des.World) {
	g.table = t
	g.toWorld = g.toWorld[:0]
	g.toTable = slices.Repeat([]int{-1}, len(w.Engines))
	idx := map[string]int{}
	for e, info := range w.Engines {
		idx[info.ID] = e
	}
	for i := range t.Len() {
		e := idx[t.Engine(i).ID]
		g.toWorld = append(g.toWorld, e)
		g.toTable[e] = i
	}
}

// Pick is gateway/proxy.go's order: the snapshot's shed, then admission
// (admission.go), then the picker; a retry goes to the picker directly,
// its request holding its admission slot.
func (p *switchyard) Pick(now time.Duration, r *des.Request, exclude []int32) int {
	p.now = now
	g := p.gw[r.Cluster]
	if r.Attempt > 1 {
		return p.place(g, r, exclude)
	}
	if g.table == nil || (g.shed > 0 && p.rng.Float64() < g.shed) {
		p.record(r, -1, schemas.RequestStatus_REQUEST_STATUS_SHED, schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT, des.Outcome{})
		return -1
	}
	return p.admit(g, r)
}

// place picks an engine for r's current attempt, r holding an admission
// slot, or returns -1: r is then shed (a first attempt) or failed (a
// retry with nowhere left to go), and its slot released.
func (p *switchyard) place(g *gateway, r *des.Request, exclude []int32) int {
	if g.table == nil {
		p.refuse(g, r)
		return -1
	}
	g.ex = g.ex[:0]
	for _, e := range exclude {
		if i := g.toTable[e]; i >= 0 {
			g.ex = append(g.ex, int32(i))
		}
	}
	var blockTokens int
	g.chain, blockTokens = gatewayChain(g.chain[:0], r, p.w.BlockTokens)
	req := pick.Request{Key: r.Key, NowMs: p.now.Milliseconds(), PromptTokens: r.W.PromptTokens,
		Blocks: g.chain, BlockTokens: blockTokens}
	i, _, tk := g.table.PickRequest(&req, g.ex)
	if i < 0 {
		p.refuse(g, r)
		return -1
	}
	g.placed[r.Index] = placement{table: g.table, i: i, tk: tk}
	return g.toWorld[i]
}

// refuse ends r, which holds an admission slot, without an engine: shed
// for capacity on its first attempt, failed on a retry.
func (p *switchyard) refuse(g *gateway, r *des.Request) {
	if r.Attempt > 1 {
		p.record(r, -1, schemas.RequestStatus_REQUEST_STATUS_ERROR, schemas.FailureReason_FAILURE_REASON_UNSPECIFIED, des.Outcome{})
	} else {
		p.record(r, -1, schemas.RequestStatus_REQUEST_STATUS_SHED, schemas.FailureReason_FAILURE_REASON_SHED_CAPACITY, des.Outcome{})
	}
	g.adm.release()
}

// gatewayChain appends to dst r's prefix-block hashes as a live gateway
// sees them (gateway/blocks.go), and their size in tokens: blocks of
// about pick.PromptBlockTokens, at most pick.MaxPromptBlocks of them.
// The workload's blocks of blockTokens are grouped when finer (a chain
// hash covers the prompt up to its block's end, so every m-th hash is
// the chain of m-times-larger blocks) and split when coarser (block k's
// parts hash its id, so two prompts share a part exactly when they share
// the block); as live, a trailing partial block is not hashed.
func gatewayChain(dst []uint64, r *des.Request, blockTokens int) ([]uint64, int) {
	blockTokens = max(blockTokens, 1)
	if split := blockTokens / pick.PromptBlockTokens; split >= 2 {
		part := blockTokens / split
		var h uint64 = 0x51ed27
		for k, b := range r.W.Blocks {
			n := split
			if k == len(r.W.Blocks)-1 {
				n = min(split, (r.W.PromptTokens-k*blockTokens)/part)
			}
			for j := 0; j < n && len(dst) < pick.MaxPromptBlocks; j++ {
				h = hashkey.Mix(h ^ (b*uint64(split) + uint64(j) + 0x9e3779b97f4a7c15))
				dst = append(dst, h)
			}
		}
		return dst, part
	}
	dst = chainHashes(dst, r)
	m := max(pick.PromptBlockTokens/blockTokens, 1)
	n := 0
	for k := m - 1; k < len(dst) && n < pick.MaxPromptBlocks; k += m {
		dst[n] = dst[k]
		n++
	}
	return dst[:n], blockTokens * m
}

// FirstToken implements des.FirstTokenObserver: the engine's TTFT
// histogram observes a request when its first token is produced, as
// vLLM's does.
func (p *switchyard) FirstToken(now time.Duration, r *des.Request, e int, engineTTFT time.Duration) {
	p.now = now
	p.ttft[e].n++
	p.ttft[e].sum += engineTTFT.Seconds()
	g := p.gw[r.Cluster]
	if pl, ok := g.placed[r.Index]; ok && !pl.first {
		pl.table.FirstToken(pl.i, pl.tk, float64(engineTTFT)/1e6)
		pl.first = true
		g.placed[r.Index] = pl
	}
}

func (p *switchyard) Done(now time.Duration, r *des.Request, e int, o des.Outcome) {
	p.now = now
	g := p.gw[r.Cluster]
	g.states[e].Release()
	if pl, ok := g.placed[r.Index]; ok {
		p.feedAdmission(g, e, pl.table.Engine(pl.i).Slots, r, o)
		delete(g.placed, r.Index)
		tbot, e2e := 0.0, 0.0
		if o.OK && o.OutputTokens > 1 {
			tbot = float64(o.MeanTBOT) / 1e6
		}
		if o.OK {
			e2e = max(float64(o.E2E-p.w.RTT[r.Cluster][e])/1e6, 0) // the engine's time on it
		}
		pl.table.Finished(pl.i, pl.tk, pl.first, tbot, e2e)
	}
	if o.Retry {
		return // the gateway reports the request once, after its last attempt
	}
	status := schemas.RequestStatus_REQUEST_STATUS_ERROR
	if o.OK {
		status = schemas.RequestStatus_REQUEST_STATUS_OK
		if o.OutputTokens > 1 {
			n := float64(o.OutputTokens - 1)
			p.tbot[e].n += n
			p.tbot[e].sum += o.MeanTBOT.Seconds() * n
		}
	}
	p.record(r, e, status, schemas.FailureReason_FAILURE_REASON_UNSPECIFIED, o)
	g.adm.release() // the request ends: its admission slot goes to the next
}

// record emits the gateway's routing event into the processor's pane:
// one per request, after its last attempt, as gateway/proxy.go does.
func (p *switchyard) record(r *des.Request, e int, status schemas.RequestStatus, why schemas.FailureReason, o des.Outcome) {
	ev := &p.ev
	*ev = schemas.RoutingEvent{
		SchemaVersion: schemas.Version,
		Cluster:       p.w.Clusters[r.Cluster].ID,
		Status:        status,
		FailureReason: why,
		Attempts:      uint32(r.Attempt),
		PromptTokens:  uint32(min(r.W.PromptTokens, math.MaxUint32)),
		OutputTokens:  uint32(min(r.W.OutputTokens, math.MaxUint32)),
		Stream:        !r.W.NonStreaming,
	}
	if e >= 0 {
		ev.EngineId = p.w.Engines[e].ID
	}
	if o.OK {
		ev.TtftMs = float64(o.TTFT) / 1e6
		ev.EngineTtftMs = float64(o.EngineTTFT) / 1e6
		ev.E2EMs = float64(o.E2E) / 1e6
		ev.MeanTbotMs = float64(o.MeanTBOT) / 1e6
		ev.CachedTokens = uint32(min(o.CachedTokens, math.MaxUint32))
	}
	// The gateway stamps the event with the request's start; it reaches
	// the processor when the request ends, and is late (dropped) when its
	// windows have already fired.
	// (The record's Kafka timestamp, which only bounds the event time
	// from above, is the event time too: the policy is not told the
	// virtual time of a request's end.)
	ev.EventTimeUnixMs = simEpochMs + r.W.Arrival.Milliseconds()
	if p.observe != nil {
		p.observe(ev)
	}
	p.proc.produce(partEvents, ev, r.W.Arrival)
}

func (p *switchyard) Tick(now time.Duration) {
	p.now = now
	if p.peerEvery > 0 && now >= p.nextPeer {
		p.sharePeerLoad()
		p.nextPeer = now + p.peerEvery
	}
	for _, g := range p.gw {
		for e, st := range g.states {
			up := p.w.Healthy(e)
			if g.up[e] && !up {
				st.Forget(now.Milliseconds())
			}
			g.up[e] = up
			st.SetDown(!up)
		}
	}
	for now >= p.nextSig {
		p.scrape(p.nextSig)
		p.nextSig += p.ctl.signal
	}
	if p.ctlp.planner == nil {
		p.ctlp.planner = plan.NewPlanner(p.settings())
		if p.initial != nil {
			p.ctlp.planner.Remember(p.initial)
		}
	}
	p.ctlp.advance(now, p.proc.core.Fire())
	for _, s := range p.ctlp.due(now) {
		p.installSnap(p.tables(s.snap))
	}
	for _, g := range p.gw {
		g.adm.q.Expire()
		p.setLimits(g)
	}
}

// sharePeerLoad models gateway/peers: every gateway reports its queued
// prefill per engine, and each sets every engine's foreign prefill to
// the sum of the reports of the other gateways of its peer clusters (of
// all, before a snapshot names them; the channel's delay, about a
// millisecond on NATS, is within a tick).
func (p *switchyard) sharePeerLoad() {
	n := len(p.w.Engines)
	if cap(p.peerSum) < n {
		p.peerSum = make([]int64, n)
	}
	sum := p.peerSum[:n]
	clear(sum)
	for _, g := range p.gw {
		for e, st := range g.states {
			sum[e] += st.Prefill()
		}
	}
	for c, g := range p.gw {
		if g.peers == nil {
			for e, st := range g.states {
				st.SetForeignPrefill(sum[e] - st.Prefill())
			}
			continue
		}
		for e, st := range g.states {
			var f int64
			for _, h := range g.peers {
				if h != c {
					f += p.gw[h].states[e].Prefill()
				}
			}
			st.SetForeignPrefill(f)
		}
	}
}

// scrape is the engine agents' work: one EngineSignal per engine.
func (p *switchyard) scrape(now time.Duration) {
	for e, info := range p.w.Engines {
		st := p.w.Stats(e)
		prev := p.prev[e]
		p.prev[e] = st
		ready := p.w.Replicas(e)
		health := schemas.Health_HEALTH_HEALTHY
		if ready == 0 {
			health = schemas.Health_HEALTH_UNHEALTHY
		}
		p.ttftH = schemas.Histogram{Count: uint64(p.ttft[e].n), Sum: p.ttft[e].sum}
		p.tbotH = schemas.Histogram{Count: uint64(p.tbot[e].n), Sum: p.tbot[e].sum}
		p.ttft[e], p.tbot[e] = acc{}, acc{}
		p.sig = schemas.EngineSignal{
			SchemaVersion:      schemas.Version,
			EngineId:           info.ID,
			Region:             info.Region,
			GpuClass:           info.GPU,
			EventTimeUnixMs:    simEpochMs + now.Milliseconds(),
			ReadyReplicas:      uint32(ready),
			Health:             health,
			RunningRequests:    float64(st.Running),
			WaitingRequests:    float64(st.Waiting),
			KvCacheUsage:       st.KVUsage(),
			KvCapacityTokens:   float64(st.KVBlocksTotal * info.Preset.BlockSize),
			PrefixCacheHits:    float64(st.PrefixHitTokens - prev.PrefixHitTokens),
			PrefixCacheQueries: float64(st.PrefixQueryTokens - prev.PrefixQueryTokens),
			IntervalSeconds:    p.ctl.signal.Seconds(),
			RequestsFinished:   float64(st.Finished - prev.Finished),
			PromptTokens:       float64(st.PromptTokens - prev.PromptTokens),
			GenerationTokens:   float64(st.GenerationTokens - prev.GenerationTokens),
			MaxBatch:           uint32(info.ReportedMaxBatch()),
		}
		if p.ttftH.Count > 0 {
			p.sig.TtftSeconds = &p.ttftH
		}
		if p.tbotH.Count > 0 {
			p.sig.TbotSeconds = &p.tbotH
		}
		p.noteSignal(e, &p.sig)
		p.proc.produce(partSignals, &p.sig, now)
	}
}

// minDemandRPS is the demand every cluster is planned for at least, so
// each gateway gets weights before its traffic shows in the estimates.
const minDemandRPS = 0.1

// settings are the planner's settings: the scenario's, and the pinned
// capacities of the switchyard-calibrated diagnostic.
func (p *switchyard) settings() plan.Settings {
	set := p.planSet
	if p.capacity != nil {
		set.ReplicaCapacityRPS = map[string]float64{}
		for k, info := range p.w.Engines {
			set.ReplicaCapacityRPS[info.ID] = p.capacity[k] / float64(max(info.Replicas, 1))
		}
	}
	return set
}

// tables indexes a snapshot by cluster and engine.
func (p *switchyard) tables(snapshot *schemas.WeightSnapshot) snapTables {
	weights := map[string]map[string]*schemas.EngineWeight{}
	for _, cw := range snapshot.GetClusters() {
		m := map[string]*schemas.EngineWeight{}
		for _, w := range cw.GetWeights() {
			m[w.GetEngineId()] = w
		}
		weights[cw.GetCluster()] = m
	}
	snap := snapTables{version: snapshot.GetVersion(), weights: make([][]float64, len(p.w.Clusters)),
		expl: make([][]*schemas.Explanation, len(p.w.Clusters)), shed: make([]float64, len(p.w.Clusters)),
		peers: make([][]int, len(p.w.Clusters))}
	for c, ci := range p.w.Clusters {
		snap.weights[c] = make([]float64, len(p.w.Engines))
		snap.expl[c] = make([]*schemas.Explanation, len(p.w.Engines))
		for e, info := range p.w.Engines {
			w := weights[ci.ID][info.ID]
			snap.weights[c][e], snap.expl[c][e] = w.GetWeight(), w.GetExplanation()
		}
		for _, cw := range snapshot.GetClusters() {
			if cw.GetCluster() == ci.ID {
				snap.shed[c] = cw.GetShedFraction()
				snap.peers[c] = p.clusterIndexes(cw.GetPeerClusters())
			}
		}
	}
	return snap
}

// clusterIndexes returns the indexes of the named clusters (unknown names
// skipped), or nil for none.
func (p *switchyard) clusterIndexes(names []string) []int {
	var out []int
	for _, n := range names {
		for c, ci := range p.w.Clusters {
			if ci.ID == n {
				out = append(out, c)
			}
		}
	}
	return out
}

func (p *switchyard) installSnap(s snapTables) {
	for c, g := range p.gw {
		var specs []pick.Spec
		for e, info := range p.w.Engines {
			if w := s.weights[c][e]; w > 0 {
				x := s.expl[c][e]
				specs = append(specs, pick.Spec{ID: info.ID, Weight: w, RTTms: x.GetNetworkMs(), MaxConcurrency: int(x.GetMaxConcurrency())})
			}
		}
		for e := range p.w.Engines {
			// The gateway sets each engine's cache residency from the
			// snapshot's explanation (gateway.go does the same).
			g.states[e].SetCacheResidency(s.expl[c][e].GetCacheResidencyS())
		}
		g.shed = s.shed[c]
		if len(specs) == 0 {
			if g.shed >= 1-1e-9 {
				g.table, g.peers = nil, s.peers[c] // everything shed
			}
			continue // nothing routable: keep the last good table
		}
		t, err := g.pool.Build(specs, pick.Options{})
		if err != nil {
			continue // an invalid snapshot is rejected; the last good one stays
		}
		g.install(t, p.w)
		g.peers = s.peers[c]
	}
	p.version = s.version
	p.weights = s.weights
}

// Weights implements des.Weighted.
func (p *switchyard) Weights() (uint64, [][]float64) { return p.version, p.weights }
