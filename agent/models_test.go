package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// loraPage is a vLLM /metrics page with two lora_requests_info series:
// the older (smaller value) names adapters no longer in use.
const loraPage = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="base"} 3.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters="sql,law"} 1.7000001e9
`

// modelsEngine serves loraPage, and /v1/models listing the base model and
// three adapters until broken is set (then 404).
func modelsEngine(t *testing.T, broken *atomic.Bool, asked *atomic.Int64, down ...*atomic.Bool) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if len(down) > 0 && down[0].Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, loraPage)
	})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		if broken.Load() {
			http.NotFound(w, nil)
			return
		}
		fmt.Fprint(w, `{"object":"list","data":[{"id":"sql","object":"model","parent":"base"},{"id":"base","object":"model"},`+
			`{"id":"law","parent":"base"},{"id":"chat","parent":"base"},{"id":"base"},{"id":""}]}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestScrapeReadsModelsAndAdapters: the signal lists the engine's
// /v1/models ids (sorted, deduplicated, empty ids dropped), the adapters
// of the lora_requests_info series set last, and max_lora; a failing
// /v1/models keeps the last list, as does a failed scrape's signal, and
// the list is asked at most every modelsEvery.
func TestScrapeReadsModelsAndAdapters(t *testing.T) {
	var broken, down atomic.Bool
	var asked atomic.Int64
	s := NewScraper(Target{ID: "e", URL: modelsEngine(t, &broken, &asked, &down)}, nil)
	t0 := time.Unix(1_700_000_000, 0)
	sig, err := s.Scrape(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"base", "chat", "law", "sql"}; !slices.Equal(sig.GetModels(), want) {
		t.Errorf("models %q, want %q", sig.GetModels(), want)
	}
	if want := []string{"chat", "law", "sql"}; !slices.Equal(sig.GetActiveAdapters(), want) {
		t.Errorf("active adapters %q, want %q (the series set last)", sig.GetActiveAdapters(), want)
	}
	if sig.GetMaxLora() != 4 {
		t.Errorf("max_lora %d, want 4", sig.GetMaxLora())
	}
	if err := estimate.ValidateSignal(sig, time.Time{}); err != nil {
		t.Fatalf("invalid signal: %v", err)
	}
	broken.Store(true)
	for i, at := range []time.Duration{time.Second, 11 * time.Second} {
		sig, err = s.Scrape(context.Background(), t0.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		if len(sig.GetModels()) != 4 {
			t.Errorf("scrape %d: models %q, want the last list kept", i+2, sig.GetModels())
		}
	}
	down.Store(true)
	sig, err = s.Scrape(context.Background(), t0.Add(12*time.Second))
	if err == nil || len(sig.GetModels()) != 4 {
		t.Errorf("failed scrape: err %v, models %q; want an error and the last list", err, sig.GetModels())
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("/v1/models asked %d times in 3 scrapes over 11 s, want 2 (at most every %v)", n, modelsEvery)
	}
}

// TestScrapeConfiguredModelsWin: models= in the engine list are published
// as they are and /v1/models is not asked.
func TestScrapeConfiguredModelsWin(t *testing.T) {
	var broken atomic.Bool
	var asked atomic.Int64
	ts, err := ParseTargets([]string{"e=" + modelsEngine(t, &broken, &asked) + ",models=m2|m1|m2"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	sig, err := NewScraper(ts[0], nil).Scrape(context.Background(), time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"m1", "m2"}; !slices.Equal(sig.GetModels(), want) || asked.Load() != 0 {
		t.Errorf("models %q (asked %d times), want %q and no question", sig.GetModels(), asked.Load(), want)
	}
}

// TestModelsBounded: a hostile /v1/models cannot grow a signal beyond the
// schema's bounds, and the engine list rejects bad ids.
func TestModelsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"data":[`)
	for i := range 1000 {
		fmt.Fprintf(&b, `{"id":"m%d"},{"id":%q},`, i, strings.Repeat("x", 300+i))
	}
	b.WriteString(`{"id":"last"}]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, b.String())
		}
	}))
	defer srv.Close()
	sig, err := NewScraper(Target{ID: "e", URL: srv.URL}, nil).Scrape(context.Background(), time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sig.GetModels()); n != maxModels {
		t.Errorf("%d models, want the first %d", n, maxModels)
	}
	if err := estimate.ValidateSignal(sig, time.Time{}); err != nil {
		t.Errorf("invalid signal: %v", err)
	}
	for _, spec := range []string{"e=http://x,models=", "e=http://x,models=a||b", "e=http://x,models=" + strings.Repeat("y", 257)} {
		if _, err := ParseTargets([]string{spec}, "", ""); err == nil {
			t.Errorf("%.40s: no error", spec)
		}
	}
}
