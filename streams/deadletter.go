package streams

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter headers.
const (
	HeaderDLQReason    = "switchyard-dlq-reason"
	HeaderDLQTopic     = "switchyard-dlq-source-topic"
	HeaderDLQPartition = "switchyard-dlq-source-partition"
	HeaderDLQOffset    = "switchyard-dlq-source-offset"
)

// DeadLetter writes records that could not be processed to the
// dead-letter topic, unchanged, with the reason and their origin in
// headers.
type DeadLetter struct {
	cl    *kgo.Client
	topic string
}

// NewDeadLetter returns a writer to topic.
func NewDeadLetter(cl *kgo.Client, topic string) *DeadLetter {
	return &DeadLetter{cl: cl, topic: topic}
}

// Record builds the dead-letter record for rec.
func (d *DeadLetter) Record(rec *kgo.Record, reason string) *kgo.Record {
	hs := append([]kgo.RecordHeader(nil), rec.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderDLQReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
	)
	return &kgo.Record{Topic: d.topic, Key: rec.Key, Value: rec.Value, Headers: hs, Timestamp: rec.Timestamp}
}

// Send writes rec to the dead-letter topic and waits until Kafka has it.
func (d *DeadLetter) Send(ctx context.Context, rec *kgo.Record, reason string) error {
	if err := d.cl.ProduceSync(ctx, d.Record(rec, reason)).FirstErr(); err != nil {
		return fmt.Errorf("writing %s/%d@%d to dead-letter topic: %w", rec.Topic, rec.Partition, rec.Offset, err)
	}
	return nil
}

// Reason returns the dead-letter reason header of rec, or "".
func Reason(rec *kgo.Record) string {
	for _, h := range rec.Headers {
		if h.Key == HeaderDLQReason {
			return string(h.Value)
		}
	}
	return ""
}
