package process

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// goldenRecords is a fixed, varied input (products rounded explicitly so
// that GOAMD64=v3 builds, which may fuse x*y+z, make the same input): 24 engines of four GPU classes
// with drifting load (some scraped twice as often, some unhealthy, some
// without histograms or max batch), three clusters' routing events of
// every status, a few undecodable, invalid and late records, and records
// a decoder must handle carefully (unknown fields, fields out of order,
// repeated fields, empty messages).
func goldenRecords(topics streams.Topics) []*kgo.Record {
	rng := rand.New(rand.NewPCG(7, 11))
	from := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	offs := map[tp]int64{}
	add := func(topic, key string, v []byte, at time.Time) {
		h := fnv.New32a()
		h.Write([]byte(key))
		k := tp{topic, int32(h.Sum32() % 3)}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: k.Partition, Offset: offs[k], Key: []byte(key), Value: v, Timestamp: at})
		offs[k]++
	}
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		return b
	}
	gpus := []string{"h100", "a100", "l4", "mi300"}
	statuses := []schemas.RequestStatus{schemas.RequestStatus_REQUEST_STATUS_OK, schemas.RequestStatus_REQUEST_STATUS_OK,
		schemas.RequestStatus_REQUEST_STATUS_OK, schemas.RequestStatus_REQUEST_STATUS_SHED, schemas.RequestStatus_REQUEST_STATUS_ERROR,
		schemas.RequestStatus_REQUEST_STATUS_CANCELED, schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR}
	const engines = 24
	i := 0
	for dt := time.Duration(0); dt < 75*time.Second; dt += 100 * time.Millisecond {
		at := from.Add(dt)
		for e := 0; e < engines; e++ {
			every := 2 * time.Second
			if e%4 == 1 {
				every = time.Second
			}
			if dt%every != time.Duration(e%5)*100*time.Millisecond {
				continue
			}
			id := fmt.Sprintf("g%02d", e)
			load := 0.5 + float64(0.45*sinV1(float64(dt)/float64(17*time.Second)+float64(e)))
			mb := uint32(32 + 32*(e%3))
			running := math.Round(load * float64(mb) * (1 + float64(rng.Float64()*0.2)))
			fin := math.Round(2 + float64(20*load*rng.Float64()))
			s := &schemas.EngineSignal{
				SchemaVersion: schemas.Version, EngineId: id, EndpointUrl: "http://" + id + ":8000", Region: []string{"us", "eu"}[e%2],
				GpuClass: gpus[e%4], Model: "m", EventTimeUnixMs: at.UnixMilli(), ReadyReplicas: uint32(e % 4),
				Health: schemas.Health_HEALTH_HEALTHY, RunningRequests: running, WaitingRequests: math.Max(0, math.Round((load-0.8)*40)),
				KvCacheUsage: math.Min(1, float64(load*0.9)+float64(rng.Float64()*0.1)), PrefixCacheHits: math.Round(rng.Float64() * 50), PrefixCacheQueries: 50 + math.Round(rng.Float64()*50),
				IntervalSeconds: every.Seconds(), RequestsFinished: fin, PromptTokens: fin * 400, GenerationTokens: fin * (80 + float64(e)),
				MaxBatch: mb, KvCapacityTokens: float64(mb) * 1024 * float64(e%3), // e%3 == 0: unknown
			}
			if e%7 == 3 {
				s.MaxBatch = 0
			}
			if e%6 == 5 && (dt/(10*time.Second))%2 == 1 {
				s.Health = schemas.Health_HEALTH_DEGRADED
			}
			if e == 11 && dt > 40*time.Second {
				s.Health, s.ReadyReplicas = schemas.Health_HEALTH_UNHEALTHY, 0
			}
			if e%5 != 4 && fin > 0 {
				ttft := 0.04 + float64(0.3*math.Max(0, load-0.6)) + float64(0.01*rng.Float64())
				s.TtftSeconds = &schemas.Histogram{Bounds: []float64{0.05, 0.1, 0.5}, Counts: []uint64{uint64(fin), 0, 0, 0}, Sum: fin * ttft, Count: uint64(fin)}
				s.TbotSeconds = &schemas.Histogram{Bounds: []float64{0.05, 0.1}, Counts: []uint64{uint64(fin), 0, 0}, Sum: fin * (0.015 + float64(0.02*load)), Count: uint64(fin)}
			}
			v := marshal(s)
			switch i % 97 {
			case 5: // an unknown field appended
				v = protowire.AppendVarint(protowire.AppendTag(v, 99, protowire.VarintType), 42)
			case 9: // engine_id repeated: the last one wins
				v = protowire.AppendString(protowire.AppendTag(v, 2, protowire.BytesType), id)
			case 13: // a histogram sent in two parts merges
				extra := marshal(&schemas.EngineSignal{TtftSeconds: &schemas.Histogram{Sum: 0.5, Count: 3}})
				v = append(v, extra...)
			}
			add(topics.Signals, id, v, at)
			i++
		}
		for c := 0; c < 3; c++ {
			if rng.IntN(10) >= 6-c {
				continue
			}
			cl := []string{"us", "eu", "ap"}[c]
			ev := &schemas.RoutingEvent{
				SchemaVersion: schemas.Version, RequestId: fmt.Sprintf("req-%d", i), Cluster: cl,
				EngineId: fmt.Sprintf("g%02d", rng.IntN(engines)), SnapshotVersion: uint64(dt / (5 * time.Second)), DecisionReason: "weighted",
				Attempts: 1, TtftMs: 60 + float64(100*rng.Float64()), MeanTbotMs: 20 + float64(10*rng.Float64()), PromptTokens: uint32(100 + rng.IntN(900)),
				OutputTokens: uint32(10 + rng.IntN(300)), Status: statuses[rng.IntN(len(statuses))], EventTimeUnixMs: at.UnixMilli(),
				E2EMs: 500 + float64(2000*rng.Float64()), Model: "m", HttpStatus: 200, Stream: i%2 == 0, CachedTokens: uint32(rng.IntN(100)),
			}
			if rng.IntN(3) > 0 {
				ev.EngineTtftMs = ev.TtftMs - 5 - 20*rng.Float64()
			}
			if i%41 == 0 {
				ev.EngineId = ""
			}
			v := marshal(ev)
			switch i % 89 {
			case 7:
				v = protowire.AppendBytes(protowire.AppendTag(v, 200, protowire.BytesType), []byte("future field"))
			case 11: // fields out of order: event time first
				v = append(protowire.AppendVarint(protowire.AppendTag(nil, 13, protowire.VarintType), uint64(at.UnixMilli())), v...)
			case 17: // cluster repeated: the last one wins
				v = protowire.AppendString(protowire.AppendTag(v, 3, protowire.BytesType), "ap")
			case 23: // a known field with another wire type is an unknown field
				v = protowire.AppendFixed64(protowire.AppendTag(v, 3, protowire.Fixed64Type), 1)
			}
			add(topics.RoutingEvents, cl, v, at)
			i++
		}
		switch dt {
		case 3 * time.Second:
			add(topics.Signals, "junk", []byte{0xff, 0xff, 0xff}, at)
			add(topics.RoutingEvents, "junk", []byte("not a protobuf"), at)
		case 7 * time.Second:
			add(topics.Signals, "g01", marshal(&schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "g01", EventTimeUnixMs: at.UnixMilli(), RunningRequests: math.NaN()}), at)
			add(topics.RoutingEvents, "us", marshal(&schemas.RoutingEvent{SchemaVersion: schemas.Version, Cluster: "us", EventTimeUnixMs: at.Add(time.Hour).UnixMilli()}), at)
			add(topics.RoutingEvents, "us", marshal(&schemas.RoutingEvent{SchemaVersion: schemas.Version, EventTimeUnixMs: at.UnixMilli()}), at)
			add(topics.Signals, "g02", marshal(&schemas.EngineSignal{SchemaVersion: schemas.Version + 1, EngineId: "g02", EventTimeUnixMs: at.UnixMilli()}), at)
			add(topics.Signals, "g03", nil, at)
			bad := []byte{0x12, 0x02, 0xff, 0xfe} // engine_id that is not UTF-8
			add(topics.Signals, "g03", bad, at)
			add(topics.RoutingEvents, "eu", []byte{0x1a, 0x02, 0xc3, 0x28}, at)
			add(topics.RoutingEvents, "eu", []byte{0x1a, 0x09, 'e'}, at) // truncated
		case 40 * time.Second:
			// Late: far behind the watermark.
			add(topics.Signals, "g04", marshal(&schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "g04", EventTimeUnixMs: from.UnixMilli()}), at)
			add(topics.RoutingEvents, "ap", marshal(&schemas.RoutingEvent{SchemaVersion: schemas.Version, Cluster: "ap", EventTimeUnixMs: from.UnixMilli()}), at)
		}
	}
	return recs
}

// TestGoldenEstimates pins every estimate of a fixed input byte for byte
// (by SHA-256) together with every record's outcome, so that speed work on
// decoding, windows and fits cannot change what the processor publishes.
// Regenerate with -update only for an intended change of the estimates.
func TestGoldenEstimates(t *testing.T) {
	topics := streams.TopicsFor("golden")
	core, err := NewCore(topics, specForBench(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	emit := func(fired []Fired) {
		for _, f := range fired {
			for _, e := range f.Estimates {
				b, err := estimate.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(w, "%d %s %x\n", f.End, estimate.Key(e), sha256.Sum256(b))
			}
		}
	}
	recs := goldenRecords(topics)
	for i, r := range recs {
		out, reason := core.Handle(r)
		if out != Accepted {
			// protobuf-go randomizes its error texts (a space or a
			// non-breaking space, per build); normalize.
			reason = strings.ReplaceAll(reason, "\u00a0", " ")
			fmt.Fprintf(w, "record %d %s/%d@%d outcome %d %s\n", i, r.Topic, r.Partition, r.Offset, out, reason)
		}
		if i%250 == 249 {
			emit(core.Fire())
		}
	}
	emit(core.Fire())
	w.Flush()
	path := filepath.Join("testdata", "golden_estimates.txt")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		gl, wl := bytes.Split(buf.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, x []byte
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				x = wl[i]
			}
			if !bytes.Equal(g, x) {
				t.Fatalf("estimates differ from %s at line %d:\n got  %s\n want %s", path, i+1, g, x)
			}
		}
	}
}

// sinV1 is math.Sin for 0 <= x < 2^29 as a GOAMD64=v1 build computes it
// (Go's Cephes polynomial, each product rounded explicitly): the standard
// library is compiled with the build's GOAMD64 too, and its fused sin
// differs in the last bits.
func sinV1(x float64) float64 {
	const (
		pi4a = 7.85398125648498535156e-1
		pi4b = 3.77489470793079817668e-8
		pi4c = 2.69515142907905952645e-15
	)
	sinC := [...]float64{1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
		-1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1}
	cosC := [...]float64{-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
		2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2}
	if x == 0 {
		return x
	}
	j := uint64(x * (4 / math.Pi))
	y := float64(j)
	if j&1 == 1 {
		j++
		y++
	}
	j &= 7
	z := ((x - float64(y*pi4a)) - float64(y*pi4b)) - float64(y*pi4c)
	sign := false
	if j > 3 {
		sign = true
		j -= 4
	}
	zz := z * z
	if j == 1 || j == 2 {
		// 1 - 0.5*zz + zz*zz*(((((c0*zz+c1)*zz+c2)*zz+c3)*zz+c4)*zz+c5)
		p := float64(cosC[0]*zz) + cosC[1]
		for _, k := range cosC[2:] {
			p = float64(p*zz) + k
		}
		y = 1.0 - float64(0.5*zz) + float64(zz*zz*p)
	} else {
		p := float64(sinC[0]*zz) + sinC[1]
		for _, k := range sinC[2:] {
			p = float64(p*zz) + k
		}
		y = z + float64(z*zz*p)
	}
	if sign {
		y = -y
	}
	return y
}
