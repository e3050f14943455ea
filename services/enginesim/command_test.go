package enginesim

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/cli"
)

func TestCommandUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"--nope"}},
		{"bad gpu class", []string{"--gpu-class", "tpu"}},
		{"bad replicas", []string{"--replicas", "x"}},
		{"extra args", []string{"extra"}},
		{"bad metrics", []string{"--metrics", "prometheus"}},
		{"zero latency multiplier", []string{"--latency-multiplier", "0"}},
		{"negative latency multiplier", []string{"--latency-multiplier", "-2"}},
		{"negative max num seqs", []string{"--max-num-seqs", "-1"}},
		{"max num seqs over the step budget", []string{"--gpu-class", "l4", "--max-num-seqs", "1024"}},
		{"negative kv blocks", []string{"--kv-blocks", "-1"}},
		{"kv events endpoint not tcp", []string{"--kv-events-endpoint", "ipc:///tmp/kv"}},
		{"kv events replay without endpoint", []string{"--kv-events-replay-endpoint", "tcp://127.0.0.1:5558"}},
		{"kv events encoding", []string{"--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-encoding", "json"}},
		{"kv events buffer steps", []string{"--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-buffer-steps", "-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Command().Run(context.Background(), tc.args, io.Discard, io.Discard)
			if !errors.Is(err, cli.ErrUsage) {
				t.Fatalf("err = %v, want ErrUsage", err)
			}
		})
	}
	if c := Command(); c.Name != "enginesim" || c.Summary == "" {
		t.Fatalf("command %+v", c)
	}
}

func TestCommandRuns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Command().Run(ctx, []string{"--listen", "127.0.0.1:0", "--gpu-class", "l4", "--kafka-brokers", "x:1",
			"--max-num-seqs", "6", "--kv-blocks", "900", "--kv-events-endpoint", "tcp://127.0.0.1:0", "--kv-events-encoding", "array"}, io.Discard, &stderr)
	}()
	waitFor(t, func() bool {
		s := stderr.String()
		return strings.Contains(s, "enginesim listening") && strings.Contains(s, "publishing kv events")
	})
	if s := stderr.String(); !strings.Contains(s, "max_num_seqs=6 kv_blocks=900") || !strings.Contains(s, "encoding=array") {
		t.Errorf("--max-num-seqs 6 --kv-blocks 900 --kv-events-encoding array not in the engine it runs: %s", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// syncBuffer is a strings.Builder safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
