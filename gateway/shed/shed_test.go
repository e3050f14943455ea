package shed

import (
	"math"
	"testing"
)

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]Priority{"": Normal, "low": Low, "LOW": Low, "0": Low, "1": Normal, "high": High, "2": High} {
		if got, err := ParsePriority(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, in := range []string{"3", "-1", "urgent", "1.5"} {
		if _, err := ParsePriority(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestLowestFirst(t *testing.T) {
	tests := []struct {
		name            string
		low, norm, high int
		f               float64
		want            [3]float64
	}{
		{"none", 20, 60, 20, 0, [3]float64{0, 0, 0}},
		{"part of low", 20, 60, 20, 0.1, [3]float64{0.5, 0, 0}},
		{"low and part of normal", 20, 60, 20, 0.5, [3]float64{1, 0.5, 0}},
		{"all", 20, 60, 20, 1, [3]float64{1, 1, 1}},
		{"no low traffic", 0, 50, 50, 0.25, [3]float64{1, 0.5, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			for i := 0; i < tt.low; i++ {
				s.Count(Low)
			}
			for i := 0; i < tt.norm; i++ {
				s.Count(Normal)
			}
			for i := 0; i < tt.high; i++ {
				s.Count(High)
			}
			s.Update(tt.f, 1)
			for c, w := range tt.want {
				if got := s.Probability(Priority(c)); math.Abs(got-w) > 1e-9 {
					t.Errorf("class %d: %v want %v", c, got, w)
				}
			}
			if s.Decide(Low, 0) != (tt.want[0] > 0) {
				t.Error("Decide disagrees with probability")
			}
		})
	}
}
