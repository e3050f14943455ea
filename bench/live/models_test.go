package main

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestMixSharesFollowZipf: the adapters' shares fall as 1/k, every share
// is normalised, and over 20,000 sessions each model's fraction is within
// 0.01 of its share (binomial sd at most 0.0035); a session always gets
// the same model.
func TestMixSharesFollowZipf(t *testing.T) {
	m, err := parseMix("llama=0.27,qwen=0.2,mistral=0.13", "a1,a2,a3,a4", 0.4, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := 1 + 1./2 + 1./3 + 1./4
	want := map[string]float64{"llama": 0.27, "qwen": 0.2, "mistral": 0.13, "a1": 0.4 / h, "a2": 0.4 / h / 2, "a3": 0.4 / h / 3, "a4": 0.4 / h / 4}
	for i, id := range m.ids {
		if math.Abs(m.shares[i]-want[id]) > 1e-9 {
			t.Errorf("%s: share %.4f, want %.4f", id, m.shares[i], want[id])
		}
	}
	if !m.adapters["a3"] || m.adapters["llama"] {
		t.Errorf("adapters %v, want a1..a4 only", m.adapters)
	}
	const n = 20000
	got := map[string]int{}
	for i := range n {
		s := fmt.Sprintf("session-%d", i)
		first := m.of(s)
		got[first]++
		if again := m.of(s); again != first {
			t.Fatalf("session %s: model %s, then %s", s, first, again)
		}
	}
	for id, w := range want {
		if f := float64(got[id]) / n; math.Abs(f-w) > 0.01 {
			t.Errorf("%s: %.4f of the sessions, want %.4f ± 0.01", id, f, w)
		}
	}
}

func TestMixRejectsBadSpecs(t *testing.T) {
	for _, tc := range []struct{ models, adapters string }{
		{"llama", ""},           // no share
		{"llama=x", ""},         // not a number
		{"llama=-1", ""},        // negative
		{"llama=NaN", ""},       // not finite
		{"llama=1,llama=2", ""}, // twice
		{"llama=0", ""},         // nothing positive
		{"a=1", "a"},            // an adapter named as a model
		{"", ""},                // nothing
		{"llama=+Inf", "b"},     // infinite
		{"=1", ""},              // no id
	} {
		if _, err := parseMix(tc.models, tc.adapters, 0.4, 1); err == nil {
			t.Errorf("parseMix(%q, %q) accepted", tc.models, tc.adapters)
		}
	}
}

// TestModelHeaderFromSession: the transport sets X-Model to the model of
// the session header's conversation, the one the body names.
func TestModelHeaderFromSession(t *testing.T) {
	m, err := parseMix("x=0.5,y=0.5", "", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Get(modelHeader) }))
	defer srv.Close()
	hc := &http.Client{Transport: modelHeaderTransport{next: http.DefaultTransport, mix: m}}
	for _, s := range []string{"s1", "s2", "s3", "s4"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set(sessionHeader, s)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h := <-got; h != m.of(s) {
			t.Errorf("session %s: X-Model %q, want %q", s, h, m.of(s))
		}
	}
}

// TestStopLineTotals: the adapter totals come from the last stop line; a
// log without one is an error, not zero hits.
func TestStopLineTotals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.log", `time=x level=INFO msg="enginesim listening" engine=e addr=127.0.0.1:1
time=x level=INFO msg="enginesim stopped" engine=e requests_finished=9 requests_canceled=0 prompt_tokens=1 prefix_hit_tokens=0 lora_requests=7 lora_loads=2
`)
	if r, l, err := stopLine(ok); err != nil || r != 7 || l != 2 {
		t.Errorf("stopLine = %d, %d, %v; want 7, 2", r, l, err)
	}
	killed := write("killed.log", "time=x level=INFO msg=\"enginesim listening\" engine=e\n")
	if _, _, err := stopLine(killed); !errors.Is(err, errNoStopLine) {
		t.Errorf("log without a stop line: %v, want errNoStopLine", err)
	}
	bad := write("bad.log", "time=x level=INFO msg=\"enginesim stopped\" lora_requests=1 lora_loads=5\n")
	if _, _, err := stopLine(bad); !errors.Is(err, errNoStopLine) {
		t.Errorf("more loads than requests: %v, want errNoStopLine", err)
	}
}

// TestScrapeLoRACountsRunningAdapters: the series set last is the current
// one; its running adapters are counted, and max_lora read.
func TestScrapeLoRACountsRunningAdapters(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 100
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 200
`)
	}))
	defer srv.Close()
	running, maxLoRA, ok := scrapeLoRA(t.Context(), srv.Client(), srv.URL)
	if !ok || running != 1 || maxLoRA != 2 {
		t.Errorf("scrapeLoRA = %d, %d, %v; want 1 running (the later series), max_lora 2", running, maxLoRA, ok)
	}
}
