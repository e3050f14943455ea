package streams

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/spool"
)

// Defaults of the emitter's bounds (see NewEmitter and MaxBufferedBytes).
const (
	DefaultEmitterRecords = 4096
	DefaultEmitterBytes   = 4 << 20
)

// Emitter produces protobuf records to one topic. Emit never blocks: a
// record is held (in the emitter's queue, then in the Kafka client) until
// Kafka acknowledges it, and the records held at once are bounded by
// count and by bytes.
//
// Without a spool, a record over either bound is dropped. With one
// (Spool), a record that does not fit in memory, or that Kafka failed, is
// appended to the spool on disk instead, and so is every record emitted
// while the spool holds any (so records keep their order); Run replays
// the spool in order as Kafka takes records again, and an entry leaves the
// spool only once Kafka acknowledged it. A record is dropped only when
// the spool is full (or absent), when it does not encode, or when Kafka
// refuses a replayed record three times.
//
// Every record handed to Emit ends produced, dropped or spooled (and a
// spooled one later produced or dropped); each drop is counted in
// switchyard_emitter_dropped_total, reported by Dropped, and logged at
// WARN at most once per DropLogInterval with the drops by reason since the
// last log. Run drains the queue and the spool into Kafka until ctx is
// done.
type Emitter struct {
	cl    *kgo.Client
	topic string
	name  string
	ch    chan *kgo.Record

	maxRecords, maxBytes int64
	// records and bytes accepted by Emit or read from the spool and not
	// yet produced or failed; raised under mu or by Run, lowered by the
	// promises.
	heldRecords, heldBytes atomic.Int64

	spool *spool.Spool // nil: none
	wake  chan struct{}
	retry []spooled // spool entries to produce again (Run's)
	rmu   sync.Mutex

	log      *slog.Logger
	now      func() time.Time
	dropMu   sync.Mutex
	drops    map[string]uint64 // since the last log
	lastLog  time.Time
	dropN    atomic.Uint64
	spooling atomic.Bool // logged that the spool is in use

	emitted    prometheus.Counter
	dropped    prometheus.Counter
	failed     prometheus.Counter
	produced   prometheus.Counter
	spooledN   prometheus.Counter
	bufRecs    prometheus.Gauge
	bufBytes   prometheus.Gauge
	spoolRecs  prometheus.Gauge
	spoolBytes prometheus.Gauge

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	// headers of the last message type emitted (see ProtoHeaders),
	// shared by its records; under mu.
	hdrName string
	hdrs    []kgo.RecordHeader
}

// spooled is a spool entry being produced.
type spooled struct {
	seq   uint64
	r     *kgo.Record
	tries int
}

// DropLogInterval is the least time between two WARN logs of dropped
// records.
const DropLogInterval = 10 * time.Second

// Drop reasons, in the WARN log.
const (
	dropBufferFull = "buffer_full" // no spool, memory bounds reached
	dropSpoolFull  = "spool_full"
	dropSpoolError = "spool_error" // writing or reading the spool failed
	dropStopped    = "stopped"     // emitted after Run ended, without a spool
	dropEncode     = "encode"
	dropKafka      = "kafka" // Kafka failed it and there is no room in a spool
)

// EmitterOpt configures an Emitter (see NewEmitter).
type EmitterOpt interface{ apply(*emitterCfg) }

type emitterCfg struct {
	maxBytes int
	spool    *spool.Spool
	log      *slog.Logger
	now      func() time.Time
}

type emitterOpt func(*emitterCfg)

func (o emitterOpt) apply(c *emitterCfg) { o(c) }

// MaxBufferedBytes bounds the bytes of the records the emitter holds at
// once (keys, values and headers, counted as the Kafka client counts
// them). Default DefaultEmitterBytes; <= 0 means the default.
func MaxBufferedBytes(n int) EmitterOpt {
	return emitterOpt(func(c *emitterCfg) { c.maxBytes = n })
}

// Spool keeps on disk the records the emitter cannot hold in memory or
// that Kafka failed, and replays them in order (see Emitter). The emitter
// owns it from then on: Close closes it. Default none: such records are
// dropped.
func Spool(s *spool.Spool) EmitterOpt {
	return emitterOpt(func(c *emitterCfg) { c.spool = s })
}

// EmitterLogger is where the emitter logs drops (WARN, at most once per
// DropLogInterval) and the spool's use. Default slog.Default().
func EmitterLogger(l *slog.Logger) EmitterOpt {
	return emitterOpt(func(c *emitterCfg) { c.log = l })
}

// EmitterClock is the emitter's clock, for the drop log's interval.
// Default time.Now.
func EmitterClock(now func() time.Time) EmitterOpt {
	return emitterOpt(func(c *emitterCfg) { c.now = now })
}

// emitterMetrics are shared by every emitter of a Registerer, told apart
// by the emitter label.
type emitterMetrics struct {
	emitted, dropped, failed, produced, spooled *prometheus.CounterVec
	bufRecs, bufBytes, spoolRecs, spoolBytes    *prometheus.GaugeVec
}

// NewEmitter returns an emitter for topic holding at most size records
// not yet acknowledged by Kafka (default DefaultEmitterRecords) and at
// most MaxBufferedBytes bytes. reg may be nil. name labels its metrics
// (switchyard_emitter_*{emitter=name}); a registration error is returned.
func NewEmitter(cl *kgo.Client, topic, name string, size int, reg prometheus.Registerer, opts ...EmitterOpt) (*Emitter, error) {
	var cfg emitterCfg
	for _, o := range opts {
		o.apply(&cfg)
	}
	if size <= 0 {
		size = DefaultEmitterRecords
	}
	if cfg.maxBytes <= 0 {
		cfg.maxBytes = DefaultEmitterBytes
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	vec := func(n, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "emitter", Name: n, Help: help,
		}, []string{"emitter"})
	}
	gauge := func(n, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "switchyard", Subsystem: "emitter", Name: n, Help: help,
		}, []string{"emitter"})
	}
	m := emitterMetrics{
		emitted:    vec("records_total", "Records handed to the emitter."),
		dropped:    vec("dropped_total", "Records lost: not delivered and not spooled (buffer full without a spool, spool full, emitter stopped without a spool, encoding error, or Kafka did not take them and the spool had no room)."),
		failed:     vec("failed_total", "Records that did not encode or that Kafka did not take (spooled if a spool had room, else also counted as dropped)."),
		produced:   vec("produced_total", "Records Kafka acknowledged (replayed spool entries included)."),
		spooled:    vec("spooled_total", "Records written to the on-disk spool (Kafka unreachable or the memory bounds reached)."),
		bufRecs:    gauge("buffered_records", "Records held by the emitter, not yet acknowledged or failed by Kafka."),
		bufBytes:   gauge("buffered_bytes", "Bytes (keys, values, headers) of the records held by the emitter."),
		spoolRecs:  gauge("spool_records", "Records in the on-disk spool not yet acknowledged by Kafka."),
		spoolBytes: gauge("spool_bytes", "Bytes of the on-disk spool's files (bounded by its size)."),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.emitted, &m.dropped, &m.failed, &m.produced, &m.spooled} {
			var err error
			if *c, err = obs.Register(reg, *c); err != nil {
				return nil, fmt.Errorf("emitter %s: %w", name, err)
			}
		}
		for _, g := range []**prometheus.GaugeVec{&m.bufRecs, &m.bufBytes, &m.spoolRecs, &m.spoolBytes} {
			var err error
			if *g, err = obs.Register(reg, *g); err != nil {
				return nil, fmt.Errorf("emitter %s: %w", name, err)
			}
		}
	}
	e := &Emitter{
		cl: cl, topic: topic, name: name, ch: make(chan *kgo.Record, size),
		maxRecords: int64(size), maxBytes: int64(cfg.maxBytes),
		spool: cfg.spool, wake: make(chan struct{}, 1),
		log: cfg.log, now: cfg.now, drops: map[string]uint64{},
		emitted:    m.emitted.WithLabelValues(name),
		dropped:    m.dropped.WithLabelValues(name),
		failed:     m.failed.WithLabelValues(name),
		produced:   m.produced.WithLabelValues(name),
		spooledN:   m.spooled.WithLabelValues(name),
		bufRecs:    m.bufRecs.WithLabelValues(name),
		bufBytes:   m.bufBytes.WithLabelValues(name),
		spoolRecs:  m.spoolRecs.WithLabelValues(name),
		spoolBytes: m.spoolBytes.WithLabelValues(name),
	}
	if e.spool != nil {
		e.spoolGauges()
		if n := e.spool.Pending(); n > 0 {
			e.log.Warn("routing events spooled before a restart; replaying them once Kafka takes records", "emitter", name, "records", n, "bytes", e.spool.Bytes())
			e.spooling.Store(true)
		}
	}
	return e, nil
}

// Emit queues msg under key, with the content-type and message headers
// (ProtoHeaders). It returns false when msg was dropped (see Emitter).
func (e *Emitter) Emit(key string, msg proto.Message) bool {
	e.emitted.Inc()
	b, err := proto.Marshal(msg)
	if err != nil {
		e.failed.Inc()
		e.drop(dropEncode, err)
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if name := schemas.MessageName(msg); name != e.hdrName {
		e.hdrName, e.hdrs = name, ProtoHeaders(msg)
	}
	r := &kgo.Record{Topic: e.topic, Key: []byte(key), Value: b, Headers: e.hdrs}
	n := recordBytes(r)
	full := e.heldRecords.Load()+1 > e.maxRecords || e.heldBytes.Load()+n > e.maxBytes
	if e.spool != nil && (e.closed || full || e.spool.Pending() > 0) {
		return e.toSpool(r, "")
	}
	if e.closed {
		e.drop(dropStopped, nil)
		return false
	}
	if full {
		e.drop(dropBufferFull, nil)
		return false
	}
	select {
	case e.ch <- r:
		e.hold(1, n)
		return true
	default: // not reached: the queue holds maxRecords
		e.drop(dropBufferFull, nil)
		return false
	}
}

// toSpool appends r to the spool, or drops it when the spool has no
// room; why is the reason the record left memory ("" emitted to the
// spool directly), for the log.
func (e *Emitter) toSpool(r *kgo.Record, why string) bool {
	err := e.spool.Append(encodeRecord(r))
	switch {
	case errors.Is(err, spool.ErrFull):
		e.drop(dropSpoolFull, err)
		return false
	case errors.Is(err, spool.ErrClosed):
		e.drop(dropStopped, err)
		return false
	case err != nil:
		e.drop(dropSpoolError, err)
		return false
	}
	e.spooledN.Inc()
	e.spoolGauges()
	if e.spooling.CompareAndSwap(false, true) {
		e.log.Warn("kafka is not taking routing events as fast as they come; spooling them to disk until it does", "emitter", e.name, "reason", cmp.Or(why, "memory_full"), "spool_max_bytes", e.spool.MaxBytes())
	}
	e.signal()
	return true
}

func (e *Emitter) spoolGauges() {
	e.spoolRecs.Set(float64(e.spool.Pending()))
	e.spoolBytes.Set(float64(e.spool.Bytes()))
}

func (e *Emitter) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// drop counts a lost record and logs the drops at most once per
// DropLogInterval.
func (e *Emitter) drop(reason string, err error) {
	e.dropped.Inc()
	e.dropN.Add(1)
	e.dropMu.Lock()
	e.drops[reason]++
	now := e.now()
	if !e.lastLog.IsZero() && now.Sub(e.lastLog) < DropLogInterval {
		e.dropMu.Unlock()
		return
	}
	e.lastLog = now
	args := []any{"emitter", e.name, "total", e.dropN.Load()}
	for _, r := range []string{dropBufferFull, dropSpoolFull, dropSpoolError, dropStopped, dropEncode, dropKafka} {
		if n := e.drops[r]; n > 0 {
			args = append(args, r, n)
		}
	}
	clear(e.drops)
	e.dropMu.Unlock()
	if err != nil {
		args = append(args, "err", err)
	}
	e.log.Warn("records dropped (counts by reason since the last such log)", args...)
}

// Dropped is the number of records lost so far (dropped_total).
func (e *Emitter) Dropped() uint64 { return e.dropN.Load() }

// Buffered reports the records and bytes the emitter holds: queued, or
// in the Kafka client and not yet acknowledged or failed.
func (e *Emitter) Buffered() (records, bytes int64) {
	return e.heldRecords.Load(), e.heldBytes.Load()
}

func (e *Emitter) hold(records, bytes int64) {
	e.heldRecords.Add(records)
	e.heldBytes.Add(bytes)
	e.bufRecs.Add(float64(records))
	e.bufBytes.Add(float64(bytes))
}

// recordBytes is r's size as the Kafka client counts it for
// kgo.MaxBufferedBytes: key, value and headers.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// Run produces queued records, and replays the spool in order whenever
// the memory queue is empty and the bounds leave room, until ctx is done;
// then it hands what is queued to the client and waits until Kafka
// acknowledged or failed every record it holds (failed ones go to the
// spool; bounded by closing the client), and returns nil. Records are
// never failed because ctx ended; spool entries not yet acknowledged
// stay on disk for the next Run.
func (e *Emitter) Run(ctx context.Context) error {
	pctx := context.WithoutCancel(ctx)
	for {
		e.replay(pctx)
		select {
		case r := <-e.ch:
			e.produce(pctx, r)
		case <-e.wake:
		case <-ctx.Done():
			e.mu.Lock()
			e.closed = true
			e.mu.Unlock()
			for {
				select {
				case r := <-e.ch:
					e.produce(pctx, r)
				default:
					e.inflight.Wait()
					return nil
				}
			}
		}
	}
}

// Close closes the spool, if any, once every record handed to the
// client was acknowledged or failed: call it after Run returned and the
// client is closed. Spool entries not acknowledged stay on disk.
func (e *Emitter) Close() error {
	e.inflight.Wait()
	if e.spool == nil {
		return nil
	}
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	if err := e.spool.Close(); err != nil {
		return fmt.Errorf("closing emitter %s spool: %w", e.name, err)
	}
	return nil
}

func (e *Emitter) produce(ctx context.Context, r *kgo.Record) {
	e.inflight.Add(1)
	n := recordBytes(r)
	e.cl.TryProduce(ctx, r, func(r *kgo.Record, err error) {
		defer e.inflight.Done()
		defer e.signal()
		e.hold(-1, -n)
		if err == nil {
			e.produced.Inc()
			return
		}
		e.failed.Inc()
		if e.spool != nil {
			e.toSpool(r, "kafka_failed")
			return
		}
		e.drop(dropKafka, err)
	})
}

// maxReplayTries is how often a spool entry Kafka fails is produced
// before it is dropped.
const maxReplayTries = 3

// replay produces spool entries, oldest first (entries to retry before
// new ones), while the memory queue is empty and the bounds leave room.
func (e *Emitter) replay(ctx context.Context) {
	if e.spool == nil {
		return
	}
	for e.reserve() {
		e.rmu.Lock()
		var sp spooled
		if len(e.retry) > 0 {
			sp, e.retry = e.retry[0], e.retry[1:]
		}
		e.rmu.Unlock()
		if sp.r == nil {
			seq, b, ok, err := e.spool.Next()
			if err != nil || !ok {
				e.hold(-1, 0)
				if err != nil && !errors.Is(err, spool.ErrClosed) {
					e.drop(dropSpoolError, err) // an unreadable entry stops the replay until a restart
				}
				return
			}
			r, err := decodeRecord(b, e.topic)
			if err != nil {
				e.hold(-1, 0)
				e.drop(dropSpoolError, err)
				e.ack(seq)
				continue
			}
			sp = spooled{seq: seq, r: r}
		}
		e.produceSpooled(ctx, sp)
	}
}

// reserve takes a record's place in the bounds for a spool entry when
// the memory queue is empty and there is room (under mu, as Emit's
// check).
func (e *Emitter) reserve() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ch) > 0 || e.heldRecords.Load() >= e.maxRecords || e.heldBytes.Load() >= e.maxBytes {
		return false
	}
	e.hold(1, 0)
	return true
}

// produceSpooled produces sp, whose record place reserve took.
func (e *Emitter) produceSpooled(ctx context.Context, sp spooled) {
	n := recordBytes(sp.r)
	e.hold(0, n)
	e.inflight.Add(1)
	e.cl.TryProduce(ctx, sp.r, func(_ *kgo.Record, err error) {
		defer e.inflight.Done()
		defer e.signal()
		e.hold(-1, -n)
		switch {
		case err == nil:
			e.produced.Inc()
			e.ack(sp.seq)
		case errors.Is(err, kgo.ErrClientClosed) || errors.Is(err, context.Canceled):
			// Stays in the spool for the next start.
		default:
			e.failed.Inc()
			if sp.tries++; sp.tries >= maxReplayTries {
				e.drop(dropKafka, err)
				e.ack(sp.seq)
				return
			}
			e.rmu.Lock()
			e.retry = append(e.retry, sp)
			e.rmu.Unlock()
		}
	})
}

// ack removes a delivered (or dropped) entry from the spool.
func (e *Emitter) ack(seq uint64) {
	if err := e.spool.Ack(seq); err != nil && !errors.Is(err, spool.ErrClosed) {
		e.log.Warn("acknowledging a spool entry", "emitter", e.name, "err", err)
	}
	e.spoolGauges()
	if e.spool.Pending() == 0 && e.spooling.CompareAndSwap(true, false) {
		e.log.Info("spool replayed: routing events go to kafka directly again", "emitter", e.name)
	}
}

// encodeRecord is r's key, value and headers as a spool entry: each a
// uvarint length and its bytes, the headers preceded by their count.
func encodeRecord(r *kgo.Record) []byte {
	b := make([]byte, 0, int(recordBytes(r))+8+4*len(r.Headers))
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.AppendUvarint(b, uint64(len(r.Value)))
	b = append(b, r.Value...)
	b = binary.AppendUvarint(b, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return b
}

var errSpoolEntry = errors.New("spool entry malformed")

// decodeRecord reverses encodeRecord, for topic.
func decodeRecord(b []byte, topic string) (*kgo.Record, error) {
	field := func() ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errSpoolEntry
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, nil
	}
	r := &kgo.Record{Topic: topic}
	var err error
	if r.Key, err = field(); err != nil {
		return nil, err
	}
	if r.Value, err = field(); err != nil {
		return nil, err
	}
	nh, k := binary.Uvarint(b)
	if k <= 0 || nh > uint64(len(b)) {
		return nil, errSpoolEntry
	}
	b = b[k:]
	for range nh {
		hk, err := field()
		if err != nil {
			return nil, err
		}
		hv, err := field()
		if err != nil {
			return nil, err
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(hk), Value: hv})
	}
	if len(b) != 0 {
		return nil, errSpoolEntry
	}
	return r, nil
}
