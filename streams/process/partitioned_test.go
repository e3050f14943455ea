package process

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/control"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// runInstance runs a partitioned processor (cfg with Partitioned set) on
// its own client until the returned stop is called.
func runInstance(t *testing.T, kc *kfake.Cluster, cfg Config) (*Processor, func()) {
	t.Helper()
	cfg.Partitioned = true
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Client(t, kc, p.ClientOpts()...)
	return p, runUntilStopped(t, func(ctx context.Context) error { return p.Run(ctx, cl) }, cl.Close)
}

// newPartitioned returns the instance of a partitioned processor for
// cfg, for tests that set its hooks and run it themselves.
func newPartitioned(cfg Config) (*instance, error) {
	cfg.Partitioned = true
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return p.inst, nil
}

func runUntilStopped(t *testing.T, run func(context.Context) error, closeClient func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		err := run(ctx)
		closeClient()
		errc <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// produceParts writes recs to their own partitions under topics.
func produceParts(t *testing.T, cl *kgo.Client, recs []*kgo.Record) {
	t.Helper()
	var out []*kgo.Record
	for _, r := range recs {
		out = append(out, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Value: r.Value, Timestamp: r.Timestamp})
	}
	if err := cl.ProduceSync(context.Background(), out...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// expected is the estimates one Core computes over workloadRecords, by
// "key@end", with the checks of a run against them.
type expected struct {
	want     map[string][]byte
	check    func(t *testing.T, got map[string][]byte)
	complete func(c *collector) func() bool
}

// partitionedConfig is the test configuration of prefix.
func partitionedConfig(prefix string) Config {
	cfg := config(prefix)
	cfg.AllowedLateness = 3 * time.Second // above the input's spread across partitions
	return cfg
}

func expectedEstimates(t *testing.T) expected {
	t.Helper()
	mk := partitionedConfig
	// The estimates one Core computes, as "key@end".
	ref := workloadRecords(streams.TopicsFor("ref"), 3)
	want := coreEstimates(t, streams.TopicsFor("ref"), mk("ref").Spec(), ref)
	check := func(t *testing.T, got map[string][]byte) {
		t.Helper()
		n := 0
		for k, b := range want {
			if g, ok := got[k]; !ok || string(g) != string(b) {
				n++
				if n <= 3 {
					t.Errorf("%s: present %v, identical %v", k, ok, string(g) == string(b))
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
	}
	complete := func(c *collector) func() bool {
		return func() bool {
			got := map[string]bool{}
			for _, r := range c.snapshot() {
				e, err := estimate.DecodeEstimate(r.Value)
				if err == nil {
					got[fmt.Sprintf("%s@%d", r.Key, e.WindowEndUnixMs())] = true
				}
			}
			for k := range want {
				if !got[k] {
					return false
				}
			}
			return true
		}
	}

	return expected{want: want, check: check, complete: complete}
}

// TestInstancesMatchOneProcessor: the same input (three partitions per
// topic, routing events of every cluster in every partition) processed
// by one processor, and by partitioned instances whose membership
// changes mid-run (two start, a third joins, one stops) with a combiner,
// gives exactly the estimates one Core computes: none missing, none
// extra, byte for byte.
func TestInstancesMatchOneProcessor(t *testing.T) {
	kc := testenv.Kafka(t)
	mk := partitionedConfig
	exp := expectedEstimates(t)
	want, check, complete := exp.want, exp.check, exp.complete
	ok := map[string]bool{}
	t.Run("one processor", func(t *testing.T) {
		topics := streams.TopicsFor("one")
		ensure(t, kc, topics)
		cl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		produceParts(t, cl, workloadRecords(topics, 3))
		est := collect(t, kc, topics.Estimates)
		_, stop := start(t, kc, mk("one"))
		waitFor(20*time.Second, complete(est))
		stop()
		check(t, byWindow(t, est.snapshot()))
		ok["one"] = !t.Failed()
	})

	t.Run("three instances", func(t *testing.T) {
		topics := streams.TopicsFor("three")
		cfg := mk("three")
		ensure(t, kc, topics)
		cl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		recs := workloadRecords(topics, 3)
		n := len(recs)
		produceParts(t, cl, recs[:n/3])
		est := collect(t, kc, topics.Estimates)
		parts := collect(t, kc, PartialsTopic(cfg.TopicPrefix))
		ccl := testenv.Client(t, kc, CombinerClientOpts(cfg)...)
		runUntilStopped(t, func(ctx context.Context) error { return RunCombiner(ctx, ccl, cfg) }, ccl.Close)
		a, stopA := runInstance(t, kc, cfg)
		b, _ := runInstance(t, kc, cfg)
		published := func(min int) func() bool { return func() bool { return len(est.snapshot()) >= min } }
		testenv.Eventually(t, 20*time.Second, published(1), "first windows published by two instances")
		c, _ := runInstance(t, kc, cfg) // joins: partitions move to it
		all := 3 * len(topics.Inputs()) // ensure: 3 partitions per topic
		testenv.Eventually(t, 20*time.Second, func() bool { return c.inst.owned() > 0 && a.inst.owned()+b.inst.owned()+c.inst.owned() == all }, "the third instance given partitions")
		produceParts(t, cl, recs[n/3:2*n/3])
		testenv.Eventually(t, 20*time.Second, published(len(want)/2), "windows published by three instances")
		movedA := a.inst.owned()
		stopA() // leaves: its partitions move
		testenv.Eventually(t, 20*time.Second, func() bool { return b.inst.owned()+c.inst.owned() == all }, "the stopped instance's partitions taken over")
		produceParts(t, cl, recs[2*n/3:])
		t.Logf("partitions moved: %d to the instance that joined, %d from the one that left", c.inst.owned(), movedA)
		waitFor(20*time.Second, complete(est))
		check(t, byWindow(t, est.snapshot()))
		// Stats: every record counted, by input, by an instance that
		// read it (one re-read after a hand-over counts again unless the
		// partition's checkpoint covers it); the workload is all valid
		// and in time; estimates are the combiner's.
		var signals, routing uint64
		for _, r := range recs {
			if r.Topic == topics.Signals {
				signals++
			} else {
				routing++
			}
		}
		var got Stats
		for _, p := range []*Processor{a, b, c} {
			st := p.Stats()
			got.SignalsConsumed += st.SignalsConsumed
			got.RoutingEventsConsumed += st.RoutingEventsConsumed
			got.Late += st.Late
			got.DeadLettered += st.DeadLettered
			got.EstimatesPublished += st.EstimatesPublished
		}
		if got.SignalsConsumed < signals || got.RoutingEventsConsumed < routing || got.Late+got.DeadLettered+got.EstimatesPublished != 0 {
			t.Errorf("instances' stats %+v; want at least %d signals and %d routing records, nothing late or dead-lettered, no estimates", got, signals, routing)
		}
		// Hand-overs leave no chunks behind: compacted, the partials
		// topic holds the latest headers' chunks only.
		var orphans, missing []string
		testenv.Eventually(t, 10*time.Second, func() bool {
			orphans, missing = liveChunks(t, parts.snapshot())
			return len(orphans) == 0 && len(missing) == 0
		}, "only the latest headers' chunks live")
		ok["three"] = !t.Failed()
	})

	// The optimizer's control loop over each run's estimates topic
	// publishes the same snapshots.
	t.Run("same snapshots", func(t *testing.T) {
		if !ok["one"] || !ok["three"] {
			t.Skip("a run above failed")
		}
		ends := map[string]bool{}
		for k := range want {
			ends[k[strings.LastIndexByte(k, '@'):]] = true
		}
		plans := map[string][][]byte{}
		for _, prefix := range []string{"one", "three"} {
			ocfg := control.Config{TopicPrefix: prefix, Settle: 50 * time.Millisecond, Settings: plan.Settings{Clusters: []string{"ap", "eu", "us"}}}
			st := &memStore{}
			o, err := control.New(testenv.Client(t, kc, control.ClientOpts(ocfg)...), st, ocfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := runUntilStopped(t, o.Run, func() {})
			testenv.Eventually(t, 20*time.Second, func() bool { return st.count() >= len(ends) }, "a snapshot per window of "+prefix)
			stop()
			plans[prefix] = st.all()
		}
		one, three := plans["one"], plans["three"]
		n := len(ends)
		if len(one) != n || len(three) != n {
			t.Fatalf("%d and %d snapshots, want one per window (%d)", len(one), len(three), n)
		}
		for i := range n {
			if string(one[i]) != string(three[i]) {
				t.Fatalf("snapshot %d of %d differs", i, n)
			}
		}
		t.Logf("%d snapshots identical", n)
	})
}

// waitFor polls cond until it holds or d passes (the caller then reports
// what is missing).
func waitFor(d time.Duration, cond func() bool) {
	for deadline := time.Now().Add(d); !cond() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// memStore is a control.Store in memory that keeps every snapshot.
type memStore struct {
	mu    sync.Mutex
	snaps [][]byte
}

func (m *memStore) Get(context.Context, string) (*schemas.WeightSnapshot, error) {
	return nil, errors.New("no snapshot")
}

func (m *memStore) Publish(_ context.Context, snap *schemas.WeightSnapshot) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(snap)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snaps = append(m.snaps, b)
	return nil
}

func (m *memStore) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.snaps)
}

func (m *memStore) all() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.snaps...)
}

// TestInstanceKilledLosesNothing: an instance killed mid-run (static
// members: it neither hands its partitions over nor leaves; the group
// gives them to the survivor after the session timeout) loses and
// doubles nothing: the survivor re-reads them from their checkpoints
// and the combiner waits for it, so the estimates are exactly one Core's.
//
// It waits out a session timeout (6 s, kfake's least).
func TestInstanceKilledLosesNothing(t *testing.T) {
	kc := testenv.Kafka(t)
	exp := expectedEstimates(t)
	cfg := partitionedConfig("killed")
	cfg.SessionTimeout = 6 * time.Second // kfake's least
	topics := streams.TopicsFor("killed")
	ensure(t, kc, topics)
	cl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := workloadRecords(topics, 3)
	n := len(recs)
	produceParts(t, cl, recs[:n/2])
	est := collect(t, kc, topics.Estimates)
	ccl := testenv.Client(t, kc, CombinerClientOpts(cfg)...)
	runUntilStopped(t, func(ctx context.Context) error { return RunCombiner(ctx, ccl, cfg) }, ccl.Close)
	acfg, bcfg := cfg, cfg
	acfg.InstanceID, bcfg.InstanceID = "killed-a", "killed-b"
	a, stopA := runInstance(t, kc, acfg)
	b, _ := runInstance(t, kc, bcfg)
	testenv.Eventually(t, 20*time.Second, func() bool {
		return a.inst.owned() > 0 && b.inst.owned() > 0 && len(est.snapshot()) > 0
	}, "both instances processing")
	a.inst.mu.Lock()
	a.inst.killed = true
	owned := len(a.inst.shards)
	a.inst.mu.Unlock()
	stopA()
	produceParts(t, cl, recs[n/2:])
	all := 3 * len(topics.Inputs()) // ensure: 3 partitions per topic
	testenv.Eventually(t, 20*time.Second, func() bool { return b.inst.owned() == all }, "the killed instance's partitions taken over")
	waitFor(20*time.Second, exp.complete(est))
	exp.check(t, byWindow(t, est.snapshot()))
	t.Logf("%d partitions taken from the killed instance", owned)
}

// TestCombinerRestart: a combiner stopped in the middle of publishing a
// batch of windows (its context cancelled once a third of the estimates
// are acknowledged, after it checkpointed an earlier batch; as when its
// pod is killed) and a new one started in its place publish together
// exactly the estimates one Core computes: no window missed; the new one
// starts from the checkpoint, and the windows published after it, which
// it publishes again, repeat byte for byte (byWindow fails on a repeat
// that differs). The input topics have four partitions, the records fill
// three: the idle fourth holds no window back.
func TestCombinerRestart(t *testing.T) {
	kc := testenv.Kafka(t)
	exp := expectedEstimates(t)
	cfg := partitionedConfig("restart")
	topics := streams.TopicsFor("restart")
	cl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := streams.EnsureTopics(context.Background(), cl, topics, 4); err != nil {
		t.Fatal(err)
	}
	recs := workloadRecords(topics, 3)
	n := len(recs)
	produceParts(t, cl, recs[:n/4])
	est := collect(t, kc, topics.Estimates)
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	hook := &killAfter{topic: topics.Estimates, at: int64(len(exp.want) / 3), kill: kill}
	ccl := testenv.Client(t, kc, append(CombinerClientOpts(cfg), kgo.WithHooks(hook))...)
	done := make(chan error, 1)
	go func() {
		done <- RunCombiner(ctx, ccl, cfg)
		ccl.Close()
	}()
	acfg, bcfg := cfg, cfg
	acfg.InstanceID, bcfg.InstanceID = "restart-a", "restart-b"
	runInstance(t, kc, acfg)
	runInstance(t, kc, bcfg)
	testenv.Eventually(t, 20*time.Second, func() bool { return len(est.snapshot()) > 0 }, "a first batch of windows published")
	produceParts(t, cl, recs[n/4:n/2])
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the killed combiner returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the combiner was not killed: %d estimates acknowledged", hook.n.Load())
	}
	acked := hook.n.Load()
	produceParts(t, cl, recs[n/2:3*n/4])
	ccl2 := testenv.Client(t, kc, CombinerClientOpts(cfg)...)
	runUntilStopped(t, func(ctx context.Context) error { return RunCombiner(ctx, ccl2, cfg) }, ccl2.Close)
	produceParts(t, cl, recs[3*n/4:])
	waitFor(20*time.Second, exp.complete(est))
	all := est.snapshot()
	got := byWindow(t, all)
	exp.check(t, got)
	again := int64(len(all) - len(got))
	if again == 0 || again >= acked {
		t.Errorf("%d estimates published again of %d acknowledged before the kill: want some (the batch cut by the kill) but not all (the checkpoint before it counts)", again, acked)
	}
	t.Logf("%d estimates; %d acknowledged before the kill, %d of them published again after the restart, identical", len(got), acked, again)
}

// killAfter cancels a combiner's context (kill) once at estimates on
// topic have been acknowledged.
type killAfter struct {
	topic string
	at    int64
	n     atomic.Int64
	kill  context.CancelFunc
}

func (k *killAfter) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err == nil && r.Topic == k.topic && k.n.Add(1) == k.at {
		k.kill()
	}
}

// TestInstanceReleasesStalledPartition: a signals partition whose records
// stop at half time and whose log ends in a transaction marker (written
// by a transactional producer; no consumer receives it as a record) has
// unread records forever. Its owner releases it once it has delivered
// nothing for stalledAfter (the single processor's rule), so the combiner
// publishes every window of the other partitions: exactly the estimates
// one Core computes over the same records.
func TestInstanceReleasesStalledPartition(t *testing.T) {
	kc := testenv.Kafka(t)
	cfg := partitionedConfig("stalled")
	topics := streams.TopicsFor("stalled")
	ensure(t, kc, topics)
	stalled := tp{topics.Signals, 2}
	all := workloadRecords(topics, 3)
	half := all[len(all)/2].Timestamp
	var plain, txn, used []*kgo.Record
	for _, r := range all {
		switch {
		case (tp{r.Topic, r.Partition}) != stalled:
			plain = append(plain, r)
		case r.Timestamp.Before(half):
			txn = append(txn, r)
		default:
			continue
		}
		used = append(used, r)
	}
	core, err := NewCore(topics, cfg.Spec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range used {
		core.Handle(r)
	}
	want := estimateSet{}
	want.add(t, core.Fire())

	tcl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("stalled-producer"))
	ctx := context.Background()
	if err := tcl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceParts(t, tcl, txn)
	if err := tcl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	produceParts(t, testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner())), plain)

	est := collect(t, kc, topics.Estimates)
	ccl := testenv.Client(t, kc, CombinerClientOpts(cfg)...)
	runUntilStopped(t, func(ctx context.Context) error { return RunCombiner(ctx, ccl, cfg) }, ccl.Close)
	for _, id := range []string{"stalled-a", "stalled-b"} {
		icfg := cfg
		icfg.InstanceID = id
		in, err := newPartitioned(icfg)
		if err != nil {
			t.Fatal(err)
		}
		in.stalledAfter = time.Second
		cl := testenv.Client(t, kc, in.clientOpts()...)
		runUntilStopped(t, func(ctx context.Context) error { return in.run(ctx, cl) }, cl.Close)
	}
	got := func() estimateSet {
		out := estimateSet{}
		for k, b := range byWindow(t, est.snapshot()) {
			key, end, _ := strings.Cut(k, "@")
			out[end+" "+key] = b
		}
		return out
	}
	waitFor(20*time.Second, func() bool { return len(got()) >= len(want) })
	got().diff(t, want)
	t.Logf("%d estimates", len(want))
}

// TestPartitionedTopicsReplicated: the topics partitioned processing
// creates (inputs, outputs, checkpoints, partials) get the configured
// replication (the instances' and the combiner's
// --kafka-replication-factor and --kafka-min-insync-replicas).
func TestPartitionedTopicsReplicated(t *testing.T) {
	kc := testenv.Kafka(t, kfake.NumBrokers(3))
	cl := testenv.Client(t, kc)
	cfg := partitionedConfig("repl")
	cfg.Replication = streams.Replication{Factor: 3, MinInsync: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ensurePartitionedTopics(ctx, cl, cfg); err != nil {
		t.Fatal(err)
	}
	names := append(streams.TopicsFor("repl").All(), CheckpointTopic("repl"), PartialsTopic("repl"))
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	isr := map[string]string{}
	for _, rc := range configs {
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" && c.Value != nil && c.Source == 1 { // set on the topic
				isr[rc.Name] = *c.Value
			}
		}
	}
	for _, name := range names {
		d := details[name]
		if d.Err != nil || len(d.Partitions) == 0 {
			t.Fatalf("topic %s: %v, %d partitions", name, d.Err, len(d.Partitions))
		}
		for _, p := range d.Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("topic %s partition %d: replicas %v, want 3", name, p.Partition, p.Replicas)
			}
		}
		if isr[name] != "2" {
			t.Errorf("topic %s: min.insync.replicas %q, want 2", name, isr[name])
		}
	}
}

// coreEstimates runs recs through one Core and returns the estimates it
// fires, marshalled, by "key@window end".
func coreEstimates(t *testing.T, topics streams.Topics, spec window.Spec, recs []*kgo.Record) map[string][]byte {
	t.Helper()
	core, err := NewCore(topics, spec, nil)
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
	return want
}
