package settings_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// TestWriteReadLatest writes settings records of two processor starts
// (the second with another lateness) and one optimizer start, reads them
// back, and picks the latest in effect at a time with the count of
// distinct settings up to then.
func TestWriteReadLatest(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	ctx := context.Background()
	if recs, err := settings.ReadAll(ctx, cl, "st"); err != nil || len(recs) != 0 {
		t.Fatalf("no topic yet: %v %v", recs, err)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	proc := func(at time.Time, late int64) settings.Record {
		return settings.Record{Component: settings.Processor, Instance: "g", StartedUnixMs: at.UnixMilli(),
			Processor: &settings.ProcessorSettings{WindowMs: 30000, SlideMs: 10000, AllowedLatenessMs: late, RoutingWindowTime: settings.WindowByCompletion}}
	}
	opt := settings.Record{Component: settings.Optimizer, StartedUnixMs: t0.UnixMilli(),
		Optimizer: &plan.Settings{Clusters: []string{"us"}, EstimateTTL: time.Minute, RegionRTTms: map[string]map[string]float64{"us": {"us": 1.5}}}}
	for _, r := range []settings.Record{proc(t0, 5000), opt, proc(t0.Add(time.Minute), 5000), proc(t0.Add(2*time.Minute), 2000)} {
		if err := settings.Write(ctx, cl, "st", r); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := settings.ReadAll(ctx, cl, "st")
	if err != nil || len(recs) != 4 {
		t.Fatalf("read %d records: %v", len(recs), err)
	}
	for _, tc := range []struct {
		at       time.Time
		late     int64
		distinct int
	}{{t0.Add(90 * time.Second), 5000, 1}, {t0.Add(3 * time.Minute), 2000, 2}, {time.Time{}, 2000, 2}} {
		r, n, err := settings.Latest(recs, settings.Processor, tc.at)
		if err != nil || r.Processor.AllowedLatenessMs != tc.late || n != tc.distinct || r.Processor.AllowedLateness() != time.Duration(tc.late)*time.Millisecond {
			t.Errorf("at %v: %+v %d %v, want lateness %d and %d distinct", tc.at, r.Processor, n, err, tc.late, tc.distinct)
		}
	}
	o, _, err := settings.Latest(recs, settings.Optimizer, time.Time{})
	if err != nil || o.Optimizer.EstimateTTL != time.Minute || o.Optimizer.RegionRTTms["us"]["us"] != 1.5 {
		t.Errorf("optimizer settings %+v %v", o.Optimizer, err)
	}
	if _, _, err := settings.Latest(recs, settings.Optimizer, t0.Add(-time.Second)); !errors.Is(err, settings.ErrNone) {
		t.Errorf("before any start: err %v, want ErrNone", err)
	}
}
