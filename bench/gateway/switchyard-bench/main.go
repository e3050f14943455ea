// Command switchyard-bench is a throwaway main for bench/gateway/run.sh
// while services/switchyard does not register the gateway and enginesim
// commands yet: `switchyard-bench gateway ...`, `switchyard-bench
// enginesim ...`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/services/enginesim"
	"github.com/switchyard-llm/switchyard/services/gateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmds := map[string]cli.Command{"gateway": gateway.Command(), "enginesim": enginesim.Command()}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: switchyard-bench gateway|enginesim [flags]")
		os.Exit(2)
	}
	c, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	if path := os.Getenv("SWITCHYARD_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	if err := c.Run(ctx, os.Args[2:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
