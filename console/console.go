// Package console is Switchyard's web console: server-rendered
// html/template pages whose charts are SVG drawn on the server (no
// JavaScript library, no CDN; the small stylesheet and script are
// embedded). Per cluster it shows the current weights and shed fraction
// and their history (from the snapshot audit stream), each engine's
// fitted TTFT and TBOT profiles against the observations the fit saw
// (from the estimates and signals topics), the explanation of every
// weight, a diff of two snapshot versions, the gateways' request and
// error rates (from the routing events) and the pipeline's health
// (processor lag, watermark, snapshot age).
//
// The console takes its clients: a snapshot store for the audit stream
// and, optionally, a Kafka client made with ClientOpts. See
// docs/console.md.
package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Snapshots reads the snapshot audit stream. *snapshots.Store
// implements it.
type Snapshots interface {
	// ReadAudit calls fn with each whole snapshot stored from from on,
	// oldest first, until fn returns false or the stream's end.
	ReadAudit(ctx context.Context, from snapshots.AuditFrom, fn func(snapshots.AuditEntry) bool) error
}

var _ Snapshots = (*snapshots.Store)(nil)

// Config configures a Console.
type Config struct {
	// Snapshots is the audit stream's reader (required).
	Snapshots Snapshots
	// Kafka, when not nil, is the client the console consumes the
	// estimates, signals and routing events with (made with ClientOpts)
	// and reads the processor's lag through. Nil: those sections say that
	// there is no Kafka client. The caller closes it after Run returns.
	Kafka *kgo.Client
	// TopicPrefix names the topics (streams.TopicsFor). Default
	// "switchyard".
	TopicPrefix string
	// ProcessorGroup is the processor's consumer group, whose lag the
	// pipeline page shows. Default "switchyard-processor".
	ProcessorGroup string
	// History is how far back the charts go. Default one hour.
	History time.Duration
	// Refresh is how often an open page reloads its content. Default 5s;
	// negative: never.
	Refresh time.Duration
	// BasePath is the path the console's handler is mounted at, ending in
	// "/" (links are built on it). Default "/".
	BasePath string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// defaults fills in the defaults and checks the rest.
func (c *Config) defaults() error {
	if c.Snapshots == nil {
		return errors.New("console: no snapshot reader")
	}
	if c.ProcessorGroup == "" {
		c.ProcessorGroup = "switchyard-processor"
	}
	if c.History <= 0 {
		c.History = time.Hour
	}
	if c.Refresh == 0 {
		c.Refresh = 5 * time.Second
	}
	if c.BasePath == "" {
		c.BasePath = "/"
	}
	if !strings.HasPrefix(c.BasePath, "/") || !strings.HasSuffix(c.BasePath, "/") {
		return fmt.Errorf("console: base path %q must start and end with /", c.BasePath)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ClientOpts are the options the console's Kafka client must be created
// with, next to the caller's own (seed brokers, TLS, SASL): the
// estimates, signals, routing-event, arrival and dead-letter topics from
// cfg.History ago on,
// without a consumer group.
func ClientOpts(cfg Config) []kgo.Opt {
	if cfg.History <= 0 {
		cfg.History = time.Hour
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	t := streams.TopicsFor(cfg.TopicPrefix)
	return []kgo.Opt{
		kgo.ConsumeTopics(t.Estimates, t.Signals, t.RoutingEvents, t.RoutingArrivals, t.DeadLetter),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(now().Add(-cfg.History).UnixMilli())),
	}
}

// Console serves the pages.
type Console struct {
	cfg    Config
	topics streams.Topics
	pages  map[string]*template.Template
	hist   *history
	live   *live
	mux    *http.ServeMux
	log    *slog.Logger
}

// New returns a console reading from cfg's clients. Call Run to follow
// the Kafka topics.
func New(cfg Config) (*Console, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{
		cfg:    cfg,
		topics: streams.TopicsFor(cfg.TopicPrefix),
		pages:  pages,
		hist:   &history{},
		live:   newLive(cfg.History),
		log:    cfg.Logger,
	}
	c.routes()
	return c, nil
}

// Handler serves the console; mount it at cfg.BasePath with that prefix
// stripped (http.StripPrefix with BasePath minus its final "/").
func (c *Console) Handler() http.Handler { return c.mux }

// Run follows the Kafka topics until ctx is done, then returns nil. It
// returns at once when the console has no Kafka client. Run may be
// called once.
func (c *Console) Run(ctx context.Context) error {
	if c.cfg.Kafka == nil {
		return nil
	}
	c.consume(ctx)
	return nil
}

// Serve serves the console on ln at cfg.BasePath (with "/" redirecting
// there) and follows the Kafka topics, until ctx is done; then it closes
// ln and returns nil, or the first error.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	if c.cfg.BasePath == "/" {
		mux.Handle("/", c.Handler())
	} else {
		mux.Handle(c.cfg.BasePath, http.StripPrefix(strings.TrimSuffix(c.cfg.BasePath, "/"), c.Handler()))
		mux.Handle("/{$}", http.RedirectHandler(c.cfg.BasePath, http.StatusFound))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	err := srv.Serve(ln)
	cancel() // Serve failed, or ctx is done: stop following Kafka
	runErr := <-runDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("serving the console: %w", err)
	}
	return runErr
}
