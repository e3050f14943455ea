package main

import (
	"fmt"
	"os"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// request is one trace request ready to send.
type request struct {
	// Arrival is the time since the first request, after rescaling.
	Arrival time.Duration
	Session string
	Body    []byte // the JSON chat completion
	// PromptTokens and OutputTokens are the trace's, cut to the
	// workload's limits (what the body asks for).
	PromptTokens, OutputTokens int
}

// requests are the first n requests of a trace with their natural
// arrivals (ticks spread, the first at 0).
type requests struct {
	reqs []request
	// models are the model each request names, in the order of reqs.
	models []string
}

// loadRequests reads w.trace with the project's reader, gives Mooncake's
// rows the sessions the simulator infers, spreads each tick's batch over
// the tick and renders the first w.n requests, each naming w.model or,
// with modelOf, its conversation's model modelOf(session).
func loadRequests(w workloadFlags, modelOf func(session string) string) (requests, error) {
	all, blockTokens, err := readTrace(w)
	if err != nil {
		return requests{}, err
	}
	out := requests{reqs: make([]request, len(all)), models: make([]string, len(all))}
	for i, r := range all {
		wm := w
		if modelOf != nil {
			wm.model = modelOf(r.Session)
		}
		body, err := chatBody(wm, r, blockTokens)
		if err != nil {
			return requests{}, err
		}
		out.reqs[i] = request{Arrival: r.Arrival - all[0].Arrival, Session: r.Session, Body: body,
			PromptTokens: cut(r.PromptTokens, w.maxPrompt), OutputTokens: cut(r.OutputTokens, w.maxOutput)}
		out.models[i] = wm.model
	}
	return out, nil
}

// readTrace returns the first w.n requests of w.trace as loadRequests
// renders them, and the trace's block size in tokens.
func readTrace(w workloadFlags) ([]workload.Request, int, error) {
	f, err := os.Open(w.trace)
	if err != nil {
		return nil, 0, fmt.Errorf("opening trace: %w", err)
	}
	defer f.Close()
	all, rep, err := workload.ReadTrace(f, workload.TraceOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("reading trace %s: %w", w.trace, err)
	}
	workload.InferSessions(all)
	workload.SpreadTicks(all, rep.Tick)
	if w.n < 2 || w.n > len(all) {
		return nil, 0, fmt.Errorf("-n %d: want 2 to the trace's %d requests", w.n, len(all))
	}
	return all[:w.n], rep.BlockTokens, nil
}

// rescaled returns the requests with arrivals stretched or compressed so
// that they come at rps on average over the span.
func (r requests) rescaled(rps float64) []request {
	out := make([]request, len(r.reqs))
	copy(out, r.reqs)
	span := r.reqs[len(r.reqs)-1].Arrival
	if span <= 0 {
		return out
	}
	natural := float64(len(r.reqs)-1) / span.Seconds()
	f := natural / rps
	for i := range out {
		out[i].Arrival = time.Duration(float64(out[i].Arrival) * f)
	}
	return out
}

// cut is n at most limit; a limit of 0 or less is none.
func cut(n, limit int) int {
	if limit > 0 {
		return min(n, limit)
	}
	return n
}
