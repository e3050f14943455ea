// Package gateway is Switchyard's data plane: an OpenAI-compatible
// streaming proxy that routes every request on the cluster's published
// weight snapshot (see gateway/pick), with retries inside a budget,
// outlier ejection, penalties and load shedding, and publishes one
// RoutingEvent per request to an EventSink without ever waiting for it.
//
// The gateway dials no broker and reads no file: the service hands it
// its snapshot source, event sink and signal fetcher as options (see
// New). The HTTP transport lives in subpackages: httpserver (the fast
// HTTP/1.1 server loop), engineclient (the pooled client to engines) and
// relay (the SSE relay and its accounting).
//
// An inference request is one call value (call.go) passed through named
// stages: authorize, parse, plan (the table, snapshot shedding), admit,
// forward, then per attempt pick, attempt (send, relay) and account;
// serveInference records the outcome.
//
// The gateway keeps routing on its last good snapshot when NATS, Kafka or
// the optimizer is down (static stability). Before any snapshot arrives it
// routes by the local fallback: the static engines (option Engines),
// healthy ones first, fewest requests in flight.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/gateway/budget"
	"github.com/switchyard-llm/switchyard/gateway/engineclient"
	"github.com/switchyard-llm/switchyard/gateway/httpserver"
	"github.com/switchyard-llm/switchyard/gateway/outlier"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/gateway/relay"
	"github.com/switchyard-llm/switchyard/gateway/shed"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
)

// routing is one immutable routing state, swapped atomically.
type routing struct {
	table         *pick.Table // nil when the snapshot sheds everything
	version       uint64      // 0: fallback
	versionHeader []string    // version as the X-Switchyard-Snapshot value
	shed          float64
	created       time.Time
	fallback      bool
	cw            *clusterView // the cluster's part of the snapshot (decode.go)
	// rttFromSnapshot: every engine's round trip came from the snapshot
	// (none from the gateway's health checks), so the same entry makes
	// the same table (apply.go).
	rttFromSnapshot bool
	// specs are the engines table was built from (weights of 0
	// included); models the tables of their parts that serve one model
	// (models.go).
	specs  []pick.Spec
	models *modelTables
}

// Stats is a summary for status lines.
type Stats struct {
	Cluster         string
	SnapshotVersion uint64
	Requests        uint64
	Succeeded       uint64
	Failed          uint64
	Shed            uint64
	ClientErrors    uint64
	Canceled        uint64
	Retries         uint64
	EventsDropped   uint64
	InFlight        int64
}

// Gateway routes and proxies requests.
type Gateway struct {
	cfg     cfg
	log     *slog.Logger
	m       *metrics
	hot     hotMetrics
	pool    *pick.Pool
	cur     atomic.Pointer[routing]
	budget  *budget.Budget
	outlier *outlier.Detector
	shedder *shed.Shedder
	admit   *admission // admission.go
	degrade *degrade   // degrade.go
	models  map[string]bool
	tracer  trace.Tracer
	tracing bool // spans are made (TracerProvider is not the no-op default)
	prop    propagation.TextMapPropagator
	handler http.Handler

	addr      atomic.Pointer[string]
	adminAddr atomic.Pointer[string] // admin.go
	ready     chan struct{}
	draining  atomic.Bool // drain.go
	// cut ends when the drain times out: the streams still running end
	// (a signal for context.AfterFunc, as a Done channel is for select;
	// no request's context).
	cut        context.Context
	cutStreams context.CancelFunc

	requests, succeeded, failed, shedN, clientErr, canceled, retries, dropped atomic.Uint64
	handoffs                                                                  atomic.Uint64 // fast server → net/http connections

	healthMu   sync.Mutex
	healthFail map[string]int
	// healthNow asks the health loop for a round of checks at once
	// (health.go: checkSoon).
	healthNow chan struct{}
	rtts      sync.Map // *pick.State -> *rttRing, health-check round trips
	// noStreamOptions: engines that refused a request for the
	// stream_options the gateway added (*pick.State -> struct{}); they get
	// the client's own body, and the gateway counts their tokens itself.
	noStreamOptions sync.Map
	engineInfo      sync.Map                     // engine id -> *engineInfo from signals, for routing events (event.go)
	served          atomic.Pointer[servedModels] // the engines' model lists from signals (models.go)
	servedMu        sync.Mutex                   // serializes changes of served

	client  *engineclient.Client // nil when a Transport was given
	reqBufs sync.Pool            // *reqBuf
	bufs    sync.Pool            // *[]byte of relay.BufSize, relay buffers
	drains  drains               // tails of complete streams being drained
}

// New builds the gateway of cluster (a CPU cluster, or region, whose
// snapshots it routes on) from opts; Run starts it.
func New(cluster string, opts ...Opt) (*Gateway, error) {
	cfg := cfg{cluster: cluster, rawSyscalls: true}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.registerer)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg:        cfg,
		log:        cfg.logger.With("component", "gateway", "cluster", cfg.cluster),
		m:          m,
		pool:       pick.NewPool(),
		budget:     budget.New(cfg.retryBudget),
		outlier:    outlier.New(cfg.outlier),
		shedder:    shed.New(),
		tracer:     cfg.tracerProvider.Tracer("github.com/switchyard-llm/switchyard/gateway"),
		prop:       propagation.TraceContext{},
		ready:      make(chan struct{}),
		healthFail: map[string]int{},
		healthNow:  make(chan struct{}, 1),
	}
	g.cut, g.cutStreams = context.WithCancel(context.Background())
	g.served.Store(&servedModels{})
	g.hot = g.m.hot(cfg.cluster)
	g.m.zero(cfg.cluster, knownEngines(cfg))
	if g.admit, err = newAdmission(&g.cfg, cfg.registerer); err != nil {
		return nil, err
	}
	if g.degrade, err = newDegrade(cfg.cluster, cfg.registerer, g.log, cfg.now); err != nil {
		return nil, err
	}
	g.admit.onHeld = g.degrade.heldBelow
	if err := registerEngineCollector(g); err != nil {
		return nil, err
	}
	_, noTracing := cfg.tracerProvider.(noop.TracerProvider)
	g.tracing = !noTracing
	g.bufs.New = func() any { b := make([]byte, relay.BufSize); return &b }
	g.reqBufs.New = func() any { return &reqBuf{b: make([]byte, 0, 2048)} }
	if cfg.ownClient {
		g.client = engineclient.New(cfg.connectTimeout, cfg.now, engineclient.RawSyscalls(cfg.rawSyscalls))
	}
	if len(cfg.models) > 0 {
		g.models = map[string]bool{}
		for _, m := range cfg.models {
			g.models[m] = true
		}
	}
	if err := g.registerGauges(cfg.registerer); err != nil {
		return nil, err
	}
	if len(cfg.engines) > 0 {
		if err := g.applyStatic(cfg.engines); err != nil {
			return nil, err
		}
	}
	if cfg.initial != nil {
		if err := g.apply(cfg.initial); err != nil {
			return nil, fmt.Errorf("initial snapshot: %w", err)
		}
	}
	g.loadSnapshotCache() // snapshot.go
	g.handler = g.routes()
	return g, nil
}

// applyStatic routes on the static engines until a snapshot arrives.
func (g *Gateway) applyStatic(engines []StaticEngine) error {
	specs := make([]pick.Spec, len(engines))
	for i, e := range engines {
		specs[i] = pick.Spec{ID: e.ID, URL: strings.TrimRight(e.URL, "/"), Weight: 1}
	}
	opt := g.cfg.pick
	opt.LeastLoaded = true
	t, err := g.pool.Build(specs, opt)
	if err != nil {
		return fmt.Errorf("static engines: %w", err)
	}
	g.setLimits(t)
	g.cur.Store(&routing{table: t, fallback: true, versionHeader: []string{"0"}, specs: specs, models: &modelTables{}})
	g.placeAdapters() // models.go
	g.outlier.SetClusterSize(t.Len())
	return nil
}

func (g *Gateway) registerGauges(reg prometheus.Registerer) error {
	labels := prometheus.Labels{"cluster": g.cfg.cluster}
	var errs []error
	gauge := func(name, help string, f func() float64) {
		_, err := obs.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "switchyard", Subsystem: "gateway", Name: name, Help: help, ConstLabels: labels,
		}, f))
		errs = append(errs, err)
	}
	gauge("snapshot_age_seconds", "Age of the snapshot routed on (since its creation); -1 before any snapshot.", func() float64 {
		rt := g.cur.Load()
		if rt == nil || rt.fallback {
			return -1
		}
		return g.cfg.now().Sub(rt.created).Seconds()
	})
	gauge("snapshot_version", "Version of the snapshot routed on; 0 before any snapshot.", func() float64 {
		if rt := g.cur.Load(); rt != nil {
			return float64(rt.version)
		}
		return 0
	})
	_, err := obs.Register(reg, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "events_dropped_total", ConstLabels: labels,
		Help: "Routing events lost: every one not delivered to Kafka and not spooled (no sink, buffer or spool full, Kafka failed it), the sink's drops included.",
	}, func() float64 { return float64(g.eventsDropped()) }))
	errs = append(errs, err)
	gauge("snapshot_too_old", "1 while the snapshot routed on is older than the maximum age (--snapshot-max-age), else 0.", func() float64 {
		if g.snapshotTooOld() {
			return 1
		}
		return 0
	})
	// The source counts rollbacks (snapshots.Watcher with Check); 0 when
	// it does not.
	rb, _ := g.cfg.snapshots.(interface{ Rollbacks() uint64 })
	_, err = obs.Register(reg, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "snapshot_rollbacks_total", ConstLabels: labels,
		Help: "Snapshots not applied because a newer one was seen (an old snapshot re-put into the bucket).",
	}, func() float64 {
		if rb == nil {
			return 0
		}
		return float64(rb.Rollbacks())
	}))
	errs = append(errs, err)
	gauge("in_flight", "Requests in flight to engines.", func() float64 { return float64(g.pool.InFlight()) })
	gauge("ejected_engines", "Engines ejected now.", func() float64 { return float64(g.outlier.Ejected()) })
	return errors.Join(errs...)
}

// eventDropped counts a routing event the sink refused (or none
// configured), unless the sink counts its own drops (DropCounter).
func (g *Gateway) eventDropped() {
	if _, ok := g.cfg.events.(DropCounter); !ok {
		g.dropped.Add(1)
	}
}

// eventsDropped is every routing event lost: the gateway's own count
// and the sink's (DropCounter).
func (g *Gateway) eventsDropped() uint64 {
	n := g.dropped.Load()
	if dc, ok := g.cfg.events.(DropCounter); ok {
		n += dc.Dropped()
	}
	return n
}

// apply validates snap and swaps it in.
func (g *Gateway) apply(snap *schemas.WeightSnapshot) error {
	return g.applyView(viewOf(snap, g.cfg.cluster)) // apply.go
}

// setLimits sets the concurrency limits of t's engines and the admission
// capacity (admission.go).
func (g *Gateway) setLimits(t *pick.Table) {
	g.admit.apply(g.cfg.cluster, t, g.cfg.now(), false)
}

// tickAdmission updates the limits of the routed engines and rejects
// the queued requests that can no longer be admitted in time.
func (g *Gateway) tickAdmission() {
	g.admit.expire()
	if rt := g.cur.Load(); rt != nil && rt.table != nil {
		g.admit.apply(g.cfg.cluster, rt.table, g.cfg.now(), true)
	}
}

// ApplySnapshot validates and applies a proto-binary snapshot, as the
// NATS watcher does.
func (g *Gateway) ApplySnapshot(b []byte) error {
	var prev *clusterView
	if rt := g.cur.Load(); rt != nil {
		prev = rt.cw
	}
	snap, err := g.admitSnapshot(b, prev) // snapshot.go: signature, decode, clock
	if err != nil {
		g.m.rejected.WithLabelValues(g.cfg.cluster, rejectReason(err)).Inc()
		return err
	}
	if err := g.applyView(snap); err != nil {
		return err
	}
	g.saveSnapshot(b)
	return nil
}

// Handler returns the HTTP handler (also usable without Run, for tests;
// then no events are produced and guardrails do not tick).
func (g *Gateway) Handler() http.Handler { return g.handler }

// Pool returns the engine states the gateway routes with, for what runs
// beside it on the same states (gateway/peers shares their queued prefill
// with other gateways and sets what those report).
func (g *Gateway) Pool() *pick.Pool { return g.pool }

// PeerClusters returns the peer_clusters of the snapshot routed on (the
// clusters whose gateways share engines with this one, for gateway/peers
// to hear only them), or nil before any snapshot and under the static
// fallback. The slice must not be modified.
func (g *Gateway) PeerClusters() []string {
	if rt := g.cur.Load(); rt != nil && !rt.fallback {
		return rt.cw.peers
	}
	return nil
}

// Addr returns the listen address once Run listens, else "".
func (g *Gateway) Addr() string {
	if a := g.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Ready is closed once Run listens.
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Stats returns counters for status lines.
func (g *Gateway) Stats() Stats {
	s := Stats{
		Cluster:       g.cfg.cluster,
		Requests:      g.requests.Load(),
		Succeeded:     g.succeeded.Load(),
		Failed:        g.failed.Load(),
		Shed:          g.shedN.Load(),
		ClientErrors:  g.clientErr.Load(),
		Canceled:      g.canceled.Load(),
		Retries:       g.retries.Load(),
		EventsDropped: g.eventsDropped(),
		InFlight:      g.pool.InFlight(),
	}
	if rt := g.cur.Load(); rt != nil {
		s.SnapshotVersion = rt.version
	}
	return s
}

// Run listens, watches snapshots, checks engine health and emits events
// until ctx is done, then drains (drain.go): readiness fails, the
// listener accepts for DrainDelay more, and the requests in flight run to
// their end until DrainTimeout; streams still running then end with an
// error event.
func (g *Gateway) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", g.cfg.listen, err)
	}
	return g.Serve(ctx, ln)
}

// Serve is Run on an existing listener.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	admin, err := g.listenAdmin()
	if err != nil {
		ln.Close()
		return err
	}
	addr := ln.Addr().String()
	g.addr.Store(&addr)
	close(g.ready)
	g.log.Info("gateway listening", "addr", addr)
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: httpserver.ReadHeaderTimeout,
		IdleTimeout:       httpserver.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	httpserver.Harden(srv, g.cfg.bodyLimits)
	var fast *httpserver.Server
	if g.cfg.httpServer == ServerFast {
		fast = httpserver.New(httpserver.Config{
			Handler:      http.HandlerFunc(g.serveInference),
			Paths:        inferencePaths(),
			Std:          srv,
			Addr:         ln.Addr(),
			MaxBodyBytes: g.cfg.maxBodyBytes,
			Logger:       g.log,
			OnHandoff:    func() { g.handoffs.Add(1) },
			Limits:       g.cfg.bodyLimits,
			RawSyscalls:  g.cfg.rawSyscalls,
		})
	}
	// The snapshots, guardrails, health checks and admin listener run
	// until the API server has drained, not only until ctx ends: the
	// requests that finish during the drain still route on the latest
	// snapshot, and the probes see readiness fail rather than a refused
	// connection (drain.go).
	rctx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	eg, ectx := errgroup.WithContext(rctx)
	var updates <-chan []byte
	if g.cfg.snapshots != nil {
		updates = g.cfg.snapshots.Updates()
	}
	eg.Go(func() error { g.control(ectx, updates); return nil })
	if g.cfg.healthInterval > 0 {
		eg.Go(func() error { g.healthLoop(ectx); return nil })
	}
	if g.cfg.signals != nil {
		eg.Go(func() error { g.followSignals(ectx, g.cfg.signals); return nil })
	}
	if admin != nil {
		eg.Go(func() error { return admin.serve(ectx) })
	}
	api := apiServer{ln: ln, std: srv, fast: fast}
	eg.Go(func() error {
		defer stopRun()
		select {
		case <-ctx.Done():
			g.drainAPI(api, time.Now(), true)
		case <-ectx.Done(): // a component failed, or serving did
			g.drainAPI(api, time.Now(), false)
		}
		return nil
	})
	var serveErr error
	if fast != nil {
		serveErr = fast.Serve(ln)
	} else {
		serveErr = srv.Serve(httpserver.GuardListener(ln))
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	if serveErr != nil {
		serveErr = fmt.Errorf("serving: %w", serveErr)
		// Stop the other goroutines.
		api.close()
		stopRun()
	}
	waitErr := eg.Wait()
	g.drains.closeAndWait() // at most doneGrace
	if g.client != nil {
		g.client.CloseAll()
	}
	return errors.Join(serveErr, waitErr)
}

// control applies snapshots and ticks the guardrails, in one goroutine.
func (g *Gateway) control(ctx context.Context, updates <-chan []byte) {
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case b, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			if err := g.ApplySnapshot(b); err != nil {
				g.log.Warn("snapshot rejected", "err", err)
			}
			g.tickShed()
		case <-tick.C:
			if g.client != nil {
				g.client.CloseIdle(g.cfg.now().Add(-g.client.IdleTimeout()))
			}
			if n := g.outlier.Tick(g.cfg.now()); n > 0 {
				g.log.Info("engines returned from ejection", "count", n)
			}
			g.tickShed()
			g.tickAdmission()
			g.degrade.check(g.cfg.now())
			g.checkSnapshotAge() // snapshot.go
		}
	}
}

func (g *Gateway) tickShed() {
	f := 0.0
	if rt := g.cur.Load(); rt != nil {
		f = rt.shed
	}
	g.shedder.Update(f, 0.3)
}

// metricsHandler returns the /metrics handler of the Gatherer, or nil.
func (g *Gateway) metricsHandler() http.Handler {
	if g.cfg.gatherer == nil {
		return nil
	}
	return promhttp.HandlerFor(g.cfg.gatherer, promhttp.HandlerOpts{})
}

// drains counts background drains so that Serve can wait for them; once
// closed (after the server stopped, while handlers cut off by a forced
// close may still run) no new drain starts.
type drains struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// start reports whether a drain may start, and counts it.
func (d *drains) start() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

func (d *drains) done() { d.wg.Done() }

func (d *drains) closeAndWait() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
}
