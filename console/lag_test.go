package console

import (
	"strings"
	"testing"
)

// TestPipelineListsEveryGroup: the pipeline page lists the lag of every
// consumer group with commits on the topics, not only the processor's: a
// team's group 80 routing events behind and the processor's 21 signals
// behind, the processor's first.
func TestPipelineListsEveryGroup(t *testing.T) {
	f := newFixture(t)
	code, body := f.get(t, "/pipeline")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	proc := `<tr><td>switchyard-processor</td><td>Empty</td><td class="num">0</td><td>switchyard.engine.signals</td><td class="num">21</td></tr>` // 20 signals and the invalid record
	team := `<tr><td>team-analytics</td><td>Empty</td><td class="num">0</td><td>switchyard.routing.events</td><td class="num">80</td></tr>`
	i, j := strings.Index(body, proc), strings.Index(body, team)
	if i < 0 || j < 0 || i > j {
		t.Fatalf("want the processor's row %q, then the team's %q, in:\n%s", proc, team, body)
	}
}
