// Command capacity measures what a scenario's fleet can serve of its
// workload, the capacity its load factors are stated against (the
// hetero-slots scenarios, docs/sim.md): each engine alone, with an
// unbounded waiting queue, is given every n-th request of the workload
// (n engines; the k-th engine the requests k, k+n, …) all at once, and
// serves them at its saturated throughput, completed requests over the
// time the last one ends. The fleet's capacity is the sum.
//
//	go run ./bench/sim/capacity -scenario simulator/testdata/scenarios/hetero-slots-0.9x.json
//	go run ./bench/sim/capacity -scenario … -trace ../shared/traces/mooncake_conversation_trace.jsonl
//
// It is router-neutral (no policy's split), so a router that splits the
// work worse than by capacity, or loses prefix-cache hits an engine
// alone would have, serves less.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

func main() {
	path := flag.String("scenario", "", "scenario file (required)")
	trace := flag.String("trace", "", "trace replacing the scenario's (as switchyard sim --trace)")
	flag.Parse()
	if _, _, err := run(*path, *trace, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
}

// run prints each engine's saturated throughput and the fleet's
// capacity, and returns the workload's rate and the capacity (requests/s).
func run(path, trace string, out io.Writer) (rate, capacity float64, err error) {
	if path == "" {
		return 0, 0, fmt.Errorf("-scenario is required")
	}
	sc, err := scenario.Load(path)
	if err != nil {
		return 0, 0, err
	}
	wl, err := sc.Build(scenario.BuildOptions{Seed: sc.Seed, Trace: trace})
	if err != nil {
		return 0, 0, err
	}
	if len(wl.Requests) == 0 {
		return 0, 0, fmt.Errorf("%s: no requests", path)
	}
	rate = float64(len(wl.Requests)) / wl.Span.Seconds()
	fmt.Fprintf(out, "%s: %d requests over %.0f s (%.3f requests/s)\n", sc.Name, len(wl.Requests), wl.Span.Seconds(), rate)
	var sum float64
	for k := range sc.Engines {
		rps, err := saturated(sc, wl, k)
		if err != nil {
			return 0, 0, err
		}
		sum += rps
		fmt.Fprintf(out, "  %-10s %.3f requests/s\n", sc.Engines[k].ID, rps)
	}
	fmt.Fprintf(out, "capacity %.3f requests/s: the workload's own rate is %.2fx it\n", sum, rate/sum)
	return rate, sum, nil
}

// saturated is engine k's throughput alone on its share of wl, all of
// it arriving at once.
func saturated(sc *scenario.Scenario, wl *scenario.Stream, k int) (float64, error) {
	n := len(sc.Engines)
	var reqs []workload.Request
	for i := k; i < len(wl.Requests); i += n {
		r := wl.Requests[i]
		r.Arrival = time.Duration(len(reqs)) * time.Millisecond
		r.Cluster = sc.Clusters[0].ID
		reqs = append(reqs, r)
	}
	e := sc.Engines[k]
	e.MaxWaiting = len(reqs) + 1 // nothing refused
	one := *sc
	one.Engines = []scenario.Engine{e}
	one.Events = nil
	one.DrainS = 1e7
	st := &scenario.Stream{Requests: reqs, BlockTokens: wl.BlockTokens, Span: time.Duration(len(reqs)) * time.Millisecond}
	var p lastDone
	res, err := des.Run(&one, st, "saturated", func(*des.World) (des.Policy, error) { return &p, nil }, des.Options{})
	if err != nil {
		return 0, fmt.Errorf("engine %s: %w", e.ID, err)
	}
	if res.Metrics.Completed != len(reqs) || p.last <= 0 {
		return 0, fmt.Errorf("engine %s: %d of %d requests completed", e.ID, res.Metrics.Completed, len(reqs))
	}
	return float64(len(reqs)) / p.last.Seconds(), nil
}

// lastDone sends everything to the one engine and notes when the last
// request ends.
type lastDone struct{ last time.Duration }

func (p *lastDone) Pick(time.Duration, *des.Request, []int32) int { return 0 }
func (p *lastDone) Done(now time.Duration, _ *des.Request, _ int, _ des.Outcome) {
	p.last = max(p.last, now)
}
func (p *lastDone) Tick(time.Duration) {}
