package snapshots_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// TestSignedStoreOverwritesUntrusted: a signing store publishes signed
// snapshots (verifiable from the raw bytes); a value an attacker wrote to
// the key (version near 2^64, or unsigned and newer) is neither read back
// as the latest nor blocks the next real snapshot.
func TestSignedStoreOverwritesUntrusted(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pub, priv, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	st, err := snapshots.Open(ctx, js, snapshots.Signer(trust.NewSigner(priv)), snapshots.Clock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	v0 := uint64(now.UnixMilli())
	if err := st.Publish(ctx, snap(v0, "eu")); err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetRaw(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.NewVerifier(pub).Verify(raw); err != nil {
		t.Fatalf("published snapshot does not verify: %v", err)
	}

	kv, err := js.KeyValue(ctx, snapshots.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	forge := func(s *schemas.WeightSnapshot) {
		t.Helper()
		b, err := proto.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "eu", b); err != nil {
			t.Fatal(err)
		}
	}
	for i, forged := range []*schemas.WeightSnapshot{
		snap(math.MaxUint64-1, "eu"),
		snap(v0+10_000, "eu"), // newer, within the skew, unsigned
	} {
		forge(forged)
		if _, err := st.Get(ctx, "eu"); !errors.Is(err, snapshots.ErrUntrusted) {
			t.Fatalf("Get of forged version %d: %v, want ErrUntrusted", forged.GetVersion(), err)
		}
		if v, err := st.LatestVersion(ctx); err != nil || v != 0 {
			t.Fatalf("LatestVersion with a forged value = %d, %v; want 0", v, err)
		}
		v := v0 + uint64(1000*(i+1))
		if err := st.Publish(ctx, snap(v, "eu")); err != nil {
			t.Fatalf("publishing %d over forged %d: %v", v, forged.GetVersion(), err)
		}
		if got, err := st.Get(ctx, "eu"); err != nil || got.GetVersion() != v {
			t.Fatalf("Get after publish = %v, %v", got.GetVersion(), err)
		}
	}
}

// TestUnsignedStoreIgnoresFutureValues: without a signer, a value dated
// beyond the clock plus the skew is still untrusted and overwritten.
func TestUnsignedStoreIgnoresFutureValues(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	future := uint64(time.Now().Add(5 * time.Minute).UnixMilli())
	if err := st.Publish(ctx, snap(future, "eu")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "eu"); !errors.Is(err, snapshots.ErrUntrusted) || !errors.Is(err, trust.ErrFuture) {
		t.Fatalf("Get of a future snapshot: %v", err)
	}
	v := uint64(time.Now().UnixMilli())
	if err := st.Publish(ctx, snap(v, "eu")); err != nil {
		t.Fatalf("publishing now over a future value: %v", err)
	}
}
