package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestEngineGaugesShowWhyAnEngineIsSkipped: the per-engine gauges read
// the picker's own state at scrape time: an ejected engine shows
// unavailable for reason "ejected" and no other, a healthy one for none,
// and each engine of the plan has its share; two gateways sharing a
// registry each export their cluster's series.
func TestEngineGaugesShowWhyAnEngineIsSkipped(t *testing.T) {
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	reg := prometheus.NewRegistry()
	g, _ := startCluster(t, "one", Engines(static(a, b)...), Registerer(reg), Gatherer(reg))
	startCluster(t, "two", Engines(static(a)...), Registerer(reg), Gatherer(reg))
	st, ok := g.pool.Lookup("b")
	if !ok {
		t.Fatal("engine b not in the pool")
	}
	st.SetEjected(true)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, labels map[string]string) (float64, bool) {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if matches(m, labels) {
					return m.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		engine, reason string
		want           float64
	}{{"b", "ejected", 1}, {"b", "health", 0}, {"b", "signal", 0}, {"a", "ejected", 0}} {
		v, ok := get("switchyard_gateway_engine_unavailable", map[string]string{"cluster": "one", "engine": c.engine, "reason": c.reason})
		if !ok || v != c.want {
			t.Errorf("engine %s unavailable{reason=%s} = %v (present %v), want %v", c.engine, c.reason, v, ok, c.want)
		}
	}
	if v, ok := get("switchyard_gateway_engine_share", map[string]string{"cluster": "one", "engine": "a"}); !ok || !(v > 0) {
		t.Errorf("engine a share %v (present %v), want > 0", v, ok)
	}
	if _, ok := get("switchyard_gateway_engine_in_flight", map[string]string{"cluster": "two", "engine": "a"}); !ok {
		t.Error("no in-flight series of the second gateway's cluster")
	}
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}
