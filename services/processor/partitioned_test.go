package processor

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/services/combiner"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// TestPartitionedCommands: two `switchyard processor --mode partitioned`
// instances and a `switchyard combiner` over 3 input partitions publish
// exactly the estimates one processor's Core computes over the same
// records, byte for byte, none missing or extra; each command returns
// within 10 s of its context ending (SIGINT).
func TestPartitionedCommands(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "part"
	topics := streams.TopicsFor(prefix)
	cl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumeTopics(topics.Estimates), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := context.Background()
	if err := streams.EnsureTopics(ctx, cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	recs := partitionedWorkload(t, topics)

	// The estimates one Core computes (the single processor's).
	cfg := process.Config{Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: 3 * time.Second}
	core, err := process.NewCore(topics, cfg.Spec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		core.Handle(r)
	}
	want := map[string][]byte{}
	for _, f := range core.Fire() {
		for _, e := range f.Estimates {
			b, err := estimate.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprintf("%s@%d", estimate.Key(e), f.End)] = b
		}
	}
	if len(want) < 100 {
		t.Fatalf("the workload gives only %d estimates", len(want))
	}

	common := []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", prefix, "--group", "part-group",
		"--window", "10s", "--slide", "5s", "--allowed-lateness", "3s", "--metrics-listen", "127.0.0.1:0"}
	var stops []func()
	start := func(name string, run func(context.Context, []string, *bytes.Buffer) error, args ...string) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		var stderr bytes.Buffer // written by the command only, read after it returns
		go func() { done <- run(cctx, append(append([]string{}, common...), args...), &stderr) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("%s: %v\n%s", name, err, stderr.String())
					}
				case <-time.After(10 * time.Second):
					t.Errorf("%s did not return within 10 s of its context ending", name)
				}
			})
		}
		t.Cleanup(stop)
		stops = append(stops, stop)
	}
	instance := func(ctx context.Context, args []string, stderr *bytes.Buffer) error {
		return Command().Run(ctx, args, &bytes.Buffer{}, stderr)
	}
	comb := func(ctx context.Context, args []string, stderr *bytes.Buffer) error {
		return combiner.Command().Run(ctx, args, &bytes.Buffer{}, stderr)
	}
	start("instance 1", instance, "--mode", "partitioned")
	start("instance 2", instance, "--mode", "partitioned")
	start("combiner", comb)
	// Both instances share the input partitions before any record is
	// produced.
	testenv.Eventually(t, 15*time.Second, func() bool {
		owned := groupAssignments(ctx, cl, "part-group")
		return len(owned) == 2 && owned[0] > 0 && owned[1] > 0 && owned[0]+owned[1] == 3*len(topics.Inputs())
	}, "two instances in the group, each owning input partitions")

	var out []*kgo.Record
	for _, r := range recs {
		out = append(out, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Value: r.Value, Timestamp: r.Timestamp})
	}
	if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	got := map[string][]byte{}
	deadline := time.Now().Add(20 * time.Second)
	for !hasAll(got, want) {
		if time.Now().After(deadline) {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got[fmt.Sprintf("%s@%d", r.Key, r.Timestamp.UnixMilli())] = r.Value
		})
	}
	for _, stop := range stops {
		stop()
	}
	n := 0
	for k, b := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, b) {
			n++
			if n <= 3 {
				t.Errorf("%s: present %v, identical %v", k, ok, bytes.Equal(g, b))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("extra estimate %s", k)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d estimates missing or different", n, len(want))
	}
	t.Logf("%d estimates, as one Core's", len(want))
}

// groupAssignments is the number of partitions each member of group is
// assigned.
func groupAssignments(ctx context.Context, cl *kgo.Client, group string) []int {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return nil
	}
	var out []int
	for _, g := range gs {
		for _, m := range g.Members {
			n := 0
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range a.Topics {
					n += len(tp.Partitions)
				}
			}
			out = append(out, n)
		}
	}
	return out
}

func hasAll(got, want map[string][]byte) bool {
	for k := range want {
		if _, ok := got[k]; !ok {
			return false
		}
	}
	return true
}

// partitionedWorkload is a minute of signals from 9 engines (each in one
// partition) and routing events from 3 clusters spread over the 3
// partitions, in event-time order within each partition.
func partitionedWorkload(t *testing.T, topics streams.Topics) []*kgo.Record {
	t.Helper()
	from := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	offs := map[string]int64{}
	var recs []*kgo.Record
	add := func(topic string, part int32, m proto.Message, at time.Time) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s/%d", topic, part)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Offset: offs[k], Value: b, Timestamp: at})
		offs[k]++
	}
	i := 0
	for d := time.Duration(0); d < time.Minute; d += 250 * time.Millisecond {
		at := from.Add(d)
		for e := range 9 {
			if d%(2*time.Second) != time.Duration(e)*200*time.Millisecond {
				continue
			}
			u := float64((int(d/time.Second) + 3*e) % 40)
			id := fmt.Sprintf("e%02d", e)
			add(topics.Signals, int32(e%3), &schemas.EngineSignal{
				SchemaVersion: schemas.Version, EngineId: id, EndpointUrl: "http://" + id, Region: "us", GpuClass: []string{"h100", "a100", "l4"}[e%3],
				EventTimeUnixMs: at.UnixMilli(), ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY,
				RunningRequests: u, KvCacheUsage: 0.2, PrefixCacheHits: 30, PrefixCacheQueries: 100,
				IntervalSeconds: 2, RequestsFinished: 5 + u/5, PromptTokens: (5 + u/5) * 500, GenerationTokens: (5 + u/5) * 100, MaxBatch: 64,
				TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{uint64(5 + u/5), 0, 0}, Sum: (5 + u/5) * (0.05 + u/1000), Count: uint64(5 + u/5)},
				TbotSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{uint64(5 + u/5), 0, 0}, Sum: (5 + u/5) * 0.02, Count: uint64(5 + u/5)},
			}, at)
		}
		for c, cluster := range []string{"us", "eu", "ap"} {
			if (i+c)%4 == 0 {
				continue
			}
			add(topics.RoutingEvents, int32(i%3), &schemas.RoutingEvent{
				SchemaVersion: schemas.Version, RequestId: fmt.Sprintf("r%d", i), Cluster: cluster, EngineId: fmt.Sprintf("e%02d", (i*7+c)%9),
				Status: schemas.RequestStatus_REQUEST_STATUS_OK, EventTimeUnixMs: at.UnixMilli(), Stream: true,
				TtftMs: 70 + float64(i%31), EngineTtftMs: 60, PromptTokens: 500, OutputTokens: uint32(50 + i%200),
			}, at)
			i++
		}
	}
	return recs
}
