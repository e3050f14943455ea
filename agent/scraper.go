package agent

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Scraper reads one engine's /metrics and /health and turns them into
// EngineSignals, with counters and histograms as deltas since its previous
// scrape. It is not safe for concurrent use.
type Scraper struct {
	target Target
	client *http.Client

	prev     *reading
	prevTime time.Time

	modelIDs []string  // the last /v1/models list (models.go)
	modelsAt time.Time // when it was asked
}

// NewScraper returns a Scraper of t using client (http.DefaultClient if
// nil).
func NewScraper(t Target, client *http.Client) *Scraper {
	if client == nil {
		client = http.DefaultClient
	}
	return &Scraper{target: t, client: client}
}

// Scrape reads the engine and returns its signal stamped now. On failure
// it returns an unhealthy signal (without values) and the error; the next
// good scrape's deltas then span the failed interval too.
func (s *Scraper) Scrape(ctx context.Context, now time.Time) (*schemas.EngineSignal, error) {
	t := s.target
	sig := &schemas.EngineSignal{
		SchemaVersion: schemas.Version, EngineId: t.ID, EndpointUrl: baseURL(t.URL), Region: t.Region, GpuClass: t.GPUClass,
		EventTimeUnixMs: now.UnixMilli(), Health: schemas.Health_HEALTH_UNHEALTHY,
	}
	cur, err := s.fetchMetrics(ctx)
	if err != nil {
		// The models it served stay known: an engine down for a while
		// does not become one that may get any model.
		sig.Models = s.modelIDs
		if len(s.target.Models) > 0 {
			sig.Models = s.target.Models
		}
		return sig, err
	}
	fill(sig, s.health(ctx), cur, s, now)
	sig.Models = s.models(ctx, now)
	sig.ActiveAdapters, sig.MaxLora = cur.adapters, cur.maxLora
	return sig, nil
}

// setMaxBatch sets the per-replica batch limit: the configured one, else
// one the engine's metrics state, else none (the processor then infers one
// or uses its prior).
func setMaxBatch(sig *schemas.EngineSignal, configured uint32, cur *reading, replicas float64) {
	if configured > 0 {
		sig.MaxBatch = configured
		setMaxBatchSource(sig, maxBatchConfigured)
		return
	}
	mb, ok := cur.gauges["max_batch"]
	if !ok || mb <= 0 {
		mb = cur.infoMaxBatch
	}
	if mb <= 0 {
		return
	}
	if v := math.Min(math.Round(mb/replicas), 1e9); v >= 1 {
		sig.MaxBatch = uint32(v)
		setMaxBatchSource(sig, maxBatchEngineMetrics)
	}
}

// setKVCapacity sets the KV-cache size in tokens over the engine's
// replicas: the configured per-replica size times the replicas, else what
// the engine's metrics state (already over all its processes), else none.
func setKVCapacity(sig *schemas.EngineSignal, configured uint64, cur *reading, replicas float64) {
	if configured > 0 {
		sig.KvCapacityTokens = math.Min(float64(float64(configured)*replicas), maxKVCapacityTokens)
		return
	}
	sig.KvCapacityTokens = cur.kvCapacity
}

// fill sets sig's values from reading cur, with deltas against st's
// previous reading (which it then replaces) and st's configured batch
// limit. Every value it writes is finite and non-negative.
func fill(sig *schemas.EngineSignal, health schemas.Health, cur *reading, st *Scraper, now time.Time) {
	sig.Health = health
	sig.Model = cur.model
	sig.RunningRequests = cur.gauges["running"]
	sig.WaitingRequests = cur.gauges["waiting"]
	sig.KvCacheUsage = math.Min(1, math.Max(0, cur.gauges["kv"]))
	replicas := 1.0
	if r, ok := cur.gauges["replicas"]; ok && r >= 1 {
		replicas = math.Min(math.Round(r), 1e6)
	}
	if sig.Health != schemas.Health_HEALTH_UNHEALTHY {
		sig.ReadyReplicas = uint32(replicas)
	}
	setMaxBatch(sig, st.target.MaxBatch, cur, replicas)
	setKVCapacity(sig, st.target.KVCapacityTokens, cur, replicas)
	hasPrev := st.prev != nil
	var prev *reading
	if hasPrev {
		prev = st.prev
		sig.IntervalSeconds = max(0, now.Sub(st.prevTime).Seconds())
	} else {
		prev = &reading{counters: map[string]float64{}, hists: map[string]*hist{}}
	}
	// A series missing from the previous scrape (engines create counter
	// children lazily) started from zero.
	d := func(q string) float64 {
		c, ok := cur.counters[q]
		if !ok {
			return 0
		}
		return counterDelta(c, prev.counters[q], hasPrev)
	}
	hd := func(q string) *schemas.Histogram {
		p := prev.hists[q]
		if p == nil && hasPrev {
			p = &hist{}
		}
		return histDelta(cur.hists[q], p)
	}
	_, hasPrompt := cur.counters["prompt"]
	sig.PromptTokens = d("prompt")
	if !hasPrompt {
		_, hasPrompt = cur.hists["prompt_hist"]
		sig.PromptTokens = hd("prompt_hist").GetSum()
	}
	sig.GenerationTokens = d("generation")
	if _, ok := cur.counters["generation"]; !ok {
		sig.GenerationTokens = hd("generation_hist").GetSum()
	}
	_, hasHits := cur.counters["hits"]
	_, hasQueries := cur.counters["queries"]
	rate, hasRate := cur.gauges["hit_rate"]
	switch {
	case hasHits && hasQueries:
		sig.PrefixCacheHits, sig.PrefixCacheQueries = d("hits"), d("queries")
	case hasHits && hasPrompt:
		// Cached prompt tokens out of all prompt tokens (SGLang).
		sig.PrefixCacheHits, sig.PrefixCacheQueries = d("hits"), max(d("hits"), sig.PromptTokens)
	case hasRate && hasPrompt:
		// A hit-rate gauge applied to this interval's prompt tokens.
		sig.PrefixCacheQueries = sig.PromptTokens
		sig.PrefixCacheHits = math.Min(1, math.Max(0, rate)) * sig.PromptTokens
	}
	sig.TtftSeconds = hd("ttft")
	sig.TbotSeconds = hd("itl")
	if _, ok := cur.counters["success"]; ok {
		sig.RequestsFinished = d("success")
	} else if e2e := hd("e2e"); e2e != nil {
		sig.RequestsFinished = float64(e2e.GetCount())
	}
	st.prev, st.prevTime = cur, now
}

func (s *Scraper) fetchMetrics(ctx context.Context) (*reading, error) {
	t := s.target
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL(t.URL)+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", t.ID, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", t.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: status %d", t.ID, resp.StatusCode)
	}
	r, err := parse(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", t.ID, err)
	}
	return r, nil
}

// health asks /health: 2xx healthy, 404 (no such endpoint) healthy since
// metrics answered, 5xx unhealthy, anything else (or no answer) degraded.
func (s *Scraper) health(ctx context.Context) schemas.Health {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL(s.target.URL)+"/health", nil)
	if err != nil {
		return schemas.Health_HEALTH_DEGRADED
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return schemas.Health_HEALTH_DEGRADED
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300, resp.StatusCode == http.StatusNotFound:
		return schemas.Health_HEALTH_HEALTHY
	case resp.StatusCode >= 500:
		return schemas.Health_HEALTH_UNHEALTHY
	}
	return schemas.Health_HEALTH_DEGRADED
}
