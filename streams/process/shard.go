package process

import (
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// Shard is the processing of one input partition for partitioned
// processing (docs/processor.md, "Several instances"): a Core fed only
// that partition's records, whose open panes are handed to a Combiner as
// a Partial instead of being fired as windows. Whoever owns the partition
// in the consumer group runs its shard; the shard's Checkpoint moves with
// the partition on a rebalance. It is not safe for concurrent use.
type Shard struct {
	key  tp
	core *Core
}

// NewShard returns the shard of one input partition.
func NewShard(topics streams.Topics, spec window.Spec, topic string, partition int32) (*Shard, error) {
	core, err := NewCore(topics, spec, nil)
	if err != nil {
		return nil, err
	}
	return &Shard{key: tp{topic, partition}, core: core}, nil
}

// Handle folds in one record of the shard's partition (see Core.Handle).
// A record of another partition is an error.
func (s *Shard) Handle(rec *kgo.Record) (Outcome, string, error) {
	if k := (tp{rec.Topic, rec.Partition}); k != s.key {
		return 0, "", fmt.Errorf("record of %s/%d handed to the shard of %s/%d", k.Topic, k.Partition, s.key.Topic, s.key.Partition)
	}
	out, reason := s.core.Handle(rec)
	return out, reason, nil
}

// Track, SetEnd and SetClock are Core's, for the shard's partition.
func (s *Shard) Track(start, end int64) { s.core.Track(s.key.Topic, s.key.Partition, start, end) }

// SetEnd records a newer log end offset of the shard's partition.
func (s *Shard) SetEnd(end int64) { s.core.SetEnd(s.key.Topic, s.key.Partition, end) }

// SetClock is Core.SetClock.
func (s *Shard) SetClock(now time.Time, maxSkew time.Duration) { s.core.SetClock(now, maxSkew) }

// Checkpoint is the shard's checkpoint: its partition's resume and
// consumed offsets and its local window clock.
func (s *Shard) Checkpoint() Checkpoint { return s.core.Checkpoint() }

// Restore loads a checkpoint before any record is handled; the records
// from its resume offset up to its consumed offset rebuild the open panes
// without being counted again (Outcome Replayed).
func (s *Shard) Restore(cp Checkpoint) { s.core.Restore(cp) }

// Partial is one input partition's contribution to the open windows:
// its open panes and how far it has been read.
type Partial struct {
	Topic     string
	Partition int32
	// MaxT is the largest valid event time read (Unix ms); Seen is false
	// before the first.
	MaxT int64
	Seen bool
	// Pending: the partition has unread records (it holds the watermark
	// at MaxT).
	Pending bool
	// Panes are the open panes by start (Unix ms), copies.
	Panes map[int64]*estimate.Pane
}

// Partial returns the shard's partial, then drops the panes whose every
// window is complete by the partition's own watermark: the group
// watermark is never behind it while the partition is caught up, and a
// partition with unread records holds the group watermark at or below
// its own, so once the combiner has fired with this partial those panes
// only matter to fired windows (records more than the allowed lateness
// behind their own partition's latest are the exception, as they are for
// a single processor; see docs/processor.md).
func (s *Shard) Partial() Partial {
	c := s.core
	out := Partial{Topic: s.key.Topic, Partition: s.key.Partition, Panes: map[int64]*estimate.Pane{}}
	if p := c.parts[s.key]; p != nil {
		out.MaxT, out.Seen, out.Pending = p.maxT, p.seen, p.pos < p.end
	}
	for _, st := range c.panes.Starts() {
		out.Panes[st] = c.panes.Get(st).est.Clone()
	}
	if w, ok := c.watermark(); ok {
		if c.wmCap > 0 {
			w = min(w, c.wmCap)
		}
		c.panes.AdvanceTo(w)
	}
	c.panes.Fire() // drops complete panes; the combiner fires the windows
	return out
}

// Combiner merges the partials of every input partition and fires the
// windows the group watermark completes, with the estimates one Core
// reading every partition computes. It is not safe for concurrent use.
type Combiner struct {
	clock *window.Panes[struct{}]
	fits  *estimate.FitCache
	slide int64
	parts map[tp]Partial
	// expected partitions hold the watermark until they report.
	expected map[tp]bool
	wmCap    int64
}

// NewCombiner returns a combiner for windows of spec. fit nil means
// estimate.ConvexFit.
func NewCombiner(spec window.Spec, fit estimate.Fitter) (*Combiner, error) {
	spec = spec.WithDefaults()
	clock, err := window.New(spec, func() *struct{} { return &struct{}{} })
	if err != nil {
		return nil, err
	}
	return &Combiner{clock: clock, fits: estimate.NewFitCache(fit), slide: spec.Slide.Milliseconds(),
		parts: map[tp]Partial{}, expected: map[tp]bool{}}, nil
}

// Expect makes the combiner wait for a partial of the partition before
// it fires anything: a window is complete only when every partition of
// the inputs has passed it.
func (c *Combiner) Expect(topic string, partition int32) { c.expected[tp{topic, partition}] = true }

// SetClock caps the watermark at now (zero: no cap), as Core.SetClock.
func (c *Combiner) SetClock(now time.Time) {
	c.wmCap = 0
	if !now.IsZero() {
		c.wmCap = now.UnixMilli()
	}
}

// Update replaces a partition's partial with a newer one. Partials are
// states, not increments: a partial handed over twice (a rebalance) is
// counted once.
func (c *Combiner) Update(p Partial) {
	k := tp{p.Topic, p.Partition}
	delete(c.expected, k)
	c.parts[k] = p
	for st := range p.Panes {
		c.clock.Pane(st) // opens the pane's windows, unless they have fired
	}
}

// watermark is Core.watermark over the partitions' partials.
func (c *Combiner) watermark() (int64, bool) {
	if len(c.expected) > 0 {
		return 0, false
	}
	var minPending, maxAll int64
	pending := false
	for _, p := range c.parts {
		if p.Seen {
			maxAll = max(maxAll, p.MaxT)
		}
		if p.Pending {
			if !p.Seen {
				return 0, false
			}
			if !pending || p.MaxT < minPending {
				minPending = p.MaxT
			}
			pending = true
		}
	}
	if pending {
		return minPending, true
	}
	return maxAll, maxAll > 0
}

// Fire returns the estimates of every window the group watermark has
// completed, in order, as Core.Fire.
func (c *Combiner) Fire() []Fired {
	if w, ok := c.watermark(); ok {
		if c.wmCap > 0 {
			w = min(w, c.wmCap)
		}
		c.clock.AdvanceTo(w)
	}
	keys := make([]tp, 0, len(c.parts))
	for k := range c.parts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Topic != keys[j].Topic {
			return keys[i].Topic < keys[j].Topic
		}
		return keys[i].Partition < keys[j].Partition
	})
	var out []Fired
	for _, w := range c.clock.Fire() {
		ew := estimate.Window{Start: w.Start, End: w.End, Slide: c.slide}
		for _, p := range w.Panes {
			merged := estimate.NewPane()
			for _, k := range keys {
				merged.Absorb(c.parts[k].Panes[p.Start])
			}
			ew.PaneStarts = append(ew.PaneStarts, p.Start)
			ew.Panes = append(ew.Panes, merged)
		}
		out = append(out, Fired{Start: w.Start, End: w.End, Estimates: estimate.Merge(ew).Estimates(c.fits.Fit, 1)})
		c.fits.Rotate()
	}
	// Panes before the next window are no longer needed.
	next := c.clock.Next()
	for _, k := range keys {
		for st := range c.parts[k].Panes {
			if st < next {
				delete(c.parts[k].Panes, st)
			}
		}
	}
	return out
}
