package tap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/tap"
)

// fullEvent is a routing event with every field set, a 64-bit hash above
// 2^53 and two attempts.
func fullEvent() *schemas.RoutingEvent {
	return &schemas.RoutingEvent{
		SchemaVersion: 1, RequestId: "r1", Cluster: "us-east", EngineId: "e2", SnapshotVersion: 1 << 40,
		DecisionReason: "retry", Attempts: 2, TtftMs: 12.5, MeanTbotMs: 0.25, PromptTokens: 100, OutputTokens: 20,
		Status: schemas.RequestStatus_REQUEST_STATUS_OK, EventTimeUnixMs: 1793534430123, E2EMs: 1e-7, Model: "m",
		HttpStatus: 200, Stream: true, EngineTtftMs: 3, CachedTokens: 64, NetworkRttMs: 1.5, Tenant: "acme",
		AffinityKeyHash: 0xfedcba9876543210, Priority: schemas.Priority_PRIORITY_HIGH, FinishReason: "stop",
		EngineRegion: "us-east-1", EngineGpuClass: "h100", CompletionTimeUnixMs: 1793534431123,
		Tried: []*schemas.Attempt{
			{EngineId: "e1", Status: schemas.RequestStatus_REQUEST_STATUS_ERROR, FailureReason: schemas.FailureReason_FAILURE_REASON_SATURATED, HttpStatus: 429, DurationMs: 2},
			{EngineId: "e2", Status: schemas.RequestStatus_REQUEST_STATUS_OK, HttpStatus: 200, DurationMs: 900},
		},
		Decision: schemas.DecisionReason_DECISION_REASON_RETRY,
	}
}

func messages() []proto.Message {
	return []proto.Message{
		fullEvent(),
		&schemas.RoutingEvent{}, // every field zero
		&schemas.EngineSignal{SchemaVersion: 1, EngineId: "e1", EventTimeUnixMs: -5, KvCacheUsage: math.NaN(), RunningRequests: math.Inf(1),
			TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1e22}, Counts: []uint64{1, 2, math.MaxUint64}}},
		&schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{EngineId: "e1", WindowEndUnixMs: 99,
			TtftProfile: &schemas.LatencyProfile{Points: []*schemas.ProfilePoint{{Utilization: 0.5, LatencyMs: 20}}}}}},
		&schemas.Estimate{},
		&schemas.WeightSnapshot{Version: math.MaxUint64, Clusters: []*schemas.ClusterWeights{{Cluster: "c", Weights: []*schemas.EngineWeight{
			{EngineId: "e", Weight: 1, Explanation: &schemas.Explanation{Binding: []string{"capacity"}}}}}},
			Signature: []byte{0, 1, 0xff}},
	}
}

// TestAppendJSONMatchesProtojson: AppendJSON's output is valid JSON
// that protojson reads back into the same message, has the same keys as
// protojson's EmitUnpopulated output with proto names, and writes 64-bit
// integers as numbers.
func TestAppendJSONMatchesProtojson(t *testing.T) {
	for _, m := range messages() {
		got := tap.AppendJSON(nil, m.ProtoReflect())
		if !json.Valid(got) {
			t.Fatalf("invalid JSON %s", got)
		}
		back := m.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal(got, back); err != nil {
			t.Fatalf("protojson cannot read %s: %v", got, err)
		}
		if !proto.Equal(back, m) {
			t.Fatalf("round trip of %s\ngot  %v\nwant %v", got, back, m)
		}
		ref, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := keys(t, got), keys(t, ref); g != w {
			t.Errorf("keys\n%s\nwant\n%s", g, w)
		}
	}
	got := string(tap.AppendJSON(nil, fullEvent().ProtoReflect()))
	for _, want := range []string{`"event_time_unix_ms":1793534430123`, `"affinity_key_hash":18364758544493064720`,
		`"snapshot_version":1099511627776`, `"priority":"PRIORITY_HIGH"`, `"schema_version":1,"request_id":"r1"`} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %s", got, want)
		}
	}
}

// keys lists the keys of every object in b, sorted within each object,
// depth first.
func keys(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			ks := make([]string, 0, len(x))
			for k := range x {
				ks = append(ks, k)
			}
			sortStrings(ks)
			sb.WriteString("{" + strings.Join(ks, ",") + "}")
			for _, k := range ks {
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return sb.String()
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// line is what a test reads of one tap line.
type line struct {
	RequestID string `json:"request_id"`
	EngineID  string `json:"engine_id"`
	Error     string `json:"_error"`
	Group     string `json:"group"`
	Kafka     struct {
		Topic     string            `json:"topic"`
		Partition int32             `json:"partition"`
		Offset    int64             `json:"offset"`
		Timestamp string            `json:"timestamp"`
		Key       string            `json:"key"`
		Headers   map[string]string `json:"headers"`
	} `json:"_kafka"`
}

func parse(t *testing.T, out string) []line {
	t.Helper()
	var ls []line
	for _, s := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if s == "" {
			continue
		}
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("line %q: %v", s, err)
		}
		ls = append(ls, l)
	}
	return ls
}

// TestTapRange reads ranges of a three-partition topic by time, key and
// partition, and decodes records with and without headers, a JSON
// checkpoint and an undecodable value.
func TestTapRange(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	topics := streams.TopicsFor("tap")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := streams.EnsureTopics(ctx, cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "tap.processor.checkpoints"); err != nil {
		t.Fatal(err)
	}
	t0 := time.UnixMilli(1_793_534_430_000)
	var recs []*kgo.Record
	for i := range 30 {
		ev := &schemas.RoutingEvent{SchemaVersion: 1, RequestId: "r" + string(rune('a'+i%26)) + string(rune('0'+i/26)), EngineId: "e1"}
		b, _ := proto.Marshal(ev)
		r := &kgo.Record{Topic: topics.RoutingEvents, Key: []byte(ev.RequestId), Value: b, Timestamp: t0.Add(time.Duration(i) * time.Second)}
		if i%2 == 0 {
			r.Headers = streams.ProtoHeaders(ev)
		}
		recs = append(recs, r)
	}
	bad := &kgo.Record{Topic: topics.RoutingEvents, Key: []byte("zz"), Value: []byte{0xff, 0xff}, Timestamp: t0.Add(40 * time.Second),
		Headers: streams.ProtoHeaders(&schemas.RoutingEvent{})}
	ckpt := &kgo.Record{Topic: "tap.processor.checkpoints", Key: []byte("g"), Value: []byte(`{"group":"g","watermark_unix_ms":5}`), Timestamp: t0,
		Headers: streams.Headers(schemas.ContentTypeJSON, "switchyard.v1.Checkpoint")}
	if err := cl.ProduceSync(ctx, append(recs, bad, ckpt)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	run := func(o tap.Options) []line {
		t.Helper()
		rd := testenv.Client(t, kc)
		var out bytes.Buffer
		n, err := tap.Tap(ctx, rd, o, &out)
		if err != nil {
			t.Fatal(err)
		}
		ls := parse(t, out.String())
		if n != len(ls) {
			t.Fatalf("Tap says %d records, wrote %d lines", n, len(ls))
		}
		return ls
	}
	all := run(tap.Options{Topic: topics.RoutingEvents, Partition: -1})
	if len(all) != 31 {
		t.Fatalf("%d records from beginning to end, want 31", len(all))
	}
	errs := 0
	for _, l := range all {
		if l.Error != "" {
			errs++
			continue
		}
		if l.RequestID == "" || l.Kafka.Key != l.RequestID || l.Kafka.Topic != topics.RoutingEvents || l.EngineID != "e1" {
			t.Errorf("line %+v", l)
		}
	}
	if errs != 1 {
		t.Errorf("%d undecodable lines, want 1", errs)
	}
	from, to := t0.Add(10*time.Second), t0.Add(20*time.Second)
	ranged := run(tap.Options{Topic: topics.RoutingEvents, From: tap.At(from), To: tap.At(to), Partition: -1})
	if len(ranged) != 10 {
		t.Fatalf("%d records in [10s, 20s), want 10", len(ranged))
	}
	for _, l := range ranged {
		ts, err := time.Parse(time.RFC3339Nano, l.Kafka.Timestamp)
		if err != nil || ts.Before(from) || !ts.Before(to) {
			t.Errorf("timestamp %q outside the range", l.Kafka.Timestamp)
		}
	}
	if k := run(tap.Options{Topic: topics.RoutingEvents, Key: "rc0", HasKey: true, Partition: -1}); len(k) != 1 || k[0].RequestID != "rc0" {
		t.Errorf("--key rc0: %+v", k)
	}
	p1 := run(tap.Options{Topic: topics.RoutingEvents, Partition: 1})
	for _, l := range p1 {
		if l.Kafka.Partition != 1 {
			t.Errorf("--partition 1 gave %+v", l.Kafka)
		}
	}
	if len(p1) == 0 || len(p1) == len(all) {
		t.Errorf("%d of %d records on partition 1: keys by request id spread", len(p1), len(all))
	}
	if none := run(tap.Options{Topic: topics.RoutingEvents, From: tap.End(), Partition: -1}); len(none) != 0 {
		t.Errorf("from end to end: %d records", len(none))
	}
	ck := run(tap.Options{Topic: "tap.processor.checkpoints", Partition: -1})
	if len(ck) != 1 || ck[0].Group != "g" || ck[0].Kafka.Headers["content-type"] != "application/json" {
		t.Errorf("checkpoint %+v", ck)
	}
	if _, err := tap.Tap(ctx, testenv.Client(t, kc), tap.Options{Topic: topics.RoutingEvents, Partition: 7}, io.Discard); err == nil {
		t.Error("a partition the topic lacks is not an error")
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTapFollow: with Follow, records produced after Tap started are
// written, and Tap returns nil when its context ends.
func TestTapFollow(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	topics := streams.TopicsFor("follow")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := streams.EnsureTopics(ctx, cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	produce := func(id string) {
		ev := &schemas.EngineSignal{SchemaVersion: 1, EngineId: id}
		b, _ := proto.Marshal(ev)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Signals, Key: []byte(id), Value: b, Headers: streams.ProtoHeaders(ev)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce("before")
	fctx, stop := context.WithCancel(ctx)
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := tap.Tap(fctx, testenv.Client(t, kc), tap.Options{Topic: topics.Signals, From: tap.End(), Follow: true, Partition: -1}, &out)
		done <- err
	}()
	testenv.Eventually(t, 10*time.Second, func() bool {
		produce("after")
		return strings.Contains(out.String(), `"engine_id":"after"`)
	}, "a record produced while following is written")
	stop()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v", err)
	}
	if strings.Contains(out.String(), `"engine_id":"before"`) {
		t.Error("--from end wrote a record from before")
	}
}
