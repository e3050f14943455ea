package kvevents

// Verdict is what a sequence number means for one engine's stream.
type Verdict uint8

// Verdicts of Tracker.Observe.
const (
	// InOrder: the next sequence number; apply the batch.
	InOrder Verdict = iota + 1
	// First: the first batch seen from the engine. What it cached before
	// is unknown, so its view starts afresh here.
	First
	// Gap: batches were skipped (Missing says from which); replay them or
	// start the engine's view afresh.
	Gap
	// Restart: the sequence went back, so the engine restarted and its
	// cache is empty; start its view afresh.
	Restart
)

func (v Verdict) String() string {
	switch v {
	case InOrder:
		return "in_order"
	case First:
		return "first"
	case Gap:
		return "gap"
	case Restart:
		return "restart"
	}
	return "unknown"
}

// Tracker follows one engine's sequence numbers (vLLM numbers batches 0,
// 1, 2, ... from the publisher's start, and its PUB socket sends them in
// increasing order). It sees live batches only: the relay fetches what a
// gap skipped from the replay socket by number. The zero value has seen
// nothing. It is not safe for concurrent use.
type Tracker struct {
	next int64 // the sequence number expected next
	seen bool
}

// Next returns the sequence number expected next, and whether any was seen.
func (t *Tracker) Next() (int64, bool) { return t.next, t.seen }

// Observe classifies live sequence number seq (>= 0) and makes seq+1 the
// next expected. A number below the expected one is a Restart: a PUB
// socket never sends one again, so it comes from a new publisher (even
// above 0, when its first batches were sent before the relay's
// subscription took). For a Gap, missing is the first skipped number (the
// batches missing are missing..seq-1).
func (t *Tracker) Observe(seq int64) (v Verdict, missing int64) {
	switch {
	case !t.seen:
		v = First
	case seq == t.next:
		v = InOrder
	case seq > t.next:
		v, missing = Gap, t.next
	default:
		v = Restart
	}
	t.seen, t.next = true, seq+1
	return v, missing
}
