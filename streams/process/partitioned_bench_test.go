package process

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// Sizes of BenchmarkCombinerTick: signals partitions of tickEngines
// engines each (distinct), with tickPanes open panes.
const (
	tickParts   = 8
	tickEngines = 2_000
	tickPanes   = 4
)

// benchPane is a pane of tickEngines engines of partition part, two
// signals each, whose values depend on v.
func benchPane(part int, start, v int64) *estimate.Pane {
	p := estimate.NewPane()
	for e := range tickEngines {
		id := fmt.Sprintf("r%03d-h100-%d%04d", e%100, part, e)
		for s := range int64(2) {
			u := float64((v + int64(e) + 7*s) % 50)
			p.AddSignal(signal(id, []string{"h100", "a100", "l4"}[e%3], t0.Add(time.Duration(start+s*2000)*time.Millisecond), u, 5+u/5))
		}
	}
	return p
}

// combinerTick is what RunCombiner does with one poll of the partials
// topic, without Kafka: read the records, update the combiner, fire,
// and prepare its checkpoint (the kept panes' chunks, compared with the
// last written).
type combinerTick struct {
	r    *partialReader
	comb *combiner
	ckpt *combinerCheckpoint
}

func newCombinerTick(tb testing.TB) *combinerTick {
	comb, err := newCombiner(config("bench").Spec(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	// A partition that never reports holds the watermark: nothing fires
	// and panes the partials drop stay kept (a partition lagging).
	comb.Expect("bench.routing.events", 0)
	return &combinerTick{r: newPartialReader(), comb: comb, ckpt: &combinerCheckpoint{topic: "ckpt", key: "g/combiner"}}
}

func (c *combinerTick) run(tb testing.TB, recs []keyValue) {
	for _, res := range c.r.addAll(recs, runtime.GOMAXPROCS(0)) {
		if res.err != nil {
			tb.Fatal(res.err)
		}
		if res.ok {
			c.comb.Update(res.p)
		}
	}
	if f := c.comb.Fire(); len(f) > 0 {
		tb.Fatalf("%d windows fired", len(f))
	}
	st := c.comb.State()
	chunks, _ := c.ckpt.keptChunks(st)
	c.ckpt.wrote(st, chunks)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopTicks runs tick in b.Loop and reports the CPU time (all threads:
// the garbage collector's too) per tick.
func loopTicks(b *testing.B, tick func(i int)) {
	b.ReportAllocs()
	start, i := cpuTime(b), 0
	for b.Loop() {
		i++
		tick(i)
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(time.Millisecond)/float64(i), "cpu-ms/tick")
}

// recordMB is the bytes of recs' values, in MB.
func recordMB(recs []keyValue) float64 {
	n := 0
	for _, r := range recs {
		n += len(r.value)
	}
	return float64(n) / 1e6
}

// benchPublish returns the records of partition part's partial with panes
// (chunks, then header), generation gen, as an instance writes them.
func benchPublish(part int, panes map[int64]*estimate.Pane, gen uint64) []keyValue {
	p := partial{Topic: "bench.engine.signals", Partition: int32(part), MaxT: 100_000, Seen: true, Next: 1, Panes: panes}
	hdr, chunks := encodePartial(p, gen)
	base := partialKey(tp{p.Topic, p.Partition})
	var out []keyValue
	for i, c := range chunks {
		out = append(out, keyValue{chunkKey(base, gen, i), c})
	}
	return append(out, keyValue{base, hdr})
}

// BenchmarkCombinerTick measures the combiner's CPU per poll of the
// partials topic with tickParts signals partitions of tickEngines
// engines and tickPanes panes each, a lagging partition holding the
// watermark:
//
//   - same: every partition's partial is published again, unchanged,
//     under a new generation;
//   - newest: every partition's partial is published again with its
//     newest pane changed (records arriving in event-time order);
//   - kept: no partial is published; each partition has one pane kept
//     (dropped by its shard, not yet fired), which the checkpoint holds.
func BenchmarkCombinerTick(b *testing.B) {
	panes := make([]map[int64]*estimate.Pane, tickParts)
	newest := make([][2]*estimate.Pane, tickParts)
	last := int64(tickPanes-1) * 5000
	for part := range tickParts {
		panes[part] = map[int64]*estimate.Pane{}
		for i := range int64(tickPanes) {
			panes[part][i*5000] = benchPane(part, i*5000, i)
		}
		newest[part] = [2]*estimate.Pane{benchPane(part, last, 100), benchPane(part, last, 101)}
	}
	with := func(part int, pane *estimate.Pane) map[int64]*estimate.Pane {
		m := map[int64]*estimate.Pane{}
		for st, p := range panes[part] {
			m[st] = p
		}
		if pane != nil {
			m[last] = pane
		}
		return m
	}
	// Encoded once: the instances' cost is not the combiner's.
	enc := func(gen uint64, pane func(part int) *estimate.Pane) []keyValue {
		var recs []keyValue
		for part := range tickParts {
			recs = append(recs, benchPublish(part, with(part, pane(part)), gen)...)
		}
		return recs
	}
	b.Run("same", func(b *testing.B) {
		c := newCombinerTick(b)
		ticks := [2][]keyValue{enc(1, func(int) *estimate.Pane { return nil }), enc(2, func(int) *estimate.Pane { return nil })}
		c.run(b, ticks[0])
		loopTicks(b, func(i int) { c.run(b, ticks[i%2]) })
		b.ReportMetric(recordMB(ticks[0]), "MB/tick")
	})
	b.Run("newest", func(b *testing.B) {
		c := newCombinerTick(b)
		ticks := [2][]keyValue{
			enc(1, func(part int) *estimate.Pane { return newest[part][0] }),
			enc(2, func(part int) *estimate.Pane { return newest[part][1] }),
		}
		c.run(b, ticks[0])
		loopTicks(b, func(i int) { c.run(b, ticks[i%2]) })
		b.ReportMetric(recordMB(ticks[0]), "MB/tick")
	})
	b.Run("kept", func(b *testing.B) {
		c := newCombinerTick(b)
		// The first partials have one more, older, pane; the next ones
		// leave it out, so that it is kept.
		var first []keyValue
		for part := range tickParts {
			m := with(part, nil)
			m[-5000] = benchPane(part, -5000, 9)
			first = append(first, benchPublish(part, m, 1)...)
		}
		c.run(b, first)
		c.run(b, enc(2, func(int) *estimate.Pane { return nil }))
		if st := c.comb.State(); len(st.Kept) != tickParts {
			b.Fatalf("%d partitions with kept panes, want %d", len(st.Kept), tickParts)
		}
		loopTicks(b, func(int) { c.run(b, nil) })
	})
}
