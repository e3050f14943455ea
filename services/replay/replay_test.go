package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/replay"
	"github.com/switchyard-llm/switchyard/streams/replay/replaytest"
)

var t0 = time.Now().Add(-time.Hour).Truncate(time.Minute)

// TestWhatIfCommand replays a range with a what-if config file through
// the command and checks the snapshots it wrote follow the config.
func TestWhatIfCommand(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "rp"
	replaytest.History(t, kc, streams.TopicsFor(prefix), t0, 60*time.Second)
	from, to := t0.Add(20*time.Second), t0.Add(50*time.Second)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "whatif.yaml")
	if err := os.WriteFile(cfgPath, []byte("processor:\n  window: 10s\n  slide: 5s\n  allowed_lateness: 1s\noptimizer:\n  estimate_ttl: 1h\n  clusters: [us, eu]\n  strict_residency: true\n  region_rtt_ms: {us: {us: 1}, eu: {eu: 1}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(dir, "out.jsonl")
	var stderr bytes.Buffer
	args := []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", prefix,
		"--from", from.Format(time.RFC3339Nano), "--to", fmt.Sprint(to.UnixMilli()), "--settings", "defaults", "--config", cfgPath, "--out", outPath}
	if err := Command().Run(context.Background(), args, &bytes.Buffer{}, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	f, err := os.Open(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := replay.ReadSnapshots(f, replay.JSONLines)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 6 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	// Strict residency with only same-region RTTs: each cluster routes
	// to its own region's engine only.
	for _, cw := range snaps[len(snaps)-1].GetClusters() {
		for _, w := range cw.GetWeights() {
			if w.GetWeight() > 0 && ((cw.GetCluster() == "us") != (w.GetEngineId() == "e1")) {
				t.Errorf("cluster %s routes %v to %s", cw.GetCluster(), w.GetWeight(), w.GetEngineId())
			}
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--to", "1", "--out", "-"},
		{"--from", "x", "--to", "1", "--out", "-"},
		{"--from", "1", "--to", "2"},
		{"--from", "1", "--to", "2", "--out", "-", "--format", "xml"},
		{"--from", "1", "--to", "2", "--out", "-", "--nats-url", "nats://127.0.0.1:4222"}, // replay uses no NATS
		{"--from", "1", "--to", "2", "--out", "-", "--kafka-brokers", ","},
		{"--from", "1", "--to", "2", "--out", "-", "--engine-registry", "/nonexistent/engines.yaml"},
		{"--from", "1", "--to", "2", "--out", "-", "--max-claim-gain", "0.5"}, // must be > 1
		{"--verify", "--max-claim-gain", "1"},
		{"--from", "1", "--to", "2", "--out", "-", "--settings", "live"},
		{"--from", "1", "--to", "2", "--out", "-", "--set", "max_utilization=0.5"},           // no section
		{"--from", "1", "--to", "2", "--out", "-", "--set", "optimizer.max_utilisation=0.5"}, // unknown key
		{"--from", "1", "--to", "2", "--out", "-", "--set", "optimizer.max_utilization=2"},   // outside [0,1]
		{"--from", "1", "--to", "2", "--out", "-", "--set", "processor.window=soon"},
		{"--from", "1", "--to", "2", "--out", "-", "--warmup", "-1s"},
	} {
		err := Command().Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

// TestEngineRegistryFlag replays the same range through the command with
// and without --engine-registry (a file holding e1 only): without it
// the snapshots route to e2, with it they never do.
func TestEngineRegistryFlag(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "rg"
	replaytest.History(t, kc, streams.TopicsFor(prefix), t0, 60*time.Second)
	from, to := t0.Add(20*time.Second), t0.Add(50*time.Second)
	dir := t.TempDir()
	cfgPath, regPath := filepath.Join(dir, "whatif.yaml"), filepath.Join(dir, "engines.yaml")
	if err := os.WriteFile(cfgPath, []byte("processor: {window: 10s, slide: 5s, allowed_lateness: 1s}\noptimizer: {estimate_ttl: 1h, clusters: [us, eu]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(regPath, []byte("engines:\n  - {id: e1, url: \"http://e1\", region: us, gpu_class: h100}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		flags  []string
		wantE2 bool
	}{
		{"without", nil, true},
		{"with", []string{"--engine-registry", regPath}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outPath := filepath.Join(dir, tc.name+".jsonl")
			var stderr bytes.Buffer
			args := append([]string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", prefix,
				"--from", fmt.Sprint(from.UnixMilli()), "--to", fmt.Sprint(to.UnixMilli()), "--settings", "defaults", "--config", cfgPath, "--out", outPath}, tc.flags...)
			if err := Command().Run(context.Background(), args, &bytes.Buffer{}, &stderr); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			f, err := os.Open(outPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			snaps, err := replay.ReadSnapshots(f, replay.JSONLines)
			if err != nil || len(snaps) != 6 {
				t.Fatalf("%d snapshots, err %v", len(snaps), err)
			}
			e2 := false
			for _, s := range snaps {
				for _, cw := range s.GetClusters() {
					for _, w := range cw.GetWeights() {
						e2 = e2 || (w.GetEngineId() == "e2" && w.GetWeight() > 0)
					}
				}
			}
			if e2 != tc.wantE2 {
				t.Errorf("snapshots route to e2: %v, want %v", e2, tc.wantE2)
			}
		})
	}
}

// TestReplayWithoutRecordedSettingsSaysSo: a history without settings
// records (no live processor or optimizer wrote it) is not replayed with
// silently different settings: the command fails and names the way out.
func TestReplayWithoutRecordedSettingsSaysSo(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "rn"
	replaytest.History(t, kc, streams.TopicsFor(prefix), t0, 30*time.Second)
	args := []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", prefix,
		"--from", fmt.Sprint(t0.Add(10 * time.Second).UnixMilli()), "--to", fmt.Sprint(t0.Add(20 * time.Second).UnixMilli()), "--out", "-"}
	var stdout bytes.Buffer
	err := Command().Run(context.Background(), args, &stdout, &bytes.Buffer{})
	if !errors.Is(err, replay.ErrSettings) || !strings.Contains(err.Error(), "--settings defaults") {
		t.Fatalf("err %v, want ErrSettings naming --settings defaults", err)
	}
	if stdout.Len() != 0 {
		t.Fatalf("wrote %q", stdout.String())
	}
}
