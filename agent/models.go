package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Bounds on what an engine's model list and LoRA metric may make the
// agent publish: a hostile or broken engine cannot grow a signal beyond
// them.
const (
	maxModels       = schemas.MaxSignalModels // ids per engine
	maxModelIDBytes = schemas.MaxModelIDBytes // bytes per id
	maxModelsBody   = 1 << 20                 // bytes of GET /v1/models read
	maxLoRA         = schemas.MaxSignalMaxLoRA
	modelsEvery     = 10 * time.Second
)

// loraInfo is vLLM's lora_requests_info gauge (one series per label
// combination, its value the time it was set): the adapters with
// requests running or waiting and the engine's --max-loras.
const loraInfo = "vllm:lora_requests_info"

// loraState reads fams' lora_requests_info: the series set last (the
// largest value) names the adapters running or waiting now and max_lora
// (none and 0 when the engine exports no such series).
func loraState(fams map[string]*dto.MetricFamily) (adapters []string, maxLora uint32) {
	f := fams[loraInfo]
	if f == nil {
		return nil, 0
	}
	var last *dto.Metric
	lastV := math.Inf(-1)
	for _, m := range f.GetMetric() {
		if v := value(m); finite(v) && v > lastV {
			last, lastV = m, v
		}
	}
	if last == nil {
		return nil, 0
	}
	for _, l := range []string{"running_lora_adapters", "waiting_lora_adapters"} {
		for _, a := range strings.Split(label(last, l), ",") {
			adapters = addModel(adapters, strings.TrimSpace(a))
		}
	}
	if n, err := strconv.ParseUint(strings.TrimSpace(label(last, "max_lora")), 10, 32); err == nil && n <= maxLoRA {
		maxLora = uint32(n)
	}
	slices.Sort(adapters)
	return adapters, maxLora
}

// addModel appends id to ids unless it is empty, too long, not UTF-8,
// already there, or ids is full.
func addModel(ids []string, id string) []string {
	if id == "" || len(id) > maxModelIDBytes || !utf8.ValidString(id) || len(ids) >= maxModels || slices.Contains(ids, id) {
		return ids
	}
	return append(ids, id)
}

// modelList is the body of GET /v1/models as OpenAI-compatible engines
// answer it (vLLM lists its LoRA adapters as models whose parent is the
// base model).
type modelList struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
}

// fetchModels asks the engine's GET /v1/models and returns the ids it
// lists, sorted, at most maxModels of them.
func (s *Scraper) fetchModels(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL(s.target.URL)+"/v1/models", nil)
	if err != nil {
		return nil, fmt.Errorf("models of %s: %w", s.target.ID, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("models of %s: %w", s.target.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil, fmt.Errorf("models of %s: status %d", s.target.ID, resp.StatusCode)
	}
	var l modelList
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxModelsBody)).Decode(&l); err != nil {
		return nil, fmt.Errorf("models of %s: %w", s.target.ID, err)
	}
	var ids []string
	for _, m := range l.Data {
		ids = addModel(ids, m.ID)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("models of %s: the list is empty", s.target.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

// models returns the engine's model ids: the configured ones, else its
// /v1/models list, asked at most every modelsEvery; when asking fails
// the last list stays (an engine that never answered has none, which
// gateways read as "serves any model").
func (s *Scraper) models(ctx context.Context, now time.Time) []string {
	if len(s.target.Models) > 0 {
		return s.target.Models
	}
	if !s.modelsAt.IsZero() && now.Sub(s.modelsAt) < modelsEvery && now.After(s.modelsAt) {
		return s.modelIDs
	}
	s.modelsAt = now
	if ids, err := s.fetchModels(ctx); err == nil {
		s.modelIDs = ids
	}
	return s.modelIDs
}
