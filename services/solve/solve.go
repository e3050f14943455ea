// Package solve implements `switchyard solve`: read an optimizer instance
// (JSON), solve it, print the plan.
package solve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/optimizer"
)

// MaxInstanceBytes bounds the instance file size.
const MaxInstanceBytes = 256 << 20

// Command returns the `solve` subcommand.
func Command() cli.Command {
	return cli.Command{
		Name:    "solve",
		Summary: "solve an optimizer instance file and print the routing plan",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("solve", flag.ContinueOnError)
	path := fs.String("instance", "", "instance JSON file ('-' for stdin)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	tol := fs.Float64("tolerance", 1e-4, "relative duality gap at which to stop")
	explain := fs.Bool("explanations", true, "include per (cluster, engine) explanations in --json output")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("%w: --instance is required\n%s", cli.ErrUsage, cli.Usage(fs))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	in, err := readInstance(*path)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	sol, err := optimizer.Solve(in, optimizer.Tolerance(*tol))
	if err != nil {
		if errors.Is(err, optimizer.ErrInvalid) && strings.Contains(err.Error(), "tolerance") {
			return fmt.Errorf("%w: --tolerance: %v", cli.ErrUsage, err)
		}
		return fmt.Errorf("instance %s: %w", *path, err)
	}
	sol.SolveMs = float64(time.Since(start).Microseconds()) / 1000
	if !*explain {
		sol.Explanations = nil
	}
	if *asJSON {
		b, err := json.Marshal(sol)
		if err != nil {
			return fmt.Errorf("encoding solution: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return writeTable(stdout, in, sol)
}

// readInstance decodes an instance; syntax and type errors name their
// offset or field.
func readInstance(path string) (*optimizer.Instance, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%w: --instance: %v", cli.ErrUsage, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxInstanceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading instance %s: %w", path, err)
	}
	if len(b) > MaxInstanceBytes {
		return nil, fmt.Errorf("instance %s: larger than %d bytes", path, MaxInstanceBytes)
	}
	var in optimizer.Instance
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&in); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return nil, fmt.Errorf("instance %s: %w: field %q: cannot use JSON %s as %s", path, optimizer.ErrInvalid, te.Field, te.Value, te.Type)
		case errors.As(err, &se):
			return nil, fmt.Errorf("instance %s: %w: JSON syntax error at byte %d: %v", path, optimizer.ErrInvalid, se.Offset, err)
		}
		return nil, fmt.Errorf("instance %s: %w: %v", path, optimizer.ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("instance %s: %w: trailing data after the JSON object", path, optimizer.ErrInvalid)
	}
	return &in, nil
}

func writeTable(w io.Writer, in *optimizer.Instance, sol *optimizer.Solution) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "objective\t%.3f ms mean end-to-end over routed requests\n", sol.ObjectiveMs)
	fmt.Fprintf(tw, "duality gap\t%.3g\n", sol.DualityGap)
	fmt.Fprintf(tw, "iterations\t%d\n", sol.Iterations)
	fmt.Fprintf(tw, "solve time\t%.3f ms\n", sol.SolveMs)
	fmt.Fprintf(tw, "shed\t%.3f rps\n", sol.TotalShedRPS)
	fmt.Fprintf(tw, "moved\t%.3f rps vs previous weights\n\n", sol.ChurnRPS)
	demand := map[string]float64{}
	var clusters []string
	for _, c := range in.Clusters {
		demand[c.ID] = c.DemandRPS
		clusters = append(clusters, c.ID)
	}
	sort.Strings(clusters)
	fmt.Fprintln(tw, "CLUSTER\tDEMAND RPS\tSHED\tLATENCY MS\tENGINE\tWEIGHT\tNETWORK MS\tENGINE MS\tMARGINAL MS\tUTIL\tBINDING")
	for _, c := range clusters {
		first := true
		row := func(ex optimizer.Explanation) {
			lead := "\t\t\t"
			if first {
				lead = fmt.Sprintf("%s\t%.2f\t%.4f\t%.2f", c, demand[c], sol.Shed[c], sol.ClusterLatencyMs[c])
				first = false
			}
			fmt.Fprintf(tw, "%s\t%s\t%.4f\t%.2f\t%.2f\t%.2f\t%.3f\t%s\n", lead, ex.Engine, ex.Weight,
				ex.NetworkMs, ex.EngineMs, ex.MarginalMs, ex.PlannedUtilization, strings.Join(ex.Binding, ","))
		}
		shown := 0
		for _, ex := range sol.Explanations[c] {
			if ex.Weight > 0 {
				row(ex)
				shown++
			}
		}
		if hidden := len(sol.Explanations[c]) - shown; hidden > 0 {
			lead := "\t\t\t"
			if first {
				lead = fmt.Sprintf("%s\t%.2f\t%.4f\t%.2f", c, demand[c], sol.Shed[c], sol.ClusterLatencyMs[c])
			}
			fmt.Fprintf(tw, "%s\t(+%d at weight 0)\t\t\t\t\t\t\n", lead, hidden)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "ENGINE\tLOAD RPS\tUTIL\tENGINE MS\tMARGINAL MS")
	ids := make([]string, 0, len(sol.Engines))
	for id := range sol.Engines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := sol.Engines[id]
		fmt.Fprintf(tw, "%s\t%.3f\t%.4f\t%.2f\t%.2f\n", id, e.LoadRPS, e.Utilization, e.EngineMs, e.MarginalMs)
	}
	return tw.Flush()
}
