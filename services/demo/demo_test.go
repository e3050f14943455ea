package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDemoEndToEnd runs the whole pipeline for about 20 seconds on free
// ports and checks the demo contract: snapshots published with increasing
// versions, every gateway applied its cluster's snapshot, at least 99% of
// requests succeeded, signals and routing events crossed Kafka, and
// franz-go and kafkajs without plugins read every record of every topic
// (plainClientsReadEveryTopic).
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end demo skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var args = []string{
		"--duration", "20s", "--json", "--kafka-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--gateway-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0", "--status-interval", "4s", "--rate", "10",
	}
	// Read the demo's stdout as it runs, so outside clients can be pointed
	// at the addresses it prints.
	pr, pw := io.Pipe()
	var out bytes.Buffer
	addrs := make(chan map[string]string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		send := addrs // set to nil once the addresses are sent
		found := map[string]string{}
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "metrics:":
				found["metrics"] = f[1]
			case len(f) >= 2 && f[0] == "kafka:":
				found["kafka"] = f[1]
			case len(f) >= 3 && f[0] == "gateway:" && found["gateway"] == "":
				found["gateway"] = strings.TrimSuffix(f[2], "/v1/chat/completions")
			case len(f) >= 2 && f[0] == "engine:" && found["gateway"] != "" && send != nil:
				send <- found
				send = nil
			}
		}
	}()
	var stderr bytes.Buffer
	runErr := make(chan error, 1)
	go func() {
		err := Command().Run(ctx, args, pw, &stderr)
		pw.Close()
		runErr <- err
	}()
	var a map[string]string
	select {
	case a = <-addrs:
	case err := <-runErr:
		<-scanned
		t.Fatalf("demo ended before printing its addresses: %v\n%s\n%s", err, out.String(), stderr.String())
	}
	outsideClients(t, ctx, a["kafka"], a["gateway"])
	plainClientsReadEveryTopic(t, ctx, a["kafka"])
	everyComponentsMetrics(t, ctx, a["metrics"])
	err := <-runErr
	<-scanned
	if err != nil {
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
		"signals_consumed", "routing_events", "kv_hit_rate", "ttft_ms", "gateways", "stalls"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("summary has no %q", k)
		}
	}
	// The stall probe ran beside the load: every 10 ms for 20 s.
	if sum.Stalls.Wakeups < 100 || sum.Stalls.PeriodMs != 10 {
		t.Errorf("stall probe woke %d times every %v ms during the load, want 100 or more every 10", sum.Stalls.Wakeups, sum.Stalls.PeriodMs)
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

// outsideClients uses the running demo the way a person would: curl's
// streaming chat completion against the first gateway, and kcat reading
// engine signals from the embedded Kafka (when kcat is installed; CI
// installs it).
func outsideClients(t *testing.T, ctx context.Context, kafka, gateway string) {
	t.Helper()
	body := `{"model":"switchyard-sim-8b","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hello from outside"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gateway+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("streaming request to %s: %v", gateway, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "data: [DONE]") {
		t.Fatalf("gateway answered %d:\n%s", resp.StatusCode, b)
	}
	if resp.Header.Get("X-Switchyard-Engine") == "" {
		t.Errorf("no X-Switchyard-Engine header")
	}
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("kcat not installed: CI must install it")
		}
		t.Log("kcat not installed: skipping the kcat check")
		return
	}
	// Signals arrive every second; wait for some with kcat itself.
	var got []byte
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err = exec.CommandContext(kctx, "kcat", "-b", kafka, "-t", "switchyard.engine.signals", "-C", "-e", "-q", "-f", "%k\n").Output()
		cancel()
		if err == nil && len(strings.TrimSpace(string(got))) > 0 {
			break
		}
	}
	if err != nil || !strings.Contains(string(got), "-") {
		t.Fatalf("kcat read no engine signals from %s: %v\n%s", kafka, err, got)
	}
	t.Logf("kcat read %d signal keys from the demo's Kafka", strings.Count(string(got), "\n"))
}

// TestRestartOnDataDir: a demo restarted on the data dir of a run that
// published snapshots routes its first requests (and every other) to
// live engines: the snapshot kept from the previous run names engines at
// the addresses they listen on again, so no request fails.
func TestRestartOnDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("two demo runs skipped in -short mode")
	}
	dir := t.TempDir()
	run := func(d time.Duration) *Summary {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sum, err := Run(ctx, Config{
			Duration: d, KafkaListen: "127.0.0.1:0", NATSListen: "127.0.0.1:0", GatewayListen: "127.0.0.1:0",
			DataDir: dir, Rate: 20, Seed: 1, StatusInterval: time.Minute, MaxPromptTokens: 1024, MaxOutputTokens: 32,
			Logger: slog.New(slog.DiscardHandler), Stdout: io.Discard,
		})
		if err != nil {
			t.Fatalf("demo: %v", err)
		}
		return sum
	}
	first := run(7 * time.Second)
	if first.SnapshotsPublished == 0 {
		t.Fatalf("the first run published no snapshot, so the restart proves nothing: %+v", first)
	}
	second := run(3 * time.Second)
	if second.Requests < 20 || second.Failed != 0 {
		t.Errorf("restarted demo: %d requests, %d failed (errors %v)", second.Requests, second.Failed, second.Errors)
	}
	t.Logf("first run: %d snapshots (latest %d); second: %d requests, %d failed, gateways %+v",
		first.SnapshotsPublished, first.LatestVersion, second.Requests, second.Failed, second.Gateways)
}

// everyComponentsMetrics: the demo's one /metrics serves the series of
// every component (gateway, engine, agent, processor, optimizer), polled
// until each has appeared or the demo's deadline passes.
func everyComponentsMetrics(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	want := []string{
		"switchyard_gateway_requests_total{",
		"vllm:num_requests_running{",
		"switchyard_enginesim_max_num_seqs{",
		"switchyard_agent_scrapes_total{",
		"switchyard_processor_records_total{",
		"switchyard_optimizer_snapshots_published_total",
		"switchyard_emitter_records_total{",
		"switchyard_consumer_lag_records{group=\"switchyard-processor\"",
		"switchyard_consumer_lag_records{group=\"demo-node-team\"", // another team's group (plainClientsReadEveryTopic)
	}
	// Each gateway hears the others' load reports (gateway/peers).
	regions := DefaultTopology().Regions
	want = append(want, fmt.Sprintf("switchyard_gateway_peers{cluster=%q} %d", regions[0], len(regions)-1))
	var missing []string
	for ctx.Err() == nil {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		missing = missing[:0]
		for _, w := range want {
			if !bytes.Contains(body, []byte("\n"+w)) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			if !bytes.Contains(body, []byte(`vllm:num_requests_running{engine="`)) {
				t.Errorf("engine series without an engine label")
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // poll interval
		}
	}
	t.Errorf("the demo's /metrics never served %v", missing)
}
