package process

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// shard is the processing of one input partition for partitioned
// processing (docs/processor.md, "Several instances"): a Core fed only
// that partition's records, whose open panes are handed to a combiner as
// a partial instead of being fired as windows. Whoever owns the partition
// in the consumer group runs its shard; the shard's Checkpoint moves with
// the partition on a rebalance. It is not safe for concurrent use.
type shard struct {
	key  tp
	core *Core
	// releasedTo is the log end at the latest Release: the partial
	// reports the partition read up to it.
	releasedTo int64
}

// newShard returns the shard of one input partition.
func newShard(topics streams.Topics, spec window.Spec, topic string, partition int32) (*shard, error) {
	core, err := NewCore(topics, spec, nil)
	if err != nil {
		return nil, err
	}
	return &shard{key: tp{topic, partition}, core: core}, nil
}

// Handle folds in one record of the shard's partition (see Core.Handle).
// A record of another partition is an error.
func (s *shard) Handle(rec *kgo.Record) (Outcome, string, error) {
	if k := (tp{rec.Topic, rec.Partition}); k != s.key {
		return 0, "", fmt.Errorf("record of %s/%d handed to the shard of %s/%d", k.Topic, k.Partition, s.key.Topic, s.key.Partition)
	}
	out, reason := s.core.Handle(rec)
	return out, reason, nil
}

// SetRegistry is Core.SetRegistry.
func (s *shard) SetRegistry(reg *fleet.Registry) { s.core.SetRegistry(reg) }

// Track, SetEnd and SetClock are Core's, for the shard's partition.
func (s *shard) Track(start, end int64) { s.core.Track(s.key.Topic, s.key.Partition, start, end) }

// SetEnd records a newer log end offset of the shard's partition.
func (s *shard) SetEnd(end int64) { s.core.SetEnd(s.key.Topic, s.key.Partition, end) }

// SetClock is Core.SetClock.
func (s *shard) SetClock(now time.Time, maxSkew time.Duration) { s.core.SetClock(now, maxSkew) }

// Pending reports whether the partition has unread records (it holds the
// watermark).
func (s *shard) Pending() bool {
	p := s.core.parts[s.key]
	return p != nil && p.pos < p.end
}

// Release treats the partition as read up to its log end, as the single
// processor treats a partition that has unread records but has delivered
// none for a while (its log ends in transaction markers, or it has no
// leader): it stops holding the watermark, in the shard and, through the
// partial's next offset, in the combiner, until a newer log end shows
// more records. The owner calls it (instance, after stalledAfter).
func (s *shard) Release() {
	p := s.core.parts[s.key]
	if p == nil || p.pos >= p.end {
		return
	}
	s.releasedTo = max(s.releasedTo, p.end)
	s.core.markCaughtUp(s.key)
}

// Checkpoint is the shard's checkpoint: its partition's resume and
// consumed offsets and its local window clock.
func (s *shard) Checkpoint() Checkpoint { return s.core.Checkpoint() }

// Restore loads a checkpoint before any record is handled; the records
// from its resume offset up to its consumed offset rebuild the open panes
// without being counted again (Outcome Replayed).
func (s *shard) Restore(cp Checkpoint) { s.core.Restore(cp) }

// Rebuilt reports whether the shard has re-read its partition up to the
// restored checkpoint's consumed offset: before that its panes lack
// records the previous owner had, and its partial must not replace the
// previous owner's.
func (s *shard) Rebuilt() bool {
	p := s.core.parts[s.key]
	return p == nil || p.replayUntil == 0 || p.pos >= p.replayUntil || (p.handled && p.consumed >= p.replayUntil)
}

// partial is one input partition's contribution to the open windows:
// its open panes and how far it has been read.
type partial struct {
	Topic     string
	Partition int32
	// MaxT is the largest valid event time read (Unix ms); Seen is false
	// before the first.
	MaxT int64
	Seen bool
	// Pending: the partition has unread records (it holds the watermark
	// at MaxT).
	Pending bool
	// Next is the next offset to read: a combiner that learns of a newer
	// log end than Next treats the partition as pending (SetEnd).
	Next int64
	// Panes are the open panes by start (Unix ms), copies.
	Panes map[int64]*estimate.Pane
}

// partial returns the shard's partial, then drops the panes whose every
// window is complete by the partition's own watermark: the group
// watermark is never behind it while the partition is caught up, and a
// partition with unread records holds the group watermark at or below
// its own, so once the combiner has fired with this partial those panes
// only matter to fired windows (records more than the allowed lateness
// behind their own partition's latest are the exception, as they are for
// a single processor; see docs/processor.md).
func (s *shard) partial() partial {
	c := s.core
	out := partial{Topic: s.key.Topic, Partition: s.key.Partition, Panes: map[int64]*estimate.Pane{}}
	if p := c.parts[s.key]; p != nil {
		out.MaxT, out.Seen, out.Pending, out.Next = p.maxT, p.seen, p.pos < p.end, max(p.pos, s.releasedTo)
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

// combiner merges the partials of every input partition and fires the
// windows the group watermark completes, with the estimates one Core
// reading every partition computes. It is not safe for concurrent use.
type combiner struct {
	clock *window.Panes[struct{}]
	fits  *estimate.FitCache
	slide int64
	parts map[tp]partial
	// expected partitions hold the watermark until they report.
	expected map[tp]bool
	// ends are the partitions' log end offsets, as last listed.
	ends  map[tp]int64
	wmCap int64
	// kept are the panes of windows not yet fired that a partition's
	// latest partial no longer carries (see Update and State); keptRev
	// counts their changes.
	kept    map[tp]map[int64]*estimate.Pane
	keptRev uint64
}

// newCombiner returns a combiner for windows of spec. fit nil means
// estimate.ConvexFit.
func newCombiner(spec window.Spec, fit estimate.Fitter) (*combiner, error) {
	spec = spec.WithDefaults()
	clock, err := window.New(spec, func() *struct{} { return &struct{}{} })
	if err != nil {
		return nil, err
	}
	return &combiner{clock: clock, fits: estimate.NewFitCache(fit), slide: spec.Slide.Milliseconds(),
		parts: map[tp]partial{}, expected: map[tp]bool{}, ends: map[tp]int64{}, kept: map[tp]map[int64]*estimate.Pane{}, keptRev: 1}, nil
}

// Expect makes the combiner wait for a partial of the partition before
// it fires anything: a window is complete only when every partition of
// the inputs has passed it.
func (c *combiner) Expect(topic string, partition int32) { c.expected[tp{topic, partition}] = true }

// SetEnd records a partition's log end offset: a partition whose partial
// has not read up to it holds the watermark, however the partial was
// when published (the single processor learns ends from its own fetches;
// a combiner's partials may be older than the records in the log).
func (c *combiner) SetEnd(topic string, partition int32, end int64) {
	k := tp{topic, partition}
	c.ends[k] = max(c.ends[k], end)
}

// SetClock caps the watermark at now (zero: no cap), as Core.SetClock.
func (c *combiner) SetClock(now time.Time) {
	c.wmCap = 0
	if !now.IsZero() {
		c.wmCap = now.UnixMilli()
	}
}

// Restore sets the window clock saved from Clock (a restarted combiner
// does not fire the windows it had fired again).
func (c *combiner) Restore(watermark, next int64) {
	if watermark > 0 || next != 0 {
		c.clock.Restore(watermark, next)
	}
}

// Clock returns the watermark and the start of the next window to fire.
func (c *combiner) Clock() (watermark, next int64) { return c.clock.Watermark(), c.clock.Next() }

// Update replaces a partition's partial with a newer one. Partials are
// states, not increments: a partial handed over twice (a rebalance) is
// counted once. A pane the newer partial no longer has is kept as the
// older one had it: the shard dropped it as complete by its own
// partition's watermark, so that content is final, but the group
// watermark may not have passed it yet.
func (c *combiner) Update(p partial) {
	k := tp{p.Topic, p.Partition}
	delete(c.expected, k)
	panes := make(map[int64]*estimate.Pane, len(p.Panes))
	kept := c.kept[k]
	if kept == nil {
		kept = map[int64]*estimate.Pane{}
		c.kept[k] = kept
	}
	for st, pane := range c.parts[k].Panes {
		panes[st] = pane
		if _, ok := p.Panes[st]; !ok && kept[st] != pane {
			kept[st] = pane
			c.keptRev++
		}
	}
	for st := range p.Panes {
		if _, ok := kept[st]; ok {
			delete(kept, st)
			c.keptRev++
		}
	}
	starts := make([]int64, 0, len(p.Panes))
	for st, pane := range p.Panes {
		panes[st] = pane
		starts = append(starts, st)
	}
	// In time order, as a single processor meets them: the first pane
	// the clock sees sets the first window, and an earlier pane after it
	// would count as late.
	slices.Sort(starts)
	for _, st := range starts {
		c.clock.Pane(st) // opens the pane's windows, unless they have fired
	}
	p.Panes = panes
	c.parts[k] = p
}

// watermark is Core.watermark over the partitions' partials.
func (c *combiner) watermark() (int64, bool) {
	if len(c.expected) > 0 {
		return 0, false
	}
	var minPending, maxAll int64
	pending := false
	for k, p := range c.parts {
		if p.Seen {
			maxAll = max(maxAll, p.MaxT)
		}
		if end, ok := c.ends[k]; p.Pending || (ok && p.Next < end) {
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
func (c *combiner) Fire() []Fired {
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
				if _, ok := c.kept[k][st]; ok {
					delete(c.kept[k], st)
					c.keptRev++
				}
			}
		}
	}
	return out
}

// combinerState is what a restarted combiner restores besides the
// partials: its window clock, and the panes of windows not yet fired
// that the partitions' latest partials no longer carry. A shard leaves a
// pane out of its partials once its own partition has completed it;
// the partials that had it may be gone from the compacted partials
// topic, so the combiner saves them (docs/processor.md, "Combiner
// restarts").
type combinerState struct {
	Watermark, Next int64
	// Kept holds, per partition, those panes (Topic, Partition and Panes
	// set), in partition order.
	Kept []partial
	// keptRev is the combiner's count of changes to Kept when State
	// returned it (0: unknown), so that the checkpoint encodes Kept
	// only when it changed.
	keptRev uint64
}

// State returns the combiner's state; its panes are the combiner's own,
// to be encoded before the next Update or Fire.
func (c *combiner) State() combinerState {
	st := combinerState{Watermark: c.clock.Watermark(), Next: c.clock.Next(), keptRev: c.keptRev}
	for k, panes := range c.kept {
		if len(panes) > 0 {
			st.Kept = append(st.Kept, partial{Topic: k.Topic, Partition: k.Partition, Panes: panes})
		}
	}
	sort.Slice(st.Kept, func(i, j int) bool {
		a, b := st.Kept[i], st.Kept[j]
		return a.Topic < b.Topic || (a.Topic == b.Topic && a.Partition < b.Partition)
	})
	return st
}

// RestoreState loads a state saved from State before any partial is
// read: the window clock (windows before Next are not fired again) and
// the kept panes, which the partials read next complete.
func (c *combiner) RestoreState(st combinerState) {
	c.Restore(st.Watermark, st.Next)
	c.keptRev++
	var starts []int64
	for _, p := range st.Kept {
		k := tp{p.Topic, p.Partition}
		panes := make(map[int64]*estimate.Pane, len(p.Panes))
		kept := make(map[int64]*estimate.Pane, len(p.Panes))
		for s, pane := range p.Panes {
			if s < st.Next {
				continue
			}
			panes[s], kept[s] = pane, pane
			starts = append(starts, s)
		}
		c.parts[k] = partial{Topic: p.Topic, Partition: p.Partition, Panes: panes}
		c.kept[k] = kept
	}
	slices.Sort(starts)
	for _, s := range starts {
		c.clock.Pane(s)
	}
}
