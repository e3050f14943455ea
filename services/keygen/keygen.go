// Package keygen is the `switchyard keygen` command: it writes an ed25519
// key pair for signing weight snapshots (the optimizer's --signing-key
// and the gateways' --snapshot-public-keys; see docs/security.md).
package keygen

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// Command returns `switchyard keygen`.
func Command() cli.Command {
	return cli.Command{Name: "keygen", Summary: "write an ed25519 key pair that signs weight snapshots", Run: run}
}

func run(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	out := fs.String("out", "snapshot-signing.key", "private key file to create (mode 0600, must not exist); the public key goes to FILE.pub")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("%w: --out is empty", cli.ErrUsage)
	}
	id, err := trust.WriteKeyPair(*out, *out+".pub")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "private key: %s (optimizer --signing-key)\npublic key:  %s.pub (gateway --snapshot-public-keys)\nkey id:      %s\n", *out, *out, id)
	return nil
}
