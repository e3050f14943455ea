// Package gateway is the `switchyard gateway` command: it parses flags,
// reads the snapshot file, connects to NATS and Kafka, and runs the data
// plane (package gateway) with those clients.
package gateway

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/gateway/budget"
	"github.com/switchyard-llm/switchyard/gateway/peers"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/gateway/tenant"
	"github.com/switchyard-llm/switchyard/internal/brokerstate"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/services/internal/peerconn"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
	"github.com/switchyard-llm/switchyard/streams/spool"
)

// Command returns `switchyard gateway`.
func Command() cli.Command {
	return cli.Command{
		Name:    "gateway",
		Summary: "route and proxy OpenAI-compatible requests on the published weights",
		Run:     run,
	}
}

// Flags are the parsed command line of `switchyard gateway`.
type Flags struct {
	Cluster              string
	Listen               string
	SnapshotFile         string
	SnapshotBucket       string
	Engines              []gateway.StaticEngine
	Models               []string
	MaxBodyBytes         int64
	ConnectTimeout       time.Duration
	FirstTokenTimeout    time.Duration
	IdleTimeout          time.Duration
	MaxInFlightPerEngine int
	HealthInterval       time.Duration
	RetryBudget          budget.Config
	EventBuffer          int
	EventSpoolDir        string
	EventSpoolMaxBytes   int64
	HTTPServer           string
	EngineClient         string
	BodyTimeout          time.Duration
	MinBodyRate          int64
	RawSyscalls          bool
	AdaptiveConcurrency  bool
	AdmissionQueue       admit.QueueConfig
	APIKeys              string
	EngineRegistry       string
	PriorityHeader       bool
	TrustTenantHeader    bool
	AdminListen          string
	ArrivalRecordAfter   time.Duration
	DrainDelay           time.Duration
	DrainTimeout         time.Duration
	PeerLoadInterval     time.Duration // 0: no peer load sharing
	Pick                 pick.Options  // the picker's tolerance (--pick-score-slack, --pick-score-slack-ms)
	GatewayID            string
	LogLevel             string
	NATSURL              string
	KafkaBrokers         []string
	TopicPrefix          string
	Conn                 cli.Connection // TLS and credentials of both brokers
	Trust                SnapshotTrust  // snapshot signature keys, cache, clock skew
}

// ParseFlags parses args (and SWITCHYARD_* variables from getenv).
func ParseFlags(args []string, getenv func(string) string) (Flags, error) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var f Flags
	var conn cli.Connection
	var engines, models string
	fs.StringVar(&f.Cluster, "cluster", "", "CPU cluster (region) whose snapshot this gateway routes on (required)")
	fs.StringVar(&f.Listen, "listen", gateway.DefaultListen, "HTTP listen address (OpenAI API, /health, /metrics)")
	fs.StringVar(&f.SnapshotFile, "snapshot-file", "", "WeightSnapshot in protobuf JSON applied at start (routes with no control plane)")
	fs.StringVar(&f.SnapshotBucket, "snapshot-bucket", "", "JetStream KV bucket of snapshots (default switchyard_snapshots)")
	fs.StringVar(&engines, "engines", "", "static engines id=url,... routed to (fewest in flight) until a snapshot arrives")
	fs.StringVar(&models, "models", "", "comma-separated accepted model names (empty: any)")
	fs.Int64Var(&f.MaxBodyBytes, "max-body-bytes", gateway.DefaultMaxBodyBytes, "request body limit (413 above)")
	fs.DurationVar(&f.ConnectTimeout, "connect-timeout", gateway.DefaultConnectTimeout, "engine connect timeout")
	fs.DurationVar(&f.FirstTokenTimeout, "first-token-timeout", gateway.DefaultFirstTokenTimeout, "wait for the first byte of the engine's response body")
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", gateway.DefaultIdleTimeout, "longest gap between SSE events")
	fs.IntVar(&f.MaxInFlightPerEngine, "max-in-flight-per-engine", 0, "hard in-flight cap per engine: the concurrency limit never exceeds it (0: none)")
	fs.BoolVar(&f.AdaptiveConcurrency, "adaptive-concurrency", true, "learn the concurrency limit of an engine whose batch limit is unknown from its latency (false: --max-in-flight-per-engine only); known batch limits always apply")
	fs.IntVar(&f.AdmissionQueue.MaxQueue, "admission-queue", 1024, "requests that may wait for an engine slot; more get 429")
	fs.DurationVar(&f.AdmissionQueue.Timeout, "admission-timeout", admit.DefaultTimeout, "longest wait for an engine slot; a request predicted to wait more than half of it gets 429 at once")
	fs.DurationVar(&f.AdmissionQueue.NewestFirst, "admission-newest-first", admit.DefaultTimeout/4, "adaptive LIFO: a tenant's newest waiting request takes the next engine slot while its oldest has waited less than this, then oldest first (negative: always oldest first)")
	fs.StringVar(&f.EngineRegistry, "engine-registry", "", "engine registry file (YAML or JSON, docs/security.md#engine-registry): a snapshot naming an engine outside it, or one at another endpoint, is refused (empty: any engine a valid snapshot names)")
	fs.StringVar(&f.APIKeys, "api-keys", "", "tenant file (YAML: sha256 hex of each API key -> tenant, priority, rate, concurrency), reloaded on change; every request then needs a key (empty: no keys)")
	fs.BoolVar(&f.PriorityHeader, "priority-header", false, "trust the client's X-Switchyard-Priority header (never above its API key's priority); otherwise priority comes from the key only")
	fs.BoolVar(&f.TrustTenantHeader, "trust-tenant-header", false, "without --api-keys, take a request's tenant from its X-Switchyard-Tenant header: only behind a proxy that authenticates clients and sets the header itself (otherwise the header is ignored and the tenant is \"default\"; with --api-keys the key's tenant always)")
	fs.StringVar(&f.AdminListen, "admin-listen", "", "serve /health and /metrics on this address instead of --listen (empty: on --listen)")
	fs.DurationVar(&f.ArrivalRecordAfter, "arrival-record-after", gateway.DefaultArrivalRecordAfter, "publish an arrival record (counted as demand) for a request still running after this long (negative: never)")
	fs.DurationVar(&f.DrainDelay, "drain-delay", gateway.DefaultDrainDelay, "on SIGTERM, keep accepting this long with /health/ready failing, so load balancers stop sending first (docs/gateway.md#draining)")
	fs.DurationVar(&f.DrainTimeout, "drain-timeout", gateway.DefaultDrainTimeout, "on SIGTERM, let requests and streams in flight finish for this long (the drain delay included); streams still running then end with an error event; keep it below the pod's grace period")
	fs.DurationVar(&f.HealthInterval, "health-interval", gateway.DefaultHealthInterval, "active /health check interval (negative: off)")
	fs.Float64Var(&f.RetryBudget.Ratio, "retry-ratio", 0.1, "retries allowed per request over the budget window")
	fs.IntVar(&f.RetryBudget.Floor, "retry-floor", 10, "retries always allowed per budget window")
	fs.IntVar(&f.EventBuffer, "event-buffer", gateway.DefaultEventBuffer, "routing events buffered for Kafka before dropping")
	fs.StringVar(&f.EventSpoolDir, "event-spool-dir", "", "directory of the on-disk spool keeping the routing events Kafka cannot take (down, or slower than the requests) until it takes them again, also across restarts; one gateway per directory (empty: no spool, such events are dropped and counted)")
	fs.Int64Var(&f.EventSpoolMaxBytes, "event-spool-max-bytes", DefaultEventSpoolMaxBytes, "bound of the event spool's files; events beyond it are dropped and counted")
	fs.StringVar(&f.HTTPServer, "http-server", gateway.ServerFast, "server for the proxy routes: fast (own HTTP/1.1 loop, net/http for the rest) or std (net/http)")
	fs.StringVar(&f.EngineClient, "engine-client", gateway.ClientOwn, "client to plain-http engines: own (own HTTP/1.1 client) or std (net/http's Transport)")
	fs.DurationVar(&f.BodyTimeout, "body-timeout", gateway.DefaultBodyTimeout, "longest wait for a request body after its head (408 after; negative: none)")
	fs.Int64Var(&f.MinBodyRate, "min-body-rate", gateway.DefaultMinBodyRate, "least average request body rate in bytes/s after the first 5s (408 below; negative: none)")
	fs.BoolVar(&f.RawSyscalls, "raw-syscalls", true, "read and write sockets with raw recvfrom/sendto system calls (Linux; about a third less CPU per request in bench/gateway; false: the connections' own Read and Write)")
	fs.Float64Var(&f.Pick.ScoreSlack, "pick-score-slack", 0.2, "the picker's tolerance, relative: the first candidate in affinity-and-plan order whose estimated time to first tokens is within this fraction of the best (plus --pick-score-slack-ms) wins (docs/gateway.md)")
	fs.Float64Var(&f.Pick.ScoreSlackMs, "pick-score-slack-ms", 30, "the picker's tolerance, absolute, in milliseconds")
	fs.DurationVar(&f.PeerLoadInterval, "peer-load-interval", peers.DefaultInterval, "share this gateway's queued prefill per engine with the other gateways on NATS this often, and count theirs ahead of its requests (0: off; docs/gateway.md)")
	fs.StringVar(&f.GatewayID, "gateway-id", "", "this gateway's instance id among the gateways sharing load (empty: host name, process id and a random suffix)")
	fs.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	conn.Register(fs)
	f.Trust.Register(fs)
	if err := cli.Parse(fs, args, getenv); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if f.Cluster == "" {
		return f, fmt.Errorf("%w: --cluster is required", cli.ErrUsage)
	}
	if f.PeerLoadInterval < 0 || (f.PeerLoadInterval > 0 && f.PeerLoadInterval < time.Millisecond) {
		return f, fmt.Errorf("%w: --peer-load-interval %v: want 0 (off) or at least 1ms", cli.ErrUsage, f.PeerLoadInterval)
	}
	if !(f.Pick.ScoreSlack > 0 && f.Pick.ScoreSlack <= 10) || !(f.Pick.ScoreSlackMs > 0 && f.Pick.ScoreSlackMs <= 60000) {
		return f, fmt.Errorf("%w: --pick-score-slack %v, --pick-score-slack-ms %v: want 0 < slack <= 10 and 0 < ms <= 60000", cli.ErrUsage, f.Pick.ScoreSlack, f.Pick.ScoreSlackMs)
	}
	if f.DrainTimeout <= 0 || f.DrainDelay < 0 || f.DrainDelay >= f.DrainTimeout {
		return f, fmt.Errorf("%w: --drain-delay %v, --drain-timeout %v: want 0 <= delay < timeout", cli.ErrUsage, f.DrainDelay, f.DrainTimeout)
	}
	if f.GatewayID == "" {
		f.GatewayID = peers.DefaultID()
	}
	if len(f.GatewayID) > peers.MaxIDBytes {
		return f, fmt.Errorf("%w: --gateway-id of %d bytes: want at most %d", cli.ErrUsage, len(f.GatewayID), peers.MaxIDBytes)
	}
	if f.EventSpoolDir != "" && f.EventSpoolMaxBytes < 1<<20 {
		return f, fmt.Errorf("%w: --event-spool-max-bytes %d: want at least 1 MiB", cli.ErrUsage, f.EventSpoolMaxBytes)
	}
	if f.HTTPServer != gateway.ServerFast && f.HTTPServer != gateway.ServerStd {
		return f, fmt.Errorf("%w: --http-server %q: want fast or std", cli.ErrUsage, f.HTTPServer)
	}
	if f.EngineClient != gateway.ClientOwn && f.EngineClient != gateway.ClientStd {
		return f, fmt.Errorf("%w: --engine-client %q: want own or std", cli.ErrUsage, f.EngineClient)
	}
	var err error
	if f.Engines, err = gateway.ParseEngines(engines); err != nil {
		return f, fmt.Errorf("%w: --engines: %w", cli.ErrUsage, err)
	}
	for _, m := range strings.Split(models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			f.Models = append(f.Models, m)
		}
	}
	f.NATSURL = conn.NATSURL
	f.KafkaBrokers = conn.Brokers()
	f.TopicPrefix = conn.TopicPrefix
	f.Conn = conn
	return f, nil
}

// options are the gateway options the flags set (no clients).
func (f Flags) options() []gateway.Opt {
	return []gateway.Opt{
		gateway.Listen(f.Listen),
		gateway.Engines(f.Engines...),
		gateway.Models(f.Models...),
		gateway.MaxBodyBytes(f.MaxBodyBytes),
		gateway.ConnectTimeout(f.ConnectTimeout),
		gateway.FirstTokenTimeout(f.FirstTokenTimeout),
		gateway.IdleTimeout(f.IdleTimeout),
		gateway.MaxInFlightPerEngine(f.MaxInFlightPerEngine),
		gateway.HealthInterval(f.HealthInterval),
		gateway.RetryBudget(f.RetryBudget),
		gateway.HTTPServer(f.HTTPServer),
		gateway.EngineClient(f.EngineClient),
		gateway.BodyTimeout(f.BodyTimeout),
		gateway.MinBodyRate(f.MinBodyRate),
		gateway.RawSyscalls(f.RawSyscalls),
		gateway.AdaptiveConcurrency(f.AdaptiveConcurrency),
		gateway.AdmissionQueue(f.AdmissionQueue),
		gateway.PriorityHeader(f.PriorityHeader),
		gateway.TrustTenantHeader(f.TrustTenantHeader),
		gateway.InstanceID(f.GatewayID),
		gateway.AdminListen(f.AdminListen),
		gateway.ArrivalRecordAfter(f.ArrivalRecordAfter),
		gateway.DrainDelay(f.DrainDelay),
		gateway.DrainTimeout(f.DrainTimeout),
		gateway.PickOptions(f.Pick),
	}
}

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	f, err := ParseFlags(args, nil)
	if err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %w", cli.ErrUsage, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return fmt.Errorf("registering go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return fmt.Errorf("registering process collector: %w", err)
	}
	tel, err := obs.StartTelemetry(ctx, "gateway", reg, nil) // OTLP export by the OTEL_* variables
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	defer tel.Close(ctx, log)
	opts := append(f.options(), gateway.Logger(log), gateway.Registerer(reg), gateway.Gatherer(reg), gateway.TracerProvider(tel.TracerProvider))
	var keys *tenant.File
	if f.APIKeys != "" {
		if keys, err = tenant.Open(f.APIKeys, log, reg); err != nil {
			return fmt.Errorf("%w: --api-keys: %w", cli.ErrUsage, err)
		}
		opts = append(opts, gateway.Tenants(keys))
	}
	if f.EngineRegistry != "" {
		er, err := fleet.Load(f.EngineRegistry)
		if err != nil {
			return fmt.Errorf("%w: --engine-registry: %w", cli.ErrUsage, err)
		}
		opts = append(opts, gateway.Registry(er))
	}
	if f.SnapshotFile != "" {
		snap, err := readSnapshotFile(f.SnapshotFile)
		if err != nil {
			return fmt.Errorf("%w: %w", cli.ErrUsage, err)
		}
		opts = append(opts, gateway.InitialSnapshot(snap))
	}
	trustOpts, err := f.Trust.GatewayOpts()
	if err != nil {
		return err
	}
	opts = append(opts, trustOpts...)
	var k *kafka
	if len(f.KafkaBrokers) > 0 {
		if k, err = dialKafka(f, log, reg); err != nil {
			return err
		}
		defer k.close(log)
		opts = append(opts, gateway.Events(k.emitter), gateway.Arrivals(k.arrivals), gateway.Signals(streams.NewPoller(k.signals)))
	}
	var w *snapshots.Watcher
	if f.NATSURL != "" {
		natsOpts, err := f.Conn.NATSOpts()
		if err != nil {
			return err
		}
		watchOpts, err := f.Trust.WatchOpts()
		if err != nil {
			return err
		}
		w = snapshots.NewWatcher(f.NATSURL, f.SnapshotBucket, f.Cluster, natsOpts...).With(append(watchOpts, snapshots.WatchLogger(log))...)
		opts = append(opts, gateway.Snapshots(w))
	}
	g, err := gateway.New(f.Cluster, opts...)
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	if k != nil {
		// The emitter outlives the gateway, to send the events of the
		// requests that finish while it shuts down.
		stop := k.runEmitter(ctx)
		defer stop()
		// Losing Kafka is logged (WARN, then INFO when back) and exported
		// as switchyard_broker_connected; routing goes on without it.
		bs, err := brokerstate.New(log, reg)
		if err != nil {
			return err
		}
		defer bs.Go(ctx, brokerstate.Kafka, brokerstate.PingKafka(k.producer))()
	}
	eg, ectx := errgroup.WithContext(ctx)
	if f.NATSURL != "" && f.PeerLoadInterval > 0 {
		nc, sharer, err := startPeers(f, g, log, reg)
		if err != nil {
			return err
		}
		defer nc.Close()
		eg.Go(func() error {
			// Peer load is advisory: without it the gateway routes on its
			// own view, so a failure here must not stop it.
			if err := sharer.Run(ectx); err != nil && ectx.Err() == nil {
				log.Warn("peer load sharing stopped; routing on this gateway's own view", "err", err)
			}
			return nil
		})
	}
	if w != nil {
		eg.Go(func() error { return w.Run(ectx) })
	}
	if keys != nil {
		eg.Go(func() error { return keys.Run(ectx, tenant.DefaultReloadInterval) })
	}
	eg.Go(func() error { return g.Run(ectx) })
	return eg.Wait()
}

// startPeers connects to NATS for peer load sharing (its own connection:
// the snapshot watcher's is its own too, redialled on failure; without
// echo, so the gateway's own reports do not come back) and builds the
// Sharer of g's engines.
func startPeers(f Flags, g *gateway.Gateway, log *slog.Logger, reg prometheus.Registerer) (*nats.Conn, *peers.Sharer, error) {
	nc, err := f.Conn.ConnectNATS(nats.Name("switchyard-gateway-peers-"+f.Cluster),
		nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.NoEcho())
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to nats %s for peer load: %w", f.NATSURL, err)
	}
	sharer, err := peers.New(peerconn.New(nc), g.Pool(), peers.Config{Cluster: f.Cluster, ID: f.GatewayID, Prefix: f.TopicPrefix,
		Interval: f.PeerLoadInterval, PeerClusters: g.PeerClusters, Logger: log.With("component", "peers"), Registerer: reg})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	log.Info("sharing load with peer gateways", "gateway_id", f.GatewayID, "subject", peers.Subject(f.TopicPrefix, f.Cluster), "interval", f.PeerLoadInterval)
	return nc, sharer, nil
}

func readSnapshotFile(path string) (*schemas.WeightSnapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading snapshot file: %w", err)
	}
	snap, err := gateway.DecodeSnapshotJSON(b)
	if err != nil {
		return nil, fmt.Errorf("snapshot file %s: %w", path, err)
	}
	return snap, nil
}

// kafka holds a gateway's Kafka clients: a producer of routing events
// and arrival records (through an emitter each) and a follower of engine
// signals.
type kafka struct {
	producer, signals *kgo.Client
	emitter           *streams.Emitter
	// arrivals has no spool: an arrival record it drops is counted, and
	// the request's final record then counts as demand itself.
	arrivals *streams.Emitter
}

// DefaultEventSpoolMaxBytes is --event-spool-max-bytes' default: 1 GiB,
// about 45 minutes of routing events at 1,000 requests/s (~400 bytes
// each; docs/gateway.md).
const DefaultEventSpoolMaxBytes = 1 << 30

func dialKafka(f Flags, log *slog.Logger, reg prometheus.Registerer) (*kafka, error) {
	topics := streams.TopicsFor(f.TopicPrefix)
	prod, err := f.Conn.NewKafka(append(streams.EmitterProduceOpts(f.EventBuffer),
		kgo.SeedBrokers(f.KafkaBrokers...), kgo.ClientID("switchyard-gateway-"+f.Cluster))...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	sig, err := f.Conn.NewKafka(append(streams.FollowOpts(topics.Signals, time.Now().Add(-gateway.SignalLookback)),
		kgo.SeedBrokers(f.KafkaBrokers...), kgo.ClientID("switchyard-gateway-signals-"+f.Cluster))...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("creating kafka signal client: %w", err)
	}
	emOpts := []streams.EmitterOpt{streams.EmitterLogger(log)}
	var sp *spool.Spool
	if f.EventSpoolDir != "" {
		if sp, err = spool.Open(f.EventSpoolDir, f.EventSpoolMaxBytes); err != nil {
			prod.Close()
			sig.Close()
			return nil, fmt.Errorf("--event-spool-dir: %w", err)
		}
		emOpts = append(emOpts, streams.Spool(sp))
	}
	em, err := streams.NewEmitter(prod, topics.RoutingEvents, "gateway", f.EventBuffer, reg, emOpts...)
	var arr *streams.Emitter
	if err == nil {
		arr, err = streams.NewEmitter(prod, topics.RoutingArrivals, "gateway_arrivals", f.EventBuffer, reg, streams.EmitterLogger(log))
	}
	if err != nil {
		prod.Close()
		sig.Close()
		if sp != nil {
			_ = sp.Close()
		}
		return nil, err
	}
	return &kafka{producer: prod, signals: sig, emitter: em, arrivals: arr}, nil
}

// emitterFlushTimeout bounds the flush of routing events on shutdown,
// after the drain (--drain-timeout): with Kafka gone the gateway still
// exits within ExitAfterDrain of it (close then spools, or fails, the
// events still buffered).
const emitterFlushTimeout = 3 * time.Second

// ExitAfterDrain bounds the gateway's exit after its drain: the routing
// events' flush (3s) and the closing of its clients. A supervisor's
// grace period (Kubernetes terminationGracePeriodSeconds, compose
// stop_grace_period) should be at least --drain-timeout plus this.
const ExitAfterDrain = 5 * time.Second

// runEmitter runs the emitters until stop is called (not when ctx ends);
// stop flushes them, for at most emitterFlushTimeout.
func (k *kafka) runEmitter(ctx context.Context) (stop func()) {
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		wg.Go(func() { _ = k.arrivals.Run(ectx) })
		_ = k.emitter.Run(ectx) // returns nil once flushed
		wg.Wait()
	}()
	return func() {
		cancel()
		t := time.NewTimer(emitterFlushTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
}

// close closes the clients, then the emitter's spool: closing the
// producer fails the events it still holds, which go to the spool.
func (k *kafka) close(log *slog.Logger) {
	k.signals.Close()
	k.producer.Close()
	if err := k.emitter.Close(); err != nil {
		log.Warn("closing the event spool", "err", err)
	}
	if err := k.arrivals.Close(); err != nil {
		log.Warn("closing the arrival emitter", "err", err)
	}
}
