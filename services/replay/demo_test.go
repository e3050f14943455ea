package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/services/demo"
	"github.com/switchyard-llm/switchyard/services/exporttrace"
	"github.com/switchyard-llm/switchyard/simulator/workload"
	"github.com/switchyard-llm/switchyard/streams/replay"
)

// TestVerifyDemoHistory runs the demo (engines, agents, processor,
// optimizer, gateways, load) with --data-dir for 10 seconds, starts the
// brokers again on its data, and runs `replay --verify`: every snapshot
// the demo's optimizer published is reproduced from the history with the
// settings the demo recorded (which exist only in the demo's code). Then
// `export-trace` turns the demo's routing events into a trace the
// simulator's reader takes: every request the demo's load made, with its
// tokens, cluster and affinity hash.
func TestVerifyDemoHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("demo run skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	dir := filepath.Join(t.TempDir(), "data")
	var demoOut, demoErr bytes.Buffer
	args := []string{"--data-dir", dir, "--duration", "10s", "--json", "--rate", "12", "--kafka-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--gateway-listen", "127.0.0.1:0", "--metrics-listen", "", "--console-listen", "", "--status-interval", "1m"}
	if err := demo.Command().Run(ctx, args, &demoOut, &demoErr); err != nil {
		t.Fatalf("demo: %v\n%s", err, demoErr.String())
	}
	lines := strings.Split(strings.TrimSpace(demoOut.String()), "\n")
	var sum struct {
		Snapshots int `json:"snapshots_published"` // by the time of the summary
		Requests  int `json:"requests"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Snapshots < 1 {
		t.Fatalf("demo summary %q: %v", lines[len(lines)-1], err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}

	b, err := brokers.Start(ctx, brokers.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	var stdout, stderr bytes.Buffer
	vargs := []string{"--verify", "--kafka-brokers", strings.Join(b.KafkaAddrs(), ","), "--nats-url", b.NATSURL()}
	if err := Command().Run(ctx, vargs, &stdout, &stderr); err != nil {
		t.Fatalf("replay --verify: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	var res replay.VerifyResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	t.Logf("%s", strings.TrimSpace(stdout.String()))
	if res.Compared < max(3, sum.Snapshots) || res.Identical != res.Compared || res.ProcessorSettings != 1 || res.OptimizerSettings != 1 {
		t.Fatalf("verify: %+v; the demo's summary counted %d snapshots", res, sum.Snapshots)
	}

	trace := filepath.Join(t.TempDir(), "demo.jsonl")
	targs := []string{"--kafka-brokers", strings.Join(b.KafkaAddrs(), ","), "--from", start.Format(time.RFC3339Nano),
		"--to", time.Now().Format(time.RFC3339Nano), "--out", trace, "--max-request", "1m"}
	stdout.Reset()
	if err := exporttrace.Command().Run(ctx, targs, &stdout, &stderr); err != nil {
		t.Fatalf("export-trace: %v\n%s", err, stderr.String())
	}
	t.Logf("export-trace: %s", strings.TrimSpace(stdout.String()))
	var tr replay.TraceResult
	if err := json.Unmarshal(stdout.Bytes(), &tr); err != nil {
		t.Fatalf("export-trace summary %q: %v", stdout.String(), err)
	}
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, rep, err := workload.ReadMooncake(f, true)
	if err != nil {
		t.Fatal(err)
	}
	keyed := 0
	for _, r := range reqs {
		if r.PromptTokens <= 0 || !strings.HasPrefix(r.Cluster, "region-") {
			t.Fatalf("trace request %+v", r)
		}
		if r.Session != "ak0000000000000000" {
			keyed++
		}
	}
	// Every request of the demo's load is in the trace, but those that
	// never reached an engine (shed: no tokens) or had not finished.
	if len(reqs)+tr.NoPrompt+tr.Unfinished != sum.Requests || len(reqs) < sum.Requests*9/10 || rep.SwitchyardRows != len(reqs) || keyed < len(reqs)*9/10 {
		t.Fatalf("trace: %d requests (%d with an affinity key), %+v; the demo made %d", len(reqs), keyed, tr, sum.Requests)
	}
}
