package process

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

type runner struct {
	p    *Processor
	cl   *kgo.Client
	core *Core
	dlq  *streams.DeadLetter
	// alarm logs registry dead-letters (registry.go).
	alarm *alarm
	acks  *acks
	// encs encode the writer's estimates (marshalAll), one per core.
	encs []*estimate.Encoder

	// Owned by the loop.
	// counts are the outcomes of the records handled since the last
	// flushCounts, by input (0 signals, 1 routing events and arrival
	// records) and Outcome.
	counts [2][4]uint64
	// epoch numbers the batches handed to the writer; outputs produced
	// for a batch (its estimates, the dead letters before it) carry its
	// epoch, and its checkpoint waits for every epoch up to its own.
	epoch uint64
	dirty bool // dead letters since the last checkpoint
	// pendingEnd is the end of the latest fired window.
	pendingEnd int64
	// progress is when each partition last delivered a record (or was
	// first seen waiting), for the stalled-partition rule.
	progress map[tp]time.Time
	lastCkpt time.Time
}

func newRunner(p *Processor, core *Core) *runner {
	r := &runner{p: p, cl: p.cl, core: core, dlq: streams.NewDeadLetter(p.cl, p.topics.DeadLetter), alarm: newAlarm(p.log), acks: newAcks(),
		lastCkpt: time.Now(), progress: map[tp]time.Time{}}
	for range max(1, runtime.GOMAXPROCS(0)) {
		r.encs = append(r.encs, &estimate.Encoder{})
	}
	return r
}

// batch is what the loop hands the writer: fired windows to publish and
// the checkpoint taken right after they fired.
type batch struct {
	epoch uint64
	fired []firedWindow
	cp    Checkpoint
	end   int64 // end of the latest window fired so far
}

// loop consumes and handles records and fires windows; a writer
// goroutine publishes the fired windows' estimates and writes the
// checkpoints in order (see write), so consuming goes on while outputs
// are encoded, produced and acknowledged. The channel between them is
// bounded: a slow writer slows the loop down.
func (r *runner) loop(ctx context.Context) error {
	// pctx stops polling when the writer fails.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	w := r.startWriter(ctx, pcancel)
	defer w.cancel()
	r.epoch = 1
	for {
		fetches := r.cl.PollRecords(pctx, r.p.maxPoll)
		if ctx.Err() != nil {
			return r.finish(w)
		}
		if pctx.Err() != nil { // the writer failed
			return w.stop()
		}
		now := time.Now()
		fired := r.handleFetches(fetches, now)
		if len(fired) > 0 || (r.dirty && time.Since(r.lastCkpt) > time.Second) {
			if err := w.send(ctx, batch{epoch: r.epoch, fired: fired, cp: r.core.Checkpoint(), end: r.pendingEnd}); err != nil {
				_ = w.stop()
				return err
			}
			r.epoch++
			r.dirty = false
			r.lastCkpt = now
		}
	}
}

// finish ends the loop once ctx is done: it hands the writer a last
// checkpoint and waits up to finalCheckpointTimeout, in all, for it to be
// written (with the brokers gone it gives up then), unless the test hook
// noFinalCheckpoint asks for a kill.
func (r *runner) finish(w *writer) error {
	if r.p.noFinalCheckpoint {
		_ = w.stop()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalCheckpointTimeout)
	defer cancel()
	if err := w.send(ctx, batch{epoch: r.epoch, cp: r.core.Checkpoint(), end: r.pendingEnd}); err != nil {
		if ctx.Err() != nil {
			w.abandon()
		} else {
			_ = w.stop()
		}
		return fmt.Errorf("final checkpoint: %w", err)
	}
	if err := w.drain(ctx); err != nil {
		return fmt.Errorf("final checkpoint: %w", err)
	}
	return nil
}

// handleFetches folds one poll's records into the core, updates the
// counters, releases stalled partitions and returns the windows that
// fired.
func (r *runner) handleFetches(fetches kgo.Fetches, now time.Time) []firedWindow {
	p := r.p
	var fetchErr error
	fetches.EachError(func(t string, part int32, err error) {
		if fetchErr == nil && !errors.Is(err, context.Canceled) {
			fetchErr = fmt.Errorf("fetching %s/%d: %w", t, part, err)
		}
	})
	if fetchErr != nil {
		p.log.Warn("fetch error", "err", fetchErr)
	}
	r.core.SetClock(now, p.cfg.MaxClockSkew) // recovery.go
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		r.core.SetEnd(fp.Topic, fp.Partition, fp.HighWatermark)
		if len(fp.Records) > 0 {
			r.progress[tp{fp.Topic, fp.Partition}] = now
		}
		fp.EachRecord(r.handle)
	})
	r.flushCounts()
	if h := p.onHandled; h != nil && fetches.NumRecords() > 0 {
		h(fetches.NumRecords())
	}
	r.releaseStalled(now)
	fireStart := time.Now()
	fired := r.core.fire()
	r.traceFire(fireStart, fired)
	for _, f := range fired {
		r.pendingEnd = max(r.pendingEnd, f.end)
		p.fired.Add(1)
		p.m.windows.Inc()
	}
	p.m.watermark.Set(float64(r.core.Watermark().UnixMilli()) / 1000)
	p.m.openPanes.Set(float64(r.core.OpenPanes()))
	return fired
}

// writer is the writer goroutine (runner.write) as the loop sees it.
type writer struct {
	in     chan batch
	done   chan struct{}
	err    error // the writer's result, set before done closes
	cancel context.CancelFunc
	closed bool
}

// startWriter starts runner.write. The writer outlives ctx to publish
// the final checkpoint; failed runs when it stops with an error.
func (r *runner) startWriter(ctx context.Context, failed func()) *writer {
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &writer{in: make(chan batch, 2), done: make(chan struct{}), cancel: wcancel}
	go func() {
		defer close(w.done)
		if w.err = r.write(wctx, w.in); w.err != nil {
			failed()
		}
	}()
	return w
}

// send hands b to the writer, or returns the writer's error if it has
// stopped, or ctx's if it ends first (a writer stuck on brokers that are
// gone must not hold a stopping processor).
func (w *writer) send(ctx context.Context, b batch) error {
	select {
	case w.in <- b:
		return nil
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *writer) close() {
	if !w.closed {
		close(w.in)
		w.closed = true
	}
}

// stop stops the writer at once (a kill or an error) and returns its
// error.
func (w *writer) stop() error {
	w.cancel()
	w.close()
	<-w.done
	return w.err
}

// drain lets the writer finish the batches it was sent until ctx ends,
// and returns its error; when ctx ends first it abandons the writer.
func (w *writer) drain(ctx context.Context) error {
	w.close()
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		w.abandon()
		return fmt.Errorf("writer did not finish: %w", ctx.Err())
	}
}

// abandon cancels the writer without waiting for it: with the brokers
// gone it may be blocked in a produce that only closing the client
// ends (the caller closes it after Run returns).
func (w *writer) abandon() {
	w.cancel()
	w.close()
}

// stalledAfter is how long a partition may have unread records without
// delivering any before it stops holding the watermark back.
const stalledAfter = 30 * time.Second

// releaseStalled marks partitions that have had unread records but
// delivered nothing for stalledAfter as caught up (wall-clock liveness
// rule; it never applies while records flow).
func (r *runner) releaseStalled(now time.Time) {
	for _, k := range r.core.pending() {
		since, ok := r.progress[k]
		if !ok {
			r.progress[k] = now
			continue
		}
		if now.Sub(since) > stalledAfter {
			r.p.log.Warn("partition stalled; no longer holding the watermark", "topic", k.Topic, "partition", k.Partition)
			r.core.markCaughtUp(k)
			delete(r.progress, k)
		}
	}
}

func (r *runner) handle(rec *kgo.Record) {
	p := r.p
	out, reason := r.core.Handle(rec)
	in := 0
	if rec.Topic != p.topics.Signals { // routing events and arrival records
		in = 1
	}
	if int(out) < len(r.counts[in]) {
		r.counts[in][out]++ // counted in flushCounts
	}
	if out == DeadLettered {
		code, detail, _ := cutReason(reason)
		p.m.deadLetters.WithLabelValues(code).Inc()
		if registryCode(code) {
			r.alarm.note(time.Now(), keyOf(rec.Key), code, detail)
		}
		p.log.Debug("dead-lettering record", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "reason", reason)
		r.dirty = true
		r.acks.add(r.epoch, 1)
		epoch := r.epoch
		r.cl.Produce(context.Background(), r.dlq.Record(rec, reason), func(_ *kgo.Record, err error) { r.acks.done(epoch, err) })
	}
}

// flushCounts adds the outcomes counted since the last flush to the
// stats and metrics (once per poll rather than per record).
func (r *runner) flushCounts() {
	p := r.p
	for in := range r.counts {
		for out, n := range r.counts[in] {
			if n == 0 {
				continue
			}
			p.m.outcomes[in][out].Add(float64(n))
			switch Outcome(out) {
			case Accepted:
				if in == 0 {
					p.signals.Add(n)
				} else {
					p.routing.Add(n)
				}
			case Late:
				p.lateN.Add(n)
			case DeadLettered:
				p.dead.Add(n)
			}
		}
	}
	r.counts = [2][4]uint64{}
}

func cutReason(reason string) (code, detail string, ok bool) {
	for i := 0; i+1 < len(reason); i++ {
		if reason[i] == ':' && reason[i+1] == ' ' {
			return reason[:i], reason[i+2:], true
		}
	}
	return reason, "", false
}
