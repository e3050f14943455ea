package gateway

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// overloadBody is a completion of 8 to 24 output tokens (uniform): about
// 0.85 s on average on an L4-class enginesim engine at full batch (48).
// Lengths vary, as in real traffic: requests of one length would finish
// in rounds.
func overloadBody() string {
	return fmt.Sprintf(`{"model":"switchyard-sim-8b","prompt":"hello there, tell me about switchyards","max_tokens":%d}`, 8+rand.IntN(17))
}

const overloadTokens = 16 // enginesim's default

// loadResult is what a load phase saw.
type loadResult struct {
	ok, rejected, rejected429RA, other int
	goodput                            float64         // successful completions per second inside the window
	rejectLatency                      []time.Duration // of every non-200 answer
}

func (r loadResult) String() string {
	p := func(q float64) time.Duration {
		if len(r.rejectLatency) == 0 {
			return 0
		}
		s := slices.Clone(r.rejectLatency)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	return fmt.Sprintf("goodput %.1f rps, %d ok, %d rejected (%d 429 with Retry-After), %d other; rejection latency p50 %v p99 %v",
		r.goodput, r.ok, r.rejected, r.rejected429RA, r.other, p(0.5), p(0.99))
}

// loadClient is an HTTP client with enough connections for open-loop load.
func loadClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}}
}

// closedLoop runs n clients sending requests back to back to url for d,
// their starts spread over the warm-up (clients started together would
// keep finishing together, in rounds); completions in the window after
// warm count.
func closedLoop(ctx context.Context, client *http.Client, url string, n int, warm, d time.Duration) loadResult {
	var mu sync.Mutex
	var res loadResult
	start := time.Now()
	from, until := start.Add(warm), start.Add(d)
	ctx, cancel := context.WithDeadline(ctx, until) // the window is over: cut what is in flight
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(warm * time.Duration(i) / time.Duration(n)):
			case <-ctx.Done():
				return
			}
			for time.Now().Before(until) {
				status, _, _ := send(ctx, client, url)
				now := time.Now()
				mu.Lock()
				if status == 200 && now.After(from) && now.Before(until) {
					res.ok++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.goodput = float64(res.ok) / until.Sub(from).Seconds()
	return res
}

// openLoop offers rate requests per second to url for d, whatever the
// answers (arrivals do not wait for them); successful completions in the
// window after warm count towards goodput.
func openLoop(ctx context.Context, client *http.Client, url string, rate float64, warm, d time.Duration) loadResult {
	var mu sync.Mutex
	var res loadResult
	start := time.Now()
	from, until := start.Add(warm), start.Add(d)
	ctx, cancel := context.WithDeadline(ctx, until) // the window is over: cut what is in flight
	defer cancel()
	gap := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	// The n-th arrival is due at start + n·gap; a late loop catches up
	// (a Ticker would drop ticks on a busy machine).
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * gap)
		if !due.Before(until) {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d) // pacing the arrivals, not waiting for a result
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			status, retryAfter, err := send(ctx, client, url)
			end := time.Now()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status == 200:
				if end.After(from) && end.Before(until) {
					res.ok++
				}
			case err == nil && t0.After(from):
				res.rejected++
				res.rejectLatency = append(res.rejectLatency, end.Sub(t0))
				if status == 429 && retryAfter != "" {
					res.rejected429RA++
				}
			case t0.After(from) && ctx.Err() == nil: // not cut at the window's end
				res.other++
			}
		}()
	}
	wg.Wait()
	res.goodput = float64(res.ok) / until.Sub(from).Seconds()
	return res
}

func send(ctx context.Context, client *http.Client, url string) (status int, retryAfter string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(overloadBody()))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// startSim runs an L4-class enginesim engine until the test ends.
func startSim(t testing.TB, id string) string {
	t.Helper()
	s, err := engineserver.New(engineserver.Config{ID: id, Listen: "127.0.0.1:0", GPUClass: "l4", DefaultMaxTokens: overloadTokens})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	return "http://" + s.Addr()
}

// TestOverloadDegradesToFast429s offers 2x and 10x a simulated engine's
// measured capacity through a gateway with default flags and checks that
// it degrades to 429s instead of collapsing: goodput stays at least 75% of
// the capacity (without admission it fell below half, with 504s), and at
// least 95% of the rejected requests are answered 429 with Retry-After.
// The goal of 90% is a speed target, measured by bench/overload
// on a quiet machine, not here where other packages' tests share the
// cores (this test measured 93-103% at 2x while they ran). (Capacity is
// the completions per second of an identical engine under a closed loop
// of 64 clients, above its batch limit of 48, sent to it directly after a
// warm-up, on the same machine at the same time, so the ratio holds on a
// slow or shared machine. Meanwhile the same closed loop through the
// gateway lets it learn its engine's limit from its initial 32: the goal
// is the steady state.) The rejection latencies it logs are only
// indicative; bench/overload measures them.
func TestOverloadDegradesToFast429s(t *testing.T) {
	if testing.Short() {
		t.Skip("a 21 s load test")
	}
	ref, engineURL := startSim(t, "ref"), startSim(t, "sim")
	_, base := startGateway(t, Engines(StaticEngine{ID: "sim", URL: engineURL}))
	client := loadClient()
	ctx := context.Background()
	learned := make(chan struct{})
	go func() {
		defer close(learned)
		closedLoop(ctx, client, base+"/v1/completions", 64, 2*time.Second, 4500*time.Millisecond)
	}()
	capacity := closedLoop(ctx, client, ref+"/v1/completions", 64, 2*time.Second, 4500*time.Millisecond)
	<-learned
	t.Logf("capacity: %.1f rps", capacity.goodput)
	if capacity.goodput <= 0 {
		t.Fatal("no capacity measured")
	}
	for _, phase := range []struct {
		mult   float64
		window time.Duration
	}{{2, 9 * time.Second}, {10, 2500 * time.Millisecond}} { // 2x: long enough for the queue's predicted wait to pass 3/4 of the 8-s deadline (it grows about 1 s a second at 2x: 6 s left it borderline, and CI saw no rejection in 2 of its runs); 10x: more requests, fewer seconds
		mult := phase.mult
		res := openLoop(ctx, client, base+"/v1/completions", mult*capacity.goodput, time.Second, time.Second+phase.window)
		t.Logf("%gx: %v", mult, res)
		if res.goodput < 0.75*capacity.goodput {
			t.Errorf("%gx: goodput %.1f rps < 75%% of capacity %.1f", mult, res.goodput, capacity.goodput)
		}
		if res.rejected+res.other == 0 || float64(res.rejected429RA) < 0.95*float64(res.rejected+res.other) {
			t.Errorf("%gx: %d of %d rejections were 429 with Retry-After", mult, res.rejected429RA, res.rejected+res.other)
		}
	}
}
