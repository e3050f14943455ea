package plan

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// pooledEngine is an engine estimate of class cls whose TTFT profile is
// base·(1, 2, 10) at utilisations (0, 0.5, 0.9) from n requests.
func pooledEngine(id, cls string, base float64, n uint32, end time.Time) *schemas.Estimate {
	est := engineEst(id, "r", 100, end)
	e := est.GetEngine()
	e.GpuClass = cls
	e.TtftProfile = profile([2]float64{0, base}, [2]float64{0.5, 2 * base}, [2]float64{0.9, 10 * base})
	e.TtftProfile.Samples = n
	e.TbotProfile = profile([2]float64{0, 10}, [2]float64{1, 30})
	e.TbotProfile.Samples = 100 * n // tokens: must not count as evidence
	return est
}

func TestPooledProfiles(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name string
		ests []*schemas.Estimate
		// want is the planned latency at utilisation 0 per engine (TTFT
		// only: no demand estimate, so no TBOT term).
		want map[string]float64
	}{
		{
			name: "thin data takes the class curve",
			ests: []*schemas.Estimate{
				pooledEngine("a", "h100", 1000, 5, now),  // one unlucky window: 5 long prompts
				pooledEngine("b", "h100", 100, 495, now), // its twin, well measured
			},
			// class(0) = (5·1000 + 495·100)/500 = 109
			// a: (5·1000 + 50·109)/55 = 190; b: (495·100 + 50·109)/545 = 100.8
			want: map[string]float64{"a": 190, "b": 100.8257},
		},
		{
			name: "classes are not pooled together",
			ests: []*schemas.Estimate{
				pooledEngine("a", "h100", 100, 5, now),
				pooledEngine("l", "l4", 900, 5, now),
			},
			want: map[string]float64{"a": 100, "l": 900},
		},
		{
			name: "no samples anywhere keeps each curve",
			ests: []*schemas.Estimate{
				pooledEngine("a", "h100", 100, 0, now),
				pooledEngine("b", "h100", 300, 0, now),
			},
			want: map[string]float64{"a": 100, "b": 300},
		},
		{
			name: "an engine without samples gets its class's",
			ests: []*schemas.Estimate{
				pooledEngine("a", "h100", 100, 0, now),
				pooledEngine("b", "h100", 300, 40, now),
			},
			want: map[string]float64{"a": 300, "b": 300},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			for _, e := range tt.ests {
				s.Apply(e)
			}
			in, _, err := s.Instance(now, Settings{Clusters: []string{"r"}, MinDemandRPS: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range in.Engines {
				want, ok := tt.want[e.ID]
				if !ok {
					t.Fatalf("unexpected engine %s", e.ID)
				}
				if got := e.LatencyMs[0][1]; math.Abs(got-want) > 1e-3 {
					t.Errorf("%s: latency at 0 = %.4f, want %.4f", e.ID, got, want)
				}
				// Convex and non-decreasing, like every profile.
				pts := e.LatencyMs
				for i := 1; i < len(pts); i++ {
					if pts[i][1] < pts[i-1][1] {
						t.Errorf("%s: decreasing at %v", e.ID, pts[i])
					}
					if i >= 2 {
						s1 := (pts[i-1][1] - pts[i-2][1]) / (pts[i-1][0] - pts[i-2][0])
						s2 := (pts[i][1] - pts[i-1][1]) / (pts[i][0] - pts[i-1][0])
						if s2 < s1-1e-9 {
							t.Errorf("%s: not convex at %v", e.ID, pts[i])
						}
					}
				}
			}
		})
	}
}
