package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// sessionHeader is the gateway's affinity header (gateway.HeaderSession);
// nginx's consistent hash keys on it too.
const sessionHeader = "X-Switchyard-Session"

// engineHeader names the engine that answered (gateway.HeaderEngine).
const engineHeader = "X-Switchyard-Engine"

// streamTimeout bounds a whole request once its first token came.
const streamTimeout = 5 * time.Minute

// chatBody renders r as a streaming chat completion: its prompt text shares
// a prefix with every request sharing its leading blocks.
func chatBody(w workloadFlags, r workload.Request, blockTokens int) ([]byte, error) {
	b, err := json.Marshal(map[string]any{
		"model":      w.model,
		"stream":     true,
		"max_tokens": min(r.OutputTokens, w.maxOutput),
		"user":       r.Session,
		"messages":   []map[string]string{{"role": "user", "content": workload.Prompt(r, blockTokens, w.maxPrompt)}},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding a request: %w", err)
	}
	return b, nil
}

// client sends requests and reads their streams.
type client struct {
	http             *http.Client
	firstTokenWithin time.Duration
}

func newClient(w workloadFlags) *client {
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, DisableCompression: true, ForceAttemptHTTP2: false}
	return &client{http: &http.Client{Transport: tr}, firstTokenWithin: w.timeout}
}

// result is one request's outcome; TTFT and E2E are set when it was
// served.
type result struct {
	Served    bool
	Failure   string
	TTFT, E2E time.Duration
	// Chunks is the number of data events before [DONE] (each carries
	// one token from enginesim and vLLM; the mean time between them is
	// the TBOT the SLO judges).
	Chunks int
	// Engine is the engine that answered, when the router names it
	// (Switchyard's X-Switchyard-Engine header).
	Engine string
}

// errNoFirstToken: the first token did not come within the timeout.
var errNoFirstToken = errors.New("no first token in time")

// send posts r to base and reads its stream to [DONE]. The first data
// event is the first token (enginesim sends the first token in the chunk
// that carries the assistant role).
func (c *client) send(ctx context.Context, base string, r request) result {
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	start := time.Now()
	var got atomic.Bool // the first token came
	timer := time.AfterFunc(c.firstTokenWithin, func() {
		if !got.Load() {
			cancel()
		}
	})
	defer timer.Stop()
	var ttft time.Duration
	chunks := 0
	failed := func(reason string) result {
		if (ttft == 0 || ttft > c.firstTokenWithin) && time.Since(start) >= c.firstTokenWithin {
			reason = errNoFirstToken.Error()
		}
		return result{Failure: reason}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(r.Body))
	if err != nil {
		return result{Failure: "building request"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sessionHeader, r.Session)
	resp, err := c.http.Do(req)
	if err != nil {
		return failed("transport error")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return failed(fmt.Sprintf("status %d", resp.StatusCode))
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		line, err := br.ReadString('\n')
		if data, ok := strings.CutPrefix(line, "data:"); ok {
			if strings.TrimSpace(data) == "[DONE]" {
				if ttft == 0 || ttft > c.firstTokenWithin {
					return failed("no token before [DONE]")
				}
				return result{Served: true, TTFT: ttft, E2E: time.Since(start), Chunks: chunks, Engine: resp.Header.Get(engineHeader)}
			}
			chunks++
			if ttft == 0 {
				ttft = time.Since(start)
				got.Store(true)
			}
		}
		if err != nil {
			return failed("stream ended before [DONE]")
		}
	}
}
