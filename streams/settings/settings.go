// Package settings records the settings the live processor and optimizer
// run with, so that a replay can use them (switchyard replay --verify): at
// every start each writes one JSON Record to the PREFIX.settings topic,
// keyed by component. The topic's retention is the other topics' (the
// replay horizon); records are few (one per process start).
package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/streams"
)

// Components.
const (
	Processor = "processor"
	Optimizer = "optimizer"
)

// WindowByCompletion is the processor's routing-event window time: a
// routing event counts in the pane of its completion time (when the
// gateway produced it), so a long request's record is never behind the
// records produced after it. Records without a completion time (older
// producers) count at their event time.
const WindowByCompletion = "completion"

// Topic is the settings topic under prefix ("" means the default).
func Topic(prefix string) string {
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	return prefix + ".settings"
}

// Record is what one process start writes.
type Record struct {
	Component string `json:"component"`
	// Instance names the process's role instance: the processor's
	// consumer group; "" for the optimizer.
	Instance      string `json:"instance,omitempty"`
	StartedUnixMs int64  `json:"started_unix_ms"`
	// Processor and Optimizer hold the component's settings.
	Processor *ProcessorSettings `json:"processor,omitempty"`
	Optimizer *plan.Settings     `json:"optimizer,omitempty"`
}

// ProcessorSettings are the processor's window settings.
type ProcessorSettings struct {
	WindowMs          int64 `json:"window_ms"`
	SlideMs           int64 `json:"slide_ms"`
	AllowedLatenessMs int64 `json:"allowed_lateness_ms"`
	// RoutingWindowTime is WindowByCompletion ("" in records of builds
	// that windowed routing events by their event time).
	RoutingWindowTime string `json:"routing_window_time"`
}

// Window is the window size as a duration.
func (p ProcessorSettings) Window() time.Duration {
	return time.Duration(p.WindowMs) * time.Millisecond
}

// Slide is the slide as a duration.
func (p ProcessorSettings) Slide() time.Duration { return time.Duration(p.SlideMs) * time.Millisecond }

// AllowedLateness is the allowed lateness as a duration.
func (p ProcessorSettings) AllowedLateness() time.Duration {
	return time.Duration(p.AllowedLatenessMs) * time.Millisecond
}

// ErrNone is returned by Latest when no record of the component exists.
var ErrNone = errors.New("no settings recorded")

// Write records rec on the settings topic under prefix through cl,
// creating the topic (one partition, so records keep their order) when it
// is missing. It waits for the broker's acknowledgement.
func Write(ctx context.Context, cl *kgo.Client, prefix string, rec Record) error {
	topic := Topic(prefix)
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding %s settings: %w", rec.Component, err)
	}
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", topic, err)
	}
	r := &kgo.Record{Topic: topic, Key: []byte(rec.Component), Value: v, Timestamp: time.UnixMilli(rec.StartedUnixMs),
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}, {Key: "message", Value: []byte("switchyard.v1.Settings")}}}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("writing %s settings: %w", rec.Component, err)
	}
	return nil
}

// ReadAll returns every record on the settings topic under prefix, oldest
// first, read through cl (a client without a consumer group that consumes
// nothing else; the partition is added and removed again). A missing
// topic gives no records and no error.
func ReadAll(ctx context.Context, cl *kgo.Client, prefix string) ([]Record, error) {
	topic := Topic(prefix)
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", topic, err)
	}
	assign := map[int32]kgo.Offset{}
	want := map[int32]int64{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return
		}
		if o.Err != nil {
			lerr = fmt.Errorf("listing %s/%d: %w", o.Topic, o.Partition, o.Err)
			return
		}
		s, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > s.Offset {
			assign[o.Partition] = kgo.NewOffset().At(s.Offset)
			want[o.Partition] = o.Offset
		}
	})
	if lerr != nil || len(assign) == 0 {
		return nil, lerr
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign})
	defer func() {
		ps := make([]int32, 0, len(assign))
		for p := range assign {
			ps = append(ps, p)
		}
		cl.RemoveConsumePartitions(map[string][]int32{topic: ps})
	}()
	var out []Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("reading %s/%d: %w", t, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Topic != topic {
				return
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if r.Offset >= end {
				return
			}
			var rec Record
			if err := json.Unmarshal(r.Value, &rec); err != nil {
				return // not a settings record: skipped
			}
			out = append(out, rec)
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedUnixMs < out[j].StartedUnixMs })
	return out, nil
}

// Latest returns the last record of component started at or before t
// (any time when t is zero), and how many distinct settings the
// component's records up to then hold (more than one: the settings
// changed over the history).
func Latest(recs []Record, component string, t time.Time) (Record, int, error) {
	var last Record
	found := false
	distinct := map[string]bool{}
	for _, r := range recs {
		if r.Component != component || (!t.IsZero() && r.StartedUnixMs > t.UnixMilli()) {
			continue
		}
		b, _ := json.Marshal(struct {
			P *ProcessorSettings
			O *plan.Settings
		}{r.Processor, r.Optimizer})
		distinct[string(b)] = true
		last, found = r, true
	}
	if !found {
		return Record{}, 0, fmt.Errorf("%w for the %s", ErrNone, component)
	}
	return last, len(distinct), nil
}
