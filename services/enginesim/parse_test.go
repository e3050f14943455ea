package enginesim

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/cli"
)

func TestTextBlockHashesSharePrefixes(t *testing.T) {
	a := strings.Repeat("a", 64*10)
	b := a[:64*6] + strings.Repeat("b", 64*4)
	ha, hb := textBlockHashes(a, 16, 100), textBlockHashes(b, 16, 100)
	if len(ha) != 10 || len(hb) != 10 {
		t.Fatalf("lengths %d %d, want 10", len(ha), len(hb))
	}
	for i := range 10 {
		if (ha[i] == hb[i]) != (i < 6) {
			t.Errorf("block %d: equal=%v, want %v", i, ha[i] == hb[i], i < 6)
		}
	}
	if got := textBlockHashes(a, 16, 3); len(got) != 3 {
		t.Errorf("limit ignored: %d", len(got))
	}
	ids, err := idBlockHashes([]uint64{5, 6}, 512, 16, 1000)
	if err != nil || len(ids) != 64 {
		t.Fatalf("id hashes: %d, %v", len(ids), err)
	}
	ids2, _ := idBlockHashes([]uint64{5, 7}, 512, 16, 1000)
	if ids[31] != ids2[31] || ids[32] == ids2[32] {
		t.Error("id hashes do not follow the shared prefix")
	}
}

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
		done <- Command().Run(ctx, []string{"--listen", "127.0.0.1:0", "--gpu-class", "l4", "--kafka-brokers", "x:1"}, io.Discard, &stderr)
	}()
	waitFor(t, func() bool { return strings.Contains(stderr.String(), "enginesim listening") })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`), true)
	f.Add([]byte(`{"model":"m","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true}}`), false)
	f.Add([]byte(`{"model":"m","prompt":"x","switchyard":{"prompt_tokens":10,"hash_ids":[1,2],"hash_block_tokens":16}}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`), true)
	lim := limits{blockSize: 16, maxModelLen: 4096, defaultMaxTokens: 64}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		p, err := parseRequest(body, chat, lim)
		if err != nil {
			if err.status < 400 || err.status > 499 || err.message == "" {
				t.Fatalf("error %+v", err)
			}
			return
		}
		if p.model == "" || p.promptTokens < 1 || p.maxTokens < 1 || p.promptTokens+p.maxTokens > lim.maxModelLen ||
			len(p.hashes) > lim.maxModelLen/lim.blockSize {
			t.Fatalf("accepted invalid %+v", p)
		}
	})
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
