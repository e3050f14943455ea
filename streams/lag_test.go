package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestGroupLag: a group that committed 4 of 10 records lags by 6, on
// the metric too.
func TestGroupLag(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "lagged"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "lagged", Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cons := testenv.Client(t, kc, kgo.ConsumerGroup("team"), kgo.ConsumeTopics("lagged"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var recs []*kgo.Record
	for len(recs) < 4 && ctx.Err() == nil {
		recs = append(recs, cons.PollRecords(ctx, 4-len(recs)).Records()...)
	}
	if err := cons.CommitRecords(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gl, err := streams.NewGroupLag(cl, reg, "team")
	if err != nil {
		t.Fatal(err)
	}
	lag, err := gl.Update(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lag["team"]["lagged"] != 6 {
		t.Fatalf("lag %v, want 6", lag)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "switchyard_consumer_lag_records" && len(m.GetLabel()) == 2 && m.GetGauge().GetValue() == 6 {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no switchyard_consumer_lag_records of 6 in %v", mfs)
	}
}
