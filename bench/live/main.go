// Command live is the load generator and reporter of bench/live/run.sh, the
// live head-to-head of Switchyard against nginx and HAProxy on one fleet of
// simulated engines. It replays the first -n requests of a public trace
// (workload.ReadTrace; each tick's batch spread across its tick; sessions
// inferred from the prefix blocks as the simulator does) as streaming chat
// completions whose prompts share text where the trace's blocks are shared
// (workload.Prompt), each carrying its session in the X-Switchyard-Session
// header and the `user` field.
//
//	live capacity -target URL ...          closed loop; prints the fleet's completions per second
//	live replay -target URL -load 0.9 ...  open loop at load x capacity; writes one cell's JSON
//	live report -out all.json cell.json... the table of every cell and Switchyard's ratios to the best proxy
//	live snapshots -nats-url URL           the audit stream's snapshots: demand, shed, weights, implied capacity
//	live restart -targets r=URL,... -engine ID -pid PID ... -- CMD  kill an engine, restart it, report its share per bucket
//	live floor                             the TTFT no router can beat: each request alone on an idle fast engine holding every earlier prefix
//	live models capacity|replay|tally|report  the multi-model head-to-head of bench/models/run.sh (models.go)
//
// A request fails when it gets no first token within -first-token-timeout
// (30 s), a status other than 200, or a stream that ends before [DONE].
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: live capacity|replay|report|snapshots|restart|floor|models [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "capacity":
		err = capacityCmd(ctx, args)
	case "replay":
		err = replayCmd(ctx, args)
	case "report":
		err = reportCmd(args)
	case "snapshots":
		err = snapshotsCmd(ctx, args)
	case "restart":
		err = restartCmd(ctx, args)
	case "floor":
		err = floorCmd(args, os.Stdout)
	case "models":
		err = modelsCmd(ctx, args)
	default:
		err = fmt.Errorf("unknown command %q (capacity, replay, report, snapshots, restart, floor, models)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "live:", err)
		os.Exit(1)
	}
}

// workloadFlags are the flags that choose and shape the requests.
type workloadFlags struct {
	trace     string
	n         int
	maxPrompt int
	maxOutput int
	model     string
	timeout   time.Duration
}

func (w *workloadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.trace, "trace", "../shared/traces/mooncake_conversation_trace.jsonl", "JSONL (Mooncake) or CSV (Azure) trace")
	fs.IntVar(&w.n, "n", 800, "requests taken from the start of the trace")
	fs.IntVar(&w.maxPrompt, "max-prompt-tokens", 8192, "prompts cut to this many tokens")
	fs.IntVar(&w.maxOutput, "max-output-tokens", 128, "outputs cut to this many tokens")
	fs.StringVar(&w.model, "model", "switchyard-sim-8b", "model name sent")
	fs.DurationVar(&w.timeout, "first-token-timeout", 30*time.Second, "a request without a first token this long after it was sent fails")
}

// capacityFlags are the closed loop's flags.
type capacityFlags struct {
	target       string
	clients      int
	warm, window time.Duration
}

func (f *capacityFlags) register(fs *flag.FlagSet, target string) {
	fs.StringVar(&f.target, "target", "", target)
	fs.IntVar(&f.clients, "clients", 64, "closed-loop clients (well above the fleet's batch slots)")
	fs.DurationVar(&f.warm, "warm", 20*time.Second, "warm-up, not counted")
	fs.DurationVar(&f.window, "window", 60*time.Second, "measured window")
}

// run measures the fleet's capacity with reqs sent through c and prints
// it in completions per second.
func (f capacityFlags) run(ctx context.Context, c *client, reqs requests) error {
	rps, err := capacity(ctx, c, f.target, reqs.reqs, f.clients, f.warm, f.window)
	if err != nil {
		return err
	}
	fmt.Printf("%.3f\n", rps)
	return nil
}

func capacityCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	var w workloadFlags
	var cf capacityFlags
	w.register(fs)
	cf.register(fs, "base URL the closed loop sends to (a least-connections proxy over the engines)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	reqs, err := loadRequests(w, nil)
	if err != nil {
		return err
	}
	return cf.run(ctx, newClient(w), reqs)
}

// replayFlags are an open-loop replay's flags.
type replayFlags struct {
	target, router, engines, out string
	// requests, when set, is a JSON-lines file of every request's outcome.
	requests       string
	load, capacity float64
	slo            slo
}

// register adds the flags; capacityCmd names the command that measures
// -capacity, engines is -engines' usage.
func (f *replayFlags) register(fs *flag.FlagSet, capacityCmd, engines string) {
	fs.StringVar(&f.target, "target", "", "base URL of the router under test")
	fs.StringVar(&f.router, "router", "", "router name in the report")
	fs.Float64Var(&f.load, "load", 0.9, "offered rate as a multiple of -capacity")
	fs.Float64Var(&f.capacity, "capacity", 0, "the fleet's capacity in completions per second ("+capacityCmd+")")
	fs.StringVar(&f.engines, "engines", "", engines)
	fs.StringVar(&f.out, "out", "", "file the cell's JSON is written to")
	fs.StringVar(&f.requests, "requests", "", "file every request's outcome is written to, one JSON object a line (arrival, session, tokens, served, failure, TTFT, e2e, engine)")
	fs.DurationVar(&f.slo.ttft, "slo-ttft", 5*time.Second, "goodput counts served requests whose first token came within this")
	fs.DurationVar(&f.slo.tbot, "slo-tbot", 100*time.Millisecond, "... and whose mean time between tokens is at most this")
}

func (f replayFlags) validate(cmd string) error {
	if !(f.capacity > 0) || !(f.load > 0) || f.target == "" || f.router == "" || f.out == "" {
		return fmt.Errorf("%s needs -target, -router, -out and positive -capacity and -load", cmd)
	}
	return nil
}

// run replays reqs through c open loop at f.load x f.capacity and returns
// the cell (the engines' counters read before and after) and the results
// behind it. note ends the line announcing the replay; during, when not
// nil, is started with the engines as the replay starts, and the stop it
// returns is called as it ends.
func (f replayFlags) run(ctx context.Context, c *client, w workloadFlags, reqs requests, note string,
	during func(ctx context.Context, eng []engine) (stop func())) (cell, []result, error) {
	eng, err := parseEngines(f.engines)
	if err != nil {
		return cell{}, nil, err
	}
	before, err := scrapeAll(ctx, c.http, eng)
	if err != nil {
		return cell{}, nil, err
	}
	offered := f.load * f.capacity
	sched := reqs.rescaled(offered)
	fmt.Fprintf(os.Stderr, "%s at %.2fx: %d requests at %.2f rps (%.0f s)%s\n", f.router, f.load, len(sched), offered, sched[len(sched)-1].Arrival.Seconds(), note)
	stop := func() {}
	if during != nil {
		stop = during(ctx, eng)
	}
	start := time.Now()
	results := replay(ctx, c, f.target, sched)
	elapsed := time.Since(start)
	stop()
	after, err := scrapeAll(ctx, c.http, eng)
	if err != nil {
		return cell{}, nil, err
	}
	cl := summarise(f.router, f.load, results, counterDeltas(eng, before, after), f.slo)
	cl.OfferedRPS, cl.CapacityRPS, cl.DurationS = offered, f.capacity, elapsed.Seconds()
	cl.Trace, cl.MaxPromptTokens, cl.MaxOutputTokens = w.trace, w.maxPrompt, w.maxOutput
	if f.requests != "" {
		if err := writeRequestLines(f.requests, sched, results); err != nil {
			return cell{}, nil, err
		}
	}
	return cl, results, nil
}

func replayCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var w workloadFlags
	var rf replayFlags
	w.register(fs)
	rf.register(fs, "live capacity", "engines whose /metrics are read before and after: id=url,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := rf.validate("replay"); err != nil {
		return err
	}
	reqs, err := loadRequests(w, nil)
	if err != nil {
		return err
	}
	cl, _, err := rf.run(ctx, newClient(w), w, reqs, "", nil)
	if err != nil {
		return err
	}
	return writeJSON(rf.out, cl)
}

func reportCmd(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fs.String("out", "", "file the combined JSON is written to (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cells, err := readCells[cell](fs.Args())
	if err != nil {
		return err
	}
	rep := buildReport(cells)
	printReport(os.Stdout, rep)
	if *out == "" {
		return nil
	}
	return writeJSON(*out, rep)
}
