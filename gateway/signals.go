package gateway

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// signalLookback is how far back the gateway reads engine signals when it
// starts; signalMaxAge is the oldest signal it acts on.
const (
	signalLookback = 30 * time.Second
	signalMaxAge   = 60 * time.Second
)

// consumeSignals follows the engine-signal topic and marks engines whose
// own signals say unhealthy or no ready replicas as down (and up again
// when they recover). Malformed records are counted and skipped: the
// processor, not every gateway, dead-letters them.
func (g *Gateway) consumeSignals(ctx context.Context) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(g.cfg.KafkaBrokers...),
		kgo.ConsumeTopics(streams.TopicsFor(g.cfg.TopicPrefix).Signals),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(g.cfg.Now().Add(-signalLookback).UnixMilli())),
		kgo.ClientID("switchyard-gateway-signals-"+g.cfg.Cluster),
	)
	if err != nil {
		g.log.Warn("engine signals not followed", "err", err)
		return nil
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachRecord(func(r *kgo.Record) { g.applySignal(r.Value) })
	}
}

// applySignal applies one proto-binary EngineSignal.
func (g *Gateway) applySignal(b []byte) {
	var s schemas.EngineSignal
	if err := proto.Unmarshal(b, &s); err != nil || s.GetEngineId() == "" || s.GetSchemaVersion() > schemas.Version {
		g.m.signals.WithLabelValues(g.cfg.Cluster, "malformed").Inc()
		return
	}
	if t := s.GetEventTimeUnixMs(); t > 0 && g.cfg.Now().Sub(time.UnixMilli(t)) > signalMaxAge {
		g.m.signals.WithLabelValues(g.cfg.Cluster, "stale").Inc()
		return
	}
	st, ok := g.pool.Lookup(s.GetEngineId())
	if !ok {
		g.m.signals.WithLabelValues(g.cfg.Cluster, "unknown_engine").Inc()
		return
	}
	down := s.GetHealth() == schemas.Health_HEALTH_UNHEALTHY ||
		(s.GetHealth() != schemas.Health_HEALTH_UNSPECIFIED && s.GetReadyReplicas() == 0)
	if down != st.SignalDown() {
		g.log.Info("engine signal changes availability", "engine", s.GetEngineId(), "down", down, "health", s.GetHealth().String())
	}
	st.SetSignalDown(down)
	g.m.signals.WithLabelValues(g.cfg.Cluster, "applied").Inc()
}
