package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// FileConfig is the --config file: the processor's window settings and
// the optimizer's planning settings to replay with (the what-if knobs).
// Durations are Go duration strings ("30s").
type FileConfig struct {
	Processor struct {
		Window          string `yaml:"window"`
		Slide           string `yaml:"slide"`
		AllowedLateness string `yaml:"allowed_lateness"`
	} `yaml:"processor"`
	Optimizer struct {
		MaxUtilization    float64                       `yaml:"max_utilization"`
		ChurnWeight       *float64                      `yaml:"churn_weight"`
		ChurnRelative     *float64                      `yaml:"churn_relative"`
		ProbeShare        *float64                      `yaml:"probe_share"`
		EstimateTTL       string                        `yaml:"estimate_ttl"`
		NetworkTTL        string                        `yaml:"network_ttl"`
		Clusters          []string                      `yaml:"clusters"`
		MinDemandRPS      *float64                      `yaml:"min_demand_rps"`
		IdleDemandRPS     *float64                      `yaml:"idle_demand_rps"`
		RegionRTTms       map[string]map[string]float64 `yaml:"region_rtt_ms"`
		DefaultRTTms      float64                       `yaml:"default_rtt_ms"`
		StrictResidency   *bool                         `yaml:"strict_residency"`
		MinNetworkSamples uint32                        `yaml:"min_network_samples"`
	} `yaml:"optimizer"`
}

// ErrConfig marks an unusable config file or --set override.
var ErrConfig = errors.New("invalid replay config")

// LoadConfig reads a config file and applies it to cfg (fields the file
// leaves empty keep cfg's values).
func LoadConfig(path string, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading replay config: %w", err)
	}
	return ParseConfig(b, cfg)
}

// ParseConfig applies a YAML config to cfg; unknown fields are errors.
func ParseConfig(b []byte, cfg *Config) error {
	var fc FileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	dur := func(name, s string, dst *time.Duration) error {
		if s == "" {
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("%w: %s %q is not a duration", ErrConfig, name, s)
		}
		*dst = d
		return nil
	}
	if err := errors.Join(
		dur("processor.window", fc.Processor.Window, &cfg.Window),
		dur("processor.slide", fc.Processor.Slide, &cfg.Slide),
		dur("processor.allowed_lateness", fc.Processor.AllowedLateness, &cfg.AllowedLateness),
		dur("optimizer.estimate_ttl", fc.Optimizer.EstimateTTL, &cfg.Settings.EstimateTTL),
		dur("optimizer.network_ttl", fc.Optimizer.NetworkTTL, &cfg.Settings.NetworkTTL),
	); err != nil {
		return err
	}
	o := fc.Optimizer
	if o.MaxUtilization < 0 || o.MaxUtilization > 1 || o.DefaultRTTms < 0 || (o.MinDemandRPS != nil && !(*o.MinDemandRPS >= 0)) {
		return fmt.Errorf("%w: negative value or max_utilization outside [0,1]", ErrConfig)
	}
	s := &cfg.Settings
	if o.MaxUtilization > 0 {
		s.MaxUtilization = o.MaxUtilization
	}
	// As the optimizer's flags: churn_weight > 0 absolute, 0 relative
	// (churn_relative), negative none; probe_share negative: no probes.
	for _, f := range []struct {
		v   *float64
		dst *float64
	}{{o.ChurnWeight, &s.ChurnWeight}, {o.ChurnRelative, &s.ChurnRelative}, {o.ProbeShare, &s.ProbeShare},
		{o.MinDemandRPS, &s.MinDemandRPS}, {o.IdleDemandRPS, &s.IdleDemandRPS}} {
		if f.v != nil {
			if math.IsNaN(*f.v) || math.IsInf(*f.v, 0) {
				return fmt.Errorf("%w: churn_weight, churn_relative, probe_share, min_demand_rps and idle_demand_rps must be finite", ErrConfig)
			}
			*f.dst = *f.v
		}
	}
	if len(o.Clusters) > 0 {
		s.Clusters = o.Clusters
	}
	if o.RegionRTTms != nil {
		s.RegionRTTms = o.RegionRTTms
	}
	if o.DefaultRTTms > 0 {
		s.DefaultRTTms = o.DefaultRTTms
	}
	if o.StrictResidency != nil {
		s.StrictResidency = *o.StrictResidency
	}
	if o.MinNetworkSamples > 0 {
		s.MinNetworkSamples = o.MinNetworkSamples
	}
	return nil
}

// ApplySets applies --set overrides to cfg, each "section.key=value" with
// the keys of the config file ("optimizer.max_utilization=0.5",
// "processor.window=20s", "optimizer.clusters=[us, eu]"); a value is
// read as YAML. They are applied as one config file, after the file
// given with --config, so unknown keys and bad values are the same
// errors.
func ApplySets(sets []string, cfg *Config) error {
	if len(sets) == 0 {
		return nil
	}
	doc := map[string]map[string]any{}
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		section, key, dotted := strings.Cut(strings.TrimSpace(k), ".")
		if !ok || !dotted || section == "" || key == "" {
			return fmt.Errorf("%w: --set %q: want section.key=value, e.g. optimizer.max_utilization=0.5", ErrConfig, kv)
		}
		var val any
		if err := yaml.Unmarshal([]byte(v), &val); err != nil {
			return fmt.Errorf("%w: --set %q: %v", ErrConfig, kv, err)
		}
		if doc[section] == nil {
			doc[section] = map[string]any{}
		}
		doc[section][key] = val
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return fmt.Errorf("%w: --set: %v", ErrConfig, err)
	}
	return ParseConfig(b, cfg)
}
