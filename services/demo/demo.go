// Package demo is `switchyard demo`: the whole pipeline in one process on
// real ports — embedded NATS (JetStream) and Kafka (kfake), simulated
// engines of mixed GPU classes in three regions with network delay
// between regions, one agent per region, the processor, the optimizer, one
// gateway per region and a load generator — printing a status line every
// few seconds and, with --json, a summary object as the last line.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/internal/stall"
	"github.com/switchyard-llm/switchyard/simulator/workload"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Config configures a demo run.
type Config struct {
	// Duration of the load; 0 runs until interrupted.
	Duration time.Duration
	JSON     bool
	// KafkaListen, NATSListen and GatewayListen fix the ports (port 0:
	// free ports). Gateway i listens on GatewayListen's port + i.
	KafkaListen   string
	NATSListen    string
	GatewayListen string
	MetricsListen string
	// EngineBasePort, when positive, fixes the engines' ports: engine i
	// of the topology listens on 127.0.0.1:EngineBasePort+i, whatever the
	// data dir remembers. 0: free ports (kept across runs on a data dir).
	EngineBasePort int
	// ConsoleListen is the host:port of the web console ("": off).
	ConsoleListen string
	DataDir       string
	// Rate is the offered load in requests/s over all regions.
	Rate float64
	// Trace replays a JSONL or CSV trace (workload.ReadTrace) instead of the
	// built-in conversational workload; TraceSpeed compresses its time.
	Trace       string
	TraceSpeed  float64
	StrictTrace bool
	// TraceFormat overrides what the trace readers infer.
	TraceFormat workload.Format
	Seed        uint64
	// StatusInterval between status lines (default 5s).
	StatusInterval time.Duration
	// MaxPromptTokens and MaxOutputTokens cap each request.
	MaxPromptTokens int
	MaxOutputTokens int
	Model           string
	Topology        Topology
	Logger          *slog.Logger
	Stdout          io.Writer

	tracerProvider trace.TracerProvider // set by Run from the OTEL_* variables
}

// Summary is the --json result (the acceptance contract: keep keys).
type Summary struct {
	Requests           int64            `json:"requests"`
	Succeeded          int64            `json:"succeeded"`
	Failed             int64            `json:"failed"`
	Shed               int64            `json:"shed"`
	SnapshotsPublished uint64           `json:"snapshots_published"`
	LatestVersion      uint64           `json:"latest_snapshot_version"`
	SignalsConsumed    uint64           `json:"signals_consumed"`
	RoutingEvents      uint64           `json:"routing_events"`
	DeadLettered       uint64           `json:"dead_lettered"`
	EstimatesPublished uint64           `json:"estimates_published"`
	KVHitRate          float64          `json:"kv_hit_rate"`
	TTFTms             Quantiles        `json:"ttft_ms"`
	Gateways           []GatewaySummary `json:"gateways"`
	Errors             map[string]int   `json:"errors,omitempty"`
	// Stalls is how long the demo's process was kept from running
	// while the load ran (stall.Stats): a client-observed latency grew
	// by as much as a stall it spanned.
	Stalls    stall.Stats `json:"stalls"`
	DurationS float64     `json:"duration_s"`
	Kafka     string      `json:"kafka"`
	NATS      string      `json:"nats"`
}

// Quantiles of a latency in ms.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// GatewaySummary is one gateway's share of the run.
type GatewaySummary struct {
	Cluster         string `json:"cluster"`
	Address         string `json:"address"`
	SnapshotVersion uint64 `json:"snapshot_version"`
	Requests        uint64 `json:"requests"`
	Succeeded       uint64 `json:"succeeded"`
	Retries         uint64 `json:"retries"`
	Shed            uint64 `json:"shed"`
}

// Command returns `switchyard demo`.
func Command() cli.Command {
	return cli.Command{Name: "demo", Summary: "run the whole pipeline in one process with simulated engines and load", Run: runCommand}
}

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	cfg := Config{Topology: DefaultTopology(), Stdout: stdout}
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to run the load (0: until interrupted)")
	fs.BoolVar(&cfg.JSON, "json", false, "print a JSON summary as the last line of stdout")
	fs.StringVar(&cfg.KafkaListen, "kafka-listen", "127.0.0.1:9092", "host:port of the embedded Kafka broker (port 0: any free port)")
	fs.StringVar(&cfg.NATSListen, "nats-listen", "127.0.0.1:4222", "host:port of the embedded NATS server (port 0: any free port)")
	fs.StringVar(&cfg.GatewayListen, "gateway-listen", "127.0.0.1:8080", "host:port of the first gateway; the others take the following ports (port 0: free ports)")
	fs.IntVar(&cfg.EngineBasePort, "engine-base-port", 0, "engine i of the topology listens on 127.0.0.1:this+i (0: free ports, kept across runs on --data-dir)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9100", "host:port serving every component's Prometheus metrics at /metrics (empty: off)")
	fs.StringVar(&cfg.ConsoleListen, "console-listen", "127.0.0.1:9190", "host:port of the web console (empty: off)")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "persist Kafka and JetStream data, and the engines' addresses, under this directory")
	fs.Float64Var(&cfg.Rate, "rate", 12, "offered load of the built-in workload, requests/s over all regions")
	fs.StringVar(&cfg.Trace, "trace", "", "replay this JSONL (Mooncake, Qwen-Bailian) or CSV (Azure, BurstGPT) trace instead of the built-in workload (docs/sim.md, trace formats)")
	fs.Float64Var(&cfg.TraceSpeed, "trace-speed", 1, "replay the trace this many times faster than real time")
	fs.BoolVar(&cfg.StrictTrace, "strict-trace", false, "fail on a malformed trace row instead of skipping it")
	unit := fs.String("trace-time-unit", "", "unit of the trace's numeric times, ms or s (default: inferred, docs/sim.md, trace formats)")
	blockTokens := fs.Int("trace-block-tokens", 0, "size in tokens of a JSONL trace's hash_ids blocks, or of a CSV trace's synthesised ones (default: inferred)")
	seed := fs.Uint64("seed", 1, "seed of the workload and engines")
	fs.DurationVar(&cfg.StatusInterval, "status-interval", 5*time.Second, "time between status lines")
	fs.IntVar(&cfg.MaxPromptTokens, "max-prompt-tokens", 8192, "cap on each request's prompt tokens")
	fs.IntVar(&cfg.MaxOutputTokens, "max-output-tokens", 256, "cap on each request's output tokens")
	fs.StringVar(&cfg.Model, "model", "switchyard-sim-8b", "model name the engines serve")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", cli.ErrUsage, err)
	}
	var err error
	if cfg.TraceFormat, err = workload.ParseFormat(*unit, *blockTokens); err != nil {
		return fmt.Errorf("%w: --trace-time-unit, --trace-block-tokens: %w", cli.ErrUsage, err)
	}
	if cfg.EngineBasePort < 0 || cfg.EngineBasePort+len(cfg.Topology.Engines)-1 > 65535 {
		return fmt.Errorf("%w: --engine-base-port %d: the %d engines need ports up to 65535", cli.ErrUsage, cfg.EngineBasePort, len(cfg.Topology.Engines))
	}
	cfg.Seed = *seed
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	sum, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.JSON {
		b, err := json.Marshal(sum)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

// printReady tells the user the demo is up and what to try.
func printReady(cfg Config, kafka, signals, gateway, metrics, console string) {
	fmt.Fprintf(cfg.Stdout, "ready. Try, in another terminal:\n"+
		"  curl -N http://%s/v1/chat/completions -d '{\"model\":%q,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}'\n"+
		"  kcat -b %s -t %s -C -e\n", gateway, cfg.Model, kafka, signals)
	if metrics != "" {
		fmt.Fprintf(cfg.Stdout, "  curl -s http://%s/metrics | grep switchyard_\n", metrics)
	}
	if console != "" {
		fmt.Fprintf(cfg.Stdout, "  open http://%s/ in a browser (the web console)\n", console)
	}
	if cfg.Duration > 0 {
		fmt.Fprintf(cfg.Stdout, "The load runs for %s; Ctrl-C stops earlier.\n", cfg.Duration)
	} else {
		fmt.Fprintln(cfg.Stdout, "Ctrl-C to stop.")
	}
}

// nextPort returns addr with its port increased by i (port 0 stays 0).
func nextPort(addr string, i int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("listen address %q: bad port", addr)
	}
	if p == 0 {
		return addr, nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+i)), nil
}

// Run runs the demo until cfg.Duration passes or ctx is done.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if len(cfg.Topology.Regions) == 0 {
		cfg.Topology = DefaultTopology()
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 5 * time.Second
	}
	if cfg.Model == "" {
		cfg.Model = "switchyard-sim-8b"
	}
	reqs, blockTokens, err := buildWorkload(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	reg := prometheus.NewRegistry()
	tel, err := obs.StartTelemetry(ctx, "demo", reg, nil) // OTLP export by the OTEL_* variables
	if err != nil {
		return nil, err
	}
	defer tel.Close(ctx, log)
	cfg.tracerProvider = tel.TracerProvider

	b, err := brokers.Start(ctx, brokers.Config{KafkaListen: cfg.KafkaListen, NATSListen: cfg.NATSListen, DataDir: cfg.DataDir})
	if err != nil {
		return nil, fmt.Errorf("starting embedded brokers: %w", err)
	}
	defer b.Close()
	kafka := b.KafkaAddrs()
	natsURL := b.NATSURL()
	topics := streams.TopicsFor("")
	if err := ensureTopics(ctx, kafka, topics); err != nil {
		return nil, err
	}

	// Components run under one errgroup; the load runs beside them.
	compCtx, stopComponents := context.WithCancel(ctx)
	defer stopComponents()
	g, gctx := errgroup.WithContext(compCtx)

	fleet, err := startEngines(gctx, g, cfg, reg, log)
	if err != nil {
		return nil, err
	}
	pipe, err := startPipeline(gctx, g, cfg, fleet, kafka, natsURL, reg, log)
	if err != nil {
		stopComponents()
		_ = g.Wait()
		return nil, err
	}
	bs, err := watchBrokers(gctx, g, kafka, natsURL, reg, log)
	if err != nil {
		stopComponents()
		_ = g.Wait()
		return nil, err
	}
	metricsAddr := ""
	if cfg.MetricsListen != "" {
		addr, stop, err := obs.ServeMetrics(gctx, cfg.MetricsListen, reg, bs)
		if err != nil {
			stopComponents()
			_ = g.Wait()
			return nil, err
		}
		defer stop()
		fmt.Fprintf(cfg.Stdout, "metrics:  http://%s/metrics\n", addr)
		metricsAddr = addr
	}
	consoleAddr := ""
	if cfg.ConsoleListen != "" {
		if consoleAddr, err = startConsole(gctx, g, cfg.ConsoleListen, kafka, natsURL, log); err != nil {
			stopComponents()
			_ = g.Wait()
			return nil, err
		}
		fmt.Fprintf(cfg.Stdout, "console:  http://%s/\n", consoleAddr)
	}
	fmt.Fprintf(cfg.Stdout, "kafka:    %s   (kcat -b %s -t %s -C)\n", kafka[0], kafka[0], topics.Signals)
	fmt.Fprintf(cfg.Stdout, "nats:     %s   (bucket %s)\n", natsURL, snapshots.DefaultBucket)
	for _, gw := range pipe.gateways {
		fmt.Fprintf(cfg.Stdout, "gateway:  %-9s http://%s/v1/chat/completions\n", gw.cluster, gw.addr)
	}
	for _, e := range fleet {
		fmt.Fprintf(cfg.Stdout, "engine:   %-9s %-9s %-5s %s\n", e.spec.ID, e.spec.Region, e.spec.GPUClass, e.url)
	}
	printReady(cfg, kafka[0], topics.Signals, pipe.gateways[0].addr, metricsAddr, consoleAddr)

	nc, err := nats.Connect(natsURL, nats.Timeout(natsConnectTimeout))
	if err != nil {
		stopComponents()
		_ = g.Wait()
		return nil, fmt.Errorf("connecting to embedded nats: %w", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	gateways := map[string]string{}
	for _, gw := range pipe.gateways {
		gateways[gw.cluster] = "http://" + gw.addr
	}
	lg := newLoadGen(gateways, cfg.Model, blockTokens, cfg.MaxPromptTokens, cfg.MaxOutputTokens)
	probe, err := stall.New()
	if err != nil {
		stopComponents()
		_ = g.Wait()
		return nil, err
	}
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan error, 1)
	go func() { probeDone <- probe.Run(probeCtx) }()
	defer func() { stopProbe(); <-probeDone }()
	started := time.Now()
	loadCtx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		loadCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		lg.run(loadCtx, reqs)
	}()

	st := &status{cfg: cfg, lg: lg, pipe: pipe, fleet: fleet, js: js, started: started, probe: probe}
	tick := time.NewTicker(cfg.StatusInterval)
	defer tick.Stop()
	componentsFailed := false
	loadStopped := loadCtx.Done()
loop:
	for {
		select {
		case <-loadStopped:
			fmt.Fprintln(cfg.Stdout, "draining: the load stopped; waiting for the requests in flight and the last routing events")
			loadStopped = nil
		case <-loadDone:
			break loop
		case <-gctx.Done():
			componentsFailed = compCtx.Err() == nil
			<-loadDone
			break loop
		case <-tick.C:
			st.print(ctx)
		}
	}
	// Let the last routing events cross Kafka before counting them.
	drain := time.Now().Add(5 * time.Second)
	for time.Now().Before(drain) && pipe.routingEventsConsumed() < pipe.routingEventsEmitted() && gctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	sum := st.summary(ctx, kafka[0], natsURL)
	st.print(ctx)
	stopComponents()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return sum, fmt.Errorf("component failed: %w", err)
	}
	if componentsFailed {
		return sum, errors.New("a component stopped early")
	}
	return sum, nil
}

// natsConnectTimeout bounds connecting to the demo's own NATS server
// (dial and its INFO line): nats.go's 2-s default is short on a loaded
// machine, where the server answers on the cores the demo's load uses.
const natsConnectTimeout = 10 * time.Second

func ensureTopics(ctx context.Context, kafka []string, topics streams.Topics) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	return streams.EnsureTopics(ctx, cl, topics, 3)
}

// generatorBlockTokens is the prefix-block size of the built-in
// generator's requests.
const generatorBlockTokens = 64

// buildWorkload is the demo's requests and the size of their prefix
// blocks.
func buildWorkload(cfg Config) ([]workload.Request, int, error) {
	if cfg.Trace == "" {
		if cfg.Rate <= 0 {
			return nil, 0, fmt.Errorf("%w: --rate must be positive", cli.ErrUsage)
		}
		d := cfg.Duration
		if d <= 0 {
			d = 24 * time.Hour
		}
		var all []workload.Request
		for i, r := range cfg.Topology.Regions {
			share := cfg.Topology.LoadShare[r]
			if share <= 0 {
				share = 1 / float64(len(cfg.Topology.Regions))
			}
			gen := workload.Generator{RatePerSecond: cfg.Rate * share, Clusters: []string{r}, Seed: cfg.Seed + uint64(i)}
			all = append(all, gen.Generate(d)...)
		}
		sort.SliceStable(all, func(i, j int) bool { return all[i].Arrival < all[j].Arrival })
		return all, generatorBlockTokens, nil
	}
	f, err := os.Open(cfg.Trace)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: --trace: %v", cli.ErrUsage, err)
	}
	defer f.Close()
	reqs, rep, err := workload.ReadTrace(f, workload.TraceOptions{Strict: cfg.StrictTrace, Seed: cfg.Seed, Format: cfg.TraceFormat})
	if err != nil {
		return nil, 0, fmt.Errorf("reading trace %s: %w", cfg.Trace, err)
	}
	if rep.Skipped > 0 {
		cfg.Logger.Warn("skipped malformed trace rows", "skipped", rep.Skipped, "first_lines", fmt.Sprint(rep.FirstBad))
	}
	speed := cfg.TraceSpeed
	if speed <= 0 {
		speed = 1
	}
	for i := range reqs {
		reqs[i].Arrival = time.Duration(float64(reqs[i].Arrival) / speed)
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].Arrival < reqs[j].Arrival })
	return reqs, rep.BlockTokens, nil
}

// status renders the periodic status line and the summary.
type status struct {
	cfg     Config
	lg      *loadGen
	pipe    *pipeline
	fleet   []*engineProc
	js      jetstream.JetStream
	store   *snapshots.Store
	started time.Time
	probe   *stall.Probe

	mu       sync.Mutex
	lastReqs int64
	lastAt   time.Time
}

func (s *status) weights(ctx context.Context) map[string]string {
	out := map[string]string{}
	if s.store == nil {
		st, err := snapshots.Open(ctx, s.js)
		if err != nil {
			return out
		}
		s.store = st
	}
	st := s.store
	for _, r := range s.cfg.Topology.Regions {
		snap, err := st.Get(ctx, r)
		if err != nil {
			out[r] = "no snapshot"
			continue
		}
		var parts []string
		for _, cw := range snap.GetClusters() {
			for _, w := range cw.GetWeights() {
				if w.GetWeight() >= 0.005 {
					parts = append(parts, fmt.Sprintf("%s %.2f", w.GetEngineId(), w.GetWeight()))
				}
			}
			if cw.GetShedFraction() > 0 {
				parts = append(parts, fmt.Sprintf("shed %.2f", cw.GetShedFraction()))
			}
		}
		out[r] = strings.Join(parts, " ")
	}
	return out
}

func (s *status) print(ctx context.Context) {
	s.mu.Lock()
	now := time.Now()
	reqs := s.lg.requests.Load()
	since := s.lastAt
	if since.IsZero() {
		since = s.started
	}
	rps := float64(reqs-s.lastReqs) / now.Sub(since).Seconds()
	s.lastReqs, s.lastAt = reqs, now
	s.mu.Unlock()
	p50, p99, _ := s.lg.ttftQuantiles()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ws := s.weights(wctx)
	w := s.cfg.Stdout
	v := s.pipe.latestVersion()
	window := "none yet"
	if v > 0 {
		// A version is its window's end in Unix ms.
		window = time.UnixMilli(int64(v)).UTC().Format("15:04:05")
	}
	fmt.Fprintf(w, "[%5.1fs] snapshot v%d (window %s) | rps %.1f | ttft p50 %.0fms p99 %.0fms | kv hit %.1f%% | ok %d errors %d\n",
		now.Sub(s.started).Seconds(), v, window, rps, p50, p99, 100*kvHitRate(s.fleet),
		s.lg.succeeded.Load(), s.lg.failed.Load())
	for _, r := range s.cfg.Topology.Regions {
		fmt.Fprintf(w, "          %-9s %s\n", r, ws[r])
	}
}

func (s *status) summary(_ context.Context, kafka, natsURL string) *Summary {
	p50, p99, _ := s.lg.ttftQuantiles()
	sum := &Summary{
		Requests:           s.lg.requests.Load(),
		Succeeded:          s.lg.succeeded.Load(),
		Failed:             s.lg.failed.Load(),
		Shed:               s.lg.shed.Load(),
		SnapshotsPublished: s.pipe.snapshotsPublished(),
		LatestVersion:      s.pipe.latestVersion(),
		SignalsConsumed:    s.pipe.signalsConsumed(),
		RoutingEvents:      s.pipe.routingEventsConsumed(),
		DeadLettered:       s.pipe.processor.Stats().DeadLettered,
		EstimatesPublished: s.pipe.processor.Stats().EstimatesPublished,
		KVHitRate:          kvHitRate(s.fleet),
		TTFTms:             Quantiles{P50: p50, P99: p99},
		Gateways:           s.pipe.gatewaySummaries(),
		Errors:             s.lg.errorSummary(),
		Stalls:             s.probe.Stats(),
		DurationS:          time.Since(s.started).Seconds(),
		Kafka:              kafka,
		NATS:               natsURL,
	}
	return sum
}

var _ = http.StatusOK
