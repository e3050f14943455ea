// Command fanout measures snapshot fan-out: one optimizer publishes
// weight snapshots (snapshots.Store.Publish, as the optimizer does) to an
// embedded NATS server with JetStream, and N gateways in a separate
// process each watch the cluster's key on their own NATS connection (the
// real snapshots.Watcher) and apply every value (gateway.ApplySnapshot:
// decode, checks, picker tables). It reports, per engines-per-snapshot
// size, the publish-to-applied latency over all gateways and snapshots
// (p50, p99, max: from the start of Publish to the end of ApplySnapshot,
// one clock since both processes run on this machine) and the gateway
// process's CPU time per snapshot (total and per gateway, from getrusage,
// so the broker's and the publisher's CPU are not in it), and the
// publisher process's (the embedded NATS server's and Publish's) per
// snapshot. With -compression s2 the publisher writes compressed values
// (snapshots.Compression); the value bytes column is what the key holds.
//
//	go run ./bench/fanout                                 # 200 gateways, 1000 and 20000 engines
//	go run ./bench/fanout -gateways 50 -engines 1000 -snapshots 50
//	go run ./bench/fanout -weights vary                   # every snapshot a new plan
//	go run ./bench/fanout -weights rtt                    # the same weights, new network estimates
//	go run ./bench/fanout -fast                           # watchers with snapshots.FastPath (the key's subject too)
//	go run ./bench/fanout -compression s2                 # the publisher writes S2-compressed values (snapshots.Compression)
//
// Each snapshot is published once every gateway has applied the previous
// one and -interval has passed, so latencies are not queueing behind
// each other.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

func main() {
	role := flag.String("role", "publisher", "publisher, or watchers (the child process the publisher starts)")
	gateways := flag.Int("gateways", 200, "gateways (watchers, each with its own NATS connection)")
	engines := flag.String("engines", "1000,20000", "comma-separated engines per snapshot")
	n := flag.Int("snapshots", 30, "measured snapshots per size")
	interval := flag.Duration("interval", 100*time.Millisecond, "pause between one snapshot applied everywhere and the next publish")
	url := flag.String("nats", "", "NATS URL (watchers)")
	cluster := flag.String("cluster", "fanout", "cluster key (watchers)")
	apply := flag.String("apply", "gateway", "what a watcher does with a value: gateway (gateway.ApplySnapshot), decode (proto.Unmarshal only) or none")
	maxPayload := flag.Int("max-payload", 8<<20, "the NATS server's max_payload in bytes (its default, 1 MB, is below a 20,000-engine snapshot)")
	cpuProfile := flag.String("cpuprofile", "", "write the watchers process's CPU profile to this file, suffixed with .ENGINES, and the publisher's (with the NATS server) to this file suffixed with .server")
	fast := flag.Bool("fast", false, "watchers also subscribe to the key's subject (snapshots.FastPath); default the KV watch alone, as gateways run")
	compression := flag.String("compression", snapshots.CompressionNone, "how the publisher writes the KV values: none (the signed protobuf) or s2 (snapshots.Compression; the watchers read both)")
	weights := flag.String("weights", "same", "same (every snapshot carries the same plan, only its version changes), vary (every snapshot moves every engine's weight, so every gateway refills its Maglev table) or rtt (the same weights, every engine's network estimate moves: a new picker table, the same Maglev table)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *role == "watchers" {
		err = watchers(ctx, *url, *cluster, *gateways, *apply, *cpuProfile, *fast)
	} else {
		err = publisher(ctx, *gateways, *engines, *n, *interval, *apply, *maxPayload, *weights, *compression, *cpuProfile, *fast)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// watchers runs the gateway side: n gateways of cluster, each fed by its
// own snapshots.Watcher. It writes "A version gateway unixnano" after
// each apply and answers "cpu" on stdin with "CPU nanoseconds" and the
// watchers' summed snapshots.WatchStats (fast, watch, duplicates, not
// newer).
func watchers(ctx context.Context, url, cluster string, n int, mode, cpuProfile string, fast bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cpuProfile != "" {
		stop, err := startProfile(cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	emit := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format, args...)
		out.Flush()
		mu.Unlock()
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	all := make([]*snapshots.Watcher, 0, n)
	for k := range n {
		g, err := gateway.New(cluster, gateway.Registerer(prometheus.NewRegistry()), gateway.Logger(quiet))
		if err != nil {
			return fmt.Errorf("gateway %d: %w", k, err)
		}
		w := snapshots.NewWatcher(url, "", cluster, nats.Name(fmt.Sprintf("fanout-gateway-%d", k))).
			With(snapshots.FastPath(fast), snapshots.WatchLogger(quiet))
		all = append(all, w)
		wg.Add(2)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
		go func() {
			defer wg.Done()
			for b := range w.Updates() {
				v, err := applyValue(g, b, mode)
				if err != nil {
					emit("E %d %v\n", k, err)
					continue
				}
				emit("A %d %d %d\n", v, k, time.Now().UnixNano())
			}
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "cpu" {
			var sum snapshots.WatchStats
			for _, w := range all {
				st := w.Stats()
				sum.Fast += st.Fast
				sum.Watch += st.Watch
				sum.Duplicates += st.Duplicates
				sum.NotNewer += st.NotNewer
			}
			emit("CPU %d %d %d %d %d\n", cpuNanos(), sum.Fast, sum.Watch, sum.Duplicates, sum.NotNewer)
		}
	}
	cancel() // stdin closed: the publisher is done
	wg.Wait()
	return nil
}

// applyValue applies b as mode says and returns its version.
func applyValue(g *gateway.Gateway, b []byte, mode string) (uint64, error) {
	switch mode {
	case "gateway":
		if err := g.ApplySnapshot(b); err != nil {
			return 0, err
		}
		return g.Stats().SnapshotVersion, nil
	case "decode":
		var snap schemas.WeightSnapshot
		if err := protoUnmarshal(b, &snap); err != nil {
			return 0, err
		}
		return snap.GetVersion(), nil
	default: // none: read the version field only
		return versionOf(b)
	}
}

func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// child is the watchers process as seen by the publisher.
type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	applied chan applied
	cpu     chan usage
	errs    chan string
}

// usage is the watchers process's CPU time and its watchers' counts.
type usage struct {
	cpu                     time.Duration
	fast, watch, dup, stale uint64
}

type applied struct {
	version uint64
	gateway int
	at      time.Time
}

func startChild(ctx context.Context, url, cluster string, n int, mode, cpuProfile string, fast bool) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-role", "watchers", "-nats", url, "-cluster", cluster, "-gateways", strconv.Itoa(n), "-apply", mode, "-cpuprofile", cpuProfile, "-fast="+strconv.FormatBool(fast))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting watchers: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin, applied: make(chan applied, 4*n), cpu: make(chan usage, 1), errs: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 4 && f[0] == "A":
				v, _ := strconv.ParseUint(f[1], 10, 64)
				g, _ := strconv.Atoi(f[2])
				ns, _ := strconv.ParseInt(f[3], 10, 64)
				c.applied <- applied{v, g, time.Unix(0, ns)}
			case len(f) == 6 && f[0] == "CPU":
				var u usage
				ns, _ := strconv.ParseInt(f[1], 10, 64)
				u.cpu = time.Duration(ns)
				for i, p := range []*uint64{&u.fast, &u.watch, &u.dup, &u.stale} {
					*p, _ = strconv.ParseUint(f[2+i], 10, 64)
				}
				c.cpu <- u
			default:
				select {
				case c.errs <- sc.Text():
				default:
				}
			}
		}
	}()
	return c, nil
}

func (c *child) cpuTime(ctx context.Context) (usage, error) {
	if _, err := io.WriteString(c.stdin, "cpu\n"); err != nil {
		return usage{}, err
	}
	select {
	case u := <-c.cpu:
		return u, nil
	case <-ctx.Done():
		return usage{}, ctx.Err()
	case <-time.After(30 * time.Second):
		return usage{}, errors.New("no cpu answer from the watchers")
	}
}

func (c *child) close() {
	_ = c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// waitAll waits until every one of n gateways applied version v or
// later and returns when each did (the first time).
func (c *child) waitAll(ctx context.Context, v uint64, n int, timeout time.Duration) ([]time.Time, error) {
	at := make([]time.Time, n)
	got := 0
	deadline := time.After(timeout)
	for got < n {
		select {
		case a := <-c.applied:
			if a.version >= v && at[a.gateway].IsZero() {
				at[a.gateway] = a.at
				got++
			}
		case e := <-c.errs:
			return nil, fmt.Errorf("watchers: %s", e)
		case <-deadline:
			return nil, fmt.Errorf("version %d: %d of %d gateways applied it within %v", v, got, n, timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return at, nil
}

// snapshot is version of cluster's plan over engines. Each engine's
// values come from a PRNG seeded by the engine (and by the region for its
// network estimate), as varied as a solver's full-precision numbers:
// weights (1 to 10 before normalizing), engine_ms (150 to 400),
// marginal_ms (1.2 to 3 times engine_ms), planned_utilization (0.2 to
// 0.9) and network_ms (per region, 150 regions). With weights "same"
// every version carries the same plan; "vary" draws every engine's
// weight again for each version; "rtt" draws every engine's network
// estimate again for each version (the same weights).
func snapshot(cluster string, version uint64, engines int, weights string) *schemas.WeightSnapshot {
	cw := &schemas.ClusterWeights{Cluster: cluster, DemandRps: 1000, ExpectedLatencyMs: 250}
	w := make([]float64, engines)
	sum := 0.0
	for j := range w {
		w[j] = 1 + 9*rng(2<<32+uint64(j), 0).Float64()
		if weights == "vary" {
			w[j] = 1 + 9*rng(2<<32+uint64(j), version).Float64()
		}
		sum += w[j]
	}
	for j := range engines {
		r := rng(uint64(j), 0)
		engineMs := 150 + 250*r.Float64()
		marginal := engineMs * (1.2 + 1.8*r.Float64())
		util := 0.2 + 0.7*r.Float64()
		region := uint64(j % 150)
		rtt := 2 + float64(region) + rng(1<<32+region, 0).Float64()
		if weights == "rtt" {
			rtt += rng(uint64(j), version).Float64()
		}
		cw.Weights = append(cw.Weights, &schemas.EngineWeight{
			EngineId:           fmt.Sprintf("e-%05d", j),
			EndpointUrl:        fmt.Sprintf("http://e-%05d.engines.example.net:8000", j),
			Weight:             w[j] / sum,
			Explanation:        &schemas.Explanation{NetworkMs: rtt, EngineMs: engineMs, MarginalMs: marginal},
			PlannedUtilization: util,
		})
	}
	return &schemas.WeightSnapshot{SchemaVersion: 1, Version: version, CreatedUnixMs: time.Now().UnixMilli(),
		Clusters: []*schemas.ClusterWeights{cw}}
}

// rng is the deterministic PRNG of one engine (or region) and version.
func rng(key, version uint64) *rand.Rand { return rand.New(rand.NewPCG(key, version)) }

func publisher(ctx context.Context, gateways int, sizes string, n int, interval time.Duration, mode string, maxPayload int, weights, compression, cpuProfile string, fast bool) error {
	if weights != "same" && weights != "vary" && weights != "rtt" {
		return fmt.Errorf("-weights %q: want same, vary or rtt", weights)
	}
	compress, err := snapshots.ParseCompression(compression)
	if err != nil {
		return fmt.Errorf("-compression: %w", err)
	}
	dir, err := os.MkdirTemp("", "switchyard-fanout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cpuProfile != "" {
		// The publisher's process holds the NATS server: its profile is
		// the server's side of the fan-out.
		stop, err := startProfile(cpuProfile + ".server")
		if err != nil {
			return err
		}
		defer stop()
	}
	// The default max payload (1 MB) does not carry a 20,000-engine
	// snapshot (about 2 MB): "nats: maximum payload exceeded".
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: dir, NoLog: true, NoSigs: true, MaxPayload: int32(maxPayload)})
	if err != nil {
		return err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("nats server not ready")
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	store, err := snapshots.Open(ctx, js, compress)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, snapshots.DefaultBucket)
	if err != nil {
		return err
	}
	fmt.Printf("%d gateways (own NATS connections, one process), apply %s, weights %s, compression %s, %d snapshots per size, max_payload %d, fast path %v, %d CPUs\n",
		gateways, mode, weights, compression, n, maxPayload, fast, numCPU())
	// bytes: the protobuf snapshot; value bytes: what the KV holds (the
	// compressed form with -compression s2), and ratio bytes/value bytes;
	// srv cpu/snap ms: this process's CPU per snapshot, the NATS server's
	// and Publish's (encode, compress, the audit message and the put),
	// not the bench's making of the snapshots.
	fmt.Printf("%9s %10s %9s %9s %9s %9s %12s %14s %14s %7s %12s %6s %16s\n", "engines", "bytes", "pub ms", "p50 ms", "p99 ms", "max ms", "gw cpu ms", "cpu/snap ms", "cpu/gw/snap ms", "fast %", "value bytes", "ratio", "srv cpu/snap ms")
	version := uint64(0)
	for _, s := range strings.Split(sizes, ",") {
		engines, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("engines %q: %w", s, err)
		}
		cluster := fmt.Sprintf("fanout-%d", engines)
		profile := ""
		if cpuProfile != "" {
			profile = fmt.Sprintf("%s.%d", cpuProfile, engines)
		}
		if err := measure(ctx, store, kv, ns.ClientURL(), cluster, gateways, engines, n, interval, mode, weights, profile, fast, &version); err != nil {
			return fmt.Errorf("%d engines: %w", engines, err)
		}
	}
	return nil
}

func numCPU() int {
	n := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n = strings.Count(string(b), "processor\t:")
	}
	return n
}

func measure(ctx context.Context, store *snapshots.Store, kv jetstream.KeyValue, url, cluster string, gateways, engines, n int, interval time.Duration, mode string, weights string, cpuProfile string, fast bool, version *uint64) error {
	if need, avail := watcherBytes(gateways, engines, mode), availableBytes(); avail > 0 && need > avail*3/4 {
		return fmt.Errorf("%d gateways at %d engines need about %.1f GB, %.1f GB available: use fewer -gateways",
			gateways, engines, float64(need)/1e9, float64(avail)/1e9)
	}
	c, err := startChild(ctx, url, cluster, gateways, mode, cpuProfile, fast)
	if err != nil {
		return err
	}
	defer c.close()
	// Warm up until every gateway watches the key and has applied a value.
	for try := 0; ; try++ {
		*version++
		if err := store.Publish(ctx, snapshot(cluster, *version, engines, weights)); err != nil {
			return err
		}
		if _, err := c.waitAll(ctx, *version, gateways, 60*time.Second); err == nil {
			break
		} else if try == 3 {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	var lat []float64
	var pubMs []float64
	size := 0
	cpu0, err := c.cpuTime(ctx)
	if err != nil {
		return err
	}
	srv0 := cpuNanos()
	var made int64 // CPU spent making the snapshots, left out of the server's
	for range n {
		*version++
		m0 := cpuNanos()
		snap := snapshot(cluster, *version, engines, weights)
		size = len(mustMarshal(snap))
		made += cpuNanos() - m0
		t0 := time.Now()
		if err := store.Publish(ctx, snap); err != nil {
			return err
		}
		pubMs = append(pubMs, ms(time.Since(t0)))
		at, err := c.waitAll(ctx, *version, gateways, 5*time.Minute)
		if err != nil {
			return err
		}
		for _, t := range at {
			lat = append(lat, ms(t.Sub(t0)))
		}
		time.Sleep(interval)
	}
	srv1 := cpuNanos()
	cpu1, err := c.cpuTime(ctx)
	if err != nil {
		return err
	}
	stored, err := kv.Get(ctx, cluster)
	if err != nil {
		return fmt.Errorf("reading the stored value: %w", err)
	}
	valueBytes := len(stored.Value())
	// The gateways' idle CPU (heartbeats, tickers) over the same span
	// is included; the pauses are short.
	cpu := ms(cpu1.cpu - cpu0.cpu)
	// The share of measured values offered first by the key's
	// subscription (the rest by the KV watch).
	fastPct := 0.0
	if offered := (cpu1.fast - cpu0.fast) + (cpu1.watch - cpu0.watch); offered > 0 {
		fastPct = 100 * float64(cpu1.fast-cpu0.fast) / float64(offered)
	}
	slices.Sort(lat)
	slices.Sort(pubMs)
	fmt.Printf("%9d %10d %9.2f %9.2f %9.2f %9.2f %12.1f %14.2f %14.3f %7.1f %12d %6.2f %16.2f\n", engines, size, pubMs[len(pubMs)/2],
		pct(lat, 0.50), pct(lat, 0.99), lat[len(lat)-1], cpu, cpu/float64(n), cpu/float64(n)/float64(gateways), fastPct,
		valueBytes, float64(size)/float64(valueBytes), float64(srv1-srv0-made)/1e6/float64(n))
	return nil
}

// watcherBytes estimates the watchers process's memory when gateways
// apply snapshots: a gateway holds about 5 MB (its pick pool's prefix
// memory) and up to 8 KB an engine (engine states, limiters, metrics,
// the decoded snapshot and tables). 200 gateways at 20,000 engines
// reached 23 GB resident, this machine's memory.
func watcherBytes(gateways, engines int, mode string) int64 {
	if mode != "gateway" {
		return 0
	}
	return int64(gateways) * (5<<20 + int64(engines)*8<<10)
}

// availableBytes is MemAvailable from /proc/meminfo, 0 when unknown.
func availableBytes() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mustMarshal(s *schemas.WeightSnapshot) []byte {
	b, _ := protoMarshal(s)
	return b
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(sorted []float64, q float64) float64 {
	k := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[k]
}

// startProfile writes this process's CPU profile to path until stop.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
