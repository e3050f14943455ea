package process

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// TestRedeliveredRecordsCountOnce: when the group hands a partition back
// at its committed offset, which trails what the core has handled (a
// rebalance, or brokers restarted under a running processor), the records
// delivered again are Replayed and not folded in twice: the estimates are
// byte-identical to a run that read every record once, and the demand
// counts every request once. (Found by TestFaultInjection's brokers kill:
// +26 requests on 52.)
func TestRedeliveredRecordsCountOnce(t *testing.T) {
	topics := streams.TopicsFor("redelivery")
	spec := window.Spec{Size: 4 * time.Second, Slide: 2 * time.Second, AllowedLateness: time.Second}
	var recs []*kgo.Record
	offs := map[int32]int64{}
	for i := range 120 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		part := int32(i % 2)
		recs = append(recs, &kgo.Record{Topic: topics.RoutingEvents, Partition: part, Offset: offs[part],
			Value: mustMarshal(routing("us", "e1", at, i)), Timestamp: at})
		offs[part]++
		if i%20 == 0 {
			recs = append(recs, &kgo.Record{Topic: topics.Signals, Partition: 0, Offset: offs[9],
				Value: mustMarshal(signal("e1", "h100", at, 4, 10)), Timestamp: at})
			offs[9]++
		}
	}
	run := func(redeliverAt int) ([]byte, uint32, int) {
		core, err := NewCore(topics, spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		var (
			out      bytes.Buffer
			requests uint32
			replayed int
		)
		emit := func(fired []Fired) {
			for _, f := range fired {
				for _, e := range f.Estimates {
					b, err := estimate.Marshal(e)
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&out, "%d %s %x\n", f.End, estimate.Key(e), b)
					if d := e.GetDemand(); d != nil && d.GetWindowStartUnixMs()%spec.Size.Milliseconds() == 0 {
						requests += d.GetRequestCount() // the windows that do not overlap
					}
				}
			}
		}
		for i, r := range recs {
			core.Handle(r)
			if i%25 == 24 {
				emit(core.Fire())
			}
			if i == redeliverAt { // partition 1 handed back at offset 10
				for _, again := range recs[:i+1] {
					if again.Topic == topics.RoutingEvents && again.Partition == 1 && again.Offset >= 10 {
						replayed++
						if o, _ := core.Handle(again); o != Replayed {
							t.Errorf("%s/%d@%d delivered again: outcome %d, want Replayed", again.Topic, again.Partition, again.Offset, o)
						}
					}
				}
			}
		}
		emit(core.Fire())
		return out.Bytes(), requests, replayed
	}
	want, wantRequests, _ := run(-1)
	got, gotRequests, replayed := run(80)
	if replayed == 0 {
		t.Fatal("no record was delivered again")
	}
	if gotRequests != wantRequests {
		t.Errorf("demand counts %d requests with %d records delivered again, %d without", gotRequests, replayed, wantRequests)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("estimates differ when %d records are delivered again", replayed)
	}
}

// replacedLogCore is a core of 2-s windows over topics named for name,
// and rec the routing event i (100 ms apart) at offset off of partition 0.
func replacedLogCore(t *testing.T, name string) (*Core, streams.Topics, func(i int, off int64) *kgo.Record) {
	t.Helper()
	topics := streams.TopicsFor(name)
	core, err := NewCore(topics, window.Spec{Size: 2 * time.Second, Slide: 2 * time.Second, AllowedLateness: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(i int, off int64) *kgo.Record {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		return &kgo.Record{Topic: topics.RoutingEvents, Offset: off, Value: mustMarshal(routing("us", "e1", at, i)), Timestamp: at}
	}
	return core, topics, rec
}

// TestReplacedLogCounts: a log end below the offset already handled means
// the partition's log was replaced (brokers restarted without their data),
// so its records, from offset 0 again, are new and count.
func TestReplacedLogCounts(t *testing.T) {
	core, topics, rec := replacedLogCore(t, "replaced")
	for i := range 10 {
		core.Handle(rec(i, int64(i)))
	}
	core.SetEnd(topics.RoutingEvents, 0, 3) // the log now ends at 3: replaced
	for i := range 3 {
		if out, _ := core.Handle(rec(10+i, int64(i))); out != Accepted {
			t.Errorf("record %d of the replaced log: outcome %d, want Accepted", i, out)
		}
	}
	if out, _ := core.Handle(rec(13, 1)); out != Replayed {
		t.Errorf("record 1 of the replaced log delivered again: outcome %d, want Replayed", out)
	}
}

// TestReplacedLogOfOneRecordCounts: a replaced log that holds exactly
// one record (its end is 1) is replaced too: that record is new.
func TestReplacedLogOfOneRecordCounts(t *testing.T) {
	core, topics, rec := replacedLogCore(t, "replaced1")
	for i := range 5 {
		core.Handle(rec(i, int64(i)))
	}
	core.SetEnd(topics.RoutingEvents, 0, 1)
	if out, _ := core.Handle(rec(5, 0)); out != Accepted {
		t.Errorf("the one record of the replaced log: outcome %d, want Accepted", out)
	}
}
