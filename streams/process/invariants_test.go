package process

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// The processor's named invariants (docs/processor.md), each tested on a
// Core directly so that breaking one line of it fails a test named for
// it (bench/mutation checks this: docs/testing.md).

func newTestCore(t *testing.T, topics streams.Topics, spec window.Spec) *Core {
	t.Helper()
	core, err := NewCore(topics, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return core
}

// routingRec is a routing event record of partition part at offset off,
// windowed at at.
func routingRec(topics streams.Topics, part int32, off int64, at time.Time, i int) *kgo.Record {
	return &kgo.Record{Topic: topics.RoutingEvents, Partition: part, Offset: off,
		Value: mustMarshal(routing("us", "e1", at, i)), Timestamp: at}
}

// TestWatermarkWaitsForLaggingPartition: the watermark is the smallest
// event time over the partitions with unread records, so while one
// partition lags (its records read up to 1s while another's are at 19s)
// the watermark is at 1s: no window past it fires, and the lagging
// partition's records from 2s on still count when they arrive; once they
// are in, the watermark moves on to 19s.
func TestWatermarkWaitsForLaggingPartition(t *testing.T) {
	topics := streams.TopicsFor("lag")
	core := newTestCore(t, topics, window.Spec{Size: 2 * time.Second, Slide: time.Second, AllowedLateness: 500 * time.Millisecond})
	// Both partitions' logs end at 100: both have unread records
	// throughout.
	core.Track(topics.RoutingEvents, 0, 0, 100)
	core.Track(topics.RoutingEvents, 1, 0, 100)
	for i := range 20 {
		if out, reason := core.Handle(routingRec(topics, 0, int64(i), t0.Add(time.Duration(i)*time.Second), i)); out != Accepted {
			t.Fatalf("partition 0 record %d: %v %s", i, out, reason)
		}
	}
	for i := range 2 {
		core.Handle(routingRec(topics, 1, int64(i), t0.Add(time.Duration(i)*time.Second), 100+i))
	}
	for _, f := range core.Fire() {
		if f.End > t0.Add(time.Second).UnixMilli() {
			t.Errorf("window [%d, %d) fired while partition 1 is read only up to %d", f.Start, f.End, t0.Add(time.Second).UnixMilli())
		}
	}
	if wm := core.Watermark(); !wm.Equal(t0.Add(time.Second)) {
		t.Errorf("watermark at %v, want the lagging partition's 1s", wm.Sub(t0))
	}
	for i := 2; i < 20; i++ {
		if out, reason := core.Handle(routingRec(topics, 1, int64(i), t0.Add(time.Duration(i)*time.Second), 100+i)); out != Accepted {
			t.Errorf("lagging partition's record at %ds: %v %s, want Accepted", i, out, reason)
		}
	}
	core.Fire()
	if wm := core.Watermark(); !wm.Equal(t0.Add(19 * time.Second)) {
		t.Errorf("watermark at %v once both partitions are read to 19s, want 19s", wm.Sub(t0))
	}
}

// TestWatermarkHeldByPartitionWithNoRecordYet: a partition with unread
// records of which none has been read holds the watermark: nothing fires,
// however far the other partition has read.
func TestWatermarkHeldByPartitionWithNoRecordYet(t *testing.T) {
	topics := streams.TopicsFor("held")
	core := newTestCore(t, topics, window.Spec{Size: 2 * time.Second, Slide: time.Second, AllowedLateness: 500 * time.Millisecond})
	core.Track(topics.RoutingEvents, 0, 0, 20)
	core.Track(topics.RoutingEvents, 1, 0, 5)
	for i := range 20 {
		core.Handle(routingRec(topics, 0, int64(i), t0.Add(time.Duration(i)*time.Second), i))
	}
	if fired := core.Fire(); len(fired) > 0 {
		t.Errorf("%d windows fired before partition 1's first record", len(fired))
	}
	if out, reason := core.Handle(routingRec(topics, 1, 0, t0, 100)); out != Accepted {
		t.Errorf("partition 1's first record, at 0s: %v %s, want Accepted", out, reason)
	}
}

// outOfOrderRecords are n routing events on each of two partitions, every
// third one dated 1.5s before its neighbours (as a long request's record,
// published at completion, arrives after shorter ones), so a partition's
// records go back and forth between panes.
func outOfOrderRecords(topics streams.Topics, n int) []*kgo.Record {
	var recs []*kgo.Record
	for i := range n {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if i%3 == 1 {
			at = at.Add(-1500 * time.Millisecond)
		}
		for part := range int32(2) {
			recs = append(recs, routingRec(topics, part, int64(i), at.Add(time.Duration(part)*30*time.Millisecond), 2*i+int(part)))
		}
	}
	return recs
}

// firedLog collects fired windows' estimates by window and key; a window
// fired twice must repeat byte for byte.
type firedLog map[string][]byte

func (l firedLog) add(t *testing.T, fired []Fired) {
	t.Helper()
	for _, f := range fired {
		for _, e := range f.Estimates {
			b, err := estimate.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf("%d-%d %s", f.Start, f.End, estimate.Key(e))
			if prev, ok := l[k]; ok && !bytes.Equal(prev, b) {
				t.Errorf("window %s fired twice with different estimates", k)
			}
			l[k] = b
		}
	}
}

// TestRestartFromCheckpointSkipsNoRecord: a core restored from another's
// checkpoint and fed each partition's records from the checkpoint's
// resume offset on (as the consumer group delivers them) fires exactly
// the windows one uninterrupted core fires: the resume offset is the
// lowest offset any open pane holds, so no record is skipped, whichever
// record the checkpoint is taken after.
func TestRestartFromCheckpointSkipsNoRecord(t *testing.T) {
	topics := streams.TopicsFor("resume")
	spec := window.Spec{Size: 4 * time.Second, Slide: time.Second, AllowedLateness: 2 * time.Second}
	recs := outOfOrderRecords(topics, 150)
	feed := func(core *Core, l firedLog, recs []*kgo.Record) {
		for i, r := range recs {
			if out, reason := core.Handle(r); out == Late || out == DeadLettered {
				t.Fatalf("%s/%d@%d: %v %s", r.Topic, r.Partition, r.Offset, out, reason)
			}
			if i%20 == 19 {
				l.add(t, core.Fire())
			}
		}
	}
	want := firedLog{}
	whole := newTestCore(t, topics, spec)
	feed(whole, want, recs)
	want.add(t, whole.Fire())
	for _, k := range []int{41, 100, 157, 222} {
		got := firedLog{}
		first := newTestCore(t, topics, spec)
		feed(first, got, recs[:k])
		cp := first.Checkpoint()
		if cp.Next == 0 {
			t.Fatalf("checkpoint after %d records: no window fired yet", k)
		}
		resume := map[int32]int64{}
		for _, m := range cp.Partitions {
			resume[m.Partition] = m.Resume
		}
		var again []*kgo.Record
		for _, r := range recs {
			if r.Offset >= resume[r.Partition] {
				again = append(again, r)
			}
		}
		second := newTestCore(t, topics, spec)
		second.Restore(cp)
		feed(second, got, again)
		got.add(t, second.Fire())
		if len(got) != len(want) {
			t.Errorf("checkpoint after %d records (resume at %v): %d estimates, want %d", k, resume, len(got), len(want))
		}
		for key, b := range want {
			if !bytes.Equal(got[key], b) {
				t.Errorf("checkpoint after %d records (resume at %v): window %s differs from the uninterrupted run", k, resume, key)
			}
		}
	}
}

// TestCheckpointResumesAtOldestOpenPaneOffset: with a partition's
// records going back and forth between panes, the checkpoint's resume
// offset is the lowest offset of a record in any open pane, not the
// offset the pane was last entered at.
func TestCheckpointResumesAtOldestOpenPaneOffset(t *testing.T) {
	topics := streams.TopicsFor("oldest")
	core := newTestCore(t, topics, window.Spec{Size: 2 * time.Second, Slide: time.Second, AllowedLateness: 5 * time.Second})
	// Offsets 0..3 at 0.5s, 1.5s, 0.6s, 1.6s: panes [0,1) and [1,2),
	// each entered twice.
	for off, ms := range []int{500, 1500, 600, 1600} {
		core.Handle(routingRec(topics, 0, int64(off), t0.Add(time.Duration(ms)*time.Millisecond), off))
	}
	cp := core.Checkpoint()
	if len(cp.Partitions) != 1 || cp.Partitions[0].Resume != 0 || cp.Partitions[0].Consumed != 4 {
		t.Fatalf("checkpoint %+v, want partition 0 resumed at 0, consumed 4", cp.Partitions)
	}
}

// TestRedeliveryAfterCaughtUpCountsOnce: a partition handled up to its log
// end (the high watermark equals the next offset, the usual case) and then
// handed back at an earlier committed offset gets its records again as
// Replayed; the first record after the ones handled counts once. A fetch
// reporting no high watermark (0) is no replaced log either.
func TestRedeliveryAfterCaughtUpCountsOnce(t *testing.T) {
	topics := streams.TopicsFor("caughtup")
	core := newTestCore(t, topics, window.Spec{Size: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: 5 * time.Second})
	rec := func(off int64) *kgo.Record {
		return routingRec(topics, 0, off, t0.Add(time.Duration(off)*100*time.Millisecond), int(off))
	}
	for off := range int64(10) {
		if out, _ := core.Handle(rec(off)); out != Accepted {
			t.Fatalf("record %d: %v", off, out)
		}
	}
	for _, end := range []int64{10, 0} {
		core.SetEnd(topics.RoutingEvents, 0, end)
		for off := int64(5); off < 10; off++ {
			if out, _ := core.Handle(rec(off)); out != Replayed {
				t.Errorf("record %d delivered again after a high watermark of %d: %v, want Replayed", off, end, out)
			}
		}
	}
	if out, _ := core.Handle(rec(10)); out != Accepted {
		t.Errorf("record 10, the first after the ones handled: %v, want Accepted", out)
	}
	if out, _ := core.Handle(rec(10)); out != Replayed {
		t.Errorf("record 10 delivered again: %v, want Replayed", out)
	}
}

// TestFutureLimitIsClockPlusSkew: with a clock, a record dated exactly the
// allowed skew ahead is accepted and one a millisecond later is
// dead-lettered (future_event_time); a skew of zero still bounds event
// times by the clock; a negative skew turns the limit off.
func TestFutureLimitIsClockPlusSkew(t *testing.T) {
	topics := streams.TopicsFor("limit")
	now := t0.Add(20 * time.Second)
	for _, tc := range []struct {
		skew   time.Duration
		at     time.Time
		accept bool
	}{
		{time.Minute, now.Add(time.Minute), true},
		{time.Minute, now.Add(time.Minute + time.Millisecond), false},
		{0, now, true},
		{0, now.Add(time.Millisecond), false},
		{-1, now.Add(time.Hour), true},
	} {
		t.Run(fmt.Sprintf("skew %v at now+%v", tc.skew, tc.at.Sub(now)), func(t *testing.T) {
			core := newTestCore(t, topics, window.Spec{Size: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second})
			core.SetClock(now, tc.skew)
			out, reason := core.Handle(routingRec(topics, 0, 0, tc.at, 0))
			if tc.accept && out != Accepted {
				t.Errorf("%v %q, want Accepted", out, reason)
			}
			if !tc.accept && (out != DeadLettered || !strings.HasPrefix(reason, "future_event_time")) {
				t.Errorf("%v %q, want dead-lettered as future_event_time", out, reason)
			}
		})
	}
}

// TestFutureCheckpointClockDropped: a checkpoint whose watermark or next
// window start lies beyond the clock plus the skew loses its window clock
// on restore (the windows restart from the records), a skew of zero
// included; one within keeps it, and with a negative skew (no clock)
// every checkpoint keeps it.
func TestFutureCheckpointClockDropped(t *testing.T) {
	now := time.Now()
	ahead, behind := now.Add(time.Hour).UnixMilli(), now.Add(-time.Minute).UnixMilli()
	for _, tc := range []struct {
		skew            time.Duration
		watermark, next int64
		keep            bool
	}{
		{DefaultMaxClockSkew, behind, behind, true},
		{DefaultMaxClockSkew, ahead, behind, false},
		{DefaultMaxClockSkew, behind, ahead, false},
		{0, ahead, behind, false},
		{-1, ahead, ahead, true},
	} {
		p := &Processor{cfg: Config{MaxClockSkew: tc.skew}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		cp := Checkpoint{Version: 1, Watermark: tc.watermark, Next: tc.next, Partitions: []PartitionMark{{Topic: "t", Resume: 3, Consumed: 5}}}
		got := p.sanitize(cp)
		if kept := got.Watermark == tc.watermark && got.Next == tc.next; kept != tc.keep {
			t.Errorf("skew %v, watermark %+d ms, next %+d ms from now: clock kept %v, want %v", tc.skew,
				tc.watermark-now.UnixMilli(), tc.next-now.UnixMilli(), kept, tc.keep)
		}
		if !tc.keep && (got.Watermark != 0 || got.Next != 0) {
			t.Errorf("dropped clock is (%d, %d), want (0, 0)", got.Watermark, got.Next)
		}
		if len(got.Partitions) != 1 || got.Partitions[0] != cp.Partitions[0] {
			t.Errorf("offsets changed: %+v", got.Partitions)
		}
	}
}

// TestRoutingEventWindowedAtCompletionWithinSkew: a routing event is
// windowed at its completion time when that is at or after its event time
// and at most maxCompletionAhead after the record's timestamp (a gateway's
// clock skewed further is not trusted); otherwise, or with no completion
// time, at its event time. A record without a timestamp trusts the
// completion time.
func TestRoutingEventWindowedAtCompletionWithinSkew(t *testing.T) {
	ev, rt := t0.UnixMilli(), t0.Add(3*time.Second)
	ahead := rt.Add(maxCompletionAhead).UnixMilli()
	for _, tc := range []struct {
		name       string
		completion int64
		record     time.Time
		want       int64
	}{
		{"completion after the event", ev + 2500, rt, ev + 2500},
		{"no completion time", 0, rt, ev},
		{"completion before the event", ev - 1, rt, ev},
		{"completion at the skew bound", ahead, rt, ahead},
		{"completion past the skew bound", ahead + 1, rt, ev},
		{"no record timestamp", ahead + 60_000, time.Time{}, ahead + 60_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := routing("us", "e1", t0, 0)
			r.CompletionTimeUnixMs = tc.completion
			if got := routingTime(r, tc.record); got != tc.want {
				t.Errorf("windowed at %+d ms from the event time, want %+d", got-ev, tc.want-ev)
			}
		})
	}
}
