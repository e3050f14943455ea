package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// ReadAudit returns every whole snapshot on the audit stream (""
// means snapshots.DefaultAuditStream), in publication order.
func ReadAudit(ctx context.Context, js jetstream.JetStream, stream string) ([]*schemas.WeightSnapshot, error) {
	if stream == "" {
		stream = snapshots.DefaultAuditStream
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("reading audit stream %q: %w", stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading audit stream %q: %w", stream, err)
	}
	var out []*schemas.WeightSnapshot
	for n := info.NumPending; n > 0; {
		batch, err := cons.Fetch(int(min(n, 512)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading audit stream %q: %w", stream, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			var s schemas.WeightSnapshot
			if err := proto.Unmarshal(msg.Data(), &s); err != nil {
				return nil, fmt.Errorf("decoding audit snapshot %d: %w", len(out), err)
			}
			out = append(out, &s)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("reading audit stream %q: %w", stream, err)
		}
		if got == 0 {
			return nil, fmt.Errorf("reading audit stream %q: %d snapshots pending but none delivered", stream, n)
		}
		n -= uint64(got)
	}
	return out, nil
}
