package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// Kafka's batch compression codecs (RecordAttrs.CompressionType).
var codecs = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

// plainClientsReadEveryTopic checks, on the running demo's Kafka, that
// every Switchyard topic is readable by a client without plugins: a
// signal that fails validation is sent first, so that the dead-letter
// topic has a record; once the settings of both components, a checkpoint
// and the dead letter are there, every topic under the prefix is read
// to its end, by franz-go (every batch gzip or uncompressed) and by
// examples/node/consume.js (kafkajs and protobufjs, no plugins), which
// must read and decode 100% of the records and exit 0. Node is required
// in CI and skipped without it elsewhere.
func plainClientsReadEveryTopic(t *testing.T, ctx context.Context, kafka string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.ProducerBatchCompression(kgo.GzipCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics := streams.TopicsFor("")
	bad := &schemas.EngineSignal{SchemaVersion: schemas.Version, EventTimeUnixMs: time.Now().UnixMilli()} // no engine_id: dead-lettered
	v, err := proto.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Signals, Key: []byte("outside-invalid"), Value: v, Headers: streams.ProtoHeaders(bad)}).FirstErr(); err != nil {
		t.Fatalf("producing an invalid signal: %v", err)
	}
	adm := kadm.NewClient(cl)
	// Wait until every kind of record the demo writes is there.
	want := map[string]int64{topics.Signals: 1, topics.RoutingEvents: 1, topics.Estimates: 1, topics.DeadLetter: 1,
		process.CheckpointTopic(""): 1, settings.Topic(""): 2}
	var starts, ends kadm.ListedOffsets
	for {
		starts, ends, err = offsets(ctx, adm)
		if err == nil {
			var short []string
			for topic, n := range want {
				if sum := count(starts, ends, topic); sum < n {
					short = append(short, fmt.Sprintf("%s %d/%d", topic, sum, n))
				}
			}
			if len(short) == 0 {
				break
			}
			err = fmt.Errorf("too few records: %v", short)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the demo's topics never all held records: %v", err)
		case <-time.After(200 * time.Millisecond): // poll interval
		}
	}
	var names []string
	total := int64(0)
	for topic := range ends {
		names = append(names, topic)
		total += count(starts, ends, topic)
	}
	slices.Sort(names)
	t.Logf("%d records on %d topics: %v", total, len(names), names)

	// franz-go: the codec of every batch.
	assign := map[string]map[int32]kgo.Offset{}
	left := map[tp]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > s.Offset {
			if assign[o.Topic] == nil {
				assign[o.Topic] = map[int32]kgo.Offset{}
			}
			assign[o.Topic][o.Partition] = kgo.NewOffset().At(s.Offset)
			left[tp{o.Topic, o.Partition}] = o.Offset
		}
	})
	sizes := &batchSizes{by: map[string][2]int{}}
	rd, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.ConsumePartitions(assign), kgo.WithHooks(sizes))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	byCodec := map[string]map[string]int{}
	for len(left) > 0 && ctx.Err() == nil {
		fs := rd.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) { t.Errorf("franz-go reading %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			end, ok := left[k]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(left, k)
			}
			c := "unknown"
			if i := int(r.Attrs.CompressionType()); i < len(codecs) {
				c = codecs[i]
			}
			if byCodec[r.Topic] == nil {
				byCodec[r.Topic] = map[string]int{}
			}
			byCodec[r.Topic][c]++
		})
	}
	if len(left) > 0 {
		t.Fatalf("franz-go did not reach the end of %v", left)
	}
	for topic, cs := range byCodec {
		for c, n := range cs {
			if c != "none" && c != "gzip" {
				t.Errorf("%s: %d records in %s batches: kafkajs cannot read them without a plugin (docs/topics.md)", topic, n, c)
			}
		}
	}
	t.Logf("batch codecs by topic: %v", byCodec)
	t.Logf("bytes as stored / uncompressed by topic: %v", sizes.by) // docs/topics.md#compression

	// kafkajs: every record, decoded.
	dir, err := filepath.Abs("../../examples/node")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "kafkajs"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node or examples/node/node_modules missing in CI (.ci/run installs them): %v", err)
		}
		t.Logf("node or `npm ci` in examples/node missing, skipping kafkajs: %v", err)
		return
	}
	desc := filepath.Join(t.TempDir(), "switchyard.binpb")
	if err := os.WriteFile(desc, schemas.DescriptorSet(), 0o644); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(nctx, node, "consume.js", "--brokers", kafka, "--topics", strings.Join(names, ","),
		"--descriptor", desc, "--group", "demo-node-team", "--to-end")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("consume.js over every topic: %v\n%s", err, stderr.String())
	}
	seen := map[tp]map[int64]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec struct {
			Kafka struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
			} `json:"_kafka"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("consume.js printed %q: %v", sc.Text(), err)
		}
		k := tp{rec.Kafka.Topic, rec.Kafka.Partition}
		if seen[k] == nil {
			seen[k] = map[int64]bool{}
		}
		seen[k][rec.Kafka.Offset] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var missed []string
	read := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		for off := s.Offset; off < o.Offset; off++ {
			if seen[tp{o.Topic, o.Partition}][off] {
				read[o.Topic]++
			} else if len(missed) < 10 {
				missed = append(missed, fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, off))
			}
		}
	})
	for _, topic := range names {
		if n := count(starts, ends, topic); read[topic] != n {
			t.Errorf("kafkajs read %d of the %d records of %s", read[topic], n, topic)
		}
	}
	if len(missed) > 0 {
		t.Errorf("kafkajs never printed %v (first 10)\nstderr:\n%s", missed, stderr.String())
	}
	t.Logf("kafkajs read %v", read)
}

// batchSizes sums the bytes of the batches a client reads, as stored
// (compressed) and uncompressed, per topic.
type batchSizes struct {
	mu sync.Mutex
	by map[string][2]int
}

func (b *batchSizes) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.by[topic]
	b.by[topic] = [2]int{s[0] + m.CompressedBytes, s[1] + m.UncompressedBytes}
}

var _ kgo.HookFetchBatchRead = (*batchSizes)(nil)

// offsets lists the start and end offsets of every Switchyard topic
// (the default prefix).
func offsets(ctx context.Context, adm *kadm.Client) (starts, ends kadm.ListedOffsets, err error) {
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, topic := range td.Names() {
		if strings.HasPrefix(topic, streams.DefaultPrefix+".") {
			names = append(names, topic)
		}
	}
	if len(names) == 0 {
		return nil, nil, errors.New("no topics yet")
	}
	if starts, err = adm.ListStartOffsets(ctx, names...); err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, err
	}
	if ends, err = adm.ListEndOffsets(ctx, names...); err == nil {
		err = ends.Error()
	}
	return starts, ends, err
}

// count is the number of records of topic between starts and ends.
func count(starts, ends kadm.ListedOffsets, topic string) int64 {
	n := int64(0)
	for p, o := range ends[topic] {
		if s, ok := starts.Lookup(topic, p); ok && o.Offset > s.Offset {
			n += o.Offset - s.Offset
		}
	}
	return n
}
