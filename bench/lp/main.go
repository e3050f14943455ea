// Command lp compares Switchyard's optimizer with general LP solvers on
// the same instances: it writes each synthetic instance as a CPLEX-LP
// file (the engine latency term L*f(L/C) as a piecewise-linear epigraph),
// runs COIN-OR CLP (`clp`) and GLPK (`glpsol`) on it, and prints
// objectives, times and ratios.
//
//	go run ./bench/lp                       # 8x64, 32x256, 64x1024
//	go run ./bench/lp -sizes 64x1024 -keep /tmp/lp
//	go run ./bench/lp -sparse 3 -sizes 100x2000              # k nearest of 50 regions
//	go run ./bench/lp -sparse 3 -sizes 100x20000 -clp -barrier -runs 1
//
// The LP fixes each cluster's routed rps to Switchyard's (equal to demand
// unless the instance sheds; max-min fair shedding is not an LP
// objective). With -churn the churn term is modelled exactly (x - prev =
// dp - dn, cost churn*(dp + dn)) and objectives include it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

func main() {
	sizes := flag.String("sizes", "8x64,32x256,64x1024", "comma-separated CLUSTERSxENGINES")
	load := flag.Float64("load", 0.7, "demand as a fraction of capacity*max_utilization")
	seed := flag.Uint64("seed", 1, "instance seed")
	segs := flag.Int("segments", 32, "linear pieces per engine in the epigraph (plus the profile knots)")
	tol := flag.Float64("tolerance", 1e-3, "Switchyard duality-gap tolerance")
	runs := flag.Int("runs", 5, "Switchyard runs per instance (median time reported)")
	keep := flag.String("keep", "", "directory to keep the .lp and instance files in (default: a temp dir)")
	limit := flag.Duration("limit", 5*time.Minute, "time limit per external solver run")
	churn := flag.Float64("churn", 0, "churn_weight; >0 sets previous weights to the optimum for demands changed by -change")
	change := flag.Float64("change", 0.02, "relative demand change between the previous plan and the instance (with -churn)")
	sparse := flag.Int("sparse", 0, "K > 0: synth.SparseInstance instead, each cluster allowed only the engines of its K nearest regions")
	regions := flag.Int("regions", 50, "regions of the sparse instance (with -sparse)")
	clpMethod := flag.String("clp", "-solve", "CLP's method argument: -solve, or -barrier (which finishes 100x20000 sparse in ~90 s, where -solve's simplex had not in 15 minutes)")
	flag.Parse()
	cfg := config{*load, *seed, *segs, *tol, *runs, *keep, *limit, *churn, *change, *sparse, *regions, *clpMethod}
	if err := run(*sizes, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "lp:", err)
		os.Exit(1)
	}
}

type config struct {
	load          float64
	seed          uint64
	segs          int
	tol           float64
	runs          int
	keep          string
	limit         time.Duration
	churn, change float64
	sparseK       int
	regions       int
	clpMethod     string
}

// instance builds the synthetic instance of one size.
func (c config) instance(nc, ne int) *optimizer.Instance {
	if c.sparseK > 0 {
		return synth.SparseInstance(synth.Sparse{Clusters: nc, Engines: ne, Regions: c.regions, K: c.sparseK, Seed: c.seed, Load: c.load})
	}
	return synth.Instance(synth.Config{Clusters: nc, Engines: ne, Seed: c.seed, Load: c.load})
}

type result struct {
	size                       string
	ours, oursPWL, oursMs, gap float64
	clp, clpMs, clpSolveMs     float64
	glpk, glpkMs, glpkSolveMs  float64
	clpErr, glpkErr            error
}

func run(sizes string, cfg config) error {
	segs, tol, runs, keep, limit := cfg.segs, cfg.tol, cfg.runs, cfg.keep, cfg.limit
	dir := keep
	if dir == "" {
		d, err := os.MkdirTemp("", "switchyard-lp-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var results []result
	for _, size := range strings.Split(sizes, ",") {
		var nc, ne int
		if _, err := fmt.Sscanf(strings.TrimSpace(size), "%dx%d", &nc, &ne); err != nil {
			return fmt.Errorf("size %q: want CLUSTERSxENGINES", size)
		}
		in := cfg.instance(nc, ne)
		if cfg.churn > 0 {
			for k := range in.Clusters {
				in.Clusters[k].DemandRPS *= 1 - cfg.change*float64(k%3-1)
			}
			prev, err := optimizer.Solve(in, optimizer.Tolerance(tol))
			if err != nil {
				return err
			}
			in = cfg.instance(nc, ne)
			in.Previous, in.ChurnWeight = prev.Weights, cfg.churn
		}
		r := result{size: size}
		var sol *optimizer.Solution
		var times []float64
		for range max(runs, 1) {
			start := time.Now()
			s, err := optimizer.Solve(in, optimizer.Tolerance(tol))
			if err != nil {
				return err
			}
			times = append(times, float64(time.Since(start).Microseconds())/1000)
			sol = s
		}
		sort.Float64s(times)
		r.oursMs, r.gap = times[len(times)/2], sol.DualityGap
		routed := 0.0
		for _, c := range in.Clusters {
			routed += c.DemandRPS * (1 - sol.Shed[c.ID])
		}
		r.ours = sol.ObjectiveMs*routed + in.ChurnWeight*sol.ChurnRPS
		path := filepath.Join(dir, fmt.Sprintf("switchyard-%s.lp", size))
		pwl, err := writeLP(path, in, sol, segs)
		if err != nil {
			return err
		}
		r.oursPWL = pwl
		r.clp, r.clpMs, r.clpSolveMs, r.clpErr = runSolver(limit, `Optimal objective\s+([-+0-9.eE]+)\s.*time\s+([0-9.]+)`, "clp", path, cfg.clpMethod)
		r.glpk, r.glpkMs, r.glpkSolveMs, r.glpkErr = runSolver(limit, `(?s).*\*\s*\d+: obj =\s+([-+0-9.eE]+).*Time used:\s+([0-9.]+) secs`, "glpsol", "--lp", path, "--tmlim", strconv.Itoa(int(limit.Seconds())))
		results = append(results, r)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tswitchyard obj\tgap\tms\tsw obj (LP model)\tCLP obj\tCLP ms (wall/solve)\tGLPK obj\tGLPK ms (wall/solve)\tobj/CLP\tobj(LP)/CLP\tCLP/sw time\tGLPK/sw time\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.6g\t%.2g\t%.2f\t%.6g\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.size, r.ours, r.gap, r.oursMs, r.oursPWL,
			num(r.clp, r.clpErr), ms(r.clpMs, r.clpSolveMs, r.clpErr), num(r.glpk, r.glpkErr), ms(r.glpkMs, r.glpkSolveMs, r.glpkErr),
			ratio(r.ours, r.clp, r.clpErr), ratio(r.oursPWL, r.clp, r.clpErr), ratio(r.clpMs, r.oursMs, r.clpErr), ratio(r.glpkMs, r.oursMs, r.glpkErr))
	}
	tw.Flush()
	fmt.Println("\nobjectives are total latency rates (ms*rps); 'sw obj (LP model)' is Switchyard's plan priced with the LP's piecewise-linear")
	fmt.Println("engine term, so obj(LP)/CLP-1 is Switchyard's suboptimality on the LP's own model; solver times are wall clock of the")
	fmt.Println("process (including reading the LP) / the solver's own report. Switchyard time is in-process, median of the runs.")
	for _, r := range results {
		if r.clpErr != nil {
			fmt.Printf("%s: clp: %v\n", r.size, r.clpErr)
		}
		if r.glpkErr != nil {
			fmt.Printf("%s: glpsol: %v\n", r.size, r.glpkErr)
		}
	}
	return nil
}

func num(v float64, err error) string {
	if err != nil {
		return "error"
	}
	return fmt.Sprintf("%.6g", v)
}

func ms(wall, solve float64, err error) string {
	if err != nil {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1f", wall, solve)
}

func ratio(a, b float64, err error) string {
	if err != nil || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.5f", a/b)
}

// runSolver runs an external solver and extracts the objective and its
// self-reported time (seconds) with pattern.
func runSolver(limit time.Duration, pattern string, name string, args ...string) (obj, wallMs, solveMs float64, err error) {
	if _, err := exec.LookPath(name); err != nil {
		return 0, 0, 0, fmt.Errorf("%s not installed (apt-get install -y coinor-clp glpk-utils)", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit+10*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	wallMs = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		return 0, wallMs, 0, fmt.Errorf("%v: %s", err, tail(out))
	}
	m := regexp.MustCompile(pattern).FindSubmatch(out)
	if m == nil {
		return 0, wallMs, 0, errors.New("no optimal objective in output: " + tail(out))
	}
	obj, _ = strconv.ParseFloat(string(m[1]), 64)
	s, _ := strconv.ParseFloat(string(m[2]), 64)
	return obj, wallMs, s * 1000, nil
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 400 {
		s = "..." + s[len(s)-400:]
	}
	return s
}

// writeLP writes in as an LP with the routed amounts of sol and returns
// sol's objective priced under the LP's piecewise-linear engine term.
func writeLP(path string, in *optimizer.Instance, sol *optimizer.Solution, segs int) (float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	engines := map[string]int{}
	for j, e := range in.Engines {
		engines[e.ID] = j
	}
	usable := func(e optimizer.Engine) bool { return e.Healthy && e.CapacityRPS > 0 }
	fmt.Fprintln(w, "\\ Switchyard routing instance as an LP: x_i_j rps from cluster i to engine j,")
	fmt.Fprintln(w, "\\ L_j engine load, t_j >= L*f(L/C) via the secants of that convex function.")
	fmt.Fprintln(w, "Minimize")
	fmt.Fprint(w, " obj:")
	n := 0
	term := func(s string) {
		fmt.Fprint(w, s)
		if n++; n%8 == 0 {
			fmt.Fprint(w, "\n  ")
		}
	}
	cw := in.ChurnWeight
	for i, c := range in.Clusters {
		for _, id := range sortedKeys(in.RTTms[c.ID]) {
			if j := engines[id]; usable(in.Engines[j]) {
				coef := in.RTTms[c.ID][id]
				if cw > 0 && in.Previous[c.ID][id] > 0 {
					term(fmt.Sprintf(" + %.12g x_%d_%d + %.12g dp_%d_%d + %.12g dn_%d_%d", coef, i, j, cw, i, j, cw, i, j))
					continue
				}
				term(fmt.Sprintf(" + %.12g x_%d_%d", coef+cw, i, j))
			}
		}
	}
	for j, e := range in.Engines {
		if usable(e) {
			term(fmt.Sprintf(" + t_%d", j))
		}
	}
	fmt.Fprintln(w, "\nSubject To")
	for i, c := range in.Clusters {
		n = 0
		fmt.Fprintf(w, " route_%d:", i)
		any := false
		for _, id := range sortedKeys(in.RTTms[c.ID]) {
			if j := engines[id]; usable(in.Engines[j]) {
				term(fmt.Sprintf(" + x_%d_%d", i, j))
				any = true
			}
		}
		if !any {
			fmt.Fprint(w, " 0 x_dummy")
		}
		fmt.Fprintf(w, " = %.12g\n", c.DemandRPS*(1-sol.Shed[c.ID]))
	}
	for i, c := range in.Clusters {
		for _, id := range sortedKeys(in.RTTms[c.ID]) {
			if j := engines[id]; usable(in.Engines[j]) && cw > 0 && in.Previous[c.ID][id] > 0 {
				fmt.Fprintf(w, " churn_%d_%d: x_%d_%d - dp_%d_%d + dn_%d_%d = %.12g\n", i, j, i, j, i, j, i, j, c.DemandRPS*in.Previous[c.ID][id])
			}
		}
	}
	users := make([][]int, len(in.Engines))
	for i, c := range in.Clusters {
		for id := range in.RTTms[c.ID] {
			j := engines[id]
			users[j] = append(users[j], i)
		}
	}
	pwlTotal := cw * sol.ChurnRPS
	for _, c := range in.Clusters {
		for id, wgt := range sol.Weights[c.ID] {
			pwlTotal += wgt * c.DemandRPS * in.RTTms[c.ID][id]
		}
	}
	for j, e := range in.Engines {
		if !usable(e) {
			continue
		}
		sort.Ints(users[j])
		n = 0
		fmt.Fprintf(w, " load_%d:", j)
		for _, i := range users[j] {
			term(fmt.Sprintf(" + x_%d_%d", i, j))
		}
		fmt.Fprintf(w, " - L_%d = 0\n", j)
		// Breakpoints: a uniform grid plus the profile knots.
		cp := e.CapacityRPS * in.MaxUtilization
		var bp []float64
		for k := 0; k <= segs; k++ {
			bp = append(bp, cp*float64(k)/float64(segs))
		}
		for _, p := range e.LatencyMs {
			if p[0] > 0 && p[0] < in.MaxUtilization {
				bp = append(bp, p[0]*e.CapacityRPS)
			}
		}
		sort.Float64s(bp)
		g := func(l float64) float64 { return l * at(e.LatencyMs, l/e.CapacityRPS) }
		load := sol.Engines[e.ID].LoadRPS
		pw := 0.0
		for k := 0; k+1 < len(bp); k++ {
			a, b := bp[k], bp[k+1]
			if b-a < 1e-12*cp {
				continue
			}
			slope := (g(b) - g(a)) / (b - a)
			icept := g(a) - slope*a
			fmt.Fprintf(w, " epi_%d_%d: t_%d - %.12g L_%d >= %.12g\n", j, k, j, slope, j, icept)
			pw = math.Max(pw, icept+slope*load)
		}
		pwlTotal += pw
	}
	fmt.Fprintln(w, "Bounds")
	for j, e := range in.Engines {
		if usable(e) {
			fmt.Fprintf(w, " 0 <= L_%d <= %.12g\n", j, e.CapacityRPS*in.MaxUtilization)
		}
	}
	fmt.Fprintln(w, "End")
	if err := w.Flush(); err != nil {
		return 0, err
	}
	return pwlTotal, f.Close()
}

// at interpolates a profile as the instance format defines.
func at(pts [][2]float64, u float64) float64 {
	p := optimizer.Profile{}
	for _, q := range pts {
		p.Points = append(p.Points, optimizer.ProfilePoint{Utilization: q[0], LatencyMs: q[1]})
	}
	return p.At(u)
}

func sortedKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
