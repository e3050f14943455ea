package main

import (
	"testing"
	"time"

	enginemodel "github.com/switchyard-llm/switchyard/simulator/engine"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// TestFloorCreditsOnlyLeadingBlocksSeenBefore: a request is credited the
// leading blocks an earlier request led with, up to its first new block
// (a later block equal to an earlier one after a new one is not a cached
// prefix), and prefills the rest in MaxBatchedTokens chunks, one step
// each.
func TestFloorCreditsOnlyLeadingBlocksSeenBefore(t *testing.T) {
	p := enginemodel.Preset{PrefillTokensPerSec: 1000, StepBase: 10 * time.Millisecond, MaxBatchedTokens: 100}
	reqs := []workload.Request{
		{Blocks: []uint64{1, 2, 3}, PromptTokens: 300}, // nothing cached: 3 steps + 300 ms
		{Blocks: []uint64{1, 2, 4}, PromptTokens: 300}, // 200 cached: 1 step + 100 ms
		{Blocks: []uint64{5, 2, 3}, PromptTokens: 250}, // new first block: nothing cached
	}
	f := ttftFloor(reqs, 100, 0, p)
	if want := 200.0 / 850; f.cachedShare != want {
		t.Errorf("cached share %v, want %v", f.cachedShare, want)
	}
	if f.p50 != 280*time.Millisecond || f.p99 != 330*time.Millisecond {
		t.Errorf("p50 %v p99 %v, want 280ms (the third: 3 steps + 250 ms) and 330ms", f.p50, f.p99)
	}
	if got := prefillTime(0, p); got != 10*time.Millisecond {
		t.Errorf("all cached: %v, want one step", got)
	}
}
