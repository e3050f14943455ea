package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TestSnapshotOutsideRegistryNeverDialed: a gateway with an engine
// registry refuses a snapshot that names an engine outside it (a new id
// at an attacker's endpoint) or a registered engine at another endpoint,
// counts it as "unregistered" and keeps routing on the snapshot it
// holds: the attacker's listener gets no request. Without the registry
// the same snapshot is applied (the attacker's listener is reached),
// which is what the registry changes.
func TestSnapshotOutsideRegistryNeverDialed(t *testing.T) {
	const requests = 20
	for _, withRegistry := range []bool{true, false} {
		real, attacker := newFakeEngine(t, "e1"), newFakeEngine(t, "e9")
		reg, err := fleet.New(fleet.Engine{ID: "e1", URL: real.url()})
		if err != nil {
			t.Fatal(err)
		}
		var opts []Opt
		if withRegistry {
			opts = append(opts, Registry(reg))
		}
		g := newTrustGateway(t, opts...)
		v := uint64(trustNow.UnixMilli())
		snap := func(version uint64, ws ...*schemas.EngineWeight) []byte {
			b, err := proto.Marshal(&schemas.WeightSnapshot{SchemaVersion: 1, Version: version, CreatedUnixMs: trustNow.UnixMilli(),
				Clusters: []*schemas.ClusterWeights{{Cluster: "eu", Weights: ws}}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		if err := g.ApplySnapshot(snap(v, &schemas.EngineWeight{EngineId: "e1", EndpointUrl: real.url() + "/", Weight: 1})); err != nil {
			t.Fatalf("registered snapshot: %v", err)
		}
		attacks := [][]byte{
			snap(v+1, &schemas.EngineWeight{EngineId: "e1", EndpointUrl: real.url(), Weight: 0.002},
				&schemas.EngineWeight{EngineId: "e9", EndpointUrl: attacker.url(), Weight: 0.998}),
			snap(v+2, &schemas.EngineWeight{EngineId: "e1", EndpointUrl: attacker.url(), Weight: 1}),
		}
		for i, b := range attacks {
			err := g.ApplySnapshot(b)
			if withRegistry && rejectReason(err) != "unregistered" {
				t.Fatalf("attack %d: %v, want an unregistered rejection", i, err)
			}
			if !withRegistry && err != nil {
				t.Fatalf("attack %d without a registry: %v", i, err)
			}
		}
		srv := httptest.NewServer(g.Handler())
		for range requests {
			if code, _, body := post(t, context.Background(), srv.URL, chatBody(false, "secret prompt"), nil); code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
		}
		srv.Close()
		if withRegistry {
			if n := attacker.requests.Load(); n != 0 {
				t.Errorf("attacker got %d requests", n)
			}
			if n := real.requests.Load(); n != requests {
				t.Errorf("registered engine got %d of %d requests", n, requests)
			}
			if got := counter(g.m.rejected.WithLabelValues("eu", "unregistered")); got != 2 {
				t.Errorf("%v unregistered rejections, want 2", got)
			}
			if got := g.Stats().SnapshotVersion; got != v {
				t.Errorf("holding %d, want %d", got, v)
			}
		} else if attacker.requests.Load() == 0 {
			t.Errorf("without a registry the attacker's snapshot was not routed on: the test shows nothing")
		}
	}
}
