package agent

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Metric names accepted for each quantity, newest first: vLLM (current and
// deprecated names), SGLang, TensorRT-LLM, TGI, Dynamo, and enginesim's
// own gauges (see docs/agent.md for the table). Counters are matched with
// and without the _total suffix.
func names(q string) []string {
	switch q {
	case "running":
		return []string{"vllm:num_requests_running", "sglang:num_running_reqs", "trtllm_num_requests_running", "tgi_batch_current_size", "dynamo_frontend_inflight_requests"}
	case "waiting":
		return []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "trtllm_num_requests_waiting", "tgi_queue_size", "dynamo_frontend_queued_requests"}
	case "kv":
		return []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "trtllm_kv_cache_utilization"}
	case "hit_rate":
		// Engines without prefix-cache counters export a hit-rate gauge.
		return []string{"vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate", "trtllm_kv_cache_hit_rate"}
	case "hits":
		return []string{"vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits", "sglang:cached_tokens"}
	case "queries":
		return []string{"vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"}
	case "prompt":
		return []string{"vllm:prompt_tokens", "sglang:prompt_tokens"}
	case "generation":
		return []string{"vllm:generation_tokens", "sglang:generation_tokens"}
	case "success":
		return []string{"vllm:request_success", "sglang:num_requests", "tgi_request_success"}
	case "ttft":
		return []string{"vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds", "trtllm_time_to_first_token_seconds", "dynamo_frontend_time_to_first_token_seconds"}
	case "itl":
		return []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds", "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds", "trtllm_time_per_output_token_seconds", "dynamo_frontend_inter_token_latency_seconds", "tgi_request_mean_time_per_token_duration"}
	case "e2e":
		return []string{"vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds", "trtllm_e2e_request_latency_seconds", "tgi_request_duration"}
	case "prompt_hist":
		// TGI counts tokens only in per-request histograms; their sums
		// are the token counters.
		return []string{"tgi_request_input_length"}
	case "generation_hist":
		return []string{"tgi_request_generated_tokens"}
	case "max_batch":
		// enginesim's gauge is max_num_seqs times replicas.
		return []string{"switchyard_enginesim_max_num_seqs", "vllm:max_num_seqs", "sglang:max_running_requests"}
	case "replicas":
		return []string{"switchyard_enginesim_replicas"}
	}
	return nil
}

// maxBatchLabels name a concurrent-request limit when they label an info
// metric (a family whose name ends in config_info, such as
// vllm:cache_config_info or vllm:scheduler_config_info).
var maxBatchLabels = [...]string{"max_num_seqs", "max_running_requests", "max_batch_size"}

// kvCapacityGauges state the KV-cache size in tokens as a gauge (SGLang).
var kvCapacityGauges = [...]string{"sglang:max_total_num_tokens"}

// maxKVCapacityTokens bounds a KV capacity read or configured (10^15
// tokens, far above any engine; larger values are mistakes).
const maxKVCapacityTokens = 1e15

// hist is a cumulative histogram: cum[i] observations at or below
// bounds[i], count in total.
type hist struct {
	bounds []float64
	cum    []float64
	sum    float64
	count  float64
}

// reading is one parsed scrape.
type reading struct {
	gauges   map[string]float64 // running, waiting, kv, hit_rate, max_batch, replicas
	counters map[string]float64 // hits, queries, prompt, generation, success
	hists    map[string]*hist   // ttft, itl, e2e, prompt_hist, generation_hist
	model    string
	// infoMaxBatch is the concurrent-request limit stated by an info
	// metric's label (summed over its series), zero if none.
	infoMaxBatch float64
	// kvCapacity is the KV-cache size in tokens the metrics state over
	// all of the engine's processes (see kvCapacity), zero if none.
	kvCapacity float64
	// adapters are the LoRA adapters with requests running or waiting
	// and maxLora the engine's adapter slots (models.go), if it says.
	adapters []string
	maxLora  uint32
}

// parse reads Prometheus text exposition format.
func parse(r io.Reader) (*reading, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	out := &reading{gauges: map[string]float64{}, counters: map[string]float64{}, hists: map[string]*hist{}}
	find := func(q string) *dto.MetricFamily {
		for _, n := range names(q) {
			for _, cand := range []string{n, n + "_total"} {
				if f := fams[cand]; f != nil && len(f.GetMetric()) > 0 {
					return f
				}
			}
		}
		return nil
	}
	for _, q := range []string{"running", "waiting", "kv", "hit_rate", "max_batch", "replicas"} {
		f := find(q)
		if f == nil {
			continue
		}
		var sum, n float64
		for _, m := range f.GetMetric() {
			v := value(m)
			if !finite(v) || v < 0 {
				continue
			}
			sum += v
			n++
			if out.model == "" {
				out.model = label(m, "model_name")
			}
		}
		if n == 0 || !finite(sum) {
			continue
		}
		if q == "kv" || q == "hit_rate" {
			sum /= n // a fraction per engine: average over series
		}
		out.gauges[q] = sum
	}
	for _, q := range []string{"hits", "queries", "prompt", "generation", "success"} {
		f := find(q)
		if f == nil {
			continue
		}
		var sum float64
		for _, m := range f.GetMetric() {
			if v := value(m); finite(v) && v >= 0 {
				sum += v
			}
		}
		if finite(sum) {
			out.counters[q] = sum
		}
	}
	for _, q := range []string{"ttft", "itl", "e2e", "prompt_hist", "generation_hist"} {
		f := find(q)
		if f == nil {
			continue
		}
		var h *hist
		for _, m := range f.GetMetric() {
			x := toHist(m.GetHistogram())
			if x == nil {
				continue
			}
			if h == nil {
				h = x
				continue
			}
			h.add(x)
		}
		if h != nil {
			out.hists[q] = h
		}
	}
	out.infoMaxBatch = infoMaxBatch(fams)
	out.kvCapacity = kvCapacity(fams)
	out.adapters, out.maxLora = loraState(fams)
	return out, nil
}

// kvCapacity returns the KV-cache size in tokens that the metrics state,
// summed over the engine's processes, or zero: SGLang's
// max_total_num_tokens gauge (one series per data-parallel rank; a series
// of a tensor- or pipeline-parallel rank other than 0 describes the same
// token pool as rank 0 and is skipped), else num_gpu_blocks × block_size
// from the labels of vLLM's cache_config_info (one series per engine
// core; a series whose labels are not numbers, such as "None" before the
// cache is sized, counts nothing).
func kvCapacity(fams map[string]*dto.MetricFamily) float64 {
	for _, n := range kvCapacityGauges {
		f := fams[n]
		if f == nil {
			continue
		}
		var sum float64
		for _, m := range f.GetMetric() {
			if !firstRank(m) {
				continue
			}
			if v := value(m); finite(v) && v >= 1 {
				sum += math.Round(v)
			}
		}
		if sum > 0 && sum <= maxKVCapacityTokens {
			return sum
		}
	}
	for _, n := range familiesEndingIn(fams, "cache_config_info") {
		var sum float64
		for _, m := range fams[n].GetMetric() {
			blocks, err1 := strconv.ParseFloat(label(m, "num_gpu_blocks"), 64)
			size, err2 := strconv.ParseFloat(label(m, "block_size"), 64)
			if err1 != nil || err2 != nil || !finite(blocks) || !finite(size) || blocks < 1 || size < 1 {
				continue
			}
			sum += float64(math.Round(blocks) * math.Round(size))
		}
		if sum > 0 && sum <= maxKVCapacityTokens {
			return sum
		}
	}
	return 0
}

// familiesEndingIn returns the names of fams ending in suffix, sorted
// (the same answer whatever the map order).
func familiesEndingIn(fams map[string]*dto.MetricFamily, suffix string) []string {
	var names []string
	for n := range fams {
		if strings.HasSuffix(n, suffix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// firstRank reports whether m is not a series of a tensor- or
// pipeline-parallel rank other than 0.
func firstRank(m *dto.Metric) bool {
	for _, l := range []string{"tp_rank", "pp_rank"} {
		if r := label(m, l); r != "" && r != "0" {
			return false
		}
	}
	return true
}

// infoMaxBatch sums the concurrent-request limit that info metrics state
// in a label (one series per engine process), or returns zero.
func infoMaxBatch(fams map[string]*dto.MetricFamily) float64 {
	for _, n := range familiesEndingIn(fams, "config_info") {
		var sum float64
		for _, m := range fams[n].GetMetric() {
			for _, l := range maxBatchLabels {
				v, err := strconv.ParseFloat(label(m, l), 64)
				if err == nil && finite(v) && v >= 1 {
					sum += math.Round(v)
					break
				}
			}
		}
		if sum > 0 && finite(sum) {
			return sum
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func toHist(h *dto.Histogram) *hist {
	if h == nil {
		return nil
	}
	out := &hist{sum: h.GetSampleSum(), count: float64(h.GetSampleCount())}
	if !finite(out.sum) || out.sum < 0 {
		return nil
	}
	bs := append([]*dto.Bucket(nil), h.GetBucket()...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].GetUpperBound() < bs[j].GetUpperBound() })
	for _, b := range bs {
		ub := b.GetUpperBound()
		if !finite(ub) || ub < 0 || (len(out.bounds) > 0 && ub <= out.bounds[len(out.bounds)-1]) {
			continue // +Inf, negative or duplicate bounds
		}
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.cum = append(out.cum, float64(b.GetCumulativeCount()))
	}
	return out
}

// add merges o into h when they share bounds (other series are ignored).
func (h *hist) add(o *hist) {
	if len(o.bounds) != len(h.bounds) {
		return
	}
	for i := range h.bounds {
		if h.bounds[i] != o.bounds[i] {
			return
		}
	}
	if !finite(h.sum + o.sum) {
		return
	}
	for i := range h.cum {
		h.cum[i] += o.cum[i]
	}
	h.sum += o.sum
	h.count += o.count
}

// counterDelta is cur−prev, or cur after a counter reset.
func counterDelta(cur, prev float64, hasPrev bool) float64 {
	if !hasPrev {
		return 0
	}
	if d := cur - prev; d >= 0 && finite(d) {
		return d
	}
	return cur
}

// histDelta returns the per-bucket counts of cur−prev (cur alone after a
// reset or a change of bounds; nil on the first scrape).
func histDelta(cur, prev *hist) *schemas.Histogram {
	if cur == nil || prev == nil {
		return nil
	}
	cum, sum, count := cur.cum, cur.sum, cur.count
	same := len(prev.bounds) == len(cur.bounds) && prev.count <= cur.count && prev.sum <= cur.sum
	for i := 0; same && i < len(cur.bounds); i++ {
		same = cur.bounds[i] == prev.bounds[i] && prev.cum[i] <= cur.cum[i]
	}
	if same {
		cum = make([]float64, len(cur.cum))
		for i := range cum {
			cum[i] = cur.cum[i] - prev.cum[i]
		}
		sum, count = cur.sum-prev.sum, cur.count-prev.count
	}
	if !finite(sum) || sum < 0 {
		sum = 0
	}
	out := &schemas.Histogram{Bounds: append([]float64(nil), cur.bounds...), Sum: sum, Count: uint64(math.Max(0, count))}
	var below float64
	for _, c := range cum {
		out.Counts = append(out.Counts, uint64(math.Max(0, c-below)))
		below = math.Max(below, c)
	}
	out.Counts = append(out.Counts, uint64(math.Max(0, count-below)))
	return out
}

// baseURL strips a trailing /metrics.
func baseURL(u string) string {
	u = strings.TrimRight(u, "/")
	return strings.TrimSuffix(u, "/metrics")
}
