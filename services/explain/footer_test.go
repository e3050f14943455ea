package explain

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

func weight(id string, w, marginal float64, binding ...string) *schemas.EngineWeight {
	return &schemas.EngineWeight{EngineId: id, Weight: w, Explanation: &schemas.Explanation{MarginalMs: marginal, Binding: binding}}
}

// TestFooterAgreesWithTable: the footer says the engines with traffic
// share the lowest marginal ms only when they do, and otherwise names each
// engine priced above it with the constraint that binds (or says none
// does).
func TestFooterAgreesWithTable(t *testing.T) {
	for _, tt := range []struct {
		name      string
		ws        []*schemas.EngineWeight
		want, not []string
	}{
		{"shared", []*schemas.EngineWeight{weight("a", 0.6, 100), weight("b", 0.4, 100.05), weight("z", 0, 150, "zero")},
			[]string{"share the cluster's lowest, 100.00 ms."}, []string{"except"}},
		{"churn and capacity", []*schemas.EngineWeight{weight("a", 0.5, 100), weight("b", 0.3, 120, "churn"), weight("c", 0.2, 300, "capacity")},
			[]string{"except where a constraint binds: b (churn), c (capacity)."}, []string{"share the cluster's lowest, 100.00 ms."}},
		{"unexplained", []*schemas.EngineWeight{weight("a", 0.5, 100), weight("b", 0.5, 130)},
			[]string{"above it with no binding constraint (an older optimizer, or the solve's tolerance): b."}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			snap := &schemas.WeightSnapshot{Clusters: []*schemas.ClusterWeights{{Cluster: "c", Weights: tt.ws}}}
			if err := Write(&buf, snap, snap.Clusters[0]); err != nil {
				t.Fatal(err)
			}
			out := strings.Join(strings.Fields(buf.String()), " ")
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, buf.String())
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q:\n%s", n, buf.String())
				}
			}
		})
	}
}

// TestEveryBindingIsDocumented: every value explain can print is in its
// legend and in docs/explain.md, and the legend explains each value a
// table shows.
func TestEveryBindingIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/explain.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"capacity", "churn", "zero", "unhealthy", "residency", "hold", "failover_split", "probe", "idle_spread"} {
		if Bindings[b] == "" {
			t.Errorf("binding %q has no meaning in Bindings", b)
		}
		if !strings.Contains(string(doc), "`"+b+"`") {
			t.Errorf("binding %q is not in docs/explain.md", b)
		}
		ws := []*schemas.EngineWeight{weight("a", 1, 100, b)}
		if l := Legend(ws); len(l) != 1 || !strings.Contains(l[0], "binding "+b+": "+Bindings[b]) {
			t.Errorf("legend for %q: %q", b, l)
		}
	}
}

// TestExplainModelPlans: a cluster whose snapshot plans a model apart
// shows a model line and that plan's table after the cluster's, and the
// legend explains the bindings of both tables.
func TestExplainModelPlans(t *testing.T) {
	var buf bytes.Buffer
	cw := &schemas.ClusterWeights{Cluster: "c", Weights: []*schemas.EngineWeight{weight("a", 1, 100)},
		ModelWeights: []*schemas.ModelWeights{{Model: "llama-sql", DemandRps: 2.5, ShedFraction: 0.25,
			Weights: []*schemas.EngineWeight{weight("b", 0.75, 140, "capacity"), weight("a", 0, 0, "residency")}}}}
	snap := &schemas.WeightSnapshot{Clusters: []*schemas.ClusterWeights{cw}}
	if err := Write(&buf, snap, cw); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"llama-sql: demand 2.500 rps, shed 25.00%", "binding capacity: ", "binding residency: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "ENGINE  ") != 2 {
		t.Errorf("want two tables (the cluster's and the model's):\n%s", out)
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "share the cluster's lowest, 100.00 ms.") {
		t.Errorf("the footer's price statement must be about the cluster's table only:\n%s", out)
	}
}
