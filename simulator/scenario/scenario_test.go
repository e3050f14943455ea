package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/workload"
)

const good = `{
  "name": "t", "duration_s": 10, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a", "b"], "rtt_ms": {"a": {"b": 40}},
  "clusters": [{"id": "a", "region": "a", "share": 3}, {"id": "b", "region": "b", "share": 1}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "b-0", "region": "b", "gpu": "l4", "replicas": 2}],
  "workload": {"kind": "generator", "rate_rps": 20},
  "events": [{"at_s": 3, "kind": "engine_down", "engine": "a-0"}, {"at_s": 2, "until_s": 4, "kind": "rate", "factor": 2, "cluster": "a"}]
}`

func TestParseNamesTheBadField(t *testing.T) {
	tests := []struct {
		name, from, to, field string
	}{
		{"unknown field", `"duration_s": 10,`, `"duration_s": 10, "bogus": 1,`, `unknown field "bogus"`},
		{"negative duration", `"duration_s": 10`, `"duration_s": -1`, "duration_s"},
		{"missing slo", `"slo": {"ttft_ms": 2000, "tbot_ms": 100}`, `"slo": {"tbot_ms": 100}`, "slo.ttft_ms"},
		{"bad gpu", `"gpu": "h100"`, `"gpu": "tpu"`, "engines[0].gpu"},
		{"unknown region", `{"id": "b-0", "region": "b"`, `{"id": "b-0", "region": "z"`, "engines[1].region"},
		{"duplicate engine", `{"id": "b-0"`, `{"id": "a-0"`, "engines[1].id"},
		{"rtt unknown region", `"rtt_ms": {"a": {"b": 40}}`, `"rtt_ms": {"a": {"q": 40}}`, `rtt_ms["a"]["q"]`},
		{"bad kind", `"kind": "generator"`, `"kind": "poisson"`, "workload.kind"},
		{"no rate", `"rate_rps": 20`, `"rate_rps": 0`, "workload.rate_rps"},
		{"event engine", `"engine": "a-0"}`, `"engine": "x"}`, "events[0].engine"},
		{"event until", `"until_s": 4`, `"until_s": 1`, "events[1].until_s"},
		{"event kind", `"kind": "engine_down"`, `"kind": "meteor"`, "events[0].kind"},
		{"cluster share", `"share": 3`, `"share": -3`, "clusters[0].share"},
		{"trailing", `"cluster": "a"}]`, `"cluster": "a"}]}{"x": 1`, "trailing data"},
		{"latency multiplier", `"gpu": "h100"}`, `"gpu": "h100", "latency_multiplier": -2}`, "engines[0].latency_multiplier"},
		{"latency multiplier too big", `"gpu": "h100"}`, `"gpu": "h100", "latency_multiplier": 5000}`, "engines[0].latency_multiplier"},
		{"report max batch type", `"gpu": "h100"}`, `"gpu": "h100", "report_max_batch": 0}`, "report_max_batch"},
		{"non-streaming share", `"rate_rps": 20}`, `"rate_rps": 20, "non_streaming_share": 1.5}`, "workload.non_streaming_share"},
		{"initial cluster", `"cluster": "a"}]`, `"cluster": "a"}], "initial": [{"cluster": "q", "weights": {}}]`, "initial[0].cluster"},
		{"initial engine", `"cluster": "a"}]`, `"cluster": "a"}], "initial": [{"cluster": "a", "weights": {"x": 1}}]`, "initial[0].weights"},
		{"initial weight", `"cluster": "a"}]`, `"cluster": "a"}], "initial": [{"cluster": "a", "weights": {"a-0": 1.5}}]`, `initial[0].weights["a-0"]`},
		{"initial shed", `"cluster": "a"}]`, `"cluster": "a"}], "initial": [{"cluster": "a", "shed_fraction": -1, "weights": {}}]`, "initial[0].shed_fraction"},
		{"initial twice", `"cluster": "a"}]`, `"cluster": "a"}], "initial": [{"cluster": "a", "weights": {}}, {"cluster": "a", "weights": {}}]`, "initial[1].cluster"},
	}
	if _, err := Parse([]byte(good)); err != nil {
		t.Fatalf("good scenario: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(good, tc.from, tc.to, 1)
			if bad == good {
				t.Fatalf("replacement %q did not apply", tc.from)
			}
			_, err := Parse([]byte(bad))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want an ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}

func TestShippedScenariosLoadAndBuild(t *testing.T) {
	files, err := filepath.Glob("../testdata/scenarios/*.json")
	if err != nil || len(files) < 6 {
		t.Fatalf("scenarios: %v %v", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".schema.json") {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if s.Workload.Kind == KindGenerator {
				s.DurationS = 5 // keep the test short
			}
			wl, err := s.Build(BuildOptions{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(wl.Requests) == 0 {
				t.Fatal("no requests")
			}
			for i, r := range wl.Requests {
				if i > 0 && r.Arrival < wl.Requests[i-1].Arrival {
					t.Fatal("not sorted")
				}
				if r.Cluster == "" || r.Session == "" {
					t.Fatalf("request %d has no cluster or session: %+v", i, r)
				}
			}
		})
	}
}

// A trace given for a generator workload would be silently ignored, so
// Build refuses it.
func TestTraceOnGeneratorIsAnError(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Build(BuildOptions{Seed: 1, Trace: "x.jsonl"}); !errors.Is(err, ErrTraceOnGenerator) {
		t.Fatalf("got %v, want ErrTraceOnGenerator", err)
	}
}

// non_streaming_share marks about that share of the conversations, all
// turns of a conversation alike, and leaves the rest of the workload as
// it was.
func TestNonStreamingShare(t *testing.T) {
	plain, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	half, err := Parse([]byte(strings.Replace(good, `"rate_rps": 20}`, `"rate_rps": 20, "non_streaming_share": 0.5}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := plain.Build(BuildOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	b, err := half.Build(BuildOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Requests) != len(b.Requests) {
		t.Fatalf("%d requests, %d with the share", len(a.Requests), len(b.Requests))
	}
	bySession := map[string]bool{}
	non := 0
	for i, r := range b.Requests {
		if a.Requests[i].NonStreaming {
			t.Fatal("a share of 0 made a request non-streaming")
		}
		q := r
		q.NonStreaming = false
		if !reflect.DeepEqual(q, a.Requests[i]) {
			t.Fatalf("request %d differs beyond the flag: %+v vs %+v", i, r, a.Requests[i])
		}
		if prev, ok := bySession[r.Session]; ok && prev != r.NonStreaming {
			t.Fatalf("session %s mixes streaming and non-streaming turns", r.Session)
		}
		bySession[r.Session] = r.NonStreaming
		if r.NonStreaming {
			non++
		}
	}
	if n := len(b.Requests); non < n/4 || non > 3*n/4 {
		t.Fatalf("%d of %d requests are non-streaming, want about half", non, n)
	}
}

func TestBuildAppliesSharesProfileAndFlashCrowd(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := s.Build(BuildOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	crowd := 0
	for _, r := range wl.Requests {
		per[r.Cluster]++
		if r.Cluster == "a" && r.Arrival.Seconds() >= 2 && r.Arrival.Seconds() < 4 {
			crowd++
		}
	}
	// a: 15 rps for 10 s plus 15 rps extra for 2 s = 180; b: 5 rps = 50.
	if per["a"] < 130 || per["a"] > 230 || per["b"] < 25 || per["b"] > 80 {
		t.Fatalf("per-cluster counts %v, want about a=180 b=50", per)
	}
	if crowd < 40 {
		t.Fatalf("flash crowd window has %d requests, want about 60", crowd)
	}
}

func TestMalformedTraceRows(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.jsonl")
	rows := `{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}
not json
{"timestamp": 10, "input_length": 700, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": 20, "output_length": 10}
`
	if err := os.WriteFile(trace, []byte(rows), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := strings.Replace(good, `"workload": {"kind": "generator", "rate_rps": 20}`, `"workload": {"kind": "mooncake", "trace": "t.jsonl"}`, 1)
	sc = strings.Replace(sc, `, {"at_s": 2, "until_s": 4, "kind": "rate", "factor": 2, "cluster": "a"}`, "", 1)
	path := filepath.Join(dir, "s.json")
	if err := os.WriteFile(path, []byte(sc), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := s.Build(BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if wl.Report.Skipped != 2 || len(wl.Report.FirstBad) != 2 || wl.Report.FirstBad[0] != 2 || wl.Report.FirstBad[1] != 4 || len(wl.Requests) != 2 {
		t.Fatalf("report %+v with %d requests, want 2 skipped at lines 2 and 4", wl.Report, len(wl.Requests))
	}
	if _, err := s.Build(BuildOptions{Strict: true}); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("strict: got %v, want an error naming line 2", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(`{"name":"x"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed scenario fails validation: %v", err)
		}
	})
}

func TestTraceFormatIsSniffed(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "a.csv")
	body := "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,1000,100\r\nbad,row\r\n2023-11-16 18:15:47.6805900,2000,50"
	if err := os.WriteFile(csv, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := strings.Replace(good, `"workload": {"kind": "generator", "rate_rps": 20}`, `"workload": {"kind": "mooncake", "trace": "none.jsonl"}`, 1)
	sc = strings.Replace(sc, `, {"at_s": 2, "until_s": 4, "kind": "rate", "factor": 2, "cluster": "a"}`, "", 1)
	s, err := Parse([]byte(sc))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := s.Build(BuildOptions{Trace: csv})
	if err != nil {
		t.Fatal(err)
	}
	if len(wl.Requests) != 2 || wl.Report.Skipped != 1 || wl.Report.FirstBad[0] != 3 || wl.BlockTokens != 512 {
		t.Fatalf("got %d requests, report %+v", len(wl.Requests), wl.Report)
	}
}

// traceScenario is the test scenario replaying a mooncake-kind trace.
func traceScenario(t *testing.T) *Scenario {
	t.Helper()
	sc := strings.Replace(good, `"workload": {"kind": "generator", "rate_rps": 20}`, `"workload": {"kind": "mooncake", "trace": "none.jsonl"}`, 1)
	sc = strings.Replace(sc, `, {"at_s": 2, "until_s": 4, "kind": "rate", "factor": 2, "cluster": "a"}`, "", 1)
	s, err := Parse([]byte(sc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBuildReadsAQwenBailianTrace(t *testing.T) {
	// Seconds with fractions, 16-token blocks and chat_id chains (the
	// Qwen-Bailian traces' format): arrivals kept as they are (no tick),
	// blocks of 16 tokens, a conversation's turns one session.
	trace := filepath.Join(t.TempDir(), "qwen.jsonl")
	rows := `{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.25, "input_length": 40, "output_length": 10, "hash_ids": [1, 2, 3]}
{"chat_id": 2, "parent_chat_id": -1, "timestamp": 0.25, "input_length": 20, "output_length": 10, "hash_ids": [1, 4]}
{"chat_id": 3, "parent_chat_id": 1, "timestamp": 1.5, "input_length": 70, "output_length": 10, "hash_ids": [1, 2, 3, 5, 6]}
`
	if err := os.WriteFile(trace, []byte(rows), 0o600); err != nil {
		t.Fatal(err)
	}
	wl, err := traceScenario(t).Build(BuildOptions{Trace: trace})
	if err != nil {
		t.Fatal(err)
	}
	if wl.BlockTokens != 16 || len(wl.Requests) != 3 {
		t.Fatalf("block tokens %d, %d requests", wl.BlockTokens, len(wl.Requests))
	}
	r := wl.Requests
	if r[0].Arrival != 250*time.Millisecond || r[1].Arrival != 250*time.Millisecond || r[2].Arrival != 1500*time.Millisecond {
		t.Fatalf("arrivals %v %v %v, want 250ms 250ms 1.5s", r[0].Arrival, r[1].Arrival, r[2].Arrival)
	}
	if r[0].Session != r[2].Session || r[0].Session == r[1].Session || r[0].Cluster != r[2].Cluster {
		t.Fatalf("sessions %q %q %q, clusters %q %q", r[0].Session, r[1].Session, r[2].Session, r[0].Cluster, r[2].Cluster)
	}
}

func TestBuildRefusesATraceWithoutRows(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"empty.jsonl": "", "bad.jsonl": `{"timestamp": "x"}` + "\n" + `{"input_length": 5}` + "\n"} {
		trace := filepath.Join(dir, name)
		if err := os.WriteFile(trace, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := traceScenario(t).Build(BuildOptions{Trace: trace}); !errors.Is(err, workload.ErrNoRows) {
			t.Errorf("%s: got %v, want ErrNoRows", name, err)
		}
	}
}
