package processor

import (
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// tp names one partition.
type tp struct {
	Topic     string
	Partition int32
}

// pane is the window state of one slide plus, per input partition, the
// lowest offset that contributed to it: consumption must resume there for
// the pane to be rebuilt after a restart.
type pane struct {
	est    *estimate.Pane
	minOff map[tp]int64
}

func newPane() *pane { return &pane{est: estimate.NewPane(), minOff: map[tp]int64{}} }

// Outcome of one input record.
type Outcome int

const (
	Accepted Outcome = iota
	Late
	DeadLettered
	// Replayed records were processed before the last checkpoint; they
	// rebuild open panes but are not counted or dead-lettered again.
	Replayed
)

// Core is the processor without Kafka: records in, estimates out. It is
// not safe for concurrent use.
type Core struct {
	topics streams.Topics
	panes  *window.Panes[pane]
	fits   *estimate.FitCache
	slide  int64

	// consumed is the next offset to read per partition.
	consumed map[tp]int64
	// parts tracks, per input partition, how far it is read and the
	// largest event time seen in it (see watermark).
	parts map[tp]*partState
	// replayUntil: records below these offsets were handled before the
	// restored checkpoint.
	replayUntil map[tp]int64
}

// NewCore returns a processor core for the topics under prefix. fit nil
// means estimate.ConvexFit.
func NewCore(topics streams.Topics, spec window.Spec, fit estimate.Fitter) (*Core, error) {
	spec = spec.WithDefaults()
	ps, err := window.New(spec, newPane)
	if err != nil {
		return nil, err
	}
	return &Core{
		topics: topics, panes: ps, fits: estimate.NewFitCache(fit), slide: spec.Slide.Milliseconds(),
		consumed: map[tp]int64{}, replayUntil: map[tp]int64{}, parts: map[tp]*partState{},
	}, nil
}

type partState struct {
	pos, end int64 // next offset to read, log end offset
	maxT     int64 // largest valid event time read
	seen     bool  // maxT is set
}

func (c *Core) part(k tp) *partState {
	p := c.parts[k]
	if p == nil {
		p = &partState{}
		c.parts[k] = p
	}
	return p
}

// Track tells the core where reading of a partition starts and where its
// log currently ends, so the watermark waits for the partition while it has
// unread records.
func (c *Core) Track(topic string, partition int32, start, end int64) {
	p := c.part(tp{topic, partition})
	p.pos = max(p.pos, start)
	p.end = max(p.end, end)
}

// SetEnd records a newer log end offset (high watermark) of a partition.
func (c *Core) SetEnd(topic string, partition int32, end int64) {
	p := c.part(tp{topic, partition})
	p.end = max(p.end, end)
}

// pending lists the partitions with unread records.
func (c *Core) pending() []tp {
	var out []tp
	for k, p := range c.parts {
		if p.pos < p.end {
			out = append(out, k)
		}
	}
	return out
}

// markCaughtUp treats a partition as fully read, so it stops holding the
// watermark back (for a partition that has stopped delivering records, e.g.
// because its log ends in transaction markers).
func (c *Core) markCaughtUp(k tp) {
	if p := c.parts[k]; p != nil {
		p.end = p.pos
	}
}

// watermark is the event time up to which all input has been seen: the
// smallest per-partition maximum event time over the partitions that
// still have unread records, or, when every partition is caught up, the
// largest event time seen. A partition with unread records and no valid
// record yet holds the watermark where it is. This makes window contents
// independent of how reads interleave across partitions as long as each
// partition is in event-time order within the allowed lateness.
func (c *Core) watermark() (int64, bool) {
	var minPending, maxAll int64
	pending := false
	for _, p := range c.parts {
		if p.seen {
			maxAll = max(maxAll, p.maxT)
		}
		if p.pos < p.end {
			if !p.seen {
				return 0, false
			}
			if !pending || p.maxT < minPending {
				minPending = p.maxT
			}
			pending = true
		}
	}
	if pending {
		return minPending, true
	}
	return maxAll, maxAll > 0
}

// Handle folds one input record in. It returns the Outcome and, for a
// dead-lettered record, the reason.
func (c *Core) Handle(rec *kgo.Record) (Outcome, string) {
	key := tp{rec.Topic, rec.Partition}
	isReplay := rec.Offset < c.replayUntil[key]
	if next := rec.Offset + 1; next > c.consumed[key] {
		c.consumed[key] = next
	}
	ps := c.part(key)
	ps.pos = max(ps.pos, rec.Offset+1)
	ps.end = max(ps.end, ps.pos)
	var (
		t   int64
		add func(*estimate.Pane)
	)
	switch rec.Topic {
	case c.topics.Signals:
		s, err := estimate.DecodeSignal(rec.Value, rec.Timestamp)
		if err != nil {
			return c.bad(isReplay, err)
		}
		t, add = s.GetEventTimeUnixMs(), func(p *estimate.Pane) { p.AddSignal(s) }
	case c.topics.RoutingEvents:
		ev, err := estimate.DecodeRoutingEvent(rec.Value, rec.Timestamp)
		if err != nil {
			return c.bad(isReplay, err)
		}
		t, add = ev.GetEventTimeUnixMs(), func(p *estimate.Pane) { p.AddRoutingEvent(ev) }
	default:
		return c.bad(isReplay, fmt.Errorf("unexpected topic %q", rec.Topic))
	}
	if !ps.seen || t > ps.maxT {
		ps.maxT, ps.seen = t, true
	}
	p, _, ok := c.panes.Pane(t)
	if !ok {
		if isReplay {
			return Replayed, ""
		}
		return Late, ""
	}
	add(p.est)
	if off, seen := p.minOff[key]; !seen || rec.Offset < off {
		p.minOff[key] = rec.Offset
	}
	if isReplay {
		return Replayed, ""
	}
	return Accepted, ""
}

func (c *Core) bad(isReplay bool, err error) (Outcome, string) {
	if isReplay {
		return Replayed, ""
	}
	return DeadLettered, estimate.Reason(err)
}

// Fired is one complete window's estimates.
type Fired struct {
	Start, End int64
	Estimates  []*schemas.Estimate
}

// Fire returns the estimates of every window the watermark has completed.
func (c *Core) Fire() []Fired {
	if w, ok := c.watermark(); ok {
		c.panes.AdvanceTo(w)
	}
	var out []Fired
	for _, w := range c.panes.Fire() {
		ew := estimate.Window{Start: w.Start, End: w.End, Slide: c.slide}
		for _, p := range w.Panes {
			ew.PaneStarts = append(ew.PaneStarts, p.Start)
			ew.Panes = append(ew.Panes, p.State.est)
		}
		out = append(out, Fired{Start: w.Start, End: w.End, Estimates: estimate.ComputeParallel(ew, c.fits.Fit, runtime.GOMAXPROCS(0))})
		c.fits.Rotate()
	}
	return out
}

// Watermark is the event-time watermark.
func (c *Core) Watermark() time.Time { return time.UnixMilli(c.panes.Watermark()) }

// OpenPanes is the number of panes held.
func (c *Core) OpenPanes() int { return c.panes.Open() }

// Checkpoint is what survives a restart: the window clock and, per input
// partition, where to resume (the lowest offset any open pane needs) and
// how far records were already handled.
type Checkpoint struct {
	Version    int             `json:"version"`
	Watermark  int64           `json:"watermark_unix_ms"`
	Next       int64           `json:"next_window_start_unix_ms"`
	Partitions []PartitionMark `json:"partitions"`
}

// PartitionMark is one partition's resume and consumed offsets.
type PartitionMark struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Resume    int64  `json:"resume"`
	Consumed  int64  `json:"consumed"`
}

// Checkpoint returns the current checkpoint.
func (c *Core) Checkpoint() Checkpoint {
	resume := map[tp]int64{}
	for k, v := range c.consumed {
		resume[k] = v
	}
	for _, s := range c.panes.Starts() {
		p := c.panes.Get(s)
		for k, off := range p.minOff {
			if cur, ok := resume[k]; !ok || off < cur {
				resume[k] = off
			}
		}
	}
	cp := Checkpoint{Version: 1, Watermark: c.panes.Watermark(), Next: c.panes.Next()}
	for k, r := range resume {
		cp.Partitions = append(cp.Partitions, PartitionMark{Topic: k.Topic, Partition: k.Partition, Resume: r, Consumed: max(c.consumed[k], c.replayUntil[k])})
	}
	sort.Slice(cp.Partitions, func(i, j int) bool {
		a, b := cp.Partitions[i], cp.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return cp
}

// Restore loads a checkpoint before any record is handled.
func (c *Core) Restore(cp Checkpoint) {
	if cp.Watermark > 0 || cp.Next != 0 {
		c.panes.Restore(cp.Watermark, cp.Next)
	}
	for _, m := range cp.Partitions {
		c.replayUntil[tp{m.Topic, m.Partition}] = m.Consumed
	}
}
