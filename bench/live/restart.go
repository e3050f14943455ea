package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// restartCmd is the restart scenario: steady load on every region's
// gateway; after -baseline the engine -engine (process -pid) is killed
// with SIGKILL, after -down it is started again with the command after
// "--", and the load goes on for -after once it answers /health. Every
// request is attributed to the engine that served it (the gateway's
// X-Switchyard-Engine header); per -bucket of sending time it prints the
// engine's share of its region's requests beside the weight the
// snapshots in force then planned for it, and the time from its restart
// until its share is again at least (1 - -tolerance) of the weight
// planned before it was killed (and until it is within ±-tolerance of
// its share before the kill).
func restartCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("restart", flag.ContinueOnError)
	var w workloadFlags
	w.register(fs)
	targets := fs.String("targets", "", "each region's gateway: region=url,...")
	region := fs.String("region", "", "region (cluster) of the engine killed")
	engineID := fs.String("engine", "", "id of the engine killed and restarted")
	engineURL := fs.String("engine-url", "", "that engine's base URL (its /health is polled)")
	pid := fs.Int("pid", 0, "that engine's process id (SIGKILL)")
	rps := fs.Float64("rps", 1.5, "requests per second sent to each region's gateway, evenly spaced")
	baseline := fs.Duration("baseline", 60*time.Second, "load before the kill")
	down := fs.Duration("down", 30*time.Second, "time between the kill and the restart")
	after := fs.Duration("after", 90*time.Second, "load after the restarted engine answers /health")
	bucket := fs.Duration("bucket", 10*time.Second, "reporting bucket")
	tolerance := fs.Float64("tolerance", 0.2, "a share at least (1 - this) x the weight planned before the kill counts as its planned share")
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server holding the snapshot audit stream")
	restartLog := fs.String("restart-log", "", "file the restarted engine's stderr is appended to (empty: discarded)")
	out := fs.String("out", "", "file the result's JSON is written to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmdline := fs.Args()
	tg, err := parseEngines(*targets)
	if err != nil {
		return fmt.Errorf("-targets: %w", err)
	}
	if *region == "" || *engineID == "" || *engineURL == "" || *pid <= 0 || len(cmdline) == 0 || !(*rps > 0) || *bucket <= 0 || *out == "" {
		return errors.New("restart needs -targets, -region, -engine, -engine-url, -pid, -out, positive -rps and -bucket, and the engine's command after --")
	}
	if !slicesContains(tg, *region) {
		return fmt.Errorf("-region %q has no gateway in -targets", *region)
	}
	reqs, err := loadRequests(w, nil)
	if err != nil {
		return err
	}
	c := newClient(w)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var (
		mu   sync.Mutex
		sent []sentRequest
		wg   sync.WaitGroup
	)
	// Steady load on every region until stop is closed.
	stop := make(chan struct{})
	interval := time.Duration(float64(time.Second) / *rps)
	for k, t := range tg {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			// Regions start at different requests of the trace and phases.
			i := k * len(reqs.reqs) / len(tg)
			if !sleepCtx(ctx, interval*time.Duration(k)/time.Duration(len(tg))) {
				return
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-stop:
					return
				case <-tick.C:
				}
				r := reqs.reqs[i%len(reqs.reqs)]
				i++
				at := time.Since(start)
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := c.send(ctx, t.url, r)
					mu.Lock()
					sent = append(sent, sentRequest{Region: t.id, At: at, Engine: res.Engine, Served: res.Served, Failure: res.Failure})
					mu.Unlock()
				}()
			}
		}()
	}

	var child *exec.Cmd
	stopLoad := func() {
		close(stop)
		wg.Wait()
		if child != nil && child.Process != nil {
			_ = child.Process.Signal(syscall.SIGTERM)
			_ = child.Wait()
		}
	}
	fmt.Fprintf(os.Stderr, "restart: %.2f rps to each of %d gateways; %s killed after %s\n", *rps, len(tg), *engineID, *baseline)
	if !sleepCtx(ctx, *baseline) {
		stopLoad()
		return ctx.Err()
	}
	killed := time.Since(start)
	if err := syscall.Kill(*pid, syscall.SIGKILL); err != nil {
		stopLoad()
		return fmt.Errorf("killing engine %s (pid %d): %w", *engineID, *pid, err)
	}
	if !sleepCtx(ctx, *down) {
		stopLoad()
		return ctx.Err()
	}
	child = exec.Command(cmdline[0], cmdline[1:]...)
	child.Stdout = io.Discard
	if *restartLog != "" {
		f, err := os.OpenFile(*restartLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			stopLoad()
			return fmt.Errorf("opening %s: %w", *restartLog, err)
		}
		defer f.Close()
		child.Stderr = f
	}
	started := time.Since(start)
	if err := child.Start(); err != nil {
		child = nil
		stopLoad()
		return fmt.Errorf("restarting engine %s: %w", *engineID, err)
	}
	back, err := waitHealthy(ctx, c.http, *engineURL+"/health", 60*time.Second)
	if err != nil {
		stopLoad()
		return fmt.Errorf("restarted engine %s: %w", *engineID, err)
	}
	restarted := back.Sub(start)
	fmt.Fprintf(os.Stderr, "restart: killed at %.1f s, started at %.1f s, answering /health at %.1f s\n",
		killed.Seconds(), started.Seconds(), restarted.Seconds())
	sleepCtx(ctx, *after)
	end := time.Since(start)
	stopLoad()

	weights, err := plannedWeights(context.WithoutCancel(ctx), *natsURL, *region, *engineID)
	if err != nil {
		return err
	}
	res := analyseRestart(restartInput{
		Region: *region, Engine: *engineID, Start: start, Killed: killed, Started: started,
		Restarted: restarted, End: end, Bucket: *bucket, Tolerance: *tolerance, Sent: sent, Weights: weights,
	})
	res.RPS = *rps
	printRestart(os.Stdout, res)
	return writeJSON(*out, res)
}

func slicesContains(es []engine, id string) bool {
	for _, e := range es {
		if e.id == id {
			return true
		}
	}
	return false
}

// waitHealthy polls url until it answers 200 and returns when it did.
func waitHealthy(ctx context.Context, hc *http.Client, url string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return time.Time{}, err
		}
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}
	return time.Time{}, fmt.Errorf("%s not healthy within %s", url, within)
}

// plannedWeight is the engine's weight in one snapshot of its cluster.
type plannedWeight struct {
	At     time.Time
	Weight float64
}

// plannedWeights reads the audit stream's snapshots of cluster and the
// weight each gave engine (0 when it named the cluster but not the
// engine), oldest first, each from when the stream stored it (its
// version is the end of the window it was planned from, about 6 s
// earlier).
func plannedWeights(ctx context.Context, url, cluster, engineID string) ([]plannedWeight, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening jetstream: %w", err)
	}
	store, err := snapshots.Lookup(ctx, js)
	if err != nil {
		return nil, err
	}
	var out []plannedWeight
	err = store.ReadAudit(ctx, snapshots.AuditFrom{}, func(e snapshots.AuditEntry) bool {
		if e.Err != nil {
			return true
		}
		for _, cw := range e.Snapshot.GetClusters() {
			if cw.GetCluster() != cluster {
				continue
			}
			pw := plannedWeight{At: e.Stored}
			for _, ew := range cw.GetWeights() {
				if ew.GetEngineId() == engineID {
					pw.Weight = ew.GetWeight()
				}
			}
			out = append(out, pw)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot audit stream: %w", err)
	}
	return out, nil
}

// sentRequest is one request of the restart scenario: when it was sent
// (since the start), to which region, and who served it.
type sentRequest struct {
	Region  string
	At      time.Duration
	Engine  string
	Served  bool
	Failure string
}

type restartInput struct {
	Region, Engine                          string
	Start                                   time.Time
	Killed, Started, Restarted, End, Bucket time.Duration
	Tolerance                               float64
	Sent                                    []sentRequest
	Weights                                 []plannedWeight
}

// restartBucket is one bucket of the watched region's requests.
type restartBucket struct {
	// From and To are seconds from the restart (the engine answering
	// /health); negative before it.
	From, To float64 `json:"-"`
	FromS    float64 `json:"from_s"`
	ToS      float64 `json:"to_s"`
	Sent     int     `json:"sent"`
	Served   int     `json:"served"`
	Failed   int     `json:"failed"`
	ByEngine int     `json:"by_engine"`
	// Share is ByEngine / Served (null with nothing served).
	Share *float64 `json:"share"`
	// Planned is the mean weight of the snapshots in force over the
	// bucket (sampled every 100 ms).
	Planned float64 `json:"planned"`
	Phase   string  `json:"phase"` // before, down, restarting, after
}

// restartResult is what bench/live writes for the restart scenario.
type restartResult struct {
	Region     string  `json:"region"`
	Engine     string  `json:"engine"`
	RPS        float64 `json:"rps_per_region"`
	KilledS    float64 `json:"killed_s"`
	StartedS   float64 `json:"started_s"`
	RestartedS float64 `json:"restarted_s"`
	EndS       float64 `json:"end_s"`
	// PlannedBefore is the engine's mean planned weight before the kill.
	PlannedBefore float64 `json:"planned_before"`
	// ShareBefore is its share of the served requests sent before the kill.
	ShareBefore float64 `json:"share_before"`
	Tolerance   float64 `json:"tolerance"`
	// RecoveredS is the end of the first bucket after the restart whose
	// share is at least (1 - Tolerance) × PlannedBefore (it serves its
	// planned share again; above it is the picker's choice, which at
	// light load sends the fast engine more than its weight), in seconds
	// after the restart (null: none); Held says every later bucket did.
	RecoveredS *float64 `json:"recovered_s"`
	Held       bool     `json:"held"`
	// RecoveredShareS is the end of the first bucket after the restart
	// whose share is within ±Tolerance of ShareBefore (null: none).
	RecoveredShareS *float64        `json:"recovered_share_s"`
	Buckets         []restartBucket `json:"buckets"`
}

// analyseRestart buckets the watched region's requests by sending time,
// aligned so that a bucket starts at the restart.
func analyseRestart(in restartInput) restartResult {
	res := restartResult{
		Region: in.Region, Engine: in.Engine, Tolerance: in.Tolerance,
		KilledS: in.Killed.Seconds(), StartedS: in.Started.Seconds(), RestartedS: in.Restarted.Seconds(), EndS: in.End.Seconds(),
	}
	sort.Slice(in.Weights, func(i, j int) bool { return in.Weights[i].At.Before(in.Weights[j].At) })
	weightAt := func(d time.Duration) float64 {
		t := in.Start.Add(d)
		i := sort.Search(len(in.Weights), func(i int) bool { return in.Weights[i].At.After(t) })
		if i == 0 {
			return 0
		}
		return in.Weights[i-1].Weight
	}
	meanWeight := func(from, to time.Duration) float64 {
		var sum float64
		n := 0
		for d := from; d < to; d += 100 * time.Millisecond {
			sum += weightAt(d)
			n++
		}
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	res.PlannedBefore = meanWeight(0, in.Killed)
	var servedBefore, byBefore int
	for _, s := range in.Sent {
		if s.Region == in.Region && s.At < in.Killed && s.Served {
			servedBefore++
			if s.Engine == in.Engine {
				byBefore++
			}
		}
	}
	if servedBefore > 0 {
		res.ShareBefore = float64(byBefore) / float64(servedBefore)
	}
	// Buckets aligned on the restart, the first one starting at or after 0.
	first := in.Restarted - in.Bucket*time.Duration(in.Restarted/in.Bucket)
	for from := first; from+in.Bucket/2 <= in.End; from += in.Bucket {
		to := min(from+in.Bucket, in.End)
		b := restartBucket{From: (from - in.Restarted).Seconds(), To: (to - in.Restarted).Seconds()}
		b.FromS, b.ToS = b.From, b.To
		switch {
		case to <= in.Killed:
			b.Phase = "before"
		case from >= in.Killed && to <= in.Started:
			b.Phase = "down"
		case from >= in.Restarted:
			b.Phase = "after"
		default:
			b.Phase = "transition"
		}
		for _, s := range in.Sent {
			if s.Region != in.Region || s.At < from || s.At >= to {
				continue
			}
			b.Sent++
			if !s.Served {
				b.Failed++
				continue
			}
			b.Served++
			if s.Engine == in.Engine {
				b.ByEngine++
			}
		}
		if b.Served > 0 {
			share := float64(b.ByEngine) / float64(b.Served)
			b.Share = &share
		}
		b.Planned = meanWeight(from, to)
		res.Buckets = append(res.Buckets, b)
	}
	near := func(b restartBucket, ref float64) bool {
		return b.Share != nil && math.Abs(*b.Share-ref) <= in.Tolerance*ref
	}
	serves := func(b restartBucket) bool {
		return b.Share != nil && *b.Share >= (1-in.Tolerance)*res.PlannedBefore
	}
	for i, b := range res.Buckets {
		if b.Phase != "after" || !serves(b) {
			continue
		}
		t := b.To
		res.RecoveredS = &t
		res.Held = true
		for _, later := range res.Buckets[i+1:] {
			if !serves(later) {
				res.Held = false
			}
		}
		break
	}
	for _, b := range res.Buckets {
		if b.Phase == "after" && near(b, res.ShareBefore) {
			t := b.To
			res.RecoveredShareS = &t
			break
		}
	}
	return res
}

func printRestart(w io.Writer, r restartResult) {
	fmt.Fprintf(w, "restart: %s of region %s, %.2f rps per region; killed at %.1f s, restarted at %.1f s, answering /health at %.1f s\n",
		r.Engine, r.Region, r.RPS, r.KilledS, r.StartedS, r.RestartedS)
	fmt.Fprintf(w, "before the kill: planned weight %.2f, share of served %.2f\n", r.PlannedBefore, r.ShareBefore)
	fmt.Fprintln(w, "bucket (s from restart)  phase       sent  served  failed  by-engine  share  planned")
	for _, b := range r.Buckets {
		share := "   -"
		if b.Share != nil {
			share = fmt.Sprintf("%.2f", *b.Share)
		}
		fmt.Fprintf(w, "%6.0f .. %-6.0f         %-10s  %4d  %6d  %6d  %9d  %5s  %7.2f\n",
			b.From, b.To, b.Phase, b.Sent, b.Served, b.Failed, b.ByEngine, share, b.Planned)
	}
	var sb strings.Builder
	if r.RecoveredS == nil {
		fmt.Fprintf(&sb, "no bucket after the restart with a share of at least %.0f%% of the planned %.2f", 100*(1-r.Tolerance), r.PlannedBefore)
	} else {
		fmt.Fprintf(&sb, "share at least %.0f%% of the planned %.2f by %.0f s after the restart", 100*(1-r.Tolerance), r.PlannedBefore, *r.RecoveredS)
		if r.Held {
			sb.WriteString(", and in every later bucket")
		} else {
			sb.WriteString(", not in every later bucket")
		}
	}
	fmt.Fprintln(w, sb.String())
	if r.RecoveredShareS != nil {
		fmt.Fprintf(w, "share within %.0f%% of its share before the kill (%.2f) by %.0f s after the restart\n", 100*r.Tolerance, r.ShareBefore, *r.RecoveredShareS)
	} else {
		fmt.Fprintf(w, "no bucket after the restart within %.0f%% of its share before the kill (%.2f)\n", 100*r.Tolerance, r.ShareBefore)
	}
}
