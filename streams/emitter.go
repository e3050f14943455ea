package streams

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Emitter produces protobuf records to one topic from a bounded buffer.
// Emit never blocks: when the buffer is full the record is dropped and
// counted. Run drains the buffer into Kafka until ctx is done.
type Emitter struct {
	cl    *kgo.Client
	topic string
	ch    chan *kgo.Record

	emitted  prometheus.Counter
	dropped  prometheus.Counter
	failed   prometheus.Counter
	produced prometheus.Counter

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	// headers of the last message type emitted (see ProtoHeaders),
	// shared by its records; under mu.
	hdrName string
	hdrs    []kgo.RecordHeader
}

// emitterMetrics are shared by every emitter of a Registerer, told apart
// by the emitter label.
type emitterMetrics struct {
	emitted, dropped, failed, produced *prometheus.CounterVec
}

// NewEmitter returns an emitter for topic with a buffer of size records
// (default 4096). reg may be nil. name labels its metrics
// (switchyard_emitter_*_total{emitter=name}); a registration error is
// returned.
func NewEmitter(cl *kgo.Client, topic, name string, size int, reg prometheus.Registerer) (*Emitter, error) {
	if size <= 0 {
		size = 4096
	}
	vec := func(n, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "emitter", Name: n, Help: help,
		}, []string{"emitter"})
	}
	m := emitterMetrics{
		emitted:  vec("records_total", "Records handed to the emitter."),
		dropped:  vec("dropped_total", "Records dropped because the emitter's buffer was full."),
		failed:   vec("failed_total", "Records Kafka did not accept."),
		produced: vec("produced_total", "Records Kafka acknowledged."),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.emitted, &m.dropped, &m.failed, &m.produced} {
			var err error
			if *c, err = obs.Register(reg, *c); err != nil {
				return nil, fmt.Errorf("emitter %s: %w", name, err)
			}
		}
	}
	return &Emitter{
		cl: cl, topic: topic, ch: make(chan *kgo.Record, size),
		emitted:  m.emitted.WithLabelValues(name),
		dropped:  m.dropped.WithLabelValues(name),
		failed:   m.failed.WithLabelValues(name),
		produced: m.produced.WithLabelValues(name),
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
	select {
	case e.ch <- &kgo.Record{Topic: e.topic, Key: []byte(key), Value: b, Headers: e.hdrs}:
		return true
	default:
		e.dropped.Inc()
		return false
	}
}

// Run produces queued records until ctx is done, then flushes what is
// buffered (bounded by the client's own timeouts) and returns nil.
func (e *Emitter) Run(ctx context.Context) error {
	for {
		select {
		case r := <-e.ch:
			e.produce(ctx, r)
		case <-ctx.Done():
			e.mu.Lock()
			e.closed = true
			e.mu.Unlock()
			flushCtx := context.WithoutCancel(ctx)
			for {
				select {
				case r := <-e.ch:
					e.produce(flushCtx, r)
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
	e.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
		defer e.inflight.Done()
		if err != nil {
			e.failed.Inc()
			return
		}
		e.produced.Inc()
	})
}
