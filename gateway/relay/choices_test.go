package relay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestChoicesTBOT: a stream of n choices (the request's n) interleaves
// their chunks, each step's n chunks arriving together; TBOT is the time
// between one choice's tokens (10 ms a step here), TTFT the first
// chunk's, and without usage the output tokens are every choice's chunks.
func TestChoicesTBOT(t *testing.T) {
	const steps, step = 6, 10 * time.Millisecond
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var reads [][]byte
			for s := range steps {
				var sb strings.Builder
				for c := range n {
					fmt.Fprintf(&sb, "data: {\"choices\":[{\"index\":%d,\"delta\":{\"content\":\"t%d\"}}]}\n\n", c, s)
				}
				if s == steps-1 {
					sb.WriteString("data: [DONE]\n\n")
				}
				reads = append(reads, []byte(sb.String()))
			}
			start := time.Unix(1000, 0)
			now := start
			clock := func() time.Time { return now }
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			first := time.AfterFunc(time.Minute, func() {})
			defer first.Stop()
			st := Stream{Now: clock, Start: start, Status: 200, IdleTimeout: time.Minute, Cancel: cancel, FirstToken: first,
				Buf: make([]byte, BufSize), Choices: n}
			body := &clockReads{chunks: reads, advance: func() { now = now.Add(step) }}
			res := st.Relay(ctx, httptest.NewRecorder(), body, func(http.Header) {}, nil)
			if !res.Complete {
				t.Fatalf("not complete: %+v", res)
			}
			if res.TBOT != step || res.TTFT != step || res.Usage.OutputTokens != uint32(n*steps) {
				t.Fatalf("TBOT %v TTFT %v output %d, want %v %v %d", res.TBOT, res.TTFT, res.Usage.OutputTokens, step, step, n*steps)
			}
		})
	}
}

// clockReads returns one chunk per Read, advancing the clock first.
type clockReads struct {
	chunks  [][]byte
	advance func()
}

func (r *clockReads) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, fmt.Errorf("read past the end")
	}
	r.advance()
	n := copy(p, r.chunks[0])
	if n < len(r.chunks[0]) {
		r.chunks[0] = r.chunks[0][n:]
	} else {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}
