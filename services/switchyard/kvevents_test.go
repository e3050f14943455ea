package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/kvevents"
)

// kvRecords reads the relay's records from Kafka as they come.
type kvRecords struct {
	cl  *kgo.Client
	got []*schemas.KVEventBatch
}

// waitFor polls until cond holds of the records read so far.
func (r *kvRecords) waitFor(t *testing.T, ctx context.Context, what string, cond func([]*schemas.KVEventBatch) bool) {
	t.Helper()
	for !cond(r.got) {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := r.cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			t.Fatalf("%s: not seen in %d records", what, len(r.got))
		}
		for _, rec := range fs.Records() {
			var b schemas.KVEventBatch
			if err := proto.Unmarshal(rec.Value, &b); err != nil {
				t.Fatalf("record at offset %d: %v", rec.Offset, err)
			}
			if string(rec.Key) != b.EngineId {
				t.Fatalf("record keyed %q for engine %q", rec.Key, b.EngineId)
			}
			r.got = append(r.got, &b)
		}
	}
}

// engineBatches fetches every batch an engine still buffers from its
// replay socket, by sequence number.
func engineBatches(t *testing.T, ctx context.Context, ep string) map[int64]kvevents.Batch {
	t.Helper()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(ep); err != nil {
		t.Fatal(err)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, make([]byte, 8))); err != nil {
		t.Fatal(err)
	}
	out := map[int64]kvevents.Batch{}
	for {
		msg, err := d.Recv()
		if err != nil {
			t.Fatalf("replay from %s: %v", ep, err)
		}
		frames := msg.Frames[1:] // the empty delimiter
		if len(frames) == 2 && int64(binary.BigEndian.Uint64(frames[0])) == -1 {
			return out
		}
		b, err := kvevents.ParseMessage(frames)
		if err != nil {
			t.Fatal(err)
		}
		out[b.Seq] = b
	}
}

// eventString and recordEventString describe an event the same way from
// the engine's batch and from the relay's record.
func eventString(e kvevents.Event) string {
	var hs []string
	for _, h := range e.BlockHashes {
		hs = append(hs, hex.EncodeToString(h))
	}
	return fmt.Sprintf("%s parent=%x %s", e.Kind, []byte(e.ParentHash), strings.Join(hs, ","))
}

func recordEventString(e *schemas.KVEvent) string {
	kind := map[schemas.KVEventType]kvevents.Kind{
		schemas.KVEventType_KV_EVENT_TYPE_BLOCK_STORED:       kvevents.KindStored,
		schemas.KVEventType_KV_EVENT_TYPE_BLOCK_REMOVED:      kvevents.KindRemoved,
		schemas.KVEventType_KV_EVENT_TYPE_ALL_BLOCKS_CLEARED: kvevents.KindCleared,
	}[e.Type]
	ev := kvevents.Event{Kind: kind, ParentHash: e.ParentBlockHash}
	for _, h := range e.BlockHashes {
		ev.BlockHashes = append(ev.BlockHashes, h)
	}
	return eventString(ev)
}

// checkRecordsMatchEngine checks that each record of recs is the engine's
// batch of the same sequence number (rank, events, hashes, parents), and
// that the engine's batches from 0 store and remove as many blocks as its
// counters say (so the records report what the engine did).
func checkRecordsMatchEngine(t *testing.T, recs []*schemas.KVEventBatch, batches map[int64]kvevents.Batch, engineMetrics string) {
	t.Helper()
	for _, r := range recs {
		b, ok := batches[r.Sequence]
		if !ok {
			t.Fatalf("record of sequence %d: the engine has no such batch", r.Sequence)
		}
		if r.DataParallelRank == nil || *r.DataParallelRank != b.DataParallelRank || len(r.Events) != len(b.Events) {
			t.Fatalf("record %d: rank %v and %d events, the engine's batch rank %d and %d", r.Sequence, r.DataParallelRank, len(r.Events), b.DataParallelRank, len(b.Events))
		}
		for i, e := range r.Events {
			if got, want := recordEventString(e), eventString(b.Events[i]); got != want {
				t.Fatalf("record %d event %d: %s, the engine sent %s", r.Sequence, i, got, want)
			}
		}
	}
	var stored, removed int
	for seq := range int64(len(batches)) {
		b, ok := batches[seq]
		if !ok {
			t.Fatalf("the engine's replay buffer lacks batch %d of %d", seq, len(batches))
		}
		for _, e := range b.Events {
			switch e.Kind {
			case kvevents.KindStored:
				stored += len(e.BlockHashes)
			case kvevents.KindRemoved:
				removed += len(e.BlockHashes)
			}
		}
	}
	for name, n := range map[string]int{"stored": stored, "evicted": removed} {
		line := fmt.Sprintf(`switchyard_enginesim_kv_blocks_%s_total{model_name="switchyard-sim-8b"} %d`, name, n)
		if !strings.Contains(engineMetrics, line+"\n") {
			t.Fatalf("the engine's batches report %d blocks %s; its metrics do not say so (want %q)", n, name, line)
		}
	}
}

func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kvLoad sends n completions two at a time (so both replicas serve them),
// their prompts sharing 6 blocks and then distinct, from index from.
func kvLoad(t *testing.T, base string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i += 2 {
		errs := make(chan error, 2)
		for j := range 2 {
			go func() {
				prompt := strings.Repeat("shared ", 64)[:384] + strings.Repeat(fmt.Sprintf("prompt %03d ", i+j), 80)[:816]
				resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"`+prompt+`","max_tokens":20}`))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestKVEventsRelayedFromEnginesimProcesses runs enginesim (two replicas,
// a cache small enough to evict) publishing KV events, `switchyard
// kvevents` and Kafka: every record the relay publishes is the engine's
// batch of the same sequence number, event for event, and the engine's
// batches add up to the blocks its counters say it stored and evicted.
// Then the engine is killed and restarted on the same ports: the relay
// publishes a RESTART (or GAP) resync for it and goes on relaying the new
// process's batches, which again match.
func TestKVEventsRelayedFromEnginesimProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc := testenv.Kafka(t)
	seeds := kc.ListenAddrs()
	web, pub, replay, relayMetrics := freePort(t), freePort(t), freePort(t), freePort(t)
	env := append(os.Environ(), "SWITCHYARD_TEST_AS_MAIN=1")
	engineArgs := []string{"enginesim", "--listen", web, "--id", "sim", "--replicas", "2", "--kv-blocks", "64", "--time-scale", "20",
		"--kv-events-endpoint", "tcp://" + pub, "--kv-events-replay-endpoint", "tcp://" + replay}
	eng := spawn(t, ctx, env, "enginesim", engineArgs...)
	waitTCP(t, ctx, web)
	spawn(t, ctx, env, "kvevents", "kvevents", "--kafka-brokers", strings.Join(seeds, ","), "--topic-prefix", "kvtest",
		"--engines", "sim=tcp://"+pub+";replay=tcp://"+replay, "--reconnect", "50ms", "--metrics-listen", relayMetrics)
	waitTCP(t, ctx, relayMetrics)

	cl := testenv.Client(t, kc, kgo.ConsumeTopics(streams.TopicsFor("kvtest").KVEvents), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	recs := &kvRecords{cl: cl}
	base := "http://" + web

	// Until the relay's subscription takes, batches go nowhere: send load
	// until its first record (FIRST_CONTACT), then more.
	sent := 0
	recs.waitFor(t, ctx, "the relay's first record", func(got []*schemas.KVEventBatch) bool {
		if len(got) > 0 {
			return true
		}
		kvLoad(t, base, sent, 2)
		sent += 2
		return false
	})
	if got := recs.got[0].Resync; got != schemas.KVResyncReason_KV_RESYNC_REASON_FIRST_CONTACT {
		t.Fatalf("first record's resync %v, want FIRST_CONTACT", got)
	}
	kvLoad(t, base, sent, 16)
	sent += 16
	metrics := scrapeText(t, base+"/metrics")
	batches := engineBatches(t, ctx, "tcp://"+replay)
	last := int64(len(batches) - 1)
	recs.waitFor(t, ctx, fmt.Sprintf("the record of batch %d", last), func(got []*schemas.KVEventBatch) bool {
		return len(got) > 0 && got[len(got)-1].Sequence >= last
	})
	for i, r := range recs.got[1:] {
		if r.Resync != schemas.KVResyncReason_KV_RESYNC_REASON_UNSPECIFIED || r.Sequence != recs.got[i].Sequence+1 {
			t.Fatalf("record %d: sequence %d after %d, resync %v: want every batch in order", i+1, r.Sequence, recs.got[i].Sequence, r.Resync)
		}
	}
	checkRecordsMatchEngine(t, recs.got, batches, metrics)
	if !strings.Contains(metrics, "switchyard_enginesim_kv_blocks_evicted_total") || strings.Contains(metrics, `switchyard_enginesim_kv_blocks_evicted_total{model_name="switchyard-sim-8b"} 0`+"\n") {
		t.Fatal("the engine evicted nothing: the test checks no BlockRemoved")
	}
	before := len(recs.got)

	// Kill and restart the engine on the same ports.
	if err := eng.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-eng.done
	spawn(t, ctx, env, "enginesim (restarted)", engineArgs...)
	waitTCP(t, ctx, web)
	recs.waitFor(t, ctx, "a RESTART or GAP record after the engine's restart", func(got []*schemas.KVEventBatch) bool {
		for _, r := range got[before:] {
			if r.Resync == schemas.KVResyncReason_KV_RESYNC_REASON_RESTART || r.Resync == schemas.KVResyncReason_KV_RESYNC_REASON_GAP {
				return true
			}
		}
		kvLoad(t, base, sent, 2)
		sent += 2
		return false
	})
	var resync int
	for i, r := range recs.got[before:] {
		if r.Resync != schemas.KVResyncReason_KV_RESYNC_REASON_UNSPECIFIED {
			resync = before + i
			break
		}
	}
	kvLoad(t, base, sent, 6)
	metrics = scrapeText(t, base+"/metrics")
	batches = engineBatches(t, ctx, "tcp://"+replay)
	last = int64(len(batches) - 1)
	recs.waitFor(t, ctx, fmt.Sprintf("the record of the restarted engine's batch %d", last), func(got []*schemas.KVEventBatch) bool {
		r := got[len(got)-1]
		return len(got) > resync && r.Sequence >= last && r.Sequence < int64(len(batches))
	})
	checkRecordsMatchEngine(t, recs.got[resync:], batches, metrics)
	t.Logf("first engine: records of batches %d..%d; restarted engine: %v at batch %d, then up to %d",
		recs.got[0].Sequence, recs.got[before-1].Sequence, recs.got[resync].Resync, recs.got[resync].Sequence, recs.got[len(recs.got)-1].Sequence)
}
