package engine

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

type arrival struct {
	at  time.Duration
	req Request
}

// drive submits every arrival at its time, then runs the engine dry, and
// returns every event (copied) and the results by request id.
func drive(t testing.TB, e *Engine, arrivals []arrival) ([]Event, map[uint64]Result) {
	t.Helper()
	var evs []Event
	res := map[uint64]Result{}
	collect := func(batch []Event) {
		for _, ev := range batch {
			evs = append(evs, ev)
			if ev.Kind == EventFinished {
				res[ev.ID] = ev.Result
			}
		}
	}
	for _, a := range arrivals {
		collect(e.Advance(a.at))
		if err := e.Submit(a.at, a.req); err != nil {
			t.Fatalf("submit %d: %v", a.req.ID, err)
		}
	}
	for {
		next, ok := e.NextEvent()
		if !ok {
			break
		}
		collect(e.Advance(next))
	}
	collect(e.Advance(e.Now()))
	return evs, res
}

func newEngine(t testing.TB, class string, mutate func(*Config)) *Engine {
	t.Helper()
	p, err := LookupPreset(class)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Preset: p}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// poisson returns n requests arriving at rate per second (seeded).
func poisson(n int, rate float64, seed uint64, prompt, output int) []arrival {
	rng := rand.New(rand.NewPCG(seed, 1))
	var at time.Duration
	out := make([]arrival, n)
	for i := range out {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		out[i] = arrival{at: at, req: Request{ID: uint64(i + 1), PromptTokens: prompt, OutputTokens: output}}
	}
	return out
}

func meanTTFT(res map[uint64]Result) time.Duration {
	var sum time.Duration
	for _, r := range res {
		sum += r.TTFT()
	}
	return sum / time.Duration(len(res))
}

func TestSingleRequestTiming(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			e := newEngine(t, p.Name, nil)
			const prompt, output = 1000, 10
			_, res := drive(t, e, []arrival{{at: time.Second, req: Request{ID: 7, PromptTokens: prompt, OutputTokens: output}}})
			r := res[7]
			wantTTFT := p.StepBase + p.StepPerSeq + time.Duration(float64(prompt)*1e9/p.PrefillTokensPerSec)
			if r.TTFT() != wantTTFT {
				t.Errorf("TTFT = %v, want %v", r.TTFT(), wantTTFT)
			}
			// Decode step k (k = 1..9) attends over prompt+k tokens.
			var want time.Duration
			for k := 1; k < output; k++ {
				want += p.StepBase + p.StepPerSeq + p.StepPerContextToken*time.Duration(prompt+k)
			}
			if got := r.Finish - r.FirstToken; got != want {
				t.Errorf("decode time = %v, want %v", got, want)
			}
			if r.Arrival != time.Second || r.OutputTokens != output || r.PromptTokens != prompt || r.CachedTokens != 0 {
				t.Errorf("result = %+v", r)
			}
			st := e.Stats()
			if st.Running != 0 || st.Waiting != 0 || st.KVBlocksUsed != 0 || st.Finished != 1 ||
				st.PromptTokens != prompt || st.GenerationTokens != output || st.Steps != output {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

// TestLatencyMultiplierScalesSteps: an engine with multiplier m takes m
// times as long for every step, prefill and decode, while reporting its
// class's preset.
func TestLatencyMultiplierScalesSteps(t *testing.T) {
	const prompt, output, m = 1000, 10, 6
	req := []arrival{{at: time.Second, req: Request{ID: 7, PromptTokens: prompt, OutputTokens: output}}}
	_, base := drive(t, newEngine(t, "h100", nil), req)
	slow := newEngine(t, "h100", func(c *Config) { c.LatencyMultiplier = m })
	_, res := drive(t, slow, req)
	b, r := base[7], res[7]
	if r.TTFT() != m*b.TTFT() {
		t.Errorf("TTFT = %v, want %d x %v", r.TTFT(), m, b.TTFT())
	}
	if got, want := r.Finish-r.FirstToken, m*(b.Finish-b.FirstToken); got != want {
		t.Errorf("decode time = %v, want %v", got, want)
	}
	if p, _ := LookupPreset("h100"); slow.Preset() != p {
		t.Errorf("Preset() = %+v, want the class's own", slow.Preset())
	}
}

func TestQueueingGrowsTTFT(t *testing.T) {
	// 400 requests of 2000 prompt tokens on an l4 (3500 prefill tok/s, so
	// ~1.75 req/s of prefill capacity) at increasing rates.
	rates := []float64{0.2, 1, 1.6, 3}
	var prev time.Duration
	for _, rate := range rates {
		e := newEngine(t, "l4", nil)
		_, res := drive(t, e, poisson(400, rate, 1, 2000, 32))
		got := meanTTFT(res)
		t.Logf("rate %.1f/s: mean TTFT %v", rate, got)
		if got <= prev {
			t.Errorf("rate %.1f/s: mean TTFT %v not above %v at the lower rate", rate, got, prev)
		}
		prev = got
	}
}

func TestPrefixReuseReducesTTFT(t *testing.T) {
	p, _ := LookupPreset("h100")
	hashes := make([]uint64, 4000/p.BlockSize)
	for i := range hashes {
		hashes[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	e := newEngine(t, "h100", nil)
	first := Request{ID: 1, PromptTokens: 4000, OutputTokens: 8, PrefixHashes: hashes}
	// Same first 3000 tokens, different tail.
	second := Request{ID: 2, PromptTokens: 4000, OutputTokens: 8, PrefixHashes: append(append([]uint64{}, hashes[:3000/p.BlockSize]...), 42, 43)}
	_, res := drive(t, e, []arrival{{0, first}, {10 * time.Second, second}})
	a, b := res[1], res[2]
	shared := 3000 / p.BlockSize * p.BlockSize
	if a.CachedTokens != 0 || b.CachedTokens != shared {
		t.Fatalf("cached tokens = %d, %d; want 0, %d", a.CachedTokens, b.CachedTokens, shared)
	}
	if b.TTFT() >= a.TTFT() {
		t.Errorf("TTFT with cached prefix %v, want below %v", b.TTFT(), a.TTFT())
	}
	st := e.Stats()
	if st.PrefixQueryTokens != 8000 || st.PrefixHitTokens != int64(shared) {
		t.Errorf("prefix queries/hits = %d/%d, want 8000/%d", st.PrefixQueryTokens, st.PrefixHitTokens, shared)
	}
	if got := e.PrefixMatch(hashes, 4000); got != 4000-p.BlockSize {
		// All 250 blocks cached now (the first request published them);
		// the last block is always recomputed.
		t.Errorf("PrefixMatch = %d, want %d", got, 4000-p.BlockSize)
	}
}

func TestBatchGrowthIncreasesITL(t *testing.T) {
	var prev time.Duration
	for _, batch := range []int{1, 8, 64, 200} {
		e := newEngine(t, "h100", nil)
		var arr []arrival
		for i := range batch {
			arr = append(arr, arrival{0, Request{ID: uint64(i), PromptTokens: 500, OutputTokens: 100}})
		}
		_, res := drive(t, e, arr)
		var sum time.Duration
		for _, r := range res {
			sum += r.MeanITL()
		}
		itl := sum / time.Duration(len(res))
		t.Logf("batch %d: mean ITL %v", batch, itl)
		if itl <= prev {
			t.Errorf("batch %d: ITL %v not above %v", batch, itl, prev)
		}
		prev = itl
	}
}

func TestDeterminism(t *testing.T) {
	run := func() ([]Event, Stats) {
		e := newEngine(t, "a100", func(c *Config) { c.Replicas = 3; c.TokenEvents = true })
		arr := poisson(2000, 30, 9, 800, 40)
		for i := range arr {
			arr[i].req.PrefixHashes = []uint64{uint64(i % 7), uint64(i%7)<<8 | 1, uint64(i % 5)}
		}
		evs, _ := drive(t, e, arr)
		return evs, e.Stats()
	}
	e1, s1 := run()
	e2, s2 := run()
	if !reflect.DeepEqual(e1, e2) || s1 != s2 {
		t.Fatal("two runs of the same workload differ")
	}
	for i := 1; i < len(e1); i++ {
		if e1[i].Time < e1[i-1].Time {
			t.Fatalf("event %d at %v before event %d at %v", i, e1[i].Time, i-1, e1[i-1].Time)
		}
	}
}

func TestTokenEvents(t *testing.T) {
	e := newEngine(t, "h100", func(c *Config) { c.TokenEvents = true })
	var arr []arrival
	for i := range 5 {
		arr = append(arr, arrival{time.Duration(i) * 3 * time.Millisecond, Request{ID: uint64(i), PromptTokens: 100 + i, OutputTokens: 1 + 7*i}})
	}
	evs, res := drive(t, e, arr)
	tokens := map[uint64]int{}
	last := map[uint64]time.Duration{}
	for _, ev := range evs {
		if ev.Tokens != tokens[ev.ID]+1 && !(ev.Kind == EventFinished && ev.Tokens == 1 && tokens[ev.ID] == 1) {
			t.Fatalf("request %d: %v event with %d tokens after %d", ev.ID, ev.Kind, ev.Tokens, tokens[ev.ID])
		}
		if ev.Time < last[ev.ID] {
			t.Fatalf("request %d: time went back", ev.ID)
		}
		tokens[ev.ID], last[ev.ID] = ev.Tokens, ev.Time
	}
	for id, r := range res {
		if tokens[id] != r.OutputTokens {
			t.Errorf("request %d: %d tokens, want %d", id, tokens[id], r.OutputTokens)
		}
	}
}

func TestCancelFreesSlot(t *testing.T) {
	e := newEngine(t, "l4", func(c *Config) { c.Preset.MaxSeqs = 2 })
	for i := range 3 {
		if err := e.Submit(0, Request{ID: uint64(i), PromptTokens: 50, OutputTokens: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	e.Advance(time.Second)
	if st := e.Stats(); st.Running != 2 || st.Waiting != 1 {
		t.Fatalf("running/waiting = %d/%d, want 2/1", st.Running, st.Waiting)
	}
	if !e.Cancel(time.Second, 0) {
		t.Fatal("cancel of a running request reported absent")
	}
	if e.Cancel(time.Second, 99) {
		t.Fatal("cancel of an unknown request reported present")
	}
	e.Advance(2 * time.Second)
	if st := e.Stats(); st.Running != 2 || st.Waiting != 0 || st.Canceled != 1 {
		t.Fatalf("after cancel running/waiting/canceled = %d/%d/%d, want 2/0/1", st.Running, st.Waiting, st.Canceled)
	}
	// Cancel the waiting and prefilling kinds too, then drain.
	if err := e.Submit(2*time.Second, Request{ID: 5, PromptTokens: 50, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	e.Cancel(2*time.Second, 5)
	e.Cancel(2*time.Second, 1)
	e.Cancel(2*time.Second, 2)
	for {
		next, ok := e.NextEvent()
		if !ok {
			break
		}
		for _, ev := range e.Advance(next) {
			t.Errorf("event after cancel: %+v", ev)
		}
	}
	if st := e.Stats(); st.Running != 0 || st.Waiting != 0 || st.KVBlocksUsed != 0 {
		t.Fatalf("after cancelling all: %+v", st)
	}
}

func TestKVCacheCapacity(t *testing.T) {
	// 100 blocks of 16 tokens; requests need 20 blocks each, so at most 5
	// run even though MaxSeqs is 48.
	e := newEngine(t, "l4", func(c *Config) { c.Preset.KVBlocks = 100 })
	maxUsage := 0.0
	var arr []arrival
	for i := range 40 {
		h := make([]uint64, 300/16)
		for j := range h {
			h[j] = uint64(i)<<32 | uint64(j)
		}
		arr = append(arr, arrival{time.Duration(i) * time.Millisecond, Request{ID: uint64(i), PromptTokens: 300, OutputTokens: 20, PrefixHashes: h}})
	}
	for _, a := range arr {
		e.Advance(a.at)
		if err := e.Submit(a.at, a.req); err != nil {
			t.Fatal(err)
		}
	}
	for {
		st := e.Stats()
		if st.Running > 5 {
			t.Fatalf("%d running with room for 5", st.Running)
		}
		maxUsage = max(maxUsage, st.KVUsage())
		next, ok := e.NextEvent()
		if !ok {
			break
		}
		e.Advance(next)
	}
	st := e.Stats()
	if maxUsage > 1 || maxUsage < 0.9 || st.KVBlocksUsed != 0 || st.Finished != 40 {
		t.Fatalf("max usage %v, final %+v", maxUsage, st)
	}
	// The cache kept only the most recent prefixes (LRU).
	if got := e.PrefixMatch(arr[39].req.PrefixHashes, 300); got == 0 {
		t.Error("latest prefix evicted")
	}
	if got := e.PrefixMatch(arr[0].req.PrefixHashes, 300); got != 0 {
		t.Errorf("oldest prefix still cached (%d tokens)", got)
	}
}

func TestReplicasShareLoad(t *testing.T) {
	e := newEngine(t, "l4", func(c *Config) { c.Replicas = 4 })
	_, res := drive(t, e, poisson(200, 20, 3, 200, 50))
	count := map[int]int{}
	for _, r := range res {
		count[r.Replica]++
	}
	for i := range 4 {
		if count[i] < 25 {
			t.Errorf("replica %d served %d of 200", i, count[i])
		}
	}
	if st := e.Stats(); st.MaxSeqs != 4*48 || st.KVBlocksTotal != 4*2400 {
		t.Errorf("stats capacity = %d seqs, %d blocks", st.MaxSeqs, st.KVBlocksTotal)
	}
}

func TestSubmitErrors(t *testing.T) {
	e := newEngine(t, "l4", func(c *Config) { c.MaxWaiting = 1; c.Preset.MaxSeqs = 1 })
	if err := e.Submit(0, Request{ID: 1, PromptTokens: 10, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if err := e.Submit(0, Request{ID: 2, PromptTokens: 10, OutputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"zero prompt", Request{ID: 3, OutputTokens: 1}, ErrInvalidRequest},
		{"negative output", Request{ID: 3, PromptTokens: 1, OutputTokens: -1}, ErrInvalidRequest},
		{"beyond context", Request{ID: 3, PromptTokens: 16384, OutputTokens: 1}, ErrTooLong},
		{"huge", Request{ID: 3, PromptTokens: 1 << 62, OutputTokens: 1 << 62}, ErrTooLong},
		{"duplicate", Request{ID: 1, PromptTokens: 1, OutputTokens: 1}, ErrDuplicateID},
		{"queue full", Request{ID: 3, PromptTokens: 1, OutputTokens: 1}, ErrQueueFull},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.Submit(0, tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if st := e.Stats(); st.Rejected != int64(len(tests)) || st.Submitted != 2 {
		t.Errorf("rejected/submitted = %d/%d", st.Rejected, st.Submitted)
	}
}

func TestConfigValidation(t *testing.T) {
	good, _ := LookupPreset("h100")
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"zero prefill", func(c *Config) { c.Preset.PrefillTokensPerSec = 0 }},
		{"nan prefill", func(c *Config) { c.Preset.PrefillTokensPerSec = nanValue() }},
		{"zero step", func(c *Config) { c.Preset.StepBase = 0 }},
		{"negative per seq", func(c *Config) { c.Preset.StepPerSeq = -1 }},
		{"negative per ctx", func(c *Config) { c.Preset.StepPerContextToken = -1 }},
		{"zero seqs", func(c *Config) { c.Preset.MaxSeqs = 0 }},
		{"small budget", func(c *Config) { c.Preset.MaxBatchedTokens = c.Preset.MaxSeqs }},
		{"zero block", func(c *Config) { c.Preset.BlockSize = 0 }},
		{"zero blocks", func(c *Config) { c.Preset.KVBlocks = 0 }},
		{"short context", func(c *Config) { c.Preset.MaxModelLen = 1 }},
		{"negative replicas", func(c *Config) { c.Replicas = -1 }},
		{"negative waiting", func(c *Config) { c.MaxWaiting = -1 }},
		{"negative latency multiplier", func(c *Config) { c.LatencyMultiplier = -1 }},
		{"nan latency multiplier", func(c *Config) { c.LatencyMultiplier = nanValue() }},
		{"huge latency multiplier", func(c *Config) { c.LatencyMultiplier = 1001 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Preset: good}
			tc.mutate(&cfg)
			if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
	if _, err := LookupPreset("tpu"); !errors.Is(err, ErrUnknownPreset) {
		t.Fatalf("err = %v, want ErrUnknownPreset", err)
	}
}

func nanValue() float64 { zero := 0.0; return zero / zero }

func TestResetDropsEverything(t *testing.T) {
	e := newEngine(t, "l4", func(c *Config) { c.Preset.MaxSeqs = 2 })
	for i := range 4 {
		if err := e.Submit(0, Request{ID: uint64(10 - i), PromptTokens: 64, OutputTokens: 100, PrefixHashes: []uint64{1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
	}
	e.Advance(time.Second)
	ids := e.Reset(time.Second)
	if !reflect.DeepEqual(ids, []uint64{7, 8, 9, 10}) {
		t.Fatalf("reset dropped %v", ids)
	}
	if _, busy := e.NextEvent(); busy {
		t.Fatal("busy after reset")
	}
	if got := e.PrefixMatch([]uint64{1, 2, 3}, 64); got != 0 {
		t.Fatalf("cache kept %d tokens", got)
	}
	_, res := drive(t, e, []arrival{{2 * time.Second, Request{ID: 1, PromptTokens: 64, OutputTokens: 2}}})
	if r := res[1]; r.Arrival != 2*time.Second || r.Admitted != 2*time.Second || r.QueueTime() != 0 {
		t.Fatalf("after reset: %+v", r)
	}
	if st := e.Stats(); st.Canceled != 4 || st.Finished != 1 || st.Running != 0 || st.KVBlocksUsed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestChunkedPrefill(t *testing.T) {
	p, _ := LookupPreset("h100")
	e := newEngine(t, "h100", func(c *Config) { c.TokenEvents = true })
	// A decoding request, then a long prompt that needs three chunks.
	long := 2*p.MaxBatchedTokens + 1000
	evs, res := drive(t, e, []arrival{
		{0, Request{ID: 1, PromptTokens: 100, OutputTokens: 40}},
		{100 * time.Millisecond, Request{ID: 2, PromptTokens: long, OutputTokens: 2}},
	})
	r := res[2]
	// Chunks of budget-1 tokens while request 1 decodes (it takes one
	// token of each step's budget).
	if got, want := r.TTFT(), time.Duration(float64(long)*1e9/p.PrefillTokensPerSec); got < want || got > want+5*p.StepBase {
		t.Errorf("TTFT %v, want just above %v", got, want)
	}
	// Request 1's tokens during the chunks are spaced by whole chunks.
	var gaps []time.Duration
	var last time.Duration
	for _, ev := range evs {
		if ev.ID == 1 && ev.Kind != EventFinished && ev.Kind != EventFirstToken {
			if last > 0 && ev.Time > 100*time.Millisecond {
				gaps = append(gaps, ev.Time-last)
			}
			last = ev.Time
		}
	}
	chunk := time.Duration(float64(p.MaxBatchedTokens-1) * 1e9 / p.PrefillTokensPerSec)
	stalls := 0
	for _, g := range gaps {
		if g > chunk {
			stalls++
		}
	}
	if stalls != 2 {
		t.Errorf("%d decode stalls longer than a full chunk (%v), want 2: %v", stalls, chunk, gaps)
	}
}
