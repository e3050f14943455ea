// Package tap reads a range of any Switchyard Kafka topic and writes each
// record as one JSON object (`switchyard tap`): the value decoded by its
// message header (or, for records without headers, by the topic), with a
// _kafka object holding the record's topic, partition, offset,
// timestamp, key and headers.
package tap

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/switchyard-llm/switchyard/schemas"
)

// ErrUsage marks bad options (a position that does not parse, --follow
// with --to, a partition the topic does not have).
var ErrUsage = errors.New("tap: bad options")

// Position is where a range starts or ends: the beginning of the log, its
// end (when Tap starts), or the first record at or after a time.
type Position struct {
	kind int
	t    time.Time
}

const (
	posDefault = iota // Beginning for From, End for To
	posBeginning
	posEnd
	posTime
)

// Beginning is the start of each partition's log.
func Beginning() Position { return Position{kind: posBeginning} }

// End is each partition's end offset when Tap starts.
func End() Position { return Position{kind: posEnd} }

// At is the first record whose timestamp is at or after t.
func At(t time.Time) Position { return Position{kind: posTime, t: t} }

// ParsePosition parses "beginning", "end" or an RFC 3339 time.
func ParsePosition(s string) (Position, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "beginning", "start", "earliest":
		return Beginning(), nil
	case "end", "latest", "now":
		return End(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return Position{}, fmt.Errorf("%w: position %q is not beginning, end or an RFC 3339 time", ErrUsage, s)
	}
	return At(t), nil
}

func (p Position) String() string {
	switch p.kind {
	case posDefault:
		return "default"
	case posBeginning:
		return "beginning"
	case posEnd:
		return "end"
	}
	return p.t.UTC().Format(time.RFC3339Nano)
}

// Options say what Tap reads.
type Options struct {
	// Topic is the topic's full name.
	Topic string
	// From is where reading starts (inclusive). Default Beginning.
	From Position
	// To is where reading stops (exclusive); Tap returns there. Default
	// End. Not with Follow.
	To Position
	// Follow keeps reading new records until ctx is done.
	Follow bool
	// Key, when HasKey, keeps only the records with this key.
	Key    string
	HasKey bool
	// Partition, when >= 0, reads only this partition. Default -1: all.
	Partition int32
}

// Tap writes the records of o.Topic between o.From and o.To to w, one
// JSON object per line (see Record), and returns how many it wrote. cl
// must consume nothing else: Tap adds the partitions it reads. Without
// Follow it returns nil once every partition reached o.To; with Follow
// it returns nil when ctx is done.
func Tap(ctx context.Context, cl *kgo.Client, o Options, w io.Writer) (int, error) {
	if o.From.kind == posDefault {
		o.From = Beginning()
	}
	if o.Follow && o.To.kind != posDefault && o.To.kind != posEnd {
		return 0, fmt.Errorf("%w: --follow reads until stopped; it takes no --to", ErrUsage)
	}
	if o.To.kind == posDefault {
		o.To = End()
	}
	start, stop, err := offsets(ctx, kadm.NewClient(cl), o)
	if err != nil {
		return 0, err
	}
	consume := map[int32]kgo.Offset{}
	pending := map[int32]bool{}
	for p, s := range start {
		if !o.Follow && s >= stop[p] {
			continue // nothing in range
		}
		consume[p] = kgo.NewOffset().At(s)
		pending[p] = true
	}
	if len(consume) == 0 {
		return 0, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{o.Topic: consume})
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	n := 0
	var line []byte
	for o.Follow || len(pending) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			if o.Follow {
				return n, bw.Flush()
			}
			return n, ctx.Err()
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("reading %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return n, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !o.Follow {
				if !pending[r.Partition] {
					return
				}
				if r.Offset >= stop[r.Partition] {
					delete(pending, r.Partition)
					return
				}
				if r.Offset+1 >= stop[r.Partition] {
					delete(pending, r.Partition)
				}
			}
			if o.HasKey && string(r.Key) != o.Key {
				return
			}
			line = Record(line[:0], r)
			line = append(line, '\n')
			if _, err := bw.Write(line); err != nil && ferr == nil {
				ferr = fmt.Errorf("writing: %w", err)
			}
			n++
		})
		if ferr != nil {
			return n, ferr
		}
		if err := bw.Flush(); err != nil {
			return n, fmt.Errorf("writing: %w", err)
		}
	}
	return n, nil
}

// offsets returns each partition's first offset to read and the offset
// to stop before (unset with Follow).
func offsets(ctx context.Context, adm *kadm.Client, o Options) (start, stop map[int32]int64, err error) {
	starts, err := adm.ListStartOffsets(ctx, o.Topic)
	if err != nil {
		return nil, nil, fmt.Errorf("listing offsets of %s: %w", o.Topic, err)
	}
	if err := starts.Error(); err != nil {
		return nil, nil, fmt.Errorf("listing offsets of %s: %w", o.Topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, o.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing end offsets of %s: %w", o.Topic, err)
	}
	if len(starts[o.Topic]) == 0 {
		return nil, nil, fmt.Errorf("topic %s does not exist", o.Topic)
	}
	at := func(p Position) (map[int32]int64, error) {
		out := map[int32]int64{}
		switch p.kind {
		case posBeginning:
			starts.Each(func(lo kadm.ListedOffset) { out[lo.Partition] = lo.Offset })
		case posEnd:
			ends.Each(func(lo kadm.ListedOffset) { out[lo.Partition] = lo.Offset })
		default:
			after, err := adm.ListOffsetsAfterMilli(ctx, p.t.UnixMilli(), o.Topic)
			if err == nil {
				err = after.Error()
			}
			if err != nil {
				return nil, fmt.Errorf("finding offsets at %s in %s: %w", p, o.Topic, err)
			}
			after.Each(func(lo kadm.ListedOffset) {
				end, _ := ends.Lookup(o.Topic, lo.Partition)
				if lo.Offset < 0 || lo.Offset > end.Offset { // after every record
					lo.Offset = end.Offset
				}
				out[lo.Partition] = lo.Offset
			})
		}
		return out, nil
	}
	if start, err = at(o.From); err != nil {
		return nil, nil, err
	}
	if !o.Follow {
		if stop, err = at(o.To); err != nil {
			return nil, nil, err
		}
	}
	if o.Partition >= 0 {
		s, ok := start[o.Partition]
		if !ok {
			return nil, nil, fmt.Errorf("%w: topic %s has no partition %d (it has %d)", ErrUsage, o.Topic, o.Partition, len(start))
		}
		start = map[int32]int64{o.Partition: s}
	}
	return start, stop, nil
}

// Record appends r as one JSON object: the fields of its value decoded
// as the message its headers name (AppendJSON), or a JSON value as it is,
// plus "_kafka": {"topic", "partition", "offset", "timestamp" (RFC 3339,
// UTC), "key", "headers" (an object; a repeated key keeps its last
// value)}. A value that does not decode gets "_error" and
// "_value_base64" instead of its fields.
func Record(b []byte, r *kgo.Record) []byte {
	meta := Field{Key: "_kafka", Value: kafkaJSON(r)}
	ct, name := contentType(r)
	switch ct {
	case schemas.ContentTypeJSON:
		var v any
		if json.Unmarshal(r.Value, &v) != nil {
			return undecoded(b, r, "value is not JSON", meta)
		}
		if _, ok := v.(map[string]any); !ok {
			return AppendJSON(b, emptyMessage(), Field{Key: "_value", Value: r.Value}, meta)
		}
		obj := trimJSON(r.Value)
		b = append(b, obj[:len(obj)-1]...)
		if len(trimJSON(obj[1:len(obj)-1])) > 0 {
			b = append(b, ',')
		}
		b = appendString(b, meta.Key)
		b = append(b, ':')
		b = append(b, meta.Value...)
		return append(b, '}')
	case schemas.ContentTypeProtobuf:
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			return undecoded(b, r, fmt.Sprintf("unknown message %q", name), meta)
		}
		m := mt.New()
		if err := proto.Unmarshal(r.Value, m.Interface()); err != nil {
			return undecoded(b, r, fmt.Sprintf("decoding %s: %v", name, err), meta)
		}
		return AppendJSON(b, m, meta)
	}
	return undecoded(b, r, "no content-type header and a topic of unknown content", meta)
}

func trimJSON(b []byte) []byte {
	return []byte(strings.TrimSpace(string(b)))
}

func undecoded(b []byte, r *kgo.Record, why string, meta Field) []byte {
	v := make([]byte, 0, base64.StdEncoding.EncodedLen(len(r.Value))+2)
	v = append(v, '"')
	v = base64.StdEncoding.AppendEncode(v, r.Value)
	v = append(v, '"')
	return AppendJSON(b, emptyMessage(), Field{Key: "_error", Value: appendString(nil, why)}, Field{Key: "_value_base64", Value: v}, meta)
}

// emptyMessage is a message without fields, for objects of extras only.
func emptyMessage() protoreflect.Message {
	return (&schemas.Estimate{}).ProtoReflect() // a oneof envelope: no field when unset
}

// contentType returns r's content type and message name from its
// headers or, for a record without them, from its topic's name.
func contentType(r *kgo.Record) (ct, message string) {
	for _, h := range r.Headers {
		switch h.Key {
		case schemas.HeaderContentType:
			ct = string(h.Value)
		case schemas.HeaderMessage:
			message = string(h.Value)
		}
	}
	if ct != "" {
		if ct == schemas.ContentTypeProtobuf && message == "" {
			message = topicMessage(r.Topic)
		}
		return ct, message
	}
	if strings.HasSuffix(r.Topic, ".processor.checkpoints") {
		return schemas.ContentTypeJSON, ""
	}
	if m := topicMessage(r.Topic); m != "" {
		return schemas.ContentTypeProtobuf, m
	}
	return "", ""
}

// topicMessage is the message of a Switchyard topic by its name's
// suffix (docs/topics.md), "" when unknown.
func topicMessage(topic string) string {
	for suffix, m := range map[string]proto.Message{
		".engine.signals": &schemas.EngineSignal{},
		".routing.events": &schemas.RoutingEvent{},
		".estimates":      &schemas.Estimate{},
		".kv.events":      &schemas.KVEventBatch{},
	} {
		if strings.HasSuffix(topic, suffix) {
			return schemas.MessageName(m)
		}
	}
	return ""
}

// kafkaJSON is the _kafka object of r.
func kafkaJSON(r *kgo.Record) []byte {
	b := []byte(`{"topic":`)
	b = appendString(b, r.Topic)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(r.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, r.Offset, 10)
	b = append(b, `,"timestamp":`...)
	b = appendString(b, r.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	b = append(b, `,"key":`...)
	if utf8.Valid(r.Key) {
		b = appendString(b, string(r.Key))
	} else {
		b = appendString(b, "base64:"+base64.StdEncoding.EncodeToString(r.Key))
	}
	b = append(b, `,"headers":{`...)
	last := map[string]int{}
	for i, h := range r.Headers {
		last[h.Key] = i
	}
	first := true
	for i, h := range r.Headers {
		if last[h.Key] != i { // a repeated key: its last value
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, h.Key)
		b = append(b, ':')
		b = appendString(b, string(h.Value))
	}
	return append(b, "}}"...)
}
