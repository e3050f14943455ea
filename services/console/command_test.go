package console

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf("v%d", v)) || !strings.Contains(string(body), "region-a") {
		t.Fatalf("GET %s: status %d, snapshot v%d or region-a missing", url, resp.StatusCode, v)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("command returned %v after its context ended", err)
	}
}
