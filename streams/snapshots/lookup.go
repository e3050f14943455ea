package snapshots

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoBucket: Lookup found no snapshot bucket (the optimizer creates it).
var ErrNoBucket = errors.New("snapshot bucket does not exist")

// Lookup binds to an existing snapshot bucket without creating or
// updating it or the audit stream, so a user allowed only to read them
// can open the store (`switchyard explain`, `switchyard console`; see
// docs/security.md). The store reads (Get, GetRaw, History,
// LatestVersion, ReadAudit) as one from Open does; Publish needs the
// optimizer's permissions. A missing bucket is ErrNoBucket.
func Lookup(ctx context.Context, js jetstream.JetStream, opts ...Opt) (*Store, error) {
	var cfg cfg
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cfg.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %q (the optimizer creates it when it starts)", ErrNoBucket, cfg.bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("looking up snapshot bucket %q: %w", cfg.bucket, err)
	}
	return &Store{js: js, kv: kv, cfg: cfg}, nil
}
