package settings

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
)

// optimizerJSON is plan.Settings on the settings topic: snake_case keys,
// durations in milliseconds (docs/topics.md#settings). Every field is a
// pointer so that decoding tells a key that is absent from a zero.
type optimizerJSON struct {
	MaxUtilization     *float64                      `json:"max_utilization,omitempty"`
	ChurnWeight        *float64                      `json:"churn_weight,omitempty"`
	ChurnRelative      *float64                      `json:"churn_relative,omitempty"`
	EstimateTTLMs      *int64                        `json:"estimate_ttl_ms,omitempty"`
	NetworkTTLMs       *int64                        `json:"network_ttl_ms,omitempty"`
	Clusters           []string                      `json:"clusters,omitempty"`
	MinDemandRPS       *float64                      `json:"min_demand_rps,omitempty"`
	IdleDemandRPS      *float64                      `json:"idle_demand_rps,omitempty"`
	ProbeShare         *float64                      `json:"probe_share,omitempty"`
	RegionRTTms        map[string]map[string]float64 `json:"region_rtt_ms,omitempty"`
	DefaultRTTms       *float64                      `json:"default_rtt_ms,omitempty"`
	StrictResidency    *bool                         `json:"strict_residency,omitempty"`
	MinNetworkSamples  *uint32                       `json:"min_network_samples,omitempty"`
	ReplicaCapacityRPS map[string]float64            `json:"replica_capacity_rps,omitempty"`
}

// recordJSON is Record as written: the optimizer's settings in their
// snake_case form.
type recordJSON struct {
	Component     string             `json:"component"`
	Instance      string             `json:"instance,omitempty"`
	StartedUnixMs int64              `json:"started_unix_ms"`
	Processor     *ProcessorSettings `json:"processor,omitempty"`
	Optimizer     *optimizerJSON     `json:"optimizer,omitempty"`
}

// recordRead is Record as read: the optimizer's settings kept raw, to be
// decoded in both forms.
type recordRead struct {
	Component     string             `json:"component"`
	Instance      string             `json:"instance,omitempty"`
	StartedUnixMs int64              `json:"started_unix_ms"`
	Processor     *ProcessorSettings `json:"processor,omitempty"`
	Optimizer     json.RawMessage    `json:"optimizer,omitempty"`
}

// MarshalJSON writes r with the optimizer's settings in snake_case, every
// field present (zero values too: a reader sees exactly what the
// optimizer was given).
func (r Record) MarshalJSON() ([]byte, error) {
	out := recordJSON{Component: r.Component, Instance: r.Instance, StartedUnixMs: r.StartedUnixMs, Processor: r.Processor}
	if s := r.Optimizer; s != nil {
		est, nw := s.EstimateTTL.Milliseconds(), s.NetworkTTL.Milliseconds()
		out.Optimizer = &optimizerJSON{
			MaxUtilization: &s.MaxUtilization, ChurnWeight: &s.ChurnWeight, ChurnRelative: &s.ChurnRelative,
			EstimateTTLMs: &est, NetworkTTLMs: &nw, Clusters: s.Clusters, MinDemandRPS: &s.MinDemandRPS,
			IdleDemandRPS: &s.IdleDemandRPS, ProbeShare: &s.ProbeShare, RegionRTTms: s.RegionRTTms,
			DefaultRTTms: &s.DefaultRTTms, StrictResidency: &s.StrictResidency, MinNetworkSamples: &s.MinNetworkSamples,
			ReplicaCapacityRPS: s.ReplicaCapacityRPS,
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a record in either form of the optimizer's
// settings: snake_case (this build's) or the Go field names, durations in
// nanoseconds, that builds before it wrote, so no recorded history is
// lost. The two forms' keys are disjoint (encoding/json matches names
// case-insensitively, but "MaxUtilization" never matches
// "max_utilization"); where both appear, the snake_case key wins.
func (r *Record) UnmarshalJSON(b []byte) error {
	var in recordRead
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*r = Record{Component: in.Component, Instance: in.Instance, StartedUnixMs: in.StartedUnixMs, Processor: in.Processor}
	if len(in.Optimizer) == 0 || string(in.Optimizer) == "null" {
		return nil
	}
	var s plan.Settings // the Go field names of older records
	if err := json.Unmarshal(in.Optimizer, &s); err != nil {
		return fmt.Errorf("optimizer settings: %w", err)
	}
	var o optimizerJSON
	if err := json.Unmarshal(in.Optimizer, &o); err != nil {
		return fmt.Errorf("optimizer settings: %w", err)
	}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.MaxUtilization, o.MaxUtilization)
	set(&s.ChurnWeight, o.ChurnWeight)
	set(&s.ChurnRelative, o.ChurnRelative)
	set(&s.MinDemandRPS, o.MinDemandRPS)
	set(&s.IdleDemandRPS, o.IdleDemandRPS)
	set(&s.ProbeShare, o.ProbeShare)
	set(&s.DefaultRTTms, o.DefaultRTTms)
	if o.EstimateTTLMs != nil {
		s.EstimateTTL = time.Duration(*o.EstimateTTLMs) * time.Millisecond
	}
	if o.NetworkTTLMs != nil {
		s.NetworkTTL = time.Duration(*o.NetworkTTLMs) * time.Millisecond
	}
	if o.Clusters != nil {
		s.Clusters = o.Clusters
	}
	if o.RegionRTTms != nil {
		s.RegionRTTms = o.RegionRTTms
	}
	if o.StrictResidency != nil {
		s.StrictResidency = *o.StrictResidency
	}
	if o.MinNetworkSamples != nil {
		s.MinNetworkSamples = *o.MinNetworkSamples
	}
	if o.ReplicaCapacityRPS != nil {
		s.ReplicaCapacityRPS = o.ReplicaCapacityRPS
	}
	r.Optimizer = &s
	return nil
}
