package process

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// estimateSet is every estimate of fired windows by "window end key",
// encoded; two estimates of one key and window must be identical.
type estimateSet map[string][]byte

func (s estimateSet) add(t *testing.T, fired []Fired) {
	t.Helper()
	for _, f := range fired {
		for _, e := range f.Estimates {
			b, err := estimate.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf("%d %s", f.End, estimate.Key(e))
			if old, ok := s[k]; ok && string(old) != string(b) {
				t.Fatalf("estimate %s published twice with different bytes", k)
			}
			s[k] = b
		}
	}
}

func (s estimateSet) diff(t *testing.T, want estimateSet) {
	t.Helper()
	var missing, extra, differ []string
	for k, b := range want {
		got, ok := s[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case string(got) != string(b):
			differ = append(differ, k)
		}
	}
	for k := range s {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(differ)
	if len(missing)+len(extra)+len(differ) > 0 {
		t.Fatalf("%d estimates, want %d: %d missing %q, %d extra %q, %d differ %q",
			len(s), len(want), len(missing), first(missing), len(extra), first(extra), len(differ), first(differ))
	}
}

// partitionedRun feeds recs to one shard per partition, owned by
// instances that change at the given record indexes (a rebalance: the
// partitions of the instance that leaves, or that a new instance takes,
// are rebuilt by a new shard from the last checkpoint of the old one,
// re-reading the partition from its resume offset as a new owner does),
// and combines their partials every batch records.
func partitionedRun(t *testing.T, topics streams.Topics, recs []*kgo.Record, batch int, rebalanceAt map[int][]tp) (estimateSet, int) {
	t.Helper()
	spec := specForBench()
	comb, err := newCombiner(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	byPart := map[tp][]*kgo.Record{}
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		byPart[k] = append(byPart[k], r)
		comb.Expect(r.Topic, r.Partition)
	}
	shards := map[tp]*shard{}
	ckpts := map[tp]Checkpoint{}
	newShard := func(k tp) *shard {
		s, err := newShard(topics, spec, k.Topic, k.Partition)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for k := range byPart {
		shards[k] = newShard(k)
	}
	got := estimateSet{}
	replayed := 0
	report := func() {
		for k, s := range shards {
			comb.Update(overTheWire(t, s.partial()))
			// The checkpoint is written once the partial is acknowledged.
			ckpts[k] = s.Checkpoint()
		}
		got.add(t, comb.Fire())
	}
	next := map[tp]int64{} // next offset each partition's owner reads
	for i, r := range recs {
		for _, k := range rebalanceAt[i] {
			// The old owner's state since its last checkpoint is lost;
			// the new owner restores it and re-reads from resume.
			s := newShard(k)
			cp := ckpts[k]
			s.Restore(cp)
			resume := next[k]
			for _, m := range cp.Partitions {
				resume = m.Resume
			}
			if len(cp.Partitions) == 0 {
				resume = 0
			}
			for _, old := range byPart[k] {
				if old.Offset >= resume && old.Offset < next[k] {
					out, _, err := s.Handle(old)
					if err != nil {
						t.Fatal(err)
					}
					if out == Replayed {
						replayed++
					}
				}
			}
			shards[k] = s
		}
		k := tp{r.Topic, r.Partition}
		if _, _, err := shards[k].Handle(r); err != nil {
			t.Fatal(err)
		}
		next[k] = r.Offset + 1
		if i%batch == batch-1 {
			report()
		}
	}
	report()
	return got, replayed
}

// TestShardsMatchCore: the input's partitions processed by separate
// shards (one per partition, as several instances run them) and combined
// give the estimates one Core reading everything gives, estimate for
// estimate and byte for byte, also when partitions change owner
// mid-window (an instance added, one stopped) and the new owner rebuilds
// them from the partition's checkpoint.
func TestShardsMatchCore(t *testing.T) {
	topics := streams.TopicsFor("shards")
	inputs := map[string][]*kgo.Record{
		"golden":   goldenRecords(topics),
		"workload": workloadRecords(topics, 6),
	}
	for name, recs := range inputs {
		// Every 250 or 37 records, or once at the end (each partial then
		// holds every pane at once).
		for _, batch := range []int{250, 37, len(recs)} {
			t.Run(fmt.Sprintf("%s/batch%d", name, batch), func(t *testing.T) {
				core, err := NewCore(topics, specForBench(), nil)
				if err != nil {
					t.Fatal(err)
				}
				want := estimateSet{}
				for i, r := range recs {
					core.Handle(r)
					if i%batch == batch-1 {
						want.add(t, core.Fire())
					}
				}
				want.add(t, core.Fire())
				if len(want) < 100 {
					t.Fatalf("only %d estimates from one core", len(want))
				}
				got, _ := partitionedRun(t, topics, recs, batch, nil)
				got.diff(t, want)
				// Rebalances: a third of the way in an instance joins
				// and takes two partitions; at two thirds one leaves and
				// its three partitions move.
				n := len(recs)
				moves := map[int][]tp{
					n / 3:     {{topics.Signals, 1}, {topics.RoutingEvents, 2}},
					2 * n / 3: {{topics.Signals, 0}, {topics.RoutingEvents, 0}, {topics.RoutingEvents, 1}},
				}
				got, replayed := partitionedRun(t, topics, recs, batch, moves)
				got.diff(t, want)
				if replayed == 0 && batch < len(recs) { // with one report, no checkpoint precedes the moves
					t.Fatal("no record was re-read by a new owner")
				}
				t.Logf("%d estimates; %d records re-read by new owners", len(got), replayed)
			})
		}
	}
}

// workloadRecords is 3 minutes of signals from 12 engines every 2s and
// routing events of three clusters keyed by request id (as gateways key
// them, so every cluster's events span every partition), in event-time
// order, over parts partitions per topic.
func workloadRecords(topics streams.Topics, parts int32) []*kgo.Record {
	from := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	offs := map[tp]int64{}
	var recs []*kgo.Record
	add := func(topic string, part int32, v []byte, at time.Time) {
		k := tp{topic, part}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Offset: offs[k], Value: v, Timestamp: at})
		offs[k]++
	}
	i := 0
	for d := time.Duration(0); d < 3*time.Minute; d += 100 * time.Millisecond {
		at := from.Add(d)
		for e := range 12 {
			if d%(2*time.Second) != time.Duration(e)*100*time.Millisecond {
				continue
			}
			u := float64((int(d/time.Second) + 3*e) % 50)
			b := mustMarshal(signal(fmt.Sprintf("e%02d", e), []string{"h100", "a100", "l4"}[e%3], at, u, 5+u/5))
			add(topics.Signals, int32(e)%parts, b, at)
		}
		for c := range 3 {
			if (i+c)%4 == 0 {
				continue
			}
			cl := []string{"us", "eu", "ap"}[c]
			ev := routing(cl, fmt.Sprintf("e%02d", (i*7+c)%12), at, i)
			ev.TtftMs = 70 + float64(i%31)
			ev.OutputTokens = uint32(50 + i%200)
			if i%5 == 0 {
				ev.EngineTtftMs = 0
			}
			add(topics.RoutingEvents, int32(i)%parts, mustMarshal(ev), at)
			i++
		}
	}
	return recs
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func first(s []string) []string { return s[:min(len(s), 3)] }

// TestCombinerWaitsForEveryPartition: a window is complete only when
// every input partition has passed it: not before an expected partition
// has reported, and not while a partition with unread records is behind.
func TestCombinerWaitsForEveryPartition(t *testing.T) {
	topics := streams.TopicsFor("wait")
	recs := workloadRecords(topics, 2)
	comb, err := newCombiner(specForBench(), nil)
	if err != nil {
		t.Fatal(err)
	}
	comb.Expect(topics.Signals, 0)
	comb.Expect(topics.Signals, 1)
	comb.Expect(topics.RoutingEvents, 0)
	comb.Expect(topics.RoutingEvents, 1)
	shards := map[tp]*shard{}
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		if shards[k] == nil {
			if shards[k], err = newShard(topics, specForBench(), k.Topic, k.Partition); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := shards[k].Handle(r); err != nil {
			t.Fatal(err)
		}
	}
	lagging := tp{topics.RoutingEvents, 1}
	for k, s := range shards {
		if k != lagging {
			comb.Update(s.partial())
		}
	}
	if f := comb.Fire(); len(f) != 0 {
		t.Fatalf("%d windows fired before every partition reported", len(f))
	}
	// The lagging partition reports early state with records unread: the
	// group watermark is its latest event time.
	early, err := newShard(topics, specForBench(), lagging.Topic, lagging.Partition)
	if err != nil {
		t.Fatal(err)
	}
	var lastT int64
	n := 0
	for _, r := range recs {
		if (tp{r.Topic, r.Partition}) == lagging && n < 100 {
			if _, _, err := early.Handle(r); err != nil {
				t.Fatal(err)
			}
			lastT = r.Timestamp.UnixMilli()
			n++
		}
	}
	early.Track(0, 1<<40) // far more to read
	comb.Update(early.partial())
	spec := specForBench()
	for _, f := range comb.Fire() {
		if f.End+spec.AllowedLateness.Milliseconds() > lastT {
			t.Fatalf("window ending %d fired with a partition at %d holding the watermark", f.End, lastT)
		}
	}
	comb.Update(shards[lagging].partial())
	if f := comb.Fire(); len(f) == 0 {
		t.Fatal("no window fired once every partition caught up")
	}
}

// overTheWire encodes and decodes a partial as instances on separate
// machines exchange them, in chunks of 2 KB, so that panes span chunks.
func overTheWire(t *testing.T, p partial) partial {
	t.Helper()
	hdr, chunks := encodePartialSized(p, 7, 2<<10)
	q, err := decodePartial(hdr, func(i int) ([]byte, bool) {
		if i < len(chunks) {
			return chunks[i], true
		}
		return nil, false
	})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestCombinerIdlePartitions: partitions without records hold no window
// back, as a single processor's caught-up partitions do not: one
// partition per topic never receives a record, and one stops receiving
// records for 90 s of event time (its producer stopped) while the others
// go on. The combiner fires each window at the same report as one Core
// reading everything, with the same bytes; when the stopped partition's
// records come back, those dated in windows already fired are late and
// dropped, exactly as the Core drops them, and the rest count.
func TestCombinerIdlePartitions(t *testing.T) {
	topics := streams.TopicsFor("idle")
	from := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	stopped := tp{topics.Signals, 2}
	silent := func(at time.Time) bool { d := at.Sub(from); return d >= time.Minute && d < 150*time.Second }
	var recs []*kgo.Record
	offs := map[tp]int64{}
	add := func(r *kgo.Record) {
		k := tp{r.Topic, r.Partition}
		recs = append(recs, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: offs[k], Value: r.Value, Timestamp: r.Timestamp})
		offs[k]++
	}
	resumed := false
	for _, r := range workloadRecords(topics, 3) {
		if (tp{r.Topic, r.Partition}) == stopped {
			if silent(r.Timestamp) {
				continue
			}
			if !resumed && r.Timestamp.Sub(from) >= 150*time.Second {
				// The producer comes back with two records it held,
				// dated in windows the others completed long ago.
				resumed = true
				for _, late := range []time.Duration{70 * time.Second, 100 * time.Second} {
					at := from.Add(late)
					add(&kgo.Record{Topic: stopped.Topic, Partition: stopped.Partition, Timestamp: at,
						Value: mustMarshal(signal("e02", "l4", at, 40, 13))})
				}
			}
		}
		add(r)
	}
	core, err := NewCore(topics, specForBench(), nil)
	if err != nil {
		t.Fatal(err)
	}
	comb, err := newCombiner(specForBench(), nil)
	if err != nil {
		t.Fatal(err)
	}
	shards := map[tp]*shard{}
	for _, topic := range []string{topics.Signals, topics.RoutingEvents} {
		for p := range int32(4) { // partition 3 of each never gets a record
			comb.Expect(topic, p)
			if shards[tp{topic, p}], err = newShard(topics, specForBench(), topic, p); err != nil {
				t.Fatal(err)
			}
			shards[tp{topic, p}].Track(0, 0)
		}
	}
	want, got := estimateSet{}, estimateSet{}
	var late, firedWhileSilent int
	read := map[tp]int64{}
	report := func(at time.Time) {
		wf := core.Fire()
		for k, s := range shards {
			comb.SetEnd(k.Topic, k.Partition, read[k]) // the log end: everything produced is read
			comb.Update(overTheWire(t, s.partial()))
		}
		gf := comb.Fire()
		if len(wf) != len(gf) {
			t.Fatalf("at %v: the core fired %d windows, the combiner %d", at.Sub(from), len(wf), len(gf))
		}
		for i := range wf {
			if wf[i].End != gf[i].End {
				t.Fatalf("at %v: the core fired the window ending %d, the combiner %d", at.Sub(from), wf[i].End, gf[i].End)
			}
		}
		if silent(at) {
			firedWhileSilent += len(gf)
		}
		want.add(t, wf)
		got.add(t, gf)
	}
	for i, r := range recs {
		if out, _ := core.Handle(r); out == Late {
			late++
		}
		if _, _, err := shards[tp{r.Topic, r.Partition}].Handle(r); err != nil {
			t.Fatal(err)
		}
		read[tp{r.Topic, r.Partition}] = r.Offset + 1
		if i%50 == 49 {
			report(r.Timestamp)
		}
	}
	report(recs[len(recs)-1].Timestamp)
	got.diff(t, want)
	if late != 2 {
		t.Errorf("the core counted %d late records, want the 2 the stopped producer held", late)
	}
	// 90 s of silence at a 5 s slide: about 18 windows.
	if firedWhileSilent < 15 {
		t.Errorf("%d windows fired while a partition was silent", firedWhileSilent)
	}
	t.Logf("%d estimates; %d windows fired while %s/%d was silent", len(got), firedWhileSilent, stopped.Topic, stopped.Partition)
}

// TestShardReleaseStopsHolding: a partition with unread records holds
// the combiner's watermark at its latest event time; once its owner
// releases it (Shard.Release: it has delivered nothing for a while) its
// partial reports it read up to the log end and the other partitions'
// windows fire; a newer log end makes it hold again.
func TestShardReleaseStopsHolding(t *testing.T) {
	topics := streams.TopicsFor("release")
	spec := specForBench()
	recs := workloadRecords(topics, 2)
	stuck, other := tp{topics.Signals, 0}, tp{topics.Signals, 1}
	comb, err := newCombiner(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	shards := map[tp]*shard{}
	read := map[tp]int64{}
	var stuckT int64
	for _, k := range []tp{stuck, other} {
		if shards[k], err = newShard(topics, spec, k.Topic, k.Partition); err != nil {
			t.Fatal(err)
		}
		comb.Expect(k.Topic, k.Partition)
	}
	half := recs[len(recs)/2].Timestamp
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		if shards[k] == nil || (k == stuck && !r.Timestamp.Before(half)) {
			continue
		}
		if _, _, err := shards[k].Handle(r); err != nil {
			t.Fatal(err)
		}
		read[k] = r.Offset + 1
		if k == stuck {
			stuckT = r.Timestamp.UnixMilli()
		}
	}
	logEnd := read[stuck] + 2 // two offsets the owner never receives (transaction markers)
	shards[stuck].SetEnd(logEnd)
	update := func() []Fired {
		for k, s := range shards {
			end := read[k]
			if k == stuck {
				end = logEnd
			}
			comb.SetEnd(k.Topic, k.Partition, end)
			comb.Update(s.partial())
		}
		return comb.Fire()
	}
	held := update()
	if len(held) == 0 {
		t.Fatal("no window fired before the stuck partition's latest event time")
	}
	for _, f := range held {
		if f.End+spec.AllowedLateness.Milliseconds() > stuckT {
			t.Fatalf("window ending %d fired past the stuck partition's latest event time %d", f.End, stuckT)
		}
	}
	if !shards[stuck].Pending() {
		t.Fatal("the stuck partition is not pending")
	}
	shards[stuck].Release()
	if p := shards[stuck].partial(); p.Pending || p.Next != logEnd {
		t.Fatalf("released partial: pending %v, next %d; want read up to the log end %d", p.Pending, p.Next, logEnd)
	}
	freed := update()
	if len(freed) < 10 {
		t.Fatalf("%d windows fired once the stuck partition was released", len(freed))
	}
	// More records in its log: it holds again, at its latest event time.
	logEnd += 5
	shards[stuck].SetEnd(logEnd)
	if p := shards[stuck].partial(); !p.Pending && p.Next >= logEnd {
		t.Fatal("a newer log end does not make the released partition pending")
	}
	t.Logf("%d windows fired while it held, %d once released", len(held), len(freed))
}

// TestCombinerRestoresFromCompactedPartials: a combiner restarted from
// its saved state (clock and kept panes) over a compacted partials topic
// (every partial before the state was written gone, except each
// partition's latest) fires the same windows with the same bytes as the
// combiner that ran on. One routing partition lags (read 400 records
// late while its log end is known), so the other partitions' shards drop
// panes of windows the group has not completed; only the saved state
// still has them: without its kept panes, windows differ.
func TestCombinerRestoresFromCompactedPartials(t *testing.T) {
	topics := streams.TopicsFor("compacted")
	spec := specForBench()
	recs := workloadRecords(topics, 3)
	lagging := tp{topics.RoutingEvents, 1}
	const lag = 400
	type logged struct {
		key string
		val []byte // nil: a tombstone
	}
	var (
		log     []logged // the partials topic
		produce = map[tp]int64{}
		read    = map[tp]int64{}
		shards  = map[tp]*shard{}
	)
	newComb := func() *combiner {
		c, err := newCombiner(spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{topics.Signals, topics.RoutingEvents} {
			for p := range int32(3) {
				c.Expect(topic, p)
			}
		}
		return c
	}
	a := newComb()
	for _, topic := range []string{topics.Signals, topics.RoutingEvents} {
		for p := range int32(3) {
			s, err := newShard(topics, spec, topic, p)
			if err != nil {
				t.Fatal(err)
			}
			shards[tp{topic, p}] = s
		}
	}
	// report publishes every shard's partial as an instance does (in
	// chunks of 4 KB, then the header, then tombstones for the chunks
	// replaced) and returns the records.
	gens := map[tp][2]int{} // generation and chunk count of the latest
	report := func() []logged {
		var out []logged
		for _, topic := range []string{topics.Signals, topics.RoutingEvents} {
			for p := range int32(3) {
				k := tp{topic, p}
				gen := len(log) + len(out) + 1
				hdr, chunks := encodePartialSized(shards[k].partial(), uint64(gen), 4<<10)
				for i, c := range chunks {
					out = append(out, logged{chunkKey(partialKey(k), uint64(gen), i), c})
				}
				out = append(out, logged{partialKey(k), hdr})
				if prev, ok := gens[k]; ok {
					for i := range prev[1] {
						out = append(out, logged{chunkKey(partialKey(k), uint64(prev[0]), i), nil})
					}
				}
				gens[k] = [2]int{gen, len(chunks)}
			}
		}
		log = append(log, out...)
		return out
	}
	readers := map[*combiner]*partialReader{}
	feed := func(c *combiner, ps []logged) []Fired {
		for k, end := range produce {
			c.SetEnd(k.Topic, k.Partition, end)
		}
		r := readers[c]
		if r == nil {
			r = newPartialReader()
			readers[c] = r
		}
		for _, l := range ps {
			p, ok, err := r.add(l.key, l.val)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				c.Update(p)
			}
		}
		return c.Fire()
	}
	handle := func(r *kgo.Record) {
		k := tp{r.Topic, r.Partition}
		if _, _, err := shards[k].Handle(r); err != nil {
			t.Fatal(err)
		}
		read[k] = r.Offset + 1
	}
	var (
		wantA, gotB, gotBare = estimateSet{}, estimateSet{}, estimateSet{}
		b, bare              *combiner
		state                []byte
		stateChunks          [][]byte
		cutoff, kept         int
		from                 int64
	)
	restartAt := len(recs) / 2
	var held []*kgo.Record // the lagging partition's records, read late
	for i, r := range recs {
		k := tp{r.Topic, r.Partition}
		produce[k] = max(produce[k], r.Offset+1)
		if k == lagging {
			held = append(held, r)
		} else {
			handle(r)
		}
		// A lagging record is read lag records after it was produced
		// (all of them at the end).
		for len(held) > 0 && (i-lag >= 0 && held[0] == recs[max(i-lag, 0)] || i == len(recs)-1) {
			handle(held[0])
			held = held[1:]
		}
		if i%37 != 36 && i != len(recs)-1 {
			continue
		}
		ps := report()
		fired := feed(a, ps)
		wantA.add(t, fired)
		if b != nil {
			gotB.add(t, feed(b, ps))
			gotBare.add(t, feed(bare, ps))
		}
		switch {
		case state == nil && i >= restartAt:
			// The combiner writes its state after this round, then
			// dies after the next round's estimates.
			st := a.State()
			for _, p := range st.Kept {
				kept += len(p.Panes)
			}
			var err error
			if state, stateChunks, err = encodeCombinerState(st, 3); err != nil {
				t.Fatal(err)
			}
			cutoff, from = len(log), st.Next
		case state != nil && b == nil:
			// A new combiner reads the state and the partials topic,
			// compacted before the state: each partition's latest only.
			st, err := decodeCombinerState(state, func(i int) ([]byte, bool) {
				if i < len(stateChunks) {
					return stateChunks[i], true
				}
				return nil, false
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(stateChunks) == 0 {
				t.Fatal("the state has no chunks")
			}
			// Compaction keeps the latest record of each key, and drops
			// keys whose latest is a tombstone.
			latest := map[string]int{}
			for j, l := range log {
				latest[l.key] = j
			}
			var compacted []logged
			for j, l := range log {
				if j >= cutoff || latest[l.key] == j && l.val != nil {
					compacted = append(compacted, l)
				}
			}
			if len(compacted) >= len(log) {
				t.Fatal("compaction removed nothing")
			}
			b, bare = newComb(), newComb()
			b.RestoreState(st)
			bare.Restore(st.Watermark, st.Next)
			gotB.add(t, feed(b, compacted))
			gotBare.add(t, feed(bare, compacted))
		}
	}
	if b == nil {
		t.Fatal("no restart")
	}
	if kept == 0 {
		t.Fatal("the saved state kept no pane: the lagging partition held nothing back")
	}
	want := estimateSet{}
	for k, v := range wantA {
		var end int64
		fmt.Sscan(k, &end)
		if end-spec.Size.Milliseconds() >= from {
			want[k] = v
		}
	}
	gotB.diff(t, want)
	differ := 0
	for k, v := range want {
		if string(gotBare[k]) != string(v) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("a combiner restored without the kept panes fires the same windows: the test does not exercise them")
	}
	t.Logf("%d estimates after the restart identical; %d panes kept in the state; without them %d estimates differ", len(want), kept, differ)
}
