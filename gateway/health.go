package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/pick"
)

// healthFailures marks an engine down after this many failed checks in a
// row; one good check marks it up.
const healthFailures = 2

// healthLoop checks GET <engine>/health of the routed engines every
// HealthInterval, at most 16 at a time, and at once when checkSoon asks.
func (g *Gateway) healthLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.healthNow:
		}
		g.checkAll(ctx)
	}
}

// checkSoon asks the health loop for a round of checks now, without
// waiting for its tick. It is called when an engine the health checks
// hold down may be back: its own signals say healthy again, or a
// snapshot routes to it again (a snapshot that left it out while it was
// down took it out of the checked engines, so only a check after the
// snapshot that brings it back can find it up). A restarted engine then
// gets requests within a check's round trip of both the snapshot and its
// signals saying so, not up to a health interval later.
func (g *Gateway) checkSoon() {
	select {
	case g.healthNow <- struct{}{}:
	default: // a round is already asked for
	}
}

func (g *Gateway) checkAll(ctx context.Context) {
	rt := g.cur.Load()
	if rt == nil || rt.table == nil {
		return
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := 0; i < rt.table.Len(); i++ {
		e := rt.table.Engine(i)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			g.checkOne(ctx, e)
		}()
	}
	wg.Wait()
}

func (g *Gateway) checkOne(ctx context.Context, e *pick.Engine) {
	timeout := min(g.cfg.healthInterval, 2*time.Second)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok := false
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, e.URL+"/health", nil)
	if err == nil {
		t0 := g.cfg.now()
		if resp, err := g.cfg.transport.RoundTrip(req); err == nil {
			// The round trip to the response head: one network round
			// trip plus the engine's time to answer (see rtt.go).
			if t1 := g.cfg.now(); resp.StatusCode < 300 {
				g.addRTT(e.State, t1.Sub(t0), t1)
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			ok = resp.StatusCode < 300
		}
	}
	if ctx.Err() != nil {
		return
	}
	g.healthMu.Lock()
	defer g.healthMu.Unlock()
	if ok {
		g.healthFail[e.ID] = 0
		if e.State.Down() {
			g.log.Info("engine healthy again", "engine", e.ID)
			g.outlier.Restarted(e.State) // back from a restart: no ejection left over
		}
		e.State.SetDown(false)
		return
	}
	g.healthFail[e.ID]++
	if g.healthFail[e.ID] >= healthFailures && !e.State.Down() {
		g.log.Warn("engine failed health checks", "engine", e.ID)
		e.State.SetDown(true)
		// It comes back with a cold cache and maybe another speed.
		e.State.Forget(g.cfg.now().UnixMilli())
	}
}
