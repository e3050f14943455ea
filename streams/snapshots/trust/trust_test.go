package trust

import (
	"crypto/ed25519"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

func snapBytes(t testing.TB, version uint64) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&schemas.WeightSnapshot{
		SchemaVersion: schemas.Version, Version: version, CreatedUnixMs: int64(version),
		Clusters: []*schemas.ClusterWeights{{Cluster: "eu", Weights: []*schemas.EngineWeight{{EngineId: "e1", EndpointUrl: "http://127.0.0.1:1", Weight: 1}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSignVerify(t *testing.T) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	otherPub, otherPriv, _ := GenerateKey()
	s := NewSigner(priv)
	msg := snapBytes(t, 1000)
	signed := s.Sign(msg)

	var got schemas.WeightSnapshot
	if err := proto.Unmarshal(signed, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.GetSignature()) != ed25519.SignatureSize || got.GetSigningKeyId() != KeyID(pub) || got.GetVersion() != 1000 {
		t.Fatalf("decoded signature %d bytes, key id %q, version %d", len(got.GetSignature()), got.GetSigningKeyId(), got.GetVersion())
	}
	// A field this build does not know, inside the signed bytes, is covered.
	unknown := protowire.AppendVarint(protowire.AppendTag(append([]byte{}, msg...), 99, protowire.VarintType), 5)
	withUnknown := s.Sign(unknown)
	tampered := append([]byte{}, signed...)
	tampered[len(msg)-1] ^= 1 // the weight's last byte

	for _, tc := range []struct {
		name string
		v    *Verifier
		b    []byte
		want error
	}{
		{"signed by the key", NewVerifier(pub), signed, nil},
		{"one of several keys", NewVerifier(otherPub, pub), signed, nil},
		{"unknown field signed", NewVerifier(pub), withUnknown, nil},
		{"unsigned", NewVerifier(pub), msg, ErrUnsigned},
		{"another key", NewVerifier(otherPub), signed, ErrBadSignature},
		{"signed by another key", NewVerifier(pub), NewSigner(otherPriv).Sign(msg), ErrBadSignature},
		{"tampered", NewVerifier(pub), tampered, ErrBadSignature},
		{"field added after signing", NewVerifier(pub), protowire.AppendVarint(protowire.AppendTag(append([]byte{}, signed...), 2, protowire.VarintType), math.MaxUint64), ErrBadSignature},
		{"garbage", NewVerifier(pub), []byte{0xff, 0xff}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.Verify(tc.b)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCheckTime(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for _, tc := range []struct {
		name    string
		version uint64
		created int64
		future  bool
	}{
		{"now", uint64(now.UnixMilli()), now.UnixMilli(), false},
		{"small static version", 1, 0, false},
		{"within skew", uint64(now.Add(59 * time.Second).UnixMilli()), now.UnixMilli(), false},
		{"version beyond skew", uint64(now.Add(61 * time.Second).UnixMilli()), now.UnixMilli(), true},
		{"version near 2^64", math.MaxUint64 - 1, now.UnixMilli(), true},
		{"created beyond skew", 5, now.Add(4 * time.Minute).UnixMilli(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTime(&schemas.WeightSnapshot{Version: tc.version, CreatedUnixMs: tc.created}, now, DefaultMaxSkew)
			if got := errors.Is(err, ErrFuture); got != tc.future {
				t.Fatalf("CheckTime = %v, want future %v", err, tc.future)
			}
		})
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	id, err := WriteKeyPair(priv, pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteKeyPair(priv, pub); err == nil {
		t.Fatal("overwrote an existing private key")
	}
	sk, err := LoadPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pks, err := LoadPublicKeys(pub)
	if err != nil || len(pks) != 1 || KeyID(pks[0]) != id || !pks[0].Equal(sk.Public()) {
		t.Fatalf("public keys %v, err %v", pks, err)
	}
	if _, err := LoadPublicKeys(priv); err == nil {
		t.Fatal("a private key file read as a public key")
	}
	if _, err := LoadPrivateKey(pub); err == nil {
		t.Fatal("a public key file read as a private key")
	}
}

// FuzzSplit: Split never panics, and for bytes that decode as a
// WeightSnapshot, the signed bytes decode too and keep every field but
// the signature's.
func FuzzSplit(f *testing.F) {
	_, priv, _ := GenerateKey()
	f.Add(snapBytes(f, 1))
	f.Add(NewSigner(priv).Sign(snapBytes(f, 2)))
	f.Add([]byte{0x7a, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		signed, _, _, err := Split(b)
		var whole schemas.WeightSnapshot
		if err != nil || proto.Unmarshal(b, &whole) != nil {
			return
		}
		var rest schemas.WeightSnapshot
		if err := proto.Unmarshal(signed, &rest); err != nil {
			t.Fatalf("signed part does not decode: %v", err)
		}
		whole.Signature, whole.SigningKeyId = nil, ""
		if !proto.Equal(&whole, &rest) {
			t.Fatal("signed part differs from the snapshot without its signature")
		}
	})
}
