package snapshots

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Watcher follows one cluster's key.
type Watcher struct {
	url     string
	bucket  string
	cluster string
	opts    []nats.Option
	retry   time.Duration
	out     chan []byte
}

// NewWatcher returns a watcher of cluster's key in bucket ("" means
// DefaultBucket) on the NATS server at url. It owns its own connection so
// that it keeps trying when NATS is down or the bucket does not exist yet:
// a gateway must start, and keep running, without the control plane.
func NewWatcher(url, bucket, cluster string, opts ...nats.Option) *Watcher {
	if bucket == "" {
		bucket = DefaultBucket
	}
	return &Watcher{url: url, bucket: bucket, cluster: cluster, opts: opts, retry: time.Second, out: make(chan []byte, 1)}
}

// Updates delivers the raw bytes of every value put under the key (the
// current one first), newest-wins: a slow reader misses intermediate
// values, never the latest. The channel is closed when Run returns.
func (w *Watcher) Updates() <-chan []byte { return w.out }

// Run watches until ctx is done, reconnecting and re-watching after any
// failure. It returns nil when ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	defer close(w.out)
	opts := append([]nats.Option{
		nats.Name("switchyard-snapshot-watcher-" + w.cluster),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(w.retry),
		nats.RetryOnFailedConnect(true),
	}, w.opts...)
	for ctx.Err() == nil {
		err := w.watchOnce(ctx, opts)
		if ctx.Err() != nil {
			return nil
		}
		_ = err // transient: NATS down, bucket missing; try again
		t := time.NewTimer(w.retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

func (w *Watcher) watchOnce(ctx context.Context, opts []nats.Option) error {
	// A KV watch is an ordered consumer that only notices a restarted
	// server after missed heartbeats; re-watching on reconnect delivers the
	// current value at once.
	reconnected := make(chan struct{}, 1)
	opts = append(opts, nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}))
	nc, err := nats.Connect(w.url, opts...)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", w.url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	for {
		err := w.watchKV(ctx, js, reconnected)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		// Reconnected: watch again on the same connection.
	}
}

// watchKV watches the key until ctx is done (ctx.Err()), the connection
// reconnects (nil) or the watch fails (an error).
func (w *Watcher) watchKV(ctx context.Context, js jetstream.JetStream, reconnected <-chan struct{}) error {
	var kv jetstream.KeyValue
	var err error
	for {
		kv, err = js.KeyValue(ctx, w.bucket)
		if err == nil {
			break
		}
		t := time.NewTimer(w.retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-reconnected:
			t.Stop()
		case <-t.C:
		}
	}
	kw, err := kv.Watch(ctx, w.cluster)
	if err != nil {
		return fmt.Errorf("watching %s/%s: %w", w.bucket, w.cluster, err)
	}
	defer kw.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-reconnected:
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return fmt.Errorf("watch of %s/%s ended", w.bucket, w.cluster)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // end of initial values, or a delete
			}
			w.offer(e.Value())
		}
	}
}

// offer replaces any undelivered value with v.
func (w *Watcher) offer(v []byte) {
	for {
		select {
		case w.out <- v:
			return
		default:
		}
		select {
		case <-w.out:
		default:
		}
	}
}
