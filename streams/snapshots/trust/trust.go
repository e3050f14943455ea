// Package trust signs weight snapshots and checks the ones a gateway
// receives: an ed25519 signature by the optimizer's key, and versions and
// creation times bounded by the receiver's clock plus a maximum skew (see
// docs/security.md). It is pure: no I/O beyond reading key files, no
// clock of its own.
//
// Wire format: the signer encodes the WeightSnapshot without fields 15
// (signature) and 16 (signing_key_id), signs "switchyard-snapshot-v1\x00"
// followed by those bytes, and appends the two fields. A verifier removes
// fields 15 and 16 from the bytes it received, at the wire level, and
// checks the signature over what remains, so fields it does not know
// are covered too.
package trust

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchyard-llm/switchyard/schemas"
)

// DefaultMaxSkew is how far ahead of the receiver's clock a snapshot's
// version (its window end, in Unix milliseconds) and creation time, or a
// record's event time, may be.
const DefaultMaxSkew = time.Minute

// Field numbers of the signature fields in WeightSnapshot.
const (
	fieldSignature = 15
	fieldKeyID     = 16
)

// sigContext separates snapshot signatures from anything else the key might
// sign.
const sigContext = "switchyard-snapshot-v1\x00"

// Sentinel errors.
var (
	// ErrUnsigned: the snapshot carries no signature.
	ErrUnsigned = errors.New("snapshot is not signed")
	// ErrBadSignature: the signature does not verify against any
	// configured key (or names an unknown key).
	ErrBadSignature = errors.New("snapshot signature does not verify")
	// ErrFuture: a version or time is beyond the receiver's clock plus
	// the maximum skew.
	ErrFuture = errors.New("dated in the future beyond the allowed clock skew")
	// ErrMalformed: the bytes are not a protobuf message.
	ErrMalformed = errors.New("snapshot bytes malformed")
)

// KeyID identifies pub: hex of the first 8 bytes of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// Signer signs encoded snapshots with one key.
type Signer struct {
	key ed25519.PrivateKey
	id  string
}

// NewSigner returns a signer with key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	return &Signer{key: key, id: KeyID(key.Public().(ed25519.PublicKey))}
}

// Public returns the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign returns msg, the encoding of a WeightSnapshot without signature
// fields, with the signature and key id appended.
func (s *Signer) Sign(msg []byte) []byte {
	sig := ed25519.Sign(s.key, append([]byte(sigContext), msg...))
	out := make([]byte, 0, len(msg)+len(sig)+len(s.id)+8)
	out = append(out, msg...)
	out = protowire.AppendTag(out, fieldSignature, protowire.BytesType)
	out = protowire.AppendBytes(out, sig)
	out = protowire.AppendTag(out, fieldKeyID, protowire.BytesType)
	out = protowire.AppendString(out, s.id)
	return out
}

// Split separates b into the signed bytes (every field but 15 and 16, in
// their order) and the signature and key id.
func Split(b []byte) (signed, sig []byte, keyID string, err error) {
	signed = make([]byte, 0, len(b))
	seenSig, seenID := false, false
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, nil, "", fmt.Errorf("%w: %w", ErrMalformed, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return nil, nil, "", fmt.Errorf("%w: %w", ErrMalformed, protowire.ParseError(m))
		}
		field := rest[:n+m]
		rest = rest[n+m:]
		switch num {
		case fieldSignature, fieldKeyID:
			v, k := protowire.ConsumeBytes(field[n:])
			if typ != protowire.BytesType || k < 0 {
				return nil, nil, "", fmt.Errorf("%w: field %d has wire type %d", ErrMalformed, num, typ)
			}
			if num == fieldSignature {
				if seenSig {
					return nil, nil, "", fmt.Errorf("%w: two signatures", ErrMalformed)
				}
				sig, seenSig = v, true
			} else {
				if seenID {
					return nil, nil, "", fmt.Errorf("%w: two key ids", ErrMalformed)
				}
				keyID, seenID = string(v), true
			}
		default:
			signed = append(signed, field...)
		}
	}
	return signed, sig, keyID, nil
}

// Verifier checks signatures against a set of public keys.
type Verifier struct {
	keys map[string]ed25519.PublicKey
}

// NewVerifier returns a verifier accepting signatures by any of keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for _, k := range keys {
		v.keys[KeyID(k)] = k
	}
	return v
}

// Len is the number of keys.
func (v *Verifier) Len() int { return len(v.keys) }

// Verify checks that b, an encoded WeightSnapshot, is signed by one of
// the verifier's keys: ErrUnsigned without a signature, ErrBadSignature
// when it does not verify.
func (v *Verifier) Verify(b []byte) error {
	signed, sig, id, err := Split(b)
	if err != nil {
		return err
	}
	if len(sig) == 0 {
		return ErrUnsigned
	}
	if len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: signature of %d bytes", ErrBadSignature, len(sig))
	}
	msg := append([]byte(sigContext), signed...)
	if k, ok := v.keys[id]; ok {
		if ed25519.Verify(k, msg, sig) {
			return nil
		}
		return fmt.Errorf("%w: key %s", ErrBadSignature, id)
	}
	for _, k := range v.keys { // no or unknown key id: try every key
		if ed25519.Verify(k, msg, sig) {
			return nil
		}
	}
	return fmt.Errorf("%w: no configured key (key id %q)", ErrBadSignature, id)
}

// CheckTime reports ErrFuture when snap's version (Unix milliseconds of
// its window end) or creation time is beyond now plus maxSkew.
func CheckTime(snap *schemas.WeightSnapshot, now time.Time, maxSkew time.Duration) error {
	limit := now.Add(maxSkew).UnixMilli()
	if limit < 0 {
		return nil
	}
	if v := snap.GetVersion(); v > uint64(limit) {
		return fmt.Errorf("%w: version %d > %d (clock %s + %s)", ErrFuture, v, limit, now.UTC().Format(time.RFC3339), maxSkew)
	}
	if c := snap.GetCreatedUnixMs(); c > limit {
		return fmt.Errorf("%w: created %s (clock %s + %s)", ErrFuture, time.UnixMilli(c).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), maxSkew)
	}
	return nil
}

// Checker returns a check of encoded snapshots for a snapshot watcher
// (snapshots.Check): the signature against v (not checked when v is
// nil), and the version and creation time bounded by now() plus maxSkew
// (DefaultMaxSkew when <= 0); it returns the version.
func Checker(v *Verifier, maxSkew time.Duration, now func() time.Time) func(b []byte) (uint64, error) {
	if maxSkew <= 0 {
		maxSkew = DefaultMaxSkew
	}
	return func(b []byte) (uint64, error) {
		if v != nil {
			if err := v.Verify(b); err != nil {
				return 0, err
			}
		}
		var snap schemas.WeightSnapshot
		for rest := b; len(rest) > 0; {
			num, typ, n := protowire.ConsumeTag(rest)
			if n < 0 {
				return 0, fmt.Errorf("%w: %w", ErrMalformed, protowire.ParseError(n))
			}
			rest = rest[n:]
			if (num == 2 || num == 3) && typ == protowire.VarintType {
				x, m := protowire.ConsumeVarint(rest)
				if m < 0 {
					return 0, fmt.Errorf("%w: %w", ErrMalformed, protowire.ParseError(m))
				}
				if num == 2 {
					snap.Version = x
				} else {
					snap.CreatedUnixMs = int64(x)
				}
				rest = rest[m:]
				continue
			}
			m := protowire.ConsumeFieldValue(num, typ, rest)
			if m < 0 {
				return 0, fmt.Errorf("%w: %w", ErrMalformed, protowire.ParseError(m))
			}
			rest = rest[m:]
		}
		if snap.Version == 0 {
			return 0, fmt.Errorf("%w: version 0", ErrMalformed)
		}
		if err := CheckTime(&snap, now(), maxSkew); err != nil {
			return 0, err
		}
		return snap.Version, nil
	}
}

// GenerateKey returns a new key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// WriteKeyPair writes a new key pair: the private key as PKCS #8 PEM to
// privPath (mode 0600, which must not exist), the public key as PKIX PEM
// to pubPath. It returns the key id.
func WriteKeyPair(privPath, pubPath string) (string, error) {
	pub, priv, err := GenerateKey()
	if err != nil {
		return "", fmt.Errorf("generating key: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", fmt.Errorf("encoding private key: %w", err)
	}
	pb, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encoding public key: %w", err)
	}
	f, err := os.OpenFile(privPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("creating private key file: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: pk}); err != nil {
		f.Close()
		return "", fmt.Errorf("writing %s: %w", privPath, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("writing %s: %w", privPath, err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pb}), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", pubPath, err)
	}
	return KeyID(pub), nil
}

// LoadPrivateKey reads a PKCS #8 PEM ed25519 private key.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading signing key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: no PRIVATE KEY PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: %T is not an ed25519 key", path, k)
	}
	return priv, nil
}

// LoadPublicKeys reads the PKIX PEM ed25519 public keys in the files
// (each may hold several PUBLIC KEY blocks).
func LoadPublicKeys(paths ...string) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading public key: %w", err)
		}
		n := 0
		for {
			var blk *pem.Block
			blk, b = pem.Decode(b)
			if blk == nil {
				break
			}
			if blk.Type != "PUBLIC KEY" {
				continue
			}
			k, err := x509.ParsePKIXPublicKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("public key %s: %w", p, err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("public key %s: %T is not an ed25519 key", p, k)
			}
			out = append(out, pub)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("public key %s: no PUBLIC KEY PEM block", p)
		}
	}
	return out, nil
}
