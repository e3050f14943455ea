package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

// dashboard is the part of a Grafana dashboard JSON the checks read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name    string `json:"name"`
			Type    string `json:"type"`
			Query   any    `json:"query"`
			Current struct {
				Value any `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func (p panel) walk(f func(panel)) {
	f(p)
	for _, c := range p.Panels {
		c.walk(f)
	}
}

func readDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("../../deploy/grafana/dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in deploy/grafana/dashboards (%v)", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

var (
	grafanaVar   = regexp.MustCompile(`\$\{?(\w+)\}?`)
	labelValues  = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	builtinRange = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
)

// expand replaces the dashboard's variables in expr by values PromQL
// accepts: builtin ranges by durations, a custom variable by its current
// value, any other (a regex in a matcher) by a literal.
func expand(d dashboard, expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		name := grafanaVar.FindStringSubmatch(m)[1]
		if v, ok := builtinRange[name]; ok {
			return v
		}
		for _, v := range d.Templating.List {
			if v.Name == name && v.Type == "custom" {
				if s, ok := v.Current.Value.(string); ok {
					return s
				}
			}
		}
		return "x"
	})
}

// implicit are labels every scraped series has or a histogram's buckets
// carry.
var implicit = []string{"instance", "job", "le"}

// labelsOf are the labels s's series may carry when scraped: its own,
// the implicit ones, and for an engine's series the engine label that
// `switchyard demo` adds (its engines share one /metrics, one instance).
func labelsOf(s series) []string {
	ls := append(append([]string(nil), s.Labels...), implicit...)
	if s.Component == "enginesim" {
		ls = append(ls, "engine")
	}
	return ls
}

// baseName maps a scraped series name to its registered family: a
// histogram's _bucket, _sum and _count to the histogram.
func baseName(reg map[string]series, name string) (string, series, bool) {
	if s, ok := reg[name]; ok {
		return name, s, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suf); ok {
			if s, ok := reg[b]; ok && (s.Type == "histogram" || (s.Type == "summary" && suf != "_bucket")) {
				return b, s, true
			}
		}
	}
	return "", series{}, false
}

// checkExpr parses expr and checks that every metric it selects is one
// the binary registers, that every label it matches or groups by is one
// those series carry; it returns the metric names and the problems.
func checkExpr(where, expr string, reg map[string]series) (names, problems []string) {
	p := parser.NewParser(parser.Options{})
	e, err := p.ParseExpr(expr)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %q does not parse: %v", where, expr, err)}
	}
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	// selected are the labels and components of the series n selects.
	selected := func(n parser.Node) (ls, components []string) {
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				if _, s, ok := baseName(reg, vs.Name); ok {
					ls = append(ls, labelsOf(s)...)
					components = append(components, s.Component)
				}
			}
			return nil
		})
		return append(ls, implicit...), components
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name == "" {
				errorf("%s: %q selects no metric by name", where, expr)
				return nil
			}
			names = append(names, n.Name)
			_, s, ok := baseName(reg, n.Name)
			if !ok {
				errorf("%s: %q uses %s, which the binary does not register", where, expr, n.Name)
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !slices.Contains(labelsOf(s), m.Name) {
					errorf("%s: %q matches label %s, which %s does not have (%v)", where, expr, m.Name, n.Name, s.Labels)
				}
			}
		case *parser.AggregateExpr:
			have, components := selected(n.Expr)
			for _, g := range n.Grouping {
				if !slices.Contains(have, g) {
					errorf("%s: %q groups by %s, which its series do not have (%v)", where, expr, g, have)
				}
			}
			if slices.Contains(components, "enginesim") && !n.Without &&
				slices.Contains(n.Grouping, "instance") && !slices.Contains(n.Grouping, "engine") {
				errorf("%s: %q groups engines' series by instance but not engine: the demo's engines share one instance, so they fold into one", where, expr)
			}
		}
		return nil
	})
	return names, problems
}

// checkQuery is checkExpr failing t on every problem.
func checkQuery(t *testing.T, where, expr string, reg map[string]series) []string {
	t.Helper()
	names, problems := checkExpr(where, expr, reg)
	for _, p := range problems {
		t.Error(p)
	}
	return names
}

// TestDashboardQueries parses every PromQL expression of every dashboard
// in deploy/grafana/dashboards (panels, rows and template variables) and
// checks each against the metric families the binary registers (names,
// matched labels, grouping labels).
func TestDashboardQueries(t *testing.T) {
	reg := registeredSeries(t)
	for file, d := range readDashboards(t) {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: no uid or title", file)
		}
		exprs := 0
		used := map[string]bool{}
		for _, top := range d.Panels {
			top.walk(func(p panel) {
				if p.Type == "row" {
					return
				}
				if p.Datasource == nil || p.Datasource.UID != "prometheus" {
					t.Errorf("%s: panel %q does not use the provisioned Prometheus datasource (uid prometheus)", file, p.Title)
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", file, p.Title)
				}
				for _, tg := range p.Targets {
					exprs++
					for _, n := range checkQuery(t, file+": panel "+p.Title, expand(d, tg.Expr), reg) {
						used[n] = true
					}
				}
			})
		}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			q, _ := v.Query.(string)
			if m, ok := v.Query.(map[string]any); ok {
				q, _ = m["query"].(string)
			}
			m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
			if m == nil {
				t.Errorf("%s: variable %s: query %q is not label_values(SELECTOR, LABEL)", file, v.Name, q)
				continue
			}
			checkQuery(t, file+": variable "+v.Name, m[1], reg)
			if _, s, ok := baseName(reg, strings.TrimSpace(m[1])); ok && !slices.Contains(s.Labels, m[2]) {
				t.Errorf("%s: variable %s: %s has no label %s", file, v.Name, m[1], m[2])
			}
		}
		if exprs < 20 {
			t.Errorf("%s: %d queries; the dashboard should cover the fleet, weights, latency, shedding and the pipeline", file, exprs)
		}
		t.Logf("%s: %d queries over %d metrics, all registered", file, exprs, len(used))
	}
}

// TestDashboardQueriesRejectUnknownMetrics: the check above fails a query
// on a metric nothing registers, a label the series lack, and bad PromQL.
func TestDashboardQueriesRejectUnknownMetrics(t *testing.T) {
	reg := registeredSeries(t)
	for _, bad := range []string{
		`rate(switchyard_gateway_ttft_ms_bucket[5m])`,
		`sum by (region) (rate(switchyard_gateway_requests_total[5m]))`,
		`switchyard_gateway_requests_total{engine="e1"}`,
		`sum(rate(switchyard_gateway_requests_total[5m])`,
		`sum by (instance) (vllm:num_requests_running)`,
	} {
		if _, problems := checkExpr("bad", bad, reg); len(problems) == 0 {
			t.Errorf("%q passed the check", bad)
		}
	}
}

// TestComposeGrafana: docker-compose.yml runs Grafana with the
// provisioning and dashboards of deploy/grafana mounted where Grafana
// reads them, its datasource is the compose file's Prometheus under the
// uid the dashboards use, and the dashboard provider reads the mounted
// directory.
func TestComposeGrafana(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	g, ok := cf.Services["grafana"]
	if !ok {
		t.Fatal("docker-compose.yml has no grafana service")
	}
	if !strings.HasPrefix(g.Image, "grafana/grafana-oss:") {
		t.Errorf("grafana image %q, want grafana/grafana-oss:VERSION", g.Image)
	}
	mounts := map[string]string{} // container path -> host path
	for _, v := range g.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("volume %q", v)
		}
		mounts[parts[1]] = parts[0]
		if _, err := os.Stat(filepath.Join("../..", parts[0])); err != nil {
			t.Errorf("grafana mounts %s, which does not exist: %v", parts[0], err)
		}
	}
	if mounts["/etc/grafana/provisioning"] != "./deploy/grafana/provisioning" {
		t.Errorf("grafana mounts %v, want ./deploy/grafana/provisioning at /etc/grafana/provisioning", mounts)
	}
	deps, _ := g.DependsOn.(map[string]any)
	if _, ok := deps["prometheus"]; !ok {
		t.Errorf("grafana depends_on %v, want prometheus", g.DependsOn)
	}

	var ds struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, "../../deploy/grafana/provisioning/datasources/prometheus.yml", &ds)
	prom := cf.Services["prometheus"]
	found := false
	for _, d := range ds.Datasources {
		if d.UID != "prometheus" || d.Type != "prometheus" {
			continue
		}
		found = true
		if d.URL != "http://prometheus:9090" || !containerPorts(prom)["9090"] {
			t.Errorf("datasource URL %q: want http://prometheus:9090, the compose Prometheus (ports %v)", d.URL, prom.Ports)
		}
	}
	if !found {
		t.Error("no provisioned datasource of type prometheus with uid prometheus (the dashboards' uid)")
	}

	var dp struct {
		Providers []struct {
			Type    string
			Options struct {
				Path string
			}
		} `yaml:"providers"`
	}
	readYAML(t, "../../deploy/grafana/provisioning/dashboards/switchyard.yml", &dp)
	if len(dp.Providers) == 0 {
		t.Fatal("no dashboard provider")
	}
	for _, p := range dp.Providers {
		host, ok := mounts[p.Options.Path]
		if p.Type != "file" || !ok {
			t.Errorf("dashboard provider reads %s (%s), which is not mounted (%v)", p.Options.Path, p.Type, mounts)
			continue
		}
		files, _ := filepath.Glob(filepath.Join("../..", host, "*.json"))
		if len(files) == 0 {
			t.Errorf("the provider's directory %s holds no dashboard", host)
		}
	}
	if home := cf.Services["grafana"].Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		dir, file := filepath.Split(home)
		if h, ok := mounts[strings.TrimSuffix(dir, "/")]; !ok {
			t.Errorf("home dashboard %s is not in a mounted directory", home)
		} else if _, err := os.Stat(filepath.Join("../..", h, file)); err != nil {
			t.Errorf("home dashboard: %v", err)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
