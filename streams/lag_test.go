package streams_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// commit makes group consume n records of topic from its start, commit
// them and leave (the group is then Empty, its commits kept).
func commit(t *testing.T, ctx context.Context, kc *kfake.Cluster, group, topic string, n int) {
	t.Helper()
	cons := testenv.Client(t, kc, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var recs []*kgo.Record
	for len(recs) < n && ctx.Err() == nil {
		recs = append(recs, cons.PollRecords(ctx, n-len(recs)).Records()...)
	}
	if err := cons.CommitRecords(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	cons.Close()
}

// gathered is the value of reg's metric name without labels.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// lagSeries is switchyard_consumer_lag_records in reg by "group/topic".
func lagSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_consumer_lag_records" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out[l["group"]+"/"+l["topic"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestGroupLag: every group with commits on a topic under the prefix is
// measured, on those topics only: a group that committed 4 of 10 records
// lags by 6, on the metric too; a group on another topic is not
// reported; with a cap of 2 the pinned group comes first, then the
// others by name, and the rest are counted as omitted; a deleted group's
// series goes away.
func TestGroupLag(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"lg.events", "lg.signals", "elsewhere"} {
		if _, err := adm.CreateTopic(ctx, 2, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte{byte(i)}, Value: []byte{byte(i)}}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit(t, ctx, kc, "team-b", "lg.events", 4)
	commit(t, ctx, kc, "team-a", "lg.events", 10)
	commit(t, ctx, kc, "proc", "lg.signals", 7)
	commit(t, ctx, kc, "other-team", "elsewhere", 2)

	reg := prometheus.NewRegistry()
	gl, err := streams.NewGroupLag(cl, reg, streams.LagPrefix("lg"), streams.LagGroups("proc"), streams.LagMaxGroups(2))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := gl.Update(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range rep.Groups {
		if g.Err != nil {
			t.Errorf("group %s: %v", g.Group, g.Err)
		}
		got = append(got, g.Group)
	}
	if strings.Join(got, ",") != "proc,team-a" || rep.Omitted != 1 {
		t.Fatalf("groups %v, omitted %d; want proc,team-a and 1 omitted (team-b)", got, rep.Omitted)
	}
	if g := rep.Groups[0]; g.Total != 3 || len(g.Topics) != 1 || g.Topics[0] != (streams.TopicLag{Topic: "lg.signals", Lag: 3}) {
		t.Errorf("proc: %+v, want 3 on lg.signals", g)
	}
	if v := gathered(t, reg, "switchyard_consumer_lag_groups_omitted"); v != 1 {
		t.Errorf("omitted gauge %v, want 1", v)
	}
	if s := lagSeries(t, reg); len(s) != 2 || s["proc/lg.signals"] != 3 || s["team-a/lg.events"] != 0 {
		t.Fatalf("series %v, want proc/lg.signals 3 and team-a/lg.events 0", s)
	}

	// Without the cap: team-b's lag of 6, and nothing of other-team.
	all, err := streams.NewGroupLag(cl, nil, streams.LagPrefix("lg"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err = all.Update(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byGroup := map[string]int64{}
	for _, g := range rep.Groups {
		byGroup[g.Group] = g.Total
	}
	if len(byGroup) != 3 || byGroup["team-b"] != 6 || byGroup["team-a"] != 0 || byGroup["proc"] != 3 || rep.Omitted != 0 {
		t.Fatalf("lag by group %v (omitted %d), want proc 3, team-a 0, team-b 6", byGroup, rep.Omitted)
	}

	// team-a deleted: its series goes, team-b takes its place.
	if _, err := adm.DeleteGroups(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := gl.Update(ctx); err != nil {
		t.Fatal(err)
	}
	if s := lagSeries(t, reg); len(s) != 2 || s["team-b/lg.events"] != 6 || s["proc/lg.signals"] != 3 {
		t.Fatalf("after deleting team-a: series %v, want proc 3 and team-b 6 (team-a's series removed)", s)
	}
}

// TestLagMaxGroupsMustBePositive: a cap of 0 is refused.
func TestLagMaxGroupsMustBePositive(t *testing.T) {
	if _, err := streams.NewGroupLag(nil, nil, streams.LagMaxGroups(0)); err == nil {
		t.Fatal("cap 0: no error")
	}
}
