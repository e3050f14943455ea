package des_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/policy"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
)

// regressionBaselines are the baselines switchyard is held to: every one
// that is the best or close to it on some shipped scenario. round-robin,
// random and p2c are left out to keep the test short under -race: on
// every shipped scenario one of these six is at least as good as they are
// (docs/sim.md, "Matrix").
var regressionBaselines = []string{"nearest", "least-outstanding", "legacy-irb", "chwbl", "prefix-aware", "llmd-scorer"}

// TestSwitchyardKeepsUpWithTheBestBaseline runs shipped scenarios (seed 1,
// the first durationS seconds of arrivals; the full matrix is
// bench/sim/matrix.sh) and fails when switchyard's p99
// TTFT is more than margin times the best baseline's. The margins are
// issue 10's goal (1.10) where switchyard meets it today, and where it
// does not, today's ratio with some room for noise, to tighten towards
// 1.10 as routing improves. Never loosen one without saying why in the
// commit.
func TestSwitchyardKeepsUpWithTheBestBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seven policies on seven shipped scenarios")
	}
	for _, tc := range []struct {
		scenario  string
		durationS float64 // 0: the scenario's own
		margin    float64
	}{
		// The ratio with peer load sharing and the picker's strict rule
		// (issue 10, December 2026) is in the comment. diurnal (0.18,
		// prefix-aware), region-outage (0.73, chwbl) and flash-crowd
		// (0.78, chwbl) at 547e913 are left to the matrix: switchyard
		// leads there by a wide margin, and their events need the whole
		// span, which takes minutes under -race.
		{"region-bc", 120, 1.10},      // 0.90 (chwbl)
		{"hetero-fleet", 120, 1.10},   // 0.73 (llmd-scorer); was 1.15 (1.07) before 9a2e1ca
		{"conversations", 0, 1.10},    // 1.02 (llmd-scorer; 4,814 against 4,734 ms)
		{"class-spread", 120, 1.10},   // 0.18 (llmd-scorer)
		{"engine-restart", 150, 1.10}, // 0.63 (chwbl)
		{"non-streaming", 120, 1.10},  // 0.74 (prefix-aware)
		// no-batch-limit runs its whole span: its first 120 s, before any
		// batch limit is inferred, put every version measured above 1.10
		// in about half the seeds (seeds 1-15: 9 before capacity was
		// tracked in work, 8 after; seed 1 went 1.03 -> 1.52, seed 6
		// 1.53 -> 1.04), so that span's seed 1 measured luck.
		{"no-batch-limit", 0, 1.10}, // 0.87 (llmd-scorer; 141 against 162 ms; 0.97 before the gateways ran admission)
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			sc, err := scenario.Load("../testdata/scenarios/" + tc.scenario + ".json")
			if err != nil {
				t.Fatal(err)
			}
			if tc.durationS > 0 {
				sc.DurationS = tc.durationS
			}
			wl, err := sc.Build(scenario.BuildOptions{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			p99 := map[string]float64{}
			for _, name := range append([]string{"switchyard"}, regressionBaselines...) {
				f, err := policy.New(name, 1)
				if err != nil {
					t.Fatal(err)
				}
				r, err := des.Run(sc, wl, name, f, des.Options{})
				if err != nil {
					t.Fatal(err)
				}
				p99[name] = r.Metrics.TTFTms.P99
			}
			best, by := math.Inf(1), ""
			for _, name := range regressionBaselines {
				if p99[name] < best {
					best, by = p99[name], name
				}
			}
			var all strings.Builder
			for _, name := range regressionBaselines {
				fmt.Fprintf(&all, " %s %.0f", name, p99[name])
			}
			ratio := p99["switchyard"] / best
			t.Logf("switchyard p99 TTFT %.0f ms, best baseline %s %.0f ms: ratio %.2f (margin %.2f);%s",
				p99["switchyard"], by, best, ratio, tc.margin, all.String())
			if ratio > tc.margin {
				t.Errorf("switchyard p99 TTFT %.0f ms is %.2fx the best baseline's (%s, %.0f ms), margin %.2f",
					p99["switchyard"], ratio, by, best, tc.margin)
			}
		})
	}
}
