package estimate

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

func TestFitCache(t *testing.T) {
	calls := 0
	var mu sync.Mutex
	counting := func(obs []Obs, gpu string, k Kind) *schemas.LatencyProfile {
		mu.Lock()
		calls++
		mu.Unlock()
		return ConvexFit(obs, gpu, k)
	}
	c := NewFitCache(counting)
	inputs := []struct {
		obs []Obs
		gpu string
		k   Kind
	}{
		{nil, "h100", TTFT},
		{[]Obs{{0.3, 80, 30}, {0.7, 140, 12}}, "h100", TTFT},
		{[]Obs{{0.3, 80, 30}, {0.7, 140, 12}}, "h100", TBOT},
		{[]Obs{{0.3, 80, 30}, {0.7, 140, 12}}, "l4", TTFT},
		{[]Obs{{0.3, 80, 30}, {0.7, 140, 12.000000001}}, "h100", TTFT},
	}
	for round := 0; round < 2; round++ {
		for i, in := range inputs {
			got, err := Marshal(envelope(c.Fit(in.obs, in.gpu, in.k)))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := Marshal(envelope(ConvexFit(in.obs, in.gpu, in.k)))
			if string(got) != string(want) {
				t.Errorf("round %d input %d: cached fit differs from a fresh fit", round, i)
			}
		}
	}
	if calls != len(inputs) {
		t.Errorf("%d fits for %d distinct inputs", calls, len(inputs))
	}
	if h, m := c.Stats(); h != uint64(len(inputs)) || m != uint64(len(inputs)) {
		t.Errorf("hits, misses = %d, %d", h, m)
	}
	// A returned profile is the caller's: changing it does not change the cache.
	p := c.Fit(inputs[1].obs, "h100", TTFT)
	p.Points[0].LatencyMs = -1
	if q := c.Fit(inputs[1].obs, "h100", TTFT); q.Points[0].LatencyMs < 0 {
		t.Error("cache entry changed through a returned profile")
	}
	// Entries survive one Rotate and are dropped at the second unless used.
	c.Rotate()
	c.Fit(inputs[1].obs, "h100", TTFT) // kept alive
	c.Rotate()
	if n := c.Len(); n != 1 {
		t.Errorf("%d entries after two rotations, want 1", n)
	}
	before := calls
	c.Fit(inputs[1].obs, "h100", TTFT)
	c.Fit(inputs[2].obs, "h100", TBOT)
	if calls != before+1 {
		t.Errorf("%d fits, want 1 (only the dropped entry)", calls-before)
	}
}

func TestFitCacheConcurrent(t *testing.T) {
	c := NewFitCache(nil)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 50; i++ {
				obs := []Obs{{0.1 * float64(i%5), 50 + float64(i%5), 25}}
				p := c.Fit(obs, fmt.Sprint("gpu", i%3), TTFT)
				if !proto.Equal(p, ConvexFit(obs, fmt.Sprint("gpu", i%3), TTFT)) {
					t.Error("cached fit differs")
					return
				}
			}
		})
		if g%2 == 1 {
			c.Rotate()
		}
	}
	wg.Wait()
}

func envelope(p *schemas.LatencyProfile) *schemas.Estimate {
	return &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{EngineId: "e", TtftProfile: p}}}
}
