package tenant

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/obs"
)

// DefaultReloadInterval is how often File.Run checks the file.
const DefaultReloadInterval = 2 * time.Second

// File is a tenant file, reloaded by Run when its content changes; a
// file that stops parsing keeps the last good set (logged and counted).
// Lookup is safe for concurrent use.
type File struct {
	path    string
	log     *slog.Logger
	cur     atomic.Pointer[Set]
	sum     [sha256.Size]byte
	reloads *prometheus.CounterVec // result: ok, error
}

// Open reads and parses the tenant file at path; reg receives
// switchyard_gateway_tenant_reloads_total{result} (nil: none).
func Open(path string, log *slog.Logger, reg prometheus.Registerer) (*File, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reloads, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "tenant_reloads_total",
		Help: "Reloads of the tenant (API key) file after a change, by result: ok, error (the last good file stays).",
	}, []string{"result"}))
	if err != nil {
		return nil, fmt.Errorf("tenant metrics: %w", err)
	}
	f := &File{path: path, log: log.With("component", "tenant", "path", path), reloads: reloads}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading tenant file: %w", err)
	}
	s, err := Parse(b, nil)
	if err != nil {
		return nil, fmt.Errorf("tenant file %s: %w", path, err)
	}
	f.cur.Store(s)
	f.sum = sha256.Sum256(b)
	return f, nil
}

// Lookup returns the tenant of an API key, or nil.
func (f *File) Lookup(key string) *Tenant { return f.cur.Load().Lookup(key) }

// Set returns the current set.
func (f *File) Set() *Set { return f.cur.Load() }

// Reload reads the file and, when its content changed, parses and swaps
// it in; it reports whether it did. On an error the last good set stays.
func (f *File) Reload() (bool, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.reloads.WithLabelValues("error").Inc()
		return false, fmt.Errorf("reading tenant file: %w", err)
	}
	sum := sha256.Sum256(b)
	if bytes.Equal(sum[:], f.sum[:]) {
		return false, nil
	}
	s, err := Parse(b, f.cur.Load())
	if err != nil {
		f.sum = sum // do not retry (and log) the same bad content
		f.reloads.WithLabelValues("error").Inc()
		return false, fmt.Errorf("tenant file %s: %w", f.path, err)
	}
	f.sum = sum
	f.cur.Store(s)
	f.reloads.WithLabelValues("ok").Inc()
	return true, nil
}

// Run checks the file every interval (<= 0: DefaultReloadInterval) until
// ctx ends. Call it from one goroutine.
func (f *File) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			switch changed, err := f.Reload(); {
			case err != nil:
				f.log.Warn("tenant file not reloaded; keeping the last good one", "err", err)
			case changed:
				f.log.Info("tenant file reloaded", "tenants", len(f.Set().Tenants()))
			}
		}
	}
}
