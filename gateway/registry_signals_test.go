package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TestInflatedSignalCannotRaiseAdmissionLimit: a gateway with an engine
// registry reads engine signals within the registry's bounds. An engine
// registered with max_batch 8 and max_replicas 2 that signals 50
// replicas of 1,000 slots gets the limit of 2 x 8 slots (and a
// quarter), as does one whose running count while requests wait claims
// 100,000; the clamped fields are counted. Signals for an engine outside
// the registry, or for e-000 at another endpoint, are ignored (counted
// by reason) and change nothing: not the limit, not availability. Without
// the registry the same signals give the limit the claim asks for, which
// is what the registry changes.
func TestInflatedSignalCannotRaiseAdmissionLimit(t *testing.T) {
	const attacker = "http://attacker.example:8000"
	var es []fleet.Engine
	for i := range 2 {
		es = append(es, fleet.Engine{ID: fmt.Sprintf("e-%03d", i), URL: fmt.Sprintf("http://e-%03d.example:8000", i), MaxBatch: 8, MaxReplicas: 2})
	}
	reg, err := fleet.New(es...)
	if err != nil {
		t.Fatal(err)
	}
	for _, withRegistry := range []bool{true, false} {
		t.Run(fmt.Sprintf("registry=%v", withRegistry), func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			opts := []Opt{HealthInterval(-1), Clock(func() time.Time { return now }), MaxInFlightPerEngine(1 << 20)}
			if withRegistry {
				opts = append(opts, Registry(reg))
			}
			g, err := New("c", opts...)
			if err != nil {
				t.Fatal(err)
			}
			s := fullSnapshot(1, 2)
			for _, w := range s.Clusters[1].Weights {
				w.Explanation.MaxConcurrency = 0 // the signals give the batch limit
			}
			if err := g.ApplySnapshot(marshal(t, s)); err != nil {
				t.Fatal(err)
			}
			signal := func(sig *schemas.EngineSignal) {
				t.Helper()
				if sig.EndpointUrl == "" {
					sig.EndpointUrl = "http://" + sig.EngineId + ".example:8000/"
				}
				sig.EventTimeUnixMs = now.UnixMilli()
				g.applySignal(marshal(t, sig))
				g.tickAdmission()
			}
			healthy := schemas.Health_HEALTH_HEALTHY
			signal(&schemas.EngineSignal{EngineId: "e-000", Health: healthy, ReadyReplicas: 2, MaxBatch: 8})
			if got := limitOf(t, g, "e-000"); got != 16+4 {
				t.Fatalf("truthful signal: limit %d, want 2 x 8 + 4", got)
			}
			cases := []struct {
				name      string
				sig       *schemas.EngineSignal
				want, raw int64 // with and without the registry
			}{
				{"inflated max_batch and replicas", &schemas.EngineSignal{EngineId: "e-000", Health: healthy, ReadyReplicas: 50, MaxBatch: 1000},
					16 + 4, 50_000 + 12_500},
				{"e-000 at the attacker's endpoint says it is down", &schemas.EngineSignal{EngineId: "e-000", EndpointUrl: attacker, Health: schemas.Health_HEALTH_UNHEALTHY},
					16 + 4, 0},
			}
			for _, c := range cases {
				signal(c.sig)
				want := c.want
				if !withRegistry {
					want = c.raw
				}
				if c.raw == 0 && !withRegistry {
					// Down: the engine leaves the table's admission; its limit
					// is the limiter's again. Only the registry run is checked.
					continue
				}
				if got := limitOf(t, g, "e-000"); got != want {
					t.Errorf("%s: limit %d, want %d", c.name, got, want)
				}
			}
			// e-001: no max_batch signalled, a running count that claims
			// 100,000 while requests wait.
			signal(&schemas.EngineSignal{EngineId: "e-001", Health: healthy, ReadyReplicas: 1, RunningRequests: 100_000, WaitingRequests: 5})
			want1 := int64(8 + 2)
			if !withRegistry {
				want1 = 100_000 + 25_000
			}
			if got := limitOf(t, g, "e-001"); got != want1 {
				t.Errorf("inflated running count: limit %d, want %d", got, want1)
			}
			// An engine outside the registry is never applied (nor is it
			// in the table: unknown_engine without a registry).
			signal(&schemas.EngineSignal{EngineId: "e9", EndpointUrl: attacker, Health: healthy, ReadyReplicas: 1, MaxBatch: 1000})
			type count struct {
				result string
				want   float64
			}
			counts := []count{{"unregistered_engine", 1}, {"endpoint_mismatch", 1}, {"unknown_engine", 0}}
			clamps := map[string]float64{clampMaxBatch: 1, clampReplicas: 1, clampRunning: 1}
			if !withRegistry {
				counts = []count{{"unregistered_engine", 0}, {"endpoint_mismatch", 0}, {"unknown_engine", 1}}
				clamps = map[string]float64{clampMaxBatch: 0, clampReplicas: 0, clampRunning: 0}
			}
			for _, c := range counts {
				if got := counter(g.m.signals.WithLabelValues("c", c.result)); got != c.want {
					t.Errorf("signals_total{result=%q} %v, want %v", c.result, got, c.want)
				}
			}
			for f, want := range clamps {
				if got := counter(g.m.signalsClamped.WithLabelValues("c", f)); got != want {
					t.Errorf("signals_clamped_total{field=%q} %v, want %v", f, got, want)
				}
			}
		})
	}
}

// TestScreenSignalTakesRegistryRegionAndClass: a registered engine's
// signal carries the registry's region and GPU class whatever it says
// (routing events label engines with them).
func TestScreenSignalTakesRegistryRegionAndClass(t *testing.T) {
	reg, err := fleet.New(fleet.Engine{ID: "e1", URL: "http://e1:8000", Region: "us-east", GPUClass: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	s := &schemas.EngineSignal{EngineId: "e1", EndpointUrl: "HTTP://E1:8000/", Region: "elsewhere", GpuClass: "b200"}
	if _, reason, ok := screenSignal(reg, s); !ok || s.Region != "us-east" || s.GpuClass != "h100" {
		t.Errorf("ok %v (%s), region %q, class %q", ok, reason, s.Region, s.GpuClass)
	}
	if _, _, ok := screenSignal(nil, &schemas.EngineSignal{EngineId: "any"}); !ok {
		t.Error("no registry: a signal was not kept")
	}
}
