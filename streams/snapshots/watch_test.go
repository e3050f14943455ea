package snapshots

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
)

// plan is cluster "eu"'s snapshot of version v routing on engine, with
// peer cluster "peer-of-"+engine (what a gateway shows of it).
func plan(t *testing.T, v uint64, engine string) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&schemas.WeightSnapshot{SchemaVersion: schemas.Version,
		Version: v, CreatedUnixMs: time.Now().UnixMilli(), Clusters: []*schemas.ClusterWeights{{Cluster: "eu",
			PeerClusters: []string{"peer-of-" + engine},
			Weights:      []*schemas.EngineWeight{{EngineId: engine, EndpointUrl: "http://127.0.0.1:1", Weight: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// held relays a KV watch's entries, holding each of revision above 1
// until a value is sent on release, or release is closed.
type held struct{ release chan struct{} }

func (h held) relay(ctx context.Context) func(<-chan jetstream.KeyValueEntry) <-chan jetstream.KeyValueEntry {
	return func(in <-chan jetstream.KeyValueEntry) <-chan jetstream.KeyValueEntry {
		out := make(chan jetstream.KeyValueEntry)
		go func() {
			for e := range in {
				if e != nil && e.Revision() > 1 {
					select {
					case <-h.release:
					case <-ctx.Done():
						return
					}
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}()
		return out
	}
}

// one lets one held entry through.
func (h held) one(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case h.release <- struct{}{}:
	case <-ctx.Done():
		t.Fatal("the relay took no release")
	}
}

// run starts w and stops it at the end of the test.
func run(t *testing.T, ctx context.Context, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// next is the next value w offers.
func next(t *testing.T, ctx context.Context, w *Watcher) []byte {
	t.Helper()
	select {
	case b := <-w.Updates():
		return b
	case <-ctx.Done():
		t.Fatalf("no update (stats %+v)", w.Stats())
		return nil
	}
}

// none fails if w has a value waiting.
func none(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case b := <-w.Updates():
		v, _ := versionOf(b)
		t.Fatalf("%s: version %d offered again (stats %+v)", what, v, w.Stats())
	default:
	}
}

func openKV(t *testing.T, ctx context.Context, ns *server.Server) jetstream.KeyValue {
	t.Helper()
	js := testenv.JetStream(t, ns)
	if _, err := Open(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestWatcherFastPathBeforeWatch: with the KV watch held after the
// initial value, a put still reaches Updates (through the key's
// subscription); when the watch delivers the same bytes, also three
// puts late, they are not offered again, and every put is offered once.
func TestWatcherFastPathBeforeWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ns := testenv.NATS(t)
	kv := openKV(t, ctx, ns)
	if _, err := kv.Put(ctx, "eu", plan(t, 1, "a")); err != nil {
		t.Fatal(err)
	}
	h := held{release: make(chan struct{})}
	w := NewWatcher(ns.ClientURL(), "", "eu").With(FastPath(true))
	w.relay = h.relay(ctx)
	run(t, ctx, w)
	if v, _ := versionOf(next(t, ctx, w)); v != 1 {
		t.Fatalf("initial version %d", v)
	}
	p2 := plan(t, 2, "a")
	if _, err := kv.Put(ctx, "eu", p2); err != nil {
		t.Fatal(err)
	}
	if got := next(t, ctx, w); !bytes.Equal(got, p2) {
		t.Fatal("not version 2")
	}
	if s := w.Stats(); s.Fast != 1 || s.Watch != 1 {
		t.Fatalf("stats %+v, want version 2 from the subscription while the watch is held", s)
	}
	h.one(t, ctx)
	testenv.Eventually(t, 10*time.Second, func() bool { return w.Stats().Duplicates == 1 }, "the watch's version 2 not seen")
	none(t, w, "the watch's version 2")

	// The watch three puts behind: each value is offered from the
	// subscription, and the watch's copies are skipped when they come.
	for v := uint64(3); v <= 5; v++ {
		put(t, ctx, kv, w, v)
	}
	for range 3 {
		h.one(t, ctx)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return w.Stats().Duplicates == 4 }, "the watch's versions 3 to 5 not seen")
	none(t, w, "the watch's versions 3 to 5")

	// Both paths free: each put is offered once, whichever path is
	// first; its second arrival is skipped as a duplicate or, when the
	// subscription lags behind the watch, as not newer than the store's.
	close(h.release)
	for v := uint64(6); v <= 8; v++ {
		put(t, ctx, kv, w, v)
		want := v - 1
		testenv.Eventually(t, 10*time.Second, func() bool { s := w.Stats(); return s.Duplicates+s.NotNewer == want },
			fmt.Sprintf("version %d not seen twice", v))
		none(t, w, fmt.Sprintf("version %d's second arrival", v))
	}
	if s := w.Stats(); s.Fast+s.Watch != 8 || s.Duplicates+s.NotNewer != 7 {
		t.Fatalf("stats %+v, want 8 offered and 7 skipped", s)
	}
}

// put puts version v of the plan and checks w offers it next.
func put(t *testing.T, ctx context.Context, kv jetstream.KeyValue, w *Watcher, v uint64) {
	t.Helper()
	if _, err := kv.Put(ctx, "eu", plan(t, v, "a")); err != nil {
		t.Fatal(err)
	}
	if got, _ := versionOf(next(t, ctx, w)); got != v {
		t.Fatalf("got version %d, want %d", got, v)
	}
}

// refusedPut publishes b on the key's subject as a compare-and-set put
// expecting revision rev that the stream refuses (another replica's
// write won): core subscribers still get it.
func refusedPut(t *testing.T, ctx context.Context, ns *server.Server, b []byte, rev uint64) {
	t.Helper()
	js := testenv.JetStream(t, ns)
	m := nats.NewMsg("$KV." + DefaultBucket + ".eu")
	m.Data = b
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if _, err := js.PublishMsg(ctx, m); err == nil {
		t.Fatalf("the stream stored a put expecting revision %d", rev)
	}
}

// TestWatcherStoreReplacesRefusedPublish: a publish the stream refused
// reaches the watcher first, and the store's value of the same version,
// delivered by the KV watch after it, is offered; a gateway applying the
// offers ends on the store's plan. A refused publish arriving after the
// watch delivered the store's value is not offered.
func TestWatcherStoreReplacesRefusedPublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ns := testenv.NATS(t)
	kv := openKV(t, ctx, ns)
	rev, err := kv.Put(ctx, "eu", plan(t, 1, "a"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New("eu", gateway.HealthInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	h := held{release: make(chan struct{})}
	w := NewWatcher(ns.ClientURL(), "", "eu").With(FastPath(true))
	w.relay = h.relay(ctx)
	run(t, ctx, w)
	apply := func(what string) {
		t.Helper()
		if err := g.ApplySnapshot(next(t, ctx, w)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	apply("initial")

	winner, loser := plan(t, 2, "a"), plan(t, 2, "b")
	if _, err := kv.Update(ctx, "eu", winner, rev); err != nil {
		t.Fatal(err)
	}
	apply("the winner from the subscription")
	refusedPut(t, ctx, ns, loser, rev)
	if got := next(t, ctx, w); !bytes.Equal(got, loser) {
		t.Fatal("the refused publish was not offered")
	}
	if err := g.ApplySnapshot(loser); err != nil {
		t.Fatalf("the refused publish: %v", err)
	}
	if p := g.PeerClusters(); len(p) != 1 || p[0] != "peer-of-b" {
		t.Fatalf("routing on %v after the refused publish", p)
	}
	close(h.release) // the watch delivers the store's version 2: the winner
	if got := next(t, ctx, w); !bytes.Equal(got, winner) {
		t.Fatal("the store's value was not offered after the refused publish")
	}
	if err := g.ApplySnapshot(winner); err != nil {
		t.Fatalf("the store's value: %v", err)
	}
	if p := g.PeerClusters(); g.Stats().SnapshotVersion != 2 || len(p) != 1 || p[0] != "peer-of-a" {
		t.Fatalf("routing on version %d %v, want the store's version 2", g.Stats().SnapshotVersion, p)
	}

	// The watch has delivered version 2: a refused publish of version 2
	// is not offered.
	refusedPut(t, ctx, ns, plan(t, 2, "c"), rev)
	testenv.Eventually(t, 10*time.Second, func() bool { return w.Stats().NotNewer == 1 }, "refused publish not seen")
	none(t, w, "a refused publish after the store's value")
}

// logged counts records whose message contains a string.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }
func (l *logged) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// TestWatcherSubscriptionRefused: a user whose role may not subscribe to
// $KV.<bucket>.> (the gateway role before the key subscription) still
// gets every value through the KV watch, also after reconnects, and the
// refusal is logged once.
func TestWatcherSubscriptionRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	const kvStream = "KV_" + DefaultBucket
	oldGateway := &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"$JS.API.INFO", "$JS.API.STREAM.INFO." + kvStream,
			"$JS.API.CONSUMER.CREATE." + kvStream + ".>", "$JS.API.CONSUMER.DELETE." + kvStream + ".>",
			"$JS.API.DIRECT.GET." + kvStream + ".>", "$JS.API.STREAM.MSG.GET." + kvStream, "$JS.FC." + kvStream + ".>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
	ns := testenv.NATSWith(t, server.Options{Users: []*server.User{{Username: "admin", Password: "a"},
		{Username: "gateway", Password: "g", Permissions: oldGateway}}})
	js := testenv.JetStream(t, ns, nats.UserInfo("admin", "a"))
	st, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(v uint64) {
		t.Helper()
		if err := st.Publish(ctx, &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: v,
			Clusters: []*schemas.ClusterWeights{{Cluster: "eu"}}}); err != nil {
			t.Fatal(err)
		}
	}
	publish(1)
	var log logged
	w := NewWatcher(ns.ClientURL(), "", "eu", nats.UserInfo("gateway", "g"), nats.ReconnectWait(10*time.Millisecond)).
		With(FastPath(true), WatchLogger(slog.New(&log)))
	run(t, ctx, w)
	if v, _ := versionOf(next(t, ctx, w)); v != 1 {
		t.Fatalf("initial version %d", v)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return log.count("refused") == 1 }, "refusal not logged")
	for v := uint64(2); v <= 4; v++ {
		if v == 4 {
			kick(t, ns, "switchyard-snapshot-watcher-eu")
		}
		publish(v)
		for {
			got, _ := versionOf(next(t, ctx, w))
			if got == v {
				break
			}
			if got > v {
				t.Fatalf("version %d, want %d", got, v)
			}
		}
	}
	if n := log.count("refused"); n != 1 {
		t.Errorf("refusal logged %d times, want once", n)
	}
	if s := w.Stats(); s.Fast != 0 {
		t.Errorf("stats %+v: offered from a refused subscription", s)
	}
}

// kick closes the server side of the connection named name; the client
// reconnects.
func kick(t *testing.T, ns *server.Server, name string) uint64 {
	t.Helper()
	cz, err := ns.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cz.Conns {
		if c.Name == name {
			if err := ns.DisconnectClientByID(c.Cid); err != nil {
				t.Fatal(err)
			}
			return c.Cid
		}
	}
	t.Fatalf("no connection %q", name)
	return 0
}

// keySubs is how many subscriptions to the key's subject the server
// holds for connections named name.
func keySubs(t *testing.T, ns *server.Server, name string) int {
	t.Helper()
	cz, err := ns.Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cz.Conns {
		if c.Name == name {
			for _, s := range c.Subs {
				if s == "$KV."+DefaultBucket+".eu" {
					n++
				}
			}
		}
	}
	return n
}

// TestWatcherSubscriptionEndsWithWatch: across reconnects the server
// holds one subscription to the key's subject for the watcher, and none
// once Run returns; a watcher without FastPath holds none.
func TestWatcherSubscriptionEndsWithWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ns := testenv.NATS(t)
	kv := openKV(t, ctx, ns)
	const name = "switchyard-snapshot-watcher-eu"
	w := NewWatcher(ns.ClientURL(), "", "eu", nats.ReconnectWait(10*time.Millisecond)).With(FastPath(true))
	off := NewWatcher(ns.ClientURL(), "", "eu", nats.Name("off"))
	run(t, ctx, off)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	for v := uint64(1); v <= 4; v++ {
		if v > 1 {
			kick(t, ns, name)
		}
		if _, err := kv.Put(ctx, "eu", plan(t, v, "a")); err != nil {
			t.Fatal(err)
		}
		for {
			got, _ := versionOf(next(t, ctx, w))
			if got == v {
				break
			}
		}
		testenv.Eventually(t, 5*time.Second, func() bool { return keySubs(t, ns, name) == 1 },
			fmt.Sprintf("after %d reconnects: not one subscription to the key", v-1))
		if got, _ := versionOf(next(t, ctx, off)); got < v-1 || keySubs(t, ns, "off") != 0 {
			t.Fatalf("the watcher without FastPath: version %d, %d subscriptions to the key", got, keySubs(t, ns, "off"))
		}
	}
	wcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return keySubs(t, ns, name) == 0 }, "subscription outlived Run")
}

func TestVersionOf(t *testing.T) {
	for _, tt := range []struct {
		b    []byte
		v    uint64
		ok   bool
		what string
	}{
		{plan(t, 12345, "a"), 12345, true, "plan"},
		{nil, 0, true, "empty: version 0"},
		{[]byte{0x10}, 0, false, "truncated varint"},
		{[]byte{0x22, 0x05, 0x01}, 0, false, "truncated field"},
	} {
		if v, ok := versionOf(tt.b); v != tt.v || ok != tt.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tt.what, v, ok, tt.v, tt.ok)
		}
	}
}

// TestOfferRules: sequences of values from the subscription (fast) and
// the KV watch (store), with the reader taking each offer or not, and
// what the reader gets.
func TestOfferRules(t *testing.T) {
	a1, a2, b2, a3, a4 := plan(t, 1, "a"), plan(t, 2, "a"), plan(t, 2, "b"), plan(t, 3, "a"), plan(t, 4, "a")
	name := map[string][]byte{"a1": a1, "a2": a2, "b2": b2, "a3": a3, "a4": a4}
	type step struct {
		from  string // "fast" or "store"
		value string
		take  bool   // the reader takes what is offered after the step
		want  string // what the reader takes ("" nothing)
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"each put once, the subscription first", []step{
			{"store", "a1", true, "a1"}, {"fast", "a2", true, "a2"}, {"store", "a2", true, ""},
			{"fast", "a3", true, "a3"}, {"store", "a3", true, ""}}},
		{"each put once, the watch first", []step{
			{"store", "a1", true, "a1"}, {"store", "a2", true, "a2"}, {"fast", "a2", true, ""}}},
		{"the watch a put behind", []step{
			{"store", "a1", true, "a1"}, {"fast", "a2", true, "a2"}, {"fast", "a3", true, "a3"},
			{"store", "a2", true, ""}, {"store", "a3", true, ""}}},
		{"the watch two puts behind", []step{
			{"store", "a1", true, "a1"}, {"fast", "a2", true, "a2"}, {"fast", "a3", true, "a3"}, {"fast", "a4", true, "a4"},
			{"store", "a2", true, ""}, {"store", "a3", true, ""}, {"store", "a4", true, ""}}},
		{"a refused publish, a newer put, then the store's value of the refused version", []step{
			{"store", "a1", true, "a1"}, {"fast", "a2", true, "a2"}, {"fast", "b2", true, "b2"}, {"fast", "a3", true, "a3"},
			{"store", "a2", true, "a2"}}},
		{"the watch a put behind, the put before not taken", []step{
			{"store", "a1", true, "a1"}, {"fast", "a2", false, ""}, {"fast", "a3", true, "a3"},
			{"store", "a2", true, "a2"}, {"store", "a3", true, "a3"}}},
		{"a refused publish first, then the store's", []step{
			{"store", "a1", true, "a1"}, {"fast", "b2", true, "b2"}, {"fast", "a2", true, "a2"}, {"store", "a2", true, ""}}},
		{"the store's value after a refused publish", []step{
			{"store", "a1", true, "a1"}, {"fast", "a2", true, "a2"}, {"fast", "b2", true, "b2"}, {"store", "a2", true, "a2"}}},
		{"a refused publish after the store's value", []step{
			{"store", "a1", true, "a1"}, {"fast", "a2", true, "a2"}, {"store", "a2", true, ""}, {"fast", "b2", true, ""}}},
		{"older than the store", []step{
			{"store", "a3", true, "a3"}, {"fast", "a1", true, ""}, {"fast", "a4", true, "a4"}}},
		{"the store going back (an untrusted value overwritten)", []step{
			{"store", "a4", true, "a4"}, {"store", "a1", true, "a1"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWatcher("", "", "eu")
			st := offered{keep: recent}
			for i, s := range tt.steps {
				if s.from == "fast" {
					w.offerFast(&st, name[s.value])
				} else {
					w.offerStored(&st, name[s.value])
				}
				if !s.take {
					continue
				}
				got := ""
				select {
				case b := <-w.out:
					for k, v := range name {
						if bytes.Equal(v, b) {
							got = k
						}
					}
				default:
				}
				if got != s.want {
					t.Fatalf("step %d (%s %s): reader got %q, want %q", i, s.from, s.value, got, s.want)
				}
			}
		})
	}
}
