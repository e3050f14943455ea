package process

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestTakeoverDeletesOrphanedChunks: three instances in turn own every
// input partition and are killed in the middle of a publication (no
// hand-over): after the chunks (before their headers), after the headers
// (before the checkpoints), after the checkpoints (before the tombstones
// of the replaced chunks). Each kill leaves chunks no latest header
// names, checked on the partials topic compacted (latest value per key,
// tombstoned keys gone). The next owner deletes them when it takes the
// partitions over, so that once a fourth instance has run to the end the
// compacted topic holds exactly the latest headers' chunks, none
// missing; and the estimates are exactly one Core's, byte for byte.
func TestTakeoverDeletesOrphanedChunks(t *testing.T) {
	kc := testenv.Kafka(t)
	exp := expectedEstimates(t)
	cfg := partitionedConfig("orphans")
	topics := streams.TopicsFor("orphans")
	ensure(t, kc, topics)
	cl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := workloadRecords(topics, 3)
	slice := func(i int) []*kgo.Record { return recs[i*len(recs)/8 : (i+1)*len(recs)/8] }
	est := collect(t, kc, topics.Estimates)
	parts := collect(t, kc, PartialsTopic(cfg.TopicPrefix))
	ccl := testenv.Client(t, kc, CombinerClientOpts(cfg)...)
	runUntilStopped(t, func(ctx context.Context) error { return RunCombiner(ctx, ccl, cfg) }, ccl.Close)

	prev := map[string]bool{} // the chunks the last kill orphaned
	for i, step := range []string{"chunks", "header", "checkpoint"} {
		produceParts(t, cl, slice(2*i))
		in, err := newPartitioned(cfg)
		if err != nil {
			t.Fatal(err)
		}
		in.publishEvery = 100 * time.Millisecond
		// The hook runs under the instance's lock, one call at a time.
		// Once a publication with chunks has been published, it kills the
		// instance after the step: after the chunks, in a publication
		// that wrote some (they are named by no header); after the header
		// or the checkpoint, in one that replaces chunks (the replaced
		// ones are named no more).
		published, killed := make(chan struct{}), make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		var cur int // chunks of this publication
		in.crash = func(s string, n, replaced int) bool {
			if s == "chunks" {
				cur = n
			}
			if s == step && isClosed(published) && (step == "chunks" && cur > 0 || step != "chunks" && replaced > 0) {
				cancel()
				close(killed)
				return true
			}
			if s == "checkpoint" && cur > 0 && !isClosed(published) {
				close(published)
			}
			return false
		}
		icl := testenv.Client(t, kc, in.clientOpts()...)
		done := make(chan error, 1)
		go func() { done <- in.run(ctx, icl) }()
		wait := func(c chan struct{}, what string) {
			t.Helper()
			select {
			case <-c:
			case <-time.After(20 * time.Second):
				cancel()
				t.Fatalf("instance %d: %s: timed out", i, what)
			}
		}
		wait(published, "first publication")
		produceParts(t, cl, slice(2*i+1))
		wait(killed, "killed after the "+step)
		if err := <-done; err != nil {
			t.Fatalf("instance %d killed after the %s: Run returned %v", i, step, err)
		}
		icl.Close() // leaves the group without handing over (killed)
		orphans, _ := liveChunks(t, caughtUp(t, cl, parts, PartialsTopic(cfg.TopicPrefix)))
		if len(orphans) == 0 {
			t.Fatalf("killed after the %s: no chunk orphaned", step)
		}
		for _, k := range orphans {
			if prev[k] {
				t.Errorf("chunk %s orphaned by the kill before is still live after the partitions' takeover", k)
			}
		}
		t.Logf("killed after the %s: %d chunks orphaned", step, len(orphans))
		prev = map[string]bool{}
		for _, k := range orphans {
			prev[k] = true
		}
	}

	produceParts(t, cl, slice(6))
	runInstance(t, kc, cfg)
	produceParts(t, cl, slice(7))
	waitFor(20*time.Second, exp.complete(est))
	exp.check(t, byWindow(t, est.snapshot()))
	// The survivor still publishes: a header's tombstones follow it.
	var orphans, missing []string
	waitFor(10*time.Second, func() bool {
		orphans, missing = liveChunks(t, caughtUp(t, cl, parts, PartialsTopic(cfg.TopicPrefix)))
		return len(orphans) == 0 && len(missing) == 0
	})
	if len(orphans) > 0 || len(missing) > 0 {
		t.Fatalf("compacted partials topic: %d orphaned chunks (%v), %d missing (%v)", len(orphans), first(orphans), len(missing), first(missing))
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// caughtUp waits until c has collected topic (one partition) up to its
// log end as listed now, and returns what it collected.
func caughtUp(t *testing.T, cl *kgo.Client, c *collector, topic string) []*kgo.Record {
	t.Helper()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		t.Fatalf("end offset of %s: %v", topic, end.Err)
	}
	var recs []*kgo.Record
	testenv.Eventually(t, 10*time.Second, func() bool {
		recs = c.snapshot()
		return len(recs) > 0 && recs[len(recs)-1].Offset >= end.Offset-1
	}, fmt.Sprintf("%s collected up to offset %d", topic, end.Offset))
	return recs
}
