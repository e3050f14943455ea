package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain lets the test binary act as the switchyard binary: with
// SWITCHYARD_TEST_AS_MAIN set it runs the command line and exits, so the
// multi-process test below starts real processes without building first.
func TestMain(m *testing.M) {
	if os.Getenv("SWITCHYARD_TEST_AS_MAIN") != "" {
		ctx, stop := signalContext()
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		// The command has shut down. Under -race the runtime's own
		// teardown (racefini) can take seconds more on a loaded machine;
		// the marker lets tests time the service, not the race runtime.
		fmt.Fprintln(os.Stderr, returnedMarker)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// returnedMarker is the stderr line a command run by TestMain prints
// once it has returned.
const returnedMarker = "switchyard-test: command returned"

// handedOut holds every port freePort has returned in this test binary.
// The kernel may hand a just-closed ephemeral port out again, so two
// calls in one test could otherwise name the same port for two servers
// (CI once saw the gateway's port given to NATS).
var handedOut = struct {
	sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// freePort returns a loopback address no listener holds now and that no
// earlier call returned.
func freePort(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if !handedOut.ports[addr] {
			handedOut.ports[addr] = true
			return addr
		}
	}
	t.Fatal("no fresh loopback port in 100 tries")
	return ""
}

// TestServicesAsSeparateProcesses runs the pipeline the way the README's
// production section does, one process per service configured through
// SWITCHYARD_* environment variables: brokers, two engines, an agent, the
// processor, the optimizer and a gateway; then streams a chat completion
// through the gateway and waits until it routes on a published snapshot.
func TestServicesAsSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kafka, natsAddr := freePort(t), freePort(t)
	e1, e2, gw := freePort(t), freePort(t), freePort(t)
	env := append(os.Environ(), "SWITCHYARD_TEST_AS_MAIN=1",
		"SWITCHYARD_KAFKA_BROKERS="+kafka, "SWITCHYARD_NATS_URL=nats://"+natsAddr)
	start := func(name string, args ...string) { startProcess(t, ctx, env, name, args...) }
	start("brokers", "brokers", "--kafka-listen", kafka, "--nats-listen", natsAddr)
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

	deadline := time.Now().Add(90 * time.Second)
	for {
		snapshot, engine, body := chat(t, ctx, "http://"+gw)
		if !strings.Contains(body, "data: [DONE]") {
			t.Fatalf("stream did not end with [DONE]:\n%s", body)
		}
		if snapshot != "" && snapshot != "0" {
			t.Logf("routed to %s on snapshot %s", engine, snapshot)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway never routed on a published snapshot")
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// startProcess starts the test binary as the switchyard binary with args
// and env, stops it (SIGINT, then kill after 10s) when the test ends, and
// logs its stderr if the test failed.
func startProcess(t *testing.T, ctx context.Context, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = env
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	var logs strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		<-done
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, logs.String())
		}
	})
}

func waitTCP(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never accepted connections", addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func chat(t *testing.T, ctx context.Context, base string) (snapshot, engine, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"switchyard-sim-8b","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway answered %d: %s", resp.StatusCode, b)
	}
	return resp.Header.Get("X-Switchyard-Snapshot"), resp.Header.Get("X-Switchyard-Engine"), string(b)
}
