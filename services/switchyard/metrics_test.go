package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/gateway/peers"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/brokerstate"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/services/combiner"
	"github.com/switchyard-llm/switchyard/simulator/engineserver"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/control"
	kvrelay "github.com/switchyard-llm/switchyard/streams/kvevents"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// series is one metric family as the binary registers it.
type series struct {
	Component string
	Type      string   // counter, gauge, histogram, summary
	Labels    []string // sorted, const and variable
}

// recorder is a Registerer that keeps every collector registered with it
// (and registers it on a real registry, so clashes still fail).
type recorder struct {
	reg  *prometheus.Registry
	cols []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.cols = append(r.cols, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err) // only by callers that ask for it, as prometheus.Registry does
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descConst  = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	descVar    = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	constLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)=`)
)

// parseDesc reads a descriptor's name and label names from its String
// (the only place client_golang shows them).
func parseDesc(d *prometheus.Desc) (string, []string) {
	s := d.String()
	m := descName.FindStringSubmatch(s)
	if m == nil {
		return "", nil
	}
	var labels []string
	if c := descConst.FindStringSubmatch(s); c != nil {
		for _, l := range constLabel.FindAllStringSubmatch(c[1], -1) {
			labels = append(labels, l[1])
		}
	}
	if v := descVar.FindStringSubmatch(s); v != nil && v[1] != "" {
		for _, l := range strings.Split(v[1], ",") {
			l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")")
			labels = append(labels, l)
		}
	}
	sort.Strings(labels)
	return m[1], labels
}

// kindOf tells a collector's metric type from its Go type, "" when that
// does not say (a histogram or summary, which have the same method set, or
// a custom or wrapped collector: their series tell).
func kindOf(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	case prometheus.Gauge: // before Counter: a Gauge has Inc and Add too
		return "gauge"
	case prometheus.Counter:
		return "counter"
	}
	return ""
}

func kindOfMetric(m prometheus.Metric) string {
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		return ""
	}
	switch {
	case pb.Counter != nil:
		return "counter"
	case pb.Gauge != nil:
		return "gauge"
	case pb.Histogram != nil:
		return "histogram"
	case pb.Summary != nil:
		return "summary"
	case pb.Untyped != nil:
		return "untyped"
	}
	return ""
}

// families returns what the recorder's collectors register: from their
// descriptors (names, labels) and what they collect now (types of custom
// collectors, and the series of unchecked ones that describe nothing).
func (r *recorder) families(t *testing.T, component string, into map[string]series) {
	t.Helper()
	for _, c := range r.cols {
		kind := kindOf(c)
		descs := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(descs); close(descs) }()
		for d := range descs {
			name, labels := parseDesc(d)
			into[name] = series{Component: component, Type: kind, Labels: labels}
		}
		ms := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ms); close(ms) }()
		for m := range ms {
			name, labels := parseDesc(m.Desc())
			s, ok := into[name]
			if !ok {
				s = series{Component: component, Labels: labels}
			}
			if s.Type == "" {
				s.Type = kindOfMetric(m)
			}
			into[name] = s
		}
	}
	for name, s := range into {
		if s.Type == "" && s.Component == component {
			if !strings.HasSuffix(name, "_total") {
				t.Fatalf("cannot tell the type of %s (a wrapped vector with no series)", name)
			}
			s.Type = "counter" // a wrapped counter vector that has no series yet
			into[name] = s
		}
	}
}

type nopStore struct{}

func (nopStore) Get(context.Context, string) (*schemas.WeightSnapshot, error) {
	return nil, errors.New("none")
}
func (nopStore) Publish(context.Context, *schemas.WeightSnapshot) error { return nil }

// nopConn is a NATS connection for peers.New, which does not use it.
type nopConn struct{}

func (nopConn) Publish(string, []byte) error { return nil }
func (nopConn) Subscribe(string, func([]byte)) (peers.Subscription, error) {
	return nil, errors.New("none")
}

// registeredSeries builds every component the binary runs, each on a
// fresh recorder as its command does, and returns every metric family
// they register (Go runtime and process collectors aside).
func registeredSeries(t *testing.T) map[string]series {
	t.Helper()
	out := map[string]series{}
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	quiet := slog.New(slog.DiscardHandler)

	rec := &recorder{reg: prometheus.NewRegistry()}
	if _, err := gateway.New("c", gateway.Registerer(rec), gateway.Engines(gateway.StaticEngine{ID: "e", URL: "http://127.0.0.1:1"})); err != nil {
		t.Fatalf("gateway: %v", err)
	}
	if _, err := streams.NewEmitter(client(), "t", "gateway", 0, rec); err != nil {
		t.Fatalf("gateway emitter: %v", err)
	}
	if _, err := peers.New(nopConn{}, pick.NewPool(), peers.Config{Cluster: "c", ID: "g", Registerer: rec}); err != nil { // --peer-load-interval
		t.Fatalf("gateway peers: %v", err)
	}
	rec.families(t, "gateway", out)

	rec = &recorder{reg: prometheus.NewRegistry()}
	if _, err := agent.New(client(agent.ClientOpts()...), agent.Config{
		Engines: []agent.Target{{ID: "e", URL: "http://127.0.0.1:1", Region: "r", GPUClass: "h100"}}, Logger: quiet, Registerer: rec,
	}); err != nil {
		t.Fatalf("agent: %v", err)
	}
	rec.families(t, "agent", out)

	rec = &recorder{reg: prometheus.NewRegistry()}
	pcfg := process.Config{Logger: quiet, Registerer: rec}
	if _, err := process.New(pcfg); err != nil {
		t.Fatalf("processor: %v", err)
	}
	if _, err := streams.NewGroupLag(client(), rec, streams.LagGroups(pcfg.Group)); err != nil { // the processor command's
		t.Fatalf("consumer lag: %v", err)
	}
	pcfg.Partitioned = true // --mode partitioned
	if _, err := process.New(pcfg); err != nil {
		t.Fatalf("partitioned processor: %v", err)
	}
	rec.families(t, "processor", out)

	rec = &recorder{reg: prometheus.NewRegistry()}
	if _, err := combiner.Metrics(rec, ""); err != nil {
		t.Fatalf("combiner: %v", err)
	}
	rec.families(t, "combiner", out)

	rec = &recorder{reg: prometheus.NewRegistry()}
	if _, err := kvrelay.New(client(kvrelay.ClientOpts()...), kvrelay.Config{
		Engines: []kvrelay.Engine{{ID: "e", Endpoint: "tcp://127.0.0.1:1"}}, Topics: streams.TopicsFor(""), Logger: quiet, Registerer: rec,
	}); err != nil {
		t.Fatalf("kvevents: %v", err)
	}
	rec.families(t, "kvevents", out)

	rec = &recorder{reg: prometheus.NewRegistry()}
	ocfg := control.Config{Logger: quiet, Registerer: rec}
	if _, err := control.New(client(control.ClientOpts(ocfg)...), nopStore{}, ocfg); err != nil {
		t.Fatalf("optimizer: %v", err)
	}
	rec.families(t, "optimizer", out)

	rec = &recorder{reg: prometheus.NewRegistry()}
	if _, err := brokerstate.New(quiet, rec); err != nil { // agent, processor, optimizer (and console)
		t.Fatalf("brokerstate: %v", err)
	}
	rec.families(t, "all", out)

	rec = &recorder{reg: prometheus.NewRegistry()}
	if _, err := engineserver.New(engineserver.Config{Metrics: engineserver.MetricsFull, LoRAModules: []string{"sql"}, Registerer: rec, Logger: quiet}); err != nil {
		t.Fatalf("enginesim: %v", err)
	}
	rec.families(t, "enginesim", out)
	for name, s := range out {
		if s.Component == "enginesim" { // the command serves them without the engine label a shared registry adds
			s.Labels = slices.DeleteFunc(s.Labels, func(l string) bool { return l == "engine" })
			out[name] = s
		}
	}
	return out
}

// docRow is one row of the table in docs/metrics.md.
var docRow = regexp.MustCompile("^\\| `([^`]+)` \\| ([a-z]+) \\| ([a-z]+) \\| ([^|]*) \\|")

// documentedSeries reads the table of docs/metrics.md.
func documentedSeries(t *testing.T) map[string]series {
	t.Helper()
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]series{}
	for _, line := range strings.Split(string(b), "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[4], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/metrics.md lists %s twice", m[1])
		}
		out[m[1]] = series{Component: m[2], Type: m[3], Labels: labels}
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md has no table rows")
	}
	return out
}

// TestMetricsDocumented: the table in docs/metrics.md lists exactly the
// metric families the binary's components register (each built on a
// fresh registry), with their component, type and labels.
func TestMetricsDocumented(t *testing.T) {
	got := registeredSeries(t)
	doc := documentedSeries(t)
	for name, s := range got {
		d, ok := doc[name]
		switch {
		case !ok:
			t.Errorf("%s (%s %s, labels %v) is registered but not in docs/metrics.md (add a row to its table)", name, s.Component, s.Type, s.Labels)
		case d.Component != s.Component || d.Type != s.Type || !slices.Equal(d.Labels, s.Labels):
			t.Errorf("docs/metrics.md: %s is %s %s %v, registered as %s %s %v", name, d.Component, d.Type, d.Labels, s.Component, s.Type, s.Labels)
		}
	}
	for name := range doc {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/metrics.md lists %s, which nothing registers", name)
		}
	}
	// Base units: seconds, not milliseconds; no per-second suffixes
	// other than the spelled-out rate.
	for name := range got {
		if strings.HasSuffix(name, "_ms") || strings.HasSuffix(name, "_rps") || strings.Contains(name, "_milliseconds") {
			t.Errorf("%s is not in base units", name)
		}
	}
}
