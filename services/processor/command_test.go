package processor

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams/process"
)

func TestCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "10s", "--slide", "3s"},
		{"--allowed-lateness", "-1s"},
		{"--no-such-flag"},
		{"--nats-url", "nats://127.0.0.1:4222"}, // the processor uses no NATS
		{"--kafka-brokers", " "},
		{"--mode", "sharded"},
	} {
		err := Command().Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

func TestCommandRuns(t *testing.T) {
	kc := testenv.Kafka(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- Command().Run(ctx, []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--metrics-listen", "127.0.0.1:0", "--window", "2s", "--slide", "1s"}, &bytes.Buffer{}, &stderr)
	}()
	cl := testenv.Client(t, kc, kgo.MetadataMinAge(10*time.Millisecond))
	testenv.Eventually(t, 10*time.Second, func() bool {
		ctx, c := context.WithTimeout(context.Background(), time.Second)
		defer c()
		topics, err := kadmTopics(ctx, cl)
		return err == nil && topics[process.CheckpointTopic("")]
	}, "processor created its topics")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
}

func kadmTopics(ctx context.Context, cl *kgo.Client) (map[string]bool, error) {
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, n := range td.Names() {
		out[n] = true
	}
	return out, nil
}
