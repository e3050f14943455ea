package snapshots

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/internal/testenv"
)

func compressed(t *testing.T, b []byte) []byte {
	t.Helper()
	v, err := compress(CompressionS2, b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWatcherDecodesCompressed: the watcher offers a compressed value's
// protobuf bytes, and a plain value's as before; with the fast path, the
// KV watch's copy of a compressed put is a duplicate (compared decoded),
// not offered twice.
func TestWatcherDecodesCompressed(t *testing.T) {
	for _, fast := range []bool{false, true} {
		t.Run(map[bool]string{false: "watch", true: "fast path"}[fast], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			ns := testenv.NATS(t)
			kv := openKV(t, ctx, ns)
			p1 := plan(t, 1, "a")
			if _, err := kv.Put(ctx, "eu", compressed(t, p1)); err != nil {
				t.Fatal(err)
			}
			w := NewWatcher(ns.ClientURL(), "", "eu").With(FastPath(fast))
			run(t, ctx, w)
			if got := next(t, ctx, w); !bytes.Equal(got, p1) {
				t.Fatal("the initial compressed value not offered decoded")
			}
			p2, p3 := plan(t, 2, "a"), plan(t, 3, "b")
			if _, err := kv.Put(ctx, "eu", p2); err != nil {
				t.Fatal(err)
			}
			if got := next(t, ctx, w); !bytes.Equal(got, p2) {
				t.Fatal("a plain value after a compressed one not offered")
			}
			if _, err := kv.Put(ctx, "eu", compressed(t, p3)); err != nil {
				t.Fatal(err)
			}
			if got := next(t, ctx, w); !bytes.Equal(got, p3) {
				t.Fatal("a compressed value after a plain one not offered decoded")
			}
			if fast {
				testenv.Eventually(t, 10*time.Second, func() bool { s := w.Stats(); return s.Duplicates+s.NotNewer == 2 },
					"the second arrivals of the two puts not skipped")
				none(t, w, "a compressed put's second arrival")
			}
			if s := w.Stats(); s.Invalid != 0 || s.Fast+s.Watch != 3 {
				t.Fatalf("stats %+v, want 3 offered, none invalid", s)
			}
		})
	}
}

// TestWatcherHostileValues: a value that starts as a compressed one but
// does not decode (truncated, another format version, a decoded length
// above the limit, ...) is counted and logged by the watcher and offered
// as stored, so the gateway rejects it (reason "decode") and keeps
// routing on the last good snapshot; the next good value is applied.
func TestWatcherHostileValues(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ns := testenv.NATS(t)
	kv := openKV(t, ctx, ns)
	reg := prometheus.NewRegistry()
	g, err := gateway.New("eu", gateway.HealthInterval(-1), gateway.Registerer(reg))
	if err != nil {
		t.Fatal(err)
	}
	var log logged
	w := NewWatcher(ns.ClientURL(), "", "eu").With(WatchLogger(slog.New(&log)))
	run(t, ctx, w)
	if _, err := kv.Put(ctx, "eu", compressed(t, plan(t, 1, "a"))); err != nil {
		t.Fatal(err)
	}
	if err := g.ApplySnapshot(next(t, ctx, w)); err != nil {
		t.Fatal(err)
	}
	bad := hostile(t)
	for name, v := range bad {
		if _, err := kv.Put(ctx, "eu", v); err != nil {
			t.Fatal(err)
		}
		got := next(t, ctx, w)
		if !bytes.Equal(got, v) {
			t.Fatalf("%s: offered %d bytes, want the %d stored", name, len(got), len(v))
		}
		if err := g.ApplySnapshot(got); !errors.Is(err, gateway.ErrSnapshotDecode) {
			t.Fatalf("%s: the gateway applied it: %v, want ErrSnapshotDecode", name, err)
		}
		if v := g.Stats().SnapshotVersion; v != 1 {
			t.Fatalf("%s: routing on version %d, want the last good 1", name, v)
		}
	}
	if s := w.Stats(); s.Invalid != uint64(len(bad)) {
		t.Fatalf("stats %+v, want %d invalid", s, len(bad))
	}
	if n := log.count("snapshot value rejected"); n != len(bad) {
		t.Fatalf("%d rejections logged, want %d", n, len(bad))
	}
	if rejected := decodeRejections(t, reg); rejected != float64(len(bad)) {
		t.Fatalf("the gateway counted %v decode rejections, want %d", rejected, len(bad))
	}
	p2 := plan(t, 2, "b")
	if _, err := kv.Put(ctx, "eu", compressed(t, p2)); err != nil {
		t.Fatal(err)
	}
	if err := g.ApplySnapshot(next(t, ctx, w)); err != nil || g.Stats().SnapshotVersion != 2 {
		t.Fatalf("the next good value: %v, version %d", err, g.Stats().SnapshotVersion)
	}
}

// decodeRejections is the gateway's count of snapshots rejected with
// reason "decode".
func decodeRejections(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_gateway_snapshots_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "decode" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
