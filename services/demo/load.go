package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// loadGen replays a workload against the gateways as an OpenAI client
// would: streaming chat completions, one session per conversation.
type loadGen struct {
	client      *http.Client
	gateways    map[string]string // cluster -> base URL
	model       string
	blockTokens int
	maxPrompt   int
	maxOutput   int
	maxInflight int

	requests, succeeded, failed, shed, inflight atomic.Int64

	mu    sync.Mutex
	ttfts []float64 // ms, client-observed
	errs  map[string]int
}

func newLoadGen(gateways map[string]string, model string, blockTokens, maxPrompt, maxOutput int) *loadGen {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 512
	return &loadGen{
		client: &http.Client{Transport: tr}, gateways: gateways, model: model,
		blockTokens: blockTokens, maxPrompt: maxPrompt, maxOutput: maxOutput, maxInflight: 2048,
		errs: map[string]int{},
	}
}

// run sends every request at its arrival time (relative to now) until the
// workload ends or ctx is done, then waits for the requests in flight.
func (g *loadGen) run(ctx context.Context, reqs []workload.Request) {
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	clusters := make([]string, 0, len(g.gateways))
	for c := range g.gateways {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	for i, r := range reqs {
		if d := time.Until(start.Add(r.Arrival)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		cluster := r.Cluster
		if _, ok := g.gateways[cluster]; !ok {
			cluster = clusters[assign(r, i)%len(clusters)]
		}
		g.requests.Add(1)
		if g.inflight.Load() >= int64(g.maxInflight) {
			g.fail("load generator overloaded")
			continue
		}
		g.inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.inflight.Add(-1)
			// In-flight requests finish even after the load stops.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
			defer cancel()
			g.send(rctx, g.gateways[cluster], r)
		}()
	}
}

// assign keeps a conversation in one cluster: by session, else by the
// first block after the shared system prompt (Mooncake has no sessions).
func assign(r workload.Request, i int) int {
	key := r.Session
	if key == "" && len(r.Blocks) > 1 {
		key = fmt.Sprint(r.Blocks[1])
	}
	if key == "" {
		return i
	}
	h := 0
	for _, c := range key {
		h = h*31 + int(c)
	}
	if h < 0 {
		h = -h
	}
	return h
}

func (g *loadGen) session(r workload.Request) string {
	if r.Session != "" {
		return r.Session
	}
	if len(r.Blocks) > 1 {
		return fmt.Sprintf("conv-%d", r.Blocks[1])
	}
	return ""
}

func (g *loadGen) send(ctx context.Context, base string, r workload.Request) {
	out := r.OutputTokens
	if g.maxOutput > 0 && out > g.maxOutput {
		out = g.maxOutput
	}
	body, _ := json.Marshal(map[string]any{
		"model":      g.model,
		"stream":     true,
		"max_tokens": out,
		"user":       g.session(r),
		"messages":   []map[string]string{{"role": "user", "content": workload.Prompt(r, g.blockTokens, g.maxPrompt)}},
	})
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		g.fail("building request")
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		g.fail("transport: " + trimErr(err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		g.shed.Add(1)
		g.fail("429 shed")
		_, _ = io.Copy(io.Discard, resp.Body)
		return
	}
	if resp.StatusCode != http.StatusOK {
		g.fail(fmt.Sprintf("status %d", resp.StatusCode))
		_, _ = io.Copy(io.Discard, resp.Body)
		return
	}
	br := bufio.NewReader(resp.Body)
	first := true
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data:") {
			data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			if data == "[DONE]" {
				g.succeeded.Add(1)
				return
			}
			if first {
				first = false
				g.mu.Lock()
				g.ttfts = append(g.ttfts, float64(time.Since(start).Microseconds())/1000)
				g.mu.Unlock()
			}
		}
		if err != nil {
			g.fail("stream ended before [DONE]")
			return
		}
	}
}

func (g *loadGen) fail(reason string) {
	g.failed.Add(1)
	g.mu.Lock()
	if len(g.errs) < 32 || g.errs[reason] > 0 {
		g.errs[reason]++
	}
	g.mu.Unlock()
}

func trimErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// ttftQuantiles returns the client-observed TTFT p50 and p99 in ms.
func (g *loadGen) ttftQuantiles() (p50, p99 float64, n int) {
	g.mu.Lock()
	xs := append([]float64(nil), g.ttfts...)
	g.mu.Unlock()
	if len(xs) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(xs)
	q := func(p float64) float64 {
		i := int(p * float64(len(xs)-1))
		return xs[i]
	}
	return q(0.5), q(0.99), len(xs)
}

func (g *loadGen) errorSummary() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int, len(g.errs))
	for k, v := range g.errs {
		out[k] = v
	}
	return out
}
