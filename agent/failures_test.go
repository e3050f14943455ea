package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recorder is a slog.Handler keeping every record (with the attributes
// of With) in one shared log.
type recorder struct {
	log   *recordLog
	attrs []slog.Attr
}

type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func newRecorder() *recorder { return &recorder{log: &recordLog{}} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	rec = rec.Clone()
	rec.AddAttrs(r.attrs...)
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.recs = append(r.log.recs, rec)
	return nil
}
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{log: r.log, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}
func (r *recorder) WithGroup(string) slog.Handler { return r }

// lines renders each record as "LEVEL msg k=v ..." with the given keys.
func (r *recorder) lines(keys ...string) []string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	var out []string
	for _, rec := range r.log.recs {
		s := rec.Level.String() + " " + rec.Message
		rec.Attrs(func(a slog.Attr) bool {
			for _, k := range keys {
				if a.Key == k {
					s += fmt.Sprintf(" %s=%v", k, a.Value)
				}
			}
			return true
		})
		out = append(out, s)
	}
	return out
}

func TestFailureLogRateLimited(t *testing.T) {
	rec := newRecorder()
	f := failureLog{log: slog.New(rec), every: 30 * time.Second}
	t0 := time.Unix(1000, 0)
	err := errors.New("connection refused")
	for i := range 31 { // one failure a second for 31 s
		f.failure(t0.Add(time.Duration(i)*time.Second), err)
	}
	f.success(t0.Add(31 * time.Second))
	f.success(t0.Add(32 * time.Second))
	f.failure(t0.Add(33*time.Second), err)
	got := rec.lines("err", "failures", "suppressed", "failing_for")
	want := []string{
		"WARN scrape failed err=connection refused",
		"WARN scrape still failing err=connection refused failures=31 suppressed=29 failing_for=30s",
		"INFO scrape recovered failures=31 failing_for=31s",
		"WARN scrape failed err=connection refused",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log lines\n got %q\nwant %q", got, want)
	}
}

// TestScrapeErrorsCounted scrapes a dead and a live engine through the
// service's loop step and checks the per-engine error counter and the
// (rate-limited) log lines.
func TestScrapeErrorsCounted(t *testing.T) {
	live := newFakeEngine(t, current)
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	now := time.Unix(1000, 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // never used: no Run
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	s, err := New(cl, Config{
		Engines:    []Target{{ID: "down", URL: "http://127.0.0.1:1"}, {ID: "up", URL: live.srv.URL}},
		Registerer: reg, Logger: slog.New(rec),
		HTTPClient: &http.Client{Timeout: 5 * time.Second}, Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	down, up := s.newLoop(s.cfg.Engines[0]), s.newLoop(s.cfg.Engines[1])
	for range 3 {
		if sig, ok := s.scrapeOnce(context.Background(), down); !ok || sig.GetEngineId() != "down" {
			t.Fatalf("scrapeOnce(down) = %v, %v", sig, ok)
		}
		if _, ok := s.scrapeOnce(context.Background(), up); !ok {
			t.Fatal("scrapeOnce(up) not ok")
		}
		now = now.Add(2 * time.Second)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	errs := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "switchyard_agent_scrape_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			errs[label(m, "engine")] = m.GetCounter().GetValue()
		}
	}
	if errs["down"] != 3 || errs["up"] != 0 || len(errs) != 2 {
		t.Errorf("scrape errors by engine = %v, want down 3, up 0", errs)
	}
	if st := s.Stats(); st.Scrapes != 6 || st.ScrapeErrors != 3 {
		t.Errorf("stats %+v", st)
	}
	got := rec.lines("engine", "max_batch", "max_batch_source")
	want := []string{"WARN scrape failed engine=down", "INFO engine answered max_batch=64 max_batch_source=engine_metrics engine=up"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log lines\n got %q\nwant %q", got, want)
	}
}
