package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// VerifyConfig configures Verify.
type VerifyConfig struct {
	// TopicPrefix names the topics. Default "switchyard".
	TopicPrefix string
	// From and To select the live snapshots compared: versions (window
	// ends) in (From, To]; zero values leave that side open. The replay
	// itself always starts at the start of the retained history, so the
	// planner's state (previous weights, smoothed capacities) is the live
	// optimizer's.
	From, To time.Time
	// Registry and MaxGain are the live processor's and optimizer's
	// engine registry and --max-claim-gain (Config's), which the
	// settings records do not hold. Default: none, as without
	// --engine-registry.
	Registry *fleet.Registry
	MaxGain  float64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// VerifyResult is what Verify found; its JSON form is replay --verify's
// output line.
type VerifyResult struct {
	// Compared live snapshots, and how many of them the replay
	// reproduced byte for byte (signature fields aside).
	Compared  int `json:"compared"`
	Identical int `json:"identical"`
	// MaxWeightDiff is the largest |live - replayed| weight over every
	// compared (cluster, engine) pair; a cluster or engine one side lacks
	// counts with weight 0.
	MaxWeightDiff float64 `json:"max_weight_diff"`
	// Missing live snapshots have no replayed snapshot of their version
	// (counted in Compared, not Identical).
	Missing int `json:"missing"`
	// Extra replayed snapshots in the range have no live one (the live
	// optimizer did not publish that window).
	Extra int `json:"extra"`
	// FirstDiffVersion is the version of the first snapshot that
	// differs (0: none).
	FirstDiffVersion uint64 `json:"first_diff_version"`
	// InputsDiffer counts the differing snapshots whose inputs digest
	// differs too: the planner got other estimates (a record the live
	// processor missed, or estimates the live optimizer planned without);
	// the others got the same estimates and were planned differently
	// (planner state, numerics).
	InputsDiffer int `json:"inputs_differ"`
	// Records read, and how many of them the replay dropped as late or
	// dead-lettered.
	Records      int `json:"records"`
	Late         int `json:"late"`
	DeadLettered int `json:"dead_lettered"`
	// ProcessorSettings and OptimizerSettings count the distinct
	// settings recorded up to To (the latest ones are used; more than one
	// means the settings changed during the history).
	ProcessorSettings int `json:"processor_settings"`
	OptimizerSettings int `json:"optimizer_settings"`
}

// ErrSettings is returned by Verify when the recorded settings cannot
// reproduce the live run.
var ErrSettings = errors.New("recorded settings")

// ConfigFromSettings builds the replay config of the recorded settings:
// the latest processor and optimizer records started at or before to
// (any when to is zero). It returns how many distinct settings each
// component recorded.
func ConfigFromSettings(recs []settings.Record, to time.Time) (Config, [2]int, error) {
	var cfg Config
	var n [2]int
	p, np, err := settings.Latest(recs, settings.Processor, to)
	if err != nil {
		return cfg, n, fmt.Errorf("%w: %w", ErrSettings, err)
	}
	o, no, err := settings.Latest(recs, settings.Optimizer, to)
	if err != nil {
		return cfg, n, fmt.Errorf("%w: %w", ErrSettings, err)
	}
	if p.Processor == nil || o.Optimizer == nil {
		return cfg, n, fmt.Errorf("%w: a record without its settings", ErrSettings)
	}
	if p.Processor.RoutingWindowTime != settings.WindowByCompletion {
		return cfg, n, fmt.Errorf("%w: the processor windowed routing events by %q; this build windows them by %q",
			ErrSettings, p.Processor.RoutingWindowTime, settings.WindowByCompletion)
	}
	cfg.Window, cfg.Slide, cfg.AllowedLateness = p.Processor.Window(), p.Processor.Slide(), p.Processor.AllowedLateness()
	cfg.Settings = *o.Optimizer
	return cfg, [2]int{np, no}, nil
}

// Recorded reads the settings topic under prefix through cl (as
// settings.ReadAll) and returns the replay config of the settings the
// live processor and optimizer recorded, the latest ones started at or
// before to (ConfigFromSettings). An error wrapping ErrSettings says none
// can be used.
func Recorded(ctx context.Context, cl *kgo.Client, prefix string, to time.Time) (Config, [2]int, error) {
	recs, err := settings.ReadAll(ctx, cl, prefix)
	if err != nil {
		return Config{}, [2]int{}, err
	}
	return ConfigFromSettings(recs, to)
}

// Verify replays the retained history with the settings the live
// processor and optimizer recorded and compares the snapshots with live,
// the whole snapshots the live optimizer published (the audit stream; see
// ReadAudit). It reads through cl as Run does.
func Verify(ctx context.Context, cl *kgo.Client, live []*schemas.WeightSnapshot, vc VerifyConfig) (VerifyResult, error) {
	var res VerifyResult
	if vc.Logger == nil {
		vc.Logger = slog.Default()
	}
	var inRange []*schemas.WeightSnapshot
	for _, s := range live {
		v := time.UnixMilli(int64(s.GetVersion()))
		if (vc.From.IsZero() || v.After(vc.From)) && (vc.To.IsZero() || !v.After(vc.To)) {
			inRange = append(inRange, s)
		}
	}
	if len(inRange) == 0 {
		return res, errors.New("no live snapshot in the range")
	}
	sort.SliceStable(inRange, func(i, j int) bool { return inRange[i].GetVersion() < inRange[j].GetVersion() })
	last := time.UnixMilli(int64(inRange[len(inRange)-1].GetVersion()))
	cfg, n, err := Recorded(ctx, cl, vc.TopicPrefix, last)
	if err != nil {
		return res, err
	}
	res.ProcessorSettings, res.OptimizerSettings = n[0], n[1]
	cfg.TopicPrefix, cfg.Logger, cfg.To = vc.TopicPrefix, vc.Logger, last
	cfg.Registry, cfg.MaxGain = vc.Registry, vc.MaxGain
	var out bytes.Buffer
	rr, err := Run(ctx, cl, cfg, &out, Binary)
	if err != nil {
		return res, err
	}
	res.Records, res.Late, res.DeadLettered = rr.Records, rr.Late, rr.DeadLettered
	replayed, err := ReadSnapshots(&out, Binary)
	if err != nil {
		return res, err
	}
	byVersion := map[uint64]*schemas.WeightSnapshot{}
	for _, s := range replayed {
		byVersion[s.GetVersion()] = s
	}
	seen := map[uint64]bool{}
	for _, l := range inRange {
		res.Compared++
		seen[l.GetVersion()] = true
		r := byVersion[l.GetVersion()]
		if r == nil {
			res.Missing++
		} else if same(l, r) {
			res.Identical++
			continue
		}
		if res.FirstDiffVersion == 0 {
			res.FirstDiffVersion = l.GetVersion()
		}
		if r != nil && r.GetInputsDigest() != l.GetInputsDigest() {
			res.InputsDiffer++
		}
		res.MaxWeightDiff = math.Max(res.MaxWeightDiff, weightDiff(l, r))
	}
	first := inRange[0].GetVersion()
	for _, s := range replayed {
		if v := s.GetVersion(); v >= first && !seen[v] && (vc.From.IsZero() || time.UnixMilli(int64(v)).After(vc.From)) {
			res.Extra++
		}
	}
	return res, nil
}

// same compares two snapshots' deterministic encodings without their
// signature fields.
func same(a, b *schemas.WeightSnapshot) bool {
	ea, erra := unsigned(a)
	eb, errb := unsigned(b)
	return erra == nil && errb == nil && bytes.Equal(ea, eb)
}

func unsigned(s *schemas.WeightSnapshot) ([]byte, error) {
	if len(s.GetSignature()) > 0 || s.GetSigningKeyId() != "" {
		s = proto.CloneOf(s)
		s.Signature, s.SigningKeyId = nil, ""
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(s)
}

// weightDiff is the largest weight difference between two snapshots (b
// may be nil: all of a's weights differ).
func weightDiff(a, b *schemas.WeightSnapshot) float64 {
	w := map[[2]string][2]float64{}
	for k, s := range []*schemas.WeightSnapshot{a, b} {
		for _, cw := range s.GetClusters() {
			for _, ew := range cw.GetWeights() {
				key := [2]string{cw.GetCluster(), ew.GetEngineId()}
				v := w[key]
				v[k] = ew.GetWeight()
				w[key] = v
			}
		}
	}
	d := 0.0
	for _, v := range w {
		d = math.Max(d, math.Abs(v[0]-v[1]))
	}
	return d
}
