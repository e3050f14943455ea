package process

import (
	"log/slog"
	"time"

	"github.com/switchyard-llm/switchyard/fleet"
)

// alarm logs signals dead-lettered by the engine registry at WARN: the
// first of each (engine, reason) at once, then at most one line per
// alarmEvery with the count since the last, so an attacker's flood of
// signals is seen within a window without flooding the log.
type alarm struct {
	log  *slog.Logger
	seen map[alarmKey]*alarmState
}

type alarmKey struct{ engine, code string }

type alarmState struct {
	last       time.Time
	suppressed int
}

const (
	alarmEvery = time.Minute
	// alarmMax bounds the engines tracked (an attacker picks the ids);
	// the table starts over when full.
	alarmMax = 1024
)

func newAlarm(log *slog.Logger) *alarm { return &alarm{log: log, seen: map[alarmKey]*alarmState{}} }

// registryCode reports whether code is a registry dead-letter reason.
func registryCode(code string) bool {
	return code == fleet.ErrUnregistered.Error() || code == fleet.ErrEndpoint.Error()
}

// keyOf is a record key as a log value, at most 128 bytes.
func keyOf(k []byte) string {
	if len(k) > 128 {
		k = k[:128]
	}
	return string(k)
}

// note logs one registry dead-letter (engine id from the record key).
func (a *alarm) note(now time.Time, engine, code, detail string) {
	k := alarmKey{engine, code}
	st := a.seen[k]
	if st != nil && now.Sub(st.last) < alarmEvery {
		st.suppressed++
		return
	}
	if st == nil {
		if len(a.seen) >= alarmMax {
			clear(a.seen)
		}
		st = &alarmState{}
		a.seen[k] = st
	}
	a.log.Warn("signal for an engine outside the registry dead-lettered", "engine", engine, "reason", code,
		"detail", detail, "suppressed", st.suppressed)
	st.last, st.suppressed = now, 0
}
