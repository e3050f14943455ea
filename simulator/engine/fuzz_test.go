package engine

import (
	"testing"
	"time"
)

// FuzzEngine drives a small engine with arbitrary submits, cancels and
// advances and checks its invariants: no panic, events in time order,
// gauges within capacity, and an idle, empty engine once drained.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 10, 20, 1, 3, 0, 2, 5, 0, 50, 3, 2, 9, 9, 9})
	f.Add([]byte{0, 255, 255, 0, 1, 1, 0, 0, 0, 2, 200, 3, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		p, _ := LookupPreset("l4")
		p.KVBlocks, p.MaxSeqs, p.MaxBatchedTokens, p.MaxModelLen = 64, 4, 64, 2048
		e, err := New(Config{Preset: p, Replicas: 2, MaxWaiting: 8, TokenEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		var now, last time.Duration
		check := func(evs []Event) {
			for _, ev := range evs {
				if ev.Time < last {
					t.Fatalf("event at %v after %v", ev.Time, last)
				}
				last = ev.Time
			}
			st := e.Stats()
			if st.KVBlocksUsed < 0 || st.KVBlocksUsed > st.KVBlocksTotal || st.Running > st.MaxSeqs || st.Waiting < 0 {
				t.Fatalf("stats out of range: %+v", st)
			}
		}
		for len(ops) >= 3 {
			op, a, b := ops[0], ops[1], ops[2]
			ops = ops[3:]
			switch op % 5 {
			case 0:
				var h []uint64
				for i := range int(a % 8) {
					h = append(h, uint64(b%3)<<8|uint64(i))
				}
				_ = e.Submit(now, Request{ID: uint64(b % 16), PromptTokens: int(a) * 4, OutputTokens: int(b % 40), PrefixHashes: h})
			case 1:
				e.Cancel(now, uint64(a%16))
			case 2:
				now += time.Duration(a) * time.Millisecond
				check(e.Advance(now))
			case 3:
				if next, ok := e.NextEvent(); ok {
					now = max(now, next)
					check(e.Advance(now))
				}
			case 4:
				if a == 0 {
					e.Reset(now)
				}
			}
		}
		for range 100000 {
			next, ok := e.NextEvent()
			if !ok {
				break
			}
			check(e.Advance(next))
		}
		check(e.Advance(e.Now()))
		st := e.Stats()
		if _, busy := e.NextEvent(); busy || st.Running != 0 || st.Waiting != 0 || st.KVBlocksUsed != 0 {
			t.Fatalf("not drained: %+v", st)
		}
		if st.Submitted != st.Finished+st.Canceled {
			t.Fatalf("submitted %d != finished %d + canceled %d", st.Submitted, st.Finished, st.Canceled)
		}
	})
}
