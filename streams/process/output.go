package process

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// write computes and publishes each batch's estimates and writes its
// checkpoint, in order, until in is closed or an error (a failed output
// or checkpoint) stops it. Publishing and checkpointing run on two
// goroutines: while a checkpoint waits for its outputs' acknowledgements
// and for Kafka to take it, the next batches' estimates are computed and
// produced. Every batch still gets its checkpoint, in order, and each
// one only after every output up to its batch is acknowledged.
func (r *runner) write(ctx context.Context, in <-chan batch) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// At most a few published batches wait for their checkpoints, so a
	// slow checkpoint slows publishing down.
	published := make(chan batch, 4)
	ckptErr := make(chan error, 1)
	go func() {
		for b := range published {
			if err := r.checkpoint(ctx, b); err != nil {
				cancel() // stops publishing
				for range published {
				}
				ckptErr <- err
				return
			}
		}
		ckptErr <- nil
	}()
	var err error
publishing:
	for {
		var b batch
		select {
		case nb, ok := <-in:
			if !ok {
				break publishing
			}
			b = nb
		case <-ctx.Done():
			break publishing
		}
		if err = r.publish(ctx, b); err != nil {
			break
		}
		b.fired = nil // published: the checkpoint needs none of the window state
		select {
		case published <- b:
		case <-ctx.Done():
			break publishing
		}
	}
	close(published)
	if cerr := <-ckptErr; cerr != nil {
		return cerr
	}
	if err == nil {
		err = ctx.Err() // stopped from outside before the last checkpoint
	}
	return err
}

// publish computes and produces the estimates of b's windows.
func (r *runner) publish(ctx context.Context, b batch) (err error) {
	endSpan := r.startPublish(ctx, b)
	defer func() { endSpan(err) }()
	// Outputs are produced without ctx: once fired they must reach Kafka
	// before the final checkpoint.
	pctx := context.WithoutCancel(ctx)
	epoch := b.epoch
	hdrs := streams.ProtoHeaders(&schemas.Estimate{})
	var acked [3]func(*kgo.Record, error)
	for k := range acked {
		published := r.p.m.published[k]
		acked[k] = func(_ *kgo.Record, err error) {
			r.acks.done(epoch, err)
			if err == nil {
				r.p.published.Add(1)
				published.Inc()
			}
		}
	}
	for _, w := range b.fired {
		f := r.core.estimates(w, true) // encoded and dropped
		keys, vals, err := marshalAll(f.Estimates, r.encs)
		if err != nil {
			return err
		}
		recs := make([]kgo.Record, len(f.Estimates))
		ts := time.UnixMilli(f.End)
		r.acks.add(epoch, len(recs))
		for i, e := range f.Estimates {
			rec := &recs[i]
			rec.Topic, rec.Key, rec.Value, rec.Timestamp = r.p.topics.Estimates, keys[i], vals[i], ts
			rec.Headers = hdrs // shared: nothing writes them
			r.cl.Produce(pctx, rec, acked[estimateKind(e)])
		}
	}
	return nil
}

// marshalAll encodes one window's estimates (estimate.Marshal) and
// their keys (estimate.Key), a chunk per encoder, each on its own
// goroutine into one buffer its keys and values share; the bytes do not
// depend on the encoders. Each encoder then rotates (one generation per
// window).
func marshalAll(ests []*schemas.Estimate, encs []*estimate.Encoder) (keys, vals [][]byte, err error) {
	keys = make([][]byte, len(ests))
	vals = make([][]byte, len(ests))
	errs := make([]error, len(ests))
	chunk := max(256, (len(ests)+len(encs)-1)/len(encs))
	var wg sync.WaitGroup
	for w, lo := 0, 0; lo < len(ests); w, lo = w+1, lo+chunk {
		hi := min(lo+chunk, len(ests))
		enc := encs[w]
		wg.Go(func() {
			size := 0
			for _, e := range ests[lo:hi] {
				size += 64
				if _, ok := e.GetKind().(*schemas.Estimate_Engine); ok {
					size += 640 // two profiles
				}
			}
			buf := make([]byte, 0, size)
			for i := lo; i < hi; i++ {
				at := len(buf)
				buf = estimate.AppendKey(buf, ests[i])
				keys[i] = buf[at:len(buf):len(buf)]
				at = len(buf)
				buf, errs[i] = enc.AppendMarshal(buf, ests[i])
				vals[i] = buf[at:len(buf):len(buf)]
			}
		})
	}
	wg.Wait()
	for _, enc := range encs {
		enc.Rotate()
	}
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return keys, vals, nil
}

// estimateKind indexes metrics.published: 0 engine, 1 demand, 2 network.
func estimateKind(e *schemas.Estimate) int {
	switch e.GetKind().(type) {
	case *schemas.Estimate_Engine:
		return 0
	case *schemas.Estimate_Demand:
		return 1
	}
	return 2
}

// acks tracks produced outputs by epoch until Kafka acknowledges them.
type acks struct {
	mu      sync.Mutex
	cond    sync.Cond
	pending map[uint64]int
	err     error // the first failed output
}

func newAcks() *acks {
	a := &acks{pending: map[uint64]int{}}
	a.cond.L = &a.mu
	return a
}

// add counts n more outputs of epoch.
func (a *acks) add(epoch uint64, n int) {
	if n <= 0 {
		return // no entry that nothing would ever complete
	}
	a.mu.Lock()
	a.pending[epoch] += n
	a.mu.Unlock()
}

// done acknowledges one output of epoch; waiters wake only when an epoch
// completes or an output fails.
func (a *acks) done(epoch uint64, err error) {
	a.mu.Lock()
	wake := false
	if a.pending[epoch]--; a.pending[epoch] <= 0 {
		delete(a.pending, epoch)
		wake = true
	}
	if err != nil && a.err == nil {
		a.err = err
		wake = true
	}
	if wake {
		a.cond.Broadcast()
	}
	a.mu.Unlock()
}

// wait returns once every output of the epochs up to epoch is
// acknowledged, or an output failed, or ctx is done.
func (a *acks) wait(ctx context.Context, epoch uint64) error {
	stop := context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if a.err != nil {
			return fmt.Errorf("producing outputs: %w", a.err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for outputs: %w", err)
		}
		busy := false
		for e := range a.pending {
			if e <= epoch {
				busy = true
				break
			}
		}
		if !busy {
			return nil
		}
		a.cond.Wait()
	}
}
