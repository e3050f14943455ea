package engineserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/switchyard-llm/switchyard/streams/kvevents"
)

// zmqEndpoint returns a tcp:// endpoint on a loopback port free now.
func zmqEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "tcp://" + ln.Addr().String()
}

// replayAll asks the replay socket at ep for every batch from seq from,
// as a subscriber that lost them does (a DEALER sending ["", from]), and
// returns the raw [seq, payload] replies up to the end marker.
func replayAll(t *testing.T, ep string, from int64) [][][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(ep); err != nil {
		t.Fatal(err)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, uint64(from)))); err != nil {
		t.Fatal(err)
	}
	var out [][][]byte
	for {
		msg, err := d.Recv()
		if err != nil {
			t.Fatalf("replay: %v after %d batches", err, len(out))
		}
		if len(msg.Frames) != 3 || len(msg.Frames[0]) != 0 {
			t.Fatalf("replay reply of %d frames, want [\"\", seq, payload]", len(msg.Frames))
		}
		if bytes.Equal(msg.Frames[1], kvEndSeq) {
			return out
		}
		out = append(out, msg.Frames[1:])
	}
}

// TestKVEventsPublishTheCacheInVLLMFormat serves prompts sharing a prefix,
// two at once so that both replicas serve them, on caches that must evict,
// in each encoding, and decodes what the replay socket holds with the
// relay's decoder (streams/kvevents): the batches are numbered 0, 1, ...
// and start with replicas 0 and 1's AllBlocksCleared; per rank, no block
// is stored twice, a stored run's parent is cached, every removal is of a
// block stored before, and the blocks stored and removed are the ones
// Stats counts; the last prompt's block hashes are cached on one replica;
// and the payload has vLLM's field names in the encoding asked for.
func TestKVEventsPublishTheCacheInVLLMFormat(t *testing.T) {
	for _, enc := range []string{KVEncodingMap, KVEncodingArray} {
		t.Run(enc, func(t *testing.T) {
			replay := zmqEndpoint(t)
			s, base := start(t, Config{Replicas: 2, KVBlocks: 64, KVEvents: KVEvents{
				Endpoint: zmqEndpoint(t), ReplayEndpoint: replay, Topic: "kv@sim", Encoding: enc,
			}})
			// 1,200 bytes: 300 tokens, 18 full blocks, the first 6 shared.
			prompt := func(i int) string {
				return strings.Repeat("shared ", 64)[:384] + strings.Repeat(fmt.Sprintf("prompt %02d ", i), 82)[:816]
			}
			for i := 0; i < 12; i += 2 {
				errs := make(chan string, 2)
				for j := range 2 {
					go func() {
						resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"`+prompt(i+j)+`","max_tokens":40}`))
						if err != nil {
							errs <- err.Error()
							return
						}
						resp.Body.Close()
						errs <- resp.Status
					}()
				}
				for range 2 {
					if status := <-errs; status != "200 OK" {
						t.Fatalf("request: %s", status)
					}
				}
			}
			last := prompt(11)
			st := s.Stats()
			replies := replayAll(t, replay, 0)
			views := map[int64]map[string]bool{}
			var stored, removed, withParent int64
			storedOn := map[int64]bool{}
			for i, r := range replies {
				b, err := kvevents.ParseMessage(r)
				if err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if b.Seq != int64(i) || !b.HasRank || b.DataParallelRank < 0 || b.DataParallelRank > 1 {
					t.Fatalf("batch %d: seq %d, rank %d (%v)", i, b.Seq, b.DataParallelRank, b.HasRank)
				}
				if i < 2 && (len(b.Events) != 1 || b.Events[0].Kind != kvevents.KindCleared || b.DataParallelRank != int64(i)) {
					t.Fatalf("batch %d: rank %d %+v, want replica %d's AllBlocksCleared", i, b.DataParallelRank, b.Events, i)
				}
				if views[b.DataParallelRank] == nil {
					views[b.DataParallelRank] = map[string]bool{}
				}
				view := views[b.DataParallelRank]
				for _, ev := range b.Events {
					switch ev.Kind {
					case kvevents.KindStored:
						if ev.BlockSize != 16 || ev.Medium != "GPU" || len(ev.TokenIDs) != 0 {
							t.Fatalf("batch %d: BlockStored block size %d, medium %q, %d token ids", i, ev.BlockSize, ev.Medium, len(ev.TokenIDs))
						}
						if ev.ParentHash != nil {
							if !view[string(ev.ParentHash)] {
								t.Fatalf("batch %d: stores blocks after %x, not cached", i, ev.ParentHash)
							}
							withParent++
						}
						for _, h := range ev.BlockHashes {
							if view[string(h)] {
								t.Fatalf("batch %d: rank %d stores block %x twice", i, b.DataParallelRank, h)
							}
							view[string(h)] = true
						}
						stored += int64(len(ev.BlockHashes))
						storedOn[b.DataParallelRank] = true
					case kvevents.KindRemoved:
						for _, h := range ev.BlockHashes {
							if !view[string(h)] {
								t.Fatalf("batch %d: removes block %x, not stored", i, h)
							}
							delete(view, string(h))
						}
						removed += int64(len(ev.BlockHashes))
					}
				}
			}
			if withParent == 0 || len(storedOn) != 2 {
				t.Fatalf("%d runs after a cached parent, blocks stored on %d ranks: the prompts did not share a prefix on two replicas", withParent, len(storedOn))
			}
			if stored != st.KVBlocksStored || removed != st.KVBlocksEvicted || removed == 0 {
				t.Fatalf("events store %d and remove %d blocks; the engine counts %d and %d (and must evict)", stored, removed, st.KVBlocksStored, st.KVBlocksEvicted)
			}
			found := 0
			for _, view := range views {
				all := true
				for _, h := range textBlockHashes(last, 16, 18) {
					all = all && view[string(kvevents.IntHash(h))]
				}
				if all {
					found++
				}
			}
			if found != 1 {
				t.Fatalf("the last prompt's blocks are cached on %d replicas, want 1", found)
			}
			checkEncoding(t, enc, replies[len(replies)-1][1])
		})
	}
}

// checkEncoding decodes payload with the msgpack library alone and checks
// vLLM's shape: names in the map encoding, positions in the array one.
func checkEncoding(t *testing.T, enc string, payload []byte) {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(payload, &v); err != nil {
		t.Fatal(err)
	}
	var events []any
	switch enc {
	case KVEncodingMap:
		m, ok := v.(map[string]any)
		if !ok || len(m) != 3 || m["ts"] == nil || m["data_parallel_rank"] == nil {
			t.Fatalf("map batch %#v, want {ts, events, data_parallel_rank}", v)
		}
		events, _ = m["events"].([]any)
		want := map[string][]string{
			"BlockStored":      {"block_hashes", "block_size", "lora_id", "lora_name", "medium", "parent_block_hash", "token_ids", "type"},
			"BlockRemoved":     {"block_hashes", "medium", "type"},
			"AllBlocksCleared": {"type"},
		}
		for _, e := range events {
			em, _ := e.(map[string]any)
			typ, _ := em["type"].(string)
			if keys := slices.Sorted(maps.Keys(em)); !slices.Equal(keys, want[typ]) {
				t.Fatalf("map event of type %q has keys %q, want %q", typ, keys, want[typ])
			}
		}
	case KVEncodingArray:
		a, ok := v.([]any)
		if !ok || len(a) != 3 {
			t.Fatalf("array batch %#v, want [ts, events, data_parallel_rank]", v)
		}
		events, _ = a[1].([]any)
		for _, e := range events {
			ea, _ := e.([]any)
			if len(ea) == 0 || (ea[0] == "BlockStored" && len(ea) != 8) {
				t.Fatalf("array event %#v, want [tag, ...] and BlockStored's 7 fields", e)
			}
		}
	}
	if len(events) == 0 {
		t.Fatalf("%s batch without events", enc)
	}
}

// TestKVEventsLiveMatchReplay subscribes to the PUB socket and checks the
// live messages are the replay buffer's, topic and all.
func TestKVEventsLiveMatchReplay(t *testing.T) {
	pub, replay := zmqEndpoint(t), zmqEndpoint(t)
	_, base := start(t, Config{KVEvents: KVEvents{Endpoint: pub, ReplayEndpoint: replay, Topic: "kv"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(pub); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	got := make(chan zmq4.Msg, 64)
	go func() {
		defer close(got)
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			got <- m
		}
	}()
	// The subscription takes effect some time after Dial: send distinct
	// prompts until a batch arrives.
	var first zmq4.Msg
	for i := 0; first.Frames == nil; i++ {
		if ctx.Err() != nil {
			t.Fatal("no live batch")
		}
		post(t, base+"/v1/completions", fmt.Sprintf(`{"prompt":"%s","max_tokens":1}`, strings.Repeat(fmt.Sprintf("%03d ", i), 40)))
		select {
		case first = <-got:
		case <-time.After(100 * time.Millisecond): // then send another prompt
		}
	}
	if len(first.Frames) != 3 || string(first.Frames[0]) != "kv" {
		t.Fatalf("live message of %d frames, topic %q", len(first.Frames), first.Frames[0])
	}
	seq := int64(binary.BigEndian.Uint64(first.Frames[1]))
	replies := replayAll(t, replay, seq)
	if len(replies) == 0 || !bytes.Equal(replies[0][0], first.Frames[1]) || !bytes.Equal(replies[0][1], first.Frames[2]) {
		t.Fatalf("replay from %d does not start with the live batch", seq)
	}
	cancel()
	sub.Close()
	for range got { // the reader ends with the socket
	}
}

// TestKVEventsReplayBufferIsBounded: the replay socket answers from the
// last BufferSteps batches only.
func TestKVEventsReplayBufferIsBounded(t *testing.T) {
	replay := zmqEndpoint(t)
	_, base := start(t, Config{KVEvents: KVEvents{Endpoint: zmqEndpoint(t), ReplayEndpoint: replay, BufferSteps: 3}})
	for i := range 6 {
		post(t, base+"/v1/completions", fmt.Sprintf(`{"prompt":"%s","max_tokens":1}`, strings.Repeat(fmt.Sprintf("%03d ", i), 40)))
	}
	replies := replayAll(t, replay, 0)
	if len(replies) != 3 {
		t.Fatalf("replayed %d batches, want the last 3", len(replies))
	}
	for i, r := range replies {
		if seq := int64(binary.BigEndian.Uint64(r[0])); seq != int64(4+i) { // 0 cleared, 1..6 one per prompt
			t.Fatalf("replayed batch %d has seq %d, want %d", i, seq, 4+i)
		}
	}
}

func TestKVEventsConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   KVEvents
	}{
		{"not tcp", KVEvents{Endpoint: "ipc:///tmp/x"}},
		{"no port", KVEvents{Endpoint: "tcp://127.0.0.1"}},
		{"bad port", KVEvents{Endpoint: "tcp://127.0.0.1:99999"}},
		{"bad replay", KVEvents{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: "udp://x:1"}},
		{"replay without endpoint", KVEvents{ReplayEndpoint: "tcp://127.0.0.1:1"}},
		{"encoding", KVEvents{Endpoint: "tcp://127.0.0.1:1", Encoding: "json"}},
		{"buffer", KVEvents{Endpoint: "tcp://127.0.0.1:1", BufferSteps: -1}},
		{"hwm", KVEvents{Endpoint: "tcp://127.0.0.1:1", HWM: 1 << 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(Config{KVEvents: tc.kv}); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestKVEventsEndpointTaken: Run fails at once when the PUB socket cannot
// listen.
func TestKVEventsEndpointTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(Config{Listen: "127.0.0.1:0", KVEvents: KVEvents{Endpoint: "tcp://" + ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "listening for kv events") {
		t.Fatalf("Run: %v, want the kv events listen error", err)
	}
}
