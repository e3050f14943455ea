package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/brokers/devcerts"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// TestSecurePipelineAsSeparateProcesses runs the whole pipeline as
// separate processes with mutual TLS and passwords on both brokers and
// signed snapshots, configured only through SWITCHYARD_* variables: the
// gateway routes on a snapshot the optimizer signed and is ready; a
// client without credentials is refused by both brokers; an unsigned
// snapshot written to the gateway's key by a client that may write the
// bucket is rejected (counted) and no request reaches the listener it
// names.
func TestSecurePipelineAsSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	pki, err := devcerts.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "snapshot.key")
	if _, err := trust.WriteKeyPair(key, key+".pub"); err != nil {
		t.Fatal(err)
	}
	kafka, natsAddr := freePort(t), freePort(t)
	e1, e2, gw := freePort(t), freePort(t), freePort(t)
	env := append(os.Environ(), "SWITCHYARD_TEST_AS_MAIN=1",
		"SWITCHYARD_KAFKA_BROKERS="+kafka, "SWITCHYARD_NATS_URL=nats://"+natsAddr,
		"SWITCHYARD_PASSWORD=s3cret",
		"SWITCHYARD_KAFKA_CA="+pki.CAFile, "SWITCHYARD_KAFKA_CERT="+pki.ClientCert, "SWITCHYARD_KAFKA_KEY="+pki.ClientKey,
		"SWITCHYARD_KAFKA_SASL=SCRAM-SHA-512", "SWITCHYARD_KAFKA_USER=switchyard", "SWITCHYARD_KAFKA_PASSWORD=s3cret",
		"SWITCHYARD_NATS_CA="+pki.CAFile, "SWITCHYARD_NATS_CERT="+pki.ClientCert, "SWITCHYARD_NATS_KEY="+pki.ClientKey,
		"SWITCHYARD_NATS_USER=switchyard", "SWITCHYARD_NATS_PASSWORD=s3cret",
		"SWITCHYARD_SIGNING_KEY="+key, "SWITCHYARD_SNAPSHOT_PUBLIC_KEYS="+key+".pub",
		"SWITCHYARD_SNAPSHOT_CACHE="+filepath.Join(dir, "r1.snapshot"))
	start := func(name string, args ...string) { startProcess(t, ctx, env, name, args...) }
	start("brokers", "brokers", "--kafka-listen", kafka, "--nats-listen", natsAddr,
		"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CAFile, "--user", "switchyard")
	waitTCP(t, ctx, kafka)
	waitTCP(t, ctx, natsAddr)
	start("engine e1", "enginesim", "--listen", e1, "--id", "e1", "--gpu-class", "h100")
	start("engine e2", "enginesim", "--listen", e2, "--id", "e2", "--gpu-class", "l4")
	waitTCP(t, ctx, e1)
	waitTCP(t, ctx, e2)
	start("agent", "agent", "--engines", fmt.Sprintf("e1=http://%s,region=r1,gpu=h100;e2=http://%s,region=r1,gpu=l4", e1, e2),
		"--interval", "500ms", "--metrics-listen", "")
	start("processor", "processor", "--window", "4s", "--slide", "1s", "--allowed-lateness", "500ms", "--metrics-listen", "")
	start("optimizer", "optimizer", "--clusters", "r1", "--settle", "200ms", "--metrics-listen", "")
	start("gateway", "gateway", "--cluster", "r1", "--listen", gw, "--engines", fmt.Sprintf("e1=http://%s,e2=http://%s", e1, e2))
	waitTCP(t, ctx, gw)

	routed := func() string {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			snapshot, engine, body := chat(t, ctx, "http://"+gw)
			if !strings.Contains(body, "data: [DONE]") {
				t.Fatalf("stream did not end with [DONE]:\n%s", body)
			}
			if snapshot != "" && snapshot != "0" {
				return engine
			}
			if time.Now().After(deadline) {
				t.Fatal("the gateway never routed on a published snapshot")
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	t.Logf("routed to %s on a signed snapshot", routed())
	if code := get(t, ctx, "http://"+gw+"/health/ready"); code != http.StatusOK {
		t.Fatalf("/health/ready = %d with a snapshot", code)
	}

	t.Run("unauthenticated clients refused", func(t *testing.T) {
		if nc, err := nats.Connect("nats://"+natsAddr, nats.RootCAs(pki.CAFile), nats.ClientCert(pki.ClientCert, pki.ClientKey)); err == nil {
			nc.Close()
			t.Fatal("nats accepted a client without credentials")
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		if err := cl.Ping(pctx); err == nil {
			t.Fatal("kafka accepted a client without TLS or credentials")
		}
	})

	t.Run("forged snapshot rejected", func(t *testing.T) {
		var evilHits atomic.Int64
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { evilHits.Add(1) }))
		defer evil.Close()
		nc, err := nats.Connect("nats://"+natsAddr, nats.RootCAs(pki.CAFile), nats.ClientCert(pki.ClientCert, pki.ClientKey),
			nats.UserInfo("switchyard", "s3cret"))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, snapshots.DefaultBucket)
		if err != nil {
			t.Fatal(err)
		}
		forged, err := proto.Marshal(&schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: uint64(time.Now().Add(30 * time.Second).UnixMilli()),
			Clusters: []*schemas.ClusterWeights{{Cluster: "r1", Weights: []*schemas.EngineWeight{{EngineId: "evil", EndpointUrl: evil.URL, Weight: 1}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "r1", forged); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(metrics(t, ctx, "http://"+gw), `switchyard_gateway_snapshots_rejected_total{cluster="r1",reason="unsigned"} `) {
			if time.Now().After(deadline) {
				t.Fatal("the gateway never counted the unsigned snapshot")
			}
			time.Sleep(100 * time.Millisecond)
		}
		for range 10 {
			if engine := routed(); engine == "evil" {
				t.Fatal("routed to the forged snapshot's engine")
			}
		}
		if n := evilHits.Load(); n != 0 {
			t.Fatalf("%d requests reached the forged snapshot's listener", n)
		}
		// Its peer load reports go out on its own NATS connection, with the
		// same TLS and credentials (gateway/peers).
		const sent = `switchyard_gateway_peer_reports_sent_total{cluster="r1",result="ok"} `
		if m := metrics(t, ctx, "http://"+gw); !strings.Contains(m, sent) || strings.Contains(m, sent+"0\n") {
			t.Fatal("the gateway published no peer load report over TLS")
		}
	})
}

func get(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func metrics(t *testing.T, ctx context.Context, base string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
