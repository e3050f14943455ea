// Package optimizer is the `switchyard optimizer` service: it consumes the
// processor's estimates from Kafka and, for every completed processor
// window, plans the routing with package optimizer/plan and publishes a
// weight snapshot to NATS JetStream whose version is the window's end.
package optimizer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Config configures the service.
type Config struct {
	KafkaBrokers []string
	TopicPrefix  string
	NATSURL      string
	// Settle is how long the estimates of a window may be quiet before the
	// window is planned without waiting for the next one (default 500ms).
	// The processor publishes a window's estimates in one burst.
	Settle     time.Duration
	Settings   plan.Settings
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Stats are the service's counters.
type Stats struct {
	EstimatesConsumed  uint64
	SnapshotsPublished uint64
	LatestVersion      uint64
	DeadLettered       uint64
}

// Service is a running optimizer.
type Service struct {
	cfg    Config
	topics streams.Topics

	estimates, published, latest, dead atomic.Uint64

	m metrics
}

type metrics struct {
	published  prometheus.Counter
	failures   *prometheus.CounterVec
	solveSecs  prometheus.Histogram
	objective  prometheus.Gauge
	shedRPS    prometheus.Gauge
	version    prometheus.Gauge
	estimates  prometheus.Counter
	deadLetter prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		published:  prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_optimizer_snapshots_published_total", Help: "Weight snapshots published."}),
		failures:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_optimizer_failures_total", Help: "Windows that published nothing, by stage."}, []string{"stage"}),
		solveSecs:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "switchyard_optimizer_solve_seconds", Help: "Time to build and solve one instance.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		objective:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_optimizer_objective_ms", Help: "Expected mean end-to-end latency of the latest plan."}),
		shedRPS:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_optimizer_shed_rps", Help: "Requests per second the latest plan sheds."}),
		version:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_optimizer_snapshot_version", Help: "Version of the latest published snapshot (its window end, Unix ms)."}),
		estimates:  prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_optimizer_estimates_consumed_total", Help: "Estimate records consumed."}),
		deadLetter: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_optimizer_dead_letter_total", Help: "Estimate records sent to the dead-letter topic."}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.failures, m.solveSecs, m.objective, m.shedRPS, m.version, m.estimates, m.deadLetter)
	}
	return m
}

// New validates cfg and returns a service.
func New(cfg Config) (*Service, error) {
	if len(cfg.KafkaBrokers) == 0 {
		return nil, errors.New("optimizer: no Kafka brokers")
	}
	if cfg.NATSURL == "" {
		return nil, errors.New("optimizer: no NATS URL")
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, topics: streams.TopicsFor(cfg.TopicPrefix), m: newMetrics(cfg.Registerer)}, nil
}

// Stats returns the service's counters.
func (s *Service) Stats() Stats {
	return Stats{
		EstimatesConsumed:  s.estimates.Load(),
		SnapshotsPublished: s.published.Load(),
		LatestVersion:      s.latest.Load(),
		DeadLettered:       s.dead.Load(),
	}
}

// Run consumes estimates and publishes a snapshot per completed window
// until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(s.cfg.KafkaBrokers...),
		kgo.ConsumeTopics(s.topics.Estimates),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return fmt.Errorf("optimizer kafka client: %w", err)
	}
	defer cl.Close()
	if err := streams.EnsureTopics(ctx, cl, s.topics, 0); err != nil {
		s.cfg.Logger.Warn("creating topics", "err", err)
	}
	nc, err := nats.Connect(s.cfg.NATSURL, nats.Name("switchyard-optimizer"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("connecting to nats %s: %w", s.cfg.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	var store *snapshots.Store
	for store == nil {
		openCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		store, err = snapshots.Open(openCtx, js)
		cancel()
		if err != nil {
			s.cfg.Logger.Warn("snapshot store not ready", "err", err)
			if !sleep(ctx, time.Second) {
				return nil
			}
		}
	}
	planner := plan.NewPlanner(s.cfg.Settings)
	// Continue from what is published: previous weights for the churn
	// term, and no re-planning of windows already published.
	for _, c := range s.cfg.Settings.Clusters {
		if snap, err := store.Get(ctx, c); err == nil {
			planner.Remember(snap)
			if snap.GetVersion() > s.latest.Load() {
				s.latest.Store(snap.GetVersion())
			}
		}
	}
	dlq := streams.NewDeadLetter(cl, s.topics.DeadLetter)

	records := make(chan *schemas.Estimate, 1024)
	consumeDone := make(chan struct{})
	go func() {
		defer close(consumeDone)
		defer close(records)
		s.consume(ctx, cl, dlq, records)
	}()
	defer func() { <-consumeDone }()

	// Estimates arrive window by window; a window is planned when the next
	// one starts arriving or when its estimates have been quiet for Settle.
	var pending []*schemas.Estimate
	var pendingEnd int64
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	flush := func() {
		if pendingEnd != 0 {
			s.round(ctx, store, planner, time.UnixMilli(pendingEnd), pending)
		}
		pending, pendingEnd = nil, 0
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case est, ok := <-records:
			if !ok {
				return nil
			}
			end := est.WindowEndUnixMs()
			if pendingEnd != 0 && end > pendingEnd {
				flush()
			}
			pending = append(pending, est)
			pendingEnd = max(pendingEnd, end)
			settle.Reset(s.cfg.Settle)
		case <-settle.C:
			flush()
		}
	}
}

// round plans and publishes the window ending at end.
func (s *Service) round(ctx context.Context, store *snapshots.Store, planner *plan.Planner, end time.Time, ests []*schemas.Estimate) {
	if uint64(end.UnixMilli()) <= s.latest.Load() {
		planner.Apply(ests...) // already published (e.g. before a restart)
		return
	}
	start := time.Now()
	snap, err := planner.Plan(end, ests)
	s.m.solveSecs.Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, plan.ErrNothingToPlan), errors.Is(err, plan.ErrOldWindow):
		s.m.failures.WithLabelValues("instance").Inc()
		s.cfg.Logger.Debug("not planning", "window_end", end, "err", err)
		return
	case err != nil:
		s.m.failures.WithLabelValues("solve").Inc()
		s.cfg.Logger.Error("planning failed", "window_end", end, "err", err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := store.Publish(pctx, snap); err != nil {
		s.m.failures.WithLabelValues("publish").Inc()
		s.cfg.Logger.Warn("publishing snapshot", "version", snap.GetVersion(), "err", err)
		return
	}
	s.latest.Store(snap.GetVersion())
	s.published.Add(1)
	s.m.published.Inc()
	s.m.version.Set(float64(snap.GetVersion()))
	s.m.objective.Set(snap.GetStats().GetObjectiveMs())
	s.m.shedRPS.Set(snap.GetStats().GetTotalShedRps())
	s.cfg.Logger.Info("snapshot published", "version", snap.GetVersion(), "objective_ms", snap.GetStats().GetObjectiveMs(), "clusters", len(snap.GetClusters()))
}

func (s *Service) consume(ctx context.Context, cl *kgo.Client, dlq *streams.DeadLetter, out chan<- *schemas.Estimate) {
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			s.cfg.Logger.Warn("fetching estimates", "topic", t, "partition", p, "err", err)
		})
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			var est schemas.Estimate
			reason := ""
			if err := proto.Unmarshal(r.Value, &est); err != nil {
				reason = "undecodable estimate: " + err.Error()
			} else if est.GetKind() == nil {
				reason = "estimate has no kind"
			} else if est.WindowEndUnixMs() <= 0 {
				reason = "estimate has no window end"
			}
			if reason != "" {
				if err := dlq.Send(ctx, r, reason); err != nil {
					s.cfg.Logger.Warn("dead-lettering estimate", "err", err)
				}
				s.dead.Add(1)
				s.m.deadLetter.Inc()
				continue
			}
			s.estimates.Add(1)
			s.m.estimates.Inc()
			select {
			case out <- &est:
			case <-ctx.Done():
				return
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ParseRTT parses "a:b=40,b:a=40" (cluster:region=ms) into a matrix.
func ParseRTT(s string) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		pair, ms, ok := strings.Cut(part, "=")
		from, to, ok2 := strings.Cut(pair, ":")
		if !ok || !ok2 || from == "" || to == "" {
			return nil, fmt.Errorf("rtt entry %q: want CLUSTER:REGION=MS", part)
		}
		v, err := strconv.ParseFloat(ms, 64)
		if err != nil || v < 0 || v != v || v > 1e9 {
			return nil, fmt.Errorf("rtt entry %q: bad milliseconds", part)
		}
		if out[from] == nil {
			out[from] = map[string]float64{}
		}
		out[from][to] = v
	}
	return out, nil
}

// Command returns `switchyard optimizer`.
func Command() cli.Command {
	return cli.Command{Name: "optimizer", Summary: "consume estimates, solve, publish weight snapshots", Run: runCommand}
}

func runCommand(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("optimizer", flag.ContinueOnError)
	var conn cli.Connection
	conn.Register(fs)
	settle := fs.Duration("settle", 500*time.Millisecond, "plan a window once its estimates have been quiet this long")
	maxUtil := fs.Float64("max-utilization", 0.9, "cap on each engine's planned utilization, in (0,1]")
	churn := fs.Float64("churn-weight", plan.DefaultChurnWeight, "absolute churn: ms of cost per rps of traffic moved away from the previous weights; 0 = relative (--churn-relative), negative = no churn term")
	churnRel := fs.Float64("churn-relative", plan.DefaultChurnRelative, "relative churn (used when --churn-weight is 0): churn weight = this x the expected latency of the previous weights; negative = no churn term")
	ttl := fs.Duration("estimate-ttl", 30*time.Second, "ignore estimates older than this (in event time)")
	netTTL := fs.Duration("network-ttl", 2*time.Minute, "ignore measured network latencies older than this (static --region-rtt / --default-rtt-ms then apply)")
	probe := fs.Float64("probe-share", plan.DefaultProbeShare, "most of a cluster's traffic one probe floor takes (each healthy engine gets min(this, 1 rps) from its nearest cluster); negative = no probe floors")
	clusters := fs.String("clusters", "", "comma-separated clusters always planned for (so their gateways get a snapshot before traffic)")
	minDemand := fs.Float64("min-demand-rps", 1, "demand floor of every planned cluster")
	rtt := fs.String("region-rtt", "", "static network latency CLUSTER:REGION=MS,... used until measured")
	defRTT := fs.Float64("default-rtt-ms", 50, "network latency to another region when no entry exists")
	strict := fs.Bool("strict-residency", false, "a cluster may only use engines with a --region-rtt entry or a measured latency")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9102", "address of the /metrics endpoint (empty: off)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	matrix, err := ParseRTT(*rtt)
	if err != nil {
		return fmt.Errorf("%w: --region-rtt: %v", cli.ErrUsage, err)
	}
	var cl []string
	for _, c := range strings.Split(*clusters, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cl = append(cl, c)
		}
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	svc, err := New(Config{
		KafkaBrokers: conn.Brokers(), TopicPrefix: conn.TopicPrefix, NATSURL: conn.NATSURL, Settle: *settle,
		Settings: plan.Settings{MaxUtilization: *maxUtil, ChurnWeight: *churn, ChurnRelative: *churnRel, EstimateTTL: *ttl,
			NetworkTTL: *netTTL, ProbeShare: *probe, Clusters: cl,
			MinDemandRPS: *minDemand, RegionRTTms: matrix, DefaultRTTms: *defRTT, StrictResidency: *strict},
		Logger: logger, Registerer: reg,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if *metricsListen != "" {
		_, stop, err := obs.ServeMetrics(ctx, *metricsListen, reg)
		if err != nil {
			return err
		}
		defer stop()
	}
	return svc.Run(ctx)
}
