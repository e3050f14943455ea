package snapshots

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// AuditEntry is one message of the audit stream: a whole snapshot as
// Publish stored it.
type AuditEntry struct {
	// Seq is the message's sequence in the audit stream.
	Seq uint64
	// Stored is when the stream stored it.
	Stored time.Time
	// Snapshot is the decoded snapshot; nil when Err is set.
	Snapshot *schemas.WeightSnapshot
	// Err says why the message could not be decoded.
	Err error
}

// AuditFrom is where ReadAudit starts: at sequence Seq when it is not
// zero, else at the first message stored at or after Time, else at the
// stream's start.
type AuditFrom struct {
	Seq  uint64
	Time time.Time
}

// ReadAudit calls fn with each message of the audit stream from from on,
// oldest first, until fn returns false or the last message stored when
// ReadAudit was called has been delivered. A message that does not decode
// is passed with Err set.
func (s *Store) ReadAudit(ctx context.Context, from AuditFrom, fn func(AuditEntry) bool) error {
	st, err := s.js.Stream(ctx, s.cfg.auditStream)
	if err != nil {
		return fmt.Errorf("opening audit stream %q: %w", s.cfg.auditStream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading audit stream %q: %w", s.cfg.auditStream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || from.Seq > last {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{s.cfg.auditSubject},
		InactiveThreshold: time.Minute,
	}
	switch {
	case from.Seq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	case !from.Time.IsZero():
		t := from.Time
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reading audit stream %q: %w", s.cfg.auditStream, err)
	}
	for ctx.Err() == nil {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return fmt.Errorf("reading audit stream %q: %w", s.cfg.auditStream, err)
		}
		n, done := 0, false
		for msg := range batch.Messages() {
			n++
			if done {
				continue // drain the batch
			}
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("audit message metadata: %w", err)
			}
			e := AuditEntry{Seq: md.Sequence.Stream, Stored: md.Timestamp}
			var snap schemas.WeightSnapshot
			if err := proto.Unmarshal(msg.Data(), &snap); err != nil {
				e.Err = fmt.Errorf("decoding audit message %d: %w", e.Seq, err)
			} else {
				e.Snapshot = &snap
			}
			if !fn(e) || e.Seq >= last {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("reading audit stream %q: %w", s.cfg.auditStream, err)
		}
		if done || n == 0 {
			return nil
		}
	}
	return ctx.Err()
}
