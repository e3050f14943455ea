package engineserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// Encodings of KVEvents.Encoding: the two msgpack layouts vLLM has sent.
const (
	// KVEncodingMap is current vLLM's: msgspec structs as maps, the batch
	// {"ts", "events", "data_parallel_rank"} and each event with its
	// class name under "type".
	KVEncodingMap = "map"
	// KVEncodingArray is earlier vLLM's (array_like structs): the batch
	// [ts, events, data_parallel_rank] and each event [tag, fields...].
	KVEncodingArray = "array"
)

// Defaults of KVEvents fields left zero: vLLM's ZmqEventPublisher's.
const (
	DefaultKVBufferSteps = 10_000
	DefaultKVHWM         = 100_000
)

// KVEvents configures the publishing of the engine's KV-cache events in
// vLLM's format (its --kv-events-config with publisher "zmq"): every
// block the prefix cache stores or evicts, and AllBlocksCleared when the
// engine starts. Off unless Endpoint is set.
type KVEvents struct {
	// Endpoint is the PUB socket's address, tcp://host:port (host "*"
	// binds every interface, as in vLLM's default tcp://*:5557).
	Endpoint string
	// ReplayEndpoint is the ROUTER socket's address answering replay
	// requests from the last BufferSteps batches; "" for none.
	ReplayEndpoint string
	// Topic is the first frame of every message (vLLM's default "").
	Topic string
	// BufferSteps is how many recent batches replay can send (default
	// 10,000, vLLM's buffer_steps).
	BufferSteps int
	// HWM bounds the batches queued for the PUB socket; beyond it new
	// batches are dropped, which subscribers see as a sequence gap, as
	// ZMQ's high-water mark does (default 100,000, vLLM's).
	HWM int
	// Encoding is KVEncodingMap (default) or KVEncodingArray.
	Encoding string
}

func (k *KVEvents) setDefaults() {
	if k.BufferSteps == 0 {
		k.BufferSteps = DefaultKVBufferSteps
	}
	if k.HWM == 0 {
		k.HWM = DefaultKVHWM
	}
	if k.Encoding == "" {
		k.Encoding = KVEncodingMap
	}
}

func (k KVEvents) validate() error {
	if k.Endpoint == "" {
		if k.ReplayEndpoint != "" {
			return errors.New("a kv events replay endpoint needs a kv events endpoint")
		}
		return nil
	}
	if _, err := zmqListenAddr(k.Endpoint); err != nil {
		return fmt.Errorf("kv events endpoint: %w", err)
	}
	if k.ReplayEndpoint != "" {
		if _, err := zmqListenAddr(k.ReplayEndpoint); err != nil {
			return fmt.Errorf("kv events replay endpoint: %w", err)
		}
	}
	switch {
	case k.Encoding != KVEncodingMap && k.Encoding != KVEncodingArray:
		return fmt.Errorf("kv events encoding must be %q or %q, got %q", KVEncodingMap, KVEncodingArray, k.Encoding)
	case k.BufferSteps < 1 || k.BufferSteps > 1<<20:
		return fmt.Errorf("kv events buffer steps must be in [1, %d], got %d", 1<<20, k.BufferSteps)
	case k.HWM < 1 || k.HWM > 1<<20:
		return fmt.Errorf("kv events hwm must be in [1, %d], got %d", 1<<20, k.HWM)
	case len(k.Topic) > 255:
		return fmt.Errorf("kv events topic of %d bytes, at most 255", len(k.Topic))
	}
	return nil
}

// zmqListenAddr returns the tcp://host:port endpoint as zmq4 listens on
// it: host "*" means every interface.
func zmqListenAddr(ep string) (string, error) {
	hp, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", fmt.Errorf("%q: want tcp://host:port", ep)
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", fmt.Errorf("%q: %w", ep, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", fmt.Errorf("%q: bad port %q", ep, port)
	}
	if host == "*" {
		host = "0.0.0.0"
	}
	return "tcp://" + net.JoinHostPort(host, port), nil
}

// kvEndSeq ends a replay answer (vLLM's END_SEQ, -1).
var kvEndSeq = binary.BigEndian.AppendUint64(nil, ^uint64(0))

// kvPublisher publishes the engine's cache events as vLLM's
// ZmqEventPublisher does: one message [topic, sequence, payload] per
// batch on a PUB socket, sequence numbers 0, 1, ... from the start, and
// the last BufferSteps batches kept for the ROUTER replay socket. publish
// runs on the driver goroutine; the replay server on its own.
type kvPublisher struct {
	cfg       KVEvents
	log       *slog.Logger
	blockSize int
	pub       zmq4.Socket
	router    zmq4.Socket // nil without replay
	topic     []byte
	enc       *msgpack.Encoder
	buf       bytes.Buffer
	seen      []bool // by replica: has events this round
	order     []int  // replicas with events, in order of their first
	seq       int64
	now       func() time.Time

	mu   sync.Mutex
	ring []kvBatch // replay buffer, oldest at ring[head] once full
	head int
}

type kvBatch struct {
	seq     int64
	payload []byte
}

// startKVPublisher binds the sockets; the replay server runs until ctx is
// done. Close releases everything.
func startKVPublisher(ctx context.Context, cfg KVEvents, log *slog.Logger, blockSize, replicas int) (*kvPublisher, error) {
	p := &kvPublisher{cfg: cfg, log: log, blockSize: blockSize, topic: []byte(cfg.Topic),
		seen: make([]bool, replicas), now: time.Now}
	p.enc = msgpack.NewEncoder(&p.buf)
	zlog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	addr, err := zmqListenAddr(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zlog))
	if err := p.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
		p.pub.Close()
		return nil, fmt.Errorf("setting the kv events hwm: %w", err)
	}
	if err := p.pub.Listen(addr); err != nil {
		p.pub.Close()
		return nil, fmt.Errorf("listening for kv events on %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		raddr, err := zmqListenAddr(cfg.ReplayEndpoint)
		if err != nil {
			p.pub.Close()
			return nil, err
		}
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zlog), zmq4.WithTimeout(5*time.Second))
		if err := p.router.Listen(raddr); err != nil {
			p.Close()
			return nil, fmt.Errorf("listening for kv event replays on %s: %w", cfg.ReplayEndpoint, err)
		}
		go p.serveReplays()
	}
	p.log.Info("publishing kv events", "endpoint", cfg.Endpoint, "replay", cfg.ReplayEndpoint, "encoding", cfg.Encoding)
	return p, nil
}

// Close closes the sockets (which ends the replay server).
func (p *kvPublisher) Close() {
	if p.router != nil {
		p.router.Close()
	}
	p.pub.Close()
}

// publish sends evs as one batch per replica that has events, in the
// order of each replica's first event, data_parallel_rank its index.
func (p *kvPublisher) publish(evs []engine.CacheEvent) {
	if len(evs) == 0 {
		return
	}
	p.order = p.order[:0]
	for _, ev := range evs {
		if !p.seen[ev.Replica] {
			p.seen[ev.Replica] = true
			p.order = append(p.order, ev.Replica)
		}
	}
	ts := float64(p.now().UnixNano()) / 1e9
	for _, r := range p.order {
		p.seen[r] = false
		payload, err := p.encode(ts, r, evs)
		if err != nil { // cannot happen: the buffer takes everything
			p.log.Error("encoding kv events", "err", err)
			continue
		}
		p.send(payload)
	}
}

func (p *kvPublisher) send(payload []byte) {
	seq := p.seq
	p.seq++
	msg := zmq4.NewMsgFrom(p.topic, binary.BigEndian.AppendUint64(nil, uint64(seq)), payload)
	if err := p.pub.SendMulti(msg); err != nil {
		p.log.Warn("publishing kv events", "seq", seq, "err", err)
	}
	p.mu.Lock()
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, kvBatch{seq, payload})
	} else {
		p.ring[p.head] = kvBatch{seq, payload}
		p.head = (p.head + 1) % len(p.ring)
	}
	p.mu.Unlock()
}

// encode returns a new payload: replica's events of evs as one
// KVEventBatch in the configured encoding.
func (p *kvPublisher) encode(ts float64, replica int, evs []engine.CacheEvent) ([]byte, error) {
	p.buf.Reset()
	w := msgWriter{e: p.enc}
	n := 0
	for _, ev := range evs {
		if ev.Replica == replica {
			n++
		}
	}
	array := p.cfg.Encoding == KVEncodingArray
	if array {
		w.arrayLen(3)
		w.float(ts)
	} else {
		w.mapLen(3)
		w.str("ts")
		w.float(ts)
		w.str("events")
	}
	w.arrayLen(n)
	for _, ev := range evs {
		if ev.Replica == replica {
			p.event(&w, ev, array)
		}
	}
	if !array {
		w.str("data_parallel_rank")
	}
	w.uint(uint64(replica))
	if w.err != nil {
		return nil, w.err
	}
	return bytes.Clone(p.buf.Bytes()), nil
}

// event writes one event as vLLM's msgspec classes encode: BlockStored
// (block_hashes, parent_block_hash, token_ids, block_size, lora_id,
// medium, lora_name), BlockRemoved (block_hashes, medium),
// AllBlocksCleared. Hashes are vLLM's int form (unsigned 64 bits); token
// ids are not known to the model, so the list is empty.
func (p *kvPublisher) event(w *msgWriter, ev engine.CacheEvent, array bool) {
	field := func(name string) {
		if !array {
			w.str(name)
		}
	}
	fields := 0
	switch ev.Kind {
	case engine.CacheStored:
		fields = 7
	case engine.CacheRemoved:
		fields = 2
	}
	if array {
		w.arrayLen(1 + fields)
	} else {
		w.mapLen(1 + fields)
		w.str("type")
	}
	w.str(ev.Kind.String())
	if ev.Kind == engine.CacheCleared {
		return
	}
	field("block_hashes")
	w.arrayLen(len(ev.Hashes))
	for _, h := range ev.Hashes {
		w.uint(h)
	}
	if ev.Kind == engine.CacheStored {
		field("parent_block_hash")
		if ev.HasParent {
			w.uint(ev.Parent)
		} else {
			w.nil()
		}
		field("token_ids")
		w.arrayLen(0)
		field("block_size")
		w.uint(uint64(p.blockSize))
		field("lora_id")
		w.nil()
	}
	field("medium")
	w.str("GPU")
	if ev.Kind == engine.CacheStored {
		field("lora_name")
		w.nil()
	}
}

// serveReplays answers replay requests until the ROUTER socket closes:
// a request [identity, "", start (8 bytes, big-endian)] is answered with
// [identity, "", seq, payload] for every buffered batch from start, then
// [identity, "", -1, ""], as vLLM's ZmqEventPublisher does.
func (p *kvPublisher) serveReplays() {
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return // closed
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			p.log.Warn("invalid kv events replay request", "frames", len(msg.Frames))
			continue
		}
		id, start := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[2]))
		if err := p.replay(id, start); err != nil {
			p.log.Warn("answering a kv events replay request", "from", start, "err", err)
		}
	}
}

func (p *kvPublisher) replay(id []byte, start int64) error {
	p.mu.Lock()
	batches := make([]kvBatch, 0, len(p.ring))
	for i := range p.ring {
		if b := p.ring[(p.head+i)%len(p.ring)]; b.seq >= start {
			batches = append(batches, b)
		}
	}
	p.mu.Unlock()
	for _, b := range batches {
		if err := p.router.SendMulti(zmq4.NewMsgFrom(id, nil, binary.BigEndian.AppendUint64(nil, uint64(b.seq)), b.payload)); err != nil {
			return err
		}
	}
	return p.router.SendMulti(zmq4.NewMsgFrom(id, nil, kvEndSeq, nil))
}

// msgWriter keeps the first error of a run of msgpack writes.
type msgWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *msgWriter) do(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *msgWriter) arrayLen(n int)  { w.do(w.e.EncodeArrayLen(n)) }
func (w *msgWriter) mapLen(n int)    { w.do(w.e.EncodeMapLen(n)) }
func (w *msgWriter) str(s string)    { w.do(w.e.EncodeString(s)) }
func (w *msgWriter) float(f float64) { w.do(w.e.EncodeFloat64(f)) }
func (w *msgWriter) uint(v uint64)   { w.do(w.e.EncodeUint(v)) }
func (w *msgWriter) nil()            { w.do(w.e.EncodeNil()) }
