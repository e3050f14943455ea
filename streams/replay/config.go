package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
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
		MinDemandRPS      float64                       `yaml:"min_demand_rps"`
		RegionRTTms       map[string]map[string]float64 `yaml:"region_rtt_ms"`
		DefaultRTTms      float64                       `yaml:"default_rtt_ms"`
		StrictResidency   bool                          `yaml:"strict_residency"`
		MinNetworkSamples uint32                        `yaml:"min_network_samples"`
	} `yaml:"optimizer"`
}

// ErrConfig marks an unusable config file.
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
	if o.MaxUtilization < 0 || o.MaxUtilization > 1 || o.MinDemandRPS < 0 || o.DefaultRTTms < 0 {
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
	}{{o.ChurnWeight, &s.ChurnWeight}, {o.ChurnRelative, &s.ChurnRelative}, {o.ProbeShare, &s.ProbeShare}} {
		if f.v != nil {
			if math.IsNaN(*f.v) || math.IsInf(*f.v, 0) {
				return fmt.Errorf("%w: churn_weight, churn_relative and probe_share must be finite", ErrConfig)
			}
			*f.dst = *f.v
		}
	}
	if len(o.Clusters) > 0 {
		s.Clusters = o.Clusters
	}
	if o.MinDemandRPS > 0 {
		s.MinDemandRPS = o.MinDemandRPS
	}
	if o.RegionRTTms != nil {
		s.RegionRTTms = o.RegionRTTms
	}
	if o.DefaultRTTms > 0 {
		s.DefaultRTTms = o.DefaultRTTms
	}
	if o.StrictResidency {
		s.StrictResidency = true
	}
	if o.MinNetworkSamples > 0 {
		s.MinNetworkSamples = o.MinNetworkSamples
	}
	return nil
}
