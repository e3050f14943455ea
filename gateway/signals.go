package gateway

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/schemas"
)

// followSignals polls engine signals until ctx is done and marks engines
// whose own signals say unhealthy or no ready replicas as down (and up
// again when they recover). Malformed records are counted and skipped:
// the processor, not every gateway, dead-letters them.
func (g *Gateway) followSignals(ctx context.Context, f SignalFetcher) {
	apply := func(b []byte) {
		if ctx.Err() == nil { // a poll cut short by ctx applies nothing
			g.applySignal(b)
		}
	}
	for ctx.Err() == nil {
		f.Poll(ctx, apply)
	}
}

// applySignal applies one proto-binary EngineSignal.
func (g *Gateway) applySignal(b []byte) {
	var s schemas.EngineSignal
	if err := proto.Unmarshal(b, &s); err != nil || s.GetEngineId() == "" {
		g.m.signals.WithLabelValues(g.cfg.cluster, "malformed").Inc()
		return
	}
	if t := s.GetEventTimeUnixMs(); t > 0 && g.cfg.now().Sub(time.UnixMilli(t)) > signalMaxAge {
		g.m.signals.WithLabelValues(g.cfg.cluster, "stale").Inc()
		return
	}
	if !g.screen(&s) { // registry_signals.go
		return
	}
	g.noteEngine(&s)                  // event.go
	modelsChanged := g.noteModels(&s) // models.go
	if modelsChanged {
		g.log.Info("engine models", "engine", s.GetEngineId(), "models", s.GetModels())
	}
	st, ok := g.pool.Lookup(s.GetEngineId())
	if !ok {
		g.m.signals.WithLabelValues(g.cfg.cluster, "unknown_engine").Inc()
		return
	}
	down := admit.SignalDown(&s)
	if down != st.SignalDown() {
		g.log.Info("engine signal changes availability", "engine", s.GetEngineId(), "down", down, "health", s.GetHealth().String())
		if down {
			st.Forget(g.cfg.now().UnixMilli())
		} else {
			g.outlier.Restarted(st) // back from a restart: no ejection left over
			if st.Down() {
				g.checkSoon() // the health checks' verdict may be stale
			}
		}
	}
	st.SetSignalDown(down)
	if g.setAdapters(st, &s) || modelsChanged { // models.go
		g.placeAdapters()
	}
	g.admit.noteSignal(st, &s, down) // admission.go
	g.m.signals.WithLabelValues(g.cfg.cluster, "applied").Inc()
}
