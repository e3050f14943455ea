package policy

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// The switchyard policy's control plane on the virtual clock: the
// processor core (streams/process, as the processor service and replay
// run it) and the optimizer's control loop (streams/control's cadence
// around optimizer/plan's Planner). Between them and around them the
// I/O is modelled, not run:
//
//   - The agents' signals and the gateways' routing events are encoded
//     as the agent and gateway produce them and handed to Core.Handle as
//     Kafka records (one partition per topic, offsets counted here), so
//     they are decoded, validated, dead-lettered or dropped as late
//     exactly as live. Kafka's own latency is not modelled: a record is
//     handled at the virtual instant it is produced.
//   - The core fires windows after every tick (the live processor fires
//     after every poll), with its own watermark: the largest event time
//     it has read, as live once every partition is caught up.
//   - The estimates of the fired windows go to the Planner without the
//     estimates topic. As streams/control does, a window is planned when
//     the next window's estimates arrive or after controlSettle of quiet,
//     the snapshot's version is the window's end, and a window that
//     cannot be planned leaves the gateways on their last snapshot.
//   - The snapshot reaches the gateways propagation_ms after it is
//     planned (NATS, the gateways' watch); solve time is not modelled.

// simEpochMs is the Unix time (ms) of virtual time 0 in the records and
// snapshots: 2026-01-01T00:00:00Z. The processor rejects an event time
// of 0 as missing, as it would a live record without one; a whole number
// of days keeps the windows aligned with the virtual clock.
const simEpochMs int64 = 1767225600000

// controlSettle is streams/control's default Config.Settle: how long the
// optimizer waits for more estimates of a window before planning it.
const controlSettle = 500 * time.Millisecond

// Input partitions: one per topic.
const (
	partSignals = iota
	partEvents
)

// simProcessor feeds the processor core Kafka records built in memory.
type simProcessor struct {
	core   *process.Core
	topics streams.Topics
	next   [2]int64 // next offset per input partition
	rec    kgo.Record
	buf    []byte
	// late and dead count the records the core dropped as late and the
	// ones it would dead-letter (none, for the simulator's own records).
	late, dead int
}

func newSimProcessor(spec window.Spec) (*simProcessor, error) {
	topics := streams.TopicsFor("")
	core, err := process.NewCore(topics, spec, nil)
	if err != nil {
		return nil, fmt.Errorf("processor core: %w", err)
	}
	return &simProcessor{core: core, topics: topics}, nil
}

// produce encodes m as its producer does and hands it to the core as the
// next record of the partition, with Kafka timestamp ts.
func (sp *simProcessor) produce(part int, m proto.Message, ts time.Duration) {
	b, err := proto.MarshalOptions{}.MarshalAppend(sp.buf[:0], m)
	if err != nil {
		sp.dead++
		return
	}
	sp.buf = b
	topic := sp.topics.Signals
	if part == partEvents {
		topic = sp.topics.RoutingEvents
	}
	// The core keeps nothing of the record: the decoder interns the
	// strings it keeps, so the buffer is reused.
	sp.rec = kgo.Record{Topic: topic, Partition: int32(part), Offset: sp.next[part], Value: b,
		Timestamp: time.UnixMilli(simEpochMs + ts.Milliseconds())}
	sp.next[part]++
	switch out, _ := sp.core.Handle(&sp.rec); out {
	case process.Late:
		sp.late++
	case process.DeadLettered:
		sp.dead++
	}
}

// simControl is streams/control's loop on the virtual clock: it queues the
// newest fired window and plans it when the next one arrives or after
// controlSettle, and schedules each snapshot's arrival at the gateways.
type simControl struct {
	planner     *plan.Planner
	propagation time.Duration
	queued      *process.Fired
	queuedAt    time.Duration
	pending     []plannedSnap
}

// advance plans the queued window if it has settled by now, then takes
// the windows fired at now: each one flushes the one queued before it.
func (c *simControl) advance(now time.Duration, fired []process.Fired) {
	if c.queued != nil && now >= c.queuedAt+controlSettle {
		c.plan(c.queuedAt+controlSettle, c.queued)
		c.queued = nil
	}
	for i := range fired {
		if c.queued != nil {
			c.plan(now, c.queued)
		}
		c.queued, c.queuedAt = &fired[i], now
	}
}

// plan plans window f at virtual time at, as streams/control's round
// does, and schedules the snapshot's arrival at the gateways.
func (c *simControl) plan(at time.Duration, f *process.Fired) {
	snap, err := c.planner.Plan(time.UnixMilli(f.End), f.Estimates)
	if err != nil {
		// Nothing to plan (plan.ErrNothingToPlan, ErrOldWindow) or a failed
		// solve: the gateways keep their last good snapshot.
		return
	}
	c.pending = append(c.pending, plannedSnap{at: at + c.propagation, snap: snap})
}

// plannedSnap is a snapshot on its way to the gateways.
type plannedSnap struct {
	at   time.Duration
	snap *schemas.WeightSnapshot
}

// due returns the snapshots that have reached the gateways by now, in
// order, and forgets them.
func (c *simControl) due(now time.Duration) []plannedSnap {
	n := 0
	for n < len(c.pending) && now >= c.pending[n].at {
		n++
	}
	out := c.pending[:n:n]
	c.pending = c.pending[n:]
	return out
}
