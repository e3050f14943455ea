// Command switchyard is the single binary of Switchyard: one subcommand per
// service. main only wires commands; each lives in services/<name>.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/services/agent"
	"github.com/switchyard-llm/switchyard/services/brokers"
	"github.com/switchyard-llm/switchyard/services/combiner"
	"github.com/switchyard-llm/switchyard/services/console"
	"github.com/switchyard-llm/switchyard/services/demo"
	"github.com/switchyard-llm/switchyard/services/enginesim"
	"github.com/switchyard-llm/switchyard/services/explain"
	"github.com/switchyard-llm/switchyard/services/exportfleet"
	"github.com/switchyard-llm/switchyard/services/exporttrace"
	"github.com/switchyard-llm/switchyard/services/gateway"
	"github.com/switchyard-llm/switchyard/services/keygen"
	"github.com/switchyard-llm/switchyard/services/kvevents"
	"github.com/switchyard-llm/switchyard/services/optimizer"
	"github.com/switchyard-llm/switchyard/services/processor"
	"github.com/switchyard-llm/switchyard/services/replay"
	"github.com/switchyard-llm/switchyard/services/schema"
	"github.com/switchyard-llm/switchyard/services/sim"
	"github.com/switchyard-llm/switchyard/services/solve"
	"github.com/switchyard-llm/switchyard/services/tap"
)

// version is the release version, injected at link time with
// -ldflags "-X main.version=v1.2.3" (empty: the module version from the
// build info). Set only by the linker, never assigned.
var version string

func commands() []cli.Command {
	return []cli.Command{
		demo.Command(),
		brokers.Command(),
		enginesim.Command(),
		agent.Command(),
		kvevents.Command(),
		processor.Command(),
		combiner.Command(),
		optimizer.Command(),
		gateway.Command(),
		solve.Command(),
		keygen.Command(),
		explain.Command(),
		console.Command(),
		replay.Command(),
		exporttrace.Command(),
		exportfleet.Command(),
		sim.Command(),
		tap.Command(),
		schema.Command(),
		{Name: "version", Summary: "prints the binary's version, VCS revision and Go version",
			Run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
				if len(args) > 0 && args[0] != "-h" && args[0] != "--help" {
					return fmt.Errorf("%w: version takes no arguments", cli.ErrUsage)
				}
				cli.Version(stdout, version)
				return nil
			}},
	}
}

func main() {
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" && args[1] != "help" {
			// `switchyard help gateway` is `switchyard gateway --help`.
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout, cmds)
		return 0
	case "--version", "-version", "-v":
		args = []string{"version"}
	}
	for _, c := range cmds {
		if c.Name != args[0] {
			continue
		}
		err := c.Run(ctx, args[1:], stdout, stderr)
		var help *cli.HelpError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &help):
			fmt.Fprint(stdout, help.Text)
			return 0
		case errors.Is(err, cli.ErrUsage):
			fmt.Fprintf(stderr, "switchyard %s: %v\n", c.Name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "switchyard %s: %v\n", c.Name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "switchyard: unknown command %q\n", args[0])
	usage(stderr, cmds)
	return 2
}

func usage(w io.Writer, cmds []cli.Command) {
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	fmt.Fprintln(w, "usage: switchyard <command> [flags]\n\ncommands:")
	width := 0
	for _, c := range cmds {
		width = max(width, len(c.Name))
	}
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun `switchyard <command> --help` for a command's flags.")
}
