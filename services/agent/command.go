package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
)

// Command is `switchyard agent`.
func Command() cli.Command {
	return cli.Command{
		Name:    "agent",
		Summary: "scrape engines' /metrics and publish engine signals",
		Run:     run,
	}
}

// engineList is a repeatable flag of engine specs.
type engineList []string

func (l *engineList) String() string     { return strings.Join(*l, ";") }
func (l *engineList) Set(v string) error { *l = append(*l, v); return nil }

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var conn cli.Connection
	conn.Register(fs)
	var engines engineList
	list := fs.String("engines", "", `engines to scrape, ";"-separated: id=url[,region=R][,gpu=CLASS]`)
	fs.Var(&engines, "engine", "one engine, id=url[,region=R][,gpu=CLASS] (repeatable)")
	region := fs.String("region", "", "region of engines that do not name one")
	gpu := fs.String("gpu-class", "", "GPU class (h100, a100, l4, ...) of engines that do not name one")
	var cfg Config
	fs.DurationVar(&cfg.Interval, "interval", 2e9, "scrape interval")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9103", "address of the /metrics endpoint (empty: off)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	specs := append([]string(nil), engines...)
	for _, s := range strings.Split(*list, ";") {
		if s = strings.TrimSpace(s); s != "" {
			specs = append(specs, s)
		}
	}
	targets, err := ParseTargets(specs, *region, *gpu)
	if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	cfg.Engines = targets
	cfg.KafkaBrokers = conn.Brokers()
	cfg.TopicPrefix = conn.TopicPrefix
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	s, err := New(cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if *metricsListen != "" {
		_, stop, err := obs.ServeMetrics(ctx, *metricsListen, reg)
		if err != nil {
			return err
		}
		defer stop()
	}
	return s.Run(ctx)
}

// ParseTargets parses engine specs "id=url[,region=R][,gpu=CLASS]";
// region and gpuClass are the defaults for specs that do not name them.
func ParseTargets(specs []string, region, gpuClass string) ([]Target, error) {
	var out []Target
	for _, spec := range specs {
		parts := strings.Split(spec, ",")
		id, url, ok := strings.Cut(strings.TrimSpace(parts[0]), "=")
		if !ok || id == "" || url == "" {
			return nil, fmt.Errorf("engine %q: want id=url[,region=R][,gpu=CLASS]", spec)
		}
		t := Target{ID: id, URL: url, Region: region, GPUClass: gpuClass}
		for _, kv := range parts[1:] {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			switch {
			case !ok:
				return nil, fmt.Errorf("engine %q: option %q is not key=value", spec, kv)
			case k == "region":
				t.Region = v
			case k == "gpu" || k == "gpu-class" || k == "gpu_class":
				t.GPUClass = v
			default:
				return nil, fmt.Errorf("engine %q: unknown option %q", spec, k)
			}
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("no engines: give --engines or --engine")
	}
	return out, nil
}
