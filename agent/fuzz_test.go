package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// FuzzScrape feeds two arbitrary /metrics bodies through the parser and
// the delta logic: the agent must never fail on them in a way that
// panics, and every signal it builds must pass the processor's validator.
func FuzzScrape(f *testing.F) {
	a := render(fakeState{running: 3, kv: 0.5, hits: 10, queries: 100, success: 5, ttft: [3]float64{1, 4, 5}, ttftSum: 2}, current)
	b := render(fakeState{running: 1, kv: 0.2, hits: 2, queries: 10, success: 1, ttft: [3]float64{0, 1, 1}, ttftSum: 0.1}, old)
	f.Add(a, b)
	f.Add(b, a)
	fixtures, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range fixtures {
		body, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add("", string(body))
		f.Add(string(body), a)
	}
	f.Add("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running -4\n", "vllm:num_requests_running NaN\n")
	f.Add("# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"-1\"} 3\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\nvllm:time_to_first_token_seconds_sum 1e308\nvllm:time_to_first_token_seconds_count 2\n", "")
	f.Fuzz(func(t *testing.T, first, second string) {
		var st Scraper
		now := time.UnixMilli(1_700_000_000_000)
		for i, body := range []string{first, second} {
			r, err := parse(strings.NewReader(body))
			if err != nil {
				continue
			}
			sig := &schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "e", EventTimeUnixMs: now.UnixMilli()}
			fill(sig, schemas.Health_HEALTH_HEALTHY, r, &st, now.Add(time.Duration(i)*time.Second))
			if err := estimate.ValidateSignal(sig, time.Time{}); err != nil {
				t.Fatalf("scrape %d built an invalid signal: %v\n%v", i, err, sig)
			}
		}
	})
}
