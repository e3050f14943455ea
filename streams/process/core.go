package process

import (
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/fleet"
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
	dec    estimate.Decoder
	slide  int64
	// futureLimit: event times after it (Unix ms) are dead-lettered;
	// wmCap: the watermark never passes it; 0 means no limit (recovery.go).
	futureLimit, wmCap int64
	// reg, when set, is the engine registry signals are checked against
	// (SetRegistry).
	reg *fleet.Registry

	// parts tracks, per input partition, how far it is read, the largest
	// event time seen in it (see watermark), and where the restored
	// checkpoint's replay ends.
	parts map[tp]*partState
	// last caches the partition of the previous record (records come in
	// runs per partition).
	lastKey tp
	last    *partState
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
		parts: map[tp]*partState{},
	}, nil
}

type partState struct {
	pos, end int64 // next offset to read, log end offset
	maxT     int64 // largest valid event time read
	seen     bool  // maxT is set
	// consumed is the next offset to handle, valid when handled is true
	// (a record of the partition has been handled).
	consumed int64
	handled  bool
	// replayUntil: records below it were handled before the restored
	// checkpoint.
	replayUntil int64
	// lastPane is the pane the partition's previous record went to, at
	// offset lastOff: the pane's lowest offset of the partition is at
	// most lastOff.
	lastPane *pane
	lastOff  int64
}

func (c *Core) part(k tp) *partState {
	p := c.parts[k]
	if p == nil {
		p = &partState{}
		c.parts[k] = p
	}
	return p
}

// SetRegistry makes the core dead-letter every signal for an engine reg
// does not hold, or for a registered engine at another endpoint (reason
// codes "unregistered_engine", "endpoint_mismatch"); nil: no check.
func (c *Core) SetRegistry(reg *fleet.Registry) { c.reg = reg }

// Track tells the core where reading of a partition starts and where its
// log currently ends, so the watermark waits for the partition while it has
// unread records.
func (c *Core) Track(topic string, partition int32, start, end int64) {
	p := c.part(tp{topic, partition})
	p.pos = max(p.pos, start)
	p.end = max(p.end, end)
}

// SetEnd records a newer log end offset (high watermark) of a partition.
// An end below the offset already handled means the log was replaced
// (brokers restarted without their data): its records are new, not
// delivered again (see Handle).
func (c *Core) SetEnd(topic string, partition int32, end int64) {
	p := c.part(tp{topic, partition})
	if p.handled && end > 0 && end < p.consumed {
		p.handled = false
	}
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
	ps := c.last
	if ps == nil || key != c.lastKey {
		ps = c.part(key)
		c.lastKey, c.last = key, ps
	}
	isReplay := rec.Offset < ps.replayUntil
	if ps.handled && rec.Offset < ps.consumed && !isReplay {
		// Handled already: the group delivers it again when it hands
		// the partition back at the committed offset, which trails the
		// consumed one (a rebalance, or brokers restarted under us).
		return Replayed, ""
	}
	if next := rec.Offset + 1; !ps.handled || next > ps.consumed {
		ps.consumed, ps.handled = next, true
	}
	ps.pos = max(ps.pos, rec.Offset+1)
	ps.end = max(ps.end, ps.pos)
	var (
		t   int64
		sig *schemas.EngineSignal
		ev  *schemas.RoutingEvent
		err error
	)
	switch rec.Topic {
	case c.topics.Signals:
		if sig, err = c.dec.Signal(rec.Value, rec.Timestamp); err != nil {
			return c.bad(isReplay, err)
		}
		if err = c.reg.Check(sig.GetEngineId(), sig.GetEndpointUrl()); err != nil {
			return c.bad(isReplay, &estimate.Invalid{Code: fleet.Reason(err), Detail: err.Error()})
		}
		t = sig.GetEventTimeUnixMs()
	case c.topics.RoutingEvents, c.topics.RoutingArrivals:
		if ev, err = c.dec.RoutingEvent(rec.Value, rec.Timestamp); err != nil {
			return c.bad(isReplay, err)
		}
		t = routingTime(ev, rec.Timestamp)
	default:
		return c.bad(isReplay, fmt.Errorf("unexpected topic %q", rec.Topic))
	}
	if err := c.checkFuture(t); err != nil { // never moves the watermark
		return c.bad(isReplay, err)
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
	if sig != nil {
		p.est.AddSignal(sig)
	} else {
		p.est.AddRoutingEvent(ev)
	}
	if p != ps.lastPane || rec.Offset < ps.lastOff {
		if off, seen := p.minOff[key]; !seen || rec.Offset < off {
			p.minOff[key] = rec.Offset
		}
		ps.lastPane = p
	}
	ps.lastOff = rec.Offset
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
	var out []Fired
	for _, w := range c.fire() {
		out = append(out, c.estimates(w, false))
	}
	return out
}

// firedWindow is a complete window whose estimates are still to be
// computed.
type firedWindow struct {
	start, end int64
	merged     *estimate.Merged
}

// fire advances the watermark and merges every window it completes; the
// merged windows share nothing with the open panes.
func (c *Core) fire() []firedWindow {
	if w, ok := c.watermark(); ok {
		if c.wmCap > 0 {
			w = min(w, c.wmCap) // recovery.go
		}
		c.panes.AdvanceTo(w)
	}
	var out []firedWindow
	for _, w := range c.panes.Fire() {
		ew := estimate.Window{Start: w.Start, End: w.End, Slide: c.slide}
		for _, p := range w.Panes {
			ew.PaneStarts = append(ew.PaneStarts, p.Start)
			ew.Panes = append(ew.Panes, p.State.est)
		}
		out = append(out, firedWindow{start: w.Start, end: w.End, merged: estimate.Merge(ew)})
	}
	return out
}

// estimates computes a fired window's estimates. Windows must be passed
// in the order fire returned them (the fit cache ages per window); it may
// run concurrently with Handle and fire. With shared, the estimates'
// latency profiles are the fit cache's own (FitCache.Shared): the caller
// only reads them.
func (c *Core) estimates(w firedWindow, shared bool) Fired {
	fit := c.fits.Fit
	if shared {
		fit = c.fits.Shared
	}
	f := Fired{Start: w.start, End: w.end, Estimates: w.merged.Estimates(fit, runtime.GOMAXPROCS(0))}
	c.fits.Rotate()
	return f
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
	for k, p := range c.parts {
		if p.handled {
			resume[k] = p.consumed
		}
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
		var consumed int64
		if p := c.parts[k]; p != nil {
			if p.handled {
				consumed = p.consumed
			}
			consumed = max(consumed, p.replayUntil)
		}
		cp.Partitions = append(cp.Partitions, PartitionMark{Topic: k.Topic, Partition: k.Partition, Resume: r, Consumed: consumed})
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
		c.part(tp{m.Topic, m.Partition}).replayUntil = m.Consumed
	}
}
