package optimizer

import (
	"flag"
	"fmt"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// Signing is the optimizer's --signing-key flag.
type Signing struct {
	KeyFile string
}

// Register adds --signing-key to fs.
func (s *Signing) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.KeyFile, "signing-key", "", "ed25519 private key (PKCS #8 PEM, from `switchyard keygen`) that signs every snapshot (empty: unsigned)")
}

// StoreOpts returns the snapshot store options that sign with the key
// (none without one).
func (s Signing) StoreOpts() ([]snapshots.Opt, error) {
	if s.KeyFile == "" {
		return nil, nil
	}
	key, err := trust.LoadPrivateKey(s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: --signing-key: %w", cli.ErrUsage, err)
	}
	return []snapshots.Opt{snapshots.Signer(trust.NewSigner(key))}, nil
}
