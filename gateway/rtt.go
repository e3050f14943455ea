package gateway

import (
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/pick"
)

// Network round trips to engines, measured by the gateway itself: the
// health checks' round trips and the TCP connect times of new engine
// connections (the engine client's). An engine's RTT is the shortest of
// its last rttSamples health-check round trips and its last connect
// times, each at most rttMaxAge old (the minimum filters out the
// engine's own time to answer and queueing on the way).
const (
	rttSamples = 4
	rttMaxAge  = 5 * time.Minute
)

// rttRing is one engine's last health-check round trips.
type rttRing struct {
	mu sync.Mutex
	s  [rttSamples]struct {
		d  time.Duration
		at time.Time
	}
	n int
}

func (r *rttRing) add(d time.Duration, at time.Time) {
	r.mu.Lock()
	r.s[r.n%rttSamples].d, r.s[r.n%rttSamples].at = d, at
	r.n++
	r.mu.Unlock()
}

func (r *rttRing) min(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best time.Duration
	for _, s := range r.s[:min(r.n, rttSamples)] {
		if s.d > 0 && now.Sub(s.at) <= rttMaxAge && (best == 0 || s.d < best) {
			best = s.d
		}
	}
	return best
}

// addRTT records a health-check round trip to st's engine.
func (g *Gateway) addRTT(st *pick.State, d time.Duration, at time.Time) {
	v, ok := g.rtts.Load(st)
	if !ok {
		v, _ = g.rtts.LoadOrStore(st, &rttRing{})
	}
	v.(*rttRing).add(d, at)
}

// engineRTT returns the measured round trip to the engine of st at url,
// or 0 when unknown.
func (g *Gateway) engineRTT(st *pick.State, url string) time.Duration {
	now := g.cfg.now()
	var best time.Duration
	if v, ok := g.rtts.Load(st); ok {
		best = v.(*rttRing).min(now)
	}
	if g.client != nil {
		if hp := g.client.Host(url); hp != nil {
			if d := hp.ConnectRTT(now, rttMaxAge); d > 0 && (best == 0 || d < best) {
				best = d
			}
		}
	}
	return best
}
