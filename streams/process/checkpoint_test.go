package process

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
)

func TestReadCheckpoint(t *testing.T) {
	kc := testenv.Kafka(t)
	ctx := context.Background()
	s, _ := newProcessor(t, kc, Config{TopicPrefix: "ckpt"})
	cl := testenv.Client(t, kc)
	if err := s.ensureTopics(ctx); err != nil {
		t.Fatal(err)
	}
	topic := CheckpointTopic("ckpt")
	if _, found, err := readCheckpoint(ctx, cl, topic, "a"); err != nil || found {
		t.Fatalf("empty topic: found %v, err %v", found, err)
	}
	var recs []*kgo.Record
	for i := range 300 {
		g := []string{"a", "b", "c"}[i%3]
		if i > 200 && g == "b" {
			continue // b's latest is older
		}
		v, _ := json.Marshal(Checkpoint{Version: 1, Watermark: int64(i)})
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(g), Value: v})
	}
	for _, r := range recs[:150] { // several produce batches
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.ProduceSync(ctx, recs[150:]...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		group string
		found bool
		wm    int64
	}{{"a", true, 297}, {"b", true, 199}, {"c", true, 299}, {"d", false, 0}} {
		cp, found, err := readCheckpoint(ctx, cl, topic, tc.group)
		if err != nil || found != tc.found || cp.Watermark != tc.wm {
			t.Errorf("group %s: watermark %d found %v err %v; want %d %v", tc.group, cp.Watermark, found, err, tc.wm, tc.found)
		}
	}
}

// TestReadCheckpointSkipsGarbage: a record under the group's key that is
// not a checkpoint (written by anyone with produce rights) neither fails
// the read nor hides the checkpoints around it.
func TestReadCheckpointSkipsGarbage(t *testing.T) {
	kc := testenv.Kafka(t)
	ctx := context.Background()
	s, _ := newProcessor(t, kc, Config{TopicPrefix: "ckptg"})
	cl := testenv.Client(t, kc)
	if err := s.ensureTopics(ctx); err != nil {
		t.Fatal(err)
	}
	topic := CheckpointTopic("ckptg")
	put := func(group, value string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(group), Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put("a", `{"version":1,"watermark_unix_ms":5}`)
	put("a", `{not json`)
	put("b", "\xff\x00garbage")
	put("c", `{"version":1,"watermark_unix_ms":7}`)
	put("c", "")
	put("c", `{"version":1,"watermark_unix_ms":9}`)
	for _, tc := range []struct {
		group string
		found bool
		wm    int64
	}{{"a", true, 5}, {"b", false, 0}, {"c", true, 9}} {
		cp, found, err := readCheckpoint(ctx, cl, topic, tc.group)
		if err != nil || found != tc.found || cp.Watermark != tc.wm {
			t.Errorf("group %s: watermark %d found %v err %v; want %d %v", tc.group, cp.Watermark, found, err, tc.wm, tc.found)
		}
	}
}
