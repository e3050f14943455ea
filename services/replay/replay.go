// Package replay is `switchyard replay`: it reads the signals and routing
// events of a past time range from Kafka (by timestamp), runs them through
// the processor core and a planner (by default the optimizer service's
// planning step) offline, and writes the weight snapshots that would have
// been published. It never writes to Kafka or NATS, so live snapshots are
// untouched. A config file changes processor and optimizer settings for
// what-if runs (see docs/replay.md).
package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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

// Config configures a replay.
type Config struct {
	KafkaBrokers []string
	TopicPrefix  string
	// From and To bound the replayed windows: snapshots are planned for
	// windows ending in (From, To]. Records from one window plus the
	// allowed lateness before From are read to fill the first windows.
	From, To time.Time
	// Processor window settings (defaults as the processor's).
	Window, Slide, AllowedLateness time.Duration
	// Settings for the default planner.
	Settings plan.Settings
	// Planner overrides the default (optimizer service planning with
	// Settings).
	Planner Planner
	// OnWindow, when set, sees every completed window's estimates.
	OnWindow func(process.Fired)
	Logger   *slog.Logger
}

// Result summarises a replay.
type Result struct {
	Records, DeadLettered, Late int
	Windows                     int
	Snapshots                   int
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

// Format of the output file.
type Format int

const (
	// JSONLines writes one compact protojson WeightSnapshot per line.
	JSONLines Format = iota
	// Binary writes each snapshot as a uvarint length followed by its
	// deterministic protobuf encoding.
	Binary
)

// Run replays cfg's range and writes the snapshots to out.
func Run(ctx context.Context, cfg Config, out io.Writer, format Format) (Result, error) {
	var res Result
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.KafkaBrokers) == 0 {
		return res, errors.New("no kafka brokers")
	}
	if !cfg.To.After(cfg.From) {
		return res, fmt.Errorf("empty range: from %v to %v", cfg.From, cfg.To)
	}
	if cfg.Window == 0 {
		cfg.Window = 30 * time.Second
	}
	if cfg.Slide == 0 {
		cfg.Slide = 10 * time.Second
	}
	if cfg.AllowedLateness == 0 {
		cfg.AllowedLateness = 5 * time.Second
	}
	planner := cfg.Planner
	if planner == nil {
		planner = OptimizerPlanner(cfg.Settings)
	}
	topics := streams.TopicsFor(cfg.TopicPrefix)
	core, err := process.NewCore(topics, window.Spec{Size: cfg.Window, Slide: cfg.Slide, AllowedLateness: cfg.AllowedLateness}, nil)
	if err != nil {
		return res, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.KafkaBrokers...))
	if err != nil {
		return res, fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	warm := cfg.From.Add(-cfg.Window - cfg.AllowedLateness)
	// Read one slide plus the lateness past To so the watermark passes the
	// last window ending at To.
	starts, ends, err := ranges(ctx, kadm.NewClient(cl), warm, cfg.To.Add(cfg.AllowedLateness+cfg.Slide), topics.Signals, topics.RoutingEvents)
	if err != nil {
		return res, err
	}
	assign := map[string]map[int32]kgo.Offset{}
	remaining := 0
	for k, s := range starts {
		e := ends[k]
		core.Track(k.topic, k.partition, s, e)
		if e > s {
			if assign[k.topic] == nil {
				assign[k.topic] = map[int32]kgo.Offset{}
			}
			assign[k.topic][k.partition] = kgo.NewOffset().At(s)
			remaining++
		}
	}
	bw := bufio.NewWriter(out)
	emit := func(fired []process.Fired) error {
		for _, f := range fired {
			res.Windows++
			if cfg.OnWindow != nil {
				cfg.OnWindow(f)
			}
			end := time.UnixMilli(f.End)
			if end.After(cfg.To) {
				continue
			}
			// Warm-up windows (ending at or before From) are planned too,
			// so the planner's state (latest estimates, previous
			// weights) is as live at From, but not written.
			snap, err := planner.Plan(end, f.Estimates)
			if err != nil {
				return fmt.Errorf("planning window ending %v: %w", end, err)
			}
			if snap == nil || !end.After(cfg.From) {
				continue
			}
			if err := write(bw, snap, format); err != nil {
				return err
			}
			res.Snapshots++
		}
		return nil
	}
	if remaining > 0 {
		rd, err := kgo.NewClient(kgo.SeedBrokers(cfg.KafkaBrokers...), kgo.ConsumePartitions(assign))
		if err != nil {
			return res, fmt.Errorf("creating kafka reader: %w", err)
		}
		defer rd.Close()
		done := map[tp]bool{}
		for len(done) < remaining {
			// A partition whose last offsets before the end hold no
			// records (compaction, transaction markers) never reports
			// its end: give up on it after a quiet poll.
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			fs := rd.PollRecords(pctx, 10000)
			quiet := pctx.Err() != nil && fs.NumRecords() == 0
			cancel()
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if quiet {
				cfg.Logger.Warn("replay: partitions ended before their end offset", "done", len(done), "of", remaining)
				break
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					ferr = fmt.Errorf("reading %s/%d: %w", t, p, err)
				}
			})
			if ferr != nil {
				return res, ferr
			}
			fs.EachRecord(func(r *kgo.Record) {
				k := tp{r.Topic, r.Partition}
				if done[k] {
					return
				}
				if r.Offset >= ends[k] {
					done[k] = true
					return
				}
				if r.Offset == ends[k]-1 {
					done[k] = true
				}
				res.Records++
				switch out, _ := core.Handle(r); out {
				case process.DeadLettered:
					res.DeadLettered++
				case process.Late:
					res.Late++
				}
			})
			if err := emit(core.Fire()); err != nil {
				return res, err
			}
		}
	}
	if err := emit(core.Fire()); err != nil {
		return res, err
	}
	if err := bw.Flush(); err != nil {
		return res, fmt.Errorf("writing snapshots: %w", err)
	}
	return res, nil
}

type tp struct {
	topic     string
	partition int32
}

// ranges returns, per partition, the first offset at or after from and
// the first offset at or after to (by record timestamp).
func ranges(ctx context.Context, adm *kadm.Client, from, to time.Time, topics ...string) (starts, ends map[tp]int64, err error) {
	get := func(t time.Time) (map[tp]int64, error) {
		l, err := adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topics...)
		if err != nil {
			return nil, fmt.Errorf("looking up offsets at %v: %w", t, err)
		}
		m := map[tp]int64{}
		var lerr error
		l.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				lerr = fmt.Errorf("looking up offsets of %s/%d at %v: %w", o.Topic, o.Partition, t, o.Err)
				return
			}
			m[tp{o.Topic, o.Partition}] = o.Offset
		})
		return m, lerr
	}
	if starts, err = get(from); err != nil {
		return nil, nil, err
	}
	if ends, err = get(to); err != nil {
		return nil, nil, err
	}
	return starts, ends, nil
}

func write(w io.Writer, snap *schemas.WeightSnapshot, format Format) error {
	switch format {
	case Binary:
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(snap)
		if err != nil {
			return fmt.Errorf("encoding snapshot %d: %w", snap.GetVersion(), err)
		}
		var n [binary.MaxVarintLen64]byte
		if _, err := w.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))]); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	default:
		b, err := protojson.Marshal(snap)
		if err != nil {
			return fmt.Errorf("encoding snapshot %d: %w", snap.GetVersion(), err)
		}
		// protojson randomises whitespace; compacting makes lines stable.
		var c bytes.Buffer
		if err := json.Compact(&c, b); err != nil {
			return err
		}
		c.WriteByte('\n')
		_, err = w.Write(c.Bytes())
		return err
	}
}

// ReadSnapshots reads a file written with format.
func ReadSnapshots(r io.Reader, format Format) ([]*schemas.WeightSnapshot, error) {
	var out []*schemas.WeightSnapshot
	br := bufio.NewReader(r)
	for {
		var b []byte
		if format == Binary {
			n, err := binary.ReadUvarint(br)
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return nil, fmt.Errorf("reading snapshot length: %w", err)
			}
			if n > 64<<20 {
				return nil, fmt.Errorf("snapshot of %d bytes", n)
			}
			b = make([]byte, n)
			if _, err := io.ReadFull(br, b); err != nil {
				return nil, fmt.Errorf("reading snapshot: %w", err)
			}
			var s schemas.WeightSnapshot
			if err := proto.Unmarshal(b, &s); err != nil {
				return nil, fmt.Errorf("decoding snapshot: %w", err)
			}
			out = append(out, &s)
			continue
		}
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var s schemas.WeightSnapshot
			if uerr := protojson.Unmarshal(line, &s); uerr != nil {
				return nil, fmt.Errorf("decoding snapshot: %w", uerr)
			}
			out = append(out, &s)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
