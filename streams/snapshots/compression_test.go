package snapshots_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// TestCompressedStore: a store with Compression("s2") writes ValueMagic
// and the S2 block of the signed bytes under each key (the audit stream
// stays plain); every read (Get, GetRaw, History, LatestVersion, a
// Lookup store's, a plain store's) decodes it; a replica republishing
// the same version is a no-op whether it compresses or not, another
// snapshot of that version is stale.
func TestCompressedStore(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pub, priv, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer := trust.NewSigner(priv)
	now := time.UnixMilli(1_800_000_000_000)
	clock := snapshots.Clock(func() time.Time { return now })
	if _, err := snapshots.Open(ctx, js, snapshots.Compression("lz4")); !errors.Is(err, snapshots.ErrCompression) {
		t.Fatalf("Open with an unknown compression: %v, want ErrCompression", err)
	}
	st, err := snapshots.Open(ctx, js, snapshots.Signer(signer), clock, snapshots.Compression(snapshots.CompressionS2))
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := uint64(now.UnixMilli())-2000, uint64(now.UnixMilli())-1000
	for _, v := range []uint64{v1, v2} {
		if err := st.Publish(ctx, snap(v, "eu", "us")); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(ctx, snapshots.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(e.Value(), snapshots.ValueMagic) {
		t.Fatalf("stored value starts % x, want the magic % x", e.Value()[:4], snapshots.ValueMagic)
	}
	raw, err := st.GetRaw(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := snapshots.DecodeValue(e.Value()); err != nil || !bytes.Equal(dec, raw) {
		t.Fatalf("GetRaw is not the decoded value: %v", err)
	}
	if err := trust.NewVerifier(pub).Verify(raw); err != nil {
		t.Fatalf("the decoded value does not verify: %v", err)
	}
	if got, err := st.Get(ctx, "eu"); err != nil || got.GetVersion() != v2 {
		t.Fatalf("Get = %v, %v", got.GetVersion(), err)
	}
	if h, err := st.History(ctx, "us"); err != nil || len(h) != 2 || h[0].GetVersion() != v1 || h[1].GetVersion() != v2 {
		t.Fatalf("History = %d entries, %v", len(h), err)
	}
	if v, err := st.LatestVersion(ctx); err != nil || v != v2 {
		t.Fatalf("LatestVersion = %d, %v", v, err)
	}
	n := 0
	if err := st.ReadAudit(ctx, snapshots.AuditFrom{}, func(a snapshots.AuditEntry) bool {
		if a.Err == nil && len(a.Snapshot.GetClusters()) == 2 {
			n++
		}
		return true
	}); err != nil || n != 2 {
		t.Fatalf("audit: %d whole snapshots, %v", n, err)
	}
	look, err := snapshots.Lookup(ctx, js, snapshots.Signer(signer), clock)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := look.Get(ctx, "us"); err != nil || got.GetVersion() != v2 {
		t.Fatalf("a Lookup store's Get = %v, %v", got.GetVersion(), err)
	}

	plain, err := snapshots.Open(ctx, js, snapshots.Signer(signer), clock)
	if err != nil {
		t.Fatal(err)
	}
	for name, replica := range map[string]*snapshots.Store{"compressing": st, "plain": plain} {
		if err := replica.Publish(ctx, snap(v2, "eu", "us")); err != nil {
			t.Fatalf("a %s replica republishing version %d: %v, want a no-op", name, v2, err)
		}
		other := snap(v2, "eu")
		other.Clusters[0].ShedFraction = 0.5
		if err := replica.Publish(ctx, other); !errors.Is(err, snapshots.ErrStaleVersion) {
			t.Fatalf("a %s replica publishing another version %d: %v, want ErrStaleVersion", name, v2, err)
		}
	}
	if after, err := kv.Get(ctx, "eu"); err != nil || after.Revision() != e.Revision() {
		t.Fatalf("the no-op republishes wrote revision %d (was %d), %v", after.Revision(), e.Revision(), err)
	}
}

// TestHostileCompressedValue: a value that starts as a compressed one
// but does not decode (here: saying it decodes to 4 GiB) is ErrValue to
// Get and GetRaw, skipped by LatestVersion and History, and overwritten
// by the next publish.
func TestHostileCompressedValue(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js, snapshots.Compression(snapshots.CompressionS2))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx, snap(1, "eu")); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, snapshots.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	bad := append(append([]byte(nil), snapshots.ValueMagic...), 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00)
	if _, err := kv.Put(ctx, "eu", bad); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "eu"); !errors.Is(err, snapshots.ErrValue) {
		t.Fatalf("Get: %v, want ErrValue", err)
	}
	if _, err := st.GetRaw(ctx, "eu"); !errors.Is(err, snapshots.ErrValue) {
		t.Fatalf("GetRaw: %v, want ErrValue", err)
	}
	if v, err := st.LatestVersion(ctx); err != nil || v != 0 {
		t.Fatalf("LatestVersion = %d, %v; want 0", v, err)
	}
	if h, err := st.History(ctx, "eu"); err != nil || len(h) != 1 || h[0].GetVersion() != 1 {
		t.Fatalf("History = %d entries, %v; want version 1 alone", len(h), err)
	}
	if err := st.Publish(ctx, snap(2, "eu")); err != nil {
		t.Fatalf("publishing over the hostile value: %v", err)
	}
	if got, err := st.Get(ctx, "eu"); err != nil || got.GetVersion() != 2 {
		t.Fatalf("Get = %v, %v", got.GetVersion(), err)
	}
}
