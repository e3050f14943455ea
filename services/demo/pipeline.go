package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/control"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// pipeline is the running control and data plane of the demo.
type pipeline struct {
	agents    []*agent.Service
	processor *process.Processor
	optimizer *control.Optimizer
	gateways  []*gatewayProc
}

type gatewayProc struct {
	cluster string
	addr    string
	svc     *gateway.Gateway
}

func startPipeline(ctx context.Context, g *errgroup.Group, cfg Config, fleet []*engineProc, kafka []string, natsURL string, reg prometheus.Registerer, log *slog.Logger) (*pipeline, error) {
	p := &pipeline{}
	top := cfg.Topology
	engines, err := engineRegistry(fleet)
	if err != nil {
		return nil, err
	}

	// One agent per region scrapes that region's engines.
	for _, region := range top.Regions {
		var targets []agent.Target
		for _, e := range fleet {
			if e.spec.Region == region {
				targets = append(targets, agent.Target{ID: e.spec.ID, URL: e.url, Region: region, GPUClass: e.spec.GPUClass})
			}
		}
		cl, err := kgo.NewClient(append(agent.ClientOpts(), kgo.SeedBrokers(kafka...))...)
		if err != nil {
			return nil, fmt.Errorf("agent %s: creating kafka client: %w", region, err)
		}
		a, err := agent.New(cl, agent.Config{
			Engines: targets, Interval: time.Second,
			Logger:     log.With("component", "agent", "region", region),
			Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"region": region}, reg),
		})
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("agent %s: %w", region, err)
		}
		g.Go(func() error { defer cl.Close(); return a.Run(ctx) })
		p.agents = append(p.agents, a)
	}

	proc, err := startProcessor(ctx, g, kafka, process.Config{
		Window: 10 * time.Second, Slide: 2 * time.Second, AllowedLateness: 2 * time.Second,
		Logger: log.With("component", "processor"), Registerer: reg, TracerProvider: cfg.tracerProvider,
		Registry: engines,
	})
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	p.processor = proc

	opt, err := startOptimizer(ctx, g, kafka, natsURL, control.Config{
		Settings: plan.Settings{
			MaxUtilization: 0.9, Clusters: top.Regions, MinDemandRPS: 1, // churn: the default, relative
			RegionRTTms: top.RTTms,
		},
		Logger: log.With("component", "optimizer"), Registerer: reg, TracerProvider: cfg.tracerProvider,
		Registry: engines, // MaxGain 0: fleet.DefaultMaxGain with a registry
	})
	if err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	p.optimizer = opt

	regionOf := map[string]string{}
	var fallback []gateway.StaticEngine
	for _, e := range fleet {
		regionOf[hostOf(e.url)] = e.spec.Region
		fallback = append(fallback, gateway.StaticEngine{ID: e.spec.ID, URL: e.url})
	}
	for i, region := range top.Regions {
		listen, err := nextPort(cfg.GatewayListen, i)
		if err != nil {
			return nil, err
		}
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = 256
		rg, err := newRegionGateway(region, natsURL, kafka, reg,
			gateway.Listen(listen), gateway.Engines(fallback...), gateway.Registry(engines),
			gateway.Transport(&networkTransport{base: base, from: region, rtt: top.RTTms, region: regionOf}),
			gateway.Logger(log), gateway.TracerProvider(cfg.tracerProvider))
		if err != nil {
			return nil, fmt.Errorf("gateway %s: %w", region, err)
		}
		rg.run(ctx, g)
		p.gateways = append(p.gateways, &gatewayProc{cluster: region, svc: rg.gw})
	}
	for _, gw := range p.gateways {
		select {
		case <-gw.svc.Ready():
			gw.addr = gw.svc.Addr()
		case <-ctx.Done():
			return nil, fmt.Errorf("gateway %s did not start: %w", gw.cluster, context.Cause(ctx))
		}
	}
	return p, nil
}

// lagInterval is how often the demo measures the consumer groups' lag
// (the processor command's 15 s is most of a short demo).
const lagInterval = 2 * time.Second

// startProcessor runs the stream processor under g on its own Kafka
// client, closed when it stops, and, as the processor command does, the
// lag of every consumer group on the topics
// (switchyard_consumer_lag_records).
func startProcessor(ctx context.Context, g *errgroup.Group, kafka []string, cfg process.Config) (*process.Processor, error) {
	proc, err := process.New(cfg)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(proc.ClientOpts(), kgo.SeedBrokers(kafka...))...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	group := cfg.Group
	if group == "" {
		group = process.DefaultGroup
	}
	lag, err := streams.NewGroupLag(cl, cfg.Registerer, streams.LagPrefix(cfg.TopicPrefix), streams.LagGroups(group))
	if err != nil {
		cl.Close()
		return nil, err
	}
	g.Go(func() error {
		defer cl.Close()
		lagCtx, stopLag := context.WithCancel(ctx)
		lagDone := make(chan error, 1)
		go func() { lagDone <- lag.Run(lagCtx, lagInterval) }()
		defer func() { stopLag(); <-lagDone }()
		return proc.Run(ctx, cl)
	})
	return proc, nil
}

// startOptimizer runs the optimizer's control loop under g on its own
// Kafka client and NATS connection, closed when it stops.
func startOptimizer(ctx context.Context, g *errgroup.Group, kafka []string, natsURL string, cfg control.Config) (*control.Optimizer, error) {
	nc, err := nats.Connect(natsURL, nats.Name("switchyard-optimizer"), nats.Timeout(natsConnectTimeout))
	if err != nil {
		return nil, fmt.Errorf("connecting to nats %s: %w", natsURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	store, err := snapshots.Open(ctx, js)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening the snapshot store: %w", err)
	}
	cl, err := kgo.NewClient(append(control.ClientOpts(cfg), kgo.SeedBrokers(kafka...))...)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	opt, err := control.New(cl, store, cfg)
	if err != nil {
		cl.Close()
		nc.Close()
		return nil, err
	}
	g.Go(func() error {
		defer nc.Close()
		defer cl.Close()
		return opt.Run(ctx)
	})
	return opt, nil
}

func (p *pipeline) latestVersion() uint64      { return p.optimizer.Stats().LatestVersion }
func (p *pipeline) snapshotsPublished() uint64 { return p.optimizer.Stats().SnapshotsPublished }
func (p *pipeline) signalsConsumed() uint64    { return p.processor.Stats().SignalsConsumed }

func (p *pipeline) routingEventsConsumed() uint64 { return p.processor.Stats().RoutingEventsConsumed }

// routingEventsEmitted counts the events the gateways handed to Kafka.
func (p *pipeline) routingEventsEmitted() uint64 {
	var n uint64
	for _, gw := range p.gateways {
		st := gw.svc.Stats()
		n += st.Requests - st.EventsDropped
	}
	return n
}

func (p *pipeline) gatewaySummaries() []GatewaySummary {
	out := make([]GatewaySummary, 0, len(p.gateways))
	for _, gw := range p.gateways {
		st := gw.svc.Stats()
		out = append(out, GatewaySummary{
			Cluster: gw.cluster, Address: gw.addr, SnapshotVersion: st.SnapshotVersion,
			Requests: st.Requests, Succeeded: st.Succeeded, Retries: st.Retries, Shed: st.Shed,
		})
	}
	return out
}
