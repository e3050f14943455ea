package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// sent is one record a consumer must decode.
type sent struct {
	topic, key string
	msg        proto.Message // nil for the JSON checkpoint
}

const auditTopic = "schema.audit" // weight snapshots travel by JetStream; a topic here so every type crosses Kafka

// records are one of each message the project writes, keyed uniquely.
func records(topics streams.Topics) []sent {
	return []sent{
		{topics.Signals, "e1", &schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "e1", Region: "eu", GpuClass: "h100",
			EventTimeUnixMs: 1793534430000, KvCacheUsage: 0.5, TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1}, Counts: []uint64{3, 4}}}},
		{topics.RoutingEvents, "r1", &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: "r1", Cluster: "eu", Tenant: "acme",
			AffinityKeyHash: 0xfedcba9876543210, Priority: schemas.Priority_PRIORITY_HIGH, PromptTokens: 100, OutputTokens: 7,
			FinishReason: "stop", EventTimeUnixMs: 1793534430000, CompletionTimeUnixMs: 1793534431000, Decision: schemas.DecisionReason_DECISION_REASON_RETRY,
			Tried: []*schemas.Attempt{{EngineId: "e2", Status: schemas.RequestStatus_REQUEST_STATUS_ERROR, FailureReason: schemas.FailureReason_FAILURE_REASON_SATURATED}, {EngineId: "e1", Status: schemas.RequestStatus_REQUEST_STATUS_OK}}}},
		{topics.Estimates, "engine/e1", &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{SchemaVersion: schemas.Version, EngineId: "e1",
			WindowEndUnixMs: 1793534430000, CapacityRps: 12.5, TtftProfile: &schemas.LatencyProfile{Points: []*schemas.ProfilePoint{{Utilization: 0.5, LatencyMs: 80}}}}}}},
		{topics.Estimates, "demand/eu", &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{SchemaVersion: schemas.Version, Cluster: "eu", DemandRps: 3}}}},
		{topics.Estimates, "network/eu/e1", &schemas.Estimate{Kind: &schemas.Estimate_Network{Network: &schemas.NetworkEstimate{SchemaVersion: schemas.Version, Cluster: "eu", EngineId: "e1", RttMs: 2}}}},
		{auditTopic, "snapshot", &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: 9, Clusters: []*schemas.ClusterWeights{{Cluster: "eu",
			Weights: []*schemas.EngineWeight{{EngineId: "e1", Weight: 1, Explanation: &schemas.Explanation{Binding: []string{"capacity"}}}}}}}},
		{process.CheckpointTopic("schema"), "proc", nil},
	}
}

// produce writes records to kc as the project's producers do: headers,
// and gzip batches (signals and estimates are gzip-compressed).
func produce(t *testing.T, kc *kfake.Cluster) []sent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := testenv.Client(t, kc, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	topics := streams.TopicsFor("schema")
	if err := streams.EnsureTopics(ctx, cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, -1, nil, auditTopic, process.CheckpointTopic("schema")); err != nil {
		t.Fatal(err)
	}
	rs := records(topics)
	for _, r := range rs {
		rec := &kgo.Record{Topic: r.topic, Key: []byte(r.key)}
		if r.msg == nil {
			rec.Value = []byte(`{"version":1,"watermark_unix_ms":1793534430000,"partitions":[]}`)
			rec.Headers = streams.Headers(schemas.ContentTypeJSON, process.CheckpointMessage)
		} else {
			b, err := proto.Marshal(r.msg)
			if err != nil {
				t.Fatal(err)
			}
			rec.Value, rec.Headers = b, streams.ProtoHeaders(r.msg)
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// exported runs `switchyard schema export` and returns the file.
func exported(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "switchyard.binpb")
	if err := run(context.Background(), []string{"export", "--out", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	return out
}

func topicsOf(rs []sent) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if !seen[r.topic] {
			seen[r.topic] = true
			out = append(out, r.topic)
		}
	}
	return out
}

// TestGoConsumerDecodesEveryMessage: a franz-go consumer group that
// knows no generated code reads every topic and decodes each record with
// dynamicpb from the exported descriptor set, by its message header, to
// the message that was sent.
func TestGoConsumerDecodesEveryMessage(t *testing.T) {
	kc := testenv.Kafka(t)
	rs := produce(t, kc)
	b, err := os.ReadFile(exported(t))
	if err != nil {
		t.Fatal(err)
	}
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &fds); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&fds)
	if err != nil {
		t.Fatal(err)
	}
	cons := testenv.Client(t, kc, kgo.ConsumerGroup("go-team"), kgo.ConsumeTopics(topicsOf(rs)...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	got := map[string]*kgo.Record{}
	for len(got) < len(rs) && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[r.Topic+"/"+string(r.Key)] = r })
	}
	types := map[string]bool{}
	for _, s := range rs {
		r := got[s.topic+"/"+s.key]
		if r == nil {
			t.Fatalf("record %s/%s not consumed", s.topic, s.key)
		}
		ct, _ := streams.Header(r, schemas.HeaderContentType)
		name, _ := streams.Header(r, schemas.HeaderMessage)
		if s.msg == nil {
			if ct != schemas.ContentTypeJSON || !json.Valid(r.Value) {
				t.Errorf("checkpoint: content-type %q, value %s", ct, r.Value)
			}
			continue
		}
		if ct != schemas.ContentTypeProtobuf {
			t.Errorf("%s: content-type %q", s.key, ct)
		}
		d, err := files.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Fatalf("%s: message header %q not in the descriptor set: %v", s.key, name, err)
		}
		dyn := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
		if err := proto.Unmarshal(r.Value, dyn); err != nil {
			t.Fatalf("%s: dynamicpb: %v", s.key, err)
		}
		// Same message: the dynamic one re-encoded decodes to what was sent.
		re, err := proto.MarshalOptions{Deterministic: true}.Marshal(dyn)
		if err != nil {
			t.Fatal(err)
		}
		back := s.msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(re, back); err != nil || !proto.Equal(back, s.msg) {
			t.Errorf("%s: decoded %v, sent %v (%v)", s.key, dyn, s.msg, err)
		}
		types[name] = true
	}
	for _, m := range schemas.TopLevel() {
		if !types[string(m.FullName())] {
			t.Errorf("%s never decoded", m.FullName())
		}
	}
}

// nodeExample returns the node binary and examples/node, or skips the
// test without them outside CI; in CI (CI set) that is a failure.
func nodeExample(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs("../../examples/node")
	if err != nil {
		t.Fatal(err)
	}
	node, err = exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "kafkajs"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node or examples/node/node_modules missing in CI (.ci/run installs them): %v", err)
		}
		t.Skipf("node or `npm ci` in examples/node missing: %v", err)
	}
	return node, dir
}

// consumeJS runs examples/node/consume.js with args and returns its
// stdout, stderr and exit error.
func consumeJS(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	node, dir := nodeExample(t)
	cmd := exec.CommandContext(ctx, node, append([]string{"consume.js"}, args...)...)
	cmd.Dir = dir
	var eb bytes.Buffer
	cmd.Stderr = &eb
	out, err := cmd.Output()
	return string(out), eb.String(), err
}

// TestNodeConsumerDecodesEveryMessage runs examples/node/consume.js
// (kafkajs + protobufjs, npm ci in .ci/run) against the same records:
// it reads the gzip batches and decodes every message type from the
// exported descriptor set. (services/demo's TestDemoEndToEnd runs it
// over every topic of a live demo.)
func TestNodeConsumerDecodesEveryMessage(t *testing.T) {
	nodeExample(t)
	kc := testenv.Kafka(t)
	rs := produce(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Second)
	defer cancel()
	out, stderr, err := consumeJS(t, ctx, "--brokers", strings.Join(kc.ListenAddrs(), ","), "--topics", strings.Join(topicsOf(rs), ","),
		"--descriptor", exported(t), "--group", "node-team", "--count", "7")
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr)
	}
	byKey := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if e, ok := v["_error"]; ok {
			t.Errorf("node could not decode: %v (%s)", e, l)
		}
		byKey[v["_kafka"].(map[string]any)["key"].(string)] = v
	}
	if len(byKey) != len(rs) {
		t.Fatalf("node decoded %d records, want %d:\n%s", len(byKey), len(rs), out)
	}
	checks := map[string]func(map[string]any) bool{
		"e1": func(v map[string]any) bool { return v["engine_id"] == "e1" && v["kv_cache_usage"] == 0.5 },
		"r1": func(v map[string]any) bool {
			return v["tenant"] == "acme" && v["affinity_key_hash"] == "18364758544493064720" && v["priority"] == "PRIORITY_HIGH" && len(v["tried"].([]any)) == 2
		},
		"engine/e1":     func(v map[string]any) bool { return v["engine"].(map[string]any)["capacity_rps"] == 12.5 },
		"demand/eu":     func(v map[string]any) bool { return v["demand"].(map[string]any)["demand_rps"] == 3.0 },
		"network/eu/e1": func(v map[string]any) bool { return v["network"].(map[string]any)["rtt_ms"] == 2.0 },
		"snapshot":      func(v map[string]any) bool { return v["version"] == "9" },
		"proc":          func(v map[string]any) bool { return v["version"] == 1.0 },
	}
	for key, ok := range checks {
		if v := byKey[key]; v == nil || !ok(v) {
			t.Errorf("%s decoded by node as %v", key, v)
		}
	}
}

// TestNodeConsumerFailsLoudly: examples/node/consume.js exits 1 with the
// reason on stderr for a topic that does not exist, a batch compressed
// with snappy (kafkajs has no codec for it without a plugin: the failure
// a snappy-compressed topic gave, 0 records and exit 0), a record that
// does not decode, and brokers it cannot reach; and reads to the end with
// --to-end and exits 0.
func TestNodeConsumerFailsLoudly(t *testing.T) {
	nodeExample(t)
	kc := testenv.Kafka(t)
	brokers := strings.Join(kc.ListenAddrs(), ",")
	desc := exported(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	write := func(topic string, compression kgo.CompressionCodec, recs ...*kgo.Record) {
		t.Helper()
		cl := testenv.Client(t, kc, kgo.ProducerBatchCompression(compression), kgo.DefaultProduceTopic(topic))
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sig := func(id string) *kgo.Record {
		m := &schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: id}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Key: []byte(id), Value: b, Headers: streams.ProtoHeaders(m)}
	}
	var good []*kgo.Record
	for i := range 40 {
		good = append(good, sig(strconv.Itoa(i)))
	}
	write("good", kgo.GzipCompression(), good...)
	write("snappy", kgo.SnappyCompression(), sig(strings.Repeat("s", 4096))) // compressible: kgo sends a batch uncompressed when the codec would not shrink it
	write("garbage", kgo.NoCompression(), sig("a"), &kgo.Record{Key: []byte("bad"), Value: []byte{0xff, 0xff, 0xff},
		Headers: streams.Headers(schemas.ContentTypeProtobuf, schemas.MessageName(&schemas.EngineSignal{}))})
	for _, tc := range []struct {
		name, brokers, topics, stderr string
	}{
		{"unknown topic", brokers, "good,missing", "no such topic: missing"},
		{"snappy batch", brokers, "snappy", "Snappy compression not implemented"},
		{"undecodable record", brokers, "garbage", "cannot decode garbage/"},
		{"no broker", "127.0.0.1:1", "good", "consume: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := consumeJS(t, ctx, "--brokers", tc.brokers, "--topics", tc.topics, "--descriptor", desc, "--to-end")
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1; stderr:\n%s", err, stderr)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr does not say %q:\n%s", tc.stderr, stderr)
			}
		})
	}
	t.Run("to the end", func(t *testing.T) {
		out, stderr, err := consumeJS(t, ctx, "--brokers", brokers, "--topics", "good", "--descriptor", desc, "--to-end")
		if err != nil {
			t.Fatalf("node: %v\n%s", err, stderr)
		}
		if n := strings.Count(out, "\n"); n != len(good) || !strings.Contains(stderr, "consume: 40 records from good") {
			t.Errorf("%d lines, stderr %q; want 40", n, stderr)
		}
	})
}
