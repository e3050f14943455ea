package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// Engine is one engine whose KV events the relay follows.
type Engine struct {
	// ID keys the engine's records.
	ID string
	// Endpoint is the engine's PUB socket, tcp://host:port.
	Endpoint string
	// Replay is the engine's ROUTER replay socket, tcp://host:port; ""
	// when it has none (a gap then resyncs the engine's view).
	Replay string
}

// EngineSyntax describes one engine of ParseEngines.
const EngineSyntax = "id=tcp://host:port[;replay=tcp://host:port]"

// ParseEngines parses a ","-separated list of EngineSyntax.
func ParseEngines(list string) ([]Engine, error) {
	var out []Engine
	seen := map[string]bool{}
	for _, spec := range strings.Split(list, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		parts := strings.Split(spec, ";")
		id, ep, ok := strings.Cut(parts[0], "=")
		if !ok || id == "" || ep == "" {
			return nil, fmt.Errorf("engine %q: want %s", spec, EngineSyntax)
		}
		e := Engine{ID: id, Endpoint: ep}
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			if k != "replay" || v == "" {
				return nil, fmt.Errorf("engine %q: unknown option %q, want replay=tcp://host:port", id, p)
			}
			e.Replay = v
		}
		if seen[id] {
			return nil, fmt.Errorf("engine %q listed twice", id)
		}
		seen[id] = true
		out = append(out, e)
	}
	return out, nil
}

// Config configures a Relay.
type Config struct {
	// Engines to follow. At least one.
	Engines []Engine
	// Topics names the output topics (KVEvents and DeadLetter).
	Topics streams.Topics
	// Replication of the topics Run creates when they do not exist.
	// Default: the brokers' defaults.
	Replication streams.Replication
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the relay's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// MaxFrameBytes bounds one ZMQ frame (a batch's payload); a larger
	// one is dead-lettered and the connection dropped. Default 16 MiB.
	MaxFrameBytes int
	// ReplayTimeout bounds one replay exchange. Default 5s.
	ReplayTimeout time.Duration
	// MaxReplay is the most batches a gap is replayed for; a larger gap
	// resyncs the engine's view at once. Default 4096.
	MaxReplay int
	// Reconnect is the wait between connection attempts. Default 1s.
	Reconnect time.Duration
	// Now stamps relayed_at_unix_ms. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = 16 << 20
	}
	if c.ReplayTimeout == 0 {
		c.ReplayTimeout = 5 * time.Second
	}
	if c.MaxReplay == 0 {
		c.MaxReplay = 4096
	}
	if c.Reconnect == 0 {
		c.Reconnect = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error (after defaults).
func (c Config) Validate() error {
	if len(c.Engines) == 0 {
		return errors.New("no engines")
	}
	seen := map[string]bool{}
	for _, e := range c.Engines {
		if e.ID == "" {
			return fmt.Errorf("engine %q: empty id", e.Endpoint)
		}
		if seen[e.ID] {
			return fmt.Errorf("engine %q listed twice", e.ID)
		}
		seen[e.ID] = true
		if _, err := tcpAddr(e.Endpoint); err != nil {
			return fmt.Errorf("engine %q: %w", e.ID, err)
		}
		if e.Replay != "" {
			if _, err := tcpAddr(e.Replay); err != nil {
				return fmt.Errorf("engine %q replay: %w", e.ID, err)
			}
		}
	}
	if c.Topics.KVEvents == "" || c.Topics.DeadLetter == "" {
		return errors.New("topics: kv events and dead-letter topics are required")
	}
	if c.MaxFrameBytes < 1 || c.ReplayTimeout < 0 || c.MaxReplay < 1 || c.Reconnect < 0 {
		return fmt.Errorf("limits must be positive: max frame %d, replay timeout %v, max replay %d, reconnect %v",
			c.MaxFrameBytes, c.ReplayTimeout, c.MaxReplay, c.Reconnect)
	}
	return nil
}

// maxFrames bounds the frames of one message: vLLM sends 3, a replay
// reply has at most 5 (routing frames included).
const maxFrames = 8

// HeaderDLQEngine names the engine of a dead-lettered ZMQ message; its
// source is in streams.HeaderDLQTopic as the endpoint (tcp://...).
const HeaderDLQEngine = "switchyard-dlq-engine"

// ClientOpts are the options the relay wants of its Kafka client: a
// bounded produce buffer (Produce waits when it is full, so the relay
// stops reading and the engine's socket buffers, then drops, which the
// sequence numbers reveal), a short linger and gzip, which every client
// reads without plugins (docs/topics.md).
func ClientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.MaxBufferedRecords(10000), kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchCompression(kgo.GzipCompression())}
}

// Relay follows engines' KV-event streams and publishes them to Kafka.
type Relay struct {
	cl  *kgo.Client
	cfg Config
	log *slog.Logger
	m   *metrics
}

// ErrNoClient is returned by New without a Kafka client.
var ErrNoClient = errors.New("no kafka client")

// New validates cfg and returns a relay publishing with cl (see
// ClientOpts). The caller owns cl: Run flushes it but does not close it.
func New(cl *kgo.Client, cfg Config) (*Relay, error) {
	if cl == nil {
		return nil, ErrNoClient
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kvevents config: %w", err)
	}
	m, err := newMetrics(cfg.Registerer, cfg.Engines)
	if err != nil {
		return nil, fmt.Errorf("kvevents metrics: %w", err)
	}
	return &Relay{cl: cl, cfg: cfg, log: cfg.Logger, m: m}, nil
}

// Run follows every engine until ctx is done, then flushes what is
// buffered (at most 5s) and returns nil.
func (r *Relay) Run(ctx context.Context) error {
	if err := streams.EnsureTopics(ctx, r.cl, r.cfg.Topics, 0, r.cfg.Replication); err != nil {
		// Not fatal: the topics may be managed elsewhere and exist.
		r.log.Warn("ensuring topics", "err", err)
	}
	r.log.Info("kvevents relaying", "engines", len(r.cfg.Engines), "topic", r.cfg.Topics.KVEvents)
	g, gctx := errgroup.WithContext(ctx)
	for _, e := range r.cfg.Engines {
		g.Go(func() error { r.follow(gctx, e); return nil })
	}
	err := g.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ferr := r.cl.Flush(fctx); ferr != nil {
		r.log.Warn("flushing kv events", "err", ferr)
	}
	return err
}

// engineState is one engine's follower.
type engineState struct {
	Engine
	tr   Tracker
	log  *slog.Logger
	down bool // the last attempt failed (log the next failure at debug)
}

// follow connects to e's PUB socket and relays until ctx is done,
// reconnecting after every failure.
func (r *Relay) follow(ctx context.Context, e Engine) {
	st := &engineState{Engine: e, log: r.log.With("engine", e.ID, "endpoint", e.Endpoint)}
	for ctx.Err() == nil {
		err := r.connection(ctx, st)
		r.m.connected.WithLabelValues(e.ID).Set(0)
		if ctx.Err() != nil {
			return
		}
		if st.down {
			st.log.Debug("kv events connection failed", "err", err)
		} else {
			st.log.Warn("kv events connection failed; retrying", "err", err, "every", r.cfg.Reconnect)
		}
		st.down = true
		t := time.NewTimer(r.cfg.Reconnect)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// connection runs one connection to st's PUB socket until it fails.
func (r *Relay) connection(ctx context.Context, st *engineState) error {
	c, err := dialZMTP(ctx, st.Endpoint, "SUB", "PUB", r.cfg.MaxFrameBytes, maxFrames)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := c.watch(ctx, 0)
	defer stop()
	if err := c.subscribe(nil); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	r.m.connected.WithLabelValues(st.ID).Set(1)
	st.log.Debug("kv events connected")
	for {
		frames, err := c.readMessage()
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrTooManyFrames) || errors.Is(err, ErrHandshake) {
				// The stream cannot be resynchronised: dead-letter the
				// reason and reconnect.
				r.deadLetter(ctx, st, nil, err)
			}
			return fmt.Errorf("reading: %w", err)
		}
		if st.down {
			st.log.Info("kv events flowing again")
			st.down = false
		}
		r.handle(ctx, st, frames)
	}
}

// handle relays one live message.
func (r *Relay) handle(ctx context.Context, st *engineState, frames [][]byte) {
	b, err := ParseMessage(frames)
	if err != nil {
		r.deadLetter(ctx, st, frames, err)
		return
	}
	v, missing := st.tr.Observe(b.Seq)
	switch v {
	case InOrder:
		r.publish(ctx, st, b, schemas.KVResyncReason_KV_RESYNC_REASON_UNSPECIFIED, 0, 0)
	case First:
		r.publish(ctx, st, b, schemas.KVResyncReason_KV_RESYNC_REASON_FIRST_CONTACT, 0, 0)
	case Restart:
		st.log.Info("engine restarted: resyncing its blocks", "seq", b.Seq)
		r.publish(ctx, st, b, schemas.KVResyncReason_KV_RESYNC_REASON_RESTART, 0, 0)
	case Gap:
		r.m.gaps.WithLabelValues(st.ID).Inc()
		r.gap(ctx, st, b, missing)
	}
}

// gap relays b after batches missing..b.Seq-1 were lost: it fetches them
// from the replay socket when the engine has one, and marks the first
// batch after the last hole that remains as a resync.
func (r *Relay) gap(ctx context.Context, st *engineState, b Batch, missing int64) {
	var got []Batch
	if st.Replay != "" && b.Seq-missing <= int64(r.cfg.MaxReplay) {
		var err error
		got, err = r.replay(ctx, st, missing, b.Seq)
		if err != nil {
			st.log.Warn("replaying kv events", "from", missing, "to", b.Seq, "err", err)
		}
	}
	// got holds batches in [missing, b.Seq), increasing; find the holes.
	next, holeFrom, holeTo := missing, int64(-1), int64(-1)
	start := 0 // the first batch after the last hole
	for i, g := range got {
		if g.Seq > next {
			holeFrom, holeTo, start = next, g.Seq, i
		}
		next = g.Seq + 1
	}
	if next < b.Seq {
		holeFrom, holeTo, start = next, b.Seq, len(got)
	}
	rest := append(got[start:len(got):len(got)], b)
	for i, g := range rest {
		reason := schemas.KVResyncReason_KV_RESYNC_REASON_UNSPECIFIED
		if i == 0 && holeFrom >= 0 {
			reason = schemas.KVResyncReason_KV_RESYNC_REASON_GAP
			st.log.Warn("kv events lost: resyncing the engine's blocks", "missing_from", holeFrom, "missing_to", holeTo)
		}
		r.publish(ctx, st, g, reason, max(holeFrom, 0), max(holeTo, 0))
	}
	// Batches before the last hole are not relayed: the resync drops
	// what they would have changed.
}

// replay asks st's replay socket for the batches from seq from and
// returns those below to, in order.
func (r *Relay) replay(ctx context.Context, st *engineState, from, to int64) ([]Batch, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReplayTimeout)
	defer cancel()
	c, err := dialZMTP(ctx, st.Replay, "DEALER", "ROUTER", r.cfg.MaxFrameBytes, maxFrames)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := c.watch(ctx, 0)
	defer stop()
	if err := c.writeMessage(nil, binary.BigEndian.AppendUint64(nil, uint64(from))); err != nil {
		return nil, fmt.Errorf("requesting replay: %w", err)
	}
	var out []Batch
	for {
		frames, err := c.readMessage()
		if err != nil {
			return out, fmt.Errorf("reading replay: %w", err)
		}
		// [delimiter?, topic?, seq, payload]: vLLM answers a DEALER with
		// an empty delimiter, then [topic, seq, payload] (older versions
		// [seq, payload]); the end is sequence -1 with an empty payload.
		if len(frames) >= 3 && len(frames[0]) == 0 {
			frames = frames[1:]
		}
		if n := len(frames); n >= 2 && len(frames[n-2]) == 8 && int64(binary.BigEndian.Uint64(frames[n-2])) == -1 {
			return out, nil
		}
		b, err := ParseMessage(frames)
		if err != nil {
			r.deadLetter(ctx, st, frames, fmt.Errorf("replayed: %w", err))
			continue
		}
		if b.Seq < from || b.Seq >= to || (len(out) > 0 && b.Seq <= out[len(out)-1].Seq) {
			if b.Seq >= to {
				return out, nil // everything needed came
			}
			continue
		}
		r.m.replayed.WithLabelValues(st.ID).Inc()
		out = append(out, b)
	}
}

// publish sends b as one KVEventBatch record keyed by the engine id.
func (r *Relay) publish(ctx context.Context, st *engineState, b Batch, resync schemas.KVResyncReason, missFrom, missTo int64) {
	msg := &schemas.KVEventBatch{
		SchemaVersion:    schemas.Version,
		EngineId:         st.ID,
		Sequence:         b.Seq,
		EngineTimeUnixMs: unixMs(b.TS),
		RelayedAtUnixMs:  r.cfg.Now().UnixMilli(),
		ZmqTopic:         b.Topic,
		Resync:           resync,
		MissingFrom:      missFrom,
		MissingTo:        missTo,
		Events:           make([]*schemas.KVEvent, 0, len(b.Events)),
	}
	if b.HasRank {
		msg.DataParallelRank = proto.Int64(b.DataParallelRank)
	}
	for _, e := range b.Events {
		r.m.events.WithLabelValues(st.ID, eventLabel(e.Kind)).Inc()
		if pe := toProto(e); pe != nil {
			msg.Events = append(msg.Events, pe)
		}
	}
	if resync != schemas.KVResyncReason_KV_RESYNC_REASON_UNSPECIFIED {
		r.m.resyncs.WithLabelValues(st.ID, resyncLabel(resync)).Inc()
	}
	r.m.batches.WithLabelValues(st.ID).Inc()
	val, err := proto.Marshal(msg)
	if err != nil { // cannot happen for a message built here
		r.m.publishErrors.WithLabelValues(st.ID).Inc()
		st.log.Error("encoding kv event batch", "err", err)
		return
	}
	rec := &kgo.Record{Topic: r.cfg.Topics.KVEvents, Key: []byte(st.ID), Value: val, Headers: streams.ProtoHeaders(msg)}
	r.produce(ctx, st, rec)
}

func (r *Relay) produce(ctx context.Context, st *engineState, rec *kgo.Record) {
	r.cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
		if err != nil {
			r.m.publishErrors.WithLabelValues(st.ID).Inc()
			if ctx.Err() == nil {
				st.log.Warn("publishing", "topic", rec.Topic, "err", err)
			}
		}
	})
}

// deadLetter publishes a message that could not be relayed (its payload
// frame, or nothing when the stream broke before one was read) to the
// dead-letter topic with the reason.
func (r *Relay) deadLetter(ctx context.Context, st *engineState, frames [][]byte, cause error) {
	r.m.decodeErrors.WithLabelValues(st.ID).Inc()
	st.log.Warn("dead-lettering kv event message", "err", cause)
	val := []byte{}
	if n := len(frames); n > 0 {
		val = frames[n-1]
	}
	rec := &kgo.Record{Topic: r.cfg.Topics.DeadLetter, Key: []byte(st.ID), Value: val, Headers: []kgo.RecordHeader{
		{Key: streams.HeaderDLQReason, Value: []byte(cause.Error())},
		{Key: streams.HeaderDLQTopic, Value: []byte(st.Endpoint)},
		{Key: HeaderDLQEngine, Value: []byte(st.ID)},
		{Key: "switchyard-dlq-frames", Value: []byte(strconv.Itoa(len(frames)))},
	}}
	r.produce(ctx, st, rec)
}

func unixMs(ts float64) int64 {
	ms := ts * 1000
	if !(ms > math.MinInt64 && ms < math.MaxInt64) {
		return 0
	}
	return int64(ms)
}

func toProto(e Event) *schemas.KVEvent {
	pe := &schemas.KVEvent{Medium: e.Medium}
	switch e.Kind {
	case KindStored:
		pe.Type = schemas.KVEventType_KV_EVENT_TYPE_BLOCK_STORED
		pe.ParentBlockHash = e.ParentHash
		pe.TokenIds = e.TokenIDs
		pe.BlockSize = uint32(e.BlockSize)
		pe.LoraId = e.LoRAID
		pe.LoraName = e.LoRAName
	case KindRemoved:
		pe.Type = schemas.KVEventType_KV_EVENT_TYPE_BLOCK_REMOVED
	case KindCleared:
		pe.Type = schemas.KVEventType_KV_EVENT_TYPE_ALL_BLOCKS_CLEARED
		return pe
	default:
		return nil
	}
	pe.BlockHashes = make([][]byte, len(e.BlockHashes))
	for i, h := range e.BlockHashes {
		pe.BlockHashes[i] = h
	}
	return pe
}
