package estimate

import (
	"strings"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Prior is what the processor assumes about a GPU class before it has
// data: latency at zero load, the shape of its growth with utilization,
// and the sustainable request rate of one replica.
type Prior struct {
	// TTFTBaseMs and TBOTBaseMs are latencies at zero utilization.
	TTFTBaseMs, TBOTBaseMs float64
	// ReplicaRPS is the sustainable requests/s of one replica.
	ReplicaRPS float64
	// MaxBatch is the concurrent-request limit of one replica, used when
	// the engine does not advertise one.
	MaxBatch float64
	// TokensPerRequest converts request capacity to token capacity when
	// the window has no finished requests.
	TokensPerRequest float64
	// PrefillTokensPerS is the rate at which one replica computes prompt
	// tokens that miss the prefix cache, and DecodeTokensPerS the rate at
	// which it generates output tokens, each as if it did nothing else, at
	// the batch sizes that keep TBOT within a typical 100-ms SLO. One
	// replica's work in a second is miss/PrefillTokensPerS +
	// generated/DecodeTokensPerS; 1 is the prior's sustainable load.
	PrefillTokensPerS, DecodeTokensPerS float64
}

// Priors per GPU class (gpuFamily); unknown classes use "default".
func priorFor(gpuClass string) Prior {
	switch gpuFamily(gpuClass) {
	case "h100":
		return Prior{TTFTBaseMs: 40, TBOTBaseMs: 12, ReplicaRPS: 16, MaxBatch: 256, TokensPerRequest: 256,
			PrefillTokensPerS: 20000, DecodeTokensPerS: 6000}
	case "a100":
		return Prior{TTFTBaseMs: 70, TBOTBaseMs: 20, ReplicaRPS: 9, MaxBatch: 128, TokensPerRequest: 256,
			PrefillTokensPerS: 11000, DecodeTokensPerS: 3000}
	case "l4":
		return Prior{TTFTBaseMs: 180, TBOTBaseMs: 45, ReplicaRPS: 3, MaxBatch: 32, TokensPerRequest: 256,
			PrefillTokensPerS: 3500, DecodeTokensPerS: 700}
	}
	return Prior{TTFTBaseMs: 100, TBOTBaseMs: 25, ReplicaRPS: 6, MaxBatch: 64, TokensPerRequest: 256,
		PrefillTokensPerS: 8000, DecodeTokensPerS: 2000}
}

// families maps the leading word of a GPU class label to the class
// whose prior it takes: the chip's own, or, for a newer chip of the same
// or a faster generation, H100's (a conservative start that the
// windows' measurements then correct).
var families = []struct{ prefix, family string }{
	{"h100", "h100"}, {"h800", "h100"}, {"h200", "h100"}, {"gh200", "h100"},
	{"b100", "h100"}, {"b200", "h100"}, {"gb200", "h100"},
	{"a100", "a100"}, {"a800", "a100"},
}

// gpuFamily is the class whose prior a GPU class label takes: the label
// lowercased, or, for a vendor product name such as Kubernetes' GPU
// feature discovery label (NVIDIA-H100-80GB-HBM3, A100-SXM4-40GB,
// NVIDIA-L4), the family of its chip word; "" when none is known.
func gpuFamily(label string) string {
	words := strings.FieldsFunc(strings.ToLower(label), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	})
	for _, w := range words {
		if w == "l4" {
			return "l4"
		}
		for _, f := range families {
			if strings.HasPrefix(w, f.prefix) {
				return f.family
			}
		}
	}
	return ""
}

// PriorFor returns the prior of gpuClass ("h100", "a100", "l4" and the
// labels gpuFamily maps to them; anything else gets a middle-of-the-road
// default).
func PriorFor(gpuClass string) Prior { return priorFor(gpuClass) }

// Kind says which latency a profile describes.
type Kind int

const (
	// TTFT is time to first token.
	TTFT Kind = iota
	// TBOT is time between output tokens.
	TBOT
)

func (k Kind) String() string {
	if k == TBOT {
		return "tbot"
	}
	return "ttft"
}

// Knots returns the utilizations at which profiles are given.
func Knots() []float64 {
	return []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2}
}

// PriorLatency is the prior latency in ms of kind at utilization u:
// base·(1 + 0.5u + 6u³) for TTFT (queueing dominates near saturation) and
// base·(1 + 0.3u + 1.5u²) for TBOT (decode steps slow with batch size).
// Both are convex and non-decreasing in u >= 0.
func (p Prior) PriorLatency(k Kind, u float64) float64 {
	if u < 0 {
		u = 0
	}
	if k == TBOT {
		return p.TBOTBaseMs * (1 + float64(0.3*u) + float64(1.5*u*u))
	}
	return p.TTFTBaseMs * (1 + float64(0.5*u) + float64(6*u*u*u))
}

// PriorProfile is the prior curve of kind for gpuClass, flagged prior.
func PriorProfile(gpuClass string, k Kind) *schemas.LatencyProfile {
	p := priorFor(gpuClass)
	out := &schemas.LatencyProfile{Prior: true}
	for _, u := range Knots() {
		out.Points = append(out.Points, &schemas.ProfilePoint{Utilization: u, LatencyMs: p.PriorLatency(k, u)})
	}
	return out
}
