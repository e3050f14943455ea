package admit

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestLimitNeverBelowBatchSlots: an engine whose batch limit is known
// gets its slots plus a queue of a quarter of them (at least one), so
// the gateway never holds it below its free slots, whatever its latency
// learned; only the operator's Static cap goes below. With the batch
// limit unknown, the learned limit applies (capped by Static), or Static
// alone when not Adaptive.
func TestLimitNeverBelowBatchSlots(t *testing.T) {
	for _, tc := range []struct {
		name    string
		l       Limits
		slots   int64
		learned int
		want    int64
	}{
		{"1 slot", Limits{Adaptive: true}, 1, 2, 2},
		{"4 slots", Limits{Adaptive: true}, 4, 2, 5},
		{"7 slots: a quarter rounds down", Limits{Adaptive: true}, 7, 2, 8},
		{"8 slots", Limits{Adaptive: true}, 8, 2, 10},
		{"48 slots, learned far below", Limits{Adaptive: true}, 48, 3, 60},
		{"48 slots, learned above", Limits{Adaptive: true}, 48, 500, 60},
		{"not adaptive: the same", Limits{}, 48, 3, 60},
		{"static above: no effect", Limits{Adaptive: true, Static: 100}, 48, 3, 60},
		{"static below: the operator's cap", Limits{Adaptive: true, Static: 20}, 48, 3, 20},
		{"unknown slots: learned", Limits{Adaptive: true}, 0, 17, 17},
		{"unknown slots: learned, capped", Limits{Adaptive: true, Static: 10}, 0, 17, 10},
		{"unknown slots, not adaptive: static", Limits{Static: 10}, 0, 17, 10},
		{"unknown slots, nothing: no limit", Limits{}, 0, 17, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.l.Limit(tc.slots, tc.learned)
			if got != tc.want {
				t.Fatalf("Limit(%d, %d) = %d, want %d", tc.slots, tc.learned, got, tc.want)
			}
			if tc.slots > 0 && tc.l.Static == 0 && got <= tc.slots {
				t.Fatalf("limit %d holds the engine at or below its %d slots", got, tc.slots)
			}
		})
	}
}

func signal(maxBatch, ready uint32, running, waiting float64) *schemas.EngineSignal {
	return &schemas.EngineSignal{MaxBatch: maxBatch, ReadyReplicas: ready, RunningRequests: running,
		WaitingRequests: waiting, Health: schemas.Health_HEALTH_HEALTHY}
}

// TestBatchFromSignal: the batch limit is the advertised max_batch over
// the ready replicas; else, while requests wait in the engine's queue,
// the most it was seen running; else what was known; a down signal
// forgets it.
func TestBatchFromSignal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		known int64
		s     *schemas.EngineSignal
		down  bool
		want  int64
	}{
		{"max_batch over replicas", 0, signal(16, 2, 3, 0), false, 32},
		{"max_batch, no ready replica counted as one", 0, signal(16, 0, 3, 0), false, 16},
		{"max_batch wins over what was known", 100, signal(16, 1, 3, 0), false, 16},
		{"full: what ran", 0, signal(0, 1, 12, 1), false, 12},
		{"full: the most seen", 16, signal(0, 1, 12, 3), false, 16},
		{"full: more than known", 8, signal(0, 1, 12, 1), false, 12},
		{"not full: what was known", 8, signal(0, 1, 12, 0.5), false, 8},
		{"down: forgotten", 16, signal(16, 1, 3, 0), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BatchFromSignal(tc.known, tc.s, tc.down); got != tc.want {
				t.Fatalf("batch %d, want %d", got, tc.want)
			}
		})
	}
}

// TestEngineSlotsLargerOfSnapshotAndSignals: a plan may give an engine
// its GPU class peers' batch limit until its own shows; where the two
// disagree the larger wins, so neither holds the engine below the other.
func TestEngineSlotsLargerOfSnapshotAndSignals(t *testing.T) {
	e := NewEngine(Config{}, 0)
	if got := e.Slots(0); got != 0 {
		t.Fatalf("nothing known: %d slots, want 0", got)
	}
	if got := e.Slots(8); got != 8 {
		t.Fatalf("snapshot 8: %d slots", got)
	}
	e.NoteSignal(signal(16, 1, 0, 0), false)
	if got := e.Slots(8); got != 16 {
		t.Fatalf("snapshot 8, signals 16: %d slots, want 16", got)
	}
	if got := e.Slots(32); got != 32 {
		t.Fatalf("snapshot 32, signals 16: %d slots, want 32", got)
	}
	// An engine whose limit comes from a batch limit (its signals' or
	// the snapshot's) does not feed its fallback limiter; one without
	// does (a refusal backs it off).
	refuse := func(e *Engine, snapshot int) (before, after int) {
		before = e.Limiter().Limit()
		e.Observe(snapshot, Attempt{Started: time.Unix(1, 0), Refused: true})
		return before, e.Limiter().Update(time.Unix(2, 0))
	}
	if before, after := refuse(e, 0); after != before {
		t.Fatalf("a refusal moved the limiter of an engine whose signals give its batch limit: %d -> %d", before, after)
	}
	if before, after := refuse(NewEngine(Config{}, 0), 8); after != before {
		t.Fatalf("a refusal moved the limiter of an engine the snapshot gives 8 slots: %d -> %d", before, after)
	}
	if before, after := refuse(NewEngine(Config{}, 0), 0); after >= before {
		t.Fatalf("a refusal left the limiter of an engine with no batch limit at %d (was %d)", after, before)
	}
}

// TestEngineProbesPastAHeldBatchLimit: when the limit binds (requests
// wait at the gateway and the limit's worth is in flight) while the
// engine's latest signal shows none waiting in its own queue, its batch
// limit is higher than known: each new signal raises it by a quarter of
// the known one, up to four times it; a signal with requests waiting
// ends the probe (its signals give the real limit from then on).
func TestEngineProbesPastAHeldBatchLimit(t *testing.T) {
	l := Limits{Adaptive: true}
	now := time.Unix(0, 0)
	e := NewEngine(Config{}, 0)
	e.NoteSignal(signal(8, 1, 8, 0), false) // 8 slots, none waiting
	limit, slots := e.Limit(l, 0, Load{InFlight: 10, Queued: 0}, now, true)
	if limit != 10 || slots != 8 {
		t.Fatalf("nothing queued: limit %d, slots %d, want 10 and 8", limit, slots)
	}
	if limit, _ = e.Limit(l, 0, Load{InFlight: 9, Queued: 5}, now, true); limit != 10 {
		t.Fatalf("below its limit: limit %d, want 10 (no probe)", limit)
	}
	var got []int64
	for range 16 {
		limit, slots = e.Limit(l, 0, Load{InFlight: limit, Queued: 5}, now, true)
		got = append(got, slots)
		// A tick without a new signal does not probe again.
		if _, again := e.Limit(l, 0, Load{InFlight: limit, Queued: 5}, now, true); again != slots {
			t.Fatalf("probed twice on one signal: %d -> %d slots", slots, again)
		}
		e.NoteSignal(signal(8, 1, 8, 0), false)
	}
	want := []int64{10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 32, 32, 32, 32}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("slots over the probes %v, want %v", got, want)
		}
	}
	held, _ := e.Held(slots, limit, limit)
	if held {
		t.Fatal("held while its limit is above its batch limit")
	}
	e.NoteSignal(signal(8, 1, 8, 2), false) // requests wait: the probe ends
	if _, slots = e.Limit(l, 0, Load{InFlight: limit, Queued: 5}, now, true); slots != 8 {
		t.Fatalf("after a signal with requests waiting: %d slots, want 8", slots)
	}
}

// TestEngineHeldBelowBatchLimit: an engine is held when a Static cap
// keeps its limit below its batch limit, the limit is full and its last
// signal shows no queue of its own; Held reports the change once.
func TestEngineHeldBelowBatchLimit(t *testing.T) {
	e := NewEngine(Config{}, 0)
	e.NoteSignal(signal(8, 1, 6, 0), false)
	for _, tc := range []struct {
		name                   string
		slots, limit, inFlight int64
		held, changed          bool
	}{
		{"capped at 6 of 8, full", 8, 6, 6, true, true},
		{"still", 8, 6, 6, true, false},
		{"not full", 8, 6, 5, false, true},
		{"limit at the batch limit", 8, 8, 8, false, false},
		{"unknown batch limit", 0, 6, 6, false, false},
	} {
		held, changed := e.Held(tc.slots, tc.limit, tc.inFlight)
		if held != tc.held || changed != tc.changed {
			t.Fatalf("%s: held %v changed %v, want %v %v", tc.name, held, changed, tc.held, tc.changed)
		}
	}
	e.NoteSignal(signal(8, 1, 8, 3), false) // its own queue: not held by us
	if held, _ := e.Held(8, 6, 6); held {
		t.Fatal("held while requests wait in the engine's own queue")
	}
}

// TestCapacityCountsAvailableEngines: the queue's capacity is the sum of
// the available engines' limits, all engines' when none is available.
func TestCapacityCountsAvailableEngines(t *testing.T) {
	var c Capacity
	c.Add(10, true)
	c.Add(5, false)
	c.Add(7, true)
	if got := c.Total(); got != 17 {
		t.Fatalf("capacity %d, want 17 (the available engines')", got)
	}
	var down Capacity
	down.Add(10, false)
	down.Add(5, false)
	if got := down.Total(); got != 15 {
		t.Fatalf("none available: capacity %d, want 15 (every engine's)", got)
	}
}
