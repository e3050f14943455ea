package control

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestFutureEstimate: an estimate whose window ends beyond the clock plus
// the skew is refused (it would become a snapshot version that holds
// back every later one); one within the skew is not.
func TestFutureEstimate(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	est := func(end time.Time) *schemas.Estimate {
		return &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{Cluster: "eu", WindowEndUnixMs: end.UnixMilli()}}}
	}
	if r := future(est(now.Add(30*time.Second)), now); r != "" {
		t.Fatalf("within the skew: %q", r)
	}
	if r := future(est(now.Add(4*time.Minute)), now); !strings.Contains(r, "beyond the clock") {
		t.Fatalf("4 minutes ahead: %q", r)
	}
}
