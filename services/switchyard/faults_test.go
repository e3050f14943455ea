package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// Settings of TestFaultInjection. The processor's windows are tumbling
// (window = slide), so every request is counted in exactly one demand
// estimate and the estimates' request_count sums to the requests sent.
const (
	faultWindow = 2 * time.Second
	// faultLateness is the processor's allowed lateness: longer than the
	// brokers are down (about 2 s), since the records the gateway and the
	// agent produce meanwhile reach the log after the records other
	// partitions got once the brokers were back, and the processor drops
	// records later than this (docs/processor.md, late records): with
	// 1 s, 4 of 19 requests of the window before a brokers kill were
	// once judged late and not counted.
	faultLateness = 3 * time.Second
	// faultResume bounds the time from a kill to the first snapshot of a
	// window that ended after it (issue 12: one window + 5 s).
	faultResume = faultWindow + 5*time.Second
	// faultBrokersResume bounds the same after a brokers kill (the
	// clients' reconnect backoff comes on top).
	faultBrokersResume = faultWindow + 25*time.Second
)

// faultPlan is what one run of TestFaultInjection does.
type faultPlan struct {
	rps    int      // offered load, half of it streaming
	tokens int      // max_tokens of streaming requests (longer: more in flight at a kill)
	faults []string // in order: "engine", "processor", "optimizer", "brokers"
}

// faultsFromEnv is the CI version unless SWITCHYARD_FAULTS_LONG is set
// (bench/faults/run.sh): then SWITCHYARD_FAULTS_ROUNDS rounds (default
// 3) of every fault, the brokers included, at SWITCHYARD_FAULTS_RPS
// (default 20) with longer streams. SWITCHYARD_FAULTS (comma-separated)
// replaces the list of faults of either.
func faultsFromEnv(t *testing.T) faultPlan {
	t.Helper()
	plan := faultPlan{rps: 10, tokens: 32, faults: []string{"engine", "processor", "optimizer", "brokers"}}
	if os.Getenv("SWITCHYARD_FAULTS_LONG") != "" {
		plan = faultPlan{rps: envInt(t, "SWITCHYARD_FAULTS_RPS", 20), tokens: 128}
		for range envInt(t, "SWITCHYARD_FAULTS_ROUNDS", 3) {
			plan.faults = append(plan.faults, "engine", "processor", "optimizer", "brokers")
		}
	}
	if only := os.Getenv("SWITCHYARD_FAULTS"); only != "" {
		plan.faults = strings.Split(only, ",")
	}
	for _, f := range plan.faults {
		if !slices.Contains([]string{"engine", "processor", "optimizer", "brokers"}, f) {
			t.Fatalf("unknown fault %q (engine, processor, optimizer or brokers)", f)
		}
	}
	return plan
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestFaultInjection runs the pipeline as separate processes (brokers
// with a data dir, three engines, agent, processor with static
// membership, optimizer, gateway) under steady streaming and
// non-streaming load, and SIGKILLs and restarts, in turn, an engine, the
// processor, the optimizer and the brokers (the long version,
// bench/faults/run.sh, repeats this at a higher load). It asserts that
// no non-streaming request fails; that the only streaming failures are
// streams the gateway had already started on the engine when it was
// killed; that after each kill the first snapshot of a window that ended
// after the kill is published within faultResume (faultBrokersResume for
// the brokers) and the gateway routes on it; that a restarted engine
// answers requests again; and that the demand estimates' request_count,
// summed over windows, equals the requests sent (none lost, none counted
// twice), with every window that was published more than once published
// with the same count.
func TestFaultInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	plan := faultsFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute+time.Duration(len(plan.faults))*time.Minute)
	defer cancel()
	f := startFaultPipeline(t, ctx, plan)

	// Steady state: the gateway routes on a published snapshot.
	ld := newFaultLoad(plan)
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		ld.run(loadCtx, "http://"+f.gateway)
	}()
	defer func() {
		stopLoad()
		<-loadDone
	}()
	if _, ok := ld.waitRoutedAfter(ctx, time.Now(), 90*time.Second); !ok {
		t.Fatal("the gateway never routed on a published snapshot")
	}

	type restartedEngine struct {
		fault int
		id    string
		at    time.Time
	}
	var restarted []restartedEngine
	for i, fault := range plan.faults {
		limit := faultResume
		if fault == "brokers" {
			limit = faultBrokersResume
		}
		var killed time.Time
		switch fault {
		case "engine":
			e := f.engines[i%len(f.engines)]
			killed = f.kill(t, e.proc)
			ld.engineKilled(e.id, killed)
			// Keep it down until the control plane has planned a whole
			// window that started after the kill, then bring it back
			// on the same port; it must take traffic again.
			if _, ok := f.snaps.waitAfter(ctx, killed.Add(faultWindow), 2*limit); !ok {
				t.Fatalf("fault %d (%s): no snapshot of a window starting after the kill", i, fault)
			}
			e.proc = f.restart(t, ctx, e.proc)
			waitTCP(t, ctx, e.addr)
			restarted = append(restarted, restartedEngine{fault: i, id: e.id, at: time.Now()})
		case "processor", "optimizer", "brokers":
			p := f.named[fault]
			killed = f.kill(t, p)
			f.named[fault] = f.restart(t, ctx, p)
			if fault == "brokers" {
				waitTCP(t, ctx, f.kafka)
				waitTCP(t, ctx, f.nats)
			}
		}
		snapAt, ok := f.snaps.waitAfter(ctx, killed, 2*limit)
		if !ok {
			t.Fatalf("fault %d (%s): no snapshot of a window ending after the kill within %v", i, fault, 2*limit)
		}
		routedAt, ok := ld.waitRoutedAfter(ctx, killed, 2*limit)
		if !ok {
			t.Fatalf("fault %d (%s): the gateway never routed on a snapshot newer than the kill", i, fault)
		}
		snapAfter, routedAfter := snapAt.Sub(killed).Round(time.Millisecond), routedAt.Sub(killed).Round(time.Millisecond)
		t.Logf("fault %d: %s killed and restarted; next snapshot after %v, routed on by the gateway after %v", i, fault, snapAfter, routedAfter)
		if snapAfter > limit {
			t.Errorf("fault %d (%s): next snapshot %v after the kill, want <= %v", i, fault, snapAfter, limit)
		}
	}

	// Every restarted engine takes traffic again.
	for _, r := range restarted {
		if at, ok := ld.waitEngineAfter(ctx, r.id, r.at, 30*time.Second); ok {
			t.Logf("fault %d: engine %s answered a request %v after its restart", r.fault, r.id, at.Sub(r.at).Round(time.Millisecond))
		} else {
			t.Errorf("fault %d: engine %s answered no request within 30s of its restart (latest snapshot: %s); the gateway's metrics of it:\n%s",
				r.fault, r.id, f.snaps.latest(), engineMetrics(ctx, f.gateway, r.id))
		}
	}

	// Stop the load, let every request finish, and wait until the
	// processor has fired the window holding the last one.
	stopLoad()
	<-loadDone
	sent, last := ld.totals()
	if !f.est.waitPast(ctx, last.Add(faultWindow), 60*time.Second) {
		t.Fatalf("no estimate of a window ending after %v (the last request's end) within 60s", last.Add(faultWindow))
	}
	counted, windows, conflicts := f.est.demand("r1")
	events, dups := f.est.events()
	summary := ld.summary()
	t.Logf("load: %s", summary)
	t.Logf("demand: %d requests sent, %d counted in %d demand windows; %d routing events counting as demand (%d duplicates)",
		sent, counted, windows, events, dups)
	if counted != sent {
		t.Logf("per window (start: counted, routing events windowed there):\n%s", f.est.table("r1"))
	}
	for _, c := range conflicts {
		t.Errorf("demand window published with different counts: %s", c)
	}
	if counted != sent {
		t.Errorf("the demand estimates count %d requests, %d were sent (%+d)", counted, sent, counted-sent)
	}
	for _, err := range ld.unexpected() {
		t.Errorf("request failed: %v", err)
	}
}

// faultEngine is one engine process of the pipeline.
type faultEngine struct {
	id, addr string
	proc     *proc
}

// faultPipeline is the running pipeline and what watches it.
type faultPipeline struct {
	kafka, nats, gateway string
	env                  []string
	engines              []*faultEngine
	named                map[string]*proc // brokers, processor, optimizer
	snaps                *snapshotWatch
	est                  *estimateWatch
}

func startFaultPipeline(t *testing.T, ctx context.Context, plan faultPlan) *faultPipeline {
	t.Helper()
	f := &faultPipeline{kafka: freePort(t), nats: freePort(t), gateway: freePort(t), named: map[string]*proc{}}
	f.env = append(os.Environ(), "SWITCHYARD_TEST_AS_MAIN=1",
		"SWITCHYARD_KAFKA_BROKERS="+f.kafka, "SWITCHYARD_NATS_URL=nats://"+f.nats)
	f.named["brokers"] = spawn(t, ctx, f.env, "brokers", "brokers", "--kafka-listen", f.kafka, "--nats-listen", f.nats,
		"--data-dir", filepath.Join(t.TempDir(), "brokers"))
	waitTCP(t, ctx, f.kafka)
	waitTCP(t, ctx, f.nats)
	var agentEngines, gatewayEngines []string
	for i := range 3 {
		e := &faultEngine{id: fmt.Sprintf("e%d", i+1), addr: freePort(t)}
		e.proc = spawn(t, ctx, f.env, "engine "+e.id, "enginesim", "--listen", e.addr, "--id", e.id, "--gpu-class", "h100",
			"--seed", strconv.Itoa(i+1))
		f.engines = append(f.engines, e)
		agentEngines = append(agentEngines, fmt.Sprintf("%s=http://%s,region=r1,gpu=h100", e.id, e.addr))
		gatewayEngines = append(gatewayEngines, fmt.Sprintf("%s=http://%s", e.id, e.addr))
	}
	for _, e := range f.engines {
		waitTCP(t, ctx, e.addr)
	}
	spawn(t, ctx, f.env, "agent", "agent", "--engines", strings.Join(agentEngines, ";"), "--interval", "500ms", "--metrics-listen", "")
	f.named["processor"] = spawn(t, ctx, f.env, "processor", "processor", "--window", faultWindow.String(), "--slide", faultWindow.String(),
		"--allowed-lateness", faultLateness.String(), "--instance-id", "processor-0", "--session-timeout", "10s", "--metrics-listen", "")
	f.named["optimizer"] = spawn(t, ctx, f.env, "optimizer", "optimizer", "--clusters", "r1", "--settle", "200ms", "--metrics-listen", "")
	spawn(t, ctx, f.env, "gateway", "gateway", "--cluster", "r1", "--listen", f.gateway, "--log-level", "info",
		"--engines", strings.Join(gatewayEngines, ","))
	waitTCP(t, ctx, f.gateway)
	f.snaps = watchSnapshots(t, ctx, f.nats, "r1")
	f.est = watchEstimates(t, ctx, f.kafka)
	return f
}

// kill SIGKILLs p, waits for it to be gone and returns when it was killed.
func (f *faultPipeline) kill(t *testing.T, p *proc) time.Time {
	t.Helper()
	at := time.Now()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing %s: %v", p.name, err)
	}
	<-p.done
	return at
}

// restart starts p's command line again.
func (f *faultPipeline) restart(t *testing.T, ctx context.Context, p *proc) *proc {
	t.Helper()
	return spawn(t, ctx, f.env, p.name+" (restarted)", p.cmd.Args[1:]...)
}

// snapshotWatch records when each version of a cluster's snapshot was
// first seen in NATS.
type snapshotWatch struct {
	mu   sync.Mutex
	seen []seenSnapshot
	// weights are the latest snapshot's engine weights (for failures).
	weights string
	cond    chan struct{} // closed and replaced on every new version
}

type seenSnapshot struct {
	version uint64 // the window end, Unix ms
	at      time.Time
}

func watchSnapshots(t *testing.T, ctx context.Context, natsAddr, cluster string) *snapshotWatch {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store := openSnapshots(t, ctx, js)
	w := &snapshotWatch{cond: make(chan struct{})}
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Go(func() {
		var last uint64
		for wctx.Err() == nil {
			gctx, cancel := context.WithTimeout(wctx, time.Second)
			snap, err := store.Get(gctx, cluster)
			cancel()
			if err == nil && snap.GetVersion() > last {
				last = snap.GetVersion()
				w.mu.Lock()
				w.seen = append(w.seen, seenSnapshot{version: last, at: time.Now()})
				w.weights = describeWeights(snap)
				close(w.cond)
				w.cond = make(chan struct{})
				w.mu.Unlock()
			}
			pollPause(wctx, 50*time.Millisecond)
		}
	})
	return w
}

// engineMetrics returns the gateway's metric lines labelled with engine id.
func engineMetrics(ctx context.Context, gateway, id string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+gateway+"/metrics", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `engine="`+id+`"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// latest describes the latest snapshot's weights.
func (w *snapshotWatch) latest() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.weights
}

// describeWeights lists a snapshot's weights, "cluster: engine=weight ...".
func describeWeights(snap *schemas.WeightSnapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %d", snap.GetVersion())
	for _, c := range snap.GetClusters() {
		fmt.Fprintf(&b, "; %s shed %.3f:", c.GetCluster(), c.GetShedFraction())
		for _, e := range c.GetWeights() {
			x := e.GetExplanation()
			fmt.Fprintf(&b, " %s=%.3f (network %.1f ms, engine %.1f ms, marginal %.1f ms, binding %v, utilization %.3f)",
				e.GetEngineId(), e.GetWeight(), x.GetNetworkMs(), x.GetEngineMs(), x.GetMarginalMs(), x.GetBinding(), e.GetPlannedUtilization())
		}
	}
	return b.String()
}

// waitAfter waits up to limit for a snapshot of a window that ended after
// t and returns when it was first seen.
func (w *snapshotWatch) waitAfter(ctx context.Context, t time.Time, limit time.Duration) (time.Time, bool) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		for _, s := range w.seen {
			if s.version > uint64(t.UnixMilli()) {
				w.mu.Unlock()
				return s.at, true
			}
		}
		cond := w.cond
		w.mu.Unlock()
		select {
		case <-cond:
		case <-deadline.C:
			return time.Time{}, false
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
}

// estimateWatch reads the estimates and routing events topics from the
// start as they are written (the estimates topic is compacted, so it is
// read live rather than at the end).
type estimateWatch struct {
	mu sync.Mutex
	// counts holds every request_count published per cluster and window
	// start, in order.
	counts map[string]map[int64][]uint32
	maxEnd int64 // latest window end of any estimate
	// requests counts the routing events that count as demand, by
	// request id; times holds the time each is windowed at, Unix ms.
	requests map[string]int
	times    map[string]int64
	cond     chan struct{}
}

func watchEstimates(t *testing.T, ctx context.Context, kafka string) *estimateWatch {
	t.Helper()
	topics := streams.TopicsFor("")
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.ConsumeTopics(topics.Estimates, topics.RoutingEvents),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	w := &estimateWatch{counts: map[string]map[int64][]uint32{}, requests: map[string]int{}, times: map[string]int64{}, cond: make(chan struct{})}
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); wg.Wait(); cl.Close() })
	wg.Go(func() {
		for wctx.Err() == nil {
			fs := cl.PollFetches(wctx)
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if r.Topic == topics.RoutingEvents {
					var ev schemas.RoutingEvent
					if proto.Unmarshal(r.Value, &ev) == nil && estimate.CountsAsDemand(&ev) {
						w.requests[ev.GetRequestId()]++
						t := ev.GetEventTimeUnixMs()
						if c := ev.GetCompletionTimeUnixMs(); c >= t {
							t = c
						}
						w.times[ev.GetRequestId()] = t
					}
					return
				}
				var e schemas.Estimate
				if proto.Unmarshal(r.Value, &e) != nil {
					return
				}
				if d := e.GetDemand(); d != nil {
					byStart := w.counts[d.GetCluster()]
					if byStart == nil {
						byStart = map[int64][]uint32{}
						w.counts[d.GetCluster()] = byStart
					}
					byStart[d.GetWindowStartUnixMs()] = append(byStart[d.GetWindowStartUnixMs()], d.GetRequestCount())
					w.maxEnd = max(w.maxEnd, d.GetWindowEndUnixMs())
				}
				if g := e.GetEngine(); g != nil {
					w.maxEnd = max(w.maxEnd, g.GetWindowEndUnixMs())
				}
			})
			close(w.cond)
			w.cond = make(chan struct{})
			w.mu.Unlock()
		}
	})
	return w
}

// waitPast waits up to limit for an estimate of a window ending after t
// (the estimates topic has one partition and windows fire in order, so
// every earlier window's estimates have been read by then).
func (w *estimateWatch) waitPast(ctx context.Context, t time.Time, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok, cond := w.maxEnd > t.UnixMilli(), w.cond
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-cond:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// demand sums cluster's request_count over its windows (the last count
// published for each) and lists the windows published with differing
// counts.
func (w *estimateWatch) demand(cluster string) (counted int64, windows int, conflicts []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	starts := make([]int64, 0, len(w.counts[cluster]))
	for s := range w.counts[cluster] {
		starts = append(starts, s)
	}
	slices.Sort(starts)
	for _, s := range starts {
		cs := w.counts[cluster][s]
		counted += int64(cs[len(cs)-1])
		if slices.Min(cs) != slices.Max(cs) {
			conflicts = append(conflicts, fmt.Sprintf("window starting %s: counts %v", time.UnixMilli(s).UTC().Format("15:04:05.000"), cs))
		}
	}
	return counted, len(starts), conflicts
}

// table lists cluster's windows with the counts published and the
// routing events seen in each.
func (w *estimateWatch) table(cluster string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	perWindow := map[int64]int{}
	size := faultWindow.Milliseconds()
	for _, t := range w.times {
		perWindow[t-t%size]++
	}
	var starts []int64
	for s := range w.counts[cluster] {
		starts = append(starts, s)
	}
	for s := range perWindow {
		if _, ok := w.counts[cluster][s]; !ok {
			starts = append(starts, s)
		}
	}
	slices.Sort(starts)
	var b strings.Builder
	for _, s := range starts {
		fmt.Fprintf(&b, "  %s: %v, %d\n", time.UnixMilli(s).UTC().Format("15:04:05.000"), w.counts[cluster][s], perWindow[s])
	}
	return b.String()
}

// events returns the request ids seen in routing events that count as
// demand, and how many of them were seen more than once.
func (w *estimateWatch) events() (ids, duplicates int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.requests {
		if n > 1 {
			duplicates++
		}
	}
	return len(w.requests), duplicates
}

// faultLoad offers steady load to the gateway and records every
// request's outcome.
type faultLoad struct {
	plan faultPlan
	sent atomic.Int64

	mu      sync.Mutex
	results []faultResult
	kills   map[string][]time.Time // engine id → when it was killed
	newest  uint64                 // newest snapshot version a request was routed on
	routed  []seenSnapshot         // when each newer version was first routed on
	cond    chan struct{}
}

type faultResult struct {
	start, end time.Time
	stream     bool
	engine     string // X-Switchyard-Engine ("" when no response)
	snapshot   uint64
	err        error
}

func newFaultLoad(plan faultPlan) *faultLoad {
	return &faultLoad{plan: plan, kills: map[string][]time.Time{}, cond: make(chan struct{})}
}

// run sends plan.rps requests per second, alternating streaming and
// non-streaming, until ctx ends, then waits for the ones in flight.
func (l *faultLoad) run(ctx context.Context, base string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 60 * time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(time.Second / time.Duration(l.plan.rps))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Go(func() {
			// The request is not tied to ctx: stopping the load lets
			// the requests in flight finish, so each is counted.
			l.record(l.one(context.WithoutCancel(ctx), client, base, i%2 == 0, i))
		})
	}
}

func (l *faultLoad) one(ctx context.Context, client *http.Client, base string, stream bool, i int) faultResult {
	r := faultResult{start: time.Now(), stream: stream}
	tokens := 16
	if stream {
		tokens = l.plan.tokens
	}
	body := fmt.Sprintf(`{"model":"switchyard-sim-8b","stream":%t,"max_tokens":%d,"messages":[{"role":"user","content":"request %d: %s"}]}`,
		stream, tokens, i, strings.Repeat("tell me about routing ", 8))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		r.err, r.end = err, time.Now()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	l.sent.Add(1)
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		r.end = time.Now()
		return r
	}
	defer resp.Body.Close()
	r.engine = resp.Header.Get("X-Switchyard-Engine")
	r.snapshot, _ = strconv.ParseUint(resp.Header.Get("X-Switchyard-Snapshot"), 10, 64)
	b, err := io.ReadAll(resp.Body)
	r.end = time.Now()
	switch {
	case err != nil:
		r.err = fmt.Errorf("reading the body: %w", err)
	case resp.StatusCode != http.StatusOK:
		r.err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
	case stream && !strings.Contains(string(b), "data: [DONE]"):
		r.err = fmt.Errorf("stream did not end with [DONE]: %.300s", b)
	case !stream && !strings.Contains(string(b), `"choices"`):
		r.err = fmt.Errorf("no choices in %.300s", b)
	}
	return r
}

func (l *faultLoad) record(r faultResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.results = append(l.results, r)
	if r.err == nil && r.snapshot > l.newest {
		l.newest = r.snapshot
		l.routed = append(l.routed, seenSnapshot{version: r.snapshot, at: r.end})
	}
	close(l.cond)
	l.cond = make(chan struct{})
}

// waitEngineAfter waits up to limit for a request that engine id
// answered and that started after t, and returns when it ended.
func (l *faultLoad) waitEngineAfter(ctx context.Context, id string, t time.Time, limit time.Duration) (time.Time, bool) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for _, r := range l.results {
			if r.err == nil && r.engine == id && r.start.After(t) {
				l.mu.Unlock()
				return r.end, true
			}
		}
		cond := l.cond
		l.mu.Unlock()
		select {
		case <-cond:
		case <-deadline.C:
			return time.Time{}, false
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
}

// engineKilled records that engine id was killed at t.
func (l *faultLoad) engineKilled(id string, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kills[id] = append(l.kills[id], t)
}

// waitRoutedAfter waits up to limit for a request answered on a snapshot
// of a window that ended after t, and returns when it ended.
func (l *faultLoad) waitRoutedAfter(ctx context.Context, t time.Time, limit time.Duration) (time.Time, bool) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for _, s := range l.routed {
			if s.version > uint64(t.UnixMilli()) {
				l.mu.Unlock()
				return s.at, true
			}
		}
		cond := l.cond
		l.mu.Unlock()
		select {
		case <-cond:
		case <-deadline.C:
			return time.Time{}, false
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
}

// expected reports whether a failed request is one the faults may fail:
// a stream the gateway had started on an engine before it was killed.
func (l *faultLoad) expected(r faultResult) bool {
	if !r.stream || r.engine == "" {
		return false
	}
	for _, k := range l.kills[r.engine] {
		if r.start.Before(k) && r.end.After(k) {
			return true
		}
	}
	return false
}

// unexpected lists the failures the faults do not explain.
func (l *faultLoad) unexpected() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	for _, r := range l.results {
		if r.err != nil && !l.expected(r) {
			out = append(out, fmt.Errorf("%s request started %s on %q: %w", kind(r.stream), r.start.Format("15:04:05.000"), r.engine, r.err))
		}
	}
	return out
}

// totals returns the requests sent and when the last one ended.
func (l *faultLoad) totals() (int64, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, r := range l.results {
		if r.end.After(last) {
			last = r.end
		}
	}
	return l.sent.Load(), last
}

func (l *faultLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n, failedStream, failedPlain, streams, expected int
	for _, r := range l.results {
		n++
		if r.stream {
			streams++
		}
		if r.err == nil {
			continue
		}
		if r.stream {
			failedStream++
		} else {
			failedPlain++
		}
		if l.expected(r) {
			expected++
		}
	}
	return fmt.Sprintf("%d requests (%d streaming): %d non-streaming failed, %d streaming failed (%d of them streams on an engine when it was killed)",
		n, streams, failedPlain, failedStream, expected)
}

func kind(stream bool) string {
	if stream {
		return "streaming"
	}
	return "non-streaming"
}
