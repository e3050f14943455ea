package engineserver

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// vLLM's histogram buckets (vllm/v1/metrics/loggers.py).
func ttftBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
}

func itlBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
}

func e2eBuckets() []float64 {
	return []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
}

// metrics are one Service's Prometheus metrics, with vLLM's names so that
// scrapers written for vLLM work unchanged. Unless full, only what vLLM
// exposes is registered (the others are still counted, unexported).
type metrics struct {
	ttft     prometheus.Histogram
	itl      prometheus.Histogram
	e2e      prometheus.Histogram
	queue    prometheus.Histogram
	prefill  prometheus.Histogram
	success  *prometheus.CounterVec // finished_reason
	rejected *prometheus.CounterVec // reason
	canceled prometheus.Counter
	engine   *engineCollector
	full     bool
}

func newMetrics(model string, info engineInfo, full bool) *metrics {
	ml := prometheus.Labels{"model_name": model}
	return &metrics{
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds.",
			ConstLabels: ml, Buckets: ttftBuckets(),
		}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:inter_token_latency_seconds", Help: "Histogram of inter-token latency in seconds.",
			ConstLabels: ml, Buckets: itlBuckets(),
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:e2e_request_latency_seconds", Help: "Histogram of end to end request latency in seconds.",
			ConstLabels: ml, Buckets: e2eBuckets(),
		}),
		queue: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:request_queue_time_seconds", Help: "Histogram of time spent in WAITING phase for request.",
			ConstLabels: ml, Buckets: e2eBuckets(),
		}),
		prefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:request_prefill_time_seconds", Help: "Histogram of time spent in PREFILL phase for request.",
			ConstLabels: ml, Buckets: e2eBuckets(),
		}),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: ml,
		}, []string{"finished_reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_enginesim_requests_rejected_total", Help: "Completion requests refused before reaching the engine model, by reason (invalid, too_long, queue_full, fault, stopped).", ConstLabels: ml,
		}, []string{"reason"}),
		canceled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_enginesim_requests_canceled_total", Help: "Requests canceled by client disconnect before finishing.", ConstLabels: ml,
		}),
		engine: &engineCollector{model: model, info: info, full: full},
		full:   full,
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	vllm := []prometheus.Collector{m.ttft, m.itl, m.e2e, m.queue, m.prefill, m.success, m.engine}
	if !m.full {
		return vllm
	}
	return append(vllm, m.rejected, m.canceled)
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range m.collectors() {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	// The counters' label values, exported at 0 from the start (vLLM
	// does the same for finished_reason).
	for _, f := range []string{"stop", "length"} { // finishReason
		m.success.WithLabelValues(f)
	}
	for _, r := range []string{"invalid", "too_long", "queue_full", "fault", "stopped"} { // handlers.go, reject
		m.rejected.WithLabelValues(r)
	}
	return nil
}

// engineInfo is the static configuration exported as info metrics.
type engineInfo struct {
	id        string
	gpuClass  string
	replicas  int
	blockSize int
	kvBlocks  int
	maxSeqs   int
	adapters  []string // LoRA adapter names; adapter id i+1 is adapters[i]
	maxLoRAs  int
}

// engineCollector exports the model's gauges and counters from the last
// engine.Stats the driver published.
type engineCollector struct {
	model string
	info  engineInfo
	full  bool // also enginesim's own gauges
	mu    sync.Mutex
	st    engine.Stats
	// running and waiting adapters (ids) and when they last changed, for
	// vllm:lora_requests_info
	running, waiting []int
	loraAt           float64
}

// setAdapters records the adapters with running and waiting requests.
func (c *engineCollector) setAdapters(running, waiting []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loraAt != 0 && slices.Equal(running, c.running) && slices.Equal(waiting, c.waiting) {
		return
	}
	c.running, c.waiting = running, waiting
	c.loraAt = float64(time.Now().UnixNano()) / 1e9
}

// names returns the adapter names of ids, comma-joined, as vLLM labels
// them.
func (c *engineCollector) names(ids []int) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		if id >= 1 && id <= len(c.info.adapters) {
			b.WriteString(c.info.adapters[id-1])
		}
	}
	return b.String()
}

func (c *engineCollector) set(st engine.Stats) {
	c.mu.Lock()
	c.st = st
	c.mu.Unlock()
}

func (c *engineCollector) get() engine.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

func (c *engineCollector) desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, prometheus.Labels{"model_name": c.model})
}

// Describe sends nothing: the collector is unchecked, so its descriptors
// are built on each Collect.
func (c *engineCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.get()
	gauge := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.desc(name, help), prometheus.GaugeValue, v)
	}
	counter := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.desc(name, help), prometheus.CounterValue, v)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(st.Running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(st.Waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", st.KVUsage())
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", float64(st.PrefixQueryTokens))
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", float64(st.PrefixHitTokens))
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", float64(st.PromptTokens))
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", float64(st.GenerationTokens))
	counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine (the model never preempts).", 0)
	ch <- prometheus.MustNewConstMetric(
		c.desc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
			"block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "num_gpu_blocks"),
		prometheus.GaugeValue, 1,
		strconv.Itoa(c.info.blockSize), "auto", "True", "0.9", strconv.Itoa(c.info.kvBlocks*c.info.replicas))
	if c.info.maxLoRAs > 0 {
		c.mu.Lock()
		run, wait, at := c.names(c.running), c.names(c.waiting), c.loraAt
		c.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(
			c.desc("vllm:lora_requests_info", "Running stats on lora requests.", "max_lora", "running_lora_adapters", "waiting_lora_adapters"),
			prometheus.GaugeValue, at, strconv.Itoa(c.info.maxLoRAs), run, wait)
	}
	if !c.full {
		return
	}
	gauge("switchyard_enginesim_max_num_seqs", "Maximum number of concurrently running requests (max_num_seqs times replicas).", float64(c.info.maxSeqs*c.info.replicas))
	gauge("switchyard_enginesim_replicas", "Number of engine replicas behind this endpoint.", float64(c.info.replicas))
	counter("switchyard_enginesim_kv_blocks_stored_total", "KV-cache blocks that entered the prefix cache (a BlockStored hash each).", float64(st.KVBlocksStored))
	counter("switchyard_enginesim_kv_blocks_evicted_total", "Prefix-cache blocks evicted to make room (a BlockRemoved hash each).", float64(st.KVBlocksEvicted))
	if c.info.maxLoRAs > 0 {
		counter("switchyard_enginesim_lora_requests_total", "Requests of a LoRA adapter admitted to a batch.", float64(st.LoRARequests))
		counter("switchyard_enginesim_lora_loads_total", "LoRA adapters loaded onto the GPU (an admitted adapter request that was not loaded).", float64(st.LoRALoads))
	}
	ch <- prometheus.MustNewConstMetric(
		c.desc("switchyard_enginesim_info", "Simulated engine identity.", "engine_id", "gpu_class"),
		prometheus.GaugeValue, 1, c.info.id, c.info.gpuClass)
}
