package console

import (
	"math"
	"strings"
	"testing"
)

func TestChartSkipsPointsItCannotPlace(t *testing.T) {
	c := chart{XMin: 0, XMax: 1, YMin: 0, YMax: 1, Series: []series{
		{Name: "line", Color: "#000", Points: []pt{{X: 0, Y: 0}, {X: 0.5, Y: math.NaN()}, {X: math.Inf(1), Y: 1}, {X: 1, Y: 1}}},
		{Name: "dots", Color: "#000", Dots: true, Points: []pt{{X: 0.2, Y: math.Inf(-1)}, {X: 0.3, Y: 0.3, Title: "<b>"}}},
	}}
	out := string(c.svg())
	if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
		t.Errorf("chart contains a non-finite coordinate:\n%s", out)
	}
	// The line's points carry no tooltips, so only the finite dot is a circle.
	if n := strings.Count(out, "<circle"); n != 1 {
		t.Errorf("%d circles, want 1 (the one finite dot)", n)
	}
	if !strings.Contains(out, "&lt;b&gt;") {
		t.Error("a tooltip is not escaped")
	}
	empty := string(chart{XMin: 0, XMax: 1, YMin: 0, YMax: 1, Empty: "nothing <here>"}.svg())
	if !strings.Contains(empty, "nothing &lt;here&gt;") {
		t.Errorf("empty chart does not say why: %s", empty)
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tt := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 1, "0 0.2 0.4 0.6 0.8 1"},
		{0, 930, "0 200 400 600 800"},
		{0, 0, "0"},
	} {
		var got []string
		for _, v := range niceTicks(tt.lo, tt.hi, 5) {
			got = append(got, fmtTick(v))
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("niceTicks(%v, %v) = %v, want %s", tt.lo, tt.hi, got, tt.want)
		}
	}
}
