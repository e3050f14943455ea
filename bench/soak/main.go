// Command soak attacks a running gateway with slow bodies, slowloris
// heads and idle connections, all at once, while it sends normal
// requests, and checks that the gateway's memory (resident set, and Go
// heap in use from its /metrics) stays bounded and that every normal
// request succeeds. bench/soak/run.sh starts an
// engine and a gateway and runs it.
//
// usage: go run ./bench/soak -addr 127.0.0.1:8080 -pid PID [flags]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type config struct {
	addr          string
	pid           int
	slowBody      int
	bodyBytes     int
	slowloris     int
	idle          int
	duration      time.Duration
	maxGrowthMB   float64
	model         string
	normalEvery   time.Duration
	dialPerSecond int
}

func main() {
	var c config
	flag.StringVar(&c.addr, "addr", "127.0.0.1:8080", "gateway address")
	flag.IntVar(&c.pid, "pid", 0, "gateway process id (its VmRSS is sampled from /proc)")
	flag.IntVar(&c.slowBody, "slow-body", 250, "connections that declare a 4 MB body and send -body-bytes of it, 10 bytes a second")
	flag.IntVar(&c.bodyBytes, "body-bytes", 110, "bytes each slow body sends")
	flag.IntVar(&c.slowloris, "slowloris", 250, "connections that send a request head one byte a second")
	flag.IntVar(&c.idle, "idle", 2000, "connections opened and left idle")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "how long the attack lasts")
	flag.Float64Var(&c.maxGrowthMB, "max-rss-growth-mb", 50, "fail when the gateway's RSS grows by more (MB)")
	flag.StringVar(&c.model, "model", "switchyard-sim-8b", "model of the normal requests")
	flag.DurationVar(&c.normalEvery, "normal-every", 50*time.Millisecond, "interval between normal requests")
	flag.IntVar(&c.dialPerSecond, "dial-rate", 2000, "attack connections opened per second")
	flag.Parse()
	if c.pid <= 0 {
		fmt.Fprintln(os.Stderr, "soak: -pid is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

// rssMB reads VmRSS of pid in MB (10^6 bytes).
func rssMB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmRSS %q: %w", v, err)
			}
			return kb * 1024 / 1e6, nil
		}
	}
	return 0, errors.New("no VmRSS")
}

// heapInuseMB reads go_memstats_heap_inuse_bytes from the gateway's
// /metrics (0 when it cannot).
func heapInuseMB(client *http.Client, addr string) float64 {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f / 1e6
		}
	}
	return 0
}

// normal sends normal requests and keeps their outcomes.
type normal struct {
	client *http.Client
	url    string
	body   string
	mu     sync.Mutex
	ok     int
	failed []string
	lat    []time.Duration
}

func (n *normal) one(ctx context.Context) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, strings.NewReader(n.body))
	if err != nil {
		n.fail(err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			n.fail(err.Error())
		}
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		n.fail(fmt.Sprintf("%d %v %.200s", resp.StatusCode, err, b))
		return
	}
	n.mu.Lock()
	n.ok++
	n.lat = append(n.lat, time.Since(start))
	n.mu.Unlock()
}

func (n *normal) fail(s string) {
	n.mu.Lock()
	n.failed = append(n.failed, s)
	n.mu.Unlock()
}

func (n *normal) percentile(p float64) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.lat) == 0 {
		return 0
	}
	s := slices.Clone(n.lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// attack is one kind of attack connection and what became of them.
type attack struct {
	name      string
	opened    atomic.Int64
	dialErr   atomic.Int64
	closedBy  atomic.Int64 // closed by the gateway before the end
	statuses  sync.Map     // HTTP status -> *atomic.Int64
	closedAtM sync.Mutex
	closedAt  []time.Duration // after the connection opened
}

func (a *attack) closed(after time.Duration, status int) {
	a.closedBy.Add(1)
	a.closedAtM.Lock()
	a.closedAt = append(a.closedAt, after)
	a.closedAtM.Unlock()
	if status > 0 {
		v, _ := a.statuses.LoadOrStore(status, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
}

func (a *attack) summary() string {
	a.closedAtM.Lock()
	s := slices.Clone(a.closedAt)
	a.closedAtM.Unlock()
	slices.Sort(s)
	med := time.Duration(0)
	if len(s) > 0 {
		med = s[len(s)/2]
	}
	var st []string
	a.statuses.Range(func(k, v any) bool {
		st = append(st, fmt.Sprintf("%d:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(st)
	return fmt.Sprintf("%-10s opened %4d (dial errors %d), closed by the gateway %4d (median after %.1fs), responses %v",
		a.name, a.opened.Load(), a.dialErr.Load(), a.closedBy.Load(), med.Seconds(), st)
}

// hold runs one attack connection: send writes what the attack sends
// (until ctx ends); the connection's reads tell when the gateway answers
// or closes it.
func (a *attack) hold(ctx context.Context, addr string, send func(ctx context.Context, c net.Conn) error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() == nil {
			a.dialErr.Add(1)
		}
		return
	}
	a.opened.Add(1)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		br := bufio.NewReader(c)
		status := 0
		if resp, err := http.ReadResponse(br, nil); err == nil {
			status = resp.StatusCode
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			_, _ = br.ReadByte() // wait for the close
		}
		if ctx.Err() == nil {
			a.closed(time.Since(start), status)
		}
	}()
	sctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-done:
			cancel()
		case <-sctx.Done():
		}
	}()
	_ = send(sctx, c)
	<-sctx.Done()
	c.Close()
	<-done
	cancel()
}

// tick sleeps d or until ctx ends.
func tick(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func run(ctx context.Context, c config) error {
	n := &normal{
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}},
		url:    "http://" + c.addr + "/v1/chat/completions",
		body:   fmt.Sprintf(`{"model":%q,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, c.model),
	}
	for range 50 { // warm up
		n.one(ctx)
	}
	if len(n.failed) > 0 {
		return fmt.Errorf("warm-up requests failed: %v", n.failed[:min(len(n.failed), 3)])
	}
	n.ok, n.lat = 0, nil
	base, err := rssMB(c.pid)
	if err != nil {
		return err
	}
	baseHeap := heapInuseMB(n.client, c.addr)
	fmt.Printf("soak: gateway pid %d, RSS before the attack %.1f MB (heap in use %.1f MB)\n", c.pid, base, baseHeap)

	actx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var wg sync.WaitGroup
	peak, peakHeap := base, baseHeap
	wg.Go(func() {
		for i := 0; tick(actx, 200*time.Millisecond); i++ {
			if r, err := rssMB(c.pid); err == nil && r > peak {
				peak = r
			}
			if i%5 == 0 {
				peakHeap = max(peakHeap, heapInuseMB(n.client, c.addr))
			}
		}
	})
	wg.Go(func() {
		for tick(actx, c.normalEvery) {
			n.one(actx)
		}
	})

	slowBody := &attack{name: "slow-body"}
	slowloris := &attack{name: "slowloris"}
	idle := &attack{name: "idle"}
	bodyHead := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\n\r\n"
	body := bytes.Repeat([]byte("x"), c.bodyBytes)
	copy(body, fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"`, c.model))
	lorisHead := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Pad: "
	type job struct {
		a    *attack
		send func(context.Context, net.Conn) error
	}
	var jobs []job
	for range c.slowBody {
		jobs = append(jobs, job{slowBody, func(ctx context.Context, conn net.Conn) error {
			if _, err := io.WriteString(conn, bodyHead); err != nil {
				return err
			}
			for i := 0; i < len(body); i += 10 {
				if _, err := conn.Write(body[i:min(i+10, len(body))]); err != nil {
					return err
				}
				if !tick(ctx, time.Second) {
					return nil
				}
			}
			return nil
		}})
	}
	for range c.slowloris {
		jobs = append(jobs, job{slowloris, func(ctx context.Context, conn net.Conn) error {
			if _, err := io.WriteString(conn, lorisHead); err != nil {
				return err
			}
			for tick(ctx, time.Second) {
				if _, err := conn.Write([]byte("a")); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	for range c.idle {
		jobs = append(jobs, job{idle, func(context.Context, net.Conn) error { return nil }})
	}
	// Interleave the kinds so that all start at once.
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	gap := time.Second / time.Duration(max(c.dialPerSecond, 1))
	for _, k := range jobs {
		wg.Go(func() { k.a.hold(actx, c.addr, k.send) })
		if !tick(actx, gap) {
			break
		}
	}
	wg.Wait()
	end, err := rssMB(c.pid)
	if err != nil {
		return err
	}
	for _, a := range []*attack{slowBody, slowloris, idle} {
		fmt.Println("soak:", a.summary())
	}
	n.mu.Lock()
	ok, failed := n.ok, slices.Clone(n.failed)
	n.mu.Unlock()
	fmt.Printf("soak: normal requests during the attack: %d ok, %d failed, p50 %v, p99 %v\n",
		ok, len(failed), n.percentile(0.5).Round(time.Microsecond), n.percentile(0.99).Round(time.Microsecond))
	fmt.Printf("soak: RSS before %.1f MB, peak %.1f MB (+%.1f MB), after %.1f MB; Go heap in use before %.1f MB, peak %.1f MB (+%.1f MB)\n",
		base, peak, peak-base, end, baseHeap, peakHeap, peakHeap-baseHeap)
	var errs []error
	// RSS alone misses buffers reserved but never written (their pages
	// are not resident until touched, or until a warm heap reuses
	// them), so the Go heap in use is held to the same bound.
	if peak-base >= c.maxGrowthMB {
		errs = append(errs, fmt.Errorf("RSS grew by %.1f MB (limit %.0f MB)", peak-base, c.maxGrowthMB))
	}
	if peakHeap-baseHeap >= c.maxGrowthMB {
		errs = append(errs, fmt.Errorf("the Go heap in use grew by %.1f MB (limit %.0f MB)", peakHeap-baseHeap, c.maxGrowthMB))
	}
	if baseHeap == 0 {
		errs = append(errs, errors.New("no go_memstats_heap_inuse_bytes on the gateway's /metrics"))
	}
	if len(failed) > 0 || ok == 0 {
		errs = append(errs, fmt.Errorf("%d normal requests failed (%d ok), e.g. %v", len(failed), ok, failed[:min(len(failed), 3)]))
	}
	return errors.Join(errs...)
}
