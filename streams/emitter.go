package streams

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Defaults of the emitter's bounds (see NewEmitter and MaxBufferedBytes).
const (
	DefaultEmitterRecords = 4096
	DefaultEmitterBytes   = 4 << 20
)

// Emitter produces protobuf records to one topic. Emit never blocks: a
// record is held (in the emitter's queue, then in the Kafka client) until
// Kafka acknowledges or fails it, and the records held at once are
// bounded by count and by bytes; a record over either bound is dropped.
// Every record handed to Emit ends produced or dropped, and both are
// counted: dropped covers a full buffer, a stopped emitter, an encoding
// error and a record Kafka did not take (brokers down past the client's
// delivery timeout, a produce error, or the client closed). Run drains
// the queue into Kafka until ctx is done.
type Emitter struct {
	cl    *kgo.Client
	topic string
	ch    chan *kgo.Record

	maxRecords, maxBytes int64
	// records and bytes accepted by Emit and not yet produced or failed;
	// raised under mu, lowered by the promises.
	heldRecords, heldBytes atomic.Int64

	emitted  prometheus.Counter
	dropped  prometheus.Counter
	failed   prometheus.Counter
	produced prometheus.Counter
	bufRecs  prometheus.Gauge
	bufBytes prometheus.Gauge

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	// headers of the last message type emitted (see ProtoHeaders),
	// shared by its records; under mu.
	hdrName string
	hdrs    []kgo.RecordHeader
}

// EmitterOpt configures an Emitter (see NewEmitter).
type EmitterOpt interface{ apply(*emitterCfg) }

type emitterCfg struct{ maxBytes int }

type emitterOpt func(*emitterCfg)

func (o emitterOpt) apply(c *emitterCfg) { o(c) }

// MaxBufferedBytes bounds the bytes of the records the emitter holds at
// once (keys, values and headers, counted as the Kafka client counts
// them). Default DefaultEmitterBytes; <= 0 means the default.
func MaxBufferedBytes(n int) EmitterOpt {
	return emitterOpt(func(c *emitterCfg) { c.maxBytes = n })
}

// emitterMetrics are shared by every emitter of a Registerer, told apart
// by the emitter label.
type emitterMetrics struct {
	emitted, dropped, failed, produced *prometheus.CounterVec
	bufRecs, bufBytes                  *prometheus.GaugeVec
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
		emitted:  vec("records_total", "Records handed to the emitter."),
		dropped:  vec("dropped_total", "Records not delivered: buffer full (records or bytes), emitter stopped, encoding error, or Kafka did not take them."),
		failed:   vec("failed_total", "Records that did not encode or that Kafka did not take (also counted as dropped)."),
		produced: vec("produced_total", "Records Kafka acknowledged."),
		bufRecs:  gauge("buffered_records", "Records held by the emitter, not yet acknowledged or failed by Kafka."),
		bufBytes: gauge("buffered_bytes", "Bytes (keys, values, headers) of the records held by the emitter."),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.emitted, &m.dropped, &m.failed, &m.produced} {
			var err error
			if *c, err = obs.Register(reg, *c); err != nil {
				return nil, fmt.Errorf("emitter %s: %w", name, err)
			}
		}
		for _, g := range []**prometheus.GaugeVec{&m.bufRecs, &m.bufBytes} {
			var err error
			if *g, err = obs.Register(reg, *g); err != nil {
				return nil, fmt.Errorf("emitter %s: %w", name, err)
			}
		}
	}
	return &Emitter{
		cl: cl, topic: topic, ch: make(chan *kgo.Record, size),
		maxRecords: int64(size), maxBytes: int64(cfg.maxBytes),
		emitted:  m.emitted.WithLabelValues(name),
		dropped:  m.dropped.WithLabelValues(name),
		failed:   m.failed.WithLabelValues(name),
		produced: m.produced.WithLabelValues(name),
		bufRecs:  m.bufRecs.WithLabelValues(name),
		bufBytes: m.bufBytes.WithLabelValues(name),
	}, nil
}

// Emit queues msg under key, with the content-type and message headers
// (ProtoHeaders). It returns false when msg was dropped (buffer full,
// encoding failed, or the emitter stopped).
func (e *Emitter) Emit(key string, msg proto.Message) bool {
	e.emitted.Inc()
	b, err := proto.Marshal(msg)
	if err != nil {
		e.failed.Inc()
		e.dropped.Inc()
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		e.dropped.Inc()
		return false
	}
	if name := schemas.MessageName(msg); name != e.hdrName {
		e.hdrName, e.hdrs = name, ProtoHeaders(msg)
	}
	r := &kgo.Record{Topic: e.topic, Key: []byte(key), Value: b, Headers: e.hdrs}
	n := recordBytes(r)
	if e.heldRecords.Load()+1 > e.maxRecords || e.heldBytes.Load()+n > e.maxBytes {
		e.dropped.Inc()
		return false
	}
	select {
	case e.ch <- r:
		e.hold(1, n)
		return true
	default: // not reached: the queue holds maxRecords
		e.dropped.Inc()
		return false
	}
}

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

// Run produces queued records until ctx is done, then hands what is
// queued to the client and waits until Kafka acknowledged or failed
// every record (bounded by the client's delivery timeout, or by closing
// the client), and returns nil. Records are never failed because ctx
// ended; a record the client has no room for is dropped, not waited for.
func (e *Emitter) Run(ctx context.Context) error {
	pctx := context.WithoutCancel(ctx)
	for {
		select {
		case r := <-e.ch:
			e.produce(pctx, r)
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

func (e *Emitter) produce(ctx context.Context, r *kgo.Record) {
	e.inflight.Add(1)
	n := recordBytes(r)
	e.cl.TryProduce(ctx, r, func(_ *kgo.Record, err error) {
		defer e.inflight.Done()
		e.hold(-1, -n)
		if err != nil {
			e.failed.Inc()
			e.dropped.Inc()
			return
		}
		e.produced.Inc()
	})
}
