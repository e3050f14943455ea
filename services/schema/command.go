// Package schema implements `switchyard schema export`: write the
// FileDescriptorSet of Switchyard's wire types (with their comments) for
// other languages' decoders.
package schema

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Command returns the `schema` subcommand.
func Command() cli.Command {
	return cli.Command{
		Name:    "schema",
		Summary: "schema export --out FILE: write the FileDescriptorSet of the wire types (protoc --decode, Python, Node)",
		Run:     run,
	}
}

func run(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 || args[0] != "export" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return &cli.HelpError{Text: "usage: switchyard schema export --out FILE\n"}
		}
		return fmt.Errorf("%w: switchyard schema export --out FILE", cli.ErrUsage)
	}
	fs := flag.NewFlagSet("schema export", flag.ContinueOnError)
	out := fs.String("out", "", "file to write the FileDescriptorSet to (binary protobuf); - for stdout (required)")
	if err := cli.Parse(fs, args[1:], nil); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: --out is required\n%s", cli.ErrUsage, cli.Usage(fs))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	b := schemas.DescriptorSet()
	if *out == "-" {
		_, err := stdout.Write(b)
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return fmt.Errorf("writing descriptor set: %w", err)
	}
	return nil
}
