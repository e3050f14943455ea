package demo

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/gateway"
)

// TestGatewayMetricsInDemoRegistry: the gateways of every region
// register their metrics in the demo's one registry, each series
// labelled with its own cluster (the demo once wrapped the registerer
// with a cluster label the metrics already have, and its /metrics had no
// switchyard_gateway_ series at all).
func TestGatewayMetricsInDemoRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	regions := DefaultTopology().Regions
	for _, region := range regions {
		// The clients dial lazily: nothing listens at these addresses.
		rg, err := newRegionGateway(region, "nats://127.0.0.1:1", []string{"127.0.0.1:1"}, reg,
			gateway.Engines(gateway.StaticEngine{ID: "a", URL: "http://127.0.0.1:1"}))
		if err != nil {
			t.Fatalf("gateway %s: %v", region, err)
		}
		t.Cleanup(rg.close)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	clusters := map[string]int{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "switchyard_gateway_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" {
					clusters[l.GetValue()]++
				}
			}
		}
	}
	for _, region := range regions {
		if clusters[region] == 0 {
			t.Errorf("no switchyard_gateway_ series of cluster %q in the demo registry (have %v)", region, clusters)
		}
	}
}
