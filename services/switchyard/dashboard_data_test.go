package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/services/demo"
)

// notInDemo are the series of docs/metrics.md that `switchyard demo`
// does not serve, and why (docs/metrics.md says the same). Every other
// documented series must reach Prometheus from the demo.
var notInDemo = map[string]string{
	"switchyard_gateway_tenant_rejected_total":            "labelled by tenant; the demo configures no tenants",
	"switchyard_processor_partitioned_records_read_total": "--mode partitioned; the demo runs one processor",
	"switchyard_processor_partials_published_total":       "--mode partitioned; the demo runs one processor",
	"switchyard_processor_owned_partitions":               "--mode partitioned; the demo runs one processor",
	"switchyard_combiner_partials_read_total":             "switchyard combiner; the demo runs none",
	"switchyard_combiner_estimates_published_total":       "switchyard combiner; the demo runs none",
	"switchyard_combiner_windows_fired_total":             "switchyard combiner; the demo runs none",
	"switchyard_combiner_window_end_seconds":              "switchyard combiner; the demo runs none",
	"switchyard_kvevents_batches_total":                   "switchyard kvevents; the demo runs none",
	"switchyard_kvevents_events_total":                    "switchyard kvevents; the demo runs none",
	"switchyard_kvevents_gaps_total":                      "switchyard kvevents; the demo runs none",
	"switchyard_kvevents_replayed_batches_total":          "switchyard kvevents; the demo runs none",
	"switchyard_kvevents_resyncs_total":                   "switchyard kvevents; the demo runs none",
	"switchyard_kvevents_decode_errors_total":             "switchyard kvevents; the demo runs none",
	"switchyard_kvevents_publish_errors_total":            "switchyard kvevents; the demo runs none",
	"switchyard_kvevents_connected":                       "switchyard kvevents; the demo runs none",
	"switchyard_enginesim_lora_requests_total":            "enginesim --lora-modules; the demo's engines serve no adapters",
	"switchyard_enginesim_lora_loads_total":               "enginesim --lora-modules; the demo's engines serve no adapters",
	"vllm:lora_requests_info":                             "enginesim --lora-modules; the demo's engines serve no adapters",
	"switchyard_gateway_adapter_picks_total":              "LoRA adapter requests; the demo's engines serve no adapters",
}

// dashboardRateInterval stands for Grafana's $__rate_interval: several
// scrapes at the test's 1-s scrape interval.
const dashboardRateInterval = "1m"

// panelQuery is one target of one panel, with the dashboard's variables
// replaced.
type panelQuery struct {
	where string // file, panel title and the variable values
	expr  string
	// engines: the query reads the engines' own series (vllm:,
	// switchyard_enginesim_), so it must show each engine apart.
	engines bool
}

// liveQueries expands every panel target of every dashboard: a regex
// variable (cluster) by .*, $__rate_interval by dashboardRateInterval,
// and a custom variable (ttft_slo) by each of its options, so an option
// that empties a panel is found.
func liveQueries(t *testing.T) []panelQuery {
	t.Helper()
	var out []panelQuery
	for file, d := range readDashboards(t) {
		options := map[string][]string{}
		for _, v := range d.Templating.List {
			switch v.Type {
			case "custom":
				q, _ := v.Query.(string)
				for _, o := range strings.Split(q, ",") {
					options[v.Name] = append(options[v.Name], strings.TrimSpace(o))
				}
			default:
				options[v.Name] = []string{".*"}
			}
		}
		for _, top := range d.Panels {
			top.walk(func(p panel) {
				if p.Type == "row" {
					return
				}
				for i, tg := range p.Targets {
					for _, e := range expandAll(tg.Expr, options) {
						out = append(out, panelQuery{
							where:   fmt.Sprintf("%s: panel %q, query %d%s", file, p.Title, i+1, e.vars),
							expr:    e.expr,
							engines: strings.Contains(tg.Expr, "vllm:") || strings.Contains(tg.Expr, "switchyard_enginesim_"),
						})
					}
				}
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

type expansion struct{ expr, vars string }

// expandAll is expr with its variables replaced, once per combination of
// the options of the variables it uses.
func expandAll(expr string, options map[string][]string) []expansion {
	m := grafanaVar.FindStringSubmatchIndex(expr)
	if m == nil {
		return []expansion{{expr: expr}}
	}
	name := expr[m[2]:m[3]]
	values := options[name]
	if v, ok := map[string]string{"__rate_interval": dashboardRateInterval, "__interval": "1m", "__range": "1h"}[name]; ok {
		values = []string{v}
	}
	if len(values) == 0 {
		values = []string{".*"}
	}
	var out []expansion
	for _, v := range values {
		for _, rest := range expandAll(expr[m[1]:], options) {
			vars := rest.vars
			if len(options[name]) > 1 {
				vars = fmt.Sprintf(" (%s=%s)", name, v) + vars
			}
			out = append(out, expansion{expr: expr[:m[0]] + v + rest.expr, vars: vars})
		}
	}
	return out
}

// TestDashboardPanelsHaveDataOnDemo runs the demo in-process, a real
// Prometheus (the prometheus binary; CI installs the Debian package)
// scraping its /metrics every second, and queries every panel target of
// every dashboard under deploy/grafana through Prometheus's HTTP API
// until each returns data: a sample that is not NaN, and for a panel over
// the engines' own series one series per engine of the demo (grouping by
// instance folds the demo's engines, which share one /metrics). It also
// checks that every series of docs/metrics.md reaches Prometheus, but for
// those notInDemo lists. It fails naming each empty panel and missing
// series when the demo's load ends first.
func TestDashboardPanelsHaveDataOnDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("demo and Prometheus skipped in -short mode")
	}
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus not installed: CI must install it (.ci/run: apt-get install prometheus)")
		}
		t.Skip("prometheus not installed (apt-get install prometheus): skipping the dashboards' live check")
	}
	queries := liveQueries(t)
	documented := documentedSeries(t)
	for name := range notInDemo {
		if _, ok := documented[name]; !ok {
			t.Errorf("notInDemo lists %s, which docs/metrics.md does not", name)
		}
	}
	engines := len(demo.DefaultTopology().Engines)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	metricsAddr, demoDone := startDemo(t, ctx, time.Minute) // ~10 s when every panel has data
	prom := startPrometheus(t, ctx, bin, metricsAddr)

	var empty, missing []string
	start := time.Now()
	demoEnded := false
	for {
		names, err := prom.names(ctx)
		if err != nil {
			t.Fatalf("prometheus: %v", err)
		}
		missing = missingSeries(documented, names)
		empty = empty[:0]
		for _, q := range queries {
			if problem := prom.check(ctx, q, engines); problem != "" {
				empty = append(empty, q.where+": "+problem)
			}
		}
		if len(empty) == 0 && len(missing) == 0 {
			break
		}
		select {
		case <-time.After(2 * time.Second): // a second scrape at least
			continue
		case err := <-demoDone:
			demoEnded = true
			t.Errorf("the demo's load ended (%v) after %s with %d of %d panel queries empty and %d documented series missing",
				err, time.Since(start).Round(time.Second), len(empty), len(queries), len(missing))
		case <-ctx.Done():
			t.Errorf("timed out after %s", time.Since(start).Round(time.Second))
		}
		break
	}
	for _, e := range empty {
		t.Errorf("no data: %s", e)
	}
	for _, m := range missing {
		t.Errorf("documented in docs/metrics.md but not served by the demo: %s", m)
	}
	if len(empty) == 0 && len(missing) == 0 {
		t.Logf("all %d panel queries returned data and all %d documented series (%d not in the demo) were scraped, %s after the demo started",
			len(queries), len(documented)-len(notInDemo), len(notInDemo), time.Since(start).Round(time.Second))
	}
	cancel()
	if !demoEnded {
		<-demoDone
	}
}

// missingSeries lists the documented series (but notInDemo) that names,
// the metric names Prometheus holds, lacks; a histogram is there when
// its _count is.
func missingSeries(documented map[string]series, names []string) []string {
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	var out []string
	for name, s := range documented {
		if _, skip := notInDemo[name]; skip {
			if have[name] || have[name+"_count"] {
				out = append(out, name+" (listed in notInDemo, yet served: take it off the list)")
			}
			continue
		}
		if !have[name] && !(s.Type == "histogram" && have[name+"_count"]) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// startDemo runs the demo on free ports with its load running for
// load, and returns its metrics address and a channel that receives
// Run's error when it ends.
func startDemo(t *testing.T, ctx context.Context, load time.Duration) (string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() { // read to the end: the demo writes its status here
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "metrics:" {
				addr <- strings.TrimSuffix(strings.TrimPrefix(f[1], "http://"), "/metrics")
			}
		}
	}()
	logs := &testenv.Buffer{}
	done := make(chan error, 1)
	go func() {
		_, err := demo.Run(ctx, demo.Config{
			Duration: load, KafkaListen: "127.0.0.1:0", NATSListen: "127.0.0.1:0", GatewayListen: "127.0.0.1:0",
			MetricsListen: "127.0.0.1:0", Rate: 12, Seed: 1, StatusInterval: time.Minute,
			MaxPromptTokens: 2048, MaxOutputTokens: 64,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})), Stdout: pw,
		})
		pw.Close()
		done <- err
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("demo logs:\n%s", logs.String())
		}
	})
	select {
	case a := <-addr:
		return a, done
	case err := <-done:
		t.Fatalf("the demo ended before serving its metrics: %v\n%s", err, logs.String())
	}
	return "", nil
}

// promServer is a running Prometheus.
type promServer struct {
	url    string
	client *http.Client
}

// startPrometheus runs bin scraping the demo's metrics address every
// second on a free port, until the test ends.
func startPrometheus(t *testing.T, ctx context.Context, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: demo\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &promServer{client: &http.Client{Timeout: 10 * time.Second}}
	var lastErr error
	for range 3 { // the free port can be taken between choosing and binding it
		listen := freePort(t) // multiprocess_test.go
		logs := &testenv.Buffer{}
		cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+listen, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		p.url = "http://" + listen
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				lastErr = fmt.Errorf("prometheus exited: %s", logs.String())
			default:
				resp, err := p.client.Get(p.url + "/-/ready")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						t.Cleanup(func() {
							_ = cmd.Process.Signal(os.Interrupt)
							select {
							case <-exited:
							case <-time.After(10 * time.Second):
								_ = cmd.Process.Kill()
								<-exited
							}
						})
						return p
					}
				}
				time.Sleep(100 * time.Millisecond) // poll interval
				continue
			}
			break
		}
		if lastErr == nil {
			lastErr = fmt.Errorf("prometheus not ready at %s within 30s: %s", listen, logs.String())
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Fatal(lastErr)
	return nil
}

// promResponse is the envelope of Prometheus's HTTP API.
type promResponse struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func (p *promServer) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r promResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("GET %s: status %d, %w", path, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("GET %s %v: %s", path, q, r.Error)
	}
	return r.Data, nil
}

// names are the metric names Prometheus holds.
func (p *promServer) names(ctx context.Context) ([]string, error) {
	b, err := p.get(ctx, "/api/v1/label/__name__/values", nil)
	if err != nil {
		return nil, err
	}
	var out []string
	return out, json.Unmarshal(b, &out)
}

// check runs q now and says what is wrong with its result ("" when it
// has data): no series, only NaN, or fewer engines than the demo runs.
func (p *promServer) check(ctx context.Context, q panelQuery, engines int) string {
	b, err := p.get(ctx, "/api/v1/query", url.Values{"query": {q.expr}})
	if err != nil {
		return err.Error()
	}
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		return err.Error()
	}
	type sample struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	var samples []sample
	switch data.ResultType {
	case "vector":
		if err := json.Unmarshal(data.Result, &samples); err != nil {
			return err.Error()
		}
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return err.Error()
		}
		samples = []sample{{Value: v}}
	default:
		return fmt.Sprintf("result type %s, want a vector or scalar (%s)", data.ResultType, q.expr)
	}
	var values int
	var seen []string
	for _, s := range samples {
		str, _ := s.Value[1].(string)
		if v, err := strconv.ParseFloat(str, 64); err == nil && !math.IsNaN(v) {
			values++
		}
		if e := s.Metric["engine"]; e != "" && !slices.Contains(seen, e) {
			seen = append(seen, e)
		}
	}
	switch {
	case len(samples) == 0:
		return "no series: " + q.expr
	case values == 0:
		return fmt.Sprintf("%d series, all NaN: %s", len(samples), q.expr)
	case q.engines && len(seen) < engines:
		return fmt.Sprintf("%d series over %d of the demo's %d engines (group by engine, not only instance): %s", len(samples), len(seen), engines, q.expr)
	}
	return ""
}
