package console

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

func TestCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"--nats-url", ""},
		{"extra"},
	} {
		err := Command().Run(context.Background(), args, io.Discard, io.Discard)
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
	var out bytes.Buffer
	err := Command().Run(context.Background(), []string{"--help"}, &out, io.Discard)
	var help *cli.HelpError
	if !errors.As(err, &help) || !strings.Contains(help.Text, "-listen") {
		t.Errorf("--help: %v", err)
	}
}

// TestCommandServes runs the command on real brokers and loads its
// overview: the published snapshot is on it.
func TestCommandServes(t *testing.T) {
	ns := testenv.NATS(t)
	kc := testenv.Kafka(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	v := uint64(time.Now().UnixMilli())
	if err := store.Publish(ctx, &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: v, CreatedUnixMs: int64(v),
		Clusters: []*schemas.ClusterWeights{{Cluster: "region-a", Weights: []*schemas.EngineWeight{{EngineId: "e1", Weight: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Command().Run(runCtx, []string{"--listen", "127.0.0.1:0", "--nats-url", ns.ClientURL(),
			"--kafka-brokers", strings.Join(kc.ListenAddrs(), ",")}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the console's address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := strings.TrimSpace(strings.TrimPrefix(line, "console: "))
	// The port opens before the snapshot store: poll until it is open.
	testenv.Eventually(t, 15*time.Second, func() bool {
		code, body := getPage(t, url)
		return code == 200 && strings.Contains(body, fmt.Sprintf("v%d", v)) && strings.Contains(body, "region-a")
	}, fmt.Sprintf("GET %s: snapshot v%d of region-a", url, v))
	stop()
	if err := <-done; err != nil {
		t.Fatalf("command returned %v after its context ended", err)
	}
}

func getPage(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestCommandServesBeforeNATS: with NATS down the console opens its port
// at once, its overview says NATS is unavailable, and it logs the WARN.
func TestCommandServesBeforeNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	natsURL := "nats://" + ln.Addr().String() // nothing listens once closed
	ln.Close()
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	pr, pw := io.Pipe()
	var stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Command().Run(ctx, []string{"--listen", "127.0.0.1:0", "--nats-url", natsURL, "--kafka-brokers", ""}, pw, &stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the console's address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := strings.TrimSpace(strings.TrimPrefix(line, "console: "))
	if _, body := getPage(t, url); !strings.Contains(body, "NATS unavailable") {
		t.Errorf("overview with NATS down does not say so: %.300q", body)
	}
	testenv.Eventually(t, 15*time.Second, func() bool {
		return strings.Contains(stderr.String(), `level=WARN msg="broker unavailable" broker=nats`)
	}, "the WARN of NATS down")
	stop()
	if err := <-done; err != nil {
		t.Fatalf("command returned %v after its context ended", err)
	}
}
