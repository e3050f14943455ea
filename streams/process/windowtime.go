package process

import (
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// RoutingWindowTime is how the processor windows routing events
// (recorded in its settings record).
const RoutingWindowTime = settings.WindowByCompletion

// maxCompletionAhead bounds how far a completion time may lie after the
// record's own timestamp (clock skew between a gateway and Kafka) and
// still be used as the window time.
const maxCompletionAhead = 10 * time.Second

// routingTime is the time a routing event is windowed at: its completion
// time, when the gateway produced the record. A gateway publishes a
// request's final record at completion, so records of long requests
// arrive in completion order, not start order; windowing them by start
// would make a long request late for the windows its start belongs to,
// and whether it is depends on when the processor read it (live and
// replay would differ). An arrival record (REQUEST_STATUS_IN_PROGRESS),
// produced at the request's start, has no completion time and counts at
// its event time, as does a record whose completion time is missing,
// before its event time, or more than maxCompletionAhead after the
// record's timestamp (a skewed clock).
func routingTime(ev *schemas.RoutingEvent, recordTime time.Time) int64 {
	t, c := ev.GetEventTimeUnixMs(), ev.GetCompletionTimeUnixMs()
	if c <= 0 || c < t {
		return t
	}
	if !recordTime.IsZero() && c > recordTime.Add(maxCompletionAhead).UnixMilli() {
		return t
	}
	return c
}
