package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDemoEndToEnd runs the whole pipeline for about 20 seconds on free
// ports and checks the demo contract: snapshots published with increasing
// versions, every gateway applied its cluster's snapshot, at least 99% of
// requests succeeded, and signals and routing events crossed Kafka.
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end demo skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var args = []string{
		"--duration", "20s", "--json", "--kafka-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--gateway-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--status-interval", "4s", "--rate", "10",
	}
	var stderr bytes.Buffer
	if err := Command().Run(ctx, args, &out, &stderr); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	var sum Summary
	if err := json.Unmarshal([]byte(last), &sum); err != nil {
		t.Fatalf("last line is not the JSON summary: %v\n%s", err, out.String())
	}
	t.Logf("summary: %s", last)
	// The contract's keys are present in the raw JSON.
	var raw map[string]any
	_ = json.Unmarshal([]byte(last), &raw)
	for _, k := range []string{"requests", "succeeded", "failed", "snapshots_published", "latest_snapshot_version",
		"signals_consumed", "routing_events", "kv_hit_rate", "ttft_ms", "gateways"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("summary has no %q", k)
		}
	}
	if sum.Requests < 100 {
		t.Fatalf("only %d requests in 20s at 10 rps", sum.Requests)
	}
	if float64(sum.Succeeded) < 0.99*float64(sum.Requests) {
		t.Errorf("%d of %d requests succeeded (< 99%%); errors %v", sum.Succeeded, sum.Requests, sum.Errors)
	}
	if sum.SnapshotsPublished < 2 || sum.LatestVersion < 2 {
		t.Errorf("snapshots published %d, latest version %d", sum.SnapshotsPublished, sum.LatestVersion)
	}
	if sum.SignalsConsumed == 0 || sum.RoutingEvents == 0 {
		t.Errorf("signals consumed %d, routing events %d: nothing crossed Kafka", sum.SignalsConsumed, sum.RoutingEvents)
	}
	if sum.RoutingEvents < uint64(sum.Requests)*9/10 {
		t.Errorf("routing events %d for %d requests", sum.RoutingEvents, sum.Requests)
	}
	if len(sum.Gateways) != 3 {
		t.Fatalf("gateways %+v", sum.Gateways)
	}
	for _, g := range sum.Gateways {
		if g.SnapshotVersion == 0 {
			t.Errorf("gateway %s never applied a snapshot", g.Cluster)
		}
		if g.Requests == 0 {
			t.Errorf("gateway %s routed nothing", g.Cluster)
		}
	}
	// Status lines show increasing snapshot versions.
	var versions []int
	for _, l := range lines {
		var v int
		if i := strings.Index(l, "snapshot v"); i >= 0 {
			if _, err := fmtSscan(l[i+len("snapshot v"):], &v); err == nil {
				versions = append(versions, v)
			}
		}
	}
	for i := 1; i < len(versions); i++ {
		if versions[i] < versions[i-1] {
			t.Errorf("snapshot versions went down: %v", versions)
		}
	}
	if len(versions) < 2 || versions[len(versions)-1] <= versions[0] {
		t.Errorf("snapshot versions did not increase over the run: %v", versions)
	}
}

func fmtSscan(s string, v *int) (int, error) {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	var err error
	*v, err = strconv.Atoi(s[:n])
	return n, err
}
