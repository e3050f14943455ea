package replay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/schemas/trace"
	"github.com/switchyard-llm/switchyard/streams"
)

// TraceConfig configures ExportTrace.
type TraceConfig struct {
	// TopicPrefix names the topics. Default "switchyard".
	TopicPrefix string
	// From and To select the requests that arrived (event time) in
	// [From, To).
	From, To time.Time
	// MaxRequest is how long a request may take: a request's record is
	// produced when it completes, so records up to To+MaxRequest are
	// read. Default 10 minutes.
	MaxRequest time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// TraceResult counts what ExportTrace read and wrote.
type TraceResult struct {
	// Records read from the routing-events and routing-arrivals topics.
	Records int `json:"records"`
	// Requests written to the trace.
	Requests int `json:"requests"`
	// Arrival records (REQUEST_STATUS_IN_PROGRESS) skipped: the request's
	// final record carries its tokens.
	Arrivals int `json:"arrivals"`
	// Unfinished requests have an arrival record but no final record
	// before To+MaxRequest; they are not in the trace.
	Unfinished int `json:"unfinished"`
	// NoPrompt requests never reached an engine (no prompt tokens, e.g.
	// shed or rejected) and are not in the trace.
	NoPrompt int `json:"no_prompt"`
	// OutOfRange records arrived outside [From, To).
	OutOfRange int `json:"out_of_range"`
	// Undecodable records are not RoutingEvents.
	Undecodable int `json:"undecodable"`
}

// ExportTrace reads the routing events of the requests that arrived in
// [cfg.From, cfg.To) and writes them to w as a Switchyard trace
// (trace.Row JSON lines, sorted by arrival), which `switchyard sim
// --trace` and workload.ReadMooncake read. It reads through cl as Run
// does.
func ExportTrace(ctx context.Context, cl *kgo.Client, cfg TraceConfig, w io.Writer) (TraceResult, error) {
	var res TraceResult
	if err := checkClient(cl); err != nil {
		return res, err
	}
	if !cfg.To.After(cfg.From) {
		return res, fmt.Errorf("empty range: from %v to %v", cfg.From, cfg.To)
	}
	if cfg.MaxRequest <= 0 {
		cfg.MaxRequest = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	topics := streams.TopicsFor(cfg.TopicPrefix)
	starts, ends, err := ranges(ctx, kadm.NewClient(cl), cfg.From, cfg.To.Add(cfg.MaxRequest), topics.RoutingEvents, topics.RoutingArrivals)
	if err != nil {
		return res, err
	}
	type req struct {
		at  int64
		id  string
		row trace.Row
	}
	var reqs []req
	arrived := map[string]bool{}
	finished := map[string]bool{}
	err = readRange(ctx, cl, starts, ends, func(rec *kgo.Record) {
		res.Records++
		var ev schemas.RoutingEvent
		if err := proto.Unmarshal(rec.Value, &ev); err != nil {
			res.Undecodable++
			return
		}
		at := ev.GetEventTimeUnixMs()
		if at < cfg.From.UnixMilli() || at >= cfg.To.UnixMilli() {
			res.OutOfRange++
			return
		}
		if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS {
			res.Arrivals++
			arrived[ev.GetRequestId()] = true
			return
		}
		finished[ev.GetRequestId()] = true
		if ev.GetPromptTokens() == 0 {
			res.NoPrompt++
			return
		}
		reqs = append(reqs, req{at: at, id: ev.GetRequestId(), row: trace.Row{
			Timestamp: at - cfg.From.UnixMilli(), InputLength: int(ev.GetPromptTokens()), OutputLength: int(ev.GetOutputTokens()),
			CachedTokens: int(min(ev.GetCachedTokens(), ev.GetPromptTokens())), AffinityHash: fmt.Sprintf("%016x", ev.GetAffinityKeyHash()),
			Cluster: ev.GetCluster(), Stream: ev.GetStream(), EngineID: ev.GetEngineId(), TTFTms: ev.GetTtftMs(),
		}})
	})
	if err != nil {
		return res, err
	}
	for id := range arrived {
		if !finished[id] {
			res.Unfinished++
		}
	}
	sort.SliceStable(reqs, func(i, j int) bool {
		if reqs[i].at != reqs[j].at {
			return reqs[i].at < reqs[j].at
		}
		return reqs[i].id < reqs[j].id
	})
	bw := bufio.NewWriter(w)
	for _, r := range reqs {
		if err := trace.WriteRow(bw, r.row); err != nil {
			return res, err
		}
		res.Requests++
	}
	if err := bw.Flush(); err != nil {
		return res, fmt.Errorf("writing trace: %w", err)
	}
	return res, nil
}

// readRange reads every partition from its start to its end offset,
// handing each record to fn, through cl (which consumes nothing else).
func readRange(ctx context.Context, cl *kgo.Client, starts, ends map[tp]int64, fn func(*kgo.Record)) error {
	assign := map[string]map[int32]kgo.Offset{}
	left := map[tp]int64{}
	for k, s := range starts {
		if e := ends[k]; e > s {
			if assign[k.topic] == nil {
				assign[k.topic] = map[int32]kgo.Offset{}
			}
			assign[k.topic][k.partition] = kgo.NewOffset().At(s)
			left[k] = e
		}
	}
	if len(left) == 0 {
		return nil
	}
	cl.AddConsumePartitions(assign)
	defer cl.RemoveConsumePartitions(partitionsOf(assign))
	for len(left) > 0 {
		fs, quiet, err := poll(ctx, cl)
		if err != nil {
			return err
		}
		if quiet {
			return nil // the last offsets hold no records (compaction, transaction markers)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			k := tp{rec.Topic, rec.Partition}
			end, ok := left[k]
			if !ok || rec.Offset >= end {
				return
			}
			if rec.Offset+1 >= end {
				delete(left, k)
			}
			fn(rec)
		})
	}
	return nil
}

// quietPoll is how long a poll may return nothing before the partitions
// still open count as ended: their last offsets before the end hold no
// records (compaction, transaction markers), so they never report it.
const quietPoll = 5 * time.Second

// poll fetches the next records from cl. quiet is true when nothing came
// for quietPoll (fetch errors then do not matter); err is ctx's error or
// the first fetch error of a poll that was not quiet.
func poll(ctx context.Context, cl *kgo.Client) (fs kgo.Fetches, quiet bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, quietPoll)
	fs = cl.PollRecords(pctx, 10000)
	quiet = pctx.Err() != nil && fs.NumRecords() == 0
	cancel()
	if err := ctx.Err(); err != nil {
		return fs, false, err
	}
	if quiet {
		return fs, true, nil
	}
	fs.EachError(func(t string, p int32, ferr error) {
		if err == nil && !errors.Is(ferr, context.DeadlineExceeded) {
			err = fmt.Errorf("reading %s/%d: %w", t, p, ferr)
		}
	})
	return fs, quiet, err
}
