package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// engine is one engine whose /metrics the replay reads.
type engine struct{ id, url string }

// parseEngines reads "id=url,id=url".
func parseEngines(s string) ([]engine, error) {
	var out []engine
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, url, ok := strings.Cut(part, "=")
		if !ok || id == "" || url == "" {
			return nil, fmt.Errorf("-engines: %q is not id=url", part)
		}
		out = append(out, engine{id: id, url: strings.TrimSuffix(url, "/")})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-engines: none given")
	}
	return out, nil
}

// counters are the engine counters a cell reports, summed over label sets.
type counters struct {
	prefixHits, prefixQueries, succeeded float64
}

// counterNames are vLLM's names of counters, as enginesim serves them.
var counterNames = map[string]func(*counters) *float64{
	"vllm:prefix_cache_hits_total":    func(c *counters) *float64 { return &c.prefixHits },
	"vllm:prefix_cache_queries_total": func(c *counters) *float64 { return &c.prefixQueries },
	"vllm:request_success_total":      func(c *counters) *float64 { return &c.succeeded },
}

// scrapeAll reads every engine's counters.
func scrapeAll(ctx context.Context, hc *http.Client, engines []engine) (map[string]counters, error) {
	out := make(map[string]counters, len(engines))
	for _, e := range engines {
		c, err := scrape(ctx, hc, e.url+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("scraping engine %s: %w", e.id, err)
		}
		out[e.id] = c
	}
	return out, nil
}

func scrape(ctx context.Context, hc *http.Client, url string) (counters, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return counters{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return counters{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counters{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return counters{}, fmt.Errorf("parsing %s: %w", url, err)
	}
	var c counters
	for name, field := range counterNames {
		for _, m := range fams[name].GetMetric() {
			*field(&c) += m.GetCounter().GetValue()
		}
	}
	return c, nil
}

// engineDelta is what one engine did during a replay.
type engineDelta struct {
	id string
	counters
}

// counterDeltas are after minus before, in the order of engines.
func counterDeltas(engines []engine, before, after map[string]counters) []engineDelta {
	out := make([]engineDelta, len(engines))
	for i, e := range engines {
		b, a := before[e.id], after[e.id]
		out[i] = engineDelta{id: e.id, counters: counters{
			prefixHits:    a.prefixHits - b.prefixHits,
			prefixQueries: a.prefixQueries - b.prefixQueries,
			succeeded:     a.succeeded - b.succeeded,
		}}
	}
	return out
}
