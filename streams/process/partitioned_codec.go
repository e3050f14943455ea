package process

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/wire"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// Partials on the wire (docs/processor.md, "Partials on the wire"). A
// partial is written as data chunks, then a header naming them:
//
//   - chunks, keyed "<topic>/<partition>/<gen>/<i>" (gen: 16 hex digits,
//     new for every partial written; i from 0): [chunkVersion] then
//     segments, each a part of one partition's pane (estimate.PaneParts):
//     topic, partition, pane start, then the part's AppendPane bytes;
//   - the header, keyed "<topic>/<partition>" (the key of one-record JSON
//     partials, which still decode): [headerVersion], topic, partition,
//     MaxT, Next, flags (Seen, Pending), gen and chunk count.
//
// The header is produced only once Kafka has the chunks, and the chunks
// of the previous gen are deleted (tombstones) only once Kafka has the
// header that replaces it: chunk keys are never reused, so under log
// compaction a partition's latest header always finds its chunks, and a
// writer that dies between chunks leaves the previous header in force.
// The combiner's checkpoint uses the same chunks under
// "GROUP/combiner/<gen>/<i>", named by its JSON header.
const (
	chunkVersion  byte = 1
	headerVersion byte = 2
	// chunkBytes is the pane bytes a chunk aims at: with a chunk's
	// other fields, well under franz-go's and Kafka's default 1 MB
	// record limit.
	chunkBytes = 256 << 10
)

// errWire marks a partials-topic value that does not decode.
var errWire = errors.New("invalid partial encoding")

// partialKey is the header key of a partition's partials.
func partialKey(k tp) string { return k.Topic + "/" + strconv.Itoa(int(k.Partition)) }

// chunkKey is the key of chunk i of generation gen under base.
func chunkKey(base string, gen uint64, i int) string {
	return fmt.Sprintf("%s/%016x/%d", base, gen, i)
}

// parseChunkKey splits a chunk key into its base, gen and index; ok is
// false for any other key.
func parseChunkKey(key string) (base string, gen uint64, i int, ok bool) {
	j := strings.LastIndexByte(key, '/')
	if j < 0 {
		return "", 0, 0, false
	}
	n, err := strconv.Atoi(key[j+1:])
	if err != nil || n < 0 {
		return "", 0, 0, false
	}
	g := strings.LastIndexByte(key[:j], '/')
	if g < 0 || j-g-1 != 16 {
		return "", 0, 0, false
	}
	gen, err = strconv.ParseUint(key[g+1:j], 16, 64)
	if err != nil {
		return "", 0, 0, false
	}
	return key[:g], gen, n, true
}

// encodeChunks cuts the panes of parts (in order, panes by start) into
// chunk values of at most about maxBytes of pane bytes each.
func encodeChunks(parts []partial, maxBytes int) [][]byte {
	var (
		out  [][]byte
		cur  []byte
		segs int
	)
	flush := func() {
		if segs > 0 {
			v := binary.AppendUvarint(append(make([]byte, 0, len(cur)+1+binary.MaxVarintLen64), chunkVersion), uint64(segs))
			out = append(out, append(v, cur...))
		}
		cur, segs = cur[:0], 0
	}
	cur = make([]byte, 0, maxBytes+maxBytes/8)
	for _, p := range parts {
		starts := make([]int64, 0, len(p.Panes))
		for st := range p.Panes {
			starts = append(starts, st)
		}
		slices.Sort(starts)
		for _, st := range starts {
			for _, b := range estimate.PaneParts(p.Panes[st], maxBytes) {
				if len(cur)+len(b) > maxBytes && segs > 0 {
					flush()
				}
				cur = appendWireString(cur, p.Topic)
				cur = binary.AppendVarint(cur, int64(p.Partition))
				cur = binary.AppendVarint(cur, st)
				cur = append(binary.AppendUvarint(cur, uint64(len(b))), b...)
				segs++
			}
		}
	}
	flush()
	return out
}

func appendWireString(buf []byte, s string) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(s))), s...)
}

// wireReader reads a binary value; the first error sticks.
type wireReader struct{ wire.Reader }

func newWireReader(b []byte) *wireReader {
	return &wireReader{wire.Reader{B: b, Malformed: errWire}}
}

func (r *wireReader) partition(what string) int32 {
	v := r.Varint(what)
	if v < 0 || v > 1<<31-1 {
		r.Fail(what)
		return 0
	}
	return int32(v)
}

// joinChunks decodes chunk values into panes by partition and start,
// joining the parts of each pane (estimate.Pane.Join).
func joinChunks(chunks [][]byte) (map[tp]map[int64]*estimate.Pane, error) {
	decoded, err := joinChunksReusing(chunks, nil, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[tp]map[int64]*estimate.Pane, len(decoded))
	for k, ps := range decoded {
		panes := make(map[int64]*estimate.Pane, len(ps))
		for st, d := range ps {
			panes[st] = d.pane
		}
		out[k] = panes
	}
	return out, nil
}

// paneSum identifies a pane's encoded parts: their maphash sum (count,
// lengths and bytes) under a reader's random seed. Two different parts
// lists have the same sum with probability about 2^-64, and the seed is
// the process's own, so a writer cannot aim at a collision.
type paneSum uint64

// paneSeed is the seed of a reader's paneSums.
type paneSeed struct{ seed maphash.Seed }

func newPaneSeed() *paneSeed { return &paneSeed{maphash.MakeSeed()} }

func (s *paneSeed) sum(parts [][]byte) paneSum {
	var (
		h maphash.Hash
		n [binary.MaxVarintLen64]byte
	)
	h.SetSeed(s.seed)
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(parts)))])
	for _, p := range parts {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write(p)
	}
	return paneSum(h.Sum64())
}

// decodedPane is a pane and the sum of the parts it was decoded from.
type decodedPane struct {
	sum  paneSum
	pane *estimate.Pane
}

// paneKey names a pane in chunks: its partition and start.
type paneKey struct {
	k  tp
	st int64
}

// joinChunksReusing is joinChunks that, with a seed, sums each pane's
// parts and takes the pane prev holds for the same partition and start
// instead of decoding it when the sums are equal: a pane unchanged since
// the last partial is encoded to the same bytes (AppendPane is
// deterministic) and so decodes to the same pane. Panes are not
// modified once decoded (the combiner only reads them), so one pane can
// stand in two partials.
func joinChunksReusing(chunks [][]byte, seed *paneSeed, prev map[tp]map[int64]decodedPane) (map[tp]map[int64]decodedPane, error) {
	type part struct {
		chunk int
		b     []byte
	}
	var order []paneKey
	parts := map[paneKey][]part{}
	for i, c := range chunks {
		if len(c) == 0 || c[0] != chunkVersion {
			return nil, fmt.Errorf("%w: chunk %d: unknown version", errWire, i)
		}
		r := newWireReader(c[1:])
		n := r.Uvarint("segment count")
		if n > uint64(len(r.B)) { // a segment takes several bytes
			return nil, fmt.Errorf("%w: chunk %d: %d segments in %d bytes", errWire, i, n, len(r.B))
		}
		for range n {
			pk := paneKey{k: tp{Topic: string(r.Bytes("topic"))}}
			pk.k.Partition = r.partition("partition")
			pk.st = r.Varint("pane start")
			b := r.Bytes("pane")
			if r.Err != nil {
				return nil, fmt.Errorf("chunk %d: %w", i, r.Err)
			}
			if _, ok := parts[pk]; !ok {
				order = append(order, pk)
			}
			parts[pk] = append(parts[pk], part{i, b})
		}
		if len(r.B) != 0 {
			return nil, fmt.Errorf("%w: chunk %d: %d trailing bytes", errWire, i, len(r.B))
		}
	}
	out := map[tp]map[int64]decodedPane{}
	var bs [][]byte
	for _, pk := range order {
		ps := parts[pk]
		var d decodedPane
		if seed != nil {
			bs = bs[:0]
			for _, p := range ps {
				bs = append(bs, p.b)
			}
			d.sum = seed.sum(bs)
			if old, ok := prev[pk.k][pk.st]; ok && old.sum == d.sum {
				ps, d.pane = nil, old.pane // taken, not decoded
			}
		}
		for _, p := range ps {
			pane, err := estimate.DecodePane(p.b)
			if err == nil && d.pane != nil {
				err = d.pane.Join(pane)
			}
			if err != nil {
				return nil, fmt.Errorf("chunk %d: pane %d of %s/%d: %w", p.chunk, pk.st, pk.k.Topic, pk.k.Partition, err)
			}
			if d.pane == nil {
				d.pane = pane
			}
		}
		if out[pk.k] == nil {
			out[pk.k] = map[int64]decodedPane{}
		}
		out[pk.k][pk.st] = d
	}
	return out, nil
}

// header is a partial's header: the partial without its panes, and the
// generation and number of the chunks that hold them.
type header struct {
	partial
	gen    uint64
	chunks int
}

const (
	flagSeen    = 1
	flagPending = 2
)

// encodePartial encodes p as its header and chunk values, generation
// gen.
func encodePartial(p partial, gen uint64) (hdr []byte, chunks [][]byte) {
	return encodePartialSized(p, gen, chunkBytes)
}

// encodePartialSized is encodePartial with chunks of about maxBytes.
func encodePartialSized(p partial, gen uint64, maxBytes int) (hdr []byte, chunks [][]byte) {
	chunks = encodeChunks([]partial{p}, maxBytes)
	return appendHeader(nil, p, gen, len(chunks)), chunks
}

func appendHeader(buf []byte, p partial, gen uint64, chunks int) []byte {
	buf = append(buf, headerVersion)
	buf = appendWireString(buf, p.Topic)
	buf = binary.AppendVarint(buf, int64(p.Partition))
	buf = binary.AppendVarint(buf, p.MaxT)
	buf = binary.AppendVarint(buf, p.Next)
	var flags byte
	if p.Seen {
		flags |= flagSeen
	}
	if p.Pending {
		flags |= flagPending
	}
	buf = append(buf, flags)
	buf = binary.LittleEndian.AppendUint64(buf, gen)
	return binary.AppendUvarint(buf, uint64(chunks))
}

// decodeHeader decodes a header value. A one-record JSON partial (as
// written before chunking) decodes with its panes and no chunks.
func decodeHeader(b []byte) (header, error) {
	if len(b) > 0 && b[0] == '{' {
		p, err := decodeJSONPartial(b)
		return header{partial: p}, err
	}
	if len(b) == 0 || b[0] != headerVersion {
		return header{}, fmt.Errorf("%w: header: unknown version", errWire)
	}
	r := newWireReader(b[1:])
	var h header
	h.Topic = string(r.Bytes("topic"))
	h.Partition = r.partition("partition")
	h.MaxT = r.Varint("max time")
	h.Next = r.Varint("next offset")
	if len(r.B) < 9 {
		r.Fail("flags and generation")
	}
	if r.Err != nil {
		return header{}, fmt.Errorf("header: %w", r.Err)
	}
	flags := r.B[0]
	if flags&^(flagSeen|flagPending) != 0 {
		return header{}, fmt.Errorf("%w: header: unknown flags %#x", errWire, flags)
	}
	h.Seen, h.Pending = flags&flagSeen != 0, flags&flagPending != 0
	h.gen = binary.LittleEndian.Uint64(r.B[1:9])
	r.B = r.B[9:]
	n := r.Uvarint("chunk count")
	if r.Err != nil || len(r.B) != 0 || n > 1<<20 {
		return header{}, fmt.Errorf("%w: header: malformed chunk count", errWire)
	}
	h.chunks = int(n)
	return h, nil
}

// decodePartial decodes a header and its chunks (chunk(i) returns chunk
// i, false when it is missing).
func decodePartial(hdr []byte, chunk func(i int) ([]byte, bool)) (partial, error) {
	h, err := decodeHeader(hdr)
	if err != nil {
		return partial{}, fmt.Errorf("decoding partial: %w", err)
	}
	if h.Panes != nil { // JSON
		return h.partial, nil
	}
	panes, err := chunkPanes(h.gen, h.chunks, chunk)
	if err != nil {
		return partial{}, fmt.Errorf("decoding partial %s/%d: %w", h.Topic, h.Partition, err)
	}
	h.Panes = map[int64]*estimate.Pane{}
	for k, ps := range panes {
		if k != (tp{h.Topic, h.Partition}) {
			return partial{}, fmt.Errorf("decoding partial %s/%d: %w: a chunk holds panes of %s/%d", h.Topic, h.Partition, errWire, k.Topic, k.Partition)
		}
		h.Panes = ps
	}
	return h.partial, nil
}

// chunkPanes collects chunks 0..n-1 of gen and joins them.
func chunkPanes(gen uint64, n int, chunk func(i int) ([]byte, bool)) (map[tp]map[int64]*estimate.Pane, error) {
	vals, err := collectChunks(gen, n, chunk)
	if err != nil {
		return nil, err
	}
	return joinChunks(vals)
}

// collectChunks returns chunks 0..n-1 of gen.
func collectChunks(gen uint64, n int, chunk func(i int) ([]byte, bool)) ([][]byte, error) {
	var vals [][]byte
	for i := range n {
		v, ok := chunk(i)
		if !ok {
			return nil, fmt.Errorf("%w: chunk %d of %d of generation %016x missing", errWire, i, n, gen)
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// wirePartial is a one-record JSON partial, as written before chunking
// (read only); panes are estimate.AppendPane bytes.
type wirePartial struct {
	Topic     string           `json:"topic"`
	Partition int32            `json:"partition"`
	MaxT      int64            `json:"max_t"`
	Next      int64            `json:"next_offset"`
	Seen      bool             `json:"seen"`
	Pending   bool             `json:"pending"`
	Panes     map[int64][]byte `json:"panes"`
}

func decodeJSONPartial(b []byte) (partial, error) {
	var w wirePartial
	if err := json.Unmarshal(b, &w); err != nil {
		return partial{}, fmt.Errorf("%w: %w", errWire, err)
	}
	panes, err := decodePanes(w)
	if err != nil {
		return partial{}, err
	}
	return partial{Topic: w.Topic, Partition: w.Partition, MaxT: w.MaxT, Next: w.Next, Seen: w.Seen, Pending: w.Pending, Panes: panes}, nil
}

// decodePanes decodes the panes of w.
func decodePanes(w wirePartial) (map[int64]*estimate.Pane, error) {
	out := make(map[int64]*estimate.Pane, len(w.Panes))
	for st, b := range w.Panes {
		pane, err := estimate.DecodePane(b)
		if err != nil {
			return nil, fmt.Errorf("pane %d of %s/%d: %w", st, w.Topic, w.Partition, err)
		}
		out[st] = pane
	}
	return out, nil
}

// wireCombinerState is the header of a combinerState, as JSON: the
// Checkpoint fields (which readCheckpoint reads too), then the
// generation and count of the chunks holding the kept panes; Kept is
// the kept panes of a checkpoint written before chunking (read only).
type wireCombinerState struct {
	Checkpoint
	KeptGen    string        `json:"kept_gen,omitempty"`
	KeptChunks int           `json:"kept_chunks,omitempty"`
	Kept       []wirePartial `json:"kept,omitempty"`
}

// encodeCombinerState encodes st as its header and the chunks of its
// kept panes, generation gen (unused when nothing is kept).
func encodeCombinerState(st combinerState, gen uint64) (hdr []byte, chunks [][]byte, err error) {
	chunks = encodeChunks(st.Kept, chunkBytes)
	hdr, err = combinerStateHeader(st, gen, len(chunks))
	return hdr, chunks, err
}

// combinerStateHeader is the header of st whose kept panes are in n
// chunks of generation gen.
func combinerStateHeader(st combinerState, gen uint64, n int) ([]byte, error) {
	w := wireCombinerState{Checkpoint: Checkpoint{Version: 1, Watermark: st.Watermark, Next: st.Next}}
	if n > 0 {
		w.KeptGen, w.KeptChunks = fmt.Sprintf("%016x", gen), n
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encoding combiner state: %w", err)
	}
	return b, nil
}

// combinerHeader decodes a combiner state's header: the state without
// its chunked panes, and their generation and count.
func combinerHeader(b []byte) (st combinerState, gen uint64, chunks int, err error) {
	var w wireCombinerState
	if err := json.Unmarshal(b, &w); err != nil {
		return combinerState{}, 0, 0, fmt.Errorf("decoding combiner state: %w", err)
	}
	st = combinerState{Watermark: w.Watermark, Next: w.Next}
	for _, wp := range w.Kept {
		panes, err := decodePanes(wp)
		if err != nil {
			return combinerState{}, 0, 0, fmt.Errorf("decoding combiner state: %w", err)
		}
		st.Kept = append(st.Kept, partial{Topic: wp.Topic, Partition: wp.Partition, Panes: panes})
	}
	if w.KeptChunks == 0 {
		return st, 0, 0, nil
	}
	if len(st.Kept) > 0 || w.KeptChunks < 0 || w.KeptChunks > 1<<20 {
		return combinerState{}, 0, 0, fmt.Errorf("decoding combiner state: %w: %d kept chunks", errWire, w.KeptChunks)
	}
	gen, err = strconv.ParseUint(w.KeptGen, 16, 64)
	if err != nil || len(w.KeptGen) != 16 {
		return combinerState{}, 0, 0, fmt.Errorf("decoding combiner state: %w: kept generation %q", errWire, w.KeptGen)
	}
	return st, gen, w.KeptChunks, nil
}

// decodeCombinerState decodes a combiner state's header and the chunks
// it names (chunk(i) returns chunk i, false when it is missing).
func decodeCombinerState(hdr []byte, chunk func(i int) ([]byte, bool)) (combinerState, error) {
	st, gen, n, err := combinerHeader(hdr)
	if err != nil || n == 0 {
		return st, err
	}
	panes, err := chunkPanes(gen, n, chunk)
	if err != nil {
		return combinerState{}, fmt.Errorf("decoding combiner state: %w", err)
	}
	for k, ps := range panes {
		st.Kept = append(st.Kept, partial{Topic: k.Topic, Partition: k.Partition, Panes: ps})
	}
	sortPartials(st.Kept)
	return st, nil
}

// sortPartials sorts partials by topic and partition.
func sortPartials(ps []partial) {
	slices.SortFunc(ps, func(a, b partial) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
}

// partialReader turns the records of the partials topic, in log order,
// into partials: it holds chunks until the header naming them arrives.
type partialReader struct {
	// held chunks by base key, generation and index.
	held map[string]map[uint64]map[int][]byte
	// order of the held generations by base key, by their first chunk.
	order map[string][]uint64
	// last is the generation and panes of each base key's latest
	// partial (a hand-over header names its partition's last chunks
	// again; a new generation's unchanged panes are taken from it).
	last map[string]lastPartial
	seed *paneSeed
}

type lastPartial struct {
	gen   uint64
	panes map[int64]*estimate.Pane
	// decoded are the panes with the sums of their parts (binary
	// partials only).
	decoded map[int64]decodedPane
}

// maxHeldGens bounds the generations held per partition: chunks of
// writers that died before their header (or of an owner the group has
// replaced) are dropped once newer ones arrive.
const maxHeldGens = 4

func newPartialReader() *partialReader {
	return &partialReader{held: map[string]map[uint64]map[int][]byte{}, order: map[string][]uint64{}, last: map[string]lastPartial{}, seed: newPaneSeed()}
}

// add reads one record; it returns the partial a header completes (ok
// true), and an error for a value or key that does not decode (the
// partition's latest partial is unchanged by it).
func (r *partialReader) add(key string, value []byte) (p partial, ok bool, err error) {
	res := r.addAll([]keyValue{{key, value}}, 1)
	return res[0].p, res[0].ok, res[0].err
}

// keyValue is a record of the partials topic.
type keyValue struct {
	key   string
	value []byte
}

// readResult is what one record gives: the partial a header completes
// (ok), or an error, or neither (a chunk or tombstone).
type readResult struct {
	p   partial
	ok  bool
	err error
}

// headerJob is a header being read: what the records before it give
// (its chunks), then what decoding them gives.
type headerJob struct {
	pos      int
	key      string
	h        header
	handOver bool     // names the partition's last generation again
	vals     [][]byte // its chunks (binary, not a hand-over)
	// Results.
	p    partial
	last lastPartial
	err  error
}

// addAll reads recs, in log order, as add reads them one by one, and
// returns one result per record; the panes of different partitions'
// headers are decoded in parallel, by up to workers goroutines (a
// partition's in order, each taking unchanged panes from the one
// before), and the reader's state is updated in log order.
func (r *partialReader) addAll(recs []keyValue, workers int) []readResult {
	out := make([]readResult, len(recs))
	var (
		jobs []*headerJob
		keys []string
	)
	chains := map[string][]*headerJob{}
	// lastGen is each partition's latest generation so far, as if every
	// header read so far decoded (decoding a value that is complete
	// fails only for a malformed one).
	lastGen := map[string]uint64{}
	for i, rec := range recs {
		if base, gen, ci, isChunk := parseChunkKey(rec.key); isChunk {
			r.hold(base, gen, ci, rec.value)
			continue
		}
		if rec.value == nil {
			continue
		}
		h, err := decodeHeader(rec.value)
		if err != nil {
			out[i].err = fmt.Errorf("partial %q: %w", rec.key, err)
			continue
		}
		if partialKey(tp{h.Topic, h.Partition}) != rec.key {
			out[i].err = fmt.Errorf("partial %q: %w: it is of %s/%d", rec.key, errWire, h.Topic, h.Partition)
			continue
		}
		j := &headerJob{pos: i, key: rec.key, h: h}
		if h.Panes != nil { // JSON: no generation
			lastGen[rec.key] = 0
		} else {
			last, ok := lastGen[rec.key]
			if !ok {
				last = r.last[rec.key].gen
			}
			j.handOver = h.gen != 0 && h.gen == last
			if !j.handOver {
				held := r.held[rec.key][h.gen]
				j.vals, err = collectChunks(h.gen, h.chunks, func(i int) ([]byte, bool) {
					v, ok := held[i]
					return v, ok
				})
				if err != nil {
					out[i].err = fmt.Errorf("decoding partial %s/%d: %w", h.Topic, h.Partition, err)
					continue
				}
				r.drop(rec.key, h.gen)
				lastGen[rec.key] = h.gen
			}
		}
		if _, ok := chains[rec.key]; !ok {
			keys = append(keys, rec.key)
		}
		chains[rec.key] = append(chains[rec.key], j)
		jobs = append(jobs, j)
	}
	chain := func(key string) {
		prev := r.last[key] // r.last is only read until every chain is done
		for _, j := range chains[key] {
			if r.decode(j, prev); j.err == nil {
				prev = j.last
			}
		}
	}
	if workers = min(workers, len(keys)); workers <= 1 {
		for _, k := range keys {
			chain(k)
		}
	} else {
		next := make(chan string)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for k := range next {
					chain(k)
				}
			})
		}
		for _, k := range keys {
			next <- k
		}
		close(next)
		wg.Wait()
	}
	for _, j := range jobs {
		if j.err != nil {
			out[j.pos].err = j.err
			continue
		}
		r.last[j.key] = j.last
		out[j.pos] = readResult{p: j.p, ok: true}
	}
	return out
}

// hold keeps (or, for a tombstone, forgets) chunk i of generation gen
// of base until its header arrives.
func (r *partialReader) hold(base string, gen uint64, i int, value []byte) {
	gens := r.held[base]
	if len(value) == 0 { // tombstone
		delete(gens[gen], i)
		return
	}
	if gens == nil {
		gens = map[uint64]map[int][]byte{}
		r.held[base] = gens
	}
	if gens[gen] == nil {
		gens[gen] = map[int][]byte{}
		r.order[base] = append(r.order[base], gen)
		if o := r.order[base]; len(o) > maxHeldGens {
			delete(gens, o[0])
			r.order[base] = o[1:]
		}
	}
	gens[gen][i] = value
}

// drop forgets the held chunks of gen and of the generations before it
// (their header has arrived, or a later one has).
func (r *partialReader) drop(key string, gen uint64) {
	if o := r.order[key]; slices.Contains(o, gen) {
		j := slices.Index(o, gen)
		for _, g := range o[:j+1] {
			delete(r.held[key], g)
		}
		r.order[key] = o[j+1:]
	}
}

// decode sets j's partial and last partial, given prev, the latest
// partial of its partition before it; it only reads r's seed.
func (r *partialReader) decode(j *headerJob, prev lastPartial) {
	h := j.h
	switch {
	case h.Panes != nil: // JSON: one record
		j.p, j.last = h.partial, lastPartial{panes: h.Panes}
		return
	case j.handOver:
		if prev.gen != h.gen { // the header before it did not decode
			j.err = fmt.Errorf("decoding partial %s/%d: %w: generation %016x not held", h.Topic, h.Partition, errWire, h.gen)
			return
		}
		h.Panes = make(map[int64]*estimate.Pane, len(prev.panes))
		for st, pane := range prev.panes {
			h.Panes[st] = pane
		}
		j.p, j.last = h.partial, prev
		return
	}
	k := tp{h.Topic, h.Partition}
	decoded, err := joinChunksReusing(j.vals, r.seed, map[tp]map[int64]decodedPane{k: prev.decoded})
	if err != nil {
		j.err = fmt.Errorf("decoding partial %s/%d: %w", h.Topic, h.Partition, err)
		return
	}
	p := h.partial
	p.Panes = map[int64]*estimate.Pane{}
	for kk, ps := range decoded {
		if kk != k {
			j.err = fmt.Errorf("decoding partial %s/%d: %w: a chunk holds panes of %s/%d", h.Topic, h.Partition, errWire, kk.Topic, kk.Partition)
			return
		}
		for st, d := range ps {
			p.Panes[st] = d.pane
		}
	}
	last := make(map[int64]*estimate.Pane, len(p.Panes))
	for st, pane := range p.Panes {
		last[st] = pane
	}
	j.p, j.last = p, lastPartial{gen: h.gen, panes: last, decoded: decoded[k]}
}

// IsPartial reports whether r, a record of the partials topic, is a
// partial's header (not one of its chunks or a tombstone): one per
// partial published.
func IsPartial(r *kgo.Record) bool {
	if len(r.Value) == 0 {
		return false
	}
	_, _, _, chunk := parseChunkKey(string(r.Key))
	return !chunk
}
