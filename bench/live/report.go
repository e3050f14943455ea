package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// seconds is a latency in seconds; +Inf (a quantile that falls among
// failed requests, or of no request) is null in JSON.
type seconds float64

func (s seconds) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(s), 0) || math.IsNaN(float64(s)) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(s), 'f', 4, 64), nil
}

func (s *seconds) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = seconds(math.Inf(1))
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*s = seconds(v)
	return err
}

// cell is one router at one load: the JSON bench/live writes per run.
type cell struct {
	Router   string         `json:"router"`
	Load     float64        `json:"load"`
	Requests int            `json:"requests"`
	Served   int            `json:"served"`
	Failed   int            `json:"failed"`
	Failures map[string]int `json:"failures"`
	// Goodput counts the served requests that met the SLO: TTFT at most
	// SLOTTFT and mean time between tokens at most SLOTBOT (the sim's
	// definition, docs/sim.md; its hetero-slots scenarios, this bench's
	// fleet in the sim, use 5 s and 100 ms).
	Goodput int     `json:"goodput"`
	SLOTTFT seconds `json:"slo_ttft"`
	SLOTBOT seconds `json:"slo_tbot"`
	// TTFT over all requests, a failed one counting as +Inf.
	TTFTAllP50 seconds `json:"ttft_all_p50"`
	TTFTAllP90 seconds `json:"ttft_all_p90"`
	TTFTAllP99 seconds `json:"ttft_all_p99"`
	// TTFT and end-to-end latency over served requests.
	TTFTServedP50 seconds `json:"ttft_served_p50"`
	TTFTServedP90 seconds `json:"ttft_served_p90"`
	TTFTServedP99 seconds `json:"ttft_served_p99"`
	E2EP50        seconds `json:"e2e_p50"`
	E2EP90        seconds `json:"e2e_p90"`
	E2EP99        seconds `json:"e2e_p99"`
	// EngineShare is each engine's share of the requests the engines
	// finished (vllm:request_success_total).
	EngineShare map[string]float64 `json:"engine_share"`
	// PrefixCacheHitRate is the engines' prefix-cache hits over queries
	// (vllm:prefix_cache_{hits,queries}_total, prompt tokens).
	PrefixCacheHitRate float64 `json:"prefix_cache_hit_rate"`
	OfferedRPS         float64 `json:"offered_rps"`
	CapacityRPS        float64 `json:"capacity_rps"`
	DurationS          float64 `json:"duration_s"`
	Trace              string  `json:"trace"`
	MaxPromptTokens    int     `json:"max_prompt_tokens"`
	MaxOutputTokens    int     `json:"max_output_tokens"`
}

// quantile is the nearest-rank q-quantile of sorted xs (+Inf of none).
func quantile(sorted []float64, q float64) seconds {
	if len(sorted) == 0 {
		return seconds(math.Inf(1))
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return seconds(sorted[max(0, min(len(sorted)-1, i))])
}

// slo is the latency objective a served request meets to count as
// goodput.
type slo struct{ ttft, tbot time.Duration }

// met reports whether served request r met s: its first token within
// s.ttft and, over more than one token, a mean time between tokens
// within s.tbot.
func (s slo) met(r result) bool {
	if !r.Served || r.TTFT > s.ttft {
		return false
	}
	return r.Chunks < 2 || (r.E2E-r.TTFT)/time.Duration(r.Chunks-1) <= s.tbot
}

// summarise builds a cell from the replay's results and the engines'
// counter deltas.
func summarise(router string, load float64, results []result, engines []engineDelta, s slo) cell {
	c := cell{Router: router, Load: load, Requests: len(results), Failures: map[string]int{}, EngineShare: map[string]float64{},
		SLOTTFT: seconds(s.ttft.Seconds()), SLOTBOT: seconds(s.tbot.Seconds())}
	var all, ttft, e2e []float64
	for _, r := range results {
		if !r.Served {
			c.Failed++
			c.Failures[r.Failure]++
			all = append(all, math.Inf(1))
			continue
		}
		c.Served++
		if s.met(r) {
			c.Goodput++
		}
		all = append(all, r.TTFT.Seconds())
		ttft = append(ttft, r.TTFT.Seconds())
		e2e = append(e2e, r.E2E.Seconds())
	}
	for _, xs := range [][]float64{all, ttft, e2e} {
		slices.Sort(xs)
	}
	c.TTFTAllP50, c.TTFTAllP90, c.TTFTAllP99 = quantile(all, 0.5), quantile(all, 0.9), quantile(all, 0.99)
	c.TTFTServedP50, c.TTFTServedP90, c.TTFTServedP99 = quantile(ttft, 0.5), quantile(ttft, 0.9), quantile(ttft, 0.99)
	c.E2EP50, c.E2EP90, c.E2EP99 = quantile(e2e, 0.5), quantile(e2e, 0.9), quantile(e2e, 0.99)
	var done, hits, queries float64
	for _, e := range engines {
		done += e.succeeded
		hits += e.prefixHits
		queries += e.prefixQueries
	}
	for _, e := range engines {
		if done > 0 {
			c.EngineShare[e.id] = math.Round(e.succeeded/done*1000) / 1000
		}
	}
	if queries > 0 {
		c.PrefixCacheHitRate = math.Round(hits/queries*10000) / 10000
	}
	return c
}

// switchyard is Switchyard's router name in the cells; every other router
// is a proxy it is compared with.
const switchyard = "switchyard"

// ratio compares Switchyard with the best proxy on one metric at one load.
type ratio struct {
	Load       float64 `json:"load"`
	Metric     string  `json:"metric"`
	Switchyard seconds `json:"switchyard"`
	BestProxy  string  `json:"best_proxy"`
	Best       seconds `json:"best"`
	// Ratio is switchyard / best (null when either is +Inf or best is 0).
	Ratio seconds `json:"ratio"`
}

// ratioMetrics are the metrics compared; lower is better for all but
// those marked higher.
var ratioMetrics = []struct {
	name   string
	higher bool
	get    func(cell) float64
}{
	{"ttft_all_p50", false, func(c cell) float64 { return float64(c.TTFTAllP50) }},
	{"ttft_all_p90", false, func(c cell) float64 { return float64(c.TTFTAllP90) }},
	{"ttft_all_p99", false, func(c cell) float64 { return float64(c.TTFTAllP99) }},
	{"ttft_served_p99", false, func(c cell) float64 { return float64(c.TTFTServedP99) }},
	{"e2e_p50", false, func(c cell) float64 { return float64(c.E2EP50) }},
	{"e2e_p99", false, func(c cell) float64 { return float64(c.E2EP99) }},
	{"served", true, func(c cell) float64 { return float64(c.Served) }},
	{"goodput", true, func(c cell) float64 { return float64(c.Goodput) }},
	{"prefix_cache_hit_rate", true, func(c cell) float64 { return c.PrefixCacheHitRate }},
}

// byLoadRouter orders cells by load, then router.
func byLoadRouter(a, b cell) int {
	return cmp.Or(cmp.Compare(a.Load, b.Load), strings.Compare(a.Router, b.Router))
}

// report is the combined JSON: every cell, then the ratios.
type report struct {
	Cells  []cell  `json:"cells"`
	Ratios []ratio `json:"ratios"`
}

// buildReport sorts the cells by load then router and compares
// Switchyard with the best proxy (the lowest value, or the highest for
// served and hit rate; ties to the first by name) at every load that has
// both.
func buildReport(cells []cell) report {
	slices.SortStableFunc(cells, byLoadRouter)
	rep := report{Cells: cells, Ratios: []ratio{}}
	for i := 0; i < len(cells); {
		j := i
		for j < len(cells) && cells[j].Load == cells[i].Load {
			j++
		}
		load := cells[i:j]
		i = j
		sy := slices.IndexFunc(load, func(c cell) bool { return c.Router == switchyard })
		if sy < 0 {
			continue
		}
		for _, m := range ratioMetrics {
			best := -1
			for k, c := range load {
				if c.Router == switchyard {
					continue
				}
				if v := m.get(c); best < 0 || (m.higher && v > m.get(load[best])) || (!m.higher && v < m.get(load[best])) {
					best = k
				}
			}
			if best < 0 {
				break
			}
			s, b := m.get(load[sy]), m.get(load[best])
			r := seconds(math.Inf(1))
			if !math.IsInf(s, 0) && !math.IsInf(b, 0) && b != 0 {
				r = seconds(math.Round(s/b*1000) / 1000)
			}
			rep.Ratios = append(rep.Ratios, ratio{Load: load[sy].Load, Metric: m.name, Switchyard: seconds(s), BestProxy: load[best].Router, Best: seconds(b), Ratio: r})
		}
	}
	return rep
}

// printReport writes the cells as a table and the ratios below it.
func printReport(w io.Writer, rep report) {
	if len(rep.Cells) == 0 {
		fmt.Fprintln(w, "no cells")
		return
	}
	c0 := rep.Cells[0]
	fmt.Fprintf(w, "trace %s, %d requests, prompts cut to %d tokens, outputs to %d; capacity %.2f rps; latencies in seconds, inf = failed\n",
		c0.Trace, c0.Requests, c0.MaxPromptTokens, c0.MaxOutputTokens, c0.CapacityRPS)
	fmt.Fprintf(w, "goodput: served with TTFT <= %gs and mean time between tokens <= %gs\n", float64(c0.SLOTTFT), float64(c0.SLOTBOT))
	fmt.Fprintf(w, "%-11s %5s %6s %6s %7s  %-22s %-22s %-22s %6s  %s\n", "router", "load", "served", "failed", "goodput",
		"ttft all p50/90/99", "ttft served p50/90/99", "e2e p50/90/99", "hit", "share per engine")
	for _, c := range rep.Cells {
		fmt.Fprintf(w, "%-11s %5.2f %6d %6d %7d  %-22s %-22s %-22s %6.3f  %s\n", c.Router, c.Load, c.Served, c.Failed, c.Goodput,
			triple(c.TTFTAllP50, c.TTFTAllP90, c.TTFTAllP99), triple(c.TTFTServedP50, c.TTFTServedP90, c.TTFTServedP99),
			triple(c.E2EP50, c.E2EP90, c.E2EP99), c.PrefixCacheHitRate, shares(c.EngineShare))
	}
	for _, c := range rep.Cells {
		if len(c.Failures) > 0 {
			fmt.Fprintf(w, "failures %s %.2f: %s\n", c.Router, c.Load, failures(c.Failures))
		}
	}
	if len(rep.Ratios) == 0 {
		return
	}
	fmt.Fprintln(w, "\nswitchyard / best proxy (below 1 is better for latencies, above 1 for served and hit rate)")
	for _, r := range rep.Ratios {
		fmt.Fprintf(w, "%5.2f  %-22s switchyard %-8s best %-8s (%s)  ratio %s\n", r.Load, r.Metric, num(r.Switchyard), num(r.Best), r.BestProxy, num(r.Ratio))
	}
}

func num(s seconds) string {
	if math.IsInf(float64(s), 0) {
		return "inf"
	}
	return strconv.FormatFloat(float64(s), 'f', -1, 64)
}

func triple(a, b, c seconds) string {
	f := func(s seconds) string {
		if math.IsInf(float64(s), 0) {
			return "inf"
		}
		return strconv.FormatFloat(float64(s), 'f', 2, 64)
	}
	return f(a) + "/" + f(b) + "/" + f(c)
}

func shares(m map[string]float64) string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s %.2f", id, m[id])
	}
	return strings.Join(parts, " ")
}

func failures(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// readCells reads cells' JSON files (live replay's, or live models
// replay's with T modelsCell).
func readCells[T any](paths []string) ([]T, error) {
	var out []T
	for _, p := range paths {
		c, err := readCell[T](p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func readCell[T any](path string) (T, error) {
	var c T
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("reading cell: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("decoding cell %s: %w", path, err)
	}
	return c, nil
}

// requestLine is one request's outcome in replay's -requests file.
type requestLine struct {
	ArrivalS     float64 `json:"arrival_s"`
	Session      string  `json:"session"`
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Served       bool    `json:"served"`
	Failure      string  `json:"failure,omitempty"`
	TTFTS        float64 `json:"ttft_s,omitempty"`
	E2ES         float64 `json:"e2e_s,omitempty"`
	Chunks       int     `json:"chunks,omitempty"`
	Engine       string  `json:"engine,omitempty"`
}

// writeRequestLines writes each request of sched with its result, in
// arrival order, one JSON object a line.
func writeRequestLines(path string, sched []request, results []result) error {
	var b []byte
	for i, r := range sched {
		res := results[i]
		line, err := json.Marshal(requestLine{
			ArrivalS: r.Arrival.Seconds(), Session: r.Session, PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens,
			Served: res.Served, Failure: res.Failure, TTFTS: res.TTFT.Seconds(), E2ES: res.E2E.Seconds(), Chunks: res.Chunks, Engine: res.Engine,
		})
		if err != nil {
			return fmt.Errorf("encoding request %d: %w", i, err)
		}
		b = append(append(b, line...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
