// Package replay reads the signals and routing events of a past time range
// from Kafka (by timestamp), runs them through the processor core
// (streams/process) and a planner (by default the optimizer's planning
// step, optimizer/plan) offline, and writes the weight snapshots that would
// have been published. It never writes to Kafka or NATS, so live snapshots
// are untouched. A config file changes processor and optimizer settings
// for what-if runs (see docs/replay.md).
package replay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// Planner turns the estimates of each completed window into the snapshot
// that would be published at the window's end (nil: none this window).
// It is called once per window in event-time order and may keep state.
type Planner interface {
	Plan(windowEnd time.Time, estimates []*schemas.Estimate) (*schemas.WeightSnapshot, error)
}

// PlannerFunc adapts a function to Planner.
type PlannerFunc func(windowEnd time.Time, estimates []*schemas.Estimate) (*schemas.WeightSnapshot, error)

// Plan calls f.
func (f PlannerFunc) Plan(end time.Time, est []*schemas.Estimate) (*schemas.WeightSnapshot, error) {
	return f(end, est)
}

// OptimizerPlanner is the default planner: the live optimizer service's
// planner (optimizer/plan), driven by the same window ends, so replaying a
// range with the live settings reproduces the live snapshots byte for byte
// (versions and created times are the window ends).
func OptimizerPlanner(set plan.Settings) Planner {
	p := plan.NewPlanner(set)
	return PlannerFunc(func(end time.Time, est []*schemas.Estimate) (*schemas.WeightSnapshot, error) {
		snap, err := p.Plan(end, est)
		if errors.Is(err, plan.ErrNothingToPlan) || errors.Is(err, plan.ErrOldWindow) {
			return nil, nil
		}
		return snap, err
	})
}

// Config configures a replay.
type Config struct {
	// TopicPrefix names the topics (streams.TopicsFor). Default "switchyard".
	TopicPrefix string
	// From and To bound the replayed windows: snapshots are planned for
	// windows ending in (From, To]. Records from one window plus the
	// allowed lateness before From are read to fill the first windows.
	// A zero From replays from the start of the retained history.
	From, To time.Time
	// Warmup is how much history before From is read to warm the
	// processor's windows and the planner's state (previous weights for
	// the churn term, smoothed capacities, demand averages, outlier
	// pools). 0 (the default): the whole retained history, so the state
	// at From is the live optimizer's and the snapshots of any sub-range
	// are the ones it published (with its settings). Positive: at least
	// one window plus the allowed lateness (the first windows in range
	// are complete), a faster replay whose first snapshots may differ
	// from live until the planner's state has caught up.
	Warmup time.Duration
	// Processor window settings: defaults 30s, 10s and 5s, as the
	// processor's.
	Window, Slide, AllowedLateness time.Duration
	// Settings for the default planner.
	Settings plan.Settings
	// Planner overrides the default (OptimizerPlanner with Settings).
	Planner Planner
	// Registry, when set, is the engine registry, applied as the live
	// processor and optimizer apply theirs: signals of engines it does
	// not hold, or at another endpoint, are dead-lettered, and every
	// window's estimates pass the optimizer's guard (fleet.GuardFor)
	// before the planner sees them, so an unregistered engine is never
	// planned. Default nil: any engine the records name.
	Registry *fleet.Registry
	// MaxGain is the optimizer's --max-claim-gain (control.Config's
	// MaxGain): 0 fleet.DefaultMaxGain with a registry and no bounds
	// without one; above 1 these bounds; negative none.
	MaxGain float64
	// OnWindow, when set, sees every completed window's estimates.
	OnWindow func(process.Fired)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Window == 0 {
		c.Window = 30 * time.Second
	}
	if c.Slide == 0 {
		c.Slide = 10 * time.Second
	}
	if c.AllowedLateness == 0 {
		c.AllowedLateness = 5 * time.Second
	}
	if c.Planner == nil {
		c.Planner = OptimizerPlanner(c.Settings)
	}
}

// Result summarises a replay.
type Result struct {
	Records, DeadLettered, Late int
	Windows                     int
	Snapshots                   int
	// Unregistered estimates the guard dropped (engines outside
	// Config.Registry) and Quarantined ones it replaced by the engine's
	// last trusted estimate, over every planned window.
	Unregistered, Quarantined int
}

// Run replays cfg's range and writes the snapshots to out. It reads
// through cl, a client without a consumer group that consumes nothing
// else: Run adds the range's partitions to it (AddConsumePartitions) and
// removes them before it returns.
func Run(ctx context.Context, cl *kgo.Client, cfg Config, out io.Writer, format Format) (Result, error) {
	if err := checkClient(cl); err != nil {
		return Result{}, err
	}
	if !cfg.To.After(cfg.From) {
		return Result{}, fmt.Errorf("empty range: from %v to %v", cfg.From, cfg.To)
	}
	cfg.defaults()
	topics := streams.TopicsFor(cfg.TopicPrefix)
	core, err := process.NewCore(topics, window.Spec{Size: cfg.Window, Slide: cfg.Slide, AllowedLateness: cfg.AllowedLateness}, nil)
	if err != nil {
		return Result{}, err
	}
	core.SetRegistry(cfg.Registry)
	guard, err := fleet.GuardFor(cfg.Registry, cfg.MaxGain)
	if err != nil {
		return Result{}, fmt.Errorf("replay: %w", err)
	}
	r := &replayer{cfg: cfg, core: core, guard: guard, out: bufio.NewWriter(out), format: format}
	// Read one slide plus the lateness past To so the watermark passes
	// the last window ending at To.
	var warm time.Time
	if !cfg.From.IsZero() && cfg.Warmup > 0 {
		warm = cfg.From.Add(-max(cfg.Warmup, cfg.Window+cfg.AllowedLateness))
	}
	starts, ends, err := ranges(ctx, kadm.NewClient(cl), warm, cfg.To.Add(cfg.AllowedLateness+cfg.Slide), topics.Inputs()...)
	if err != nil {
		return r.res, err
	}
	if assign, n := r.track(starts, ends); n > 0 {
		cl.AddConsumePartitions(assign)
		defer cl.RemoveConsumePartitions(partitionsOf(assign))
		if err := r.read(ctx, cl, ends, n); err != nil {
			return r.res, err
		}
	}
	if err := r.emit(core.Fire()); err != nil {
		return r.res, err
	}
	if err := r.out.Flush(); err != nil {
		return r.res, fmt.Errorf("writing snapshots: %w", err)
	}
	return r.res, nil
}

// checkClient reports a client that is in a consumer group or consumes
// topics of its own.
func checkClient(cl *kgo.Client) error {
	if cl == nil {
		return errors.New("replay: no kafka client")
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
		return fmt.Errorf("replay: kafka client consumes in group %q; replay reads partitions directly", g)
	}
	if ts, _ := cl.OptValue(kgo.ConsumeTopics).([]string); len(ts) > 0 {
		return fmt.Errorf("replay: kafka client already consumes %v", ts)
	}
	return nil
}

// replayer is one Run's state.
type replayer struct {
	cfg    Config
	core   *process.Core
	guard  *fleet.Guard // nil: estimates planned as they are
	out    *bufio.Writer
	format Format
	res    Result
}

type tp struct {
	topic     string
	partition int32
}

// track tells the core where each partition's range starts and ends and
// returns the partitions that have records in it, at their start offsets,
// and how many they are.
func (r *replayer) track(starts, ends map[tp]int64) (map[string]map[int32]kgo.Offset, int) {
	assign := map[string]map[int32]kgo.Offset{}
	n := 0
	for k, s := range starts {
		e := ends[k]
		r.core.Track(k.topic, k.partition, s, e)
		if e > s {
			if assign[k.topic] == nil {
				assign[k.topic] = map[int32]kgo.Offset{}
			}
			assign[k.topic][k.partition] = kgo.NewOffset().At(s)
			n++
		}
	}
	return assign, n
}

func partitionsOf(assign map[string]map[int32]kgo.Offset) map[string][]int32 {
	out := map[string][]int32{}
	for t, ps := range assign {
		for p := range ps {
			out[t] = append(out[t], p)
		}
	}
	return out
}

// read polls the assigned partitions until each of the remaining ones
// has delivered the record before its end offset, handing the records to
// the core and planning the windows that complete after each poll.
func (r *replayer) read(ctx context.Context, cl *kgo.Client, ends map[tp]int64, remaining int) error {
	done := map[tp]bool{}
	for len(done) < remaining {
		fs, quiet, err := poll(ctx, cl)
		if err != nil {
			return err
		}
		if quiet {
			r.cfg.Logger.Warn("replay: partitions ended before their end offset", "done", len(done), "of", remaining)
			return nil
		}
		fs.EachRecord(func(rec *kgo.Record) { r.handle(rec, ends, done) })
		if err := r.emit(r.core.Fire()); err != nil {
			return err
		}
	}
	return nil
}

// handle folds one record into the core unless its partition is done;
// the record before the end offset marks it done.
func (r *replayer) handle(rec *kgo.Record, ends map[tp]int64, done map[tp]bool) {
	k := tp{rec.Topic, rec.Partition}
	if done[k] {
		return
	}
	if rec.Offset >= ends[k] {
		done[k] = true
		return
	}
	if rec.Offset == ends[k]-1 {
		done[k] = true
	}
	r.res.Records++
	switch out, _ := r.core.Handle(rec); out {
	case process.DeadLettered:
		r.res.DeadLettered++
	case process.Late:
		r.res.Late++
	}
}

// emit plans each fired window and writes the snapshots of windows
// ending in (From, To].
func (r *replayer) emit(fired []process.Fired) error {
	for _, f := range fired {
		r.res.Windows++
		if r.cfg.OnWindow != nil {
			r.cfg.OnWindow(f)
		}
		end := time.UnixMilli(f.End)
		if end.After(r.cfg.To) {
			continue
		}
		// Warm-up windows (ending at or before From) are planned too, so
		// the planner's state (latest estimates, previous weights) is as
		// live at From, but not written.
		snap, err := r.cfg.Planner.Plan(end, r.screen(f.Estimates))
		if err != nil {
			return fmt.Errorf("planning window ending %v: %w", end, err)
		}
		if snap == nil || !end.After(r.cfg.From) {
			continue
		}
		if err := write(r.out, snap, r.format); err != nil {
			return err
		}
		r.res.Snapshots++
	}
	return nil
}

// screen passes a window's estimates through the guard, as the live
// optimizer does (control's screen), counting what it dropped or
// quarantined.
func (r *replayer) screen(ests []*schemas.Estimate) []*schemas.Estimate {
	if r.guard == nil {
		return ests
	}
	out, verdicts := r.guard.Filter(ests)
	for _, v := range verdicts {
		switch v.Kind {
		case fleet.Rejected:
			r.res.Unregistered++
		case fleet.Quarantined:
			r.res.Quarantined++
		}
	}
	return out
}

// ranges returns, per partition, the first offset at or after from (the
// log start when from is zero) and the first offset at or after to (by
// record timestamp).
func ranges(ctx context.Context, adm *kadm.Client, from, to time.Time, topics ...string) (starts, ends map[tp]int64, err error) {
	if from.IsZero() {
		starts, err = logStarts(ctx, adm, topics)
	} else {
		starts, err = offsetsAfter(ctx, adm, from, topics)
	}
	if err != nil {
		return nil, nil, err
	}
	if ends, err = offsetsAfter(ctx, adm, to, topics); err != nil {
		return nil, nil, err
	}
	return starts, ends, nil
}

// offsetsAfter returns, per partition of topics, the first offset whose
// record timestamp is at or after t.
func offsetsAfter(ctx context.Context, adm *kadm.Client, t time.Time, topics []string) (map[tp]int64, error) {
	l, err := adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topics...)
	if err != nil {
		return nil, fmt.Errorf("looking up offsets at %v: %w", t, err)
	}
	m := map[tp]int64{}
	var lerr error
	l.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return // not created yet (the arrivals topic of a log recorded before it): no records
		}
		if o.Err != nil {
			lerr = fmt.Errorf("looking up offsets of %s/%d at %v: %w", o.Topic, o.Partition, t, o.Err)
			return
		}
		m[tp{o.Topic, o.Partition}] = o.Offset
	})
	return m, lerr
}

// logStarts returns the first offset of every partition of topics.
func logStarts(ctx context.Context, adm *kadm.Client, topics []string) (map[tp]int64, error) {
	l, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("looking up start offsets: %w", err)
	}
	m := map[tp]int64{}
	var lerr error
	l.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return // not created yet: no records
		}
		if o.Err != nil {
			lerr = fmt.Errorf("looking up the start offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			return
		}
		m[tp{o.Topic, o.Partition}] = o.Offset
	})
	return m, lerr
}
