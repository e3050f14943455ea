package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/policy"
)

// The goals of issue 10 the matrix checks.
const (
	// tieTolerance: two values within 2% of the larger are a tie, and
	// "within 2% of the best" counts as best.
	tieTolerance = 0.02
	// goalBestShare: switchyard is best or tied for best on p99 TTFT and
	// on goodput in at least 90% of cells.
	goalBestShare = 0.90
	// goalWorstP99Ratio: its p99 TTFT is never above 1.10x the best
	// baseline's.
	goalWorstP99Ratio = 1.10
	// goalKVRatio: its KV hit rate is at least 0.95x the best
	// prefix-aware baseline's in every cell.
	goalKVRatio = 0.95
)

// prefixAware are the baselines whose KV hit rate switchyard's is held to.
var prefixAware = []string{"prefix-aware", "llmd-scorer", "chwbl"}

// metric is one scored metric.
type metric struct {
	name   string
	higher bool // higher is better
	get    func(des.Metrics) float64
}

var metrics = []metric{
	{"p99 TTFT", false, func(m des.Metrics) float64 { return m.TTFTms.P99 }},
	{"goodput", true, func(m des.Metrics) float64 { return m.GoodputRPS }},
	{"KV hit", true, func(m des.Metrics) float64 { return m.KVHitRate }},
}

// outcome compares a with b on a metric: +1 a wins, 0 tie, -1 a loses.
func outcome(a, b float64, higher bool) int {
	if math.Abs(a-b) <= tieTolerance*math.Max(math.Abs(a), math.Abs(b)) {
		return 0
	}
	if (a > b) == higher {
		return 1
	}
	return -1
}

// wtl counts wins, ties and losses.
type wtl struct{ win, tie, loss int }

func (w *wtl) add(o int) {
	switch o {
	case 1:
		w.win++
	case 0:
		w.tie++
	default:
		w.loss++
	}
}

func (w wtl) String() string { return fmt.Sprintf("%d/%d/%d", w.win, w.tie, w.loss) }

// cellScore is switchyard against the best baselines in one cell.
type cellScore struct {
	name, group            string
	p99, bestP99           float64
	bestP99By              string
	goodput, bestGoodput   float64
	kv, bestKV             float64
	bestKVBy               string
	reversals              int
	p99OK, goodputOK, kvOK bool
	p99Ratio, kvRatio      float64
	goodputRatio           float64
}

type report struct {
	baselines []string
	// vs[b][m] is switchyard against baseline b on metrics[m].
	vs    map[string][]wtl
	cells []cellScore
}

func score(cells []*cell) report {
	r := report{vs: map[string][]wtl{}}
	for _, n := range policy.Names() {
		if n != "switchyard" {
			r.baselines = append(r.baselines, n)
			r.vs[n] = make([]wtl, len(metrics))
		}
	}
	for _, c := range cells {
		sy := c.Policies["switchyard"]
		for _, b := range r.baselines {
			for k, m := range metrics {
				r.vs[b][k].add(outcome(m.get(sy), m.get(c.Policies[b]), m.higher))
			}
		}
		r.cells = append(r.cells, scoreCell(c, r.baselines))
	}
	return r
}

func scoreCell(c *cell, baselines []string) cellScore {
	sy := c.Policies["switchyard"]
	s := cellScore{name: c.name(), group: c.group(), p99: sy.TTFTms.P99, goodput: sy.GoodputRPS, kv: sy.KVHitRate, reversals: sy.WeightReversals}
	s.bestP99 = math.Inf(1)
	for _, b := range baselines {
		m := c.Policies[b]
		if m.TTFTms.P99 < s.bestP99 {
			s.bestP99, s.bestP99By = m.TTFTms.P99, b
		}
		s.bestGoodput = math.Max(s.bestGoodput, m.GoodputRPS)
	}
	for _, b := range prefixAware {
		if m := c.Policies[b]; m.KVHitRate > s.bestKV || s.bestKVBy == "" {
			s.bestKV, s.bestKVBy = m.KVHitRate, b
		}
	}
	s.p99Ratio = ratio(s.p99, s.bestP99)
	s.goodputRatio = ratio(s.goodput, s.bestGoodput)
	s.kvRatio = ratio(s.kv, s.bestKV)
	s.p99OK = outcome(s.p99, s.bestP99, false) >= 0
	s.goodputOK = outcome(s.goodput, s.bestGoodput, true) >= 0
	s.kvOK = s.kv >= goalKVRatio*s.bestKV
	return s
}

// ratio is a/b, 1 when both are 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return a / b
}

func (r report) write(w io.Writer) {
	fmt.Fprintln(w, "switchyard against each baseline, wins/ties/losses over all cells (tie: within 2% of the larger):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "baseline\t")
	for _, m := range metrics {
		fmt.Fprintf(tw, "%s\t", m.name)
	}
	fmt.Fprintln(tw)
	for _, b := range r.baselines {
		fmt.Fprintf(tw, "%s\t", b)
		for k := range metrics {
			fmt.Fprintf(tw, "%s\t", r.vs[b][k])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nper cell: switchyard against the best baseline (ok: best or within 2%; KV against the best of prefix-aware, llmd-scorer, chwbl):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\tsy p99\tbest p99\tby\tratio\tok\tsy goodput\tbest\tok\tsy KV\tbest KV\tby\tratio\tok\treversals\t")
	for _, c := range r.cells {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%.2f\t%s\t%.2f\t%.2f\t%s\t%.3f\t%.3f\t%s\t%.2f\t%s\t%d\t\n",
			c.name, c.p99, c.bestP99, c.bestP99By, c.p99Ratio, mark(c.p99OK), c.goodput, c.bestGoodput, mark(c.goodputOK),
			c.kv, c.bestKV, c.bestKVBy, c.kvRatio, mark(c.kvOK), c.reversals)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nper scenario (over its seeds): cells where switchyard is best or within 2% / its p99 TTFT ratio to the best baseline / KV ratio / mean weight reversals:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario	cells	p99 ok	goodput ok	KV ok	p99 ratio median	worst	KV ratio worst	reversals	")
	for _, grp := range r.groups() {
		fmt.Fprintf(tw, "%s	%d	%d	%d	%d	%.2f	%.2f	%.2f	%.0f	\n", grp.name, grp.n, grp.p99OK, grp.goodputOK, grp.kvOK,
			grp.medianP99, grp.worstP99, grp.worstKV, grp.meanReversals)
	}
	tw.Flush()

	g := r.goals()
	fmt.Fprintf(w, "\ngoals (issue 10) over %d cells:\n", len(r.cells))
	fmt.Fprintf(w, "  best or within 2%% on p99 TTFT: %d/%d = %.0f%%; goodput: %d/%d = %.0f%%; both: %d/%d = %.0f%% (goal >= %.0f%%): %s\n",
		g.p99OK, g.n, pct(g.p99OK, g.n), g.goodputOK, g.n, pct(g.goodputOK, g.n), g.bothOK, g.n, pct(g.bothOK, g.n), 100*goalBestShare, pass(pct(g.bothOK, g.n) >= 100*goalBestShare))
	fmt.Fprintf(w, "  worst p99 TTFT ratio to the best baseline: %.2f (%s) (goal <= %.2f): %s\n",
		g.worstP99, g.worstP99Cell, goalWorstP99Ratio, pass(g.worstP99 <= goalWorstP99Ratio))
	fmt.Fprintf(w, "  KV hit >= %.2fx the best prefix-aware baseline: %d/%d cells, worst %.2f (%s) (goal: every cell): %s\n",
		goalKVRatio, g.kvOK, g.n, g.worstKV, g.worstKVCell, pass(g.kvOK == g.n))
}

type goals struct {
	n, p99OK, goodputOK, bothOK, kvOK int
	worstP99, worstKV                 float64
	worstP99Cell, worstKVCell         string
}

func (r report) goals() goals {
	g := goals{n: len(r.cells), worstKV: math.Inf(1)}
	for _, c := range r.cells {
		if c.p99OK {
			g.p99OK++
		}
		if c.goodputOK {
			g.goodputOK++
		}
		if c.p99OK && c.goodputOK {
			g.bothOK++
		}
		if c.kvOK {
			g.kvOK++
		}
		if c.p99Ratio > g.worstP99 || g.worstP99Cell == "" {
			g.worstP99, g.worstP99Cell = c.p99Ratio, c.name
		}
		if c.kvRatio < g.worstKV {
			g.worstKV, g.worstKVCell = c.kvRatio, c.name
		}
	}
	return g
}

func pct(a, n int) float64 {
	if n == 0 {
		return 0
	}
	return 100 * float64(a) / float64(n)
}

func mark(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

func pass(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

type group struct {
	name                         string
	n, p99OK, goodputOK, kvOK    int
	medianP99, worstP99, worstKV float64
	meanReversals                float64
}

// groups summarises the cells of each scenario (and trace) over seeds,
// in the order the cells ran.
func (r report) groups() []group {
	var out []group
	idx := map[string]int{}
	ratios := map[string][]float64{}
	for _, c := range r.cells {
		i, ok := idx[c.group]
		if !ok {
			i = len(out)
			idx[c.group] = i
			out = append(out, group{name: c.group, worstKV: math.Inf(1)})
		}
		g := &out[i]
		g.n++
		g.p99OK += b2i(c.p99OK)
		g.goodputOK += b2i(c.goodputOK)
		g.kvOK += b2i(c.kvOK)
		g.worstP99 = math.Max(g.worstP99, c.p99Ratio)
		g.worstKV = math.Min(g.worstKV, c.kvRatio)
		g.meanReversals += float64(c.reversals)
		ratios[c.group] = append(ratios[c.group], c.p99Ratio)
	}
	for i := range out {
		g := &out[i]
		g.meanReversals /= float64(g.n)
		x := ratios[g.name]
		slices.Sort(x)
		g.medianP99 = x[len(x)/2]
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
