package streams_test

import (
	"context"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestEnsureTopicsReplicated: on a three-broker cluster, EnsureTopics with
// Replication{3, 2} creates every topic with three replicas per partition
// and min.insync.replicas 2; without it (the single-broker default) the
// topic carries no min.insync.replicas of its own.
func TestEnsureTopicsReplicated(t *testing.T) {
	kc := testenv.Kafka(t, kfake.NumBrokers(3))
	cl := testenv.Client(t, kc)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ha, plain := streams.TopicsFor("ha"), streams.TopicsFor("plain")
	if err := streams.EnsureTopics(ctx, cl, ha, 3, streams.Replication{Factor: 3, MinInsync: 2}); err != nil {
		t.Fatal(err)
	}
	if err := streams.EnsureTopics(ctx, cl, plain, 3); err != nil {
		t.Fatal(err)
	}
	details, err := adm.ListTopics(ctx, append(ha.All(), plain.All()...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ha.All() {
		d := details[name]
		if d.Err != nil || len(d.Partitions) == 0 {
			t.Fatalf("topic %s: %v, %d partitions", name, d.Err, len(d.Partitions))
		}
		for _, p := range d.Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("topic %s partition %d: replicas %v, want 3", name, p.Partition, p.Replicas)
			}
		}
	}
	configs, err := adm.DescribeTopicConfigs(ctx, append(ha.All(), plain.All()...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range configs {
		want := ""
		if _, isHA := map[string]bool{ha.Signals: true, ha.RoutingEvents: true, ha.RoutingArrivals: true, ha.Estimates: true, ha.DeadLetter: true, ha.KVEvents: true}[rc.Name]; isHA {
			want = "2"
		}
		got := ""
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" && c.Value != nil && c.Source == 1 { // DYNAMIC_TOPIC_CONFIG: set on the topic
				got = *c.Value
			}
		}
		if got != want {
			t.Errorf("topic %s: min.insync.replicas set on the topic %q, want %q", rc.Name, got, want)
		}
	}
	if err := streams.CreateTopic(ctx, cl, "bad", 1, nil, streams.Replication{Factor: 2, MinInsync: 3}); err == nil {
		t.Error("min.insync.replicas 3 over factor 2: no error")
	}
}

// TestProducersAckAllIdempotent: no franz-go client in the module turns
// off what docs/topics.md promises of every producer: acks=all (kgo's
// default RequiredAcks(AllISRAcks())) with idempotent writes (kgo's
// default; DisableIdempotentWrite turns it off). With min.insync.replicas
// 2 on three brokers, an acknowledged record is on two brokers, and a
// retried batch is not written twice.
func TestProducersAckAllIdempotent(t *testing.T) {
	eachKgoFile(t, func(path, src string) {
		if strings.Contains(src, "DisableIdempotentWrite") {
			t.Errorf("%s turns off idempotent writes", path)
		}
		for _, m := range requiredAcks.FindAllStringSubmatch(src, -1) {
			if m[1] != "kgo.AllISRAcks()" {
				t.Errorf("%s: RequiredAcks(%s), want kgo.AllISRAcks() (acks=all)", path, m[1])
			}
		}
	})
}

// TestProducersNeverSnappyLz4Zstd: no franz-go client in the module
// chooses a codec that kafkajs cannot read without a plugin
// (docs/topics.md#compression); gzip or none only. A client that sets no
// codec gets franz-go's default, snappy: services/demo's TestDemoEndToEnd
// checks the codec of every batch the running system wrote.
func TestProducersNeverSnappyLz4Zstd(t *testing.T) {
	eachKgoFile(t, func(path, src string) {
		for _, m := range compression.FindAllStringSubmatch(src, -1) {
			if m[1] != "kgo.GzipCompression()" && m[1] != "kgo.NoCompression()" {
				t.Errorf("%s: ProducerBatchCompression(%s), want kgo.GzipCompression() or kgo.NoCompression()", path, m[1])
			}
		}
		for _, codec := range []string{"SnappyCompression", "Lz4Compression", "ZstdCompression"} {
			if strings.Contains(src, "kgo."+codec) {
				t.Errorf("%s uses kgo.%s", path, codec)
			}
		}
	})
}

// eachKgoFile calls fn with every non-test Go file of the module that
// imports kgo.
func eachKgoFile(t *testing.T, fn func(path, src string)) {
	t.Helper()
	root := filepath.Join("..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		if !strings.Contains(src, "franz-go/pkg/kgo") {
			return nil
		}
		checked++
		fn(path, src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("found %d files using kgo: the walk missed the module", checked)
	}
}

var requiredAcks = regexp.MustCompile(`RequiredAcks\(([^()]*(?:\(\))?)\)`)

var compression = regexp.MustCompile(`ProducerBatchCompression\(([^()]*(?:\(\))?)`)

// TestNewReplicationChecksFlags: ints from flags become a Replication, or
// an error for a factor Kafka cannot hold or what Validate rejects.
func TestNewReplicationChecksFlags(t *testing.T) {
	for _, tc := range []struct {
		name              string
		factor, minInsync int
		want              streams.Replication
		ok                bool
	}{
		{"brokers' defaults", 0, 0, streams.Replication{}, true},
		{"three replicas, two in sync", 3, 2, streams.Replication{Factor: 3, MinInsync: 2}, true},
		{"largest factor", math.MaxInt16, 1, streams.Replication{Factor: math.MaxInt16, MinInsync: 1}, true},
		{"factor beyond int16", math.MaxInt16 + 1, 0, streams.Replication{}, false},
		{"more in sync than replicas", 2, 3, streams.Replication{}, false},
		{"negative", -1, 0, streams.Replication{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := streams.NewReplication(tc.factor, tc.minInsync)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("NewReplication(%d, %d) = %+v, %v; want %+v, ok %v", tc.factor, tc.minInsync, got, err, tc.want, tc.ok)
			}
		})
	}
}
