// Package streams is Switchyard's Kafka plumbing: topic names, topic
// creation, a bounded never-blocking emitter and the dead-letter writer.
// JetStream snapshot storage lives in streams/snapshots.
package streams

import (
	"context"
	"errors"
	"fmt"
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
	// RoutingEvents carries RoutingEvent records keyed by request id.
	RoutingEvents string
	// Estimates carries Estimate envelopes keyed by entity (compacted,
	// one partition, so consumers see windows in order).
	Estimates string
	// DeadLetter carries records that could not be processed, with the
	// reason in the "switchyard-dlq-reason" header.
	DeadLetter string
}

// DefaultPrefix is the topic prefix used when none is configured.
const DefaultPrefix = "switchyard"

// TopicsFor returns the topic names under prefix ("" means DefaultPrefix):
// PREFIX.engine.signals, PREFIX.routing.events, PREFIX.estimates,
// PREFIX.deadletter.
func TopicsFor(prefix string) Topics {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Topics{
		Signals:       prefix + ".engine.signals",
		RoutingEvents: prefix + ".routing.events",
		Estimates:     prefix + ".estimates",
		DeadLetter:    prefix + ".deadletter",
	}
}

// All lists every topic.
func (t Topics) All() []string {
	return []string{t.Signals, t.RoutingEvents, t.Estimates, t.DeadLetter}
}

// Retention of the delete-policy topics: how far back replay, export-trace
// and tap can read (docs/topics.md). Estimates are compacted instead.
const (
	EventRetention      = 7 * 24 * time.Hour  // signals and routing events
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

// EnsureTopics creates the topics that do not exist yet, with partitions
// partitions (default 3), replication factor -1 (the broker default) and
// Config's retention and cleanup policy.
// The estimates topic is compacted and has one partition: the processor
// publishes each window's estimates in one burst and the optimizer plans a
// window when the next one starts, which needs them in order (estimates
// are a few records per engine per slide, far below one partition's
// capacity).
func EnsureTopics(ctx context.Context, cl *kgo.Client, t Topics, partitions int32) error {
	if partitions <= 0 {
		partitions = 3
	}
	adm := kadm.NewClient(cl)
	for _, name := range t.All() {
		cfg := t.Config(name)
		n := partitions
		if name == t.Estimates {
			n = 1
		}
		resp, err := adm.CreateTopic(ctx, n, -1, cfg, name)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %q: %w", name, err)
		}
		if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %q: %w", name, resp.Err)
		}
	}
	return nil
}
