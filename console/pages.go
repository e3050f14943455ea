package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

//go:embed templates static
var files embed.FS

// pageNames are the pages; each has templates/NAME.html defining
// "content", rendered inside templates/layout.html.
var pageNames = []string{"overview", "cluster", "engines", "engine", "explain", "diff", "pipeline", "error"}

var funcs = template.FuncMap{
	"pct":      func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) },
	"f1":       func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f2":       func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"f3":       func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"f4":       func(v float64) string { return fmt.Sprintf("%.4f", v) },
	"sign":     func(v float64) string { return fmt.Sprintf("%+.4f", v) },
	"ms":       unixMs,
	"ver":      func(v uint64) string { return unixMs(int64(v)) },
	"age":      fmtAge,
	"join":     strings.Join,
	"observed": observedOf,
	"health":   healthName, // inputs.go
}

// parsePages parses every page with the layout.
func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parsing page %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// unixMs formats a Unix-ms time as a UTC clock time ("-" for 0).
func unixMs(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// fmtAge formats a duration for a person: "3.2s", "4m05s".
func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		return "in the future (" + (-d).Round(time.Millisecond).String() + ")"
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return d.Round(time.Minute).String()
	}
}

// layout is what every page gets.
type layout struct {
	Title   string
	Nav     string
	Base    string
	Refresh int
	Now     string
	Err     string
	// Banners: the clusters whose gateways are rejecting (see
	// rates.Rejecting), shown on every page.
	Banners []banner
	Body    any
}

// banner is one cluster whose gateways answered 429 to more than
// bannerRatio of the last minute's requests.
type banner struct {
	Cluster string
	Rates   rates
}

// banners lists the clusters whose gateways are rejecting now, from the
// routing events (none without Kafka).
func (c *Console) banners(now time.Time) []banner {
	if c.cfg.Kafka == nil {
		return nil
	}
	var out []banner
	for _, id := range c.live.clusterIDs() {
		if r, _ := c.live.clusterRates(id, now); r.Rejecting() {
			out = append(out, banner{Cluster: id, Rates: r})
		}
	}
	return out
}

// observed is what a snapshot's demand estimate says was offered and
// rejected in the window the plan was made from (explain's offered and
// rejected lines).
type observed struct {
	Known                                   bool
	OfferedRPS, ForecastRPS                 float64
	Start, End                              int64
	Requests                                uint32
	Rejected, Snapshot, Admission, Capacity float64 // shares of Requests
}

func observedOf(d *schemas.DemandEstimate) observed {
	if d == nil {
		return observed{}
	}
	o := observed{Known: true, OfferedRPS: d.GetDemandRps(), ForecastRPS: d.GetForecastRps(),
		Start: d.GetWindowStartUnixMs(), End: d.GetWindowEndUnixMs(), Requests: d.GetRequestCount()}
	if n := float64(d.GetRequestCount()); n > 0 {
		r, snap, adm := float64(d.GetRejectedCount()), float64(d.GetShedSnapshotCount()), float64(d.GetShedAdmissionCount())
		o.Rejected, o.Snapshot, o.Admission, o.Capacity = r/n, snap/n, adm/n, max(r-snap-adm, 0)/n
	}
	return o
}

func (c *Console) routes() {
	mux := http.NewServeMux()
	static, _ := fs.Sub(files, "static") // "static" is embedded: cannot fail
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, c.cfg.BasePath+"static/favicon.svg", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /cluster", c.cluster)
	mux.HandleFunc("GET /engines", c.engines)
	mux.HandleFunc("GET /engine", c.engine)
	mux.HandleFunc("GET /explain", c.explain)
	mux.HandleFunc("GET /diff", c.diff)
	mux.HandleFunc("GET /pipeline", c.pipeline)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, http.StatusNotFound, "Not found", fmt.Errorf("no page %q", r.URL.Path))
	})
	c.mux = mux
}

// render writes page name with body.
func (c *Console) render(w http.ResponseWriter, status int, name, title, nav string, body any, pageErr error) {
	now := c.cfg.Now()
	l := layout{Title: title, Nav: nav, Base: c.cfg.BasePath, Now: now.UTC().Format("15:04:05 UTC"), Banners: c.banners(now), Body: body}
	if c.cfg.Refresh > 0 && status == http.StatusOK {
		l.Refresh = int(math.Ceil(c.cfg.Refresh.Seconds()))
	}
	if pageErr != nil {
		l.Err = pageErr.Error()
	}
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, l); err != nil {
		c.log.Error("rendering page", "page", name, "err", err)
		http.Error(w, "rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page.
func (c *Console) fail(w http.ResponseWriter, status int, title string, err error) {
	c.render(w, status, "error", title, "", struct{ Status int }{status}, err)
}

// errNotFound marks a lookup that found nothing (404).
var errNotFound = errors.New("not found")

// ---- overview ----

type clusterRow struct {
	Cluster       string
	Demand, Shed  float64
	ExpectedMs    float64
	Bar           template.HTML
	Rates         rates
	HasRates      bool
	TopEngines    []weightRow
	EngineCount   int
	ServedEngines int
}

type overviewBody struct {
	Version    uint64
	Created    int64
	Age        string
	Stats      *schemas.SolveStats
	Clusters   []clusterRow
	Health     health
	PrevVer    uint64
	Kafka      bool
	Snapshots  int
	HistoryLen string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	es, err := c.snapshots(r.Context())
	body := overviewBody{Kafka: c.cfg.Kafka != nil, Snapshots: len(es), HistoryLen: c.cfg.History.String()}
	now := c.cfg.Now()
	if snap := latest(es); snap != nil {
		body.Version, body.Created, body.Stats = snap.GetVersion(), snap.GetCreatedUnixMs(), snap.GetStats()
		body.Age = fmtAge(now.Sub(time.UnixMilli(snap.GetCreatedUnixMs())))
		colors := c.colors(snap)
		for _, cw := range sortedClusters(snap) {
			row := clusterRow{Cluster: cw.GetCluster(), Demand: cw.GetDemandRps(), Shed: cw.GetShedFraction(),
				ExpectedMs: cw.GetExpectedLatencyMs(), Bar: weightBar(barSegments(cw, colors), 320), EngineCount: len(cw.GetWeights())}
			ws := weightRows(cw, colors)
			for _, wr := range ws {
				if wr.Weight >= 0.005 {
					row.ServedEngines++
					if len(row.TopEngines) < 3 {
						row.TopEngines = append(row.TopEngines, wr)
					}
				}
			}
			row.Rates, _ = c.live.clusterRates(cw.GetCluster(), now)
			row.HasRates = c.cfg.Kafka != nil
			body.Clusters = append(body.Clusters, row)
		}
		if i := lastChange(es); i >= 0 {
			body.PrevVer = es[i].Snap.GetVersion()
		}
	}
	body.Health = c.health(r, es)
	c.render(w, http.StatusOK, "overview", "Overview", "overview", body, err)
}

// ---- cluster ----

type weightRow struct {
	Engine, Color                       string
	Weight, PlannedUtil                 float64
	NetworkMs, EngineMs, MarginalMs     float64
	Binding, MaxBatch, Endpoint, Source string
	CacheS                              string // prefix-cache residency, s; "-" unknown
	Highlight                           bool
}

type clusterBody struct {
	Cluster     string
	Version     uint64
	Created     int64
	CW          *schemas.ClusterWeights
	Bar         template.HTML
	Weights     []weightRow
	WeightChart template.HTML
	LatChart    template.HTML
	RateChart   template.HTML
	Rates       rates
	Kafka       bool
	Demand      *schemas.DemandEstimate
	History     string
	// Gateways: each gateway instance of the cluster with the snapshot
	// version its latest routing event routed on (RoutingEvent.gateway_id).
	Gateways []gatewayRow
	// Models: the snapshot's plans for the models it plans apart
	// (ClusterWeights.model_weights), in its order.
	Models []modelPlan
}

// modelPlan is one model's plan as the cluster page shows it.
type modelPlan struct {
	Model        string
	Demand, Shed float64
	Weights      []weightRow
}

// modelPlans returns cw's plans per model with their weight rows.
func modelPlans(cw *schemas.ClusterWeights, colors map[string]string) []modelPlan {
	var out []modelPlan
	for _, mw := range cw.GetModelWeights() {
		out = append(out, modelPlan{Model: mw.GetModel(), Demand: mw.GetDemandRps(), Shed: mw.GetShedFraction(),
			Weights: weightRows(&schemas.ClusterWeights{Weights: mw.GetWeights()}, colors)})
	}
	return out
}

func (c *Console) cluster(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	es, err := c.snapshots(r.Context())
	if err != nil {
		c.fail(w, http.StatusBadGateway, "Cluster "+id, err)
		return
	}
	snap := latest(es)
	cw := findCluster(snap, id)
	if cw == nil {
		c.fail(w, http.StatusNotFound, "Cluster "+id, fmt.Errorf("cluster %q: %w in the latest snapshot (clusters: %s)", id, errNotFound, strings.Join(clusterIDs(snap), ", ")))
		return
	}
	colors := c.colors(snap)
	now := c.cfg.Now()
	body := clusterBody{Cluster: id, Version: snap.GetVersion(), Created: snap.GetCreatedUnixMs(), CW: cw,
		Bar: weightBar(barSegments(cw, colors), 640), Weights: weightRows(cw, colors), Kafka: c.cfg.Kafka != nil,
		Demand: c.live.demand(id), History: c.cfg.History.String()}
	var pts []ratePoint
	body.Rates, pts = c.live.clusterRates(id, now)
	body.WeightChart, body.LatChart = c.historyCharts(es, id, colors, now, observedLatency(pts))
	body.RateChart = c.rateChart(es, id, pts, now)
	body.Gateways = c.live.gateways(id)
	body.Models = modelPlans(cw, colors)
	c.render(w, http.StatusOK, "cluster", "Cluster "+id, "overview", body, nil)
}

// observedLatency is the mean end-to-end latency and TTFT the gateways
// measured for the served requests of each rate bucket (buckets without
// one are left out).
func observedLatency(pts []ratePoint) (obs [2][]pt) {
	for _, p := range pts {
		x := float64(p.at.Add(bucketMs*time.Millisecond/2).UnixMilli()) / 1000
		for k, v := range []struct {
			name string
			sum  float64
			n    uint64
		}{{"end-to-end", p.E2ESumMs, p.E2ECount}, {"TTFT", p.TTFTSumMs, p.TTFTCount}} {
			if v.n > 0 {
				m := v.sum / float64(v.n)
				obs[k] = append(obs[k], pt{X: x, Y: m, Title: fmt.Sprintf("%s: observed %s %.1f ms (%d requests)", p.at.UTC().Format("15:04:05"), v.name, m, v.n)})
			}
		}
	}
	return obs
}

// historyCharts draws cluster's weights and shed fraction, and its
// expected latency beside the observed end-to-end latency and TTFT (obs),
// over the history.
func (c *Console) historyCharts(es []snapEntry, cluster string, colors map[string]string, now time.Time, obs [2][]pt) (weights, latency template.HTML) {
	var first float64
	if len(es) > 0 {
		first = snapTime(es[0])
	}
	lo, hi := c.timeRange(now, first)
	byEngine := map[string][]pt{}
	var shed, rejected, lat []pt
	served := map[string]bool{}
	var prevEngines map[string]bool
	for _, e := range es {
		cw := findCluster(e.Snap, cluster)
		if cw == nil {
			continue
		}
		t := snapTime(e)
		title := func(what string, v float64) string {
			return fmt.Sprintf("v%d %s: %s %.3f", e.Snap.GetVersion(), time.Unix(int64(t), 0).UTC().Format("15:04:05"), what, v)
		}
		seen := map[string]bool{}
		for _, ew := range cw.GetWeights() {
			id := ew.GetEngineId()
			seen[id] = true
			byEngine[id] = append(byEngine[id], pt{X: t, Y: ew.GetWeight(), Title: title(id, ew.GetWeight())})
			if ew.GetWeight() >= 0.005 {
				served[id] = true
			}
		}
		for id := range prevEngines {
			if !seen[id] { // left the snapshot: weight 0 from here
				byEngine[id] = append(byEngine[id], pt{X: t, Y: 0, Title: title(id, 0)})
			}
		}
		prevEngines = seen
		shed = append(shed, pt{X: t, Y: cw.GetShedFraction(), Title: title("shed", cw.GetShedFraction())})
		if o := observedOf(cw.GetDemandEstimate()); o.Known {
			rejected = append(rejected, pt{X: t, Y: o.Rejected, Title: title("rejected (observed)", o.Rejected)})
		}
		lat = append(lat, pt{X: t, Y: cw.GetExpectedLatencyMs(), Title: title("expected ms", cw.GetExpectedLatencyMs())})
	}
	ids := make([]string, 0, len(byEngine))
	for id := range byEngine {
		if served[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	wc := chart{XMin: lo, XMax: hi, YMin: 0, YMax: 1, XTime: true, XLabel: "time (UTC)", YLabel: "share of demand", W: 720, H: 280,
		Empty: "no snapshot of " + cluster + " in the last " + c.cfg.History.String()}
	for _, id := range ids {
		wc.Series = append(wc.Series, series{Name: id, Color: colorOf(colors, id), Points: byEngine[id], Step: true})
	}
	if len(shed) > 0 {
		wc.Series = append(wc.Series, series{Name: "shed", Color: shedColor, Points: shed, Step: true, Dashed: true})
	}
	if len(rejected) > 0 {
		wc.Series = append(wc.Series, series{Name: "rejected (observed)", Color: rejectedColor, Points: rejected, Step: true, Dashed: true})
	}
	lc := chart{XMin: lo, XMax: hi, YMin: 0, YMax: niceMax(max(maxY(lat), maxY(obs[0]), maxY(obs[1]))), XTime: true, XLabel: "time (UTC)", YLabel: "latency (ms)", W: 720, H: 220,
		Empty: wc.Empty}
	if len(lat) > 0 {
		lc.Series = []series{{Name: "expected end-to-end (planned)", Color: palette[0], Points: lat, Step: true}}
	}
	if len(obs[0]) > 0 {
		lc.Series = append(lc.Series, series{Name: "observed end-to-end (served, mean)", Color: palette[1], Points: obs[0]})
	}
	if len(obs[1]) > 0 {
		lc.Series = append(lc.Series, series{Name: "observed TTFT (served, mean)", Color: palette[2], Points: obs[1], Dashed: true})
	}
	return wc.svg(), lc.svg()
}

// rateChart draws cluster's offered requests, errors and 429s per
// second by bucket, and the demand the snapshots planned for.
func (c *Console) rateChart(es []snapEntry, cluster string, pts []ratePoint, now time.Time) template.HTML {
	first := 0.0
	if len(pts) > 0 {
		first = float64(pts[0].at.Unix())
	}
	if len(es) > 0 && (first == 0 || snapTime(es[0]) < first) {
		first = snapTime(es[0])
	}
	lo, hi := c.timeRange(now, first)
	per := float64(bucketMs) / 1000
	var total, errs, shed, demand []pt
	for _, p := range pts {
		t := float64(p.at.Unix()) + per/2
		at := p.at.UTC().Format("15:04:05")
		total = append(total, pt{X: t, Y: float64(p.Offered) / per, Title: fmt.Sprintf("%s: %.2f offered requests/s", at, float64(p.Offered)/per)})
		errs = append(errs, pt{X: t, Y: float64(p.Errors) / per, Title: fmt.Sprintf("%s: %.2f errors/s", at, float64(p.Errors)/per)})
		shed = append(shed, pt{X: t, Y: float64(p.Rejected) / per, Title: fmt.Sprintf("%s: %.2f answered 429/s", at, float64(p.Rejected)/per)})
	}
	for _, e := range es {
		if cw := findCluster(e.Snap, cluster); cw != nil {
			demand = append(demand, pt{X: snapTime(e), Y: cw.GetDemandRps()})
		}
	}
	ch := chart{XMin: lo, XMax: hi, YMin: 0, YMax: niceMax(math.Max(maxY(total), maxY(demand))), XTime: true,
		XLabel: "time (UTC)", YLabel: "requests/s", W: 720, H: 240, Empty: "no routing events yet"}
	if c.cfg.Kafka == nil {
		ch.Empty = "no Kafka client: request rates need the routing events"
	}
	if len(total) > 0 {
		ch.Series = append(ch.Series,
			series{Name: "offered/s", Color: palette[0], Points: total},
			series{Name: "errors/s", Color: palette[2], Points: errs},
			series{Name: "answered 429/s", Color: shedColor, Points: shed})
	}
	if len(demand) > 0 {
		ch.Series = append(ch.Series, series{Name: "planned demand (snapshot)", Color: palette[4], Points: demand, Step: true, Dashed: true})
	}
	return ch.svg()
}

// timeRange is the x range of a time chart ending now: the history, or
// from a little before first (Unix seconds; 0: none) when the data
// covers less, but at least two minutes.
func (c *Console) timeRange(now time.Time, first float64) (lo, hi float64) {
	hi = float64(now.Unix())
	lo = float64(now.Add(-c.cfg.History).Unix())
	if first > lo {
		lo = math.Max(lo, math.Min(hi-120, first-0.05*(hi-first)))
	}
	return lo, hi
}

// snapTime is when a snapshot was created, in Unix seconds (its stored
// time when it does not say).
func snapTime(e snapEntry) float64 {
	if ms := e.Snap.GetCreatedUnixMs(); ms > 0 {
		return float64(ms) / 1000
	}
	return float64(e.Stored.UnixMilli()) / 1000
}

func maxY(ps []pt) float64 {
	m := 0.0
	for _, p := range ps {
		if p.Y > m && !math.IsInf(p.Y, 0) {
			m = p.Y
		}
	}
	return m
}

// niceMax is a round upper bound above v (1 for v <= 0).
func niceMax(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	t := niceTicks(0, v*1.1, 5)
	last := t[len(t)-1]
	if last < v*1.05 && len(t) > 1 {
		last += t[1] - t[0]
	}
	return last
}

// ---- engines ----

type engineRow struct {
	ID, Color   string
	Est         *schemas.EngineEstimate
	WindowAge   string
	Observed    int
	ServedShare float64
	// TTFT and TBOT: expected (the fitted profile at the estimate's
	// utilization) and observed (the engine's own scrapes over the last
	// minute of its signals), "-" when unknown.
	TTFT, TBOT latencyPair
}

// latencyPair is an expected and an observed latency, formatted.
type latencyPair struct{ Expected, Observed string }

// obsSpanMs is the span of an engine's latest signals the engines page
// averages its observed latencies over.
const obsSpanMs = 60_000

// latencyPairOf formats prof at util and the weighted mean of the
// observations of the last obsSpanMs before lastMs.
func latencyPairOf(prof *schemas.LatencyProfile, util float64, obs []obsPoint, lastMs int64) latencyPair {
	p := latencyPair{Expected: "-", Observed: "-"}
	if v, ok := profileAt(prof, util); ok {
		p.Expected = fmt.Sprintf("%.1f", v)
	}
	var sum, w float64
	for _, o := range obs {
		if o.ms > lastMs-obsSpanMs && o.Weight > 0 {
			sum += o.LatencyMs * o.Weight
			w += o.Weight
		}
	}
	if w > 0 {
		p.Observed = fmt.Sprintf("%.1f", sum/w)
	}
	return p
}

type enginesBody struct {
	Kafka   bool
	Engines []engineRow
	Version uint64
}

func (c *Console) engines(w http.ResponseWriter, r *http.Request) {
	es, err := c.snapshots(r.Context())
	snap := latest(es)
	colors := c.colors(snap)
	now := c.cfg.Now()
	body := enginesBody{Kafka: c.cfg.Kafka != nil, Version: snap.GetVersion()}
	for _, id := range c.allEngines(snap) {
		row := engineRow{ID: id, Color: colorOf(colors, id)}
		if v, ok := c.live.engineView(id); ok {
			row.Est = v.Est
			row.Observed = len(v.TTFT)
			row.TTFT = latencyPairOf(v.Est.GetTtftProfile(), v.Est.GetUtilization(), v.TTFT, v.LastSigMs)
			row.TBOT = latencyPairOf(v.Est.GetTbotProfile(), v.Est.GetUtilization(), v.TBOT, v.LastSigMs)
			if v.Est != nil {
				row.WindowAge = fmtAge(now.Sub(time.UnixMilli(v.Est.GetWindowEndUnixMs())))
			}
		}
		body.Engines = append(body.Engines, row)
	}
	c.render(w, http.StatusOK, "engines", "Engines", "engines", body, err)
}

// ---- engine ----

type engineBody struct {
	ID, Color            string
	Est                  *schemas.EngineEstimate
	Kafka                bool
	TTFTChart, TBOTChart template.HTML
	TTFTObs, TBOTObs     int
	Weights              []explainRow
	Version              uint64
}

func (c *Console) engine(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	es, err := c.snapshots(r.Context())
	snap := latest(es)
	v, ok := c.live.engineView(id)
	rows := engineExplainRows(snap, id)
	if !ok && len(rows) == 0 {
		if err == nil {
			err = fmt.Errorf("engine %q: %w in the estimates or the latest snapshot", id, errNotFound)
		}
		c.fail(w, http.StatusNotFound, "Engine "+id, err)
		return
	}
	colors := c.colors(snap)
	body := engineBody{ID: id, Color: colorOf(colors, id), Est: v.Est, Kafka: c.cfg.Kafka != nil, Weights: rows,
		TTFTObs: len(v.TTFT), TBOTObs: len(v.TBOT), Version: snap.GetVersion()}
	body.TTFTChart = profileChart("TTFT", v.Est.GetTtftProfile(), v.TTFT, v.Est.GetUtilization(), c.cfg.Kafka != nil)
	body.TBOTChart = profileChart("TBOT", v.Est.GetTbotProfile(), v.TBOT, v.Est.GetUtilization(), c.cfg.Kafka != nil)
	c.render(w, http.StatusOK, "engine", "Engine "+id, "engines", body, err)
}

// profileChart draws a fitted latency profile against the observations.
func profileChart(kind string, prof *schemas.LatencyProfile, obs []obsPoint, util float64, kafka bool) template.HTML {
	xmax, ymax := 1.0, 0.0
	var fit, dots []pt
	for _, p := range prof.GetPoints() {
		fit = append(fit, pt{X: p.GetUtilization(), Y: p.GetLatencyMs(),
			Title: fmt.Sprintf("fit: utilization %.2f → %.1f ms", p.GetUtilization(), p.GetLatencyMs())})
	}
	for _, o := range obs {
		xmax = math.Max(xmax, o.Utilization)
		ymax = math.Max(ymax, o.LatencyMs)
		dots = append(dots, pt{X: o.Utilization, Y: o.LatencyMs, R: 1.5 + math.Min(4.5, math.Sqrt(o.Weight)),
			Title: fmt.Sprintf("%s: utilization %.2f, %.1f ms mean of %.0f requests", time.UnixMilli(o.ms).UTC().Format("15:04:05"), o.Utilization, o.LatencyMs, o.Weight)})
	}
	xmax = math.Min(1.5, niceMax(xmax))
	for _, p := range fit {
		if p.X <= xmax {
			ymax = math.Max(ymax, p.Y)
		}
	}
	// The fitted curve at xmax, so the line spans the chart.
	fit = clipCurve(fit, xmax)
	ymax = math.Max(ymax, maxY(fit))
	ch := chart{XMin: 0, XMax: xmax, YMin: 0, YMax: niceMax(ymax), XLabel: "utilization (load / capacity)", YLabel: kind + " (ms)", W: 520, H: 280,
		Empty: "no estimate of this engine yet"}
	if !kafka {
		ch.Empty = "no Kafka client: profiles come from the estimates topic"
	}
	if len(dots) > 0 {
		ch.Series = append(ch.Series, series{Name: fmt.Sprintf("observed (%d signals, size = requests)", len(dots)), Color: palette[1], Points: dots, Dots: true})
	}
	if len(fit) > 0 {
		name := fmt.Sprintf("fitted profile (%d samples, rmse %.1f ms)", prof.GetSamples(), prof.GetFitRmseMs())
		if prof.GetPrior() {
			name += ", mostly the GPU-class prior"
		}
		ch.Series = append(ch.Series, series{Name: name, Color: palette[0], Points: fit})
		if util > 0 {
			ch.Series = append(ch.Series, series{Name: fmt.Sprintf("current utilization %.2f", util), Color: palette[2], Dashed: true,
				Points: []pt{{X: util, Y: 0}, {X: util, Y: ch.YMax}}})
		}
	}
	return ch.svg()
}

// clipCurve cuts a piecewise-linear curve at x = xmax, interpolating.
func clipCurve(ps []pt, xmax float64) []pt {
	var out []pt
	for i, p := range ps {
		if p.X <= xmax {
			out = append(out, p)
			continue
		}
		if i > 0 && ps[i-1].X < xmax {
			a := ps[i-1]
			y := a.Y + (p.Y-a.Y)*(xmax-a.X)/(p.X-a.X)
			out = append(out, pt{X: xmax, Y: y})
		}
		break
	}
	return out
}

// ---- explain ----

type explainRow struct {
	Cluster string
	weightRow
}

type explainBody struct {
	Cluster, Engine string
	Clusters        []string
	Engines         []string
	Snap            *schemas.WeightSnapshot
	CW              *schemas.ClusterWeights
	Rows            []explainRow
	ByEngine        bool
}

func (c *Console) explain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cluster, engine := q.Get("cluster"), q.Get("engine")
	es, err := c.snapshots(r.Context())
	if err != nil {
		c.fail(w, http.StatusBadGateway, "Explain", err)
		return
	}
	snap := latest(es)
	body := explainBody{Cluster: cluster, Engine: engine, Clusters: clusterIDs(snap), Engines: c.allEngines(snap), Snap: snap}
	colors := c.colors(snap)
	switch {
	case snap == nil:
	case cluster == "" && engine != "":
		body.ByEngine = true
		body.Rows = engineExplainRows(snap, engine)
		if len(body.Rows) == 0 {
			c.fail(w, http.StatusNotFound, "Explain", fmt.Errorf("engine %q: %w in snapshot %d", engine, errNotFound, snap.GetVersion()))
			return
		}
	default:
		if cluster == "" && len(body.Clusters) > 0 {
			cluster = body.Clusters[0]
			body.Cluster = cluster
		}
		body.CW = findCluster(snap, cluster)
		if body.CW == nil {
			c.fail(w, http.StatusNotFound, "Explain", fmt.Errorf("snapshot %d has no cluster %q (it has %s)", snap.GetVersion(), cluster, strings.Join(body.Clusters, ", ")))
			return
		}
		for _, wr := range weightRows(body.CW, colors) {
			wr.Highlight = wr.Engine == engine
			body.Rows = append(body.Rows, explainRow{Cluster: cluster, weightRow: wr})
		}
	}
	c.render(w, http.StatusOK, "explain", "Explain", "explain", body, nil)
}

// engineExplainRows are engine's weights in every cluster of snap.
func engineExplainRows(snap *schemas.WeightSnapshot, engine string) []explainRow {
	var out []explainRow
	for _, cw := range sortedClusters(snap) {
		for _, ew := range cw.GetWeights() {
			if ew.GetEngineId() == engine {
				out = append(out, explainRow{Cluster: cw.GetCluster(), weightRow: toRow(ew, "")})
			}
		}
	}
	return out
}

// weightRows are cw's weights, heaviest first (as `switchyard explain`).
func weightRows(cw *schemas.ClusterWeights, colors map[string]string) []weightRow {
	ws := append([]*schemas.EngineWeight(nil), cw.GetWeights()...)
	sort.SliceStable(ws, func(a, b int) bool {
		if ws[a].GetWeight() != ws[b].GetWeight() {
			return ws[a].GetWeight() > ws[b].GetWeight()
		}
		return ws[a].GetEngineId() < ws[b].GetEngineId()
	})
	out := make([]weightRow, 0, len(ws))
	for _, ew := range ws {
		out = append(out, toRow(ew, colorOf(colors, ew.GetEngineId())))
	}
	return out
}

func toRow(ew *schemas.EngineWeight, color string) weightRow {
	ex := ew.GetExplanation()
	row := weightRow{Engine: ew.GetEngineId(), Color: color, Weight: ew.GetWeight(), PlannedUtil: ew.GetPlannedUtilization(),
		NetworkMs: ex.GetNetworkMs(), EngineMs: ex.GetEngineMs(), MarginalMs: ex.GetMarginalMs(),
		Binding: strings.Join(ex.GetBinding(), ", "), Endpoint: ew.GetEndpointUrl(), Source: ex.GetCapacitySource()}
	if row.Binding == "" {
		row.Binding = "-"
	}
	row.MaxBatch = "-"
	if ex.GetMaxBatch() > 0 || ex.GetCapacitySource() != "" {
		src := ex.GetCapacitySource()
		if src == "" {
			src = "unknown"
		}
		row.MaxBatch = fmt.Sprintf("%d (%s)", ex.GetMaxBatch(), src)
	}
	row.CacheS = "-"
	if r := ex.GetCacheResidencyS(); r > 0 {
		row.CacheS = fmt.Sprintf("%.1f", r)
	}
	return row
}

// ---- diff ----

type diffEngine struct {
	Engine, Color      string
	A, B, Delta        float64
	InA, InB           bool
	UtilA, UtilB       float64
	MarginalA, MarginB float64
	Changed            bool
}

type diffCluster struct {
	Cluster          string
	InA, InB         bool
	ShedA, ShedB     float64
	DemandA, DemandB float64
	LatA, LatB       float64
	BarA, BarB       template.HTML
	Moved            float64
	Engines          []diffEngine
}

type diffBody struct {
	A, B     *schemas.WeightSnapshot
	Versions []uint64
	Clusters []diffCluster
	Changed  int
	// Inputs are the optimizer's inputs that differ between A and B,
	// largest first; Estimates says whether the engines' estimates were
	// known (from Kafka) for both.
	Inputs    []inputChange
	Estimates bool
	// Timeline: the events from timelineLead before A to B, newest first.
	Timeline []timelineEvent
}

// timelineLead is how long before the "from" snapshot the diff page's
// timeline starts (a cause can precede the first snapshot it changed).
const timelineLead = 2 * time.Minute

// maxVersionChoices bounds the versions the diff page offers.
const maxVersionChoices = 400

func (c *Console) diff(w http.ResponseWriter, r *http.Request) {
	es, err := c.snapshots(r.Context())
	if err != nil {
		c.fail(w, http.StatusBadGateway, "Diff", err)
		return
	}
	var body diffBody
	for i := len(es) - 1; i >= 0 && len(body.Versions) < maxVersionChoices; i-- {
		body.Versions = append(body.Versions, es[i].Snap.GetVersion())
	}
	q := r.URL.Query()
	pick := func(name string, def int) (*schemas.WeightSnapshot, error) {
		s := q.Get(name)
		if s == "" {
			if def < 0 || def >= len(es) {
				return nil, nil
			}
			return es[def].Snap, nil
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: a snapshot version is a number", name, s)
		}
		return c.byVersion(r.Context(), es, v)
	}
	a, err := pick("a", lastChange(es))
	if err == nil {
		body.A = a
		body.B, err = pick("b", len(es)-1)
	}
	if err != nil {
		status := http.StatusNotFound
		if strings.Contains(err.Error(), "is a number") {
			status = http.StatusBadRequest
		}
		c.fail(w, status, "Diff", err)
		return
	}
	if body.A != nil && body.B != nil {
		body.Clusters, body.Changed = diffSnapshots(body.A, body.B, c.colors(body.B))
		body.Inputs = inputChanges(body.A, body.B, c.live.estimateAt)
		lo, hi := int64(min(body.A.GetVersion(), body.B.GetVersion())), int64(max(body.A.GetVersion(), body.B.GetVersion()))
		body.Estimates = c.cfg.Kafka != nil && c.live.estimateAt(firstEngine(body.A), lo) != nil
		body.Timeline = timeline(es, c.live.histories(), c.live.recentDeadLetters(), lo-timelineLead.Milliseconds(), hi)
	}
	c.render(w, http.StatusOK, "diff", "Diff", "diff", body, nil)
}

// firstEngine is the first engine snap weighs ("" when none).
func firstEngine(snap *schemas.WeightSnapshot) string {
	for _, cw := range snap.GetClusters() {
		for _, ew := range cw.GetWeights() {
			return ew.GetEngineId()
		}
	}
	return ""
}

// maxChangeSearch bounds how far back the diff page looks for the last
// change.
const maxChangeSearch = 600

// lastChange is the index of the newest snapshot before the latest whose
// weights differ from the latest's (the previous one when none in the
// last maxChangeSearch does; -1 with fewer than two).
func lastChange(es []snapEntry) int {
	n := len(es)
	if n < 2 {
		return -1
	}
	latest := es[n-1].Snap
	for i := n - 2; i >= 0 && i >= n-1-maxChangeSearch; i-- {
		if _, changed := diffSnapshots(es[i].Snap, latest, nil); changed > 0 {
			return i
		}
	}
	return n - 2
}

// diffSnapshots compares every cluster of a and b; changed counts the
// engine weights that moved by 0.0005 or more.
func diffSnapshots(a, b *schemas.WeightSnapshot, colors map[string]string) (out []diffCluster, changed int) {
	for _, id := range unionClusters(a, b) { // inputs.go
		ca, cb := findCluster(a, id), findCluster(b, id)
		d := diffCluster{Cluster: id, InA: ca != nil, InB: cb != nil,
			ShedA: ca.GetShedFraction(), ShedB: cb.GetShedFraction(), DemandA: ca.GetDemandRps(), DemandB: cb.GetDemandRps(),
			LatA: ca.GetExpectedLatencyMs(), LatB: cb.GetExpectedLatencyMs()}
		if ca != nil && colors != nil {
			d.BarA = weightBar(barSegments(ca, colors), 320)
		}
		if cb != nil && colors != nil {
			d.BarB = weightBar(barSegments(cb, colors), 320)
		}
		byID := map[string]*diffEngine{}
		var order []string
		add := func(cw *schemas.ClusterWeights, inB bool) {
			for _, ew := range cw.GetWeights() {
				e := byID[ew.GetEngineId()]
				if e == nil {
					e = &diffEngine{Engine: ew.GetEngineId(), Color: colorOf(colors, ew.GetEngineId())}
					byID[e.Engine] = e
					order = append(order, e.Engine)
				}
				if inB {
					e.B, e.InB, e.UtilB, e.MarginB = ew.GetWeight(), true, ew.GetPlannedUtilization(), ew.GetExplanation().GetMarginalMs()
				} else {
					e.A, e.InA, e.UtilA, e.MarginalA = ew.GetWeight(), true, ew.GetPlannedUtilization(), ew.GetExplanation().GetMarginalMs()
				}
			}
		}
		add(ca, false)
		add(cb, true)
		sort.Strings(order)
		for _, eid := range order {
			e := byID[eid]
			e.Delta = e.B - e.A
			e.Changed = math.Abs(e.Delta) >= 0.0005 || e.InA != e.InB
			if e.Changed {
				changed++
			}
			d.Moved += math.Abs(e.Delta)
			d.Engines = append(d.Engines, *e)
		}
		d.Moved = (d.Moved + math.Abs(d.ShedB-d.ShedA)) / 2
		out = append(out, d)
	}
	return out, changed
}

// ---- pipeline ----

// health is the pipeline's state with a verdict per item.
type health struct {
	Items []healthItem
	Lag   []topicLag
	// LagErr says why the processor's lag is unknown.
	LagErr string
	// Groups is the lag of every consumer group with commits on the
	// topics (streams.MeasureLag); GroupsErr says why it is unknown.
	Groups        []streams.GroupReport
	GroupsOmitted int
	GroupsErr     string
	Group         string
	State         string
	Live          pipelineView
	Kafka         bool
}

type healthItem struct {
	Name, Value, Detail string
	Status              string // ok, warn, bad, unknown
}

type topicLag struct {
	Topic string
	Lag   int64
}

// Thresholds of the health verdicts.
const (
	snapshotWarn = 30 * time.Second
	snapshotBad  = 2 * time.Minute
	lagWarn      = 1000
	lagBad       = 100_000
	// maxLagGroups caps the consumer groups the pipeline page lists.
	maxLagGroups = 50
)

func verdict(v, warn, bad float64) string {
	switch {
	case v >= bad:
		return "bad"
	case v >= warn:
		return "warn"
	}
	return "ok"
}

// health gathers the pipeline's state: the last snapshot's age, the
// estimates' watermark and the processor's consumer lag.
func (c *Console) health(r *http.Request, es []snapEntry) health {
	now := c.cfg.Now()
	h := health{Group: c.cfg.ProcessorGroup, Kafka: c.cfg.Kafka != nil, Live: c.live.pipeline()}
	if snap := latest(es); snap != nil {
		age := now.Sub(time.UnixMilli(snap.GetCreatedUnixMs()))
		h.Items = append(h.Items, healthItem{Name: "last snapshot", Value: fmt.Sprintf("v%d, %s old", snap.GetVersion(), fmtAge(age)),
			Detail: "created " + unixMs(snap.GetCreatedUnixMs()), Status: verdict(age.Seconds(), snapshotWarn.Seconds(), snapshotBad.Seconds())})
		if len(es) > 1 {
			span := snapTime(es[len(es)-1]) - snapTime(es[0])
			h.Items = append(h.Items, healthItem{Name: "snapshot interval", Value: fmt.Sprintf("%.1fs mean", span/float64(len(es)-1)),
				Detail: fmt.Sprintf("%d snapshots in the last %s", len(es), c.cfg.History), Status: "ok"})
		}
	} else {
		h.Items = append(h.Items, healthItem{Name: "last snapshot", Value: "none in the last " + c.cfg.History.String(), Status: "bad",
			Detail: "is the optimizer running?"})
	}
	if !h.Kafka {
		h.Items = append(h.Items, healthItem{Name: "watermark", Value: "unknown", Detail: "no Kafka client", Status: "unknown"})
		return h
	}
	if wm := h.Live.Watermark; wm > 0 {
		lag := now.Sub(time.UnixMilli(wm))
		h.Items = append(h.Items, healthItem{Name: "watermark", Value: fmt.Sprintf("%s behind", fmtAge(lag)),
			Detail: "end of the latest estimated window, " + unixMs(wm), Status: verdict(lag.Seconds(), snapshotWarn.Seconds(), snapshotBad.Seconds())})
	} else {
		h.Items = append(h.Items, healthItem{Name: "watermark", Value: "no estimates yet", Detail: "is the processor running?", Status: "warn"})
	}
	ctx, cancel := contextFor(r, 2*time.Second)
	defer cancel()
	if rep, err := streams.MeasureLag(ctx, kadmClient(c.cfg.Kafka), streams.LagPrefix(c.cfg.TopicPrefix),
		streams.LagGroups(c.cfg.ProcessorGroup), streams.LagMaxGroups(maxLagGroups)); err != nil {
		h.GroupsErr = err.Error()
	} else {
		h.Groups, h.GroupsOmitted = rep.Groups, rep.Omitted
	}
	lags, err := kadmClient(c.cfg.Kafka).Lag(ctx, c.cfg.ProcessorGroup)
	if err == nil {
		err = lags.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		h.Items = append(h.Items, healthItem{Name: "processor lag", Value: "no group yet",
			Detail: "consumer group " + c.cfg.ProcessorGroup + " has committed nothing: is the processor running?", Status: "warn"})
		return h
	}
	if err != nil {
		h.LagErr = err.Error()
		h.Items = append(h.Items, healthItem{Name: "processor lag", Value: "unknown", Detail: h.LagErr, Status: "unknown"})
		return h
	}
	g := lags[c.cfg.ProcessorGroup]
	h.State = g.State
	for topic, l := range g.Lag.TotalByTopic() {
		h.Lag = append(h.Lag, topicLag{Topic: topic, Lag: l.Lag})
	}
	sort.Slice(h.Lag, func(i, j int) bool { return h.Lag[i].Topic < h.Lag[j].Topic })
	total := g.Lag.Total()
	st := verdict(float64(total), lagWarn, lagBad)
	if g.State == "Dead" || g.State == "" {
		st = "bad"
	}
	h.Items = append(h.Items, healthItem{Name: "processor lag", Value: fmt.Sprintf("%d records", total),
		Detail: fmt.Sprintf("group %s, %s, %d members", c.cfg.ProcessorGroup, orDash(g.State), len(g.Members)), Status: st})
	return h
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type pipelineBody struct {
	Health   health
	Stats    *schemas.SolveStats
	Digest   string
	History  string
	Invalid  int
	Timeline []timelineEvent
	// CapacityJump and MaxTimeline state the timeline's bounds.
	CapacityJump string
	MaxTimeline  int
}

func (c *Console) pipeline(w http.ResponseWriter, r *http.Request) {
	es, err := c.snapshots(r.Context())
	body := pipelineBody{Health: c.health(r, es), History: c.cfg.History.String(),
		CapacityJump: fmt.Sprintf("%.0f%%", 100*capacityJump), MaxTimeline: maxTimeline}
	body.Timeline = timeline(es, c.live.histories(), c.live.recentDeadLetters(), 0, 0)
	if snap := latest(es); snap != nil {
		body.Stats, body.Digest = snap.GetStats(), snap.GetInputsDigest()
	}
	c.hist.mu.Lock()
	body.Invalid = c.hist.invalid
	c.hist.mu.Unlock()
	c.render(w, http.StatusOK, "pipeline", "Pipeline", "pipeline", body, err)
}

// ---- shared ----

func sortedClusters(snap *schemas.WeightSnapshot) []*schemas.ClusterWeights {
	cs := append([]*schemas.ClusterWeights(nil), snap.GetClusters()...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].GetCluster() < cs[j].GetCluster() })
	return cs
}

func clusterIDs(snap *schemas.WeightSnapshot) []string {
	var ids []string
	for _, cw := range sortedClusters(snap) {
		ids = append(ids, cw.GetCluster())
	}
	return ids
}

// allEngines lists the engines of snap and of the estimates, sorted.
func (c *Console) allEngines(snap *schemas.WeightSnapshot) []string {
	seen := map[string]bool{}
	var ids []string
	for _, id := range c.live.engineIDs() {
		seen[id] = true
		ids = append(ids, id)
	}
	for _, cw := range snap.GetClusters() {
		for _, ew := range cw.GetWeights() {
			if !seen[ew.GetEngineId()] {
				seen[ew.GetEngineId()] = true
				ids = append(ids, ew.GetEngineId())
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// colors gives every engine its colour, by its place among all engines.
func (c *Console) colors(snap *schemas.WeightSnapshot) map[string]string {
	out := map[string]string{}
	for i, id := range c.allEngines(snap) {
		out[id] = colorAt(i)
	}
	return out
}

func colorOf(colors map[string]string, id string) string {
	if c, ok := colors[id]; ok {
		return c
	}
	return palette[len(palette)-1]
}

// barSegments are cw's weights (by engine id) and its shed fraction.
func barSegments(cw *schemas.ClusterWeights, colors map[string]string) []segment {
	ws := append([]*schemas.EngineWeight(nil), cw.GetWeights()...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].GetEngineId() < ws[j].GetEngineId() })
	var segs []segment
	for _, ew := range ws {
		segs = append(segs, segment{Label: ew.GetEngineId(), Value: ew.GetWeight(), Color: colorOf(colors, ew.GetEngineId())})
	}
	if cw.GetShedFraction() > 0 {
		segs = append(segs, segment{Label: "shed", Value: cw.GetShedFraction(), Color: shedColor})
	}
	return segs
}
