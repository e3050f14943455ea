package process

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// TestPartialReaderCompactionAndCrash: the partials topic as an instance
// writes it (chunks, header, tombstones for the replaced chunks), with a
// writer that dies between two chunks of a generation and a hand-over
// header naming the last chunks again, read in full and read compacted
// (the latest record per key, tombstoned keys gone): the reader yields
// the partial of the latest header each time, never a mix of
// generations, and drops the dead writer's chunks once a later
// generation is complete.
func TestPartialReaderCompactionAndCrash(t *testing.T) {
	k := tp{"t.engine.signals", 2}
	base := partialKey(k)
	mkPartial := func(maxT int64) partial {
		p := partial{Topic: k.Topic, Partition: k.Partition, MaxT: maxT, Seen: true, Next: maxT, Panes: map[int64]*estimate.Pane{}}
		for st := range int64(3) {
			p.Panes[st*5000], _ = estimate.DecodePane(estimate.AppendPane(nil, chunkTestPane(maxT+st)))
		}
		return p
	}
	type rec struct {
		key string
		val []byte
	}
	var log []rec
	write := func(p partial, gen uint64, prev uint64, prevN int, upTo int) int {
		hdr, chunks := encodePartialSized(p, gen, 2<<10)
		if len(chunks) < 3 {
			t.Fatalf("%d chunks: the test needs several", len(chunks))
		}
		for i, c := range chunks[:min(upTo, len(chunks))] {
			log = append(log, rec{chunkKey(base, gen, i), c})
		}
		if upTo < len(chunks) {
			return len(chunks) // died
		}
		log = append(log, rec{base, hdr})
		for i := range prevN {
			log = append(log, rec{chunkKey(base, prev, i), nil})
		}
		return len(chunks)
	}
	n1 := write(mkPartial(100), 1, 0, 0, 1<<30)
	write(mkPartial(200), 2, 1, n1, 2) // dies after two chunks: gen 1 stands
	afterCrash := len(log)
	handOver := mkPartial(100)
	handOver.Pending = true
	log = append(log, rec{base, appendHeader(nil, handOver, 1, n1)})
	n3 := write(mkPartial(300), 3, 1, n1, 1<<30)

	compact := func(upTo int) []rec {
		latest := map[string]int{}
		for i, r := range log[:upTo] {
			latest[r.key] = i
		}
		var out []rec
		for i, r := range log[:upTo] {
			if latest[r.key] == i && r.val != nil {
				out = append(out, r)
			}
		}
		return out
	}
	last := func(recs []rec) (partial, *partialReader) {
		t.Helper()
		r := newPartialReader()
		var got partial
		for _, x := range recs {
			p, ok, err := r.add(x.key, x.val)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				got = p
			}
		}
		return got, r
	}
	same := func(name string, got, want partial) {
		t.Helper()
		if got.MaxT != want.MaxT || got.Pending != want.Pending || len(got.Panes) != len(want.Panes) {
			t.Fatalf("%s: partial of max time %d (pending %v, %d panes), want %d (%v, %d)", name, got.MaxT, got.Pending, len(got.Panes), want.MaxT, want.Pending, len(want.Panes))
		}
		for st, pane := range want.Panes {
			if !bytes.Equal(estimate.AppendPane(nil, got.Panes[st]), estimate.AppendPane(nil, pane)) {
				t.Fatalf("%s: pane %d differs", name, st)
			}
		}
	}
	got, _ := last(log[:afterCrash])
	same("in full, after the crash", got, mkPartial(100))
	got, _ = last(compact(afterCrash))
	same("compacted, after the crash", got, mkPartial(100))
	got, _ = last(compact(afterCrash + 1))
	same("compacted, hand-over", got, handOver)
	got, r := last(log)
	same("in full", got, mkPartial(300))
	if len(r.held[base]) != 0 {
		t.Errorf("%d generations still held after the latest header", len(r.held[base]))
	}
	c := compact(len(log))
	got, _ = last(c)
	same("compacted", got, mkPartial(300))
	if len(c) != n3+1+2 { // gen 3's chunks and header, and the dead writer's chunks
		t.Errorf("compacted log holds %d records, want %d", len(c), n3+3)
	}
}

// chunkTestPane is a pane of 40 engines whose values depend on v.
func chunkTestPane(v int64) *estimate.Pane {
	p := estimate.NewPane()
	for e := range 40 {
		p.AddSignal(signal(string(rune('a'+e%26))+string(rune('a'+e/26)), "h100", t0.Add(time.Duration(v)*time.Millisecond), float64(e), float64(v%7)))
	}
	return p
}

// TestCombinerCheckpointChunks (kfake): the combiner's checkpoint with
// kept panes over several chunks restores exactly; a newer checkpoint
// replaces it and deletes its chunks; chunks written by a combiner that
// died before their header leave the checkpoint before them in force,
// and the next combiner deletes them when it starts.
func TestCombinerCheckpointChunks(t *testing.T) {
	kc := testenv.Kafka(t)
	cfg := config("ckchunks")
	cfg.defaults()
	cl := testenv.Client(t, kc)
	ctx := context.Background()
	if err := ensurePartitionedTopics(ctx, cl, cfg); err != nil {
		t.Fatal(err)
	}
	state := func(v int64) combinerState {
		st := combinerState{Watermark: 1000 + v, Next: 500 + v}
		for part := range int32(3) {
			p := partial{Topic: "ckchunks.engine.signals", Partition: part, Panes: map[int64]*estimate.Pane{}}
			for i := range int64(3) {
				p.Panes[i*5000] = chunkTestPane(v + i + int64(part))
			}
			st.Kept = append(st.Kept, p)
		}
		return st
	}
	enc := func(st combinerState) []byte {
		hdr, chunks, err := encodeCombinerState(st, 1)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Join(append(chunks, hdr), nil)
	}
	topic := CheckpointTopic(cfg.TopicPrefix)
	key := cfg.Group + "/combiner"
	w := &combinerCheckpoint{topic: topic, key: key}
	if err := w.write(ctx, cl, state(1)); err != nil {
		t.Fatal(err)
	}
	first := w.gen
	if len(w.chunks) < 2 {
		t.Fatalf("%d chunks: the test needs several", len(w.chunks))
	}
	if err := w.write(ctx, cl, state(2)); err != nil {
		t.Fatal(err)
	}
	// A combiner dies after writing one chunk of its next checkpoint.
	_, chunks, err := encodeCombinerState(state(3), 0xdead)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(chunkKey(key, 0xdead, 0)), Value: chunks[0]}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := &combinerCheckpoint{topic: topic, key: key}
	got, err := r.read(ctx, cl, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc(got), enc(state(2))) {
		t.Fatal("restored state differs from the last written")
	}
	// Compacted, only the last checkpoint's chunks are left.
	vals, err := readLatest(ctx, cl, topic, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range vals {
		_, gen, _, chunk := parseChunkKey(k)
		if chunk && len(v) > 0 && gen != w.gen {
			t.Errorf("chunk %s of generation %x still live (first %x, last %x)", k, gen, first, w.gen)
		}
	}
}

// TestPartialReaderReusesUnchangedPanes: a partition's next generation
// whose panes are partly unchanged (the same bytes) yields, for those,
// the panes decoded before, not decoded again, and for the others fresh
// ones; every pane equals what a fresh reader decodes from the same
// records, and a reader's sums do not match another's.
func TestPartialReaderReusesUnchangedPanes(t *testing.T) {
	k := tp{"t.engine.signals", 1}
	base := partialKey(k)
	publish := func(r *partialReader, gen uint64, panes map[int64]*estimate.Pane) partial {
		t.Helper()
		p := partial{Topic: k.Topic, Partition: k.Partition, MaxT: int64(gen), Seen: true, Panes: panes}
		hdr, chunks := encodePartialSized(p, gen, 2<<10)
		if len(chunks) < 3 {
			t.Fatalf("%d chunks: the test needs panes over several", len(chunks))
		}
		for i, c := range chunks {
			if _, ok, err := r.add(chunkKey(base, gen, i), c); err != nil || ok {
				t.Fatalf("chunk %d: %v %v", i, ok, err)
			}
		}
		got, ok, err := r.add(base, hdr)
		if err != nil || !ok {
			t.Fatalf("header of generation %d: %v %v", gen, ok, err)
		}
		return got
	}
	panes := func(vs ...int64) map[int64]*estimate.Pane {
		m := map[int64]*estimate.Pane{}
		for i, v := range vs {
			m[int64(i)*5000] = chunkTestPane(v)
		}
		return m
	}
	same := func(name string, got, want partial) {
		t.Helper()
		if len(got.Panes) != len(want.Panes) {
			t.Fatalf("%s: %d panes, want %d", name, len(got.Panes), len(want.Panes))
		}
		for st, pane := range want.Panes {
			if !bytes.Equal(estimate.AppendPane(nil, got.Panes[st]), estimate.AppendPane(nil, pane)) {
				t.Fatalf("%s: pane %d differs", name, st)
			}
		}
	}
	r := newPartialReader()
	first := publish(r, 1, panes(10, 20, 30))
	second := publish(r, 2, panes(10, 20, 31)) // the newest pane changed
	fresh := publish(newPartialReader(), 2, panes(10, 20, 31))
	same("second generation", second, fresh)
	for st, reused := range map[int64]bool{0: true, 5000: true, 10000: false} {
		if (second.Panes[st] == first.Panes[st]) != reused {
			t.Errorf("pane %d: taken from the first generation %v, want %v", st, !reused, reused)
		}
	}
	// Panes taken again are not modified by the reader: the first
	// partial still holds what it held.
	same("first generation", first, publish(newPartialReader(), 1, panes(10, 20, 30)))
	// A third generation with a pane from the first again (not the
	// latest): decoded, not taken.
	third := publish(r, 3, panes(10, 20, 30))
	if third.Panes[10000] == first.Panes[10000] || third.Panes[0] != first.Panes[0] {
		t.Error("the third generation's panes: taken from the wrong generation")
	}
	same("third generation", third, publish(newPartialReader(), 3, panes(10, 20, 30)))
	if a, b := newPaneSeed().sum([][]byte{[]byte("x")}), newPaneSeed().sum([][]byte{[]byte("x")}); a == b {
		t.Error("two readers' sums of the same bytes are equal: seeds not random")
	}
}

// TestPartialReaderBatchMatchesOneByOne: a log of several partitions'
// partials (generations with unchanged and changed panes, a writer
// dying between chunks, hand-over headers, tombstones, a header that
// does not decode, a header whose chunks are gone) read in one batch,
// with partitions decoded in parallel, gives per record the same
// partials and errors as read one record at a time, and leaves the
// reader in the same state.
func TestPartialReaderBatchMatchesOneByOne(t *testing.T) {
	logs := make([][]keyValue, 4)
	for part := range int32(4) {
		log := &logs[part]
		k := tp{"t.engine.signals", part}
		base := partialKey(k)
		var prevGen uint64
		var prevN int
		for g := range uint64(4) {
			gen := uint64(part+1)<<8 | g + 1
			p := partial{Topic: k.Topic, Partition: k.Partition, MaxT: int64(g), Seen: true, Panes: map[int64]*estimate.Pane{}}
			for st := range int64(3) {
				p.Panes[st*5000] = chunkTestPane(int64(part) + st + int64(g)*int64(st/2)) // the newest pane changes
			}
			hdr, chunks := encodePartialSized(p, gen, 2<<10)
			if g == 2 && part%2 == 0 { // dies after one chunk
				*log = append(*log, keyValue{chunkKey(base, gen, 0), chunks[0]})
				continue
			}
			for i, c := range chunks {
				*log = append(*log, keyValue{chunkKey(base, gen, i), c})
			}
			*log = append(*log, keyValue{base, hdr})
			for i := range prevN {
				*log = append(*log, keyValue{chunkKey(base, prevGen, i), nil})
			}
			if g == 1 { // a hand-over header naming the chunks again
				p.Pending = true
				*log = append(*log, keyValue{base, appendHeader(nil, p, gen, len(chunks))})
			}
			prevGen, prevN = gen, len(chunks)
		}
		// A header naming the replaced (deleted) chunks, and one that
		// does not decode.
		*log = append(*log, keyValue{base, appendHeader(nil, partial{Topic: k.Topic, Partition: k.Partition}, uint64(part+1)<<8|1, 3)})
		*log = append(*log, keyValue{base, []byte{headerVersion, 1}})
	}
	// Interleave the partitions' records, keeping each one's order.
	var log []keyValue
	for i := 0; len(log) < len(logs[0])+len(logs[1])+len(logs[2])+len(logs[3]); i++ {
		for _, l := range logs {
			if i < len(l) {
				log = append(log, l[i])
			}
		}
	}
	enc := func(res readResult) string {
		if res.err != nil {
			return "error: " + res.err.Error()
		}
		if !res.ok {
			return "-"
		}
		var b []byte
		for _, st := range slices.Sorted(maps.Keys(res.p.Panes)) {
			b = estimate.AppendPane(fmt.Appendf(b, "%d:", st), res.p.Panes[st])
		}
		return fmt.Sprintf("%s/%d %d %v %x", res.p.Topic, res.p.Partition, res.p.MaxT, res.p.Pending, sha256.Sum256(b))
	}
	one := newPartialReader()
	var want []string
	for _, kv := range log {
		p, ok, err := one.add(kv.key, kv.value)
		want = append(want, enc(readResult{p, ok, err}))
	}
	batch := newPartialReader()
	got := batch.addAll(log, 4)
	errs, partials := 0, 0
	for i := range log {
		if g := enc(got[i]); g != want[i] {
			t.Errorf("record %d (%s): %s, want %s", i, log[i].key, g, want[i])
		}
		switch {
		case got[i].err != nil:
			errs++
		case got[i].ok:
			partials++
		}
	}
	if errs < 8 || partials < 12 {
		t.Errorf("%d errors and %d partials: the log does not exercise both", errs, partials)
	}
	t.Logf("%d records: %d partials, %d errors", len(log), partials, errs)
	if !reflect.DeepEqual(one.held, batch.held) || !reflect.DeepEqual(one.order, batch.order) {
		t.Error("held chunks differ")
	}
	for key, l := range one.last {
		if b := batch.last[key]; b.gen != l.gen || len(b.panes) != len(l.panes) {
			t.Errorf("%s: latest partial of generation %x (%d panes), want %x (%d)", key, b.gen, len(b.panes), l.gen, len(l.panes))
		}
	}
}
