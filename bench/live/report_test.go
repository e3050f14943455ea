package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSummariseCountsFailuresAsInfinite: with 2 of 10 requests failed, the
// p90 of all TTFTs is the slowest served one and the p99 is +Inf (null in
// JSON), while the served quantiles ignore the failures; shares and the
// hit rate come from the engines' counter deltas.
func TestSummariseCountsFailuresAsInfinite(t *testing.T) {
	var results []result
	for i := 1; i <= 8; i++ {
		results = append(results, result{Served: true, TTFT: time.Duration(i) * 100 * time.Millisecond, E2E: time.Duration(i) * time.Second})
	}
	results = append(results, result{Failure: "status 503"}, result{Failure: errNoFirstToken.Error()})
	c := summarise("nginx-rr", 0.9, results, []engineDelta{
		{id: "e0", counters: counters{prefixHits: 30, prefixQueries: 100, succeeded: 6}},
		{id: "e1", counters: counters{prefixHits: 10, prefixQueries: 100, succeeded: 2}},
	}, slo{ttft: time.Hour, tbot: time.Hour})
	if c.Served != 8 || c.Failed != 2 || c.Failures["status 503"] != 1 {
		t.Errorf("served %d failed %d failures %v", c.Served, c.Failed, c.Failures)
	}
	if c.TTFTAllP50 != 0.5 || c.TTFTAllP90 != seconds(math.Inf(1)) || c.TTFTAllP99 != seconds(math.Inf(1)) {
		t.Errorf("ttft all %v %v %v, want 0.5 +Inf +Inf", c.TTFTAllP50, c.TTFTAllP90, c.TTFTAllP99)
	}
	if c.TTFTServedP50 != 0.4 || c.TTFTServedP99 != 0.8 || c.E2EP90 != 8 {
		t.Errorf("served ttft p50 %v p99 %v, e2e p90 %v", c.TTFTServedP50, c.TTFTServedP99, c.E2EP90)
	}
	if c.EngineShare["e0"] != 0.75 || c.EngineShare["e1"] != 0.25 || c.PrefixCacheHitRate != 0.2 {
		t.Errorf("shares %v hit rate %v", c.EngineShare, c.PrefixCacheHitRate)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ttft_all_p99":null`) {
		t.Errorf("+Inf not null in %s", b)
	}
	var back cell
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(float64(back.TTFTAllP99), 1) || back.TTFTAllP50 != 0.5 {
		t.Errorf("round trip: %v %v", back.TTFTAllP50, back.TTFTAllP99)
	}
}

// TestGoodputCountsServedRequestsWithinTheSLO: a request counts as
// goodput when it was served, its first token came within the SLO's TTFT
// and its tokens came, on average, within the SLO's TBOT.
func TestGoodputCountsServedRequestsWithinTheSLO(t *testing.T) {
	s := slo{ttft: 5 * time.Second, tbot: 100 * time.Millisecond}
	results := []result{
		{Served: true, TTFT: 5 * time.Second, E2E: 5*time.Second + 900*time.Millisecond, Chunks: 10}, // at both bounds: good
		{Served: true, TTFT: 5*time.Second + 1, E2E: 6 * time.Second, Chunks: 10},                    // first token late
		{Served: true, TTFT: time.Second, E2E: time.Second + 901*time.Millisecond, Chunks: 10},       // tokens too slow
		{Served: true, TTFT: time.Second, E2E: 3 * time.Second, Chunks: 1},                           // one token: no TBOT
		{Failure: "status 429"}, // not served
	}
	c := summarise("switchyard", 1.1, results, nil, s)
	if c.Goodput != 2 || c.Served != 4 {
		t.Errorf("goodput %d of %d served, want 2 of 4", c.Goodput, c.Served)
	}
	if c.SLOTTFT != 5 || c.SLOTBOT != 0.1 {
		t.Errorf("slo in the cell: %v %v", c.SLOTTFT, c.SLOTBOT)
	}
}

// TestBuildReportPicksTheBestProxy: the best proxy is the lowest latency
// but the highest hit rate, possibly a different proxy per metric; a load
// without Switchyard has no ratios.
func TestBuildReportPicksTheBestProxy(t *testing.T) {
	cells := []cell{
		{Router: "switchyard", Load: 0.9, TTFTAllP50: 1, PrefixCacheHitRate: 0.3},
		{Router: "nginx-rr", Load: 0.9, TTFTAllP50: 4, PrefixCacheHitRate: 0.1},
		{Router: "nginx-hash", Load: 0.9, TTFTAllP50: 2, PrefixCacheHitRate: 0.4},
		{Router: "haproxy-lc", Load: 0.9, TTFTAllP50: 0.5, PrefixCacheHitRate: 0.2},
		{Router: "nginx-rr", Load: 0.7},
	}
	rep := buildReport(cells)
	got := map[string]ratio{}
	for _, r := range rep.Ratios {
		if r.Load != 0.9 {
			t.Errorf("ratio at load %v without switchyard", r.Load)
		}
		got[r.Metric] = r
	}
	if r := got["ttft_all_p50"]; r.BestProxy != "haproxy-lc" || r.Ratio != 2 {
		t.Errorf("ttft_all_p50: %+v, want haproxy-lc ratio 2", r)
	}
	if r := got["prefix_cache_hit_rate"]; r.BestProxy != "nginx-hash" || r.Ratio != 0.75 {
		t.Errorf("hit rate: %+v, want nginx-hash ratio 0.75", r)
	}
	if rep.Cells[0].Load != 0.7 {
		t.Errorf("cells not sorted by load: %v", rep.Cells[0])
	}
}

func TestRequestLinesKeepEveryRequestInArrivalOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	sched := []request{
		{Arrival: 0, Session: "a", PromptTokens: 100, OutputTokens: 8},
		{Arrival: 1500 * time.Millisecond, Session: "b", PromptTokens: 8192, OutputTokens: 128},
	}
	results := []result{
		{Served: true, TTFT: 250 * time.Millisecond, E2E: time.Second, Chunks: 8, Engine: "h100-0"},
		{Failure: "status 429"},
	}
	if err := writeRequestLines(path, sched, results); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"arrival_s":0,"session":"a","prompt_tokens":100,"output_tokens":8,"served":true,"ttft_s":0.25,"e2e_s":1,"chunks":8,"engine":"h100-0"}
{"arrival_s":1.5,"session":"b","prompt_tokens":8192,"output_tokens":128,"served":false,"failure":"status 429"}
`
	if string(b) != want {
		t.Fatalf("requests file:\n%s\nwant:\n%s", b, want)
	}
}
