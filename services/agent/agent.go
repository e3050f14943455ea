// Package agent is the `switchyard agent` service: it scrapes engines'
// Prometheus /metrics (vLLM names; older and other engines' names too),
// turns counters and histograms into deltas since the previous scrape, and
// publishes one EngineSignal per engine per interval to the signals topic,
// keyed by engine id (see docs/agent.md).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// Target is one engine to scrape.
type Target struct {
	// ID is the engine id (the signal's key). Required.
	ID string
	// URL is the engine's base URL; /metrics and /health are appended
	// (a URL ending in /metrics is accepted). Required.
	URL      string
	Region   string
	GPUClass string
}

// Config configures the agent.
type Config struct {
	// Engines to scrape. At least one.
	Engines []Target
	// Interval between scrapes. Default 2s.
	Interval time.Duration
	// KafkaBrokers are the bootstrap brokers. Required.
	KafkaBrokers []string
	// TopicPrefix names the topics (streams.TopicsFor). Default "switchyard".
	TopicPrefix string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the agent's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// HTTPClient scrapes; default a client with a timeout of Interval.
	HTTPClient *http.Client
	// Now is the clock stamping event times. Default time.Now.
	Now func() time.Time
}

// Validate reports a configuration error (after defaults).
func (c Config) Validate() error {
	if len(c.Engines) == 0 {
		return errors.New("no engines")
	}
	seen := map[string]bool{}
	for _, t := range c.Engines {
		if t.ID == "" || t.URL == "" {
			return fmt.Errorf("engine %q: id and url are required", t.ID)
		}
		if seen[t.ID] {
			return fmt.Errorf("engine %q listed twice", t.ID)
		}
		seen[t.ID] = true
	}
	if len(c.KafkaBrokers) == 0 {
		return errors.New("no kafka brokers")
	}
	if c.Interval <= 0 {
		return fmt.Errorf("interval %v not positive", c.Interval)
	}
	return nil
}

// Stats counts what the agent has done.
type Stats struct {
	// SignalsPublished counts signals Kafka acknowledged.
	SignalsPublished uint64
	// PublishErrors counts signals Kafka did not take (buffer full or
	// produce error).
	PublishErrors uint64
	// Scrapes and ScrapeErrors count scrapes and failed scrapes.
	Scrapes, ScrapeErrors uint64
}

// Service is a running agent.
type Service struct {
	cfg    Config
	topics streams.Topics
	log    *slog.Logger
	m      *metrics

	published, publishErrs, scrapes, scrapeErrs atomic.Uint64
}

// New validates cfg and returns an agent.
func New(cfg Config) (*Service, error) {
	if cfg.Interval == 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: cfg.Interval}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, topics: streams.TopicsFor(cfg.TopicPrefix), log: cfg.Logger, m: m}, nil
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	return Stats{SignalsPublished: s.published.Load(), PublishErrors: s.publishErrs.Load(), Scrapes: s.scrapes.Load(), ScrapeErrors: s.scrapeErrs.Load()}
}

// Run scrapes every engine each interval until ctx is done, then flushes
// what is buffered (at most 5s) and returns nil.
func (s *Service) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(s.cfg.KafkaBrokers...),
		kgo.DefaultProduceTopic(s.topics.Signals),
		kgo.MaxBufferedRecords(10000),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	if err := streams.EnsureTopics(ctx, cl, s.topics, 0); err != nil {
		// Not fatal: the topics may be managed elsewhere and exist.
		s.log.Warn("ensuring topics", "err", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, t := range s.cfg.Engines {
		g.Go(func() error { s.loop(gctx, cl, t); return nil })
	}
	err = g.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ferr := cl.Flush(fctx); ferr != nil {
		s.log.Warn("flushing signals", "err", ferr)
	}
	return err
}

// engineState is what one engine's loop remembers between scrapes.
type engineState struct {
	prev     *reading
	prevTime time.Time
}

func (s *Service) loop(ctx context.Context, cl *kgo.Client, t Target) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	var st engineState
	for {
		s.scrapeOnce(ctx, cl, t, &st)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Service) scrapeOnce(ctx context.Context, cl *kgo.Client, t Target, st *engineState) {
	now := s.cfg.Now()
	sig, err := s.scrape(ctx, t, st, now)
	s.scrapes.Add(1)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		s.scrapeErrs.Add(1)
		s.m.scrapes.WithLabelValues("error").Inc()
		s.log.Debug("scrape failed", "engine", t.ID, "err", err)
	} else {
		s.m.scrapes.WithLabelValues("ok").Inc()
	}
	b, err := proto.Marshal(sig)
	if err != nil {
		s.publishErrs.Add(1)
		return
	}
	cl.TryProduce(ctx, &kgo.Record{Key: []byte(t.ID), Value: b}, func(_ *kgo.Record, err error) {
		if err != nil {
			s.publishErrs.Add(1)
			s.m.publishErrors.Inc()
			return
		}
		s.published.Add(1)
		s.m.published.Inc()
	})
}

// scrape reads one engine and returns its signal at now. On failure it
// returns an unhealthy signal and the error. st carries the previous
// reading for deltas and is updated.
func (s *Service) scrape(ctx context.Context, t Target, st *engineState, now time.Time) (*schemas.EngineSignal, error) {
	sig := &schemas.EngineSignal{
		SchemaVersion: schemas.Version, EngineId: t.ID, EndpointUrl: baseURL(t.URL), Region: t.Region, GpuClass: t.GPUClass,
		EventTimeUnixMs: now.UnixMilli(), Health: schemas.Health_HEALTH_UNHEALTHY,
	}
	start := time.Now()
	cur, err := s.fetchMetrics(ctx, t)
	s.m.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		return sig, err
	}
	fill(sig, s.health(ctx, t), cur, st, now)
	return sig, nil
}

// fill sets sig's values from reading cur, with deltas against the
// previous reading in st (which it then replaces). Every value it writes
// is finite and non-negative.
func fill(sig *schemas.EngineSignal, health schemas.Health, cur *reading, st *engineState, now time.Time) {
	sig.Health = health
	sig.Model = cur.model
	sig.RunningRequests = cur.gauges["running"]
	sig.WaitingRequests = cur.gauges["waiting"]
	sig.KvCacheUsage = math.Min(1, math.Max(0, cur.gauges["kv"]))
	replicas := 1.0
	if r, ok := cur.gauges["replicas"]; ok && r >= 1 {
		replicas = math.Min(math.Round(r), 1e6)
	}
	if sig.Health != schemas.Health_HEALTH_UNHEALTHY {
		sig.ReadyReplicas = uint32(replicas)
	}
	if mb, ok := cur.gauges["max_batch"]; ok && mb > 0 {
		sig.MaxBatch = uint32(math.Min(math.Round(mb/replicas), 1e9))
	}
	hasPrev := st.prev != nil
	var prev *reading
	if hasPrev {
		prev = st.prev
		sig.IntervalSeconds = now.Sub(st.prevTime).Seconds()
		if sig.IntervalSeconds < 0 {
			sig.IntervalSeconds = 0
		}
	} else {
		prev = &reading{counters: map[string]float64{}, hists: map[string]*hist{}}
	}
	// A series missing from the previous scrape (engines create counter
	// children lazily) started from zero.
	d := func(q string) float64 {
		c, ok := cur.counters[q]
		if !ok {
			return 0
		}
		return counterDelta(c, prev.counters[q], hasPrev)
	}
	hd := func(q string) *schemas.Histogram {
		p := prev.hists[q]
		if p == nil && hasPrev {
			p = &hist{}
		}
		return histDelta(cur.hists[q], p)
	}
	sig.PrefixCacheHits = d("hits")
	sig.PrefixCacheQueries = d("queries")
	sig.PromptTokens = d("prompt")
	sig.GenerationTokens = d("generation")
	sig.TtftSeconds = hd("ttft")
	sig.TbotSeconds = hd("itl")
	if _, ok := cur.counters["success"]; ok {
		sig.RequestsFinished = d("success")
	} else if e2e := hd("e2e"); e2e != nil {
		sig.RequestsFinished = float64(e2e.GetCount())
	}
	st.prev, st.prevTime = cur, now
}

func (s *Service) fetchMetrics(ctx context.Context, t Target) (*reading, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL(t.URL)+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", t.ID, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", t.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: status %d", t.ID, resp.StatusCode)
	}
	r, err := parse(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", t.ID, err)
	}
	return r, nil
}

// health asks /health: 2xx healthy, 404 (no such endpoint) healthy since
// metrics answered, 5xx unhealthy, anything else (or no answer) degraded.
func (s *Service) health(ctx context.Context, t Target) schemas.Health {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL(t.URL)+"/health", nil)
	if err != nil {
		return schemas.Health_HEALTH_DEGRADED
	}
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return schemas.Health_HEALTH_DEGRADED
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300, resp.StatusCode == http.StatusNotFound:
		return schemas.Health_HEALTH_HEALTHY
	case resp.StatusCode >= 500:
		return schemas.Health_HEALTH_UNHEALTHY
	}
	return schemas.Health_HEALTH_DEGRADED
}
