package gateway

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// fullSnapshot has every field of a WeightSnapshot set, the cluster "c"
// and another one.
func fullSnapshot(version uint64, engines int) *schemas.WeightSnapshot {
	cw := func(name string, shift float64) *schemas.ClusterWeights {
		c := &schemas.ClusterWeights{Cluster: name, ShedFraction: 0.1, DemandRps: 12.5, ExpectedLatencyMs: 250,
			PeerClusters: []string{"c", "d"}, DemandEstimate: &schemas.DemandEstimate{SchemaVersion: 1, Cluster: name,
				WindowStartUnixMs: 1_699_999_970_000, WindowEndUnixMs: 1_700_000_000_000, DemandRps: 12, MeanPromptTokens: 500,
				MeanOutputTokens: 100, ForecastRps: 12.5, RequestCount: 360, RejectedCount: 40, ShedSnapshotCount: 30, ShedAdmissionCount: 9}}
		for i := range engines {
			c.Weights = append(c.Weights, &schemas.EngineWeight{
				EngineId: fmt.Sprintf("e-%03d", i), EndpointUrl: fmt.Sprintf("http://e-%03d.example:8000/", i),
				Weight: 0.9 / float64(engines), PlannedUtilization: 0.7,
				Explanation: &schemas.Explanation{NetworkMs: 2 + float64(i) + shift, EngineMs: 200, MarginalMs: 400,
					Binding: []string{"capacity"}, MaxBatch: 64, CapacitySource: "metrics", MaxConcurrency: uint32(128 + i),
					CacheResidencyS: 30 + float64(i)},
			})
		}
		return c
	}
	return &schemas.WeightSnapshot{SchemaVersion: 1, Version: version, CreatedUnixMs: 1_700_000_000_000,
		Clusters:     []*schemas.ClusterWeights{cw("d", 1), cw("c", 0)},
		InputsDigest: "ab12", Stats: &schemas.SolveStats{Solver: "pdhg", ObjectiveMs: 1, DualityGap: 1e-4, Iterations: 9, SolveMs: 3, TotalShedRps: 0.5},
		Signature: []byte{1, 2, 3}, SigningKeyId: "k1"}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withField appends one field to b.
func withField(b []byte, num protowire.Number, typ protowire.Type, val []byte) []byte {
	b = protowire.AppendTag(bytes.Clone(b), num, typ)
	return append(b, val...)
}

func lenPrefixed(v []byte) []byte { return protowire.AppendBytes(nil, v) }

// decodeSeeds are plain snapshots and every kind of input decodeView
// leaves to proto.Unmarshal. plain says how many come first that it
// reads itself.
func decodeSeeds(t testing.TB) (seeds [][]byte, plain int) {
	full := marshal(t, fullSnapshot(3, 3))
	other := fullSnapshot(4, 3)
	other.Clusters[1].Weights[1].Weight = 0.2
	other.Clusters[1].PeerClusters = nil
	bare := marshal(t, &schemas.WeightSnapshot{Version: 9, Clusters: []*schemas.ClusterWeights{{Cluster: "c",
		Weights: []*schemas.EngineWeight{{EngineId: "a", EndpointUrl: "http://a", Weight: 1}}}}})
	noExpl := fullSnapshot(5, 2)
	for _, c := range noExpl.Clusters {
		for _, w := range c.Weights {
			w.Explanation = nil
		}
	}
	twice := fullSnapshot(6, 2)
	twice.Clusters = append(twice.Clusters, twice.Clusters[1])
	head := marshal(t, &schemas.WeightSnapshot{Version: 9, CreatedUnixMs: 5})
	weightEntry := marshal(t, &schemas.EngineWeight{EngineId: "z", EndpointUrl: "http://z", Weight: 0.5})
	explEntry := marshal(t, &schemas.EngineWeight{EngineId: "z", Explanation: &schemas.Explanation{NetworkMs: 3}})
	clusterWith := func(fields []byte) []byte { // cluster "c" with extra fields
		c := marshal(t, &schemas.ClusterWeights{Cluster: "c", ShedFraction: 0.5})
		return withField(head, 4, protowire.BytesType, lenPrefixed(append(c, fields...)))
	}
	seeds = [][]byte{
		full,
		marshal(t, other),
		bare,
		marshal(t, noExpl),
		marshal(t, twice),
		{},
		marshal(t, &schemas.WeightSnapshot{Version: 1}),
		withField(full, 2, protowire.VarintType, protowire.AppendVarint(nil, 77)),                                         // version again: the last wins
		withField(full, 4, protowire.BytesType, lenPrefixed(nil)),                                                         // an empty cluster entry
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed(nil))),                                             // an empty weight
		clusterWith(withField(nil, 1, protowire.BytesType, lenPrefixed([]byte("x")))),                                     // renamed after its fields
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed(weightEntry))),                                     // one more engine
		clusterWith(withField(nil, 6, protowire.BytesType, lenPrefixed([]byte("peer")))),                                  // one more peer
		withField(full, 6, protowire.BytesType, lenPrefixed(nil)),                                                         // stats again (proto merges)
		withField(full, 99, protowire.VarintType, protowire.AppendVarint(nil, 1)),                                         // unknown field
		withField(full, 2, protowire.Fixed64Type, make([]byte, 8)),                                                        // known field, other wire type
		withField(full, 5, protowire.BytesType, lenPrefixed([]byte{0xff})),                                                // bad UTF-8 digest
		withField(full, 16, protowire.BytesType, lenPrefixed([]byte{0xc3})),                                               // bad UTF-8 key id
		withField(full, 4, protowire.BytesType, lenPrefixed([]byte{0x0a, 0x01, 0xff})),                                    // bad UTF-8 cluster name
		clusterWith(withField(nil, 6, protowire.BytesType, lenPrefixed([]byte{0xff}))),                                    // bad UTF-8 peer
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed([]byte{0x0a, 0x01, 0xff}))),                        // bad UTF-8 engine id
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed([]byte{0x12, 0x01, 0xff}))),                        // bad UTF-8 endpoint
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed(append(explEntry, 0x22, 0x03, 0x22, 0x01, 0xff)))), // bad UTF-8 binding
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed(append(explEntry, explEntry[len(explEntry)-11:]...)))),
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed([]byte{0x19, 1, 2}))),              // short weight
		clusterWith(withField(nil, 3, protowire.VarintType, []byte{1})),                                   // shed as a varint
		clusterWith(withField(nil, 9, protowire.BytesType, lenPrefixed(nil))),                             // unknown cluster field
		clusterWith(withField(nil, 7, protowire.BytesType, lenPrefixed([]byte{0x12, 0x01, 0xff}))),        // bad UTF-8 demand cluster
		clusterWith(withField(nil, 7, protowire.BytesType, lenPrefixed([]byte{0x68, 0x01}))),              // unknown demand field
		clusterWith(withField(nil, 7, protowire.BytesType, lenPrefixed([]byte{0x29, 1, 2}))),              // short demand_rps
		clusterWith(withField(nil, 7, protowire.VarintType, []byte{1})),                                   // demand estimate as a varint
		clusterWith(withField(nil, 2, protowire.BytesType, lenPrefixed([]byte{0x30, 0x01}))),              // unknown engine field
		withField(full, 6, protowire.BytesType, lenPrefixed([]byte{0x0a, 0x01, 0xff})),                    // bad UTF-8 solver
		withField(full, 7, protowire.StartGroupType, protowire.AppendTag(nil, 7, protowire.EndGroupType)), // a group
		withField(full, 7, protowire.EndGroupType, nil),                                                   // a stray end of group
		append(bytes.Clone(full), 0x00),                                                                   // field 0
		append(bytes.Clone(full), 0x80),                                                                   // truncated tag
		full[:len(full)-1],                                                                                // truncated
		{0x22, 0x05, 0x0a},                                                                                // truncated entry
		{0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},                          // overlong varint
	}
	return seeds, 13
}

// checkSameView fails unless decodeView(b, "c", prev) has the outcome of
// DecodeSnapshot then viewOf.
func checkSameView(t *testing.T, b []byte, prev *clusterView) snapView {
	t.Helper()
	got, gerr := decodeView(b, "c", prev)
	snap, werr := DecodeSnapshot(b)
	if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
		t.Fatalf("%x: decodeView error %v, proto %v", b, gerr, werr)
	}
	if werr != nil {
		return got
	}
	if d := viewDiff(got, viewOf(snap, "c")); d != "" {
		t.Fatalf("%x: decodeView differs from proto: %s", b, d)
	}
	return got
}

func viewDiff(a, b snapView) string {
	if a.version != b.version || a.created != b.created || a.found != b.found || a.twice != b.twice {
		return fmt.Sprintf("head %d %d %v %v, want %d %d %v %v", a.version, a.created, a.found, a.twice, b.version, b.created, b.found, b.twice)
	}
	if (a.cw == nil) != (b.cw == nil) {
		return fmt.Sprintf("entry %v, want %v", a.cw != nil, b.cw != nil)
	}
	if a.cw == nil {
		return ""
	}
	if math.Float64bits(a.cw.shed) != math.Float64bits(b.cw.shed) || fmt.Sprint(a.cw.peers) != fmt.Sprint(b.cw.peers) ||
		len(a.cw.peers) != len(b.cw.peers) {
		return fmt.Sprintf("shed %v peers %q, want %v %q", a.cw.shed, a.cw.peers, b.cw.shed, b.cw.peers)
	}
	x := &clusterView{engines: a.cw.engines}
	if !sameEngines(x, &clusterView{engines: b.cw.engines}) {
		return fmt.Sprintf("engines %+v, want %+v", a.cw.engines, b.cw.engines)
	}
	return ""
}

// TestDecodeViewMatchesProto: decodeView and DecodeSnapshot+viewOf agree
// on plain and odd inputs, whatever entry was applied before, and the
// plain ones are read without proto.Unmarshal.
func TestDecodeViewMatchesProto(t *testing.T) {
	seeds, plain := decodeSeeds(t)
	for i, b := range seeds[:plain] {
		if _, ok := fastView(b, "c", nil); !ok {
			t.Errorf("seed %d: not read plainly", i)
		}
	}
	prevs := []*clusterView{nil}
	for _, b := range seeds {
		if v, err := decodeView(b, "c", nil); err == nil && v.cw != nil {
			prevs = append(prevs, v.cw)
		}
	}
	for _, prev := range prevs {
		for _, b := range seeds {
			checkSameView(t, b, prev)
		}
	}
	// Random corruptions of a plain snapshot.
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		b := bytes.Clone(seeds[r.IntN(plain)])
		if len(b) == 0 {
			continue
		}
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		checkSameView(t, b, prevs[r.IntN(len(prevs))])
	}
}

// TestDecodeViewReuses: the entry applied last is reused when its bytes
// come again, and its strings when they are equal.
func TestDecodeViewReuses(t *testing.T) {
	a := marshal(t, fullSnapshot(3, 3))
	v1 := checkSameView(t, a, nil)
	if v := checkSameView(t, a, v1.cw); v.cw != v1.cw {
		t.Error("same entry bytes: the entry was read again")
	}
	other := fullSnapshot(4, 3)
	other.Clusters[1].Weights[1].Weight = 0.2
	v2 := checkSameView(t, marshal(t, other), v1.cw)
	if v2.cw == v1.cw {
		t.Fatal("other weights: the entry was reused")
	}
	if n := testing.AllocsPerRun(20, func() { _, _ = decodeView(a, "c", v1.cw) }); n != 0 {
		t.Errorf("same entry: %v allocations", n)
	}
	if n := testing.AllocsPerRun(20, func() { _, _ = decodeView(marshal(t, other), "c", v1.cw) }); n > 8 {
		t.Errorf("same engines, other weights: %v allocations (strings not reused?)", n)
	}
}

// TestSameAsMatchesProtoEqual: sameAs is proto.Equal on the entries.
func TestSameAsMatchesProtoEqual(t *testing.T) {
	seeds, _ := decodeSeeds(t)
	var views []*clusterView
	for _, b := range seeds {
		if v, err := decodeView(b, "c", nil); err == nil && v.cw != nil {
			views = append(views, v.cw)
			if snap, err := DecodeSnapshot(b); err == nil {
				views = append(views, viewOf(snap, "c").cw)
			}
		}
	}
	for _, a := range views {
		for _, b := range views {
			if got, want := a.sameAs(b), proto.Equal(a.message(), b.message()); got != want {
				t.Fatalf("sameAs %v, proto.Equal %v", got, want)
			}
		}
	}
}

// FuzzDecodeView checks decodeView against DecodeSnapshot and viewOf on
// every input, with no entry applied before and with a plain one.
func FuzzDecodeView(f *testing.F) {
	seeds, _ := decodeSeeds(f)
	for _, b := range seeds {
		f.Add(b)
	}
	prev, err := decodeView(seeds[0], "c", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v := checkSameView(t, b, nil)
		checkSameView(t, b, prev.cw)
		if v.cw != nil {
			checkSameView(t, b, v.cw)
		}
	})
}

// TestDecodeViewDistrustsMadeEntries: an entry made in the process (an
// initial snapshot, whose strings nobody checked) lends decodeView no
// string, so bad UTF-8 on the wire is refused even when it repeats it.
func TestDecodeViewDistrustsMadeEntries(t *testing.T) {
	made := &schemas.WeightSnapshot{Version: 1, Clusters: []*schemas.ClusterWeights{{Cluster: "c",
		Weights: []*schemas.EngineWeight{{EngineId: "\xff", EndpointUrl: "http://a", Weight: 1}}}}}
	held := viewOf(made, "c").cw
	w := protowire.AppendTag(nil, 1, protowire.BytesType)
	w = protowire.AppendString(w, "\xff")
	w = protowire.AppendTag(w, 2, protowire.BytesType)
	w = protowire.AppendString(w, "http://a")
	c := protowire.AppendTag(nil, 1, protowire.BytesType)
	c = protowire.AppendString(c, "c")
	c = protowire.AppendTag(c, 2, protowire.BytesType)
	c = protowire.AppendBytes(c, w)
	b := protowire.AppendTag(nil, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 2)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, c)
	if _, err := DecodeSnapshot(b); err == nil {
		t.Fatal("proto took bad UTF-8")
	}
	checkSameView(t, b, held)
}
