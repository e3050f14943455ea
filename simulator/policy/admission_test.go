package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// admissionFleet is two H100s of 2 batch slots each, which their signals
// report: each gets a concurrency limit of 3 (admit.Limits), the gateway
// admits 6 requests at once.
const admissionFleet = `{
  "name": "admission", "duration_s": 30, "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["a"], "clusters": [{"id": "a", "region": "a"}],
  "engines": [{"id": "e-0", "region": "a", "gpu": "h100", "max_seqs": 2},
              {"id": "e-1", "region": "a", "gpu": "h100", "max_seqs": 2}],
  "workload": {"kind": "generator", "rate_rps": 1}
}`

// admissionLoad is 40 requests 250 ms apart from 0.5 s (about 3 in flight
// on the 6 slots, none queued), then burst requests at once at 12 s, when
// the warm-up has ended.
func admissionLoad(burst int) *scenario.Stream {
	var reqs []workload.Request
	add := func(at time.Duration) {
		i := uint64(len(reqs))
		blocks := make([]uint64, 16)
		for k := range blocks {
			blocks[k] = i<<8 | uint64(k)
		}
		reqs = append(reqs, workload.Request{Arrival: at, Session: fmt.Sprint("s", i), Cluster: "a",
			Blocks: blocks, PromptTokens: 1000, OutputTokens: 50})
	}
	for k := range 40 {
		add(500*time.Millisecond + time.Duration(k)*250*time.Millisecond)
	}
	for range burst {
		add(12 * time.Second)
	}
	return &scenario.Stream{Requests: reqs, BlockTokens: 64, Span: 13 * time.Second}
}

// admissionProbe records what the switchyard gateway's admission did:
// which requests Pick held, how every request ended, and the failure
// reasons of the routing events it recorded, with when they were
// recorded.
type admissionProbe struct {
	*switchyard
	held     map[int]bool
	ok       map[int]time.Duration // completed request -> its TTFT
	reasons  map[schemas.FailureReason]int
	rejectIn []time.Duration // SHED_ADMISSION events: time since arrival
}

func (a *admissionProbe) Pick(now time.Duration, r *des.Request, exclude []int32) int {
	e := a.switchyard.Pick(now, r, exclude)
	if e == des.Held {
		a.held[r.Index] = true
	}
	return e
}

func (a *admissionProbe) Done(now time.Duration, r *des.Request, e int, o des.Outcome) {
	if o.OK {
		a.ok[r.Index] = o.TTFT
	}
	a.switchyard.Done(now, r, e, o)
}

func runAdmission(t *testing.T, burst int) (*admissionProbe, des.Metrics, *scenario.Stream) {
	t.Helper()
	sc, err := scenario.Parse([]byte(admissionFleet))
	if err != nil {
		t.Fatal(err)
	}
	wl := admissionLoad(burst)
	var a *admissionProbe
	res, err := des.Run(sc, wl, "switchyard", func(w *des.World) (des.Policy, error) {
		sy, err := newSwitchyard(w, 1)
		if err != nil {
			return nil, err
		}
		a = &admissionProbe{switchyard: sy, held: map[int]bool{}, ok: map[int]time.Duration{}, reasons: map[schemas.FailureReason]int{}}
		sy.observe = func(ev *schemas.RoutingEvent) {
			a.reasons[ev.GetFailureReason()]++
			if ev.GetFailureReason() == schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION {
				a.rejectIn = append(a.rejectIn, sy.now-(time.Duration(ev.GetEventTimeUnixMs()-simEpochMs)*time.Millisecond))
			}
		}
		return a, nil
	}, des.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if m.Completed+m.Shed+m.Failed != len(wl.Requests) || m.Failed != 0 {
		t.Fatalf("completed %d + shed %d + failed %d of %d", m.Completed, m.Shed, m.Failed, len(wl.Requests))
	}
	// Every admitted request released its slot when it ended.
	if n := a.gw[0].adm.q.InFlight(); n != 0 {
		t.Fatalf("%d admission slots still held after every request ended", n)
	}
	// Every held request was served (the wait was predicted to fit).
	for i := range a.held {
		if _, ok := a.ok[i]; !ok {
			t.Fatalf("request %d was queued and not served", i)
		}
	}
	return a, m, wl
}

// With the fleet full, the gateway's admission queues the requests
// beyond its engines' limits and serves them as slots free: none is shed,
// and each queued request reaches its engine only after a slot frees.
func TestSwitchyardQueuesWhenTheFleetIsFull(t *testing.T) {
	// 6 admitted at once, the other 3 queued: slots were freed at about
	// 3 a second over the last 8 s, so the predicted wait of the last,
	// about a second, is within any deadline from 2 s up.
	a, m, wl := runAdmission(t, 9)
	if m.Shed != 0 || a.reasons[schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION] != 0 {
		t.Fatalf("shed %d (%d by admission) of a burst the queue can absorb", m.Shed, a.reasons[schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION])
	}
	if len(a.held) != 3 {
		t.Fatalf("%d requests of the burst of 9 on 6 slots were queued, want 3", len(a.held))
	}
	// A queued request waits for a request of the burst to end: about a
	// prefill and 50 decode steps, far more than an unqueued TTFT.
	var unqueued time.Duration
	for i, ttft := range a.ok {
		if !a.held[i] && wl.Requests[i].Arrival == 12*time.Second {
			unqueued = max(unqueued, ttft)
		}
	}
	for i := range a.held {
		if a.ok[i] <= unqueued {
			t.Fatalf("queued request %d: TTFT %v, not above the burst's unqueued TTFTs (up to %v)", i, a.ok[i], unqueued)
		}
	}
}

// When the predicted wait for a slot exceeds the queue's deadline, the
// gateway rejects at once: the request is shed and recorded as the live
// gateway records it (SHED_ADMISSION), while what the queue holds is
// served.
func TestSwitchyardShedsWhenTheWaitExceedsTheDeadline(t *testing.T) {
	a, m, _ := runAdmission(t, 300)
	rej := a.reasons[schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION]
	if m.Shed < 200 || rej != m.Shed {
		t.Fatalf("shed %d, %d recorded SHED_ADMISSION, of a burst of 300 on 6 slots", m.Shed, rej)
	}
	if len(a.held) == 0 || len(a.held) > 60 {
		t.Fatalf("%d requests queued", len(a.held))
	}
	for _, d := range a.rejectIn {
		if d > time.Second {
			t.Fatalf("a request was rejected %v after its arrival, not at once", d)
		}
	}
}
