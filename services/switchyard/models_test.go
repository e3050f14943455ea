package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestMultiModelFleetMultiProcess runs the real services as separate
// processes over a fleet serving two models: engines a-0 and a-1 serve
// model "a" (a-0 also its LoRA adapter "a-sql"), b-0 serves model "b";
// each engine answers a model it does not serve with 404, as vLLM does.
// Requests for the three models go through one gateway. It waits for the
// first snapshot that plans each model apart (model_weights), checks
// that each plan weights only engines serving its model, then sends
// requests of every model and requires every one to succeed: a request
// routed to an engine that does not serve its model would fail. A model
// no engine serves gets 404 model_not_found from the gateway.
func TestMultiModelFleetMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kafka, natsAddr := freePort(t), freePort(t)
	a0, a1, b0, gw := freePort(t), freePort(t), freePort(t), freePort(t)
	env := append(os.Environ(), "SWITCHYARD_TEST_AS_MAIN=1",
		"SWITCHYARD_KAFKA_BROKERS="+kafka, "SWITCHYARD_NATS_URL=nats://"+natsAddr)
	start := func(name string, args ...string) { startProcess(t, ctx, env, name, args...) }
	start("brokers", "brokers", "--kafka-listen", kafka, "--nats-listen", natsAddr)
	waitTCP(t, ctx, kafka)
	waitTCP(t, ctx, natsAddr)
	start("engine a-0", "enginesim", "--listen", a0, "--id", "a-0", "--model", "a", "--lora-modules", "a-sql", "--metrics", "vllm", "--seed", "1")
	start("engine a-1", "enginesim", "--listen", a1, "--id", "a-1", "--model", "a", "--metrics", "vllm", "--seed", "2")
	start("engine b-0", "enginesim", "--listen", b0, "--id", "b-0", "--model", "b", "--metrics", "vllm", "--seed", "3")
	for _, e := range []string{a0, a1, b0} {
		waitTCP(t, ctx, e)
	}
	engines := fmt.Sprintf("a-0=http://%s,region=r,gpu=h100;a-1=http://%s,region=r,gpu=h100;b-0=http://%s,region=r,gpu=h100", a0, a1, b0)
	start("agent", "agent", "--engines", engines, "--interval", "500ms", "--metrics-listen", "")
	start("processor", "processor", "--window", "6s", "--slide", "2s", "--allowed-lateness", "1s", "--metrics-listen", "")
	start("optimizer", "optimizer", "--clusters", "r", "--settle", "300ms", "--metrics-listen", "")
	start("gateway", "gateway", "--cluster", "r", "--listen", gw, "--log-level", "warn",
		"--engines", fmt.Sprintf("a-0=http://%s,a-1=http://%s,b-0=http://%s", a0, a1, b0))
	waitTCP(t, ctx, gw)

	models := []string{"a", "a-sql", "b"}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	send := func(ctx context.Context, model string, i int) (int, string) {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":"request %d for %s"}]}`, model, i, model)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+gw+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Demand for every model while the pipeline learns the fleet (the
	// planner splits demand by model only once the routing events show it).
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; loadCtx.Err() == nil; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			send(loadCtx, models[i%len(models)], i)
			sent.Add(1)
		}
	}()
	defer func() { stopLoad(); wg.Wait() }()

	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store := openSnapshots(t, ctx, js)
	var plans map[string]*schemas.ModelWeights
	for plans == nil {
		if ctx.Err() != nil {
			t.Fatalf("no snapshot planning models %q apart after %d requests", models, sent.Load())
		}
		if snap, err := store.Get(ctx, "r"); err == nil {
			for _, cw := range snap.GetClusters() {
				got := map[string]*schemas.ModelWeights{}
				for _, mw := range cw.GetModelWeights() {
					got[mw.GetModel()] = mw
				}
				if cw.GetCluster() == "r" && len(got) == len(models) {
					plans = got
				}
			}
		}
		pollPause(ctx, 200*time.Millisecond)
	}
	servers := map[string][]string{"a": {"a-0", "a-1"}, "a-sql": {"a-0"}, "b": {"b-0"}}
	for _, m := range models {
		var on float64
		for _, w := range plans[m].GetWeights() {
			if w.GetWeight() > 0 && !slices.Contains(servers[m], w.GetEngineId()) {
				t.Errorf("model %s: weight %.3f on %s, which does not serve it", m, w.GetWeight(), w.GetEngineId())
			}
			on += w.GetWeight()
		}
		if on+plans[m].GetShedFraction() < 0.999 {
			t.Errorf("model %s: weights %.3f + shed %.3f", m, on, plans[m].GetShedFraction())
		}
	}
	stopLoad()
	wg.Wait()
	for i := range 90 {
		m := models[i%len(models)]
		if code, body := send(ctx, m, 1000+i); code != http.StatusOK {
			t.Errorf("model %s: status %d: %.200s", m, code, body)
		}
	}
	if code, body := send(ctx, "c", 0); code != http.StatusNotFound || !strings.Contains(body, "model_not_found") {
		t.Errorf("model no engine serves: %d %.200s, want 404 model_not_found", code, body)
	}
}
