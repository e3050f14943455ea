package gateway

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// TestOldSnapshotReputAppliedByNoGateway: the optimizer published
// signed versions 1..5 (a window apart); an attacker holding bucket
// write access re-puts version 1's signed bytes, 4 windows old. A gateway
// started after (no cache), one started with a cache of version 2, and
// one running since version 5 each apply no snapshot older than version
// 5: the watcher reads the key's history and offers its newest signed
// value, and drops later re-puts older than it (counted as rollbacks);
// the next real version is applied by all three. Each gateway's applied
// versions are recorded, so applying version 1 even for a moment fails.
func TestOldSnapshotReputAppliedByNoGateway(t *testing.T) {
	ns := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := testenv.JetStream(t, ns)
	if _, err := snapshots.Open(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, snapshots.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := trust.GenerateKey()
	signer := trust.NewSigner(priv)
	base := uint64(trustNow.UnixMilli())
	window := uint64(30_000)
	signed := map[uint64][]byte{}
	for i := uint64(1); i <= 6; i++ {
		signed[i] = signer.Sign(trustSnap(t, base-window*(5-i)))
	}
	ver := func(i uint64) uint64 { return base - window*(5-i) }
	putV := func(i uint64) {
		t.Helper()
		if _, err := kv.Put(ctx, "eu", signed[i]); err != nil {
			t.Fatal(err)
		}
	}
	clock := func() time.Time { return trustNow.Add(time.Duration(window) * time.Millisecond) } // version 6 is not in the future
	check := trust.Checker(trust.NewVerifier(pub), 0, clock)

	type gw struct {
		name    string
		g       *Gateway
		w       *snapshots.Watcher
		applied []uint64
	}
	start := func(name string, opts ...Opt) *gw {
		g, err := New("eu", append([]Opt{HealthInterval(-1), Clock(clock), SnapshotKeys(pub)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		w := snapshots.NewWatcher(ns.ClientURL(), "", "eu").With(snapshots.Check(check))
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		t.Cleanup(func() { stop(); <-done })
		x := &gw{name: name, g: g, w: w}
		if g.HasSnapshot() {
			x.applied = append(x.applied, g.Stats().SnapshotVersion)
		}
		return x
	}
	// pump applies what the watcher offered (as the gateway's control
	// loop does) until the gateway holds want.
	pump := func(x *gw, want uint64) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for x.g.Stats().SnapshotVersion != want {
			select {
			case b := <-x.w.Updates():
				before := x.g.Stats().SnapshotVersion
				if err := x.g.ApplySnapshot(b); err == nil {
					if v := x.g.Stats().SnapshotVersion; v != before {
						x.applied = append(x.applied, v)
					}
				}
			case <-deadline:
				t.Fatalf("%s: holds %d, want %d (applied %v, watcher %+v)", x.name, x.g.Stats().SnapshotVersion, want, x.applied, x.w.Stats())
			}
		}
	}

	for i := uint64(1); i <= 5; i++ {
		putV(i)
	}
	old := start("running since v5")
	pump(old, ver(5))

	cache := filepath.Join(t.TempDir(), "eu.snapshot")
	if err := writeAtomic(cache, signed[2]); err != nil {
		t.Fatal(err)
	}
	putV(1) // the replay: version 1, 4 windows (120 s) old, validly signed

	fresh := start("new, no cache")
	cached := start("new, cache of v2", SnapshotCache(cache))
	all := []*gw{old, fresh, cached}
	for _, x := range all[1:] {
		pump(x, ver(5))
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return old.w.Stats().Rollbacks == 1 }, "the running gateway's watcher did not see the re-put")
	putV(1) // again, while all three watch
	for _, x := range all {
		testenv.Eventually(t, 10*time.Second, func() bool { return x.w.Stats().Rollbacks >= 1 }, x.name+": re-put not counted as a rollback")
	}
	putV(6)
	for _, x := range all {
		pump(x, ver(6))
	}
	for _, x := range all {
		for _, v := range x.applied {
			if v < ver(5) && !(x.name == "new, cache of v2" && v == ver(2)) {
				t.Errorf("%s applied version %d, older than the newest it could see (applied %v)", x.name, v, x.applied)
			}
		}
		t.Logf("%s: applied %v, watcher %+v", x.name, x.applied, x.w.Stats())
	}
}

// TestSnapshotTooOld: routing on a snapshot older than the maximum age
// raises snapshot_too_old and logs a warning (once a minute); a fresh
// one clears it.
func TestSnapshotTooOld(t *testing.T) {
	now := trustNow
	g, err := New("eu", HealthInterval(-1), Clock(func() time.Time { return now }), SnapshotMaxAge(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if g.snapshotTooOld() {
		t.Fatal("too old without a snapshot")
	}
	if err := g.ApplySnapshot(trustSnap(t, uint64(now.UnixMilli()))); err != nil { // created at trustNow
		t.Fatal(err)
	}
	steps := []struct {
		after time.Duration
		old   bool
	}{{time.Minute, false}, {2*time.Minute + time.Second, true}, {10 * time.Minute, true}}
	for _, s := range steps {
		now = trustNow.Add(s.after)
		g.checkSnapshotAge()
		if got := g.snapshotTooOld(); got != s.old {
			t.Fatalf("after %v: too old %v, want %v", s.after, got, s.old)
		}
		if s.old && g.cfg.snap.oldWarn != now {
			t.Fatalf("after %v: no warning logged", s.after)
		}
	}
}
