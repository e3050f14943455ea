package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-llm/switchyard/gateway/shed"
)

// TestTracing: with an SDK tracer provider the gateway records a server
// span and a client span per attempt, and the engine receives the client
// span's W3C trace context.
func TestTracing(t *testing.T) { forEachServer(t, testTracing) }

func testTracing(t *testing.T, server string) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	e := newFakeEngine(t, "a")
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...), TracerProvider(tp))
	if s, _, body := post(t, context.Background(), base, chatBody(true, "x"), nil); s != 200 {
		t.Fatalf("%d %s", s, body)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want server + upstream", len(spans))
	}
	var upstream sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "switchyard.gateway.upstream" {
			upstream = s
		}
	}
	if upstream == nil {
		t.Fatal("no upstream span")
	}
	var inbound sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindServer {
			inbound = s
		}
	}
	if inbound == nil {
		t.Fatal("no server span")
	}
	attrs := map[string]string{}
	for _, kv := range append(inbound.Attributes(), upstream.Attributes()...) {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, want := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.request.model": "sim",
		"gen_ai.usage.input_tokens": "11", "gen_ai.usage.output_tokens": "5",
		"switchyard.engine": "a", "switchyard.decision_reason": "fallback", "switchyard.attempts": "1",
		"server.address": "127.0.0.1",
	} {
		if attrs[k] != want {
			t.Errorf("span attribute %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}
	tp0 := e.header(0).Get("traceparent")
	want := "00-" + upstream.SpanContext().TraceID().String() + "-" + upstream.SpanContext().SpanID().String()
	if !strings.HasPrefix(tp0, want) {
		t.Fatalf("traceparent %q, want prefix %q", tp0, want)
	}
}

func FuzzParsePriority(f *testing.F) {
	for _, s := range []string{"", "low", "HIGH", "2", "-1", " normal "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := shed.ParsePriority(s)
		if err == nil && p > shed.High {
			t.Fatalf("%q parsed to %d", s, p)
		}
	})
}

func FuzzParseEngines(f *testing.F) {
	f.Add("a=http://127.0.0.1:1,b=https://x/y")
	f.Add("=,=")
	f.Add("a=http://[::1]:80")
	f.Fuzz(func(t *testing.T, s string) {
		es, err := ParseEngines(s)
		if err != nil {
			return
		}
		for _, e := range es {
			if e.ID == "" || checkEndpoint(e.URL) != nil {
				t.Fatalf("accepted %+v from %q", e, s)
			}
		}
	})
}

// TestUpstreamSpanMarksAnUnreadableRefusal: an engine's 4xx whose body
// breaks off before its declared length fails the attempt (502 to the
// client), and the attempt's client span says so, as for every other
// failed attempt.
func TestUpstreamSpanMarksAnUnreadableRefusal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"error\":")
			}()
		}
	}()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	_, base := startGateway(t, Engines(StaticEngine{ID: "a", URL: "http://" + ln.Addr().String()}), TracerProvider(tp), HealthInterval(-1))
	if s, _, body := post(t, context.Background(), base, chatBody(true, "x"), nil); s != http.StatusBadGateway {
		t.Fatalf("%d %s, want 502", s, body)
	}
	var failed int
	for _, s := range rec.Ended() {
		if s.Name() == "switchyard.gateway.upstream" {
			if s.Status().Code != codes.Error {
				t.Errorf("upstream span status %v, want Error", s.Status())
			}
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no upstream span")
	}
}
