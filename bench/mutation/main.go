// Command mutation is a small mutation tester: it makes one-line
// mutations (comparisons flipped or moved by one, min and max swapped,
// if conditions negated, + and - swapped, && and || swapped, integer
// constants moved by one) in the non-test Go files of each package and
// runs the package's tests against each mutant through `go test
// -overlay`, so no file in the tree is ever written. A mutant the tests
// fail on (or time out on) is killed; one they pass is a survivor.
//
// Every mutant is first run with the golden-file tests skipped (-golden,
// "Golden|Replay"); a survivor is then run against the golden tests
// alone, so one run gives the score with and without them. A mutant on
// a line no test executes (the baseline's coverage profile) survives
// without being run. Mutants that do not compile are counted apart and
// left out of the score.
//
// usage: go run ./bench/mutation [flags] ./pkg ... (bench/mutation/run.sh
// wraps it; docs/testing.md)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

type config struct {
	limit      int
	seed       uint64
	skipGolden bool
	golden     string
	timeout    time.Duration
	lock       string
	only       []string
	ops        map[string]bool
	jsonOut    bool
	list       bool
	from       string
	run        string
}

func main() {
	var cfg config
	var only, ops string
	flag.IntVar(&cfg.limit, "limit", 0, "mutants run per package, a seeded sample (0: all)")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the sample")
	flag.BoolVar(&cfg.skipGolden, "skip-golden", false, "run every mutant with the golden tests skipped only (the score without them)")
	flag.StringVar(&cfg.golden, "golden", "Golden|Replay", "regexp (go test -skip) naming the golden-file tests")
	flag.DurationVar(&cfg.timeout, "timeout", 120*time.Second, "go test -timeout of each mutant's run")
	flag.StringVar(&cfg.lock, "lock", "", "run each go test under `flock -o FILE` (shared with the benchmarks)")
	flag.StringVar(&only, "only", "", "comma-separated file:line (file relative to the module root, or its base name): mutate only these lines")
	flag.StringVar(&ops, "ops", "", "comma-separated operators to use (comparison,boundary,minmax,negate,arith,logical,const; default all)")
	flag.BoolVar(&cfg.jsonOut, "json", false, "print JSON instead of a table")
	flag.BoolVar(&cfg.list, "list", false, "list the mutants that would run and exit")
	flag.StringVar(&cfg.run, "run", "", "run only the tests this regexp names (go test -run): to check that new tests kill their mutants; the score is then theirs alone")
	flag.StringVar(&cfg.from, "from", "", "print the table of a saved -json output instead of running")
	flag.Parse()
	if only != "" {
		cfg.only = strings.Split(only, ",")
	}
	if ops != "" {
		cfg.ops = map[string]bool{}
		for _, o := range strings.Split(ops, ",") {
			cfg.ops[o] = true
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	pkgs := flag.Args()
	if cfg.from != "" {
		if err := printSaved(cfg.from, cfg.skipGolden, os.Stdout); err != nil {
			log.Error("mutation", "err", err)
			os.Exit(1)
		}
		return
	}
	if len(pkgs) == 0 {
		fmt.Fprintln(os.Stderr, "usage: mutation [flags] ./pkg ...")
		os.Exit(2)
	}
	// Interrupted, it stops the running test and removes its files.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, cfg, pkgs, os.Stdout); err != nil {
		stop()
		log.Error("mutation", "err", err)
		os.Exit(1)
	}
}

// status of one mutant.
const (
	killed      = "killed"
	timedOut    = "timeout" // killed by the test timeout
	survived    = "survived"
	uncovered   = "uncovered" // survived: no test executes the line
	buildFailed = "build_failed"
)

type result struct {
	mutant
	// Status is the mutant's fate under the whole suite; NoGolden under
	// the suite without the golden tests.
	Status   string `json:"status"`
	NoGolden string `json:"status_without_golden"`
	// KilledBy is the first failing test.
	KilledBy string  `json:"killed_by,omitempty"`
	Seconds  float64 `json:"seconds"`
}

type pkgReport struct {
	Package string   `json:"package"`
	Sites   int      `json:"mutants_in_package"`
	Results []result `json:"results"`
	// Score and ScoreNoGolden are killed / (killed + survived), build
	// failures left out; -1 when not measured.
	Score         float64 `json:"score"`
	ScoreNoGolden float64 `json:"score_without_golden"`
}

func run(ctx context.Context, log *slog.Logger, cfg config, pkgs []string, w io.Writer) error {
	root, err := goOut(ctx, "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "mutation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var reports []pkgReport
	for _, pkg := range pkgs {
		r, err := runPackage(ctx, log, cfg, root, tmp, pkg)
		if err != nil {
			return fmt.Errorf("package %s: %w", pkg, err)
		}
		reports = append(reports, r)
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	printTable(w, reports, cfg.skipGolden)
	return nil
}

type pkgInfo struct {
	Dir, ImportPath                    string
	GoFiles, TestGoFiles, XTestGoFiles []string
}

func runPackage(ctx context.Context, log *slog.Logger, cfg config, root, tmp, pkg string) (pkgReport, error) {
	out, err := goOut(ctx, "list", "-json", pkg)
	if err != nil {
		return pkgReport{}, err
	}
	var info pkgInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return pkgReport{}, fmt.Errorf("go list: %w", err)
	}
	var files []string
	for _, f := range info.GoFiles {
		files = append(files, filepath.Join(info.Dir, f))
	}
	all, err := packageMutants(root, files)
	if err != nil {
		return pkgReport{}, err
	}
	ms := selectMutants(all, cfg)
	rep := pkgReport{Package: info.ImportPath, Sites: len(all), Score: -1, ScoreNoGolden: -1}
	if cfg.list {
		for _, m := range ms {
			rep.Results = append(rep.Results, result{mutant: m})
		}
		return rep, nil
	}
	hasGolden, err := hasGoldenTests(info, cfg.golden)
	if err != nil {
		return rep, err
	}
	cover := filepath.Join(tmp, "cover.out")
	log.Info("baseline", "package", info.ImportPath, "mutants", len(ms), "of", len(all))
	args := []string{"-coverprofile=" + cover}
	if cfg.run != "" {
		args = append(args, "-run="+cfg.run)
	}
	var res testResult
	for try := 0; try < 2 && res.status != survived; try++ { // a second try: a test may be flaky under load
		if res, err = goTest(ctx, cfg, info.ImportPath, "", args...); err != nil {
			return rep, err
		}
	}
	if res.status != survived {
		return rep, fmt.Errorf("the unmutated package's tests do not pass (%s):\n%s", res.status, res.out)
	}
	// A mutant's run is bounded by five times the baseline's test time
	// (a hung mutant costs little), at least 30s, at most -timeout.
	if d := res.elapsed * 5; d < cfg.timeout {
		cfg.timeout = max(d, 30*time.Second)
	}
	blocks, err := readCover(cover, info.ImportPath, info.Dir)
	if err != nil {
		return rep, err
	}
	for i, m := range ms {
		r := result{mutant: m}
		start := time.Now()
		if !blocks.covered(m.abs, m.Line, m.Col) {
			r.Status, r.NoGolden = uncovered, uncovered
		} else if err := runMutant(ctx, cfg, tmp, info.ImportPath, hasGolden, &r); err != nil {
			return rep, err
		}
		r.Seconds = time.Since(start).Seconds()
		log.Info("mutant", "n", fmt.Sprintf("%d/%d", i+1, len(ms)), "mutant", m.String(), "status", r.Status, "without_golden", r.NoGolden, "killed_by", r.KilledBy)
		rep.Results = append(rep.Results, r)
	}
	rep.Score, rep.ScoreNoGolden = score(rep.Results, false), score(rep.Results, true)
	if cfg.skipGolden {
		rep.Score = -1
	}
	return rep, nil
}

// selectMutants filters by -only and -ops, then takes a seeded sample of
// -limit, returned in source order.
func selectMutants(all []mutant, cfg config) []mutant {
	var ms []mutant
	for _, m := range all {
		if cfg.ops != nil && !cfg.ops[m.Op] {
			continue
		}
		if cfg.only != nil && !matchLine(m, cfg.only) {
			continue
		}
		ms = append(ms, m)
	}
	if cfg.limit <= 0 || len(ms) <= cfg.limit {
		return ms
	}
	idx := rand.New(rand.NewPCG(cfg.seed, 0x6d7574)).Perm(len(ms))[:cfg.limit]
	sort.Ints(idx)
	out := make([]mutant, len(idx))
	for i, j := range idx {
		out[i] = ms[j]
	}
	return out
}

func matchLine(m mutant, only []string) bool {
	for _, o := range only {
		file, line, ok := strings.Cut(o, ":")
		if ok && fmt.Sprint(m.Line) == line && (m.File == file || filepath.Base(m.File) == file) {
			return true
		}
	}
	return false
}

// hasGoldenTests reports whether a top-level test of the package matches
// the golden pattern (else a survivor needs no second run).
func hasGoldenTests(info pkgInfo, pattern string) (bool, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return false, fmt.Errorf("-golden: %w", err)
	}
	fn := regexp.MustCompile(`(?m)^func (Test\w*)\(`)
	for _, f := range append(append([]string(nil), info.TestGoFiles...), info.XTestGoFiles...) {
		src, err := os.ReadFile(filepath.Join(info.Dir, f))
		if err != nil {
			return false, err
		}
		for _, m := range fn.FindAllSubmatch(src, -1) {
			if re.Match(m[1]) {
				return true, nil
			}
		}
	}
	return false, nil
}

// runMutant writes the mutant beside the tree, in tmp, and runs the tests
// with an overlay that puts it in place of its file.
func runMutant(ctx context.Context, cfg config, tmp, pkg string, hasGolden bool, r *result) error {
	src, err := os.ReadFile(r.abs)
	if err != nil {
		return err
	}
	mutated := filepath.Join(tmp, "mutant", filepath.Base(r.abs))
	if err := os.MkdirAll(filepath.Dir(mutated), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(mutated, r.apply(src), 0o644); err != nil {
		return err
	}
	overlay := filepath.Join(tmp, "overlay.json")
	b, err := json.Marshal(map[string]map[string]string{"Replace": {r.abs: mutated}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		return err
	}
	args := []string{"-skip=" + cfg.golden}
	if cfg.run != "" {
		args = append(args, "-run="+cfg.run)
	}
	res, err := goTest(ctx, cfg, pkg, overlay, args...)
	if err != nil {
		return err
	}
	r.NoGolden, r.Status, r.KilledBy = res.status, res.status, res.failed
	if res.status != survived || cfg.skipGolden || !hasGolden || cfg.run != "" {
		return nil
	}
	res, err = goTest(ctx, cfg, pkg, overlay, "-run="+cfg.golden)
	if err != nil {
		return err
	}
	r.Status, r.KilledBy = res.status, res.failed
	return nil
}

type testResult struct {
	status, failed, out string
	elapsed             time.Duration // the test binary's, as go test reports it
}

var okLine = regexp.MustCompile(`(?m)^ok\s+\S+\s+([0-9.]+)s`)

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// goTest runs one package's tests (no -race, -failfast, vet off).
func goTest(ctx context.Context, cfg config, pkg, overlay string, args ...string) (testResult, error) {
	cmd := []string{"go", "test", "-count=1", "-failfast", "-vet=off", fmt.Sprintf("-timeout=%s", cfg.timeout)}
	if overlay != "" {
		cmd = append(cmd, "-overlay="+overlay)
	}
	cmd = append(append(cmd, args...), pkg)
	if cfg.lock != "" {
		cmd = append([]string{"flock", "-o", cfg.lock}, cmd...)
	}
	// The test timeout kills a hung test binary; this one bounds the
	// build as well.
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout+5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	// Its own process group, so that cancelling stops go test and the
	// test binary under flock too.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	outb, err := c.CombinedOutput()
	out := string(outb)
	var exit *exec.ExitError
	switch {
	case err == nil:
		r := testResult{status: survived, out: out}
		if m := okLine.FindStringSubmatch(out); m != nil {
			d, _ := time.ParseDuration(m[1] + "s")
			r.elapsed = d
		}
		return r, nil
	case !errors.As(err, &exit) || ctx.Err() != nil:
		return testResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(cmd, " "), err, out)
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]"):
		return testResult{status: buildFailed, out: out}, nil
	case strings.Contains(out, "panic: test timed out"):
		return testResult{status: timedOut, failed: "timeout", out: out}, nil
	}
	r := testResult{status: killed, failed: "(test binary)", out: out}
	if m := failLine.FindAllStringSubmatch(out, -1); len(m) > 0 {
		r.failed = m[0][1] // the innermost: subtests print before their parent
	}
	return r, nil
}

func goOut(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, exit.Stderr)
		}
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// score is killed / (killed + survived) over the results, build failures
// left out; -1 with no result.
func score(rs []result, noGolden bool) float64 {
	var k, n int
	for _, r := range rs {
		s := r.Status
		if noGolden {
			s = r.NoGolden
		}
		switch s {
		case killed, timedOut:
			k++
			n++
		case survived, uncovered:
			n++
		}
	}
	if n == 0 {
		return -1
	}
	return float64(k) / float64(n)
}

func printSaved(path string, skipGolden bool, w io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var reps []pkgReport
	if err := json.Unmarshal(b, &reps); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	printTable(w, reps, skipGolden)
	return nil
}

func printTable(w io.Writer, reps []pkgReport, skipGolden bool) {
	pct := func(s float64) string {
		if s < 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*s)
	}
	fmt.Fprintf(w, "%-50s %8s %7s %7s %9s %9s %7s %12s\n", "package", "mutants", "run", "killed", "survived", "uncovered", "score", "w/o golden")
	for _, r := range reps {
		c := map[string]int{}
		for _, x := range r.Results {
			s := x.Status
			if skipGolden {
				s = x.NoGolden
			}
			c[s]++
		}
		fmt.Fprintf(w, "%-50s %8d %7d %7d %9d %9d %7s %12s", r.Package, r.Sites, len(r.Results), c[killed]+c[timedOut], c[survived], c[uncovered], pct(r.Score), pct(r.ScoreNoGolden))
		if c[buildFailed] > 0 {
			fmt.Fprintf(w, "  (%d did not compile)", c[buildFailed])
		}
		fmt.Fprintln(w)
	}
	for _, r := range reps {
		var lines []string
		for _, x := range r.Results {
			switch {
			case x.Status == "" && x.NoGolden == "": // -list
				lines = append(lines, "  "+x.String())
			case x.Status == survived || x.Status == uncovered:
				lines = append(lines, fmt.Sprintf("  %s (%s)", x.String(), x.Status))
			case x.NoGolden == survived:
				lines = append(lines, fmt.Sprintf("  %s (killed only by %s)", x.String(), x.KilledBy))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(w, "\n%s:\n%s\n", r.Package, strings.Join(lines, "\n"))
		}
	}
}
