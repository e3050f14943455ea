package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// capacity runs clients closed-loop clients, each sending the next of
// reqs (in trace order, wrapping) as soon as its previous answer ended,
// and returns the requests served per second whose answers ended in the
// window after the warm-up. With clients well above the fleet's batch
// slots, every engine runs full batches behind a least-connections proxy,
// so this is what the fleet completes at saturation on this request mix.
func capacity(ctx context.Context, c *client, target string, reqs []request, clients int, warm, window time.Duration) (float64, error) {
	if target == "" || clients < 1 || window <= 0 {
		return 0, fmt.Errorf("capacity needs -target, -clients >= 1 and a positive -window")
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	from, until := start.Add(warm), start.Add(warm+window)
	var next, served, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the starts over the first half of the warm-up.
			if !sleepCtx(ctx, warm/2*time.Duration(i)/time.Duration(clients)) {
				return
			}
			for time.Now().Before(until) && ctx.Err() == nil {
				r := reqs[int(next.Add(1)-1)%len(reqs)]
				res := c.send(ctx, target, r)
				if now := time.Now(); now.After(from) && now.Before(until) {
					if res.Served {
						served.Add(1)
					} else {
						failed.Add(1)
					}
				}
			}
		}()
	}
	// Answers still streaming at the window's end do not count; stop them.
	if sleepCtx(ctx, time.Until(until)) {
		cancel()
	}
	wg.Wait()
	if err := parent.Err(); err != nil {
		return 0, err
	}
	if n := failed.Load(); n > 0 {
		fmt.Printf("# capacity: %d requests failed in the window\n", n)
	}
	return float64(served.Load()) / window.Seconds(), nil
}

// replay sends every request at its arrival (relative to now), each on
// its own connection as needed, and waits for all of them: an open loop,
// arrivals never wait for answers.
func replay(ctx context.Context, c *client, target string, reqs []request) []result {
	out := make([]result, len(reqs))
	start := time.Now()
	var wg sync.WaitGroup
	for i, r := range reqs {
		if !sleepCtx(ctx, time.Until(start.Add(r.Arrival))) {
			for j := i; j < len(reqs); j++ {
				out[j] = result{Failure: "not sent (interrupted)"}
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.send(ctx, target, r)
		}()
	}
	wg.Wait()
	return out
}

// sleepCtx sleeps d or until ctx is done; false when ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
