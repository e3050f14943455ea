package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// seedSnapshot solves the seed instance (with region-b overloaded so
// capacity binds) and builds the snapshot the optimizer service would.
func seedSnapshot(t *testing.T) *schemas.WeightSnapshot {
	t.Helper()
	b, err := os.ReadFile("../../optimizer/testdata/region-bc.json")
	if err != nil {
		t.Fatal(err)
	}
	var in optimizer.Instance
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	in.Clusters[0].DemandRPS = 200
	sol, err := optimizer.Solve(&in)
	if err != nil {
		t.Fatal(err)
	}
	snap := &schemas.WeightSnapshot{
		SchemaVersion: schemas.Version, Version: 7, CreatedUnixMs: 1_700_000_000_000,
		Clusters:     sol.ClusterWeights(map[string]string{"b-0": "http://b-0:8000", "c-0": "http://c-0:8000"}),
		InputsDigest: in.Digest(), Stats: sol.Stats(),
	}
	for _, cw := range snap.GetClusters() {
		for _, w := range cw.GetWeights() {
			if w.GetEngineId() == "b-0" && w.GetExplanation() != nil {
				w.Explanation.MaxBatch, w.Explanation.CapacitySource = 16, "inferred"
				w.Explanation.CacheResidencyS = 42.5
			}
		}
	}
	return snap
}

func runExplain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Command().Run(context.Background(), args, &out, &errOut)
	return out.String(), err
}

func checkTable(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"version 7", "region-b", "b-0", "c-0", "capacity", "MARGINAL MS", "http://b-0:8000", "(shed)", optimizer.SolverName,
		"MAX BATCH", "16 (inferred)", "CACHE S", "42.5"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestExplainFile(t *testing.T) {
	b, err := protojson.Marshal(seedSnapshot(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snap.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runExplain(t, "--cluster", "region-b", "--snapshot-file", path)
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, out)

	tests := []struct {
		name  string
		args  []string
		usage bool
		want  string
	}{
		{"no cluster", []string{"--snapshot-file", path}, true, "--cluster"},
		{"unknown cluster", []string{"--cluster", "mars", "--snapshot-file", path}, false, "region-b, region-c"},
		{"missing file", []string{"--cluster", "region-b", "--snapshot-file", path + ".nope"}, true, "no such file"},
		{"bad json", []string{"--cluster", "region-b", "--snapshot-file", writeFile(t, "{")}, false, "decoding snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runExplain(t, tt.args...)
			if err == nil || errors.Is(err, cli.ErrUsage) != tt.usage || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want usage=%v containing %q", err, tt.usage, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExplainNATS: explain reads the cluster's key from NATS, written
// plain or compressed (the optimizer's --snapshot-compression).
func TestExplainNATS(t *testing.T) {
	for _, c := range []string{snapshots.CompressionNone, snapshots.CompressionS2} {
		t.Run(c, func(t *testing.T) { testExplainNATS(t, c) })
	}
}

func testExplainNATS(t *testing.T, compression string) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js, snapshots.Compression(compression))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx, seedSnapshot(t)); err != nil {
		t.Fatal(err)
	}
	out, err := runExplain(t, "--cluster", "region-b", "--nats-url", ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, out)
	if _, err := runExplain(t, "--cluster", "region-x", "--nats-url", ns.ClientURL()); err == nil || !strings.Contains(err.Error(), "no snapshot") {
		t.Fatalf("unknown cluster: %v", err)
	}
}

// TestExplainSolveTime: the optimizer publishes solve_ms 0 (snapshot
// bytes depend only on inputs), so no "0.000 ms" solve time is printed;
// a snapshot that carries a time shows it.
func TestExplainSolveTime(t *testing.T) {
	for _, tc := range []struct {
		ms         float64
		want, lack string
	}{{0, "iterations, ", "0.000 ms, "}, {2.5, "iterations in 2.500 ms, ", "0.000 ms, "}} {
		snap := seedSnapshot(t)
		snap.Stats.SolveMs = tc.ms
		b, err := protojson.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		out, err := runExplain(t, "--cluster", "region-b", "--snapshot-file", writeFile(t, string(b)))
		if err != nil {
			t.Fatal(err)
		}
		line := out[strings.Index(out, "solver"):]
		line = line[:strings.IndexByte(line, '\n')]
		if !strings.Contains(line, tc.want) || strings.Contains(line, tc.lack) {
			t.Errorf("solve_ms %v: %q, want %q and no %q", tc.ms, line, tc.want, tc.lack)
		}
	}
}

// TestResidencyCell: the CACHE S cell keeps a sub-second residency
// readable (the processor's floor is 1 ms) and says "-" when unknown.
func TestResidencyCell(t *testing.T) {
	for _, tc := range []struct {
		s    float64
		want string
	}{{0, "-"}, {math.NaN(), "-"}, {0.001, "0.001"}, {0.25, "0.25"}, {0.12345, "0.123"}, {1, "1.0"}, {42.46, "42.5"}} {
		if got := residency(&schemas.Explanation{CacheResidencyS: tc.s}); got != tc.want {
			t.Errorf("residency %v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestExplainOfferedAndRejected: explain shows the offered demand of the
// snapshot's demand estimate (every request received, the rejected ones
// included) and the share the gateways answered 429, by reason, beside
// the planned demand and shed; "unknown" without an estimate.
func TestExplainOfferedAndRejected(t *testing.T) {
	snap := seedSnapshot(t)
	var cw *schemas.ClusterWeights
	for _, c := range snap.GetClusters() {
		if c.GetCluster() == "region-b" {
			cw = c
		}
	}
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cw.DemandEstimate = &schemas.DemandEstimate{SchemaVersion: schemas.Version, Cluster: "region-b",
		WindowStartUnixMs: start.UnixMilli(), WindowEndUnixMs: start.Add(30 * time.Second).UnixMilli(),
		DemandRps: 10.5, ForecastRps: 10.6, RequestCount: 315, RejectedCount: 126, ShedSnapshotCount: 31, ShedAdmissionCount: 94}
	b, err := protojson.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runExplain(t, "--cluster", "region-b", "--snapshot-file", writeFile(t, string(b)))
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, out)
	for _, want := range []string{
		"offered        10.500 rps in the window 12:00:00-12:00:30 UTC (315 requests; forecast 10.600 rps)",
		"rejected       40.00% answered 429 by the gateways: 9.84% shed by the snapshot, 29.84% by admission, 0.32% with every engine at its limit",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runExplain(t, "--cluster", "region-c", "--snapshot-file", writeFile(t, string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "offered        unknown") || strings.Contains(out, "rejected  ") {
		t.Errorf("region-c has no estimate:\n%s", out)
	}
}
