package gateway

import (
	"crypto/ed25519"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// SnapshotTrust is a gateway's flags for the snapshots it accepts and
// keeps: --snapshot-public-keys, --snapshot-cache and --max-clock-skew.
type SnapshotTrust struct {
	KeyFiles string // comma-separated
	Cache    string
	MaxSkew  time.Duration
	MaxAge   time.Duration
}

// Register adds the flags to fs.
func (t *SnapshotTrust) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.KeyFiles, "snapshot-public-keys", "", "comma-separated PEM files of the optimizers' ed25519 public keys: only snapshots signed by one of them are applied (empty: signatures not checked)")
	fs.StringVar(&t.Cache, "snapshot-cache", "", "file keeping the last applied snapshot; applied at start, so the gateway routes on it while NATS is down")
	fs.DurationVar(&t.MaxSkew, "max-clock-skew", trust.DefaultMaxSkew, "snapshots whose version or creation time is further ahead of this clock are rejected")
	fs.DurationVar(&t.MaxAge, "snapshot-max-age", gateway.DefaultSnapshotMaxAge, "warn (log and switchyard_gateway_snapshot_too_old) while the snapshot routed on is older than this; it is still routed on")
}

// Keys loads the public keys.
func (t SnapshotTrust) Keys() ([]ed25519.PublicKey, error) {
	var files []string
	for _, f := range strings.Split(t.KeyFiles, ",") {
		if f = strings.TrimSpace(f); f != "" {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, nil
	}
	keys, err := trust.LoadPublicKeys(files...)
	if err != nil {
		return nil, fmt.Errorf("%w: --snapshot-public-keys: %w", cli.ErrUsage, err)
	}
	return keys, nil
}

// GatewayOpts returns the gateway options of the flags.
func (t SnapshotTrust) GatewayOpts() ([]gateway.Opt, error) {
	keys, err := t.Keys()
	if err != nil {
		return nil, err
	}
	return []gateway.Opt{gateway.SnapshotKeys(keys...), gateway.SnapshotCache(t.Cache), gateway.SnapshotMaxSkew(t.MaxSkew),
		gateway.SnapshotMaxAge(t.MaxAge)}, nil
}

// WatchOpts returns the snapshot watcher options of the flags: the
// watcher offers no snapshot older than the newest one the keys vouch
// for in the key's history (by version and clock alone without keys).
func (t SnapshotTrust) WatchOpts() ([]snapshots.WatchOpt, error) {
	keys, err := t.Keys()
	if err != nil {
		return nil, err
	}
	var v *trust.Verifier
	if len(keys) > 0 {
		v = trust.NewVerifier(keys...)
	}
	return []snapshots.WatchOpt{snapshots.Check(trust.Checker(v, t.MaxSkew, time.Now))}, nil
}
