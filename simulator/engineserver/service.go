// Package engineserver serves a simulated LLM engine over the OpenAI API:
// the simulator/engine model driven in real time, with vLLM's Prometheus
// metrics on /metrics and a fault toggle for failure tests. It is what
// `switchyard enginesim` runs (services/enginesim parses the flags) and
// what the demo and tests start in-process.
package engineserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/switchyard-llm/switchyard/simulator/engine"
	"golang.org/x/sync/errgroup"
)

// errStopped reports that the engine driver is not running any more.
var errStopped = errors.New("engine stopped")

// shutdownGrace bounds how long Run waits for in-flight requests.
const shutdownGrace = 5 * time.Second

// Service is one simulated engine endpoint.
type Service struct {
	cfg     Config
	preset  engine.Preset
	log     *slog.Logger
	eng     *engine.Engine // owned by the Drive goroutine
	reg     *prometheus.Registry
	met     *metrics
	handler http.Handler
	vocab   []string

	ops      chan op
	driving  atomic.Bool
	stopped  chan struct{} // closed when Drive returns
	nextID   atomic.Uint64
	created  int64
	addr     atomic.Pointer[string]
	ready    chan struct{} // closed once Run listens
	readyOne sync.Once

	faultMu sync.Mutex
	fault   Fault
	rng     *rand.Rand // guarded by faultMu
}

// op is a request from a handler to the driver.
type op struct {
	cancel bool
	req    engine.Request
	events chan engine.Event // submit: receives the request's events
	reply  chan error        // submit: buffered, receives Submit's error
}

// pending is the driver's state of one request in the engine.
type pending struct {
	events  chan engine.Event
	arrival time.Duration
	last    time.Duration
}

// New validates cfg and builds a Service. It starts nothing: call Run, or
// serve Handler yourself and call Drive.
func New(cfg Config) (*Service, error) {
	cfg.setDefaults()
	p, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	maxLoRAs := 0
	if len(cfg.LoRAModules) > 0 {
		maxLoRAs = cfg.MaxLoRAs
	}
	eng, err := engine.New(engine.Config{Preset: p, Replicas: cfg.Replicas, TokenEvents: true, CacheEvents: cfg.KVEvents.Endpoint != "",
		MaxLoRAs: maxLoRAs, LoRALoad: cfg.LoRALoad})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s := &Service{
		cfg:     cfg,
		preset:  p,
		log:     cfg.Logger.With("engine", cfg.ID),
		eng:     eng,
		reg:     prometheus.NewRegistry(),
		vocab:   newVocab(),
		ops:     make(chan op, 256),
		stopped: make(chan struct{}),
		ready:   make(chan struct{}),
		created: time.Now().Unix(),
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), 0x656e67696e657369)),
	}
	s.met = newMetrics(cfg.Model, engineInfo{
		id: cfg.ID, gpuClass: p.Name, replicas: cfg.Replicas,
		blockSize: p.BlockSize, kvBlocks: p.KVBlocks, maxSeqs: p.MaxSeqs,
		adapters: cfg.LoRAModules, maxLoRAs: maxLoRAs,
	}, cfg.Metrics == MetricsFull)
	s.met.engine.set(eng.Stats())
	if err := s.met.register(s.reg); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	if cfg.Registerer != nil {
		if err := s.met.register(prometheus.WrapRegistererWith(prometheus.Labels{"engine": cfg.ID}, cfg.Registerer)); err != nil {
			return nil, fmt.Errorf("registering metrics with the given registerer: %w", err)
		}
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the HTTP API: /v1/chat/completions, /v1/completions,
// /v1/models, /health, /metrics and /admin/fault. Completions are served
// only while Drive (or Run) is running.
func (s *Service) Handler() http.Handler { return s.handler }

// Addr returns the address Run listens on, or "" before it listens.
func (s *Service) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Ready is closed once Run listens (Addr is then set).
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Stats returns the engine model's gauges and counters as of the driver's
// last step.
func (s *Service) Stats() engine.Stats { return s.met.engine.get() }

// Fault returns the injected failure state.
func (s *Service) Fault() Fault {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.fault
}

// SetFault replaces the injected failure state; ErrorRate must be in
// [0, 1].
func (s *Service) SetFault(f Fault) error {
	if !(f.ErrorRate >= 0 && f.ErrorRate <= 1) {
		return fmt.Errorf("error rate must be in [0, 1], got %v", f.ErrorRate)
	}
	s.faultMu.Lock()
	s.fault = f
	s.faultMu.Unlock()
	s.log.Info("fault set", "error_rate", f.ErrorRate, "unhealthy", f.Unhealthy)
	return nil
}

// injectError draws whether this request fails by injection.
func (s *Service) injectError() bool {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.fault.ErrorRate > 0 && s.rng.Float64() < s.fault.ErrorRate
}

// Run listens on Config.Listen, drives the engine and serves the API until
// ctx is done, then shuts down gracefully (in-flight requests get a few
// seconds to finish).
func (s *Service) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Listen, err)
	}
	addr := ln.Addr().String()
	s.addr.Store(&addr)
	s.readyOne.Do(func() { close(s.ready) })
	s.log.Info("enginesim listening", "addr", addr, "gpu_class", s.preset.Name, "model", s.cfg.Model, "replicas", s.cfg.Replicas,
		"metrics", s.cfg.Metrics, "latency_multiplier", s.cfg.LatencyMultiplier, "max_num_seqs", s.preset.MaxSeqs, "kv_blocks", s.preset.KVBlocks)

	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	driveCtx, stopDrive := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDrive()
	g := new(errgroup.Group)
	g.Go(func() error { return s.Drive(driveCtx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving %s: %w", addr, err)
		}
		return nil
	})
	var serveErr error
	select {
	case <-ctx.Done():
	case <-s.stopped:
		serveErr = errStopped
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		_ = srv.Close()
	}
	stopDrive()
	err = errors.Join(serveErr, g.Wait())
	// The totals, for runs whose /metrics shows only vLLM's series.
	st := s.met.engine.get()
	s.log.Info("enginesim stopped", "requests_finished", st.Finished, "requests_canceled", st.Canceled,
		"prompt_tokens", st.PromptTokens, "prefix_hit_tokens", st.PrefixHitTokens,
		"lora_requests", st.LoRARequests, "lora_loads", st.LoRALoads)
	return err
}

// Drive runs the engine model in real time until ctx is done; at most one
// Drive runs per Service. Requests still in the engine then fail. With
// Config.KVEvents it publishes the cache's changes after every step it
// runs, and returns an error at once when its sockets cannot listen.
func (s *Service) Drive(ctx context.Context) error {
	if !s.driving.CompareAndSwap(false, true) {
		return errors.New("engine already driven")
	}
	defer close(s.stopped)
	var kv *kvPublisher
	if s.cfg.KVEvents.Endpoint != "" {
		var err error
		if kv, err = startKVPublisher(ctx, s.cfg.KVEvents, s.log, s.preset.BlockSize, s.cfg.Replicas); err != nil {
			return err
		}
		defer kv.Close()
	}
	start := time.Now()
	scale := s.cfg.TimeScale
	vnow := func() time.Duration { return time.Duration(float64(time.Since(start)) * scale) }
	inflight := map[uint64]*pending{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		evs := s.eng.Advance(vnow())
		if kv != nil { // before the clients hear of the step: a cache event is never later than the response it belongs to
			kv.publish(s.eng.CacheEvents())
		}
		s.dispatch(evs, inflight)
		s.met.engine.set(s.eng.Stats())
		if maxLoRAs := s.met.engine.info.maxLoRAs; maxLoRAs > 0 {
			s.met.engine.setAdapters(s.eng.Adapters())
		}
		if next, ok := s.eng.NextEvent(); ok {
			wait := time.Duration(float64(next-vnow())/scale) + time.Microsecond
			timer.Reset(max(wait, 0))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			for id, p := range inflight {
				close(p.events)
				delete(inflight, id)
			}
			return nil
		case <-timer.C:
		case o := <-s.ops:
			now := vnow()
			if o.cancel {
				if p, ok := inflight[o.req.ID]; ok && s.eng.Cancel(now, o.req.ID) {
					close(p.events)
					delete(inflight, o.req.ID)
					s.met.canceled.Inc()
				}
				continue
			}
			err := s.eng.Submit(now, o.req)
			if err == nil {
				inflight[o.req.ID] = &pending{events: o.events, arrival: now, last: now}
			}
			o.reply <- err
		}
	}
}

// dispatch hands events to their requests and observes latencies (in real
// time).
func (s *Service) dispatch(evs []engine.Event, inflight map[uint64]*pending) {
	scale := s.cfg.TimeScale
	secs := func(d time.Duration) float64 { return d.Seconds() / scale }
	for _, ev := range evs {
		p, ok := inflight[ev.ID]
		if !ok {
			continue
		}
		switch ev.Kind {
		case engine.EventFirstToken:
			s.met.ttft.Observe(secs(ev.Time - p.arrival))
		case engine.EventToken:
			s.met.itl.Observe(secs(ev.Time - p.last))
		case engine.EventFinished:
			if ev.Result.OutputTokens > 1 {
				s.met.itl.Observe(secs(ev.Time - p.last))
			}
			s.met.e2e.Observe(secs(ev.Time - p.arrival))
			s.met.queue.Observe(secs(ev.Result.QueueTime()))
			s.met.prefill.Observe(secs(ev.Result.FirstToken - ev.Result.Admitted))
			delete(inflight, ev.ID)
		}
		p.last = ev.Time
		select {
		case p.events <- ev:
		default: // cannot happen: the buffer holds every event
			s.log.Error("request event buffer full", "request_id", ev.ID)
		}
		if ev.Kind == engine.EventFinished {
			close(p.events)
		}
	}
}

// submit queues req in the engine and returns the channel of its events,
// closed after EventFinished or when the engine stops.
func (s *Service) submit(ctx context.Context, req engine.Request) (<-chan engine.Event, error) {
	o := op{req: req, events: make(chan engine.Event, req.OutputTokens+1), reply: make(chan error, 1)}
	select {
	case s.ops <- o:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.stopped:
		return nil, errStopped
	}
	select {
	case err := <-o.reply:
		if err != nil {
			return nil, err
		}
		return o.events, nil
	case <-s.stopped:
		return nil, errStopped
	}
}

// cancel removes request id from the engine, freeing its slot.
func (s *Service) cancel(id uint64) {
	select {
	case s.ops <- op{cancel: true, req: engine.Request{ID: id}}:
	case <-s.stopped:
	}
}

// Registry returns the Service's own Prometheus registry (what /metrics
// serves).
func (s *Service) Registry() *prometheus.Registry { return s.reg }

func (s *Service) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError)})
}
