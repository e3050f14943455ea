// Package snapshots stores Switchyard's weight snapshots in NATS
// JetStream: a key-value bucket holding the latest snapshot per CPU
// cluster (with history), and an audit stream holding every whole
// snapshot ever published. Versions only go up: a publish whose version is
// not newer than what a key holds fails with ErrStaleVersion, except over
// a value the store does not trust (dated beyond its clock plus the
// maximum skew, or, with a signer, not signed by the signer's key): such a
// value is overwritten and never read back as the latest (see
// docs/security.md).
package snapshots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// Defaults of the options.
const (
	DefaultBucket       = "switchyard_snapshots"
	DefaultHistory      = 64
	DefaultAuditStream  = "SWITCHYARD_SNAPSHOT_AUDIT"
	DefaultAuditSubject = "switchyard.snapshots.audit"
)

// Sentinel errors.
var (
	// ErrStaleVersion: the snapshot is not newer than the stored one.
	ErrStaleVersion = errors.New("snapshot version not newer than stored version")
	// ErrNotFound: no snapshot stored for the cluster.
	ErrNotFound = errors.New("no snapshot for cluster")
	// ErrInvalidKey: a cluster id is not a valid KV key.
	ErrInvalidKey = errors.New("cluster id is not a valid key")
	// ErrUntrusted: the stored snapshot is dated in the future beyond the
	// allowed skew, or (with a signer) not signed by the signer's key.
	ErrUntrusted = errors.New("stored snapshot not trusted")
)

var validKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// Opt configures a Store (see Open).
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

// cfg names the bucket and stream.
type cfg struct {
	bucket       string
	history      uint8
	auditStream  string
	auditSubject string
	signer       *trust.Signer
	verifier     *trust.Verifier
	now          func() time.Time
	maxSkew      time.Duration
	replicas     int
	compression  string
}

// Signer makes the store sign every snapshot it publishes with s, and
// trust only stored snapshots s signed. Default none: snapshots are
// published unsigned.
func Signer(s *trust.Signer) Opt { return opt(func(c *cfg) { c.signer = s }) }

// Clock is the store's clock, which bounds the versions and creation
// times it trusts. Default time.Now.
func Clock(now func() time.Time) Opt { return opt(func(c *cfg) { c.now = now }) }

// MaxSkew is how far ahead of the clock a stored snapshot may be dated.
// Default trust.DefaultMaxSkew; 0 means the default.
func MaxSkew(d time.Duration) Opt { return opt(func(c *cfg) { c.maxSkew = d }) }

// Bucket is the key-value bucket of the latest snapshots. Default
// DefaultBucket; "" means the default.
func Bucket(name string) Opt { return opt(func(c *cfg) { c.bucket = name }) }

// History is how many values the bucket keeps per key. Default
// DefaultHistory; 0 means the default.
func History(n uint8) Opt { return opt(func(c *cfg) { c.history = n }) }

// Replicas is how many JetStream servers keep the bucket and the audit
// stream (3 on a three-node NATS cluster). Default 0: a bucket or stream
// being created gets 1, an existing one keeps its count (so a console
// opening the store never scales down what the optimizer set).
func Replicas(n int) Opt { return opt(func(c *cfg) { c.replicas = n }) }

// AuditStream and AuditSubject name the stream holding every whole
// snapshot. Defaults DefaultAuditStream and DefaultAuditSubject; ""
// means the default.
func AuditStream(name, subject string) Opt {
	return opt(func(c *cfg) { c.auditStream, c.auditSubject = name, subject })
}

// validate fills in the defaults (JetStream itself checks the names).
func (c *cfg) validate() error {
	if c.bucket == "" {
		c.bucket = DefaultBucket
	}
	if c.history == 0 {
		c.history = DefaultHistory
	}
	if c.auditStream == "" {
		c.auditStream = DefaultAuditStream
	}
	if c.auditSubject == "" {
		c.auditSubject = DefaultAuditSubject
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.maxSkew <= 0 {
		c.maxSkew = trust.DefaultMaxSkew
	}
	if c.replicas < 0 {
		return fmt.Errorf("snapshot store replicas %d: must not be negative", c.replicas)
	}
	if err := checkCompression(c.compression); err != nil {
		return err
	}
	if c.signer != nil {
		c.verifier = trust.NewVerifier(c.signer.Public())
	}
	return nil
}

// Store reads and writes snapshots.
type Store struct {
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	cfg cfg
}

// Open creates (or binds to) the bucket and the audit stream.
func Open(ctx context.Context, js jetstream.JetStream, opts ...Opt) (*Store, error) {
	var cfg cfg
	for _, o := range opts {
		o.apply(&cfg)
	}
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	kvReplicas, auditReplicas := cfg.replicas, cfg.replicas
	if cfg.replicas == 0 {
		if kvReplicas, err = existingReplicas(ctx, js, "KV_"+cfg.bucket); err != nil {
			return nil, fmt.Errorf("opening snapshot bucket %q: %w", cfg.bucket, err)
		}
		if auditReplicas, err = existingReplicas(ctx, js, cfg.auditStream); err != nil {
			return nil, fmt.Errorf("opening audit stream %q: %w", cfg.auditStream, err)
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.bucket,
		Description: "Switchyard weight snapshots, one key per CPU cluster",
		History:     cfg.history,
		Replicas:    kvReplicas,
	})
	if err != nil {
		return nil, fmt.Errorf("opening snapshot bucket %q: %w", cfg.bucket, err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.auditStream,
		Description: "Every whole Switchyard weight snapshot, for audit",
		Subjects:    []string{cfg.auditSubject},
		MaxAge:      30 * 24 * time.Hour,
		MaxBytes:    512 << 20,
		Replicas:    auditReplicas,
	}); err != nil {
		return nil, fmt.Errorf("opening audit stream %q: %w", cfg.auditStream, err)
	}
	return &Store{js: js, kv: kv, cfg: cfg}, nil
}

// existingReplicas is the replica count of stream name, or 1 when it
// does not exist yet.
func existingReplicas(ctx context.Context, js jetstream.JetStream, name string) (int, error) {
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return max(info.Config.Replicas, 1), nil
}

// ErrTooLarge: a snapshot message exceeds the NATS server's max_payload
// (1 MB by default, below a 20,000-engine snapshot; the deployments set
// 16 MB: docs/deploy.md#clustered-brokers).
var ErrTooLarge = errors.New("snapshot exceeds the NATS server's max_payload")

// checkSize fails with ErrTooLarge, naming the limit, when a message of
// n bytes (plus headers) exceeds the connected server's max_payload.
func (s *Store) checkSize(what string, n int, hdr nats.Header) error {
	nc := s.js.Conn()
	if nc == nil {
		return nil
	}
	limit := nc.MaxPayload()
	if limit <= 0 {
		return nil
	}
	size := int64(n)
	for k, vs := range hdr {
		for _, v := range vs {
			size += int64(len(k) + len(v) + 4) // "k: v\r\n"
		}
	}
	if size > limit {
		return fmt.Errorf("%w: %s is %d bytes, the server's max_payload is %d bytes; raise max_payload in the NATS server configuration",
			ErrTooLarge, what, size, limit)
	}
	return nil
}

// Publish stores snap: the whole snapshot on the audit stream, then, for
// each cluster, a snapshot holding only that cluster's weights under the
// cluster's key. A key holding a version >= snap.Version fails with
// ErrStaleVersion (other clusters are still written), except when it
// holds exactly the value Publish would write: replicas that plan the
// same window write the same bytes, and the second write is a no-op.
// The audit message carries the version as its JetStream message id, so
// the stream also keeps one copy of a version published twice within its
// duplicate window (2 minutes).
func (s *Store) Publish(ctx context.Context, snap *schemas.WeightSnapshot) error {
	whole, err := s.encode(snap)
	if err != nil {
		return fmt.Errorf("encoding snapshot %d: %w", snap.GetVersion(), err)
	}
	msg := &nats.Msg{Subject: s.cfg.auditSubject, Data: whole, Header: nats.Header{
		schemas.HeaderContentType: {schemas.ContentTypeProtobuf}, schemas.HeaderMessage: {schemas.MessageName(snap)},
		jetstream.MsgIDHeader: {fmt.Sprintf("snapshot-%d", snap.GetVersion())}}}
	if err := s.checkSize(fmt.Sprintf("snapshot %d (audit message)", snap.GetVersion()), len(whole), msg.Header); err != nil {
		return err
	}
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publishing snapshot %d to audit stream: %w", snap.GetVersion(), err)
	}
	var errs []error
	for _, cw := range snap.GetClusters() {
		one := &schemas.WeightSnapshot{
			SchemaVersion: snap.GetSchemaVersion(),
			Version:       snap.GetVersion(),
			CreatedUnixMs: snap.GetCreatedUnixMs(),
			Clusters:      []*schemas.ClusterWeights{cw},
			InputsDigest:  snap.GetInputsDigest(),
			Stats:         snap.GetStats(),
		}
		if err := s.put(ctx, cw.GetCluster(), one); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// encode marshals snap without any signature it carries and, with a
// signer, signs it.
func (s *Store) encode(snap *schemas.WeightSnapshot) ([]byte, error) {
	if len(snap.GetSignature()) > 0 || snap.GetSigningKeyId() != "" {
		snap = proto.CloneOf(snap)
		snap.Signature, snap.SigningKeyId = nil, ""
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(snap)
	if err != nil || s.cfg.signer == nil {
		return b, err
	}
	return s.cfg.signer.Sign(b), nil
}

// decode decodes a stored value (compressed or not, see DecodeValue)
// into its protobuf bytes and the snapshot, reporting ErrUntrusted for
// one dated in the future or, with a signer, not signed by it.
func (s *Store) decode(v []byte) ([]byte, *schemas.WeightSnapshot, error) {
	b, err := DecodeValue(v)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding snapshot: %w", err)
	}
	snap, err := s.decodeSnapshot(b)
	return b, snap, err
}

// decodeSnapshot is decode of a value's protobuf bytes (DecodeValue's).
func (s *Store) decodeSnapshot(b []byte) (*schemas.WeightSnapshot, error) {
	var snap schemas.WeightSnapshot
	if err := proto.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("decoding snapshot: %w", err)
	}
	if err := trust.CheckTime(&snap, s.cfg.now(), s.cfg.maxSkew); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	if s.cfg.verifier != nil {
		if err := s.cfg.verifier.Verify(b); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUntrusted, err)
		}
	}
	return &snap, nil
}

func (s *Store) put(ctx context.Context, cluster string, snap *schemas.WeightSnapshot) error {
	if !validKey.MatchString(cluster) {
		return fmt.Errorf("%w: %q", ErrInvalidKey, cluster)
	}
	raw, err := s.encode(snap)
	if err != nil {
		return fmt.Errorf("encoding snapshot for %q: %w", cluster, err)
	}
	b, err := compress(s.cfg.compression, raw)
	if err != nil {
		return fmt.Errorf("compressing snapshot for %q: %w", cluster, err)
	}
	if err := s.checkSize(fmt.Sprintf("snapshot %d of cluster %q", snap.GetVersion(), cluster), len(b), nil); err != nil {
		return err
	}
	for attempt := 0; attempt < 5; attempt++ {
		e, err := s.kv.Get(ctx, cluster)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := s.kv.Create(ctx, cluster, b); err == nil {
				return nil
			} else if !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("creating snapshot key %q: %w", cluster, err)
			}
			continue
		case err != nil:
			return fmt.Errorf("reading snapshot key %q: %w", cluster, err)
		}
		// An untrusted or undecodable value is overwritten. Values are
		// compared decoded, so replicas that compress differently agree.
		if stored, cur, err := s.decode(e.Value()); err == nil && cur.GetVersion() >= snap.GetVersion() {
			if bytes.Equal(stored, raw) {
				return nil // the same snapshot, written by another replica
			}
			return fmt.Errorf("%w: cluster %q holds %d, got %d", ErrStaleVersion, cluster, cur.GetVersion(), snap.GetVersion())
		}
		if _, err := s.kv.Update(ctx, cluster, b, e.Revision()); err == nil {
			return nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("updating snapshot key %q: %w", cluster, err)
		}
		// Lost a race with another writer: read again.
	}
	return fmt.Errorf("updating snapshot key %q: too much contention", cluster)
}

// Get returns the latest snapshot of cluster: ErrNotFound when there is
// none, ErrUntrusted when it is dated in the future beyond the skew or,
// with a signer, not signed by it.
func (s *Store) Get(ctx context.Context, cluster string) (*schemas.WeightSnapshot, error) {
	b, err := s.GetRaw(ctx, cluster)
	if err != nil {
		return nil, err
	}
	snap, err := s.decodeSnapshot(b)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %q: %w", cluster, err)
	}
	return snap, nil
}

// GetRaw returns the protobuf bytes of cluster's latest snapshot (as
// signed): the stored value, decompressed when it is compressed (see
// DecodeValue; a compressed value that does not decode fails with
// ErrValue).
func (s *Store) GetRaw(ctx context.Context, cluster string) ([]byte, error) {
	v, err := s.getValue(ctx, cluster)
	if err != nil {
		return nil, err
	}
	b, err := DecodeValue(v)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %q: %w", cluster, err)
	}
	return b, nil
}

// getValue returns the value stored under cluster's key.
func (s *Store) getValue(ctx context.Context, cluster string) ([]byte, error) {
	if !validKey.MatchString(cluster) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidKey, cluster)
	}
	e, err := s.kv.Get(ctx, cluster)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("reading snapshot key %q: %w", cluster, err)
	}
	return e.Value(), nil
}

// LatestVersion returns the highest version stored under any key (0 when
// the bucket is empty), so a restarted optimizer continues above it.
// Untrusted values (see Get) are skipped.
func (s *Store) LatestVersion(ctx context.Context) (uint64, error) {
	keys, err := s.kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing snapshot keys: %w", err)
	}
	var max uint64
	for _, k := range keys {
		snap, err := s.Get(ctx, k)
		if err != nil {
			continue
		}
		if snap.GetVersion() > max {
			max = snap.GetVersion()
		}
	}
	return max, nil
}

// History returns up to the bucket's history of snapshots for cluster,
// oldest first.
func (s *Store) History(ctx context.Context, cluster string) ([]*schemas.WeightSnapshot, error) {
	es, err := s.kv.History(ctx, cluster)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("reading history of %q: %w", cluster, err)
	}
	out := make([]*schemas.WeightSnapshot, 0, len(es))
	for _, e := range es {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		b, err := DecodeValue(e.Value())
		var snap schemas.WeightSnapshot
		if err != nil || proto.Unmarshal(b, &snap) != nil {
			continue
		}
		out = append(out, &snap)
	}
	return out, nil
}
