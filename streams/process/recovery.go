package process

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// Defaults of the recovery settings (see docs/processor.md and
// docs/security.md).
const (
	// DefaultMaxClockSkew is how far ahead of the processor's clock a
	// record's event time may be; the same skew bounds snapshots at the
	// gateways.
	DefaultMaxClockSkew = trust.DefaultMaxSkew
	// DefaultSessionTimeout is the consumer group session timeout: a
	// processor that dies without leaving the group (kill -9) holds its
	// partitions this long before a restarted or standby one gets them.
	DefaultSessionTimeout = 10 * time.Second
	// leaveTimeout bounds leaving the group on shutdown.
	leaveTimeout = 2 * time.Second
	// finalCheckpointTimeout bounds the final flush and checkpoint, so
	// that with leaveTimeout and closing the client the processor exits
	// within 10s of being stopped whatever the brokers' state.
	finalCheckpointTimeout = 6 * time.Second
)

// SetClock bounds event times by the wall clock now: Handle dead-letters
// (reason future_event_time) every record whose event time is after now
// plus maxSkew, and the watermark never passes now, so a record dated
// ahead, even within the skew, cannot make real records late. The zero
// time or a negative maxSkew turns both off (replay, which has no
// clock). The processor calls it before each poll's records.
func (c *Core) SetClock(now time.Time, maxSkew time.Duration) {
	c.futureLimit, c.wmCap = 0, 0
	if !now.IsZero() && maxSkew >= 0 {
		c.futureLimit, c.wmCap = now.Add(maxSkew).UnixMilli(), now.UnixMilli()
	}
}

// checkFuture reports an event time after the future limit.
func (c *Core) checkFuture(t int64) error {
	if c.futureLimit == 0 || t <= c.futureLimit {
		return nil
	}
	return &estimate.Invalid{Code: estimate.ReasonFutureTime,
		Detail: fmt.Sprintf("event time %d ms is %v ahead of the processor's clock plus the allowed skew",
			t, time.Duration(t-c.futureLimit)*time.Millisecond)}
}

// futureLimit returns the limit for the records of a poll at now.
func (p *Processor) futureLimit(now time.Time) time.Time {
	if p.cfg.MaxClockSkew < 0 {
		return time.Time{}
	}
	return now.Add(p.cfg.MaxClockSkew)
}

// sanitize drops the window clock of a checkpoint dated beyond the
// clock plus the skew (written by a processor that let a future-dated
// record move its watermark): the windows restart from the records.
func (p *Processor) sanitize(cp Checkpoint) Checkpoint {
	if lim := p.futureLimit(time.Now()); !lim.IsZero() && (cp.Watermark > lim.UnixMilli() || cp.Next > lim.UnixMilli()) {
		p.log.Warn("checkpoint's watermark is in the future; restarting the windows from the records",
			"watermark_unix_ms", cp.Watermark, "next_window_start_unix_ms", cp.Next)
		cp.Watermark, cp.Next = 0, 0
	}
	return cp
}

// leaveGroup leaves the consumer group, waiting at most leaveTimeout, so
// that a restarted or standby processor gets the partitions at once
// rather than after the session timeout. After it the caller's Close of
// the client does not wait for the group again.
func (p *Processor) leaveGroup() {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := p.cl.LeaveGroupContext(ctx); err != nil {
		p.log.Warn("leaving the consumer group", "group", p.cfg.Group, "err", err)
		return
	}
	p.log.Info("left the consumer group", "group", p.cfg.Group)
}
