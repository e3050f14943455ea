package engineserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkStreamingRequest measures the CPU cost of one streamed chat
// completion of 64 tokens through the HTTP server and the real-time
// driver (time scale 1000, so the model's latency is negligible).
func BenchmarkStreamingRequest(b *testing.B) {
	for _, stream := range []bool{true, false} {
		name := "whole"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			s, err := New(Config{Listen: "127.0.0.1:0", TimeScale: 1000})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			<-s.Ready()
			defer func() {
				cancel()
				<-done
			}()
			url := "http://" + s.Addr() + "/v1/chat/completions"
			body := `{"model":"switchyard-sim-8b","max_tokens":64,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
				`,"messages":[{"role":"system","content":"` + strings.Repeat("you are helpful. ", 40) + `"},{"role":"user","content":"hello"}]}`
			client := &http.Client{}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				resp, err := client.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
