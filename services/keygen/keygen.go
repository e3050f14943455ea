// Package keygen is the `switchyard keygen` command: it writes an ed25519
// key pair for signing weight snapshots (the optimizer's --signing-key
// and the gateways' --snapshot-public-keys; see docs/security.md).
package keygen

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// Command returns `switchyard keygen`.
func Command() cli.Command {
	return cli.Command{Name: "keygen", Summary: "write an ed25519 key pair that signs weight snapshots", Run: run}
}

func run(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	out := fs.String("out", "snapshot-signing.key", "private key file to create (mode 0600, must not exist); the public key goes to --public-out")
	pubOut := fs.String("public-out", "", "public key file to create (default: --out followed by .pub)")
	keep := fs.Bool("keep-existing", false, "when both files exist already, keep them and succeed (a deployment's init step, run at every start)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	if *pubOut == "" {
		*pubOut = *out + ".pub"
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("%w: --out is empty", cli.ErrUsage)
	}
	if *keep && exists(*out) && exists(*pubOut) {
		fmt.Fprintf(stdout, "keeping the existing key pair: %s, %s\n", *out, *pubOut)
		return nil
	}
	id, err := trust.WriteKeyPair(*out, *pubOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "private key: %s (optimizer --signing-key)\npublic key:  %s (gateway --snapshot-public-keys)\nkey id:      %s\n", *out, *pubOut, id)
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
