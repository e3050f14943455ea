package scenario

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The JSON Schema documents exactly the fields the decoder accepts.
func TestSchemaMatchesTheStructs(t *testing.T) {
	b, err := os.ReadFile("../testdata/scenarios/scenario.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	props := func(node map[string]any) []string {
		p, _ := node["properties"].(map[string]any)
		var out []string
		for k := range p {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	sub := func(path ...string) map[string]any {
		n := schema
		for _, k := range path {
			n = n["properties"].(map[string]any)[k].(map[string]any)
			if items, ok := n["items"].(map[string]any); ok {
				n = items
			}
		}
		return n
	}
	for _, tc := range []struct {
		name string
		typ  reflect.Type
		node map[string]any
	}{
		{"scenario", reflect.TypeFor[Scenario](), schema},
		{"slo", reflect.TypeFor[SLO](), sub("slo")},
		{"clusters", reflect.TypeFor[Cluster](), sub("clusters")},
		{"engines", reflect.TypeFor[Engine](), sub("engines")},
		{"workload", reflect.TypeFor[Workload](), sub("workload")},
		{"control", reflect.TypeFor[Control](), sub("control")},
		{"events", reflect.TypeFor[Event](), sub("events")},
		{"initial", reflect.TypeFor[InitialPlan](), sub("initial")},
	} {
		var fields []string
		for f := range tc.typ.Fields() {
			if tag := strings.Split(f.Tag.Get("json"), ",")[0]; tag != "" && tag != "-" {
				fields = append(fields, tag)
			}
		}
		slices.Sort(fields)
		if got := props(tc.node); !slices.Equal(got, fields) {
			t.Errorf("%s: schema has %v, struct has %v", tc.name, got, fields)
		}
	}
}
