package stall

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// scripted is a clock whose every Sleep returns the given lateness after
// its period; when the script runs out it cancels the run.
type scripted struct {
	now    time.Time
	late   []time.Duration
	cancel context.CancelFunc
}

func (c *scripted) Now() time.Time { return c.now }

func (c *scripted) Sleep(ctx context.Context, d time.Duration) error {
	if len(c.late) == 0 {
		c.cancel()
		return ctx.Err()
	}
	c.now = c.now.Add(d + c.late[0])
	c.late = c.late[1:]
	return nil
}

func run(t *testing.T, late []time.Duration, opts ...Opt) Stats {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	clk := &scripted{now: time.UnixMilli(1_000_000), late: late, cancel: cancel}
	p, err := New(append([]Opt{WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run: %v, want nil once ctx is done", err)
	}
	return p.Stats()
}

func TestProbeCountsLateWakeupsFromTheThreshold(t *testing.T) {
	ms := time.Millisecond
	s := run(t, []time.Duration{0, 2 * ms, 60 * ms, 120 * ms, 49*ms + 900*time.Microsecond, 50 * ms, 300 * ms},
		Period(10*ms), Threshold(50*ms), Worst(2))
	if s.Wakeups != 7 {
		t.Errorf("wakeups %d, want 7", s.Wakeups)
	}
	if s.Stalls != 4 || s.StalledMs != 530 {
		t.Errorf("stalls %d totalling %v ms, want 4 (60, 120, 50, 300 ms; 49.9 is below the threshold) totalling 530", s.Stalls, s.StalledMs)
	}
	if s.MaxMs != 300 {
		t.Errorf("max %v ms, want 300", s.MaxMs)
	}
	if len(s.Worst) != 2 || s.Worst[0].Ms != 300 || s.Worst[1].Ms != 120 {
		t.Fatalf("worst %+v, want the 300 and 120 ms stalls, longest first", s.Worst)
	}
	// The 300 ms stall was due after six periods and 281.9 ms of
	// earlier lateness (2+60+120+49.9+50) plus its own period.
	if want := int64(1_000_000 + 7*10 + 281); s.Worst[0].AtUnixMs != want {
		t.Errorf("longest stall due at %d, want %d", s.Worst[0].AtUnixMs, want)
	}
	if s.PeriodMs != 10 || s.ThresholdMs != 50 {
		t.Errorf("settings %v/%v ms, want 10/50", s.PeriodMs, s.ThresholdMs)
	}
}

func TestProbeWithoutLatenessSeesNoStall(t *testing.T) {
	s := run(t, make([]time.Duration, 100))
	if s.Wakeups != 100 || s.Stalls != 0 || s.MaxMs != 0 || s.Worst != nil {
		t.Fatalf("stats %+v, want 100 wake-ups and no stall", s)
	}
}

func TestStatsIsACopy(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	clk := &scripted{now: time.Unix(0, 0), late: []time.Duration{time.Second}, cancel: cancel}
	p, err := New(WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	s.Worst[0].Ms = 0
	if got := p.Stats().Worst[0].Ms; got != 1000 {
		t.Fatalf("after changing a returned slice the probe says %v ms, want 1000", got)
	}
}

func TestNewRejectsBadSettings(t *testing.T) {
	for name, opt := range map[string]Opt{
		"zero period":        Period(0),
		"negative threshold": Threshold(-time.Millisecond),
		"nil clock":          WithClock(nil),
		"negative worst":     Worst(-1),
		"huge worst":         Worst(1001),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(opt); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

// TestRealProbeRunsAndStops runs a probe on the wall clock: it wakes and
// returns nil once cancelled (the scripted clock tests the arithmetic).
func TestRealProbeRunsAndStops(t *testing.T) {
	p, err := New(Period(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Wakeups < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the probe did not wake 3 times in 10 s")
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v, want nil", err)
	}
}

func TestGCPauseMaxAfterACollection(t *testing.T) {
	runtime.GC()
	d := GCPauseMax()
	if d <= 0 || d > 10*time.Second {
		t.Fatalf("GCPauseMax %v after runtime.GC, want a positive bound under 10 s", d)
	}
}
