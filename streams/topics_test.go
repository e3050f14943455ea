package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestEnsureTopicsContract: the topics are created as docs/topics.md
// says: partitions, cleanup policy and retention.
func TestEnsureTopicsContract(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics := streams.TopicsFor("contract")
	if err := streams.EnsureTopics(ctx, cl, topics, 4); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, topics.All()...)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topics.All()...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		partitions int
		policy     string
		retention  string
	}{
		topics.Signals:         {4, "delete", "604800000"},
		topics.RoutingEvents:   {4, "delete", "604800000"},
		topics.RoutingArrivals: {4, "delete", "604800000"},
		topics.Estimates:       {1, "compact", ""},
		topics.DeadLetter:      {4, "delete", "2592000000"},
		topics.KVEvents:        {4, "delete", "604800000"},
	}
	if len(want) != len(topics.All()) {
		t.Fatalf("the test checks %d topics, EnsureTopics creates %d", len(want), len(topics.All()))
	}
	for name, w := range want {
		if got := len(details[name].Partitions); got != w.partitions {
			t.Errorf("%s: %d partitions, want %d", name, got, w.partitions)
		}
		rc, err := cfgs.On(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil && c.Source == 1 { // DYNAMIC_TOPIC_CONFIG: set on the topic
				got[c.Key] = *c.Value
			}
		}
		if got["cleanup.policy"] != w.policy || got["retention.ms"] != w.retention {
			t.Errorf("%s: config %v, want cleanup.policy=%s retention.ms=%s", name, got, w.policy, w.retention)
		}
	}
}
