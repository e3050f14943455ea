package demo

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"
)

// Topology is the demo's simulated fleet: regions (one gateway cluster
// each), engines of mixed GPU classes, and the network latency between
// regions.
type Topology struct {
	Regions []string
	Engines []EngineSpec
	// RTTms[from][to] is the round-trip time between regions.
	RTTms map[string]map[string]float64
	// Share of the offered load entering each region.
	LoadShare map[string]float64
}

// EngineSpec is one simulated engine.
type EngineSpec struct {
	ID       string
	Region   string
	GPUClass string
	// LatencyMultiplier makes this engine's prefill and decode that many
	// times slower than its GPU class's preset (engineserver.Config's
	// field of the same name; 0 means 1).
	LatencyMultiplier float64
}

// DefaultTopology: three regions; region-b is busy and small, region-c
// has spare capacity farther away.
func DefaultTopology() Topology {
	return Topology{
		Regions: []string{"region-a", "region-b", "region-c"},
		Engines: []EngineSpec{
			{ID: "a-h100-0", Region: "region-a", GPUClass: "h100"},
			{ID: "a-a100-0", Region: "region-a", GPUClass: "a100"},
			{ID: "b-l4-0", Region: "region-b", GPUClass: "l4"},
			{ID: "b-a100-0", Region: "region-b", GPUClass: "a100"},
			{ID: "c-h100-0", Region: "region-c", GPUClass: "h100"},
			{ID: "c-l4-0", Region: "region-c", GPUClass: "l4"},
			{ID: "c-l4-1", Region: "region-c", GPUClass: "l4"},
		},
		RTTms: map[string]map[string]float64{
			"region-a": {"region-a": 1, "region-b": 30, "region-c": 70},
			"region-b": {"region-a": 30, "region-b": 1, "region-c": 45},
			"region-c": {"region-a": 70, "region-b": 45, "region-c": 1},
		},
		LoadShare: map[string]float64{"region-a": 0.3, "region-b": 0.5, "region-c": 0.2},
	}
}

// RTTFlag renders the matrix in the optimizer's --region-rtt syntax.
func (t Topology) RTTFlag() string {
	var out string
	froms := make([]string, 0, len(t.RTTms))
	for f := range t.RTTms {
		froms = append(froms, f)
	}
	sort.Strings(froms)
	for _, f := range froms {
		tos := make([]string, 0, len(t.RTTms[f]))
		for to := range t.RTTms[f] {
			tos = append(tos, to)
		}
		sort.Strings(tos)
		for _, to := range tos {
			if out != "" {
				out += ","
			}
			out += fmt.Sprintf("%s:%s=%g", f, to, t.RTTms[f][to])
		}
	}
	return out
}

// networkTransport delays every request from a gateway in region `from`
// by the round-trip time to the engine's region, before it is sent: the
// simulated wide-area network between the demo's regions.
type networkTransport struct {
	base   http.RoundTripper
	from   string
	rtt    map[string]map[string]float64
	region map[string]string // engine host:port -> region
}

func (n *networkTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if to, ok := n.region[r.URL.Host]; ok {
		d := time.Duration(n.rtt[n.from][to] * float64(time.Millisecond))
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-r.Context().Done():
				t.Stop()
				return nil, context.Cause(r.Context())
			case <-t.C:
			}
		}
	}
	return n.base.RoundTrip(r)
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
