// Package agent scrapes engines' Prometheus /metrics (vLLM's names, old
// and new, and SGLang's, TGI's, TensorRT-LLM's and Dynamo's), turns
// counters and histograms into deltas since the previous scrape, and
// publishes one EngineSignal per engine per interval to the signals topic,
// keyed by engine id. `switchyard agent` wires its flags to this package
// (see docs/agent.md).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Config configures the agent.
type Config struct {
	// Engines to scrape. At least one.
	Engines []Target
	// Interval between scrapes. Default 2s.
	Interval time.Duration
	// TopicPrefix names the topics (streams.TopicsFor). Default "switchyard".
	TopicPrefix string
	// Replication of the topics the agent creates. Default: the brokers'
	// defaults.
	Replication streams.Replication
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the agent's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// HTTPClient scrapes; default a client with a timeout of Interval.
	HTTPClient *http.Client
	// Now is the clock stamping event times and pacing failure logs.
	// Default time.Now.
	Now func() time.Time
	// ErrorLogInterval is the least time between two log lines about one
	// engine's failing scrapes (the first failure and the recovery are
	// always logged). Default 30s.
	ErrorLogInterval time.Duration
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
	if c.Interval <= 0 {
		return fmt.Errorf("interval %v not positive", c.Interval)
	}
	if c.ErrorLogInterval < 0 {
		return fmt.Errorf("error log interval %v negative", c.ErrorLogInterval)
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
	cl     *kgo.Client
	cfg    Config
	topics streams.Topics
	log    *slog.Logger
	m      *metrics

	published, publishErrs, scrapes, scrapeErrs atomic.Uint64
}

// ClientOpts are the options the agent wants of its Kafka client, to be
// added to the seed brokers: a bounded produce buffer (10,000 records;
// signals beyond it are dropped and counted, never waited for) and a short
// linger. Writes stay idempotent (docs/topics.md): a batch sent without an
// answer is retried, never failed, so during an outage signals wait in the
// buffer and count as publish errors only once it is full; the outage
// itself shows in switchyard_broker_connected (internal/brokerstate).
func ClientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.MaxBufferedRecords(10000), kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchCompression(kgo.GzipCompression())} // read by every client without plugins (docs/topics.md)
}

// ErrNoClient is returned by New without a Kafka client.
var ErrNoClient = errors.New("no kafka client")

// New validates cfg and returns an agent that publishes with cl (see
// ClientOpts). The caller owns cl: Run flushes it but does not close it.
func New(cl *kgo.Client, cfg Config) (*Service, error) {
	if cl == nil {
		return nil, ErrNoClient
	}
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
	if cfg.ErrorLogInterval == 0 {
		cfg.ErrorLogInterval = 30 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("agent metrics: %w", err)
	}
	for _, t := range cfg.Engines {
		m.scrapeErrors.WithLabelValues(t.ID) // exported as 0 before any error
	}
	for _, o := range []string{"ok", "error"} {
		m.scrapes.WithLabelValues(o)
	}
	return &Service{cl: cl, cfg: cfg, topics: streams.TopicsFor(cfg.TopicPrefix), log: cfg.Logger, m: m}, nil
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	return Stats{SignalsPublished: s.published.Load(), PublishErrors: s.publishErrs.Load(), Scrapes: s.scrapes.Load(), ScrapeErrors: s.scrapeErrs.Load()}
}

// Run scrapes every engine each interval until ctx is done, then flushes
// what is buffered (at most 5s) and returns nil.
func (s *Service) Run(ctx context.Context) error {
	cl := s.cl
	if err := streams.EnsureTopics(ctx, cl, s.topics, 0, s.cfg.Replication); err != nil {
		// Not fatal: the topics may be managed elsewhere and exist.
		s.log.Warn("ensuring topics", "err", err)
	}
	s.log.Info("agent scraping", "engines", len(s.cfg.Engines), "interval", s.cfg.Interval, "topic", s.topics.Signals)
	g, gctx := errgroup.WithContext(ctx)
	for _, t := range s.cfg.Engines {
		g.Go(func() error { s.loop(gctx, cl, t); return nil })
	}
	err := g.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ferr := cl.Flush(fctx); ferr != nil {
		s.log.Warn("flushing signals", "err", ferr)
	}
	return err
}

// engineLoop is one engine's scraper and failure log.
type engineLoop struct {
	id       string
	scraper  *Scraper
	failures failureLog
	answered bool // a scrape has succeeded
}

func (s *Service) newLoop(t Target) *engineLoop {
	return &engineLoop{
		id:       t.ID,
		scraper:  NewScraper(t, s.cfg.HTTPClient),
		failures: failureLog{log: s.log.With("engine", t.ID, "url", baseURL(t.URL)), every: s.cfg.ErrorLogInterval},
	}
}

func (s *Service) loop(ctx context.Context, cl *kgo.Client, t Target) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	e := s.newLoop(t)
	for {
		if sig, ok := s.scrapeOnce(ctx, e); ok {
			s.publish(ctx, cl, sig)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scrapeOnce scrapes e's engine, counts and logs the outcome, and returns
// the signal to publish (false once ctx is done).
func (s *Service) scrapeOnce(ctx context.Context, e *engineLoop) (*schemas.EngineSignal, bool) {
	now := s.cfg.Now()
	start := time.Now()
	sig, err := e.scraper.Scrape(ctx, now)
	s.m.duration.Observe(time.Since(start).Seconds())
	s.scrapes.Add(1)
	if ctx.Err() != nil {
		return nil, false
	}
	if err != nil {
		s.scrapeErrs.Add(1)
		s.m.scrapes.WithLabelValues("error").Inc()
		s.m.scrapeErrors.WithLabelValues(e.id).Inc()
		e.failures.failure(now, err)
	} else {
		s.m.scrapes.WithLabelValues("ok").Inc()
		e.failures.success(now)
		if !e.answered {
			e.answered = true
			e.failures.log.Info("engine answered", "model", sig.GetModel(), "health", sig.GetHealth().String(),
				"ready_replicas", sig.GetReadyReplicas(), "max_batch", sig.GetMaxBatch(), "max_batch_source", sig.GetMaxBatchSource(),
				"kv_capacity_tokens", sig.GetKvCapacityTokens())
		}
	}
	return sig, true
}

func (s *Service) publish(ctx context.Context, cl *kgo.Client, sig *schemas.EngineSignal) {
	b, err := proto.Marshal(sig)
	if err != nil {
		s.publishErrs.Add(1)
		s.m.publishErrors.Inc()
		return
	}
	cl.TryProduce(ctx, &kgo.Record{Topic: s.topics.Signals, Key: []byte(sig.GetEngineId()), Value: b, Headers: streams.ProtoHeaders(sig)}, func(_ *kgo.Record, err error) {
		if err != nil {
			s.publishErrs.Add(1)
			s.m.publishErrors.Inc()
			return
		}
		s.published.Add(1)
		s.m.published.Inc()
	})
}
