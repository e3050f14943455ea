package agent

import (
	"log/slog"
	"time"
)

// failureLog rate-limits one engine's scrape-failure log lines: the first
// failure of a run of failures is logged at once, then at most one line
// per every with the number of failures not logged since, and the first
// success after failures logs a recovery line. Not safe for concurrent use
// (each engine's loop owns one).
type failureLog struct {
	log   *slog.Logger
	every time.Duration

	failing    bool
	since      time.Time // first failure of the current run
	lastLogged time.Time
	failures   int // in the current run
	suppressed int // since lastLogged
}

// failure records a failed scrape at now.
func (f *failureLog) failure(now time.Time, err error) {
	f.failures++
	if !f.failing {
		f.failing, f.since, f.lastLogged, f.suppressed = true, now, now, 0
		f.log.Warn("scrape failed", "err", err)
		return
	}
	if now.Sub(f.lastLogged) < f.every {
		f.suppressed++
		return
	}
	f.log.Warn("scrape still failing", "err", err, "failures", f.failures,
		"suppressed", f.suppressed, "failing_for", now.Sub(f.since).Round(time.Millisecond))
	f.lastLogged, f.suppressed = now, 0
}

// success records a good scrape at now.
func (f *failureLog) success(now time.Time) {
	if !f.failing {
		return
	}
	f.log.Info("scrape recovered", "failures", f.failures, "failing_for", now.Sub(f.since).Round(time.Millisecond))
	*f = failureLog{log: f.log, every: f.every}
}
