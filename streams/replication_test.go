package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestEnsureTopicsReplicated: on a three-broker cluster, EnsureTopics with
// Replication{3, 2} creates every topic with three replicas per partition
// and min.insync.replicas 2; without it (the single-broker default) the
// topic carries no min.insync.replicas of its own.
func TestEnsureTopicsReplicated(t *testing.T) {
	kc := testenv.Kafka(t, kfake.NumBrokers(3))
	cl := testenv.Client(t, kc)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ha, plain := streams.TopicsFor("ha"), streams.TopicsFor("plain")
	if err := streams.EnsureTopics(ctx, cl, ha, 3, streams.Replication{Factor: 3, MinInsync: 2}); err != nil {
		t.Fatal(err)
	}
	if err := streams.EnsureTopics(ctx, cl, plain, 3); err != nil {
		t.Fatal(err)
	}
	details, err := adm.ListTopics(ctx, append(ha.All(), plain.All()...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ha.All() {
		d := details[name]
		if d.Err != nil || len(d.Partitions) == 0 {
			t.Fatalf("topic %s: %v, %d partitions", name, d.Err, len(d.Partitions))
		}
		for _, p := range d.Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("topic %s partition %d: replicas %v, want 3", name, p.Partition, p.Replicas)
			}
		}
	}
	configs, err := adm.DescribeTopicConfigs(ctx, append(ha.All(), plain.All()...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range configs {
		want := ""
		if _, isHA := map[string]bool{ha.Signals: true, ha.RoutingEvents: true, ha.Estimates: true, ha.DeadLetter: true}[rc.Name]; isHA {
			want = "2"
		}
		got := ""
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" && c.Value != nil && c.Source == 1 { // DYNAMIC_TOPIC_CONFIG: set on the topic
				got = *c.Value
			}
		}
		if got != want {
			t.Errorf("topic %s: min.insync.replicas set on the topic %q, want %q", rc.Name, got, want)
		}
	}
	if err := streams.CreateTopic(ctx, cl, "bad", 1, nil, streams.Replication{Factor: 2, MinInsync: 3}); err == nil {
		t.Error("min.insync.replicas 3 over factor 2: no error")
	}
}
