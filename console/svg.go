package console

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"
)

// Charts are SVG drawn here, so pages need no charting library: a chart
// is axes with "nice" ticks, lines, step lines and dots, each with a
// <title> tooltip, and a legend.

// palette colours engines by their index among the sorted engine ids.
var palette = [...]string{"#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e", "#9498a0"}

func colorAt(i int) string { return palette[i%len(palette)] }

// shedColor is the colour of shed traffic.
const shedColor = "#7f7f7f"

// rejectedColor draws the share of requests the gateways answered 429
// (observed), beside the planned shed.
const rejectedColor = "#d62728"

// pt is one point of a series; Title is its tooltip, R its dot radius.
type pt struct {
	X, Y, R float64
	Title   string
}

// series is one line (or set of dots) of a chart.
type series struct {
	Name   string
	Color  string
	Points []pt
	Dots   bool // dots instead of a line
	Dashed bool
	Step   bool // hold each value until the next point
}

// chart is an x/y chart.
type chart struct {
	W, H           int
	XMin, XMax     float64
	YMin, YMax     float64
	XLabel, YLabel string
	// XTime: x values are Unix seconds, labelled as UTC clock times.
	XTime  bool
	Series []series
	// Empty is shown instead of the plot when no series has points.
	Empty string
}

// margins of the plot area inside the SVG.
const (
	mLeft, mRight, mTop, mBottom = 56, 12, 12, 40
)

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// timeTicks returns round clock times covering [lo, hi] (Unix seconds).
func timeTicks(lo, hi float64) []float64 {
	span := hi - lo
	step := 60.0
	for _, s := range []float64{10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200} {
		step = s
		if span/s <= 7 {
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		out = append(out, v)
	}
	return out
}

func fmtTick(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
	default:
		s := strings.TrimRight(fmt.Sprintf("%.3f", v), "0")
		return strings.TrimSuffix(s, ".")
	}
}

// finitePoints drops the points a chart cannot place (NaN or infinite
// coordinates, which would make the SVG invalid).
func finitePoints(ps []pt) []pt {
	out := ps[:0:0]
	for _, p := range ps {
		if !math.IsNaN(p.X) && !math.IsNaN(p.Y) && !math.IsInf(p.X, 0) && !math.IsInf(p.Y, 0) {
			out = append(out, p)
		}
	}
	return out
}

// svg renders the chart.
func (c chart) svg() template.HTML {
	c.Series = append([]series(nil), c.Series...)
	for i := range c.Series {
		c.Series[i].Points = finitePoints(c.Series[i].Points)
	}
	if c.W == 0 {
		c.W = 640
	}
	if c.H == 0 {
		c.H = 260
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" xmlns="http://www.w3.org/2000/svg">`, c.W, c.H, c.W, c.H)
	n := 0
	for _, s := range c.Series {
		n += len(s.Points)
	}
	pw, ph := float64(c.W-mLeft-mRight), float64(c.H-mTop-mBottom)
	if n == 0 || !(c.XMax > c.XMin) || !(c.YMax > c.YMin) {
		msg := c.Empty
		if msg == "" {
			msg = "no data yet"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" class="plot"/><text x="%.0f" y="%.0f" class="empty" text-anchor="middle">%s</text></svg>`,
			mLeft, mTop, pw, ph, float64(mLeft)+pw/2, float64(mTop)+ph/2, html.EscapeString(msg))
		return template.HTML(b.String())
	}
	x := func(v float64) float64 { return mLeft + (v-c.XMin)/(c.XMax-c.XMin)*pw }
	y := func(v float64) float64 { return mTop + ph - (v-c.YMin)/(c.YMax-c.YMin)*ph }
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" class="plot"/>`, mLeft, mTop, pw, ph)
	// Axes and grid.
	for _, v := range niceTicks(c.YMin, c.YMax, 5) {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/><text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>`,
			mLeft, float64(mLeft)+pw, y(v), y(v), mLeft-4, y(v)+4, fmtTick(v))
	}
	xt := niceTicks(c.XMin, c.XMax, 6)
	if c.XTime {
		xt = timeTicks(c.XMin, c.XMax)
	}
	for _, v := range xt {
		label := fmtTick(v)
		if c.XTime {
			label = time.Unix(int64(v), 0).UTC().Format("15:04:05")
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" class="grid"/><text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%s</text>`,
			x(v), x(v), mTop, float64(mTop)+ph, x(v), float64(mTop)+ph+14, label)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%s</text>`, float64(mLeft)+pw/2, c.H-6, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(12 %.1f) rotate(-90)" class="axis" text-anchor="middle">%s</text>`, float64(mTop)+ph/2, html.EscapeString(c.YLabel))
	clip := func(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }
	for _, s := range c.Series {
		name := html.EscapeString(s.Name)
		if s.Dots {
			fmt.Fprintf(&b, `<g fill="%s" fill-opacity="0.45" stroke="%s" stroke-width="0.5">`, s.Color, s.Color)
			for _, p := range s.Points {
				r := p.R
				if r <= 0 {
					r = 2.5
				}
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f"><title>%s</title></circle>`,
					x(clip(p.X, c.XMin, c.XMax)), y(clip(p.Y, c.YMin, c.YMax)), r, html.EscapeString(p.Title))
			}
			b.WriteString(`</g>`)
			continue
		}
		var d strings.Builder
		for i, p := range s.Points {
			px, py := x(clip(p.X, c.XMin, c.XMax)), y(clip(p.Y, c.YMin, c.YMax))
			switch {
			case i == 0:
				fmt.Fprintf(&d, "M%.1f %.1f", px, py)
			case s.Step:
				fmt.Fprintf(&d, "H%.1fV%.1f", px, py)
			default:
				fmt.Fprintf(&d, "L%.1f %.1f", px, py)
			}
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s><title>%s</title></path>`, d.String(), s.Color, dash, name)
		// Points carry the tooltips.
		for _, p := range s.Points {
			if p.Title != "" && len(s.Points) <= 120 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s</title></circle>`,
					x(clip(p.X, c.XMin, c.XMax)), y(clip(p.Y, c.YMin, c.YMax)), s.Color, html.EscapeString(p.Title))
			}
		}
	}
	b.WriteString(`</svg>`)
	b.WriteString(legend(c.Series))
	return template.HTML(b.String())
}

// legend lists the series' names and colours.
func legend(ss []series) string {
	var b strings.Builder
	b.WriteString(`<ul class="legend">`)
	for _, s := range ss {
		kind := "line"
		if s.Dots {
			kind = "dot"
		} else if s.Dashed {
			kind = "dash"
		}
		fmt.Fprintf(&b, `<li><span class="key %s" style="--c:%s"></span>%s</li>`, kind, s.Color, html.EscapeString(s.Name))
	}
	b.WriteString(`</ul>`)
	return b.String()
}

// segment is one part of a weight bar.
type segment struct {
	Label string
	Value float64 // fraction in [0,1]
	Color string
}

// weightBar renders fractions as one stacked horizontal bar.
func weightBar(segs []segment, width int) template.HTML {
	if width == 0 {
		width = 360
	}
	const h = 18
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="bar" viewBox="0 0 %d %d" width="%d" height="%d" role="img" xmlns="http://www.w3.org/2000/svg">`, width, h, width, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" class="plot"/>`, width, h)
	at := 0.0
	for _, s := range segs {
		if !(s.Value > 0) {
			continue
		}
		w := math.Min(s.Value, 1-at) * float64(width)
		fmt.Fprintf(&b, `<rect x="%.1f" width="%.1f" height="%d" fill="%s"><title>%s %.1f%%</title></rect>`,
			at*float64(width), w, h, s.Color, html.EscapeString(s.Label), 100*s.Value)
		at += s.Value
		if at >= 1 {
			break
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
