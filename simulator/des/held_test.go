package des_test

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/des"
)

const twoEngines = `{
  "name": "held", "duration_s": 20, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a"], "intra_region_rtt_ms": 4,
  "clusters": [{"id": "a", "region": "a"}],
  "engines": [{"id": "a-0", "region": "a", "gpu": "h100"}, {"id": "a-1", "region": "a", "gpu": "h100"}],
  "workload": {"kind": "generator", "rate_rps": 4}
}`

// holder holds every request's first attempt. With fromDone false it
// decides at the first tick holdFor after the arrival: even requests go
// to engine Index%2, odd ones are rejected. With fromDone true it is a
// gateway of one slot: a request is placed at once when nothing is in
// flight, else held until a Done frees the slot, then dispatched.
type holder struct {
	w        *des.World
	fromDone bool
	holdFor  time.Duration

	held                 []*des.Request
	inflight, maxFlight  int
	dispatchedAt         map[int]time.Duration // request -> virtual time of its Dispatch
	rejected             map[int]bool
	ttft                 map[int]time.Duration
	completed, doneCalls int
}

func newHolder(w *des.World, fromDone bool) *holder {
	return &holder{w: w, fromDone: fromDone, holdFor: 500 * time.Millisecond,
		dispatchedAt: map[int]time.Duration{}, rejected: map[int]bool{}, ttft: map[int]time.Duration{}}
}

func (h *holder) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	if r.Attempt > 1 {
		return -1
	}
	if h.fromDone && h.inflight == 0 {
		h.start()
		return 0
	}
	h.held = append(h.held, r)
	return des.Held
}

func (h *holder) start() {
	h.inflight++
	h.maxFlight = max(h.maxFlight, h.inflight)
}

func (h *holder) Done(now time.Duration, r *des.Request, _ int, o des.Outcome) {
	h.doneCalls++
	h.inflight--
	if o.OK {
		h.completed++
		h.ttft[r.Index] = o.TTFT
	}
	if h.fromDone && len(h.held) > 0 {
		next := h.held[0]
		h.held = h.held[1:]
		h.dispatchedAt[next.Index] = now
		h.start()
		h.w.Dispatch(next, 1)
	}
}

func (h *holder) Tick(now time.Duration) {
	if h.fromDone {
		return
	}
	kept := h.held[:0]
	for _, r := range h.held {
		switch {
		case now-r.W.Arrival < h.holdFor:
			kept = append(kept, r)
		case r.Index%2 == 0:
			h.dispatchedAt[r.Index] = now
			h.start()
			h.w.Dispatch(r, r.Index%len(h.w.Engines))
		default:
			h.rejected[r.Index] = true
			h.w.Reject(r)
		}
	}
	h.held = kept
}

// A held request is dispatched when the policy dispatches it, at that
// virtual time (from Tick or from another request's Done), and shed when
// the policy rejects it; it is neither shed nor placed at Pick.
func TestHeldRequestIsDispatchedOrRejectedLater(t *testing.T) {
	for _, fromDone := range []bool{false, true} {
		name := map[bool]string{false: "from tick", true: "from done"}[fromDone]
		t.Run(name, func(t *testing.T) {
			sc, wl := load(t, twoEngines)
			var h *holder
			res, err := des.Run(sc, wl, "holder", func(w *des.World) (des.Policy, error) {
				h = newHolder(w, fromDone)
				return h, nil
			}, des.Options{})
			if err != nil {
				t.Fatal(err)
			}
			m := res.Metrics
			n := len(wl.Requests)
			if n < 40 {
				t.Fatalf("only %d requests", n)
			}
			if m.Failed != 0 || m.Completed+m.Shed != n {
				t.Fatalf("completed %d + shed %d, failed %d, of %d", m.Completed, m.Shed, m.Failed, n)
			}
			if m.Shed != len(h.rejected) {
				t.Fatalf("shed %d, rejected %d", m.Shed, len(h.rejected))
			}
			if m.Completed != h.completed || h.completed != h.doneCalls {
				t.Fatalf("completed %d, policy saw %d completions in %d Done calls", m.Completed, h.completed, h.doneCalls)
			}
			if fromDone {
				if m.Shed != 0 || h.maxFlight != 1 || len(h.dispatchedAt) < n/2 {
					t.Fatalf("one slot: shed %d, at most %d in flight, %d of %d dispatched from Done", m.Shed, h.maxFlight, len(h.dispatchedAt), n)
				}
			} else if len(h.rejected) < n/3 || len(h.dispatchedAt) < n/3 {
				t.Fatalf("%d rejected, %d dispatched of %d", len(h.rejected), len(h.dispatchedAt), n)
			}
			rtt := 4 * time.Millisecond
			for i, at := range h.dispatchedAt {
				waited := at - wl.Requests[i].Arrival
				if waited <= 0 && !fromDone {
					t.Fatalf("request %d dispatched %v after its arrival", i, waited)
				}
				// Its attempt leaves the gateway at the Dispatch, not
				// at the Pick.
				if got := h.ttft[i]; got < waited+rtt {
					t.Fatalf("request %d: TTFT %v, but it was held %v (RTT %v)", i, got, waited, rtt)
				}
			}
		})
	}
}

// badHolder rejects the same held request twice.
type badHolder struct {
	w    *des.World
	held *des.Request
}

func (b *badHolder) Pick(_ time.Duration, r *des.Request, _ []int32) int {
	if b.held == nil {
		b.held = r
		return des.Held
	}
	return 0
}
func (b *badHolder) Done(time.Duration, *des.Request, int, des.Outcome) {}
func (b *badHolder) Tick(time.Duration) {
	if b.held != nil {
		b.w.Reject(b.held)
	}
}

// Rejecting a request that is no longer held breaks the Policy contract:
// Run says so instead of counting it twice.
func TestRejectOfARequestNotHeldIsAnError(t *testing.T) {
	sc, wl := load(t, twoEngines)
	_, err := des.Run(sc, wl, "bad", func(w *des.World) (des.Policy, error) { return &badHolder{w: w}, nil }, des.Options{})
	if !errors.Is(err, des.ErrNotHeld) {
		t.Fatalf("Run: %v, want ErrNotHeld", err)
	}
}
