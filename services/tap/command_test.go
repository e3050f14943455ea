package tap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestTapCommand runs `switchyard tap routing-events` against a broker:
// one JSON object per record with _kafka, exit nil at the end.
func TestTapCommand(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	topics := streams.TopicsFor("cmd")
	if err := streams.EnsureTopics(ctx, cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		ev := &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: id, Tenant: "t-" + id, AffinityKeyHash: 1 << 63}
		b, _ := proto.Marshal(ev)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.RoutingEvents, Key: []byte(id), Value: b, Headers: streams.ProtoHeaders(ev)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	args := []string{"routing-events", "--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", "cmd", "--to", "end"}
	if err := run(ctx, args, &out, &errb); err != nil {
		t.Fatalf("tap: %v (%s)", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var v struct {
			Tenant string          `json:"tenant"`
			Hash   json.Number     `json:"affinity_key_hash"`
			Ttft   json.Number     `json:"ttft_ms"`
			Kafka  map[string]any  `json:"_kafka"`
			Tried  []any           `json:"tried"`
			Raw    json.RawMessage `json:"event_time_unix_ms"`
		}
		d := json.NewDecoder(strings.NewReader(l))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(v.Tenant, "t-") || v.Hash != "9223372036854775808" || v.Ttft != "0" || string(v.Raw) != "0" ||
			v.Kafka["topic"] != topics.RoutingEvents || v.Tried == nil {
			t.Errorf("line %s", l)
		}
	}
	if !strings.Contains(errb.String(), "tap: 3 records") {
		t.Errorf("stderr %q", errb.String())
	}
}

func TestTapUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"signals", "--from", "yesterday"},
		{"signals", "--follow", "--to", "end"},
		{"a", "b"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if got := Resolve("checkpoints", "p"); got != "p.processor.checkpoints" {
		t.Errorf("Resolve(checkpoints) = %q", got)
	}
	if got := Resolve("routing-arrivals", "p"); got != "p.routing.arrivals" {
		t.Errorf("Resolve(routing-arrivals) = %q", got)
	}
	if got := Resolve("settings", "p"); got != "p.settings" {
		t.Errorf("Resolve(settings) = %q", got)
	}
	if got := Resolve("my.topic", "p"); got != "my.topic" {
		t.Errorf("Resolve(my.topic) = %q", got)
	}
}
