package streams

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Poller hands the values of the records a consuming *kgo.Client fetches
// to a callback, the shape a library takes Kafka records in without
// naming franz-go (gateway.SignalFetcher).
type Poller struct{ cl *kgo.Client }

// NewPoller returns a Poller over cl, a client built with the topics it
// consumes (FollowOpts).
func NewPoller(cl *kgo.Client) Poller { return Poller{cl: cl} }

// Poll blocks until records arrive or ctx is done and calls each with
// every record's value, in the order fetched; each must not keep value
// past its return. Fetch errors are left to the client, which retries
// them.
func (p Poller) Poll(ctx context.Context, each func(value []byte)) {
	p.cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { each(r.Value) })
}

// FollowOpts are the options of a Kafka client that follows topic,
// without a group, from its first record at or after from (the gateway
// follows the engine signals from gateway.SignalLookback ago).
func FollowOpts(topic string, from time.Time) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(from.UnixMilli())),
	}
}

// EmitterProduceOpts are the options of a Kafka client producing through
// an Emitter of size records (default DefaultEmitterRecords). Records
// have no delivery timeout: while Kafka is away they wait in the client
// (the emitter's bound keeps them to size) and the emitter spools the
// rest, so they reach Kafka in the order emitted. The client's own bound
// is twice the emitter's: a record's place is freed in the client only
// after its promise ran, so a bound equal to the emitter's would refuse
// records the emitter counts as gone.
func EmitterProduceOpts(size int) []kgo.Opt {
	if size <= 0 {
		size = DefaultEmitterRecords
	}
	return []kgo.Opt{
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.MaxBufferedRecords(2 * size),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}
}
