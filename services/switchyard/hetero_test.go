package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Settings of TestHeterogeneousEnginesMultiProcess.
const (
	// heteroSlide is the processor's slide, so the optimizer's period: one
	// snapshot per window.
	heteroSlide = 2 * time.Second
	// heteroWindows is how many optimizer windows after the first full
	// snapshot the weights have to move to the fast engine.
	heteroWindows = 3
	// heteroObserved is how many windows after the first full snapshot
	// the test follows (the weights must stay moved).
	heteroObserved = 6
	// heteroFastOverSlow: region A's weight on the fast engine must be at
	// least this many times its weight on the 6x slower one. At the test's
	// load (a few requests in flight on an engine of 256 sequences) the
	// planner's optimum is everything on the fast engine but the slow
	// engine's probe floor (at most 2% of the cluster, or 1 rps).
	heteroFastOverSlow = 4.0
	// heteroMaxRemote bounds region A's share on region B's engine while A
	// has capacity.
	heteroMaxRemote = 0.2
	// heteroRPS is the offered load through each gateway, half of it
	// streaming.
	heteroRPS = 8
)

// TestHeterogeneousEnginesMultiProcess runs the real services as separate
// processes on engines that show only what vLLM shows (--metrics vllm, no
// batch limit): region ra has a fast engine and one 6x slower declared
// with the same GPU class (enginesim --latency-multiplier 6), region rb
// one engine; the optimizer knows the regions 40 ms apart (--region-rtt;
// the processes share loopback, so the delay is the planner's static
// matrix, not a delay on the wire), and each gateway's fallback engines
// before the first snapshot are its region's own. Streaming and
// non-streaming requests go through both gateways at heteroRPS each. It
// follows ra's snapshots in NATS for heteroObserved windows after the
// first one in which ra's weights cover both of its engines, and asserts
// that (a) within heteroWindows windows of it, ra's weight on the fast
// engine is at least heteroFastOverSlow times its weight on the slow one,
// and stays so, and (b) ra sends under heteroMaxRemote of its traffic to
// rb's engine in every one of them (ra has capacity to spare throughout).
func TestHeterogeneousEnginesMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kafka, natsAddr := freePort(t), freePort(t)
	fast, slow, remote, gwA, gwB := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	env := append(os.Environ(), "SWITCHYARD_TEST_AS_MAIN=1",
		"SWITCHYARD_KAFKA_BROKERS="+kafka, "SWITCHYARD_NATS_URL=nats://"+natsAddr)
	start := func(name string, args ...string) { startProcess(t, ctx, env, name, args...) }
	start("brokers", "brokers", "--kafka-listen", kafka, "--nats-listen", natsAddr)
	waitTCP(t, ctx, kafka)
	waitTCP(t, ctx, natsAddr)
	start("engine fast", "enginesim", "--listen", fast, "--id", "a-fast", "--gpu-class", "h100", "--metrics", "vllm", "--seed", "1")
	start("engine slow", "enginesim", "--listen", slow, "--id", "a-slow", "--gpu-class", "h100", "--metrics", "vllm", "--seed", "2",
		"--latency-multiplier", "6")
	start("engine remote", "enginesim", "--listen", remote, "--id", "b-0", "--gpu-class", "h100", "--metrics", "vllm", "--seed", "3")
	for _, e := range []string{fast, slow, remote} {
		waitTCP(t, ctx, e)
	}
	start("agent", "agent", "--engines", fmt.Sprintf("a-fast=http://%s,region=ra,gpu=h100;a-slow=http://%s,region=ra,gpu=h100;b-0=http://%s,region=rb,gpu=h100",
		fast, slow, remote), "--interval", "500ms", "--metrics-listen", "")
	start("processor", "processor", "--window", "6s", "--slide", heteroSlide.String(), "--allowed-lateness", "1s", "--metrics-listen", "")
	start("optimizer", "optimizer", "--clusters", "ra,rb", "--settle", "300ms", "--metrics-listen", "",
		"--region-rtt", "ra:ra=1,ra:rb=40,rb:rb=1,rb:ra=40")
	start("gateway ra", "gateway", "--cluster", "ra", "--listen", gwA, "--log-level", "warn",
		"--engines", fmt.Sprintf("a-fast=http://%s,a-slow=http://%s", fast, slow))
	start("gateway rb", "gateway", "--cluster", "rb", "--listen", gwB, "--log-level", "warn",
		"--engines", fmt.Sprintf("b-0=http://%s", remote))
	waitTCP(t, ctx, gwA)
	waitTCP(t, ctx, gwB)

	loadCtx, stopLoad := context.WithCancel(ctx)
	var failed atomic.Int64
	var firstErr atomic.Pointer[string]
	var wg sync.WaitGroup
	for _, gw := range []string{gwA, gwB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offerLoad(loadCtx, "http://"+gw, heteroRPS, &failed, &firstErr)
		}()
	}
	defer func() {
		stopLoad()
		wg.Wait()
	}()

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

	// Follow ra's snapshots until heteroObserved windows after the first
	// full one have been published.
	var (
		first  uint64 // version of the first full snapshot
		seen   []raWeights
		last   uint64
		report strings.Builder
	)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no full snapshot followed by %d windows within 90s; ra's snapshots:\n%s", heteroObserved, report.String())
		}
		snap, err := store.Get(ctx, "ra")
		if err == nil && snap.GetVersion() > last {
			last = snap.GetVersion()
			w := weightsOf(snap, "ra")
			seen = append(seen, w)
			fmt.Fprintf(&report, "  version %d: %s\n", w.version, w)
			if first == 0 && w.full() {
				first = w.version
			}
		}
		if first != 0 && last >= first+uint64(heteroObserved*heteroSlide.Milliseconds()) {
			break
		}
		pollPause(ctx, 100*time.Millisecond)
	}
	stopLoad()
	wg.Wait()
	t.Logf("ra's snapshots (first full: %d):\n%s", first, report.String())
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed; first: %s", n, *firstErr.Load())
	}
	var movedAt uint64
	for _, w := range seen {
		if w.version < first {
			continue
		}
		ok := w.fast > 0 && w.fast >= heteroFastOverSlow*w.slow
		switch {
		case ok && movedAt == 0:
			movedAt = w.version
		case !ok && movedAt != 0:
			t.Errorf("version %d: ra's weights went back towards the slow engine (%s) after moving at %d", w.version, w, movedAt)
		}
		if w.remote >= heteroMaxRemote {
			t.Errorf("version %d: ra sends %.3f of its traffic to rb's engine, want < %.2f while ra has capacity", w.version, w.remote, heteroMaxRemote)
		}
	}
	if limit := first + uint64(heteroWindows*heteroSlide.Milliseconds()); movedAt == 0 || movedAt > limit {
		t.Errorf("ra's weight on the fast engine reached %.0fx its weight on the 6x slower one at version %d, want by %d (%d windows after the first full snapshot)",
			heteroFastOverSlow, movedAt, limit, heteroWindows)
	}
}

// raWeights are one snapshot's shares of cluster ra.
type raWeights struct {
	version            uint64
	fast, slow, remote float64
	engines            int
	why                string // the plan's explanation of each engine, for the report
}

// full: ra's weights name both of its engines.
func (w raWeights) full() bool { return w.engines >= 2 && w.fast+w.slow > 0 }

func (w raWeights) String() string {
	return fmt.Sprintf("a-fast %.3f  a-slow %.3f  b-0 %.3f%s", w.fast, w.slow, w.remote, w.why)
}

// weightsOf returns cluster's shares per engine in snap (normalised to
// the weights' sum).
func weightsOf(snap *schemas.WeightSnapshot, cluster string) raWeights {
	out := raWeights{version: snap.GetVersion()}
	for _, cw := range snap.GetClusters() {
		if cw.GetCluster() != cluster {
			continue
		}
		var sum float64
		for _, ew := range cw.GetWeights() {
			sum += ew.GetWeight()
		}
		if sum <= 0 {
			return out
		}
		for _, ew := range cw.GetWeights() {
			x := ew.GetExplanation()
			out.why += fmt.Sprintf("\n      %s: engine %.0f ms, marginal %.0f ms, network %.0f ms, utilization %.2f, batch %d (%s), binding %v",
				ew.GetEngineId(), x.GetEngineMs(), x.GetMarginalMs(), x.GetNetworkMs(), ew.GetPlannedUtilization(),
				x.GetMaxBatch(), x.GetCapacitySource(), x.GetBinding())
			share := ew.GetWeight() / sum
			switch ew.GetEngineId() {
			case "a-fast":
				out.fast = share
				out.engines++
			case "a-slow":
				out.slow = share
				out.engines++
			case "b-0":
				out.remote = share
			}
		}
	}
	return out
}

// offerLoad sends rps requests per second to the gateway at base until
// ctx ends, alternating streaming and non-streaming chat completions,
// and counts the ones that fail.
func offerLoad(ctx context.Context, base string, rps int, failed *atomic.Int64, firstErr *atomic.Pointer[string]) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := oneRequest(ctx, client, base, i%2 == 0, i)
			if err != nil && ctx.Err() == nil {
				failed.Add(1)
				msg := err.Error()
				firstErr.CompareAndSwap(nil, &msg)
			}
		}()
	}
}

func oneRequest(ctx context.Context, client *http.Client, base string, stream bool, i int) error {
	body := fmt.Sprintf(`{"model":"switchyard-sim-8b","stream":%t,"max_tokens":16,"messages":[{"role":"user","content":"request %d: %s"}]}`,
		stream, i, strings.Repeat("tell me about routing ", 8))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	case stream && !strings.Contains(string(b), "data: [DONE]"):
		return fmt.Errorf("stream did not end with [DONE]: %s", b)
	case !stream && !strings.Contains(string(b), `"choices"`):
		return fmt.Errorf("no choices in %s", b)
	}
	return nil
}

// openSnapshots opens the snapshot store once the optimizer has created
// it.
func openSnapshots(t *testing.T, ctx context.Context, js jetstream.JetStream) *snapshots.Store {
	t.Helper()
	for {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := snapshots.Open(octx, js)
		cancel()
		if err == nil {
			return st
		}
		if ctx.Err() != nil {
			t.Fatalf("snapshot store: %v", err)
		}
		pollPause(ctx, 100*time.Millisecond)
	}
}

// pollPause waits d between two polls of a condition (or until ctx ends).
func pollPause(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}
