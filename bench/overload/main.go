// Command overload measures how a gateway degrades under overload: it
// measures an engine's capacity directly (a closed loop of -clients
// clients), then offers -mults times that rate to the gateway in an open
// loop (arrivals do not wait for answers) and reports per phase the
// goodput (successful completions per second) against the capacity, the
// share of rejections that were 429 with Retry-After (and the 5xx among
// them), and the latency of rejections and of served requests. Goals
// (issue 22): goodput >= 90% of capacity, every rejection a 429 with
// Retry-After, 0 5xx, rejection p99 <= 50 ms; it exits non-zero if one is
// missed. bench/overload/run.sh starts an
// engine and a gateway with default flags and runs it.
//
// usage: go run ./bench/overload -engine http://127.0.0.1:18100 -gateway http://127.0.0.1:18101
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

type result struct {
	ok, rejected, rejected429RA, errs, status5xx int
	goodput                                      float64
	rejectLat, okLat                             []time.Duration
}

func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func body(minTok, maxTok int) string {
	return fmt.Sprintf(`{"model":"switchyard-sim-8b","prompt":"hello there, tell me about switchyards","max_tokens":%d}`, minTok+rand.IntN(maxTok-minTok+1))
}

func send(ctx context.Context, c *http.Client, url, b string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

type config struct {
	engine, gateway string
	clients         int
	warm, window    time.Duration
	mults           []float64
	minTok, maxTok  int
}

func main() {
	var c config
	var mults string
	flag.StringVar(&c.engine, "engine", "http://127.0.0.1:18100", "engine base URL (capacity is measured on it directly)")
	flag.StringVar(&c.gateway, "gateway", "http://127.0.0.1:18101", "gateway base URL")
	flag.IntVar(&c.clients, "clients", 96, "closed-loop clients measuring capacity (above the engine's batch limit)")
	flag.DurationVar(&c.warm, "warm", 5*time.Second, "warm-up of each phase (not counted)")
	flag.DurationVar(&c.window, "window", 20*time.Second, "measured part of each phase")
	flag.StringVar(&mults, "mults", "2,10", "offered load as multiples of the capacity")
	flag.IntVar(&c.minTok, "min-tokens", 8, "least max_tokens of a request (uniform)")
	flag.IntVar(&c.maxTok, "max-tokens", 24, "most max_tokens of a request")
	flag.Parse()
	for _, m := range strings.Split(mults, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(m), 64)
		if err != nil || !(v > 0) {
			fmt.Fprintf(os.Stderr, "overload: bad -mults %q\n", mults)
			os.Exit(2)
		}
		c.mults = append(c.mults, v)
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8192, DisableCompression: true}}
	capacity := closedLoop(ctx, client, c)
	fmt.Printf("capacity (closed loop of %d clients on the engine): %.1f rps\n", c.clients, capacity)
	if !(capacity > 0) {
		return fmt.Errorf("no capacity measured")
	}
	fail := false
	for _, m := range c.mults {
		r := openLoop(ctx, client, c, m*capacity)
		share := 0.0
		if r.rejected+r.errs > 0 {
			share = float64(r.rejected429RA) / float64(r.rejected+r.errs)
		}
		fmt.Printf("%gx (%.0f rps offered): goodput %.1f rps = %.0f%% of capacity; %d served, %d rejected (%.1f%% 429 with Retry-After, %d 5xx), %d errors; "+
			"rejection latency p50 %v p99 %v p99.9 %v; served latency p50 %v p99 %v\n",
			m, m*capacity, r.goodput, 100*r.goodput/capacity, r.ok, r.rejected, 100*share, r.status5xx, r.errs,
			quantile(r.rejectLat, 0.5).Round(10*time.Microsecond), quantile(r.rejectLat, 0.99).Round(10*time.Microsecond),
			quantile(r.rejectLat, 0.999).Round(10*time.Microsecond), quantile(r.okLat, 0.5).Round(time.Millisecond), quantile(r.okLat, 0.99).Round(time.Millisecond))
		if r.goodput < 0.9*capacity || r.rejected429RA != r.rejected+r.errs || r.status5xx > 0 || quantile(r.rejectLat, 0.99) > 50*time.Millisecond {
			fail = true
		}
	}
	if fail {
		return fmt.Errorf("a goal was missed (goodput >= 90%% of capacity; every rejection 429 with Retry-After, 0 5xx; rejection p99 <= 50 ms)")
	}
	return nil
}

// closedLoop: completions per second in the window of c.clients clients
// sending back to back to the engine (starts spread over the warm-up).
func closedLoop(ctx context.Context, client *http.Client, c config) float64 {
	var mu sync.Mutex
	ok := 0
	start := time.Now()
	from, until := start.Add(c.warm), start.Add(c.warm+c.window)
	var wg sync.WaitGroup
	for i := range c.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(c.warm * time.Duration(i) / time.Duration(c.clients)) // spread the starts
			for time.Now().Before(until) {
				status, _, _ := send(ctx, client, c.engine+"/v1/completions", body(c.minTok, c.maxTok))
				now := time.Now()
				mu.Lock()
				if status == 200 && now.After(from) && now.Before(until) {
					ok++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return float64(ok) / c.window.Seconds()
}

// openLoop offers rate requests per second to the gateway.
func openLoop(ctx context.Context, client *http.Client, c config, rate float64) result {
	var mu sync.Mutex
	var r result
	start := time.Now()
	from, until := start.Add(c.warm), start.Add(c.warm+c.window)
	gap := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * gap)
		if !due.Before(until) {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			status, ra, err := send(ctx, client, c.gateway+"/v1/completions", body(c.minTok, c.maxTok))
			end := time.Now()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status == 200:
				if end.After(from) && end.Before(until) {
					r.ok++
					r.okLat = append(r.okLat, end.Sub(t0))
				}
			case !t0.After(from):
			case err == nil:
				r.rejected++
				r.rejectLat = append(r.rejectLat, end.Sub(t0))
				if status == 429 && ra != "" {
					r.rejected429RA++
				}
				if status >= 500 {
					r.status5xx++
				}
			default:
				r.errs++
			}
		}()
	}
	wg.Wait()
	r.goodput = float64(r.ok) / c.window.Seconds()
	return r
}
