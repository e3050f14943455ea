// Package explain implements `switchyard explain`: print why a cluster's
// traffic is split the way the current weight snapshot says.
package explain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// MaxSnapshotBytes bounds a snapshot file.
const MaxSnapshotBytes = 64 << 20

// Command returns the `explain` subcommand.
func Command() cli.Command {
	return cli.Command{
		Name:    "explain",
		Summary: "print a cluster's weights with their explanations from a snapshot",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	cluster := fs.String("cluster", "", "cluster id to explain (required)")
	file := fs.String("snapshot-file", "", "read the snapshot from this protobuf-JSON file instead of NATS")
	bucket := fs.String("bucket", snapshots.DefaultBucket, "JetStream KV bucket of the snapshots")
	timeout := fs.Duration("timeout", 10*time.Second, "time limit for reading from NATS")
	var conn cli.Connection
	conn.Register(fs)
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	if *cluster == "" {
		return fmt.Errorf("%w: --cluster is required\n%s", cli.ErrUsage, cli.Usage(fs))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	var (
		snap *schemas.WeightSnapshot
		err  error
	)
	if *file != "" {
		snap, err = readFile(*file)
	} else {
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		snap, err = readNATS(ctx, conn, *bucket, *cluster)
	}
	if err != nil {
		return err
	}
	cw, err := find(snap, *cluster)
	if err != nil {
		return err
	}
	return Write(stdout, snap, cw)
}

func readFile(path string) (*schemas.WeightSnapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --snapshot-file: %v", cli.ErrUsage, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSnapshotBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	if len(b) > MaxSnapshotBytes {
		return nil, fmt.Errorf("snapshot %s: larger than %d bytes", path, MaxSnapshotBytes)
	}
	var snap schemas.WeightSnapshot
	if err := protojson.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("decoding snapshot %s (protobuf JSON of WeightSnapshot): %w", path, err)
	}
	return &snap, nil
}

func readNATS(ctx context.Context, conn cli.Connection, bucket, cluster string) (*schemas.WeightSnapshot, error) {
	url := conn.NATSURL
	nc, err := conn.ConnectNATS(nats.Name("switchyard-explain"))
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	store, err := snapshots.Lookup(ctx, js, snapshots.Bucket(bucket)) // read-only: creates nothing
	if err != nil {
		return nil, err
	}
	snap, err := store.Get(ctx, cluster)
	if errors.Is(err, snapshots.ErrNotFound) {
		return nil, fmt.Errorf("no snapshot for cluster %q in bucket %q", cluster, bucket)
	}
	return snap, err
}

func find(snap *schemas.WeightSnapshot, cluster string) (*schemas.ClusterWeights, error) {
	var ids []string
	for _, cw := range snap.GetClusters() {
		if cw.GetCluster() == cluster {
			return cw, nil
		}
		ids = append(ids, cw.GetCluster())
	}
	sort.Strings(ids)
	return nil, fmt.Errorf("snapshot %d has no cluster %q (it has %s)", snap.GetVersion(), cluster, strings.Join(ids, ", "))
}

// Write prints cw's weights from snap as a table, heaviest first.
func Write(w io.Writer, snap *schemas.WeightSnapshot, cw *schemas.ClusterWeights) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	created := "unknown"
	if ms := snap.GetCreatedUnixMs(); ms > 0 {
		created = time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(tw, "snapshot\tversion %d, created %s, schema %d\n", snap.GetVersion(), created, snap.GetSchemaVersion())
	if d := snap.GetInputsDigest(); d != "" {
		fmt.Fprintf(tw, "inputs digest\t%s\n", d)
	}
	if st := snap.GetStats(); st != nil {
		// The optimizer leaves solve_ms 0 so that a snapshot's bytes
		// depend only on its inputs: print a time only when there is one.
		took := ""
		if ms := st.GetSolveMs(); ms > 0 {
			took = fmt.Sprintf(" in %.3f ms", ms)
		}
		fmt.Fprintf(tw, "solver\t%s: objective %.3f ms, duality gap %.3g, %d iterations%s, %.3f rps shed in total\n",
			st.GetSolver(), st.GetObjectiveMs(), st.GetDualityGap(), st.GetIterations(), took, st.GetTotalShedRps())
	}
	fmt.Fprintf(tw, "cluster\t%s: demand %.3f rps, shed %.2f%%, expected latency %.2f ms\n",
		cw.GetCluster(), cw.GetDemandRps(), 100*cw.GetShedFraction(), cw.GetExpectedLatencyMs())
	offered, rejected := Observed(cw.GetDemandEstimate())
	fmt.Fprintf(tw, "offered\t%s\n", offered)
	if rejected != "" {
		fmt.Fprintf(tw, "rejected\t%s\n", rejected)
	}
	fmt.Fprintln(tw)
	ws := sortedWeights(cw.GetWeights())
	table(tw, ws, cw.GetShedFraction())
	fmt.Fprintln(tw)
	all := ws // the footer's legend explains the model plans' bindings too
	for _, mw := range cw.GetModelWeights() {
		fmt.Fprintf(tw, "model\t%s: demand %.3f rps, shed %.2f%% (planned apart: only some engines serve it)\n",
			mw.GetModel(), mw.GetDemandRps(), 100*mw.GetShedFraction())
		mws := sortedWeights(mw.GetWeights())
		table(tw, mws, mw.GetShedFraction())
		fmt.Fprintln(tw)
		all = append(all[:len(all):len(all)], mws...)
	}
	fmt.Fprintln(tw, "demand and shed are what the plan was made for; offered is every request the gateways received in")
	fmt.Fprintln(tw, "the demand window the plan used, those they answered 429 (rejected) included.")
	fmt.Fprintln(tw, "marginal ms is the end-to-end latency of one more request from this cluster on that engine")
	for _, line := range Marginal(ws) {
		fmt.Fprintln(tw, line)
	}
	for _, line := range Legend(all) {
		fmt.Fprintln(tw, line)
	}
	fmt.Fprintln(tw, "max batch is the per-replica batch limit the capacity estimate used and where it came from:")
	fmt.Fprintln(tw, "configured (agent), engine_metrics (the engine's), inferred (running while requests waited), prior.")
	fmt.Fprintln(tw, "cache s is how long a prefix stays in the engine's prefix cache (free KV capacity over the rate")
	fmt.Fprintln(tw, "of new tokens); gateways credit no prefix sent to the engine longer ago.")
	return tw.Flush()
}

// sortedWeights returns a copy of ws, heaviest first, then by engine.
func sortedWeights(in []*schemas.EngineWeight) []*schemas.EngineWeight {
	ws := append([]*schemas.EngineWeight(nil), in...)
	sort.SliceStable(ws, func(a, b int) bool {
		if ws[a].GetWeight() != ws[b].GetWeight() {
			return ws[a].GetWeight() > ws[b].GetWeight()
		}
		return ws[a].GetEngineId() < ws[b].GetEngineId()
	})
	return ws
}

// table writes the engine table of ws and its shed row.
func table(tw io.Writer, ws []*schemas.EngineWeight, shed float64) {
	fmt.Fprintln(tw, "ENGINE\tWEIGHT\tNETWORK MS\tENGINE MS\tMARGINAL MS\tPLANNED UTIL\tBINDING\tMAX BATCH\tCACHE S\tENDPOINT")
	for _, ew := range ws {
		ex := ew.GetExplanation()
		binding := strings.Join(ex.GetBinding(), ",")
		if binding == "" {
			binding = "-"
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%.2f\t%.2f\t%.2f\t%.3f\t%s\t%s\t%s\t%s\n", ew.GetEngineId(), ew.GetWeight(),
			ex.GetNetworkMs(), ex.GetEngineMs(), ex.GetMarginalMs(), ew.GetPlannedUtilization(), binding, batchLimit(ex),
			residency(ex), ew.GetEndpointUrl())
	}
	if shed > 0 {
		fmt.Fprintf(tw, "(shed)\t%.4f\t\t\t\t\t%s\t\t\t\n", shed, "demand above capacity")
	}
}

// Bindings maps every BINDING value the optimizer and its planner write
// to what it means (docs/explain.md).
var Bindings = map[string]string{
	"capacity":       "the engine is at the plan's utilization cap (--max-utilization, or up to 1 when the demand needs it); its marginal ms includes the capacity multiplier",
	"churn":          "the churn term holds the weight at its previous value or keeps traffic on an engine dearer at the margin than the cluster's cheapest (moving it would cost more than it gains)",
	"zero":           "no traffic: the engine is dearer at the margin than the cluster's price",
	"unhealthy":      "the engine is down; it gets no traffic",
	"residency":      "the cluster may not use the engine (no network entry for it; in a model's plan, the engine does not serve the model): it gets no traffic",
	"hold":           "the cluster kept its previous weights (the solver's move was under 10% of its traffic), which may load an engine up to 1.05 x the cap",
	"failover_split": "a weight the planner added so the cluster fails over to the nearest other region",
	"probe":          "a floor weight the planner added to keep measuring the engine",
	"idle_spread":    "the cluster is idle; its weights are spread by capacity",
}

// Legend is one line per BINDING value ws show, in the order of their
// first appearance: the value and its meaning.
func Legend(ws []*schemas.EngineWeight) []string {
	var out []string
	seen := map[string]bool{}
	for _, ew := range ws {
		for _, b := range ew.GetExplanation().GetBinding() {
			if seen[b] {
				continue
			}
			seen[b] = true
			m, ok := Bindings[b]
			if !ok {
				m = "not known to this build of explain"
			}
			out = append(out, fmt.Sprintf("binding %s: %s.", b, m))
		}
	}
	return out
}

// explains reports whether one of an engine's binding values explains a
// marginal ms above its cluster's lowest.
func explains(bs []string) bool {
	for _, b := range bs {
		switch b {
		case "capacity", "churn", "hold", "failover_split", "probe", "idle_spread":
			return true
		}
	}
	return false
}

// Marginal is the footer's statement about the engines with traffic,
// true of ws: they share the cluster's lowest marginal ms (within
// optimizer.PriceTolerance), or the ones that do not are named with
// the binding constraint that prices them higher (or said to have none).
func Marginal(ws []*schemas.EngineWeight) []string {
	low := math.Inf(1)
	for _, ew := range ws {
		if ew.GetWeight() > 0 {
			low = math.Min(low, ew.GetExplanation().GetMarginalMs())
		}
	}
	if math.IsInf(low, 1) {
		return []string{"(the dual price); no engine has traffic."}
	}
	var above, unexplained []string
	for _, ew := range ws {
		ex := ew.GetExplanation()
		if ew.GetWeight() <= 0 || !(ex.GetMarginalMs() > low+optimizer.PriceTolerance(low)) {
			continue
		}
		if explains(ex.GetBinding()) {
			above = append(above, fmt.Sprintf("%s (%s)", ew.GetEngineId(), strings.Join(ex.GetBinding(), ",")))
		} else {
			unexplained = append(unexplained, ew.GetEngineId())
		}
	}
	out := []string{fmt.Sprintf("(the dual price); the engines with traffic share the cluster's lowest, %.2f ms", low)}
	if len(above) == 0 && len(unexplained) == 0 {
		out[0] += "."
		return out
	}
	out[0] += ","
	if len(above) > 0 {
		out = append(out, "except where a constraint binds: "+strings.Join(above, ", ")+".")
	}
	if len(unexplained) > 0 {
		out = append(out, "above it with no binding constraint (an older optimizer, or the solve's tolerance): "+strings.Join(unexplained, ", ")+".")
	}
	return out
}

// Observed describes a cluster's demand estimate (the snapshot's
// demand_estimate, nil when it has none): the offered line, every
// request the gateways received in the estimate's window with its rate,
// and the rejected line, the share of them the gateways answered 429 by
// reason ("" without requests). The console shows the same.
func Observed(d *schemas.DemandEstimate) (offered, rejected string) {
	if d == nil {
		return "unknown: the snapshot carries no demand estimate (none was fresh, or an older optimizer made it)", ""
	}
	window := fmt.Sprintf("%s-%s UTC", time.UnixMilli(d.GetWindowStartUnixMs()).UTC().Format("15:04:05"),
		time.UnixMilli(d.GetWindowEndUnixMs()).UTC().Format("15:04:05"))
	offered = fmt.Sprintf("%.3f rps in the window %s (%d requests; forecast %.3f rps)", d.GetDemandRps(), window,
		d.GetRequestCount(), d.GetForecastRps())
	n := float64(d.GetRequestCount())
	if n == 0 {
		return offered, ""
	}
	r, snap, adm := float64(d.GetRejectedCount()), float64(d.GetShedSnapshotCount()), float64(d.GetShedAdmissionCount())
	capacity := max(r-snap-adm, 0)
	rejected = fmt.Sprintf("%.2f%% answered 429 by the gateways: %.2f%% shed by the snapshot, %.2f%% by admission, %.2f%% with every engine at its limit",
		100*r/n, 100*snap/n, 100*adm/n, 100*capacity/n)
	return offered, rejected
}

// residency is the CACHE S cell: the engine's prefix-cache residency in
// seconds (one decimal, three significant digits under a second, so the
// processor's 1 ms floor does not read as 0.0), "-" when unknown.
func residency(ex *schemas.Explanation) string {
	r := ex.GetCacheResidencyS()
	switch {
	case !(r > 0):
		return "-"
	case r < 1:
		return fmt.Sprintf("%.3g", r)
	default:
		return fmt.Sprintf("%.1f", r)
	}
}

// batchLimit is the MAX BATCH cell: "16 (inferred)", "-" when unknown.
func batchLimit(ex *schemas.Explanation) string {
	src := ex.GetCapacitySource()
	if ex.GetMaxBatch() == 0 && src == "" {
		return "-"
	}
	if src == "" {
		src = "unknown"
	}
	return fmt.Sprintf("%d (%s)", ex.GetMaxBatch(), src)
}
