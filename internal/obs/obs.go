// Package obs holds the observability wiring services share: serving a
// Prometheus registry over HTTP (with /health), registering collectors
// without losing errors, and OpenTelemetry export of spans and metrics
// configured by the standard OTEL_* variables (StartTelemetry).
package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness reports whether a service can do its job (its brokers are
// reachable, say), with one line of detail per dependency.
// *brokerstate.Tracker is one.
type Readiness interface {
	Health() (ready bool, detail string)
}

// ServeMetrics serves g on addr at /metrics, /health (200 "ok" while the
// process serves: a liveness probe, never failed by a dependency, followed
// by the detail of each ready) and /ready (200 when every ready is, 503
// otherwise, with the same detail), until the returned stop is called or
// ctx is done. It returns the address it listens on.
func ServeMetrics(ctx context.Context, addr string, g prometheus.Gatherer, ready ...Readiness) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, detail := readiness(ready)
		_, _ = io.WriteString(w, "ok\n"+detail)
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, detail := readiness(ready)
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready\n"+detail)
			return
		}
		_, _ = io.WriteString(w, "ready\n"+detail)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	return ln.Addr().String(), func() { stop(); _ = srv.Close() }, nil
}

// readiness folds rs: ready when all are, their details concatenated.
func readiness(rs []Readiness) (bool, string) {
	ok, detail := true, ""
	for _, r := range rs {
		rok, d := r.Health()
		ok = ok && rok
		detail += d
	}
	return ok, detail
}

// Register registers c with reg, or returns the collector of the same
// description already registered there (so several components, or several
// instances of one, can share a Registerer). Any other error is returned
// with c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("registering metrics: %w", err)
	}
	return c, nil
}
