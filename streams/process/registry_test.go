package process

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRegistryAlarmLogsOncePerMinuteWithTheCount: a signal the engine
// registry dead-letters is logged at WARN the first time for its
// (engine, reason), then at most once per alarmEvery with the number
// suppressed since, so a flood of forged signals is seen without
// flooding the log; another engine or reason is its own line.
func TestRegistryAlarmLogsOncePerMinuteWithTheCount(t *testing.T) {
	var buf bytes.Buffer
	a := newAlarm(slog.New(slog.NewTextHandler(&buf, nil)))
	t0 := time.Unix(1000, 0)
	a.note(t0, "forged", "unregistered", "d")
	a.note(t0.Add(time.Second), "forged", "unregistered", "d")
	a.note(t0.Add(2*time.Second), "forged", "unregistered", "d")
	a.note(t0.Add(3*time.Second), "other", "unregistered", "d")
	a.note(t0.Add(alarmEvery), "forged", "unregistered", "d")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"engine=forged", "engine=other", "engine=forged"} {
		if !strings.Contains(lines[i], "level=WARN") || !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q, want a WARN with %s", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], "suppressed=0") || !strings.Contains(lines[2], "suppressed=2") {
		t.Errorf("suppressed counts: %q, %q; want 0, then the 2 within the minute", lines[0], lines[2])
	}
}

// TestRegistryAlarmTableIsBounded: an attacker picks the engine ids, so
// the alarm's table starts over once it holds alarmMax of them.
func TestRegistryAlarmTableIsBounded(t *testing.T) {
	var buf bytes.Buffer
	a := newAlarm(slog.New(slog.NewTextHandler(&buf, nil)))
	t0 := time.Unix(1000, 0)
	for i := range 3 * alarmMax {
		a.note(t0, string(rune('a'+i%26))+strings.Repeat("x", i/26), "unregistered", "")
		if len(a.seen) > alarmMax {
			t.Fatalf("%d engines tracked after %d, want at most %d", len(a.seen), i+1, alarmMax)
		}
	}
}
