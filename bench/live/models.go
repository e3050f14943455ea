package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The multi-model head-to-head (bench/models/run.sh): the same trace, each
// conversation given a model or LoRA adapter by a hash of its session, sent
// with `model` in the body and in the X-Model header a proxy routes on.
//
//	live models capacity -mix ... -target URL   closed loop on the mix; prints completions per second
//	live models replay -mix ... -target URL ...  open loop at load x capacity; one cell's JSON
//	live models tally -cell F -logs id=path,...  adds the engines' adapter loads (their stop lines) to a cell
//	live models report -out all.json cell.json... bench/live's table and ratios, then the multi-model columns

// modelHeader is the header the client sends beside the body's model: a
// proxy that cannot read the body routes on it.
const modelHeader = "X-Model"

func modelsCmd(ctx context.Context, args []string) error {
	if len(args) < 1 {
		return errors.New("usage: live models capacity|replay|tally|report [flags]")
	}
	switch cmd, args := args[0], args[1:]; cmd {
	case "capacity":
		return modelsCapacityCmd(ctx, args)
	case "replay":
		return modelsReplayCmd(ctx, args)
	case "tally":
		return modelsTallyCmd(args)
	case "report":
		return modelsReportCmd(args, os.Stdout)
	default:
		return fmt.Errorf("unknown models command %q (capacity, replay, tally, report)", cmd)
	}
}

// mix is the popularity of the models a conversation may use: each id's
// share of the conversations.
type mix struct {
	ids    []string
	shares []float64 // sum to 1, in the order of ids
	// adapters are the ids that are LoRA adapters (their requests count
	// in the adapter-hit rate).
	adapters map[string]bool
}

// parseMix reads "id=share,...", the adapters "a1,a2,..." and the share
// of all conversations that use an adapter, spread over the adapters by
// Zipf's law with exponent s (the k-th adapter's share proportional to
// 1/k^s). Shares are normalised to sum to 1.
func parseMix(models, adapters string, adapterShare, s float64) (mix, error) {
	m := mix{adapters: map[string]bool{}}
	add := func(id string, share float64) error {
		if id == "" || slices.Contains(m.ids, id) || !(share >= 0) || math.IsInf(share, 0) {
			return fmt.Errorf("model %q share %v: want a new id and a finite share >= 0", id, share)
		}
		m.ids, m.shares = append(m.ids, id), append(m.shares, share)
		return nil
	}
	for _, part := range strings.Split(models, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, v, ok := strings.Cut(part, "=")
		share, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return mix{}, fmt.Errorf("-mix: %q is not id=share", part)
		}
		if err := add(id, share); err != nil {
			return mix{}, fmt.Errorf("-mix: %w", err)
		}
	}
	var names []string
	for _, a := range strings.Split(adapters, ",") {
		if a = strings.TrimSpace(a); a != "" {
			names = append(names, a)
		}
	}
	if len(names) > 0 {
		if !(adapterShare > 0) || !(s >= 0) || math.IsInf(s, 0) {
			return mix{}, fmt.Errorf("-adapters: want -adapter-share > 0 and -zipf >= 0, got %v and %v", adapterShare, s)
		}
		var h float64
		for k := range names {
			h += 1 / math.Pow(float64(k+1), s)
		}
		for k, a := range names {
			if err := add(a, adapterShare/math.Pow(float64(k+1), s)/h); err != nil {
				return mix{}, fmt.Errorf("-adapters: %w", err)
			}
			m.adapters[a] = true
		}
	}
	var sum float64
	for _, v := range m.shares {
		sum += v
	}
	if !(sum > 0) {
		return mix{}, errors.New("-mix and -adapters: no model has a positive share")
	}
	for i := range m.shares {
		m.shares[i] /= sum
	}
	return m, nil
}

// of returns the model of a conversation: a point in [0, 1) from a hash
// of its session, placed on the cumulative shares.
func (m mix) of(session string) string {
	h := fnv.New64a()
	_, _ = io.WriteString(h, session)
	// FNV-1a leaves the last bytes in the low bits only; splitmix64's
	// finaliser spreads them to the high bits taken here.
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	u := float64(x>>11) / (1 << 53)
	var acc float64
	for i, v := range m.shares {
		if acc += v; u < acc {
			return m.ids[i]
		}
	}
	return m.ids[len(m.ids)-1]
}

// mixFlags are the flags that choose each conversation's model.
type mixFlags struct {
	models, adapters   string
	adapterShare, zipf float64
}

func (f *mixFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.models, "mix", "", "base models and their shares of the conversations: id=share,...")
	fs.StringVar(&f.adapters, "adapters", "", "LoRA adapter ids, most popular first, comma-separated")
	fs.Float64Var(&f.adapterShare, "adapter-share", 0, "share of the conversations that use an adapter (with -mix's shares; all normalised)")
	fs.Float64Var(&f.zipf, "zipf", 1, "Zipf exponent of the adapters' popularity (the k-th adapter's share proportional to 1/k^s)")
}

// modelRequests are the workload's requests, each naming its
// conversation's model, and the mix that chose them.
type modelRequests struct {
	requests
	mix mix
}

// loadModelRequests renders the first w.n trace requests, each with its
// conversation's model in the body.
func loadModelRequests(w workloadFlags, f mixFlags) (modelRequests, error) {
	m, err := parseMix(f.models, f.adapters, f.adapterShare, f.zipf)
	if err != nil {
		return modelRequests{}, err
	}
	reqs, err := loadRequests(w, m.of)
	if err != nil {
		return modelRequests{}, err
	}
	return modelRequests{requests: reqs, mix: m}, nil
}

// modelHeaderTransport adds X-Model to every request: the model of the
// conversation its session header names, as a client that sets the header
// beside the body does.
type modelHeaderTransport struct {
	next http.RoundTripper
	mix  mix
}

func (t modelHeaderTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s := r.Header.Get(sessionHeader)
	if s == "" {
		return t.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set(modelHeader, t.mix.of(s))
	return t.next.RoundTrip(r)
}

func newModelClient(w workloadFlags, m mix) *client {
	c := newClient(w)
	c.http.Transport = modelHeaderTransport{next: c.http.Transport, mix: m}
	return c
}

func modelsCapacityCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("models capacity", flag.ContinueOnError)
	var w workloadFlags
	var f mixFlags
	var cf capacityFlags
	w.register(fs)
	f.register(fs)
	cf.register(fs, "base URL the closed loop sends to (a proxy routing each model to its engines by least connections)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	reqs, err := loadModelRequests(w, f)
	if err != nil {
		return err
	}
	return cf.run(ctx, newModelClient(w, reqs.mix), reqs.requests)
}

// modelsCell is one router at one load on the multi-model fleet: bench/live's
// cell and what only a multi-model fleet has.
type modelsCell struct {
	cell
	// NotServing counts the requests answered 404: by this bench's
	// engines, model_not_found, a request sent to an engine that does not
	// serve its model (every model is served by some engine).
	NotServing int `json:"not_serving"`
	// Models are the per-model measures, by model id.
	Models map[string]modelStats `json:"models"`
	// AdapterRequests and AdapterLoads are the engines' admitted adapter
	// requests and adapter loads (their stop lines, live models tally);
	// AdapterHitRate is 1 - loads/requests, null before the tally.
	AdapterRequests int64    `json:"adapter_requests"`
	AdapterLoads    int64    `json:"adapter_loads"`
	AdapterHitRate  *float64 `json:"adapter_hit_rate"`
	// AdapterEngines are the engines whose adapters are LoRA adapters of
	// the fleet (the tally counts only theirs).
	AdapterEngines []string `json:"adapter_engines"`
	// MaxRunningAdapters is, per engine with adapters, the most adapters
	// its vllm:lora_requests_info listed as running in one scrape during
	// the replay, and MaxLoRA the max_lora it states.
	MaxRunningAdapters map[string]int `json:"max_running_adapters"`
	MaxLoRA            map[string]int `json:"max_lora"`
	LoRAScrapes        int            `json:"lora_scrapes"`
}

// modelStats are one model's requests in a cell.
type modelStats struct {
	Requests int     `json:"requests"`
	Served   int     `json:"served"`
	Goodput  int     `json:"goodput"`
	TTFTP50  seconds `json:"ttft_all_p50"`
	TTFTP90  seconds `json:"ttft_all_p90"`
}

func modelsReplayCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("models replay", flag.ContinueOnError)
	var w workloadFlags
	var f mixFlags
	var rf replayFlags
	w.register(fs)
	f.register(fs)
	rf.register(fs, "live models capacity", "engines whose /metrics are read before and after and watched for adapters: id=url,...")
	every := fs.Duration("lora-scrape", 500*time.Millisecond, "how often the engines' vllm:lora_requests_info is read during the replay")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := rf.validate("models replay"); err != nil {
		return err
	}
	if *every <= 0 {
		return errors.New("models replay needs a positive -lora-scrape")
	}
	reqs, err := loadModelRequests(w, f)
	if err != nil {
		return err
	}
	c := newModelClient(w, reqs.mix)
	var lw loraWatch
	watch := func(ctx context.Context, eng []engine) func() {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lw = watchLoRA(ctx, c.http, eng, *every)
		}()
		return func() { cancel(); <-done }
	}
	cl, results, err := rf.run(ctx, c, w, reqs.requests, "; requests per model "+countModels(reqs.models), watch)
	if err != nil {
		return err
	}
	mc := modelsCell{cell: cl, Models: perModel(reqs.models, results, rf.slo),
		MaxRunningAdapters: lw.maxRunning, MaxLoRA: lw.maxLoRA, LoRAScrapes: lw.scrapes}
	for _, r := range results {
		if r.Failure == "status 404" {
			mc.NotServing++
		}
	}
	return writeJSON(rf.out, mc)
}

// countModels is "id n, id n, ..." by descending count.
func countModels(models []string) string {
	n := map[string]int{}
	for _, m := range models {
		n[m]++
	}
	ids := make([]string, 0, len(n))
	for id := range n {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return n[ids[i]] > n[ids[j]] || n[ids[i]] == n[ids[j]] && ids[i] < ids[j] })
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s %d", id, n[id])
	}
	return strings.Join(parts, ", ")
}

// perModel summarises each model's results (models[i] is results[i]'s).
func perModel(models []string, results []result, s slo) map[string]modelStats {
	ttft := map[string][]float64{}
	out := map[string]modelStats{}
	for i, r := range results {
		m := models[i]
		st := out[m]
		st.Requests++
		v := math.Inf(1)
		if r.Served {
			st.Served++
			v = r.TTFT.Seconds()
			if s.met(r) {
				st.Goodput++
			}
		}
		ttft[m] = append(ttft[m], v)
		out[m] = st
	}
	for m, xs := range ttft {
		slices.Sort(xs)
		st := out[m]
		st.TTFTP50, st.TTFTP90 = quantile(xs, 0.5), quantile(xs, 0.9)
		out[m] = st
	}
	return out
}

// loraWatch is what the engines' vllm:lora_requests_info showed.
type loraWatch struct {
	maxRunning, maxLoRA map[string]int
	scrapes             int
}

// watchLoRA reads every engine's vllm:lora_requests_info every period
// until ctx is done and keeps, per engine that has the series, the most
// adapters listed as running at once and its max_lora. A failed scrape
// is skipped (the replay's own scrapes report a dead engine).
func watchLoRA(ctx context.Context, hc *http.Client, engines []engine, every time.Duration) loraWatch {
	w := loraWatch{maxRunning: map[string]int{}, maxLoRA: map[string]int{}}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, e := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				running, maxLoRA, ok := scrapeLoRA(ctx, hc, e.url+"/metrics")
				if !ok {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				w.maxRunning[e.id] = max(w.maxRunning[e.id], running)
				w.maxLoRA[e.id] = maxLoRA
			}()
		}
		wg.Wait()
		w.scrapes++
		select {
		case <-ctx.Done():
			return w
		case <-t.C:
		}
	}
}

// scrapeLoRA returns the number of running adapters and max_lora of url's
// vllm:lora_requests_info (the series with the latest value, the current
// one as vLLM sets it); ok is false without the series or on an error.
func scrapeLoRA(ctx context.Context, hc *http.Client, url string) (running, maxLoRA int, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, false
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, false
	}
	latest := math.Inf(-1)
	for _, m := range fams["vllm:lora_requests_info"].GetMetric() {
		if v := m.GetGauge().GetValue(); v >= latest {
			latest, ok = v, true
			running, maxLoRA = 0, 0
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "running_lora_adapters":
					for _, a := range strings.Split(l.GetValue(), ",") {
						if strings.TrimSpace(a) != "" {
							running++
						}
					}
				case "max_lora":
					maxLoRA, _ = strconv.Atoi(l.GetValue())
				}
			}
		}
	}
	return running, maxLoRA, ok
}

func modelsTallyCmd(args []string) error {
	fs := flag.NewFlagSet("models tally", flag.ContinueOnError)
	path := fs.String("cell", "", "the cell's JSON (live models replay -out), rewritten with the tally")
	logs := fs.String("logs", "", "engines whose adapters are the fleet's LoRA adapters and their logs: id=path,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mc, err := readCell[modelsCell](*path)
	if err != nil {
		return err
	}
	eng, err := parseEngines(*logs)
	if err != nil {
		return err
	}
	mc.AdapterRequests, mc.AdapterLoads, mc.AdapterEngines = 0, 0, nil
	for _, e := range eng {
		reqs, loads, err := stopLine(e.url)
		if err != nil {
			return fmt.Errorf("engine %s: %w", e.id, err)
		}
		mc.AdapterRequests += reqs
		mc.AdapterLoads += loads
		mc.AdapterEngines = append(mc.AdapterEngines, e.id)
	}
	if mc.AdapterRequests > 0 {
		hit := math.Round((1-float64(mc.AdapterLoads)/float64(mc.AdapterRequests))*10000) / 10000
		mc.AdapterHitRate = &hit
	}
	return writeJSON(*path, mc)
}

// errNoStopLine: the engine's log has no stop line (it was killed, or
// predates the line).
var errNoStopLine = errors.New(`no "enginesim stopped" line with lora_requests and lora_loads`)

// stopLine reads the adapter totals from the last `enginesim stopped`
// line of an enginesim log (slog's text form).
func stopLine(path string) (reqs, loads int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("opening log: %w", err)
	}
	defer f.Close()
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="enginesim stopped"`) {
			continue
		}
		var r, l int64
		var gotR, gotL bool
		for _, field := range strings.Fields(line) {
			k, v, _ := strings.Cut(field, "=")
			n, perr := strconv.ParseInt(v, 10, 64)
			switch {
			case perr != nil:
			case k == "lora_requests":
				r, gotR = n, true
			case k == "lora_loads":
				l, gotL = n, true
			}
		}
		if gotR && gotL && l >= 0 && r >= l {
			reqs, loads, found = r, l, true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("reading log: %w", err)
	}
	if !found {
		return 0, 0, errNoStopLine
	}
	return reqs, loads, nil
}

func modelsReportCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("models report", flag.ContinueOnError)
	out := fs.String("out", "", "file the combined JSON is written to (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cells, err := readCells[modelsCell](fs.Args())
	if err != nil {
		return err
	}
	rep := buildModelsReport(cells)
	printReport(w, rep.report)
	printModels(w, rep.Cells)
	if *out == "" {
		return nil
	}
	return writeJSON(*out, rep)
}

// modelsReport is bench/live's report (its cells and ratios) with the
// multi-model cells beside it.
type modelsReport struct {
	report
	Cells []modelsCell `json:"cells"`
}

func buildModelsReport(cells []modelsCell) modelsReport {
	slices.SortStableFunc(cells, func(a, b modelsCell) int { return byLoadRouter(a.cell, b.cell) })
	plain := make([]cell, len(cells))
	for i, c := range cells {
		plain[i] = c.cell
	}
	return modelsReport{report: buildReport(plain), Cells: cells}
}

// printModels writes the multi-model columns per cell, then each model's
// TTFT per cell.
func printModels(w io.Writer, cells []modelsCell) {
	if len(cells) == 0 {
		return
	}
	fmt.Fprintln(w, "\nmulti-model: 404 = answered model_not_found (sent to an engine that does not serve the model); adapter hit = 1 - loads/adapter requests on the adapter engines; max adapters running / max_lora per adapter engine (lora_requests_info scrapes)")
	fmt.Fprintf(w, "%-11s %5s %5s %11s  %s\n", "router", "load", "404", "adapter hit", "max adapters running / max_lora")
	for _, c := range cells {
		hit := "n/a"
		if c.AdapterHitRate != nil {
			hit = fmt.Sprintf("%.3f (%d/%d)", *c.AdapterHitRate, c.AdapterRequests-c.AdapterLoads, c.AdapterRequests)
		}
		ids := make([]string, 0, len(c.MaxLoRA))
		for id := range c.MaxLoRA {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = fmt.Sprintf("%s %d/%d", id, c.MaxRunningAdapters[id], c.MaxLoRA[id])
		}
		fmt.Fprintf(w, "%-11s %5.2f %5d %11s  %s (%d scrapes)\n", c.Router, c.Load, c.NotServing, hit, strings.Join(parts, " "), c.LoRAScrapes)
	}
	fmt.Fprintln(w, "\nper model: requests, served, goodput, TTFT all p50/p90")
	for _, c := range cells {
		ids := make([]string, 0, len(c.Models))
		for id := range c.Models {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		parts := make([]string, len(ids))
		for i, id := range ids {
			m := c.Models[id]
			parts[i] = fmt.Sprintf("%s %d/%d/%d %s", id, m.Requests, m.Served, m.Goodput, pair(m.TTFTP50, m.TTFTP90))
		}
		fmt.Fprintf(w, "%-11s %5.2f  %s\n", c.Router, c.Load, strings.Join(parts, "; "))
	}
}

func pair(a, b seconds) string {
	t := triple(a, b, a)
	return t[:strings.LastIndexByte(t, '/')]
}
