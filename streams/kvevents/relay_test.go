package kvevents

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// fakeEngine is a vLLM-style publisher made with go-zeromq/zmq4: a PUB
// socket and a ROUTER replay socket answering from every batch sent.
type fakeEngine struct {
	t        *testing.T
	pub      zmq4.Socket
	router   zmq4.Socket
	mu       sync.Mutex
	buffered map[int64][]byte
	replays  chan int64
}

func newFakeEngine(t *testing.T, ctx context.Context) *fakeEngine {
	t.Helper()
	f := &fakeEngine{t: t, pub: zmq4.NewPub(ctx), router: zmq4.NewRouter(ctx), buffered: map[int64][]byte{}, replays: make(chan int64, 16)}
	t.Cleanup(func() { f.pub.Close(); f.router.Close() })
	if err := f.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := f.router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeEngine) endpoints() (string, string) {
	return "tcp://" + f.pub.Addr().String(), "tcp://" + f.router.Addr().String()
}

// serveReplay answers one replay request from what was buffered (vLLM's
// current reply shape: [id, "", topic, seq, payload], ended by seq -1).
func (f *fakeEngine) serveReplay() {
	msg, err := f.router.Recv()
	if err != nil {
		return
	}
	if len(msg.Frames) != 3 {
		f.t.Errorf("replay request of %d frames", len(msg.Frames))
		return
	}
	id, start := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[2]))
	f.replays <- start
	f.mu.Lock()
	var seqs []int64
	for s := range f.buffered {
		if s >= start {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	var msgs []zmq4.Msg
	for _, s := range seqs {
		msgs = append(msgs, zmq4.NewMsgFrom(id, nil, []byte("kv"), seqFrame(s), f.buffered[s]))
	}
	f.mu.Unlock()
	for _, m := range msgs {
		_ = f.router.SendMulti(m)
	}
	_ = f.router.SendMulti(zmq4.NewMsgFrom(id, nil, nil, seqFrame(-1), nil))
}

// send publishes batch seq live (live false: only into the replay buffer).
func (f *fakeEngine) send(seq int64, payload []byte, live bool) {
	f.mu.Lock()
	f.buffered[seq] = payload
	f.mu.Unlock()
	if live {
		if err := f.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), seqFrame(seq), payload)); err != nil {
			f.t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for time
	}
}

func startKafka(t *testing.T) []string {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc.ListenAddrs()
}

// reader returns everything on topics read so far, polling until n
// records came.
func readRecords(t *testing.T, seeds []string, n int, topics ...string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func decodeBatch(t *testing.T, r *kgo.Record) *schemas.KVEventBatch {
	t.Helper()
	var b schemas.KVEventBatch
	if err := proto.Unmarshal(r.Value, &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

func startRelay(t *testing.T, ctx context.Context, seeds []string, engines ...Engine) *prometheus.Registry {
	t.Helper()
	cl, err := kgo.NewClient(append(ClientOpts(), kgo.SeedBrokers(seeds...))...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := New(cl, Config{Engines: engines, Topics: streams.TopicsFor("t"), Registerer: reg, Reconnect: 20 * time.Millisecond, MaxFrameBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { <-done; cl.Close() })
	return reg
}

func subscribed(s zmq4.Socket) bool {
	tp, ok := s.(interface{ Topics() []string })
	return ok && len(tp.Topics()) > 0
}

// TestRelayPublishesBatchesInOrderReplaysGapsAndResyncsRestarts follows a
// zmq4 publisher through first contact, a gap the replay socket fills, a
// malformed message and a restart.
func TestRelayPublishesBatchesInOrderReplaysGapsAndResyncsRestarts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seeds := startKafka(t)
	f := newFakeEngine(t, ctx)
	pubEP, replayEP := f.endpoints()
	reg := startRelay(t, ctx, seeds, Engine{ID: "e1", Endpoint: pubEP, Replay: replayEP})
	waitFor(t, "the relay's subscription", func() bool { return subscribed(f.pub) })

	stored := func(hs ...any) []byte {
		return mustPack(t, []any{1.5, []any{[]any{"BlockStored", hs, nil, []any{1, 2}, 16, nil, "GPU"}}})
	}
	removed := mustPack(t, map[string]any{"ts": 2.0, "events": []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{sha}}}})
	f.send(0, stored(1, 2), true)
	f.send(1, removed, true)
	f.send(2, stored(3), false) // lost live: the relay must replay it
	go f.serveReplay()
	f.send(3, stored(4), true)
	if got := <-f.replays; got != 2 {
		t.Fatalf("replay asked from %d, want 2", got)
	}
	if err := f.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), []byte{1, 2}, []byte("junk"))); err != nil {
		t.Fatal(err)
	}
	f.send(0, stored(9), true) // restarted engine

	recs := readRecords(t, seeds, 5, "t.kv.events")
	type row struct {
		seq    int64
		resync schemas.KVResyncReason
		hashes int
	}
	var got []row
	for _, r := range recs {
		if string(r.Key) != "e1" {
			t.Errorf("record key %q, want e1", r.Key)
		}
		b := decodeBatch(t, r)
		got = append(got, row{b.GetSequence(), b.GetResync(), len(b.GetEvents()[0].GetBlockHashes())})
	}
	want := []row{
		{0, schemas.KVResyncReason_KV_RESYNC_REASON_FIRST_CONTACT, 2},
		{1, 0, 1},
		{2, 0, 1},
		{3, 0, 1},
		{0, schemas.KVResyncReason_KV_RESYNC_REASON_RESTART, 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("records\n got %v\nwant %v", got, want)
	}
	dl := readRecords(t, seeds, 1, "t.deadletter")
	if reason := streams.Reason(dl[0]); !strings.Contains(reason, "sequence frame") || string(dl[0].Value) != "junk" {
		t.Fatalf("dead letter %q reason %q", dl[0].Value, reason)
	}
	if g := testutil.ToFloat64(relayCounter(t, reg, "switchyard_kvevents_gaps_total")); g != 1 {
		t.Errorf("gaps_total = %v, want 1", g)
	}
}

func relayCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return mf.GetMetric()[0].GetCounter().GetValue() })
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestRelayResyncsAGapWithoutReplay: an engine without a replay socket
// gets a GAP resync naming the lost sequence numbers.
func TestRelayResyncsAGapWithoutReplay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seeds := startKafka(t)
	f := newFakeEngine(t, ctx)
	pubEP, _ := f.endpoints()
	startRelay(t, ctx, seeds, Engine{ID: "e2", Endpoint: pubEP})
	waitFor(t, "the relay's subscription", func() bool { return subscribed(f.pub) })
	p := mustPack(t, []any{1.0, []any{[]any{"AllBlocksCleared"}}})
	f.send(0, p, true)
	f.send(5, p, true)
	recs := readRecords(t, seeds, 2, "t.kv.events")
	b := decodeBatch(t, recs[1])
	if b.GetResync() != schemas.KVResyncReason_KV_RESYNC_REASON_GAP || b.GetMissingFrom() != 1 || b.GetMissingTo() != 5 || b.GetSequence() != 5 {
		t.Fatalf("second record %v", b)
	}
}

// TestRelaySurvivesAHostilePublisher: a peer that speaks ZMTP and then
// declares a frame of 2^60 bytes is dead-lettered and reconnected to; the
// relay allocates nothing for it and keeps running.
func TestRelaySurvivesAHostilePublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seeds := startKafka(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go hostile(c)
		}
	}()
	reg := startRelay(t, ctx, seeds, Engine{ID: "bad", Endpoint: "tcp://" + ln.Addr().String()})
	waitFor(t, "dead letters", func() bool {
		return testutil.ToFloat64(relayCounter(t, reg, "switchyard_kvevents_decode_errors_total")) >= 2
	})
	t.Logf("publish errors %v", testutil.ToFloat64(relayCounter(t, reg, "switchyard_kvevents_publish_errors_total")))
	dl := readRecords(t, seeds, 2, "t.deadletter") // two connections, two dead letters
	for _, r := range dl {
		if reason := streams.Reason(r); !strings.Contains(reason, "too large") {
			t.Fatalf("dead-letter reason %q", reason)
		}
	}
}

// hostile greets as a PUB, then sends a frame declaring 2^60 bytes.
func hostile(c net.Conn) {
	defer c.Close()
	var g [64]byte
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	ready := readyCommand("PUB")
	msg := append(g[:], flagCommand, byte(len(ready)))
	msg = append(msg, ready...)
	msg = append(msg, flagLong, 0x10, 0, 0, 0, 0, 0, 0, 0)
	_, _ = c.Write(msg)
	_, _ = c.Read(make([]byte, 1024))
}
