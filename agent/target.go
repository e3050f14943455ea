package agent

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Target is one engine to scrape.
type Target struct {
	// ID is the engine id (the signal's key). Required.
	ID string
	// URL is the engine's base URL; /metrics and /health are appended
	// (a URL ending in /metrics is accepted). Required.
	URL      string
	Region   string
	GPUClass string
	// MaxBatch is the per-replica concurrent request limit the engine was
	// started with (vLLM's --max-num-seqs). Zero: read it from the
	// engine's metrics where they state one, else publish none.
	MaxBatch uint32
	// KVCapacityTokens is the per-replica KV-cache size in tokens (what
	// vLLM logs as "GPU KV cache size: N tokens"). Zero: read it from the
	// engine's metrics where they state one, else publish none. It wins
	// over the metrics.
	KVCapacityTokens uint64
	// Models are the model ids the engine serves (base models and LoRA
	// adapters), sorted. Empty: ask the engine's GET /v1/models.
	Models []string
}

// TargetSyntax describes one engine spec as ParseTargets reads it.
const TargetSyntax = "id=url[,region=R][,gpu=CLASS][,max_batch=N][,kv_capacity_tokens=N][,models=M1|M2...]"

// ParseTargets parses engine specs (TargetSyntax); region and gpuClass are
// the defaults for specs that do not name them.
func ParseTargets(specs []string, region, gpuClass string) ([]Target, error) {
	var out []Target
	for _, spec := range specs {
		t, err := parseTarget(spec, region, gpuClass)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("no engines: give --engines or --engine")
	}
	return out, nil
}

func parseTarget(spec, region, gpuClass string) (Target, error) {
	parts := strings.Split(spec, ",")
	id, url, ok := strings.Cut(strings.TrimSpace(parts[0]), "=")
	if !ok || id == "" || url == "" {
		return Target{}, fmt.Errorf("engine %q: want %s", spec, TargetSyntax)
	}
	t := Target{ID: id, URL: url, Region: region, GPUClass: gpuClass}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		switch {
		case !ok:
			return Target{}, fmt.Errorf("engine %q: option %q is not key=value", spec, kv)
		case k == "region":
			t.Region = v
		case k == "gpu" || k == "gpu-class" || k == "gpu_class":
			t.GPUClass = v
		case k == "max_batch" || k == "max-batch":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n == 0 {
				return Target{}, fmt.Errorf("engine %q: max_batch %q is not a positive integer", spec, v)
			}
			t.MaxBatch = uint32(n)
		case k == "kv_capacity_tokens" || k == "kv-capacity-tokens":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n == 0 || n > maxKVCapacityTokens {
				return Target{}, fmt.Errorf("engine %q: kv_capacity_tokens %q is not an integer in [1, %d]", spec, v, uint64(maxKVCapacityTokens))
			}
			t.KVCapacityTokens = n
		case k == "models":
			for _, m := range strings.Split(v, "|") {
				m = strings.TrimSpace(m)
				if m == "" || len(m) > maxModelIDBytes || !utf8.ValidString(m) {
					return Target{}, fmt.Errorf("engine %q: models %q: want model ids separated by |, each 1-%d bytes of UTF-8", spec, v, maxModelIDBytes)
				}
				t.Models = addModel(t.Models, m)
			}
			slices.Sort(t.Models)
		default:
			return Target{}, fmt.Errorf("engine %q: unknown option %q", spec, k)
		}
	}
	return t, nil
}
