package estimate

import (
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

func checkShape(t *testing.T, p *schemas.LatencyProfile) {
	t.Helper()
	pts := p.GetPoints()
	if len(pts) != len(Knots()) {
		t.Fatalf("%d points, want %d", len(pts), len(Knots()))
	}
	for i, pt := range pts {
		if !finite(pt.GetLatencyMs()) || pt.GetLatencyMs() < 0 {
			t.Fatalf("point %d = %v", i, pt)
		}
		if i > 0 && pt.GetLatencyMs() < pts[i-1].GetLatencyMs()-1e-6 {
			t.Errorf("decreasing at %d: %v", i, pts)
		}
		if i > 1 {
			s1 := (pts[i-1].GetLatencyMs() - pts[i-2].GetLatencyMs()) / (pts[i-1].GetUtilization() - pts[i-2].GetUtilization())
			s2 := (pt.GetLatencyMs() - pts[i-1].GetLatencyMs()) / (pt.GetUtilization() - pts[i-1].GetUtilization())
			if s2 < s1-1e-6 {
				t.Errorf("not convex at %d: slopes %v then %v", i, s1, s2)
			}
		}
	}
}

func TestConvexFit(t *testing.T) {
	truth := func(u float64) float64 { return 50 + 20*u + 400*math.Max(0, u-0.6) }
	for _, tc := range []struct {
		name      string
		obs       []Obs
		wantPrior bool
		check     func(t *testing.T, p *schemas.LatencyProfile)
	}{
		{name: "no_data", wantPrior: true},
		{name: "thin", obs: []Obs{{0.3, 80, 3}}, wantPrior: true},
		{name: "dense", obs: func() []Obs {
			var o []Obs
			for u := 0.05; u < 1; u += 0.05 {
				o = append(o, Obs{u, truth(u), 50})
			}
			return o
		}(), check: func(t *testing.T, p *schemas.LatencyProfile) {
			for _, pt := range p.GetPoints() {
				if pt.GetUtilization() <= 1 && math.Abs(pt.GetLatencyMs()-truth(pt.GetUtilization())) > 0.05*truth(pt.GetUtilization())+2 {
					t.Errorf("at u=%v got %v, want about %v", pt.GetUtilization(), pt.GetLatencyMs(), truth(pt.GetUtilization()))
				}
			}
			if p.GetFitRmseMs() > 5 {
				t.Errorf("rmse %v", p.GetFitRmseMs())
			}
		}},
		{name: "noisy_decreasing_data", obs: []Obs{{0.1, 300, 40}, {0.5, 100, 40}, {0.9, 50, 40}}},
		{name: "garbage_ignored", obs: []Obs{{math.NaN(), 1, 1}, {0.5, math.Inf(1), 1}, {-1, 5, 1}, {0.5, 5, -1}}, wantPrior: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []Kind{TTFT, TBOT} {
				p := ConvexFit(tc.obs, "h100", k)
				checkShape(t, p)
				if p.GetPrior() != tc.wantPrior {
					t.Errorf("%v prior = %v, want %v", k, p.GetPrior(), tc.wantPrior)
				}
				if tc.check != nil && k == TTFT {
					tc.check(t, p)
				}
			}
		})
	}
}

func TestPriorProfiles(t *testing.T) {
	for _, g := range []string{"h100", "a100", "l4", "unknown"} {
		for _, k := range []Kind{TTFT, TBOT} {
			checkShape(t, PriorProfile(g, k))
		}
	}
	if PriorFor("h100").TTFTBaseMs >= PriorFor("l4").TTFTBaseMs {
		t.Error("h100 prior should be faster than l4")
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key, kind string
		n         int
		err       bool
	}{
		{EngineKey("e1"), KindEngine, 1, false},
		{DemandKey("us"), KindDemand, 1, false},
		{NetworkKey("us", "e1"), KindNetwork, 2, false},
		{"network/us", "", 0, true},
		{"bogus/x", "", 0, true},
		{"engine", "", 0, true},
	} {
		kind, parts, err := ParseKey(tc.key)
		if (err != nil) != tc.err || kind != tc.kind || len(parts) != tc.n {
			t.Errorf("ParseKey(%q) = %q, %v, %v", tc.key, kind, parts, err)
		}
	}
}

func validSignal() *schemas.EngineSignal {
	return &schemas.EngineSignal{
		SchemaVersion: schemas.Version, EngineId: "e", GpuClass: "a100", EventTimeUnixMs: 1_700_000_000_000,
		ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY, RunningRequests: 4, KvCacheUsage: 0.3,
		IntervalSeconds: 2, RequestsFinished: 6, GenerationTokens: 600, MaxBatch: 16,
		TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1}, Counts: []uint64{5, 1}, Sum: 0.4, Count: 6},
	}
}

// computeAll folds sig and ev into one pane and validates every estimate.
func computeAll(t *testing.T, sigs []*schemas.EngineSignal, evs []*schemas.RoutingEvent) []*schemas.Estimate {
	t.Helper()
	p := NewPane()
	for _, s := range sigs {
		p.AddSignal(s)
	}
	for _, ev := range evs {
		p.AddRoutingEvent(ev)
	}
	out := Compute(Window{Start: 0, End: 10_000, Slide: 5_000, PaneStarts: []int64{0}, Panes: []*Pane{p}}, nil)
	for _, e := range out {
		if err := ValidateEstimate(e); err != nil {
			t.Fatalf("computed an invalid estimate %v: %v", e, err)
		}
		b, err := Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeEstimate(b); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestValidateSignal(t *testing.T) {
	rt := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		name string
		mut  func(*schemas.EngineSignal)
		code string
	}{
		{"valid", func(*schemas.EngineSignal) {}, ""},
		{"no_version", func(s *schemas.EngineSignal) { s.SchemaVersion = 0 }, ReasonMissingField},
		{"newer_version_read", func(s *schemas.EngineSignal) { s.SchemaVersion = schemas.Version + 1 }, ""},
		{"no_engine", func(s *schemas.EngineSignal) { s.EngineId = "" }, ReasonMissingField},
		{"nan", func(s *schemas.EngineSignal) { s.RunningRequests = math.NaN() }, ReasonInvalidValue},
		{"inf", func(s *schemas.EngineSignal) { s.PromptTokens = math.Inf(1) }, ReasonInvalidValue},
		{"negative", func(s *schemas.EngineSignal) { s.WaitingRequests = -2 }, ReasonInvalidValue},
		{"kv_above_one", func(s *schemas.EngineSignal) { s.KvCacheUsage = 1.5 }, ReasonInvalidValue},
		{"kv_capacity", func(s *schemas.EngineSignal) { s.KvCapacityTokens = 1 << 20 }, ""},
		{"kv_capacity_negative", func(s *schemas.EngineSignal) { s.KvCapacityTokens = -1 }, ReasonInvalidValue},
		{"kv_capacity_nan", func(s *schemas.EngineSignal) { s.KvCapacityTokens = math.NaN() }, ReasonInvalidValue},
		{"future", func(s *schemas.EngineSignal) { s.EventTimeUnixMs = rt.Add(time.Hour).UnixMilli() }, ReasonFutureTime},
		{"zero_time", func(s *schemas.EngineSignal) { s.EventTimeUnixMs = 0 }, ReasonInvalidTime},
		{"hist_shape", func(s *schemas.EngineSignal) { s.TtftSeconds.Counts = []uint64{1} }, ReasonInvalidValue},
		{"hist_bounds", func(s *schemas.EngineSignal) { s.TtftSeconds.Bounds = []float64{math.NaN()} }, ReasonInvalidValue},
		{"engine_id_crlf", func(s *schemas.EngineSignal) { s.EngineId = "x\r\nSet-Cookie: a=1" }, ReasonInvalidValue},
		{"engine_id_long", func(s *schemas.EngineSignal) { s.EngineId = strings.Repeat("e", 257) }, ReasonInvalidValue},
		{"endpoint_ftp", func(s *schemas.EngineSignal) { s.EndpointUrl = "ftp://user:pw@x/?q=1" }, ReasonInvalidValue},
		{"endpoint_user", func(s *schemas.EngineSignal) { s.EndpointUrl = "http://user:pw@x:8000" }, ReasonInvalidValue},
		{"endpoint_query", func(s *schemas.EngineSignal) { s.EndpointUrl = "http://x:8000/v1?a=b" }, ReasonInvalidValue},
		{"endpoint_ipv6", func(s *schemas.EngineSignal) { s.EndpointUrl = "https://[::1]:8443/base" }, ""},
		{"endpoint_empty", func(s *schemas.EngineSignal) { s.EndpointUrl = "" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSignal()
			tc.mut(s)
			b, _ := proto.Marshal(s)
			_, err := DecodeSignal(b, rt)
			var code string
			if err != nil {
				code = err.(*Invalid).Code
			}
			if code != tc.code {
				t.Errorf("code = %q (%v), want %q", code, err, tc.code)
			}
		})
	}
}

func FuzzDecodeSignal(f *testing.F) {
	b, _ := proto.Marshal(validSignal())
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSignal(b, time.UnixMilli(1_700_000_000_000))
		if err != nil {
			if Reason(err) == "" {
				t.Fatal("empty reason")
			}
			return
		}
		for _, e := range computeAll(t, []*schemas.EngineSignal{s, s}, nil) {
			en := e.GetEngine()
			if !finite(en.GetCapacityRps()) || !finite(en.GetUtilization()) {
				t.Fatalf("non-finite estimate %v", en)
			}
		}
	})
}

func FuzzDecodeRoutingEvent(f *testing.F) {
	ev := &schemas.RoutingEvent{SchemaVersion: schemas.Version, Cluster: "us", EngineId: "e", EventTimeUnixMs: 1, TtftMs: 90, EngineTtftMs: 60, Status: schemas.RequestStatus_REQUEST_STATUS_OK}
	b, _ := proto.Marshal(ev)
	f.Add(b)
	f.Add([]byte("\x08\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := DecodeRoutingEvent(b, time.Time{})
		if err != nil {
			return
		}
		computeAll(t, []*schemas.EngineSignal{validSignal()}, []*schemas.RoutingEvent{ev})
	})
}

func FuzzDecodeEstimate(f *testing.F) {
	p := NewPane()
	p.AddSignal(validSignal())
	p.AddRoutingEvent(&schemas.RoutingEvent{SchemaVersion: 1, Cluster: "us", EngineId: "e", EventTimeUnixMs: 1, TtftMs: 80, Status: schemas.RequestStatus_REQUEST_STATUS_OK})
	for _, e := range Compute(Window{End: 10_000, Slide: 5_000, PaneStarts: []int64{0}, Panes: []*Pane{p}}, nil) {
		b, _ := Marshal(e)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEstimate(b)
		if err != nil {
			return
		}
		if Key(e) == "" {
			t.Fatal("valid estimate without key")
		}
		if _, _, err := ParseKey(Key(e)); err != nil && e.GetNetwork() == nil {
			t.Fatalf("key %q: %v", Key(e), err)
		}
	})
}

func TestWindowCapacity(t *testing.T) {
	tests := []struct {
		name string
		w    windowCapacity
		want float64
	}{
		{"unhealthy", windowCapacity{rps: 10, replicas: 1, prior: 16}, 0},
		{"no traffic: prior", windowCapacity{replicas: 2, healthy: true, prior: 16}, 32},
		{"queue past half a second: throughput", windowCapacity{rps: 60, waiting: 40, waitScrapes: 5, replicas: 1, healthy: true, prior: 16, util: 0.5}, 60},
		{"queue in one scrape is not saturation", windowCapacity{rps: 1, waiting: 1, waitScrapes: 1, replicas: 1, healthy: true, prior: 16, util: 0.01}, 0.01/0.3*1/0.3 + (1-0.01/0.3)*16},
		{"prefill-budget queue is not saturation", windowCapacity{rps: 60, waiting: 3, waitScrapes: 5, replicas: 1, healthy: true, prior: 16, util: 0.5}, 120},
		{"occupancy guess", windowCapacity{rps: 40, replicas: 2, healthy: true, prior: 16, util: 0.4}, 100},
		{"low occupancy leans on the prior", windowCapacity{rps: 3, replicas: 1, healthy: true, prior: 16, util: 0.15}, 0.5*3/0.3 + 0.5*16},
		{"full batch: throughput", windowCapacity{rps: 50, replicas: 1, healthy: true, prior: 16, util: 1}, 50},
		{"token mix: the prior's work bound", windowCapacity{rps: 20, replicas: 2, healthy: true, prior: 16, util: 0.1, work: 0.02}, 100},
		{"token mix, bound below throughput: throughput", windowCapacity{rps: 120, replicas: 2, healthy: true, prior: 16, util: 0.1, work: 0.02}, 120},
		{"token mix, queue: throughput", windowCapacity{rps: 40, waiting: 40, waitScrapes: 5, replicas: 1, healthy: true, prior: 16, work: 0.02}, 40},
		{"batch bound below the token-mix bound", windowCapacity{rps: 20, replicas: 2, healthy: true, prior: 16, util: 0.1, work: 0.02, batch: 16, running: 8}, 40},
		{"batch bound above the token-mix bound", windowCapacity{rps: 20, replicas: 2, healthy: true, prior: 16, util: 0.1, work: 0.02, batch: 256, running: 8}, 100},
		{"batch bound never below throughput", windowCapacity{rps: 20, replicas: 2, healthy: true, prior: 16, util: 0.1, work: 0.02, batch: 4, running: 8}, 20},
		{"batch bound on the occupancy guess", windowCapacity{rps: 40, replicas: 2, healthy: true, prior: 16, util: 0.4, batch: 20, running: 10}, 80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.capacity(); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("capacity %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWorkPerRequest(t *testing.T) {
	h100 := PriorFor("h100")
	tests := []struct {
		name                                        string
		prompt, prefills, miss, gen, finished, want float64
	}{
		{"no prefill: unknown", 1000, 0, 1, 100, 1, 0},
		{"mix", 10000, 10, 0.5, 600, 12, 500.0/20000 + 50.0/6000},
		{"fewer finished than prefills: per prefill", 10000, 10, 0.5, 600, 2, 500.0/20000 + 60.0/6000},
		{"miss rate clamped", 1000, 1, 2, 0, 0, 1000.0 / 20000},
		{"non-finite: unknown", math.NaN(), 1, 1, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := workPerRequest(h100, tc.prompt, tc.prefills, tc.miss, tc.gen, tc.finished)
			if math.Abs(got-tc.want) > 1e-12 || !finite(got) {
				t.Fatalf("work %v, want %v", got, tc.want)
			}
		})
	}
}

// TestValidEndpointImpliesGatewayCheck: every endpoint a signal may carry
// passes the gateways' snapshot check (url.Parse, absolute http(s), no
// user info, query or fragment), so it cannot invalidate a snapshot.
func TestValidEndpointImpliesGatewayCheck(t *testing.T) {
	gatewayOK := func(s string) bool {
		u, err := url.Parse(s)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
			u.RawQuery == "" && u.Fragment == "" && u.User == nil
	}
	for _, s := range []string{
		"http://127.0.0.1:8000", "https://eng-0.svc.cluster.local", "http://e:8000/v1/", "https://[fe80::1]:443",
		"http://[::1]", "http://x:", "http://a_b:1/p~q",
		"http://", "http:///x", "http://[::1", "http://[zz]:1", "http://[::1]x", "http://x:8a", "http://x y", "http://x/%zz",
		"http://x/#f", "HTTP://x", "unix:///sock", "http://x:123456", "http://x\r\n",
	} {
		if validEndpoint(s) && !gatewayOK(s) {
			t.Errorf("%q accepted here, refused by the gateway", s)
		}
	}
	for _, s := range []string{"http://127.0.0.1:8000", "https://[fe80::1]:443/x", "http://e/v1"} {
		if !validEndpoint(s) {
			t.Errorf("%q refused", s)
		}
	}
}
