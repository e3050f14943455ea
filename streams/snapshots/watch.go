package snapshots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
)

// fastBuffer is how many of the key's messages the subscription holds
// while the watcher is busy; more are dropped by the NATS client (the KV
// watch still delivers the latest).
const fastBuffer = 4

// kvOperation is the header of a KV delete or purge (nats.go's kvop).
const kvOperation = "KV-Operation"

// Watcher follows one cluster's key.
//
// It watches the key (a JetStream KV watch: the current value first, then
// every put, caught up again after a reconnect) and, with FastPath, also
// subscribes to the key's subject with core NATS on the same connection
// (a KV put is a JetStream publish on $KV.<bucket>.<key>), which delivers
// a put's bytes as it is published, usually before the KV watch does. It
// is off by default: on one NATS server the server fans a core message out
// to every subscriber from the publisher's connection, one subscriber
// after the other, while the KV watches' consumers deliver in parallel, so
// with 200 gateways it made delivery slower, not faster
// (docs/optimizer.md, fan-out). With FastPath, the KV watch is the source
// of truth: a value the
// subscription offered is not offered again when the watch delivers the
// same bytes (nor a value the reader took before, when every value
// offered since is newer: the watch lags puts behind, and a gateway takes
// no version below the one it holds); any other value the watch delivers
// is offered, so a publish the stream refused (a
// compare-and-set put that lost) is replaced by what the store holds, at
// the same version too (the gateway takes an equal version with another
// entry); and the subscription's values not newer than the version the
// watch delivered last are not offered. If the server refuses the
// subscription (a role without subscribe on $KV.<bucket>.>), the watcher
// logs it once and goes on with the KV watch alone. The subscription
// holds at most fastBuffer messages and ends with the watch.
type Watcher struct {
	url     string
	bucket  string
	cluster string
	opts    []nats.Option
	retry   time.Duration
	out     chan []byte
	log     *slog.Logger
	fast    bool
	denied  atomic.Bool // the server refused the key's subscription
	stats   watchCounters
	// check, when set, vouches for a value and reads its version (see
	// Check); floor is the newest version it vouched for (Run's).
	check func([]byte) (uint64, error)
	floor uint64
	// relay, when set (tests), stands between the KV watch and the loop.
	relay func(<-chan jetstream.KeyValueEntry) <-chan jetstream.KeyValueEntry
}

// WatchOpt configures a Watcher (see Watcher.With).
type WatchOpt interface{ applyWatch(*Watcher) }

type watchOpt func(*Watcher)

func (o watchOpt) applyWatch(w *Watcher) { o(w) }

// WatchLogger is where the watcher logs (once) that the server refused
// the key's subscription. Default slog.Default().
func WatchLogger(l *slog.Logger) WatchOpt {
	return watchOpt(func(w *Watcher) {
		if l != nil {
			w.log = l
		}
	})
}

// FastPath turns the core NATS subscription to the key's subject on or
// off. Default off: the KV watch alone. On needs subscribe permission on
// $KV.<bucket>.> (refused, the watcher logs it once and watches alone).
func FastPath(on bool) WatchOpt { return watchOpt(func(w *Watcher) { w.fast = on }) }

// Check makes the watcher deliver no snapshot older than the newest it
// can see: each watch reads the key's whole history (the bucket keeps 64
// revisions) and offers the newest value check vouches for, not the
// key's current value when that one is older (an old snapshot re-put);
// later puts are offered only when check rejects them (the reader
// rejects and counts them too) or their version is at least the newest
// vouched for so far. A vouched-for value older than that is a rollback:
// not offered, counted (WatchStats.Rollbacks) and logged at WARN. check
// returns the value's version, or an error when it is not one the reader
// would apply (unsigned, badly signed, dated in the future): such values
// never raise the floor, so a forged version cannot hold real snapshots
// back. Default none: the current value and every put are offered.
func Check(check func(b []byte) (version uint64, err error)) WatchOpt {
	return watchOpt(func(w *Watcher) { w.check = check })
}

// WatchStats counts what a watcher offered and skipped.
type WatchStats struct {
	// Fast: values the key's subscription offered first.
	Fast uint64
	// Watch: values the KV watch offered (initial values, catch-up, and
	// values that differ from the one offered last).
	Watch uint64
	// Duplicates: values skipped, byte-identical to the one offered last.
	Duplicates uint64
	// NotNewer: the subscription's values skipped, not newer than the
	// version the KV watch delivered last (a publish the stream refused).
	NotNewer uint64
	// Invalid: compressed values that did not decode (DecodeValue's
	// ErrValue), from either source; each is logged, and offered as
	// stored when it is offered at all.
	Invalid uint64
	// Rollbacks: values Check vouched for that are older than the newest
	// it vouched for (an old snapshot re-put), not offered.
	Rollbacks uint64
}

type watchCounters struct{ fast, watch, dup, notNewer, invalid, rollback atomic.Uint64 }

// Rollbacks is WatchStats.Rollbacks (for a gateway's metric).
func (w *Watcher) Rollbacks() uint64 { return w.stats.rollback.Load() }

// NewWatcher returns a watcher of cluster's key in bucket ("" means
// DefaultBucket) on the NATS server at url. It owns its own connection so
// that it keeps trying when NATS is down or the bucket does not exist yet:
// a gateway must start, and keep running, without the control plane.
func NewWatcher(url, bucket, cluster string, opts ...nats.Option) *Watcher {
	if bucket == "" {
		bucket = DefaultBucket
	}
	return &Watcher{url: url, bucket: bucket, cluster: cluster, opts: opts, retry: time.Second,
		out: make(chan []byte, 1), log: slog.Default()}
}

// With applies opts (before Run) and returns w.
func (w *Watcher) With(opts ...WatchOpt) *Watcher {
	for _, o := range opts {
		o.applyWatch(w)
	}
	return w
}

// Stats returns the watcher's counts so far.
func (w *Watcher) Stats() WatchStats {
	return WatchStats{Fast: w.stats.fast.Load(), Watch: w.stats.watch.Load(),
		Duplicates: w.stats.dup.Load(), NotNewer: w.stats.notNewer.Load(), Invalid: w.stats.invalid.Load(),
		Rollbacks: w.stats.rollback.Load()}
}

// Updates delivers the protobuf bytes of every value put under the key
// (the current one first), newest-wins: a slow reader misses intermediate
// values, never the latest. A compressed value (Compression) is delivered
// decoded (DecodeValue), so the reader sees the signed protobuf whatever
// the optimizer writes; one that does not decode is logged, counted
// (WatchStats.Invalid) and delivered as stored, so the reader rejects it
// as it rejects any value that is not a snapshot (a gateway: reason
// "decode", keeping its snapshot). A value is delivered again only if
// other bytes were delivered in between, or after a reconnect. The
// channel is closed when Run returns.
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

// subject is the key's subject: a put is a publish on it.
func (w *Watcher) subject() string { return "$KV." + w.bucket + "." + w.cluster }

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
	if w.fast {
		// The server answers a refused subscription asynchronously; the
		// caller's handler (or nats.go's default) gets every other error.
		prev := nc.ErrorHandler()
		nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
			if !w.refused(err) && prev != nil {
				prev(c, s, err)
			}
		})
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	for {
		err := w.watchKV(ctx, nc, js, reconnected)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		// Reconnected: watch again on the same connection.
	}
}

// refused reports whether err is the server's refusal of the key's
// subscription, noting it and logging it once.
func (w *Watcher) refused(err error) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `Subscription to "`+w.subject()+`"`) {
		return false
	}
	if w.denied.CompareAndSwap(false, true) {
		w.log.Warn("snapshot key subscription refused; following the KV watch alone (allow subscribe on $KV.<bucket>.> for the gateway's role, docs/security.md)",
			"subject", w.subject(), "err", err)
	}
	return true
}

// subscribe subscribes to the key's subject, or returns a nil channel
// and stop when the fast path is off or was refused.
func (w *Watcher) subscribe(nc *nats.Conn) (<-chan *nats.Msg, func()) {
	if !w.fast || w.denied.Load() {
		return nil, func() {}
	}
	ch := make(chan *nats.Msg, fastBuffer)
	sub, err := nc.ChanSubscribe(w.subject(), ch)
	if err != nil {
		return nil, func() {} // closed connection: the watch fails too
	}
	return ch, func() { _ = sub.Unsubscribe() }
}

// watchKV watches the key until ctx is done (ctx.Err()), the connection
// reconnects (nil) or the watch fails (an error).
func (w *Watcher) watchKV(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, reconnected <-chan struct{}) error {
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
	// Subscribed before the watch starts, so no put falls between them.
	fast, unsubscribe := w.subscribe(nc)
	defer unsubscribe()
	var wopts []jetstream.WatchOpt
	if w.check != nil {
		wopts = append(wopts, jetstream.IncludeHistory())
	}
	kw, err := kv.Watch(ctx, w.cluster, wopts...)
	if err != nil {
		return fmt.Errorf("watching %s/%s: %w", w.bucket, w.cluster, err)
	}
	defer stopWatch(nc, kw)
	updates := kw.Updates()
	if w.relay != nil {
		updates = w.relay(updates)
	}
	st := offered{keep: 1}
	if fast != nil {
		st.keep = recent
	}
	// With a check, the initial values (the key's history, oldest first)
	// are gathered and the newest vouched for offered at their end.
	hist := history{active: w.check != nil}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-reconnected:
			return nil
		case m := <-fast:
			if m.Header.Get(kvOperation) != "" {
				continue // a delete or purge
			}
			w.offerFast(&st, m.Data)
		case e, ok := <-updates:
			if !ok {
				return fmt.Errorf("watch of %s/%s ended", w.bucket, w.cluster)
			}
			if e == nil {
				if hist.active {
					w.endHistory(&st, &hist)
				}
				continue // end of initial values
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue // a delete
			}
			if hist.active {
				w.noteHistory(&hist, e.Value(), e.Revision())
				continue
			}
			w.offerChecked(&st, e.Value(), e.Revision())
		}
	}
}

// history is what a watch with a check gathered of the key's history.
type history struct {
	active  bool
	best    []byte // the newest value vouched for, decoded
	bestVer uint64
	last    []byte // the current value, decoded
	lastRev uint64
	lastOK  bool // the current value vouched for
	lastVer uint64
}

// noteHistory takes one initial value of a watch with a check.
func (w *Watcher) noteHistory(h *history, v []byte, rev uint64) {
	v = w.decoded(v, "watch")
	h.last, h.lastRev, h.lastOK = v, rev, false
	ver, err := w.check(v)
	if err != nil {
		return
	}
	h.lastOK, h.lastVer = true, ver
	if h.best == nil || ver >= h.bestVer {
		h.best, h.bestVer = v, ver
	}
}

// endHistory offers what the history holds: the newest value vouched
// for (at least the floor), unless the current value is not vouched for
// at all (then that, for the reader to reject; the newest is offered
// after it, as newest-wins keeps it).
func (w *Watcher) endHistory(st *offered, h *history) {
	h.active = false
	if h.last == nil {
		return
	}
	if !h.lastOK {
		w.offerStored(st, h.last)
	}
	if h.best == nil {
		return
	}
	if h.bestVer < w.floor {
		w.rollback(h.bestVer, h.lastRev, "history")
		return
	}
	w.floor = h.bestVer
	if h.lastOK && h.lastVer < h.bestVer {
		w.rollback(h.lastVer, h.lastRev, "current value")
	}
	w.offerStored(st, h.best)
}

// offerChecked offers v, a put the KV watch delivered, unless the check
// vouches for it and it is older than the newest vouched for.
func (w *Watcher) offerChecked(st *offered, v []byte, rev uint64) {
	if w.check == nil {
		w.offerStored(st, v)
		return
	}
	d := w.decoded(v, "watch")
	ver, err := w.check(d)
	if err == nil {
		if ver < w.floor {
			w.rollback(ver, rev, "put")
			return
		}
		w.floor = ver
	}
	w.offerStored(st, v)
}

// rollback counts and logs a value older than the newest vouched for.
func (w *Watcher) rollback(ver, rev uint64, what string) {
	w.stats.rollback.Add(1)
	w.log.Warn("snapshot older than the newest seen, not applied (an old snapshot re-put?)",
		"bucket", w.bucket, "cluster", w.cluster, "source", what, "version", ver, "revision", rev, "newest_version", w.floor)
}

// stopWatch stops kw, a watch on nc, unless nc is not connected: then
// stopping would wait out the JetStream API timeout (5 s) for the
// server to delete the watch's consumer, holding up a shutdown with NATS
// gone; closing nc drops the subscription, and the server removes the
// ephemeral consumer once it is inactive.
func stopWatch(nc *nats.Conn, kw jetstream.KeyWatcher) {
	if nc.IsConnected() {
		_ = kw.Stop()
	}
}

// recent is how many values a watch with the key's subscription keeps
// (the last offered and those the reader took before it).
const recent = 4

// sent is a value offered and its version (0 when it does not read).
type sent struct {
	b   []byte
	ver uint64
}

// offered is what one watch offered and what the store holds as far as
// the KV watch told.
type offered struct {
	// sent holds up to keep values, oldest first: the last one offered
	// and, before it, values the reader took.
	sent      []sent
	keep      int
	stored    bool   // the KV watch delivered a value
	storedVer uint64 // its version
}

// last is the value offered last, or nil.
func (st *offered) last() []byte {
	if len(st.sent) == 0 {
		return nil
	}
	return st.sent[len(st.sent)-1].b
}

// seen reports whether the reader took v (of version ver) and every
// value offered after it is newer: offering it again changes nothing
// for a reader that takes no version below the one it holds.
func (st *offered) seen(v []byte, ver uint64) bool {
	if len(st.sent) < 2 {
		return false
	}
	after := st.sent[len(st.sent)-1].ver
	for i := len(st.sent) - 2; i >= 0; i-- {
		s := st.sent[i]
		if s.ver == ver && ver < after && bytes.Equal(s.b, v) {
			return true
		}
		after = min(after, s.ver)
	}
	return false
}

// decoded is v decoded (DecodeValue), or v itself, counted and logged,
// when it does not decode.
func (w *Watcher) decoded(v []byte, source string) []byte {
	b, err := DecodeValue(v)
	if err != nil {
		w.stats.invalid.Add(1)
		w.log.Warn("snapshot value rejected", "bucket", w.bucket, "cluster", w.cluster, "source", source, "bytes", len(v), "err", err)
		return v
	}
	return b
}

// offerStored offers v, a value from the KV watch (decoded first),
// unless it is the one offered last (the subscription's, usually) or one
// the reader took with only newer values offered since (the watch lags
// behind the subscription).
func (w *Watcher) offerStored(st *offered, v []byte) {
	v = w.decoded(v, "watch")
	ver, ok := versionOf(v)
	if ok {
		st.stored, st.storedVer = true, ver
	}
	if last := st.last(); last != nil && bytes.Equal(last, v) || ok && st.seen(v, ver) {
		w.stats.dup.Add(1)
		return
	}
	w.stats.watch.Add(1)
	w.offer(st, v, ver)
}

// offerFast offers v, a value published on the key's subject (decoded
// first), unless it is the one offered last or not newer than the
// store's (the stream refused it, or it is older than what the KV watch
// delivered); a value whose version does not read is left to the KV
// watch.
func (w *Watcher) offerFast(st *offered, v []byte) {
	v = w.decoded(v, "subscription")
	if last := st.last(); last != nil && bytes.Equal(last, v) {
		w.stats.dup.Add(1)
		return
	}
	ver, ok := versionOf(v)
	if !ok || st.stored && ver <= st.storedVer || w.check != nil && ver < w.floor {
		w.stats.notNewer.Add(1)
		return
	}
	w.stats.fast.Add(1)
	w.offer(st, v, ver)
}

// versionOf reads WeightSnapshot.version (field 2; absent means 0)
// without decoding the rest.
func versionOf(b []byte) (uint64, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == 2 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			return v, n >= 0
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
	}
	return 0, true
}

// offer replaces any undelivered value with v, and notes it in st.
func (w *Watcher) offer(st *offered, v []byte, ver uint64) {
	taken := true // the value offered last, if any
	for {
		select {
		case w.out <- v:
			if !taken && len(st.sent) > 0 { // the reader never got the value offered last
				st.sent = st.sent[:len(st.sent)-1]
			}
			if keep := max(st.keep, 1); len(st.sent) >= keep {
				st.sent = append(st.sent[:0], st.sent[len(st.sent)-keep+1:]...)
			}
			st.sent = append(st.sent, sent{v, ver})
			return
		default:
		}
		select {
		case <-w.out:
			taken = false
		default:
		}
	}
}
