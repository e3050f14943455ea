package solve

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

	"github.com/switchyard-llm/switchyard/internal/cli"
)

const seed = "../../optimizer/testdata/region-bc.json"

func runSolve(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Command().Run(context.Background(), args, &out, &errOut)
	return out.String(), err
}

func TestSolveJSON(t *testing.T) {
	out, err := runSolve(t, "--instance", seed, "--json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("want exactly one line of JSON, got %q", out)
	}
	var got struct {
		ObjectiveMs *float64                      `json:"objective_ms"`
		Weights     map[string]map[string]float64 `json:"weights"`
		Shed        map[string]float64            `json:"shed"`
		Engines     map[string]struct {
			LoadRPS     *float64 `json:"load_rps"`
			Utilization *float64 `json:"utilization"`
		} `json:"engines"`
		SolveMs    *float64 `json:"solve_ms"`
		DualityGap *float64 `json:"duality_gap"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value")
	}
	if got.ObjectiveMs == nil || got.SolveMs == nil || got.DualityGap == nil {
		t.Fatalf("missing keys in %s", out)
	}
	if w := got.Weights["region-b"]["c-0"]; math.Abs(w-0.258696) > 1e-5 {
		t.Errorf("region-b -> c-0 weight %v", w)
	}
	if e := got.Engines["b-0"]; e.LoadRPS == nil || e.Utilization == nil || *e.Utilization > 0.95 {
		t.Errorf("engine b-0: %+v", e)
	}
	if _, ok := got.Shed["region-c"]; !ok {
		t.Error("shed has no region-c")
	}
}

func TestSolveTable(t *testing.T) {
	out, err := runSolve(t, "--instance", seed)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"objective", "duality gap", "region-b", "c-0", "MARGINAL MS", "0.2587"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSolveBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		usage bool
		want  string
	}{
		{"no instance flag", nil, true, "--instance"},
		{"missing file", []string{"--instance", filepath.Join(dir, "nope.json")}, true, "no such file"},
		{"syntax", []string{"--instance", write("syntax.json", "{")}, false, "invalid instance"},
		{"wrong type", []string{"--instance", write("type.json", `{"max_utilization":"high"}`)}, false, "max_utilization"},
		{"negative capacity", []string{"--instance", write("cap.json", strings.Replace(string(good), `"capacity_rps": 100`, `"capacity_rps": -100`, 1))}, false, "capacity_rps"},
		{"unknown engine", []string{"--instance", write("unk.json", strings.Replace(string(good), `"c-0": 40}`, `"x-0": 40}`, 1))}, false, `"x-0"`},
		{"trailing data", []string{"--instance", write("trail.json", string(good)+"{}")}, false, "trailing"},
		{"bad tolerance", []string{"--instance", seed, "--tolerance", "-1"}, true, "tolerance"},
		{"bad flag", []string{"--bogus"}, true, "bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runSolve(t, tt.args...)
			if err == nil {
				t.Fatal("want an error")
			}
			if errors.Is(err, cli.ErrUsage) != tt.usage {
				t.Errorf("err %v: usage %v, want %v", err, errors.Is(err, cli.ErrUsage), tt.usage)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %q does not mention %q", err, tt.want)
			}
		})
	}
}
