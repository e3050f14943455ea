package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	enginemodel "github.com/switchyard-llm/switchyard/simulator/engine"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// floorCmd prints the TTFT no router can beat on the replayed requests:
// each request alone on an idle engine of the fastest class in the
// fleet, with every block an earlier request sent already cached there
// (one engine holding the whole history). The median of a run can only
// come near it; a goal below it cannot be met by routing.
func floorCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	var wf workloadFlags
	wf.register(fs)
	class := fs.String("gpu-class", "h100", "the fleet's fastest engine class (an enginesim preset)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := enginemodel.LookupPreset(*class)
	if err != nil {
		return err
	}
	reqs, blockTokens, err := readTrace(wf)
	if err != nil {
		return err
	}
	f := ttftFloor(reqs, blockTokens, wf.maxPrompt, p)
	fmt.Fprintf(w, "%d requests, %s idle with every earlier prefix cached: %.1f%% of prompt tokens cached; TTFT p50 %.3f s, p90 %.3f s, p99 %.3f s\n",
		len(reqs), p.Name, 100*f.cachedShare, f.p50.Seconds(), f.p90.Seconds(), f.p99.Seconds())
	return nil
}

// floor is the TTFT floor of a request sequence.
type floor struct {
	cachedShare   float64 // of prompt tokens
	p50, p90, p99 time.Duration
}

// ttftFloor computes, for each request in order, the tokens of its
// prompt (cut to maxPrompt) covered by leading blocks some earlier
// request also led with, and the time preset p takes to prefill the
// rest alone: chunks of MaxBatchedTokens, a step each (StepBase plus the
// chunk at PrefillTokensPerSec); the first token comes with the last
// prefill step.
func ttftFloor(reqs []workload.Request, blockTokens, maxPrompt int, p enginemodel.Preset) floor {
	seen := map[uint64]struct{}{} // chained hashes of leading block runs
	var cached, total float64
	ttfts := make([]time.Duration, 0, len(reqs))
	for _, r := range reqs {
		tokens := r.PromptTokens
		if maxPrompt > 0 && tokens > maxPrompt {
			tokens = maxPrompt
		}
		hit, h := 0, uint64(0)
		for k, id := range r.Blocks {
			end := min((k+1)*blockTokens, tokens)
			if k*blockTokens >= tokens {
				break
			}
			h = h*1099511628211 ^ (id + 1)
			// h covers blocks 0..k, so it was seen only if the whole
			// prefix up to k was: the first new block ends the hits.
			if _, ok := seen[h]; ok {
				hit = end
			}
			seen[h] = struct{}{}
		}
		cached += float64(hit)
		total += float64(tokens)
		ttfts = append(ttfts, prefillTime(tokens-hit, p))
	}
	slices.Sort(ttfts)
	q := func(x float64) time.Duration {
		if len(ttfts) == 0 {
			return 0
		}
		return ttfts[max(0, int(math.Ceil(x*float64(len(ttfts))))-1)]
	}
	f := floor{p50: q(0.5), p90: q(0.9), p99: q(0.99)}
	if total > 0 {
		f.cachedShare = cached / total
	}
	return f
}

// prefillTime is how long p takes, alone, to prefill n uncached tokens
// and produce the first token (one step when all are cached).
func prefillTime(n int, p enginemodel.Preset) time.Duration {
	steps := max(1, (n+p.MaxBatchedTokens-1)/p.MaxBatchedTokens)
	return time.Duration(steps)*p.StepBase + time.Duration(float64(n)/p.PrefillTokensPerSec*float64(time.Second))
}
