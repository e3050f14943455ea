// Package streams is Switchyard's Kafka plumbing: topic names, topic
// creation, a bounded never-blocking emitter and the dead-letter writer.
// JetStream snapshot storage lives in streams/snapshots.
package streams

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics names Switchyard's Kafka topics.
type Topics struct {
	// Signals carries EngineSignal records keyed by engine id.
	Signals string
	// RoutingEvents carries RoutingEvent records keyed by request id, one
	// per request: its final record.
	RoutingEvents string
	// RoutingArrivals carries the arrival records of long requests
	// (RoutingEvent, status REQUEST_STATUS_IN_PROGRESS) keyed by request
	// id; readers of RoutingEvents never see them, and demand counting
	// reads both (docs/topics.md).
	RoutingArrivals string
	// Estimates carries Estimate envelopes keyed by entity (compacted,
	// one partition, so consumers see windows in order).
	Estimates string
	// DeadLetter carries records that could not be processed, with the
	// reason in the "switchyard-dlq-reason" header.
	DeadLetter string
	// KVEvents carries KVEventBatch records keyed by engine id: engines'
	// KV-cache events relayed by `switchyard kvevents` (docs/kvevents.md).
	KVEvents string
}

// DefaultPrefix is the topic prefix used when none is configured.
const DefaultPrefix = "switchyard"

// TopicsFor returns the topic names under prefix ("" means DefaultPrefix):
// PREFIX.engine.signals, PREFIX.routing.events, PREFIX.routing.arrivals,
// PREFIX.estimates, PREFIX.deadletter, PREFIX.kv.events.
func TopicsFor(prefix string) Topics {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Topics{
		Signals:         prefix + ".engine.signals",
		RoutingEvents:   prefix + ".routing.events",
		RoutingArrivals: prefix + ".routing.arrivals",
		Estimates:       prefix + ".estimates",
		DeadLetter:      prefix + ".deadletter",
		KVEvents:        prefix + ".kv.events",
	}
}

// All lists every topic.
func (t Topics) All() []string {
	return []string{t.Signals, t.RoutingEvents, t.RoutingArrivals, t.Estimates, t.DeadLetter, t.KVEvents}
}

// Inputs are the topics the processor reads: signals, routing events and
// arrival records, in that order (replay and the processor's offsets use
// the same list).
func (t Topics) Inputs() []string {
	return []string{t.Signals, t.RoutingEvents, t.RoutingArrivals}
}

// Retention of the delete-policy topics: how far back replay, export-trace
// and tap can read (docs/topics.md). Estimates are compacted instead.
const (
	EventRetention      = 7 * 24 * time.Hour  // signals, routing events, arrivals and kv events
	DeadLetterRetention = 30 * 24 * time.Hour // time to inspect and re-drive
)

// Config returns the topic configuration EnsureTopics creates topic name
// with: cleanup.policy and retention.ms (docs/topics.md).
func (t Topics) Config(name string) map[string]*string {
	str := func(s string) *string { return &s }
	ms := func(d time.Duration) *string { return str(strconv.FormatInt(d.Milliseconds(), 10)) }
	switch name {
	case t.Estimates:
		return map[string]*string{"cleanup.policy": str("compact")}
	case t.DeadLetter:
		return map[string]*string{"cleanup.policy": str("delete"), "retention.ms": ms(DeadLetterRetention)}
	}
	return map[string]*string{"cleanup.policy": str("delete"), "retention.ms": ms(EventRetention)}
}

// Replication is how topics are replicated when they are created.
// The zero value leaves both to the brokers' defaults
// (default.replication.factor and min.insync.replicas), which is what the
// embedded single broker needs.
type Replication struct {
	// Factor is the replication factor of new topics; 0 means the
	// broker default.
	Factor int16
	// MinInsync is min.insync.replicas of new topics: with acks=all (every
	// Switchyard producer) a write fails rather than being acknowledged by
	// fewer replicas. 0 means the broker default.
	MinInsync int
}

// Validate rejects negative settings and a MinInsync above Factor.
func (r Replication) Validate() error {
	if r.Factor < 0 || r.MinInsync < 0 {
		return fmt.Errorf("replication factor %d and min.insync.replicas %d must not be negative", r.Factor, r.MinInsync)
	}
	if r.Factor > 0 && r.MinInsync > int(r.Factor) {
		return fmt.Errorf("min.insync.replicas %d exceeds the replication factor %d: no write could succeed", r.MinInsync, r.Factor)
	}
	return nil
}

// NewReplication returns the Replication of a factor and a
// min.insync.replicas given as ints (flags): an error for a factor beyond
// what Kafka holds (int16) or for what Validate rejects.
func NewReplication(factor, minInsync int) (Replication, error) {
	if factor > math.MaxInt16 {
		return Replication{}, fmt.Errorf("replication factor %d is too large (at most %d)", factor, math.MaxInt16)
	}
	r := Replication{Factor: int16(factor), MinInsync: minInsync}
	if err := r.Validate(); err != nil {
		return Replication{}, err
	}
	return r, nil
}

// CreateTopic creates topic name with partitions partitions, configs cfg
// and r's replication; an existing topic is not an error (and is left as
// it is).
func CreateTopic(ctx context.Context, cl *kgo.Client, name string, partitions int32, cfg map[string]*string, r Replication) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("creating topic %q: %w", name, err)
	}
	factor := int16(-1)
	if r.Factor > 0 {
		factor = r.Factor
	}
	if r.MinInsync > 0 {
		merged := make(map[string]*string, len(cfg)+1)
		for k, v := range cfg {
			merged[k] = v
		}
		isr := strconv.Itoa(r.MinInsync)
		merged["min.insync.replicas"] = &isr
		cfg = merged
	}
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, factor, cfg, name)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", name, err)
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", name, resp.Err)
	}
	return nil
}

// EnsureTopics creates the topics that do not exist yet, with partitions
// partitions (default 3), the replication of repl (none given: the broker
// defaults) and Config's retention and cleanup policy.
// The estimates topic is compacted and has one partition: the processor
// publishes each window's estimates in one burst and the optimizer plans a
// window when the next one starts, which needs them in order (estimates
// are a few records per engine per slide, far below one partition's
// capacity).
func EnsureTopics(ctx context.Context, cl *kgo.Client, t Topics, partitions int32, repl ...Replication) error {
	if partitions <= 0 {
		partitions = 3
	}
	var r Replication
	if len(repl) > 0 {
		r = repl[0]
	}
	for _, name := range t.All() {
		n := partitions
		if name == t.Estimates {
			n = 1
		}
		if err := CreateTopic(ctx, cl, name, n, t.Config(name), r); err != nil {
			return err
		}
	}
	return nil
}
