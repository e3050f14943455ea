package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
)

const scenarioJSON = `{
  "name": "cmd", "duration_s": 8, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b"], "rtt_ms": {"a": {"b": 40}},
  "clusters": [{"id": "a", "region": "a", "share": 3}, {"id": "b", "region": "b", "share": 1}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "b-0", "region": "b", "gpu": "h100"}],
  "workload": {"kind": "generator", "rate_rps": 40},
  "control": {"optimizer_period_s": 2, "window_s": 4, "slide_s": 1, "allowed_lateness_s": 1}
}`

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Command().Run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestJSONLastLineHasTheIssueKeysAndIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	sc := writeFile(t, dir, "s.json", scenarioJSON)
	out1, _, err := runCmd(t, "--scenario", sc, "--json", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	out2, _, err := runCmd(t, "--scenario", sc, "--json", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	if out1 != out2 {
		t.Fatalf("same seed, different output:\n%s\n---\n%s", out1, out2)
	}
	lines := strings.Split(strings.TrimSpace(out1), "\n")
	var obj map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &obj); err != nil {
		t.Fatalf("last line is not JSON: %v", err)
	}
	pols, ok := obj["policies"].(map[string]any)
	if !ok || len(pols) != 10 {
		t.Fatalf("policies: %v", obj["policies"])
	}
	for name, v := range pols {
		m := v.(map[string]any)
		for _, k := range []string{"goodput_rps", "kv_hit_rate", "shed", "failed", "weight_reversals", "cross_region_share"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: missing %s", name, k)
			}
		}
		for k, subs := range map[string][]string{"ttft_ms": {"p50", "p90", "p99"}, "tbot_ms": {"p99"}, "e2e_ms": {"p50", "p99"}} {
			sub, _ := m[k].(map[string]any)
			for _, s := range subs {
				if _, ok := sub[s]; !ok {
					t.Errorf("%s: missing %s.%s", name, k, s)
				}
			}
		}
	}
	if !strings.Contains(out1, "switchyard") || !strings.Contains(out1, "llmd-scorer") {
		t.Fatalf("table lacks policies:\n%s", out1)
	}
	out3, _, err := runCmd(t, "--scenario", sc, "--json", "--seed", "4", "--policies", "random,p2c")
	if err != nil {
		t.Fatal(err)
	}
	if out3 == out1 {
		t.Fatal("a different seed gave the same output")
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	sc := writeFile(t, dir, "s.json", scenarioJSON)
	bad := writeFile(t, dir, "bad.json", strings.Replace(scenarioJSON, `"gpu": "h100"}]`, `"gpu": "v100"}]`, 1))
	writeFile(t, dir, "t.jsonl", `{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": "soon"}
{"timestamp": 500, "input_length": 900, "output_length": 20, "hash_ids": [0, 1]}
`)
	tr := writeFile(t, dir, "tr.json", strings.Replace(scenarioJSON, `"workload": {"kind": "generator", "rate_rps": 40}`, `"workload": {"kind": "mooncake", "trace": "t.jsonl"}`, 1))

	t.Run("invalid scenario names the field", func(t *testing.T) {
		_, _, err := runCmd(t, "--scenario", bad)
		if err == nil || !strings.Contains(err.Error(), "engines[1].gpu") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("missing scenario flag", func(t *testing.T) {
		_, _, err := runCmd(t)
		if !errors.Is(err, cli.ErrUsage) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unknown policy", func(t *testing.T) {
		_, _, err := runCmd(t, "--scenario", sc, "--policies", "switchyard,magic")
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), "magic") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("malformed rows are skipped and reported", func(t *testing.T) {
		out, stderr, err := runCmd(t, "--scenario", tr, "--policies", "round-robin", "--json")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr, "skipped 1 malformed rows (first at lines 2)") {
			t.Fatalf("stderr %q", stderr)
		}
		if !strings.Contains(out, `"skipped":1`) || !strings.Contains(out, `"first_bad_lines":[2]`) {
			t.Fatalf("json lacks the trace report:\n%s", out)
		}
	})
	t.Run("strict fails on the bad row", func(t *testing.T) {
		_, _, err := runCmd(t, "--scenario", tr, "--policies", "round-robin", "--strict")
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("trace on a generator scenario is a usage error", func(t *testing.T) {
		// A flag that would do nothing is refused: hetero-fleet with two
		// different traces used to print the same results.
		trace := filepath.Join(dir, "t.jsonl")
		out, _, err := runCmd(t, "--scenario", sc, "--policies", "round-robin", "--trace", trace)
		if !errors.Is(err, cli.ErrUsage) || !errors.Is(err, scenario.ErrTraceOnGenerator) ||
			!strings.Contains(err.Error(), "t.jsonl") || !strings.Contains(err.Error(), `"cmd"`) {
			t.Fatalf("got %v, want a usage error naming the trace and the scenario", err)
		}
		if out != "" {
			t.Fatalf("printed results anyway:\n%s", out)
		}
	})
	t.Run("trace flag overrides", func(t *testing.T) {
		_, _, err := runCmd(t, "--scenario", tr, "--policies", "round-robin", "--trace", filepath.Join(dir, "missing.jsonl"))
		if err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("trace format flags override what is inferred", func(t *testing.T) {
		out, _, err := runCmd(t, "--scenario", tr, "--policies", "round-robin", "--trace-time-unit", "s", "--trace-block-tokens", "512", "--json")
		if err != nil {
			t.Fatal(err)
		}
		// The rows' 0 and 500 are seconds, not milliseconds: the second
		// arrives after the scenario's 8 s.
		if !strings.Contains(out, `"requests":1,`) || !strings.Contains(out, `"block_tokens":512`) {
			t.Fatalf("output:\n%s", out)
		}
		if inferred, _, err := runCmd(t, "--scenario", tr, "--policies", "round-robin", "--json"); err != nil || !strings.Contains(inferred, `"requests":2,`) {
			t.Fatalf("without the flags (milliseconds): %v\n%s", err, inferred)
		}
		for _, bad := range [][]string{{"--trace-time-unit", "h"}, {"--trace-block-tokens", "-1"}} {
			if _, _, err := runCmd(t, append([]string{"--scenario", tr}, bad...)...); !errors.Is(err, cli.ErrUsage) {
				t.Errorf("%v: got %v, want a usage error", bad, err)
			}
		}
	})
}

func TestPlots(t *testing.T) {
	dir := t.TempDir()
	sc := writeFile(t, dir, "s.json", scenarioJSON)
	plots := filepath.Join(dir, "plots")
	if _, _, err := runCmd(t, "--scenario", sc, "--policies", "switchyard,legacy-irb,p2c", "--plots", plots); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ttft-cdf.png", "weights-switchyard.png", "weights-legacy-irb.png", "utilization-p2c.png", "utilization-switchyard.png"} {
		b, err := os.ReadFile(filepath.Join(plots, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("%s is not a PNG", f)
		}
	}
}

// overloadJSON is scenarioJSON on two L4 engines with short queues at
// 150 rps: switchyard sheds some requests and others fail.
const overloadJSON = `{
  "name": "over", "duration_s": 8, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b"], "rtt_ms": {"a": {"b": 40}},
  "clusters": [{"id": "a", "region": "a", "share": 3}, {"id": "b", "region": "b", "share": 1}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "l4", "max_waiting": 4}, {"id": "b-0", "region": "b", "gpu": "l4", "max_waiting": 4}],
  "workload": {"kind": "generator", "rate_rps": 150},
  "control": {"optimizer_period_s": 2, "window_s": 4, "slide_s": 1, "allowed_lateness_s": 1}
}`

// TestRequestsFileHoldsEveryRequestAndAgreesWithTheMetrics: --requests
// writes one line per request and policy, in order, whose outcomes (ok,
// shed, failed) add up to the policy's counts and whose TTFTs give its
// percentiles.
func TestRequestsFileHoldsEveryRequestAndAgreesWithTheMetrics(t *testing.T) {
	dir := t.TempDir()
	sc := writeFile(t, dir, "s.json", overloadJSON)
	reqFile := filepath.Join(dir, "requests.jsonl")
	out, _, err := runCmd(t, "--scenario", sc, "--json", "--policies", "switchyard,p2c", "--requests", reqFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var o Output
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(reqFile)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(rows) != 2*o.Requests || o.Requests < 100 {
		t.Fatalf("%d lines for %d requests under 2 policies", len(rows), o.Requests)
	}
	for p, name := range []string{"switchyard", "p2c"} {
		m := o.Policies[name]
		var ttft []float32
		ok, shed, failed := 0, 0, 0
		for i, row := range rows[p*o.Requests : (p+1)*o.Requests] {
			var r requestLine
			if err := json.Unmarshal([]byte(row), &r); err != nil {
				t.Fatalf("%s line %d: %v", name, i, err)
			}
			if r.Policy != name || r.Index != i || (r.Cluster != "a" && r.Cluster != "b") {
				t.Fatalf("%s line %d: %+v", name, i, r)
			}
			switch r.Status {
			case "ok":
				ok++
				if r.Engine != "a-0" && r.Engine != "b-0" || r.EngineTTFTms <= 0 || r.TTFTms < r.EngineTTFTms || r.PromptTokens <= 0 {
					t.Fatalf("%s line %d: %+v", name, i, r)
				}
				if r.Stream {
					ttft = append(ttft, float32(r.TTFTms))
				}
			case "shed":
				shed++
			case "failed":
				failed++
			default:
				t.Fatalf("%s line %d: status %q", name, i, r.Status)
			}
		}
		if name == "switchyard" && (shed == 0 || failed == 0) {
			t.Fatalf("switchyard shed %d and failed %d: the scenario no longer overloads", shed, failed)
		}
		if ok != m.Completed || shed != m.Shed || failed != m.Failed {
			t.Errorf("%s: %d ok, %d shed, %d failed in the file; metrics say %d, %d, %d", name, ok, shed, failed, m.Completed, m.Shed, m.Failed)
		}
		slices.Sort(ttft)
		// Within a rounding step: the file keeps µs, the metrics float32 ms.
		if got := ttft[int(math.Ceil(0.99*float64(len(ttft))))-1]; math.Abs(float64(got)-m.TTFTms.P99) > 0.06 {
			t.Errorf("%s: p99 of the file's TTFTs %v ms, metrics %v", name, got, m.TTFTms.P99)
		}
	}
	if _, _, err := runCmd(t, "--scenario", sc, "--policies", "p2c", "--requests", filepath.Join(dir, "no", "such", "dir", "r.jsonl")); err == nil {
		t.Fatal("an unwritable --requests file was not an error")
	}
}
