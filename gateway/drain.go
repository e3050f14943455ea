package gateway

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/httpserver"
)

// cutGrace is how long the streams cut at the drain timeout get to write
// their error event and return before the connections are closed.
const cutGrace = 2 * time.Second

// Draining reports whether the gateway drains (Run's ctx ended):
// /health/ready then fails.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// apiServer is the API listener's server, fast (with net/http behind it)
// or net/http alone, as shutdown sees it.
type apiServer struct {
	ln   net.Listener
	std  *http.Server
	fast *httpserver.Server // nil: std serves ln
}

// shutdown stops accepting and waits for the requests in flight, until
// ctx ends; then they are still running.
func (s apiServer) shutdown(ctx context.Context) error {
	if s.fast != nil {
		return s.fast.Shutdown(ctx, s.ln)
	}
	return s.std.Shutdown(ctx)
}

func (s apiServer) close() {
	if s.fast != nil {
		s.fast.Close()
		return
	}
	_ = s.std.Close()
}

// drainAPI drains the API server once Run's ctx ended (began): readiness
// fails at once; the listener keeps accepting for DrainDelay, so that
// load balancers see it before any connection is refused; then it
// closes, and the requests in flight run to their end until DrainTimeout
// after began. Streams still running then are cut: each ends with an
// error event (relay.ErrDrain) and its routing event is recorded as the
// handler returns; after cutGrace whatever is left is closed. Both
// servers drain alike: they differ only in how they stop accepting.
// delay false (a component failed, not a signal) skips DrainDelay.
func (g *Gateway) drainAPI(s apiServer, began time.Time, delay bool) {
	g.draining.Store(true)
	inFlight := g.pool.InFlight()
	g.log.Info("draining", "drain_delay", g.cfg.drainDelay, "drain_timeout", g.cfg.drainTimeout, "in_flight", inFlight)
	deadline := began.Add(g.cfg.drainTimeout)
	if delay && g.cfg.drainDelay > 0 {
		t := time.NewTimer(time.Until(began.Add(g.cfg.drainDelay)))
		<-t.C
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := s.shutdown(ctx); err == nil {
		g.log.Info("drained", "took", time.Since(began).Round(time.Millisecond))
		return
	}
	g.log.Warn("drain timeout: cutting the streams still running", "in_flight", g.pool.InFlight(), "drain_timeout", g.cfg.drainTimeout)
	g.cutStreams()
	cctx, ccancel := context.WithTimeout(context.Background(), cutGrace)
	defer ccancel()
	if err := s.shutdown(cctx); err != nil {
		s.close()
	}
}
