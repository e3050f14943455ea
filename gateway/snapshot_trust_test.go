package gateway

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

var trustNow = time.UnixMilli(1_800_000_000_000)

func trustSnap(t *testing.T, version uint64) []byte {
	t.Helper()
	b, err := proto.Marshal(&schemas.WeightSnapshot{SchemaVersion: 1, Version: version, CreatedUnixMs: trustNow.UnixMilli(),
		Clusters: []*schemas.ClusterWeights{{Cluster: "eu", Weights: []*schemas.EngineWeight{
			{EngineId: "a", EndpointUrl: "http://127.0.0.1:1", Weight: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newTrustGateway(t *testing.T, opts ...Opt) *Gateway {
	t.Helper()
	g, err := New("eu", append([]Opt{HealthInterval(-1), Clock(func() time.Time { return trustNow })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestSnapshotSignatures: with keys configured, only snapshots signed by
// one of them are routed on; unsigned, forged and tampered ones are
// rejected and counted by reason, and leave the held snapshot in place.
func TestSnapshotSignatures(t *testing.T) {
	pub, priv, _ := trust.GenerateKey()
	_, other, _ := trust.GenerateKey()
	g := newTrustGateway(t, SnapshotKeys(pub))
	v := uint64(trustNow.UnixMilli())
	signed := trust.NewSigner(priv).Sign(trustSnap(t, v+1))
	tampered := append([]byte{}, signed...)
	tampered[10] ^= 0x40
	steps := []struct {
		name   string
		b      []byte
		reason string // "" applied
		hold   uint64
	}{
		{"signed", trust.NewSigner(priv).Sign(trustSnap(t, v)), "", v},
		{"unsigned", trustSnap(t, v+1), "unsigned", v},
		{"another key", trust.NewSigner(other).Sign(trustSnap(t, v+1)), "signature", v},
		{"tampered", tampered, "signature", v},
		{"next signed", signed, "", v + 1},
	}
	for _, s := range steps {
		err := g.ApplySnapshot(s.b)
		if (err == nil) != (s.reason == "") {
			t.Fatalf("%s: err %v", s.name, err)
		}
		if err != nil && rejectReason(err) != s.reason {
			t.Fatalf("%s: reason %q (%v), want %q", s.name, rejectReason(err), err, s.reason)
		}
		if got := g.Stats().SnapshotVersion; got != s.hold {
			t.Fatalf("%s: holding %d, want %d", s.name, got, s.hold)
		}
	}
	for reason, want := range map[string]float64{"unsigned": 1, "signature": 2} {
		if got := counter(g.m.rejected.WithLabelValues("eu", reason)); got != want {
			t.Errorf("%v %s rejections, want %v", got, reason, want)
		}
	}
}

// TestFutureSnapshotNeverBlocks: snapshots dated beyond the clock plus
// the skew (a version near 2^64, or 4 minutes ahead) are rejected, so the
// next real snapshot is applied.
func TestFutureSnapshotNeverBlocks(t *testing.T) {
	g := newTrustGateway(t)
	now := uint64(trustNow.UnixMilli())
	for _, v := range []uint64{math.MaxUint64 - 1, now + uint64(4*time.Minute/time.Millisecond)} {
		if err := g.ApplySnapshot(trustSnap(t, v)); !errors.Is(err, ErrSnapshotFuture) {
			t.Fatalf("version %d: %v, want ErrSnapshotFuture", v, err)
		}
	}
	for _, v := range []uint64{now, now + uint64(30*time.Second/time.Millisecond)} { // within the skew
		if err := g.ApplySnapshot(trustSnap(t, v)); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	if got := counter(g.m.rejected.WithLabelValues("eu", "future")); got != 2 {
		t.Errorf("%v future rejections", got)
	}
}

func ready(t *testing.T, g *Gateway) int {
	t.Helper()
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health/ready", nil))
	return rec.Code
}

// TestSnapshotCache: a gateway keeps its last applied snapshot on disk;
// a new gateway (NATS down: no source) starts routing on it and is ready;
// a cache signed by a key it does not trust is ignored, and without any
// snapshot /health/ready says 503 even with static engines.
func TestSnapshotCache(t *testing.T) {
	pub, priv, _ := trust.GenerateKey()
	otherPub, _, _ := trust.GenerateKey()
	path := filepath.Join(t.TempDir(), "eu.snapshot")
	v := uint64(trustNow.UnixMilli())
	signed := trust.NewSigner(priv).Sign(trustSnap(t, v))

	g1 := newTrustGateway(t, SnapshotKeys(pub), SnapshotCache(path))
	if code := ready(t, g1); code != http.StatusServiceUnavailable {
		t.Fatalf("ready before any snapshot: %d", code)
	}
	if err := g1.ApplySnapshot(trustSnap(t, v)); err == nil { // unsigned: not cached
		t.Fatal("unsigned snapshot applied")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a rejected snapshot was cached: %v", err)
	}
	if err := g1.ApplySnapshot(signed); err != nil {
		t.Fatal(err)
	}
	if code := ready(t, g1); code != http.StatusOK {
		t.Fatalf("ready with a snapshot: %d", code)
	}

	g2 := newTrustGateway(t, SnapshotKeys(pub), SnapshotCache(path))
	if !g2.HasSnapshot() || g2.Stats().SnapshotVersion != v || ready(t, g2) != http.StatusOK {
		t.Fatalf("restarted gateway: has %v version %d", g2.HasSnapshot(), g2.Stats().SnapshotVersion)
	}

	g3 := newTrustGateway(t, SnapshotKeys(otherPub), SnapshotCache(path), Engines(StaticEngine{ID: "s", URL: "http://127.0.0.1:2"}))
	if g3.HasSnapshot() || ready(t, g3) != http.StatusServiceUnavailable {
		t.Fatal("a cache signed by an untrusted key was applied")
	}
	if got := counter(g3.m.rejected.WithLabelValues("eu", "signature")); got != 1 {
		t.Errorf("%v signature rejections of the cache", got)
	}
}
