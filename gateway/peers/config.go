package peers

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults and hard limits of a Sharer (docs/gateway.md, "Peer load
// sharing").
const (
	// DefaultPrefix is the subject prefix: reports go to
	// <prefix>.gateway.load.<cluster>.
	DefaultPrefix = "switchyard"
	// DefaultInterval is how often a gateway publishes its load.
	DefaultInterval = 100 * time.Millisecond
	// Heartbeat is the longest a gateway stays silent: with nothing
	// queued or in flight it publishes an empty report this often.
	Heartbeat = time.Second
	// DefaultMaxPeers bounds the peer gateways tracked at once; reports
	// of more are dropped until one goes silent.
	DefaultMaxPeers = 4096
	// DefaultMaxEngines bounds the engines of one report; a report with
	// more is dropped.
	DefaultMaxEngines = 1 << 16
	// DefaultMaxMessageBytes bounds one report on the wire, both ways
	// (NATS's default max_payload); bigger ones are dropped, and a
	// gateway with more to say sends its most loaded engines only.
	DefaultMaxMessageBytes = 1 << 20
	// MaxPrefillTokens clamps the queued prefill one peer reports on one
	// engine (2^24 tokens: over a hundred 128k-token prompts).
	MaxPrefillTokens = 1 << 24
	// MaxInFlight clamps the in-flight count one report gives an engine.
	MaxInFlight = 1 << 20
	// DefaultMaxSubscriptions bounds the subjects a Sharer subscribes to
	// one by one (Config.PeerClusters); with more peer clusters it
	// subscribes to the wildcard instead.
	DefaultMaxSubscriptions = 4096
	// MaxIDBytes bounds gateway, cluster and engine ids in a report (and
	// Config.ID).
	MaxIDBytes = 1024
	maxIDBytes = MaxIDBytes
	// queueLen bounds the reports received and not yet applied.
	queueLen = 1024
	// queueBytes bounds their bytes (or 2·MaxMessageBytes if more): 1024
	// reports of 1 MiB would hold 1 GiB.
	queueBytes = 32 << 20
)

// Config configures a Sharer. Zero fields take their defaults.
type Config struct {
	// Cluster is this gateway's cluster (required): the last token of
	// the subject it publishes to.
	Cluster string
	// ID is this gateway's instance id (required), unique among the
	// gateways that share engines; reports carrying it are its own and
	// ignored.
	ID string
	// Prefix is the subject prefix. Default DefaultPrefix.
	Prefix string
	// Interval is how often the gateway publishes its load and expires
	// stale peers. Default DefaultInterval.
	Interval time.Duration
	// Staleness is how long a peer's report counts after it arrived (by
	// this gateway's clock): a peer that stops publishing stops counting
	// after it. Default 10·Interval, at least 1 s. A peer with nothing
	// to report is still tracked (the peers gauge) for 3 heartbeats.
	Staleness time.Duration
	// MaxPeers, MaxEngines and MaxMessageBytes bound what is tracked and
	// accepted. Defaults DefaultMaxPeers, DefaultMaxEngines and
	// DefaultMaxMessageBytes.
	MaxPeers, MaxEngines, MaxMessageBytes int
	// PeerClusters, when set, is called from Run every Interval for the
	// clusters whose gateways share engines with this one (the routed
	// snapshot's peer_clusters: Gateway.PeerClusters). The Sharer then
	// subscribes to exactly their subjects and its own cluster's, so it
	// hears only them; reports of clusters it stops hearing expire by
	// Staleness. While it returns none (no snapshot yet, static engines,
	// a snapshot from an optimizer that does not fill peer_clusters), or
	// more than MaxSubscriptions subjects, and when PeerClusters is nil,
	// the Sharer subscribes to every cluster's reports (Wildcard). The
	// slice is only read.
	PeerClusters func() []string
	// MaxSubscriptions bounds the subjects subscribed one by one. Default
	// DefaultMaxSubscriptions.
	MaxSubscriptions int
	// Logger; default discards.
	Logger *slog.Logger
	// Registerer takes the metrics; default a private registry.
	Registerer prometheus.Registerer
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("peers: invalid config")

// withDefaults returns c with its zero fields set to their defaults, or
// an error wrapping ErrConfig.
func (c Config) withDefaults() (Config, error) {
	if c.Cluster == "" {
		return c, fmt.Errorf("%w: no cluster", ErrConfig)
	}
	if c.ID == "" || len(c.ID) > maxIDBytes {
		return c, fmt.Errorf("%w: gateway id %q: want 1 to %d bytes", ErrConfig, c.ID, maxIDBytes)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Staleness == 0 {
		c.Staleness = max(10*c.Interval, time.Second)
	}
	if c.MaxPeers == 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	if c.MaxEngines == 0 {
		c.MaxEngines = DefaultMaxEngines
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if c.Interval < time.Millisecond || c.Staleness < c.Interval || c.MaxPeers < 0 || c.MaxEngines < 0 || c.MaxMessageBytes < 0 || c.MaxSubscriptions < 0 {
		return c, fmt.Errorf("%w: interval %v, staleness %v (interval at least 1ms, staleness at least the interval), max peers %d, engines %d, message bytes %d, subscriptions %d (not negative)",
			ErrConfig, c.Interval, c.Staleness, c.MaxPeers, c.MaxEngines, c.MaxMessageBytes, c.MaxSubscriptions)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// DefaultID returns an instance id for a gateway that was given none:
// its host name, process id and 4 random bytes, so that two processes
// never share one (a restarted gateway is a new peer; its old id goes
// stale).
func DefaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "gateway"
	}
	var r [4]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(r[:]))
}
