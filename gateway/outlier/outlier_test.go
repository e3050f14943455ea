package outlier

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/pick"
)

func states(n int) []*pick.State {
	p := pick.NewPool()
	out := make([]*pick.State, n)
	for i := range out {
		out[i] = p.State(string(rune('a' + i)))
	}
	return out
}

func TestEjectionBackoffAndShare(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := New(Config{Consecutive: 3, BaseEjection: time.Second, MaxEjection: 4 * time.Second, MaxEjectedShare: 0.5})
	d.SetClusterSize(4)
	st := states(4)
	for i := 0; i < 2; i++ {
		if d.Failure(st[0], t0) {
			t.Fatal("ejected before 3 consecutive failures")
		}
	}
	d.Success(st[0], 0) // resets the run
	for i := 0; i < 2; i++ {
		d.Failure(st[0], t0)
	}
	if !d.Failure(st[0], t0) || !st[0].Ejected() {
		t.Fatal("not ejected after 3 consecutive failures")
	}
	// Back-off: 1s, then 2s, then 4s (cap).
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		now := t0
		if d.Tick(now.Add(want - time.Millisecond)); !st[0].Ejected() {
			t.Fatalf("returned before %v", want)
		}
		t0 = t0.Add(want)
		if d.Tick(t0) != 1 || st[0].Ejected() {
			t.Fatalf("not returned after %v", want)
		}
		for i := 0; i < 3; i++ {
			d.Failure(st[0], t0)
		}
		if !st[0].Ejected() {
			t.Fatal("not ejected again")
		}
	}
	// Share cap: at most 2 of 4.
	for _, s := range st[1:] {
		for i := 0; i < 3; i++ {
			d.Failure(s, t0)
		}
	}
	if d.Ejected() != 2 {
		t.Fatalf("%d ejected, cap is 2 of 4", d.Ejected())
	}
}

func TestPenaltyDecays(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := New(Config{Consecutive: 100, HalfLife: time.Second})
	st := states(1)[0]
	d.Tick(t0)
	d.Failure(st, t0)
	if p := st.Penalty(); p < 0.49 || p > 0.51 {
		t.Fatalf("penalty after one failure %v, want 0.5", p)
	}
	d.Tick(t0.Add(time.Second)) // penalty 1 -> 0.5: share 1-1/1.5
	if p := st.Penalty(); p < 0.33 || p > 0.34 {
		t.Fatalf("penalty after a half-life %v, want 0.333", p)
	}
	d.Tick(t0.Add(20 * time.Second))
	if st.Penalty() != 0 {
		t.Fatalf("penalty did not decay to 0: %v", st.Penalty())
	}
	// Latency spikes.
	for i := 0; i < 10; i++ {
		d.Success(st, 100*time.Millisecond)
	}
	if !d.Success(st, time.Second) || st.Penalty() == 0 {
		t.Fatal("10x TTFT not counted as a spike")
	}
}

func TestSaturatedPenalizesWithoutEjecting(t *testing.T) {
	p := pick.NewPool()
	tb, err := p.Build([]pick.Spec{{ID: "a", URL: "http://a", Weight: 1}, {ID: "b", URL: "http://b", Weight: 1}}, pick.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := tb.Engine(0).State
	d := New(Config{Consecutive: 2})
	d.SetClusterSize(2)
	for range 10 {
		d.Saturated(st)
	}
	if st.Ejected() || d.Ejected() != 0 {
		t.Fatal("saturation ejected the engine")
	}
	if p := st.Penalty(); p < 0.9 {
		t.Fatalf("penalty %v after 10 saturations, want > 0.9", p)
	}
	now := time.Now()
	d.Tick(now)
	d.Tick(now.Add(time.Minute))
	if p := st.Penalty(); p > 0.5 {
		t.Fatalf("penalty %v did not decay", p)
	}
}

// TestRestartedEndsEjectionAndBackoff: an engine that failed while it
// was down (ejected with a back-off doubled by each ejection, penalized)
// and is seen up again serves at once: its ejection ends, its penalty is
// cleared, and its next ejection starts again at BaseEjection.
func TestRestartedEndsEjectionAndBackoff(t *testing.T) {
	now := time.Unix(1000, 0)
	d := New(Config{Consecutive: 1, BaseEjection: time.Second, MaxEjection: time.Minute, MaxEjectedShare: 1})
	d.SetClusterSize(2)
	st := states(2)
	for range 4 { // ejections of 1, 2, 4 and 8 s while the engine is down
		if !d.Failure(st[0], now) {
			t.Fatal("not ejected")
		}
		d.Tick(now.Add(10 * time.Second))
		now = now.Add(10 * time.Second)
	}
	if !d.Failure(st[0], now) || !st[0].Ejected() || st[0].Penalty() == 0 {
		t.Fatal("not ejected and penalized before the restart")
	}
	d.Restarted(st[0])
	if st[0].Ejected() || st[0].Penalty() != 0 || d.Ejected() != 0 {
		t.Fatalf("after Restarted: ejected %v, penalty %v, engines ejected %d", st[0].Ejected(), st[0].Penalty(), d.Ejected())
	}
	if !d.Failure(st[0], now) {
		t.Fatal("not ejected after the restart")
	}
	if d.Tick(now.Add(time.Second)); st[0].Ejected() {
		t.Fatal("the first ejection after a restart lasted more than BaseEjection")
	}
}
