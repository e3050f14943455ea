// Package gateway is Switchyard's data plane: an OpenAI-compatible
// streaming proxy that routes every request on the cluster's published
// weight snapshot (see gateway/pick), with retries inside a budget,
// outlier ejection, penalties and load shedding, and publishes one
// RoutingEvent per request to Kafka without ever waiting for Kafka.
//
// The gateway keeps routing on its last good snapshot when NATS, Kafka or
// the optimizer is down (static stability). Before any snapshot arrives it
// routes by the local fallback: the static engines of Config.Engines,
// healthy ones first, fewest requests in flight.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/gateway/budget"
	"github.com/switchyard-llm/switchyard/gateway/outlier"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/gateway/shed"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Defaults of Config.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultMaxBodyBytes      = 4 << 20
	DefaultConnectTimeout    = 2 * time.Second
	DefaultFirstTokenTimeout = 30 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	DefaultMaxAttempts       = 3
	DefaultHealthInterval    = 5 * time.Second
	DefaultEventBuffer       = 4096
	tickInterval             = 250 * time.Millisecond
)

// StaticEngine is an engine known without a snapshot (--engines).
type StaticEngine struct {
	ID  string
	URL string
}

// ParseEngines parses "id=url,id=url".
func ParseEngines(s string) ([]StaticEngine, error) {
	var out []StaticEngine
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, u, ok := strings.Cut(part, "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("engine %q: want id=url", part)
		}
		if err := checkEndpoint(u); err != nil {
			return nil, fmt.Errorf("engine %q: %w", id, err)
		}
		out = append(out, StaticEngine{ID: id, URL: strings.TrimRight(u, "/")})
	}
	return out, nil
}

// Config configures a Gateway. Zero values take the defaults.
type Config struct {
	// Cluster is the CPU cluster (region) whose snapshot key is watched.
	Cluster string
	// Listen is the HTTP listen address. Default 127.0.0.1:8080.
	Listen string
	// NATSURL of the snapshot store; "" routes without a control plane.
	NATSURL string
	// SnapshotBucket is the JetStream KV bucket. Default snapshots.DefaultBucket.
	SnapshotBucket string
	// KafkaBrokers receive routing events; empty: events are dropped
	// (and counted).
	KafkaBrokers []string
	// TopicPrefix of the Kafka topics (streams.TopicsFor).
	TopicPrefix string
	// IgnoreSignals turns off following the engine-signal topic (by
	// default followed whenever KafkaBrokers is set) for health and ready
	// replicas.
	IgnoreSignals bool
	// SnapshotFile is a WeightSnapshot in protobuf JSON applied at start.
	SnapshotFile string
	// Engines are routed to (least loaded) until a snapshot arrives.
	Engines []StaticEngine
	// Models, when set, is the set of model names accepted; others get
	// 404 model_not_found. Empty accepts any non-empty model.
	Models []string
	// Transport reaches the engines. Default: plain-http engines get
	// the gateway's own pooled HTTP/1.1 client and https engines a
	// keep-alive net/http transport, both with ConnectTimeout.
	Transport http.RoundTripper
	// MaxBodyBytes bounds request bodies (413 above). Default 4 MiB.
	MaxBodyBytes int64
	// ConnectTimeout bounds dialing an engine (default transport only).
	// Default 2s.
	ConnectTimeout time.Duration
	// FirstTokenTimeout bounds the wait for the first byte of the
	// response body. Default 30s.
	FirstTokenTimeout time.Duration
	// IdleTimeout bounds the gap between SSE events. Default 30s.
	IdleTimeout time.Duration
	// MaxAttempts per request, at most 3. Default 3.
	MaxAttempts int
	// MaxInFlightPerEngine is each engine's hard in-flight cap; when
	// every candidate is at it the gateway sheds with 429. 0: no cap.
	MaxInFlightPerEngine int
	// HealthInterval of active /health checks; negative disables them.
	// Default 5s.
	HealthInterval time.Duration
	// EventBuffer is the routing-event buffer. Default 4096.
	EventBuffer int
	// Pick, RetryBudget and Outlier tune the guardrails.
	Pick        pick.Options
	RetryBudget budget.Config
	Outlier     outlier.Config
	// TracerProvider makes the spans; default no-op.
	TracerProvider trace.TracerProvider
	// Logger; default discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Gatherer, when set, is served at /metrics.
	Gatherer prometheus.Gatherer
	// Now is the clock; default time.Now.
	Now func() time.Time
	// HTTPServer serves the listener: ServerFast (the gateway's own
	// HTTP/1.1 loop for the proxy routes, net/http for the rest) or
	// ServerStd (net/http for everything). Default ServerFast.
	HTTPServer string

	ownClient bool // Transport was not set: plain-http engines get engineClient
}

func (c *Config) defaults() error {
	if c.Cluster == "" {
		return errors.New("cluster is required")
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.FirstTokenTimeout <= 0 {
		c.FirstTokenTimeout = DefaultFirstTokenTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxAttempts <= 0 || c.MaxAttempts > DefaultMaxAttempts {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.EventBuffer <= 0 {
		c.EventBuffer = DefaultEventBuffer
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch c.HTTPServer {
	case "":
		c.HTTPServer = ServerFast
	case ServerFast, ServerStd:
	default:
		return fmt.Errorf("http server %q: want %q or %q", c.HTTPServer, ServerFast, ServerStd)
	}
	if c.Transport == nil {
		c.ownClient = true
		c.Transport = &http.Transport{
			DialContext:         (&net.Dialer{Timeout: c.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
			// One read takes every event the engine has sent so far
			// (the default 4 KiB holds about 20 tokens).
			ReadBufferSize: sseBufSize,
		}
	}
	return nil
}

// routing is one immutable routing state, swapped atomically.
type routing struct {
	table         *pick.Table // nil when the snapshot sheds everything
	version       uint64      // 0: fallback
	versionHeader []string    // version as the X-Switchyard-Snapshot value
	shed          float64
	created       time.Time
	fallback      bool
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
	cfg     Config
	log     *slog.Logger
	m       *metrics
	hot     hotMetrics
	pool    *pick.Pool
	cur     atomic.Pointer[routing]
	budget  *budget.Budget
	outlier *outlier.Detector
	shedder *shed.Shedder
	models  map[string]bool
	tracer  trace.Tracer
	tracing bool // spans are made (TracerProvider is not the no-op default)
	prop    propagation.TextMapPropagator
	handler http.Handler

	kafka   *kgo.Client
	emitter *streams.Emitter

	addr  atomic.Pointer[string]
	ready chan struct{}

	requests, succeeded, failed, shedN, clientErr, canceled, retries, dropped atomic.Uint64
	handoffs                                                                  atomic.Uint64 // fast server → net/http connections

	healthMu   sync.Mutex
	healthFail map[string]int

	client  *engineClient // nil when Config.Transport was set
	reqBufs sync.Pool     // *reqBuf
	bufs    sync.Pool     // *[]byte of sseBufSize, relay buffers
	drains  drains        // tails of complete streams being drained
}

// New validates cfg and builds a gateway; Run starts it.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "gateway", "cluster", cfg.Cluster),
		m:          newMetrics(cfg.Registerer),
		pool:       pick.NewPool(),
		budget:     budget.New(cfg.RetryBudget),
		outlier:    outlier.New(cfg.Outlier),
		shedder:    shed.New(),
		tracer:     cfg.TracerProvider.Tracer("github.com/switchyard-llm/switchyard/gateway"),
		prop:       propagation.TraceContext{},
		ready:      make(chan struct{}),
		healthFail: map[string]int{},
	}
	g.hot = g.m.hot(cfg.Cluster)
	_, noTracing := cfg.TracerProvider.(noop.TracerProvider)
	g.tracing = !noTracing
	g.bufs.New = func() any { b := make([]byte, sseBufSize); return &b }
	g.reqBufs.New = func() any { return &reqBuf{b: make([]byte, 0, 2048)} }
	if cfg.ownClient {
		g.client = newEngineClient(cfg.ConnectTimeout, cfg.Now)
	}
	if len(cfg.Models) > 0 {
		g.models = map[string]bool{}
		for _, m := range cfg.Models {
			g.models[m] = true
		}
	}
	g.registerGauges(cfg.Registerer)
	if len(cfg.Engines) > 0 {
		specs := make([]pick.Spec, len(cfg.Engines))
		for i, e := range cfg.Engines {
			if err := checkEndpoint(e.URL); err != nil {
				return nil, fmt.Errorf("static engine %q: %w", e.ID, err)
			}
			specs[i] = pick.Spec{ID: e.ID, URL: strings.TrimRight(e.URL, "/"), Weight: 1}
		}
		opt := cfg.Pick
		opt.LeastLoaded = true
		t, err := g.pool.Build(specs, opt)
		if err != nil {
			return nil, fmt.Errorf("static engines: %w", err)
		}
		g.setLimits(t)
		g.cur.Store(&routing{table: t, fallback: true, versionHeader: []string{"0"}})
		g.outlier.SetClusterSize(t.Len())
	}
	if cfg.SnapshotFile != "" {
		snap, err := ReadSnapshotFile(cfg.SnapshotFile)
		if err != nil {
			return nil, err
		}
		if err := g.apply(snap); err != nil {
			return nil, fmt.Errorf("snapshot file %s: %w", cfg.SnapshotFile, err)
		}
	}
	if len(cfg.KafkaBrokers) > 0 {
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(cfg.KafkaBrokers...),
			kgo.ProducerLinger(5*time.Millisecond),
			kgo.RecordDeliveryTimeout(30*time.Second),
			kgo.MaxBufferedRecords(cfg.EventBuffer),
			kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.ClientID("switchyard-gateway-"+cfg.Cluster),
		)
		if err != nil {
			return nil, fmt.Errorf("creating kafka client: %w", err)
		}
		g.kafka = cl
		g.emitter = streams.NewEmitter(cl, streams.TopicsFor(cfg.TopicPrefix).RoutingEvents, "gateway", cfg.EventBuffer, cfg.Registerer)
	}
	g.handler = g.routes()
	return g, nil
}

func (g *Gateway) registerGauges(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	labels := prometheus.Labels{"cluster": g.cfg.Cluster}
	gauge := func(name, help string, f func() float64) {
		_ = reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "switchyard", Subsystem: "gateway", Name: name, Help: help, ConstLabels: labels,
		}, f))
	}
	gauge("snapshot_age_seconds", "Age of the snapshot routed on (since its creation); -1 before any snapshot.", func() float64 {
		rt := g.cur.Load()
		if rt == nil || rt.fallback {
			return -1
		}
		return g.cfg.Now().Sub(rt.created).Seconds()
	})
	gauge("snapshot_version", "Version of the snapshot routed on; 0 before any snapshot.", func() float64 {
		if rt := g.cur.Load(); rt != nil {
			return float64(rt.version)
		}
		return 0
	})
	gauge("in_flight", "Requests in flight to engines.", func() float64 { return float64(g.pool.InFlight()) })
	gauge("ejected_engines", "Engines ejected now.", func() float64 { return float64(g.outlier.Ejected()) })
}

// apply validates snap and swaps it in.
func (g *Gateway) apply(snap *schemas.WeightSnapshot) error {
	err := g.applyErr(snap)
	if err != nil {
		g.m.rejected.WithLabelValues(g.cfg.Cluster, rejectReason(err)).Inc()
		return err
	}
	g.m.applied.WithLabelValues(g.cfg.Cluster).Inc()
	return nil
}

func (g *Gateway) applyErr(snap *schemas.WeightSnapshot) error {
	cw, err := ValidateSnapshot(snap, g.cfg.Cluster)
	if err != nil {
		return err
	}
	if old := g.cur.Load(); old != nil && !old.fallback && snap.GetVersion() <= old.version {
		return fmt.Errorf("%w: got %d, hold %d", ErrSnapshotStale, snap.GetVersion(), old.version)
	}
	rt := &routing{version: snap.GetVersion(), shed: cw.GetShedFraction(), created: time.UnixMilli(snap.GetCreatedUnixMs()),
		versionHeader: []string{strconv.FormatUint(snap.GetVersion(), 10)}}
	if snap.GetCreatedUnixMs() <= 0 {
		rt.created = g.cfg.Now()
	}
	specs := make([]pick.Spec, 0, len(cw.GetWeights()))
	for _, w := range cw.GetWeights() {
		specs = append(specs, pick.Spec{ID: w.GetEngineId(), URL: strings.TrimRight(w.GetEndpointUrl(), "/"), Weight: w.GetWeight()})
	}
	t, err := g.pool.Build(specs, g.cfg.Pick)
	switch {
	case errors.Is(err, pick.ErrNoEngines) && rt.shed >= 1-sumTolerance:
		rt.shed = 1 // the plan sheds everything
	case err != nil:
		return fmt.Errorf("%w: %w", ErrSnapshotInvalid, err)
	default:
		g.setLimits(t)
		rt.table = t
		g.outlier.SetClusterSize(t.Len())
	}
	g.cur.Store(rt)
	g.log.Info("snapshot applied", "version", rt.version, "engines", len(specs), "shed_fraction", rt.shed)
	return nil
}

func (g *Gateway) setLimits(t *pick.Table) {
	for i := 0; i < t.Len(); i++ {
		t.Engine(i).State.SetLimit(int64(g.cfg.MaxInFlightPerEngine))
	}
}

// ApplySnapshot validates and applies a proto-binary snapshot, as the
// NATS watcher does.
func (g *Gateway) ApplySnapshot(b []byte) error {
	snap, err := DecodeSnapshot(b)
	if err != nil {
		g.m.rejected.WithLabelValues(g.cfg.Cluster, rejectReason(err)).Inc()
		return err
	}
	return g.apply(snap)
}

// Handler returns the HTTP handler (also usable without Run, for tests;
// then no events are produced and guardrails do not tick).
func (g *Gateway) Handler() http.Handler { return g.handler }

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
		Cluster:       g.cfg.Cluster,
		Requests:      g.requests.Load(),
		Succeeded:     g.succeeded.Load(),
		Failed:        g.failed.Load(),
		Shed:          g.shedN.Load(),
		ClientErrors:  g.clientErr.Load(),
		Canceled:      g.canceled.Load(),
		Retries:       g.retries.Load(),
		EventsDropped: g.dropped.Load(),
		InFlight:      g.pool.InFlight(),
	}
	if rt := g.cur.Load(); rt != nil {
		s.SnapshotVersion = rt.version
	}
	return s
}

// Run listens, watches snapshots, checks engine health and emits events
// until ctx is done, then shuts down gracefully (in-flight requests get
// up to 10s).
func (g *Gateway) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", g.cfg.Listen, err)
	}
	return g.Serve(ctx, ln)
}

// Serve is Run on an existing listener.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	addr := ln.Addr().String()
	g.addr.Store(&addr)
	close(g.ready)
	g.log.Info("gateway listening", "addr", addr)
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       serverIdleTimeout,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	var fast *fastServer
	if g.cfg.HTTPServer == ServerFast {
		fast = newFastServer(g, srv, ln.Addr())
	}
	eg, ectx := errgroup.WithContext(ctx)
	emitCtx, stopEmit := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEmit()
	var emitDone chan struct{}
	if g.emitter != nil {
		emitDone = make(chan struct{})
		go func() {
			defer close(emitDone)
			_ = g.emitter.Run(emitCtx)
		}()
	}
	var watcher *snapshots.Watcher
	if g.cfg.NATSURL != "" {
		watcher = snapshots.NewWatcher(g.cfg.NATSURL, g.cfg.SnapshotBucket, g.cfg.Cluster)
		eg.Go(func() error { return watcher.Run(ectx) })
	}
	eg.Go(func() error { g.control(ectx, watcher); return nil })
	if g.cfg.HealthInterval > 0 {
		eg.Go(func() error { g.healthLoop(ectx); return nil })
	}
	if len(g.cfg.KafkaBrokers) > 0 && !g.cfg.IgnoreSignals {
		eg.Go(func() error { return g.consumeSignals(ectx) })
	}
	eg.Go(func() error {
		<-ectx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if fast != nil {
			if err := fast.shutdown(sctx, ln); err != nil {
				fast.close()
			}
			return nil
		}
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		return nil
	})
	var serveErr error
	if fast != nil {
		serveErr = fast.serve(ln)
	} else {
		serveErr = srv.Serve(ln)
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	if serveErr != nil {
		serveErr = fmt.Errorf("serving: %w", serveErr)
		// Stop the other goroutines.
		if fast != nil {
			fast.close()
		} else {
			_ = srv.Close()
		}
	}
	waitErr := eg.Wait()
	g.drains.closeAndWait() // at most doneGrace
	if g.client != nil {
		g.client.closeAll()
	}
	stopEmit()
	if emitDone != nil {
		<-emitDone
	}
	if g.kafka != nil {
		g.kafka.Close()
	}
	return errors.Join(serveErr, waitErr)
}

// control applies snapshots and ticks the guardrails, in one goroutine.
func (g *Gateway) control(ctx context.Context, w *snapshots.Watcher) {
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	var updates <-chan []byte
	if w != nil {
		updates = w.Updates()
	}
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
				g.client.closeIdle(g.cfg.Now().Add(-g.client.idleTimeout))
			}
			if n := g.outlier.Tick(g.cfg.Now()); n > 0 {
				g.log.Info("engines returned from ejection", "count", n)
			}
			g.tickShed()
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

// Metrics returns the /metrics handler of cfg.Gatherer, or nil.
func (g *Gateway) metricsHandler() http.Handler {
	if g.cfg.Gatherer == nil {
		return nil
	}
	return promhttp.HandlerFor(g.cfg.Gatherer, promhttp.HandlerOpts{})
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
