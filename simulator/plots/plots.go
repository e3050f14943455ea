// Package plots draws the simulator's PNG plots with gonum/plot: the TTFT
// CDF of every policy, and per policy its weights and its engines'
// utilization over time.
package plots

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/switchyard-llm/switchyard/simulator/des"
)

// Write draws every plot of results into dir (created if missing) and
// returns the files written, in order.
func Write(dir, scenario string, results []*des.Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating plot dir: %w", err)
	}
	var files []string
	path := filepath.Join(dir, "ttft-cdf.png")
	if err := ttftCDF(path, scenario, results); err != nil {
		return files, err
	}
	files = append(files, path)
	for _, r := range results {
		if r.Series == nil {
			continue
		}
		if r.Series.Weight != nil {
			path := filepath.Join(dir, "weights-"+r.Policy+".png")
			if err := series(path, fmt.Sprintf("%s: %s weights (mean over clusters)", scenario, r.Policy), "weight", r.Series.T, r.Series.Engines, r.Series.Weight); err != nil {
				return files, err
			}
			files = append(files, path)
		}
		path := filepath.Join(dir, "utilization-"+r.Policy+".png")
		if err := series(path, fmt.Sprintf("%s: %s engine utilization", scenario, r.Policy), "utilization", r.Series.T, r.Series.Engines, r.Series.Util); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func ttftCDF(path, scenario string, results []*des.Result) error {
	p := plot.New()
	p.Title.Text = scenario + ": TTFT CDF"
	p.X.Label.Text = "TTFT (ms, log scale)"
	p.Y.Label.Text = "fraction of completed requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, r := range results {
		if r.Series == nil || len(r.Series.TTFTms) == 0 {
			continue
		}
		x := r.Series.TTFTms
		const maxPts = 400
		step := max(1, len(x)/maxPts)
		var pts plotter.XYs
		for k := 0; k < len(x); k += step {
			pts = append(pts, plotter.XY{X: math.Max(x[k], 1), Y: float64(k+1) / float64(len(x))})
		}
		pts = append(pts, plotter.XY{X: math.Max(x[len(x)-1], 1), Y: 1})
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("ttft cdf of %s: %w", r.Policy, err)
		}
		l.Color = colorOf(i)
		l.Width = vg.Points(1.5)
		if i >= 7 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(r.Policy, l)
	}
	return save(p, path)
}

func series(path, title, ylabel string, t []float64, names []string, ys [][]float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	for e, y := range ys {
		n := min(len(t), len(y))
		if n == 0 {
			continue
		}
		pts := make(plotter.XYs, n)
		for k := range n {
			v := y[k]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				v = 0
			}
			pts[k] = plotter.XY{X: t[k], Y: v}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		l.Color = colorOf(e)
		if e >= 7 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(names[e], l)
	}
	p.Legend.Top = true
	return save(p, path)
}

func colorOf(i int) color.Color { return plotutil.Color(i) }

func save(p *plot.Plot, path string) error {
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}
