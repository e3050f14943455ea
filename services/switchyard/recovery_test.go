package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// proc is a switchyard process the test stops itself.
type proc struct {
	name     string
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	returned chan struct{} // closed when its command returned (returnedMarker) or it exited
	mu       sync.Mutex
	logs     strings.Builder
}

func spawn(t *testing.T, ctx context.Context, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.CommandContext(ctx, os.Args[0], args...), done: make(chan struct{}), returned: make(chan struct{})}
	var returned sync.Once
	p.cmd.Env = env
	p.cmd.Stdout = io.Discard
	out, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == returnedMarker {
				returned.Do(func() { close(p.returned) })
				continue
			}
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		returned.Do(func() { close(p.returned) })
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s stderr:\n%s", name, p.logs.String())
			p.mu.Unlock()
		}
	})
	return p
}

// interrupt sends SIGINT and returns how long the process's command took
// to return (failing the test after limit).
func (p *proc) interrupt(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("interrupting %s: %v", p.name, err)
	}
	select {
	case <-p.returned:
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("%s still running %v after SIGINT", p.name, limit)
		return limit
	}
}

// TestRecoveryWithBrokersGone: with the pipeline running and the gateway
// routing on a snapshot, the brokers stop; then every service exits
// within 10s of SIGINT, and a gateway started while the brokers are still
// down routes on the snapshot it cached, and is ready.
func TestRecoveryWithBrokersGone(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kafka, natsAddr := freePort(t), freePort(t)
	e1, e2, gw, gw2 := freePort(t), freePort(t), freePort(t), freePort(t)
	cache := filepath.Join(t.TempDir(), "r1.snapshot")
	env := append(os.Environ(), "SWITCHYARD_TEST_AS_MAIN=1",
		"SWITCHYARD_KAFKA_BROKERS="+kafka, "SWITCHYARD_NATS_URL=nats://"+natsAddr, "SWITCHYARD_SNAPSHOT_CACHE="+cache)
	brokers := spawn(t, ctx, env, "brokers", "brokers", "--kafka-listen", kafka, "--nats-listen", natsAddr)
	waitTCP(t, ctx, kafka)
	waitTCP(t, ctx, natsAddr)
	spawn(t, ctx, env, "engine e1", "enginesim", "--listen", e1, "--id", "e1", "--gpu-class", "h100")
	spawn(t, ctx, env, "engine e2", "enginesim", "--listen", e2, "--id", "e2", "--gpu-class", "l4")
	waitTCP(t, ctx, e1)
	waitTCP(t, ctx, e2)
	services := []*proc{
		spawn(t, ctx, env, "agent", "agent", "--engines", fmt.Sprintf("e1=http://%s,region=r1,gpu=h100;e2=http://%s,region=r1,gpu=l4", e1, e2),
			"--interval", "500ms", "--metrics-listen", ""),
		spawn(t, ctx, env, "processor", "processor", "--window", "4s", "--slide", "1s", "--allowed-lateness", "500ms", "--metrics-listen", ""),
		spawn(t, ctx, env, "optimizer", "optimizer", "--clusters", "r1", "--settle", "200ms", "--metrics-listen", ""),
		// No load balancer to wait for: the drain delay would only add
		// its 5s to the exit measured below (docs/gateway.md#draining).
		spawn(t, ctx, env, "gateway", "gateway", "--cluster", "r1", "--listen", gw, "--drain-delay", "0s"),
	}
	waitTCP(t, ctx, gw)
	var version string
	deadline := time.Now().Add(60 * time.Second)
	for version == "" || version == "0" {
		if time.Now().After(deadline) {
			t.Fatal("the gateway never routed on a published snapshot")
		}
		time.Sleep(250 * time.Millisecond)
		if get(t, ctx, "http://"+gw+"/health/ready") == 200 {
			version, _, _ = chat(t, ctx, "http://"+gw)
		}
	}
	// The cache holds at least this version once the gateway routed on it.
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("snapshot cache: %v", err)
	}

	brokers.interrupt(t, 10*time.Second)
	stopped := time.Now()
	for _, p := range services {
		if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatalf("interrupting %s: %v", p.name, err)
		}
	}
	for _, p := range services {
		select {
		case <-p.returned:
			t.Logf("%s exited within %v of SIGINT with the brokers gone", p.name, time.Since(stopped).Round(time.Millisecond))
		case <-time.After(time.Until(stopped.Add(10 * time.Second))):
			t.Fatalf("%s still running 10s after SIGINT with the brokers gone", p.name)
		}
	}

	spawn(t, ctx, env, "gateway (restarted, brokers down)", "gateway", "--cluster", "r1", "--listen", gw2)
	waitTCP(t, ctx, gw2)
	if code := get(t, ctx, "http://"+gw2+"/health/ready"); code != 200 {
		t.Fatalf("restarted gateway /health/ready = %d", code)
	}
	snap, engine, body := chat(t, ctx, "http://"+gw2)
	if snap == "" || snap == "0" || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("restarted gateway routed on snapshot %q to %q:\n%s", snap, engine, body)
	}
	t.Logf("restarted gateway routes on cached snapshot %s (first gateway saw %s)", snap, version)
}
