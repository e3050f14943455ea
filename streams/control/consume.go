package control

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// consume polls the estimates topic and sends every valid estimate to
// out until ctx is done or the client is closed; an undecodable estimate,
// one without a kind or window end, or one whose window ends beyond the
// clock plus the skew (it would be planned and published as a version
// that holds every later one back) goes to the dead-letter topic.
func (o *Optimizer) consume(ctx context.Context, dlq *streams.DeadLetter, out chan<- *schemas.Estimate) {
	for {
		fetches := o.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			o.log.Warn("fetching estimates", "topic", t, "partition", p, "err", err)
		})
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			var est schemas.Estimate
			reason := decode(r.Value, &est)
			if reason == "" {
				reason = future(&est, time.Now())
			}
			if reason != "" {
				if err := dlq.Send(ctx, r, reason); err != nil {
					o.log.Warn("dead-lettering estimate", "err", err)
				}
				o.dead.Add(1)
				o.m.deadLetter.Inc()
				continue
			}
			o.estimates.Add(1)
			o.m.estimates.Inc()
			select {
			case out <- &est:
			case <-ctx.Done():
				return
			}
		}
	}
}

// decode decodes an estimate record into est and returns why it is
// invalid, or "".
func decode(b []byte, est *schemas.Estimate) string {
	switch err := proto.Unmarshal(b, est); {
	case err != nil:
		return "undecodable estimate: " + err.Error()
	case est.GetKind() == nil:
		return "estimate has no kind"
	case est.WindowEndUnixMs() <= 0:
		return "estimate has no window end"
	}
	return ""
}

// future returns why est's window end is beyond now plus
// trust.DefaultMaxSkew, or "".
func future(est *schemas.Estimate, now time.Time) string {
	if end, lim := est.WindowEndUnixMs(), now.Add(trust.DefaultMaxSkew).UnixMilli(); end > lim {
		return fmt.Sprintf("estimate window end %d ms is %v beyond the clock plus the allowed skew", end, time.Duration(end-lim)*time.Millisecond)
	}
	return ""
}
