package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/gateway/budget"
	"github.com/switchyard-llm/switchyard/gateway/httpserver"
	"github.com/switchyard-llm/switchyard/gateway/outlier"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/gateway/relay"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Defaults of the options.
const (
	DefaultListen             = "127.0.0.1:8080"
	DefaultMaxBodyBytes       = 4 << 20
	DefaultConnectTimeout     = 2 * time.Second
	DefaultFirstTokenTimeout  = 30 * time.Second
	DefaultIdleTimeout        = 30 * time.Second
	DefaultMaxAttempts        = 3
	DefaultHealthInterval     = 5 * time.Second
	DefaultEventBuffer        = 4096
	DefaultArrivalRecordAfter = 2 * time.Second
	// DefaultDrainDelay is the `switchyard gateway --drain-delay` default
	// (the library's DrainDelay default is 0): two load-balancer health
	// checks at 2s see the failing readiness before the listener closes.
	DefaultDrainDelay = 5 * time.Second
	// DefaultDrainTimeout bounds a drain, from the signal: below the
	// gateway manifest's terminationGracePeriodSeconds (60) by the
	// routing events' flush (3s) and a margin.
	DefaultDrainTimeout = 50 * time.Second
	tickInterval        = 250 * time.Millisecond
)

// HTTP servers (HTTPServer).
const (
	// ServerFast serves the proxy routes with the gateway's own HTTP/1.1
	// loop (package httpserver) and hands every other request to net/http.
	ServerFast = "fast"
	// ServerStd serves everything with net/http.
	ServerStd = "std"
)

// Engine clients (EngineClient).
const (
	// ClientOwn reaches plain-http engines with the gateway's own pooled
	// HTTP/1.1 client (package engineclient).
	ClientOwn = "own"
	// ClientStd reaches every engine with net/http's Transport.
	ClientStd = "std"
)

// SnapshotSource delivers the cluster's weight snapshots. Updates returns
// one channel, the same on every call, of proto-binary WeightSnapshots;
// a slow reader may miss intermediate values but never the latest, and
// the channel is closed when the source stops. The gateway only reads
// it: whoever built the source runs it. *snapshots.Watcher satisfies it.
type SnapshotSource interface {
	Updates() <-chan []byte
}

// EventSink takes one RoutingEvent per request, keyed by cluster. Emit
// must not block; it reports false when the event was dropped (the
// gateway counts those, unless the sink is a DropCounter).
// *streams.Emitter satisfies it.
type EventSink interface {
	Emit(key string, ev proto.Message) bool
}

// DropCounter is an EventSink that counts every event it loses, those
// Emit refused and those lost later (Kafka failed them and no spool had
// room): Dropped is the number so far. The gateway's
// switchyard_gateway_events_dropped_total is then its own drops (no
// sink) plus Dropped, so one metric counts every routing event lost.
// *streams.Emitter satisfies it.
type DropCounter interface {
	Dropped() uint64
}

// SignalFetcher polls engine signals. Poll blocks until signals arrive
// or ctx is done and calls each with every signal, a proto-binary
// EngineSignal, in the order fetched; each does not keep it past its
// return. streams.Poller over a Kafka client following the engine-signal
// topic (streams.FollowOpts from SignalLookback ago) satisfies it.
type SignalFetcher interface {
	Poll(ctx context.Context, each func(signal []byte))
}

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

// Opt configures a Gateway (see New).
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

// cfg is a gateway's configuration, built from the options and completed
// by validate.
type cfg struct {
	cluster           string
	listen            string
	snapshots         SnapshotSource
	initial           *schemas.WeightSnapshot
	snap              snapshotTrust // snapshot.go
	registry          *fleet.Registry
	events            EventSink
	arrivals          EventSink // arrival.go
	trustTenantHeader bool      // event.go
	instanceID        string    // event.go
	signals           SignalFetcher
	engines           []StaticEngine
	models            []string
	transport         http.RoundTripper
	engineClient      string
	ownClient         bool // transport was not set and engineClient is ClientOwn: plain-http engines get the engine client
	maxBodyBytes      int64
	connectTimeout    time.Duration
	firstTokenTimeout time.Duration
	idleTimeout       time.Duration
	maxAttempts       int
	maxInFlight       int
	noAdaptive        bool              // admission.go
	limiter           admit.Config      // admission.go
	queue             admit.QueueConfig // admission.go
	tenants           TenantKeys        // tenants.go
	priorityHeader    bool              // tenants.go
	adminListen       string
	arrivalAfter      time.Duration // arrival.go
	drainDelay        time.Duration // drain.go
	drainTimeout      time.Duration
	healthInterval    time.Duration
	pick              pick.Options
	retryBudget       budget.Config
	outlier           outlier.Config
	tracerProvider    trace.TracerProvider
	logger            *slog.Logger
	registerer        prometheus.Registerer
	gatherer          prometheus.Gatherer
	now               func() time.Time
	httpServer        string
	bodyLimits        httpserver.BodyLimits // see hardening.go
	rawSyscalls       bool
}

// Listen is the HTTP listen address of Run. Default 127.0.0.1:8080.
func Listen(addr string) Opt { return opt(func(c *cfg) { c.listen = addr }) }

// Snapshots is where the cluster's snapshots come from. Default none:
// the gateway routes on its initial snapshot or static engines only.
func Snapshots(src SnapshotSource) Opt { return opt(func(c *cfg) { c.snapshots = src }) }

// InitialSnapshot is validated and applied by New (a bad one fails New).
// Default none.
func InitialSnapshot(snap *schemas.WeightSnapshot) Opt {
	return opt(func(c *cfg) { c.initial = snap })
}

// Registry is the engine registry: a snapshot naming an engine it does
// not hold, or a registered engine at another endpoint, is rejected
// (reason "unregistered") and the gateway keeps the one it holds, so it
// never dials an endpoint outside the registry (docs/security.md#engine-registry).
// Default nil: any engine a valid snapshot names.
func Registry(reg *fleet.Registry) Opt { return opt(func(c *cfg) { c.registry = reg }) }

// Events receives the routing events. Default none: events are dropped
// and counted (switchyard_gateway_events_dropped_total).
func Events(sink EventSink) Opt { return opt(func(c *cfg) { c.events = sink }) }

// Arrivals receives the arrival records (RoutingEvent, status
// REQUEST_STATUS_IN_PROGRESS) of requests still running
// ArrivalRecordAfter after they arrived, for the routing-arrivals topic,
// so that the routing-events topic (Events) holds one record per
// request. Default none: no arrival records, every request counts as
// demand at its final record.
func Arrivals(sink EventSink) Opt { return opt(func(c *cfg) { c.arrivals = sink }) }

// TrustTenantHeader takes a request's tenant from its X-Switchyard-Tenant
// header when no API keys are configured (Tenants): for a gateway behind
// a proxy that authenticates clients and sets the header itself. With
// keys the key's tenant is the request's, whatever the header says.
// Default false: the header is ignored and a request without a key is
// the DefaultTenant's (RoutingEvent.tenant_source "none").
func TrustTenantHeader(trust bool) Opt { return opt(func(c *cfg) { c.trustTenantHeader = trust }) }

// InstanceID names this gateway instance on its routing events
// (RoutingEvent.gateway_id), as the --gateway-id it shares load under.
// Default "": events carry no instance.
func InstanceID(id string) Opt { return opt(func(c *cfg) { c.instanceID = id }) }

// Signals is followed for engine health and ready replicas: an engine
// whose own signals say unhealthy or no ready replicas gets no traffic.
// Default none.
func Signals(f SignalFetcher) Opt { return opt(func(c *cfg) { c.signals = f }) }

// Engines are routed to (fewest in flight, healthy first) until a
// snapshot arrives. Default none.
func Engines(es ...StaticEngine) Opt { return opt(func(c *cfg) { c.engines = es }) }

// Models is the set of model names accepted; others get 404
// model_not_found. Default empty: any non-empty model is accepted.
func Models(names ...string) Opt { return opt(func(c *cfg) { c.models = names }) }

// Transport reaches the engines. Default: plain-http engines get the
// gateway's own pooled HTTP/1.1 client (package engineclient) and https
// engines a keep-alive net/http transport, both with ConnectTimeout.
func Transport(rt http.RoundTripper) Opt { return opt(func(c *cfg) { c.transport = rt }) }

// MaxBodyBytes bounds request bodies (413 above). Default 4 MiB; n <= 0
// means the default.
func MaxBodyBytes(n int64) Opt { return opt(func(c *cfg) { c.maxBodyBytes = n }) }

// ConnectTimeout bounds dialing an engine (default transport only).
// Default 2s; d <= 0 means the default.
func ConnectTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.connectTimeout = d }) }

// FirstTokenTimeout bounds the wait for the first byte of the response
// body. Default 30s; d <= 0 means the default.
func FirstTokenTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.firstTokenTimeout = d }) }

// IdleTimeout bounds the gap between SSE events. Default 30s; d <= 0
// means the default.
func IdleTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.idleTimeout = d }) }

// MaxAttempts per request, at most 3. Default 3; n outside 1..3 means 3.
func MaxAttempts(n int) Opt { return opt(func(c *cfg) { c.maxAttempts = n }) }

// MaxInFlightPerEngine is each engine's hard in-flight cap: its
// concurrency limit never exceeds it (see admission.go). Default 0: no
// cap (the adaptive limit alone).
func MaxInFlightPerEngine(n int) Opt { return opt(func(c *cfg) { c.maxInFlight = n }) }

// AdaptiveConcurrency turns the adaptive per-engine concurrency limits on
// or off (off: only MaxInFlightPerEngine limits engines, and without it
// the admission queue admits everything). Default on.
func AdaptiveConcurrency(on bool) Opt { return opt(func(c *cfg) { c.noAdaptive = !on }) }

// ConcurrencyLimits tunes the adaptive limiters. Default the zero
// admit.Config (admit's own defaults).
func ConcurrencyLimits(l admit.Config) Opt { return opt(func(c *cfg) { c.limiter = l }) }

// AdmissionQueue bounds the admission queue (length and deadline).
// Default the zero admit.QueueConfig (1,024 requests, 1s).
func AdmissionQueue(q admit.QueueConfig) Opt { return opt(func(c *cfg) { c.queue = q }) }

// AdminListen serves /health and /metrics on their own listener at addr
// (then not on Listen's). Default "": on Listen's.
func AdminListen(addr string) Opt { return opt(func(c *cfg) { c.adminListen = addr }) }

// DrainDelay is how long the listener keeps accepting after Run's ctx
// ends, with /health/ready already failing, so that load balancers stop
// sending new requests before connections are refused (drain.go).
// Default 0: the listener closes at once.
func DrainDelay(d time.Duration) Opt { return opt(func(c *cfg) { c.drainDelay = d }) }

// DrainTimeout bounds the drain, counted from the end of Run's ctx (the
// DrainDelay included): requests and streams in flight run to their end
// until then; streams still running then end with an error event, as an
// OpenAI client reads it (drain.go). Default DefaultDrainTimeout (50s).
func DrainTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.drainTimeout = d }) }

// ArrivalRecordAfter is how long a request runs before the gateway
// publishes its arrival record (RequestStatus IN_PROGRESS, to Arrivals), so that
// demand counts it at arrival even when its final record comes later
// than the processor's allowed lateness. Default 2s; negative: never.
func ArrivalRecordAfter(d time.Duration) Opt { return opt(func(c *cfg) { c.arrivalAfter = d }) }

// HealthInterval of the active /health checks; negative disables them.
// Default 5s; 0 means the default.
func HealthInterval(d time.Duration) Opt { return opt(func(c *cfg) { c.healthInterval = d }) }

// PickOptions tune the picker. Default the zero pick.Options.
func PickOptions(o pick.Options) Opt { return opt(func(c *cfg) { c.pick = o }) }

// RetryBudget bounds retries. Default the zero budget.Config (budget's
// own defaults).
func RetryBudget(b budget.Config) Opt { return opt(func(c *cfg) { c.retryBudget = b }) }

// Outlier tunes outlier ejection. Default the zero outlier.Config
// (outlier's own defaults).
func Outlier(o outlier.Config) Opt { return opt(func(c *cfg) { c.outlier = o }) }

// TracerProvider makes the spans. Default: no-op (no spans; an incoming
// trace context is still passed to the engine).
func TracerProvider(tp trace.TracerProvider) Opt { return opt(func(c *cfg) { c.tracerProvider = tp }) }

// Logger logs. Default: discards.
func Logger(l *slog.Logger) Opt { return opt(func(c *cfg) { c.logger = l }) }

// Registerer receives the metrics (all labelled by cluster, so gateways
// of several clusters can share one). Default: a private registry (the
// metrics are kept but not exported).
func Registerer(r prometheus.Registerer) Opt { return opt(func(c *cfg) { c.registerer = r }) }

// Gatherer is served at /metrics. Default none: no /metrics route.
func Gatherer(g prometheus.Gatherer) Opt { return opt(func(c *cfg) { c.gatherer = g }) }

// Clock is the time source. Default time.Now.
func Clock(now func() time.Time) Opt { return opt(func(c *cfg) { c.now = now }) }

// HTTPServer serves the listener: ServerFast (the gateway's own HTTP/1.1
// loop for the proxy routes, net/http for the rest) or ServerStd
// (net/http for everything). Default ServerFast; "" means the default.
func HTTPServer(name string) Opt { return opt(func(c *cfg) { c.httpServer = name }) }

// EngineClient reaches the engines when no Transport is given: ClientOwn
// (the gateway's own HTTP/1.1 client for plain-http engines, net/http's
// Transport for https) or ClientStd (net/http's Transport for all).
// Default ClientOwn; "" means the default.
func EngineClient(name string) Opt { return opt(func(c *cfg) { c.engineClient = name }) }

// validate checks the configuration and fills in the defaults.
func (c *cfg) validate() error {
	if c.cluster == "" {
		return errors.New("cluster is required")
	}
	switch c.httpServer {
	case "":
		c.httpServer = ServerFast
	case ServerFast, ServerStd:
	default:
		return fmt.Errorf("http server %q: want %q or %q", c.httpServer, ServerFast, ServerStd)
	}
	switch c.engineClient {
	case "":
		c.engineClient = ClientOwn
	case ClientOwn, ClientStd:
	default:
		return fmt.Errorf("engine client %q: want %q or %q", c.engineClient, ClientOwn, ClientStd)
	}
	for _, e := range c.engines {
		if err := checkEndpoint(e.URL); err != nil {
			return fmt.Errorf("static engine %q: %w", e.ID, err)
		}
	}
	if c.listen == "" {
		c.listen = DefaultListen
	}
	if c.maxBodyBytes <= 0 {
		c.maxBodyBytes = DefaultMaxBodyBytes
	}
	if c.connectTimeout <= 0 {
		c.connectTimeout = DefaultConnectTimeout
	}
	if c.firstTokenTimeout <= 0 {
		c.firstTokenTimeout = DefaultFirstTokenTimeout
	}
	if c.idleTimeout <= 0 {
		c.idleTimeout = DefaultIdleTimeout
	}
	if c.maxAttempts <= 0 || c.maxAttempts > DefaultMaxAttempts {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.healthInterval == 0 {
		c.healthInterval = DefaultHealthInterval
	}
	if c.arrivalAfter == 0 {
		c.arrivalAfter = DefaultArrivalRecordAfter
	}
	if c.drainTimeout <= 0 {
		c.drainTimeout = DefaultDrainTimeout
	}
	if c.drainDelay < 0 || c.drainDelay >= c.drainTimeout {
		return fmt.Errorf("drain delay %v: want at least 0 and below the drain timeout %v", c.drainDelay, c.drainTimeout)
	}
	if c.tracerProvider == nil {
		c.tracerProvider = noop.NewTracerProvider()
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.registerer == nil {
		c.registerer = prometheus.NewRegistry()
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.transport == nil {
		c.ownClient = c.engineClient == ClientOwn
		c.transport = &http.Transport{
			DialContext:         (&net.Dialer{Timeout: c.connectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
			// One read takes every event the engine has sent so far
			// (the default 4 KiB holds about 20 tokens).
			ReadBufferSize: relay.BufSize,
		}
	}
	return nil
}

// SignalLookback is how far back a gateway reads engine signals when it
// starts; signalMaxAge is the oldest signal it acts on.
const (
	SignalLookback = 30 * time.Second
	signalMaxAge   = 60 * time.Second
)
