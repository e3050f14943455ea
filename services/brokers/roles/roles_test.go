package roles

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/gateway/peers"
	"github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/settings"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// TestLeastPrivilege runs each service's part of the pipeline as a user
// holding only its role's permissions (the ones docs/security.md lists):
// each does its job, and each is refused what it does not need (a
// gateway writing a snapshot, an agent writing routing events).
func TestLeastPrivilege(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	group, ckpt := "switchyard-processor", process.CheckpointTopic("")
	// The users `switchyard brokers` makes with role passwords.
	users := []brokers.User{Optimizer.User("o", "", group), Gateway.User("g", "", group), Agent.User("a", "", group),
		Processor.User("p", "", group), Reader.User("r", "", group)}
	b, err := brokers.Start(ctx, brokers.Config{KafkaPartitions: 1, Security: brokers.Security{Users: users}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.EnsureTopics(topics.All(), []string{topics.Estimates}, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Kafka.CreateTopic(ckpt, 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Kafka.CreateTopic(settings.Topic(""), 1, nil); err != nil {
		t.Fatal(err)
	}
	natsAs := func(user, pass string) jetstream.JetStream {
		t.Helper()
		nc, err := nats.Connect(b.NATSURL(), nats.UserInfo(user, pass))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	kafkaAs := func(user, pass string, opts ...kgo.Opt) *kgo.Client {
		t.Helper()
		c := connection(t, map[string]string{"SWITCHYARD_KAFKA_BROKERS": b.KafkaAddrs()[0],
			"SWITCHYARD_KAFKA_SASL": "SCRAM-SHA-256", "SWITCHYARD_KAFKA_USER": user, "SWITCHYARD_KAFKA_PASSWORD": pass})
		cl, err := c.NewKafka(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}

	t.Run("nats", func(t *testing.T) {
		store, err := snapshots.Open(ctx, natsAs("optimizer", "o"))
		if err != nil {
			t.Fatalf("optimizer opening the store: %v", err)
		}
		v := uint64(time.Now().UnixMilli())
		if err := store.Publish(ctx, &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: v,
			Clusters: []*schemas.ClusterWeights{{Cluster: "eu"}}}); err != nil {
			t.Fatalf("optimizer publishing: %v", err)
		}
		w := snapshots.NewWatcher(b.NATSURL(), "", "eu", nats.UserInfo("gateway", "g"))
		wctx, wcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		defer func() { wcancel(); <-done }()
		select {
		case <-w.Updates():
		case <-ctx.Done():
			t.Fatal("gateway watched nothing")
		}
		kv, err := natsAs("gateway", "g").KeyValue(ctx, snapshots.DefaultBucket)
		if err != nil {
			t.Fatalf("gateway binding the bucket: %v", err)
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		if _, err := kv.Put(pctx, "eu", []byte("forged")); err == nil {
			t.Fatal("gateway wrote a snapshot")
		}

		rs, err := snapshots.Lookup(ctx, natsAs("reader", "r"))
		if err != nil {
			t.Fatalf("reader looking the store up: %v", err)
		}
		if got, err := rs.Get(ctx, "eu"); err != nil || got.GetVersion() != v {
			t.Fatalf("reader reading the snapshot: %v, %v", got, err)
		}
		audited := 0
		if err := rs.ReadAudit(ctx, snapshots.AuditFrom{}, func(snapshots.AuditEntry) bool { audited++; return true }); err != nil || audited != 1 {
			t.Fatalf("reader reading the audit stream: %d entries, %v", audited, err)
		}
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		if err := rs.Publish(rctx, &schemas.WeightSnapshot{SchemaVersion: schemas.Version, Version: v + 1,
			Clusters: []*schemas.ClusterWeights{{Cluster: "eu"}}}); err == nil {
			t.Fatal("reader published a snapshot")
		}
		for _, user := range []string{"agent", "processor"} {
			actx, acancel := context.WithTimeout(ctx, time.Second)
			_, err := natsAs(user, user[:1]).KeyValue(actx, snapshots.DefaultBucket)
			acancel()
			if err == nil {
				t.Fatalf("%s bound the snapshot bucket", user)
			}
		}
	})

	t.Run("peer load", func(t *testing.T) {
		if peers.Wildcard("") != PeerLoadSubjects {
			t.Fatalf("gateway/peers subscribes to %s, the role allows %s", peers.Wildcard(""), PeerLoadSubjects)
		}
		// conn connects as user; violations gets the server's permission
		// errors, which NATS reports asynchronously.
		conn := func(user, pass string) (*nats.Conn, <-chan error) {
			t.Helper()
			violations := make(chan error, 4)
			nc, err := nats.Connect(b.NATSURL(), nats.UserInfo(user, pass), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case violations <- err:
				default:
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			return nc, violations
		}
		gwA, violA := conn("gateway", "g")
		gwB, violB := conn("gateway", "g")
		got := make(chan *nats.Msg, 1)
		if _, err := gwA.ChanSubscribe(PeerLoadSubjects, got); err != nil {
			t.Fatal(err)
		}
		if err := gwA.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := gwB.Publish(peers.Subject("", "eu"), []byte("load")); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m.Subject != "switchyard.gateway.load.eu" {
				t.Fatalf("gateway got a report on %s", m.Subject)
			}
		case err := <-violA:
			t.Fatalf("gateway subscribing to peer load: %v", err)
		case err := <-violB:
			t.Fatalf("gateway publishing peer load: %v", err)
		case <-ctx.Done():
			t.Fatal("gateway got no peer load report")
		}
		opt, violOpt := conn("optimizer", "o")
		if err := opt.Publish(peers.Subject("", "eu"), []byte("forged")); err != nil {
			t.Fatal(err)
		}
		if _, err := opt.SubscribeSync(PeerLoadSubjects); err != nil {
			t.Fatal(err)
		}
		for _, what := range []string{"publish", "subscription"} {
			select {
			case err := <-violOpt:
				if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
					t.Fatalf("optimizer on peer load: %v", err)
				}
			case <-ctx.Done():
				t.Fatalf("optimizer's %s of peer load reports was not refused", what)
			}
		}
	})

	t.Run("kafka", func(t *testing.T) {
		produce := func(cl *kgo.Client, topic string) error {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			defer pcancel()
			return cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
		}
		agent := kafkaAs("agent", "a", kgo.RequestRetries(0))
		if err := produce(agent, topics.Signals); err != nil {
			t.Fatalf("agent writing signals: %v", err)
		}
		if err := produce(agent, topics.RoutingEvents); err == nil {
			t.Fatal("agent wrote routing events")
		}
		gw := kafkaAs("gateway", "g")
		if err := produce(gw, topics.RoutingEvents); err != nil {
			t.Fatalf("gateway writing routing events: %v", err)
		}
		if err := produce(gw, topics.Estimates); err == nil {
			t.Fatal("gateway wrote estimates")
		}
		reader := kafkaAs("reader", "r", kgo.RequestRetries(0), kgo.ConsumeTopics(topics.Signals),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err := produce(reader, topics.Signals); err == nil {
			t.Fatal("reader wrote signals")
		}
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		fs := reader.PollFetches(fctx)
		fcancel()
		if err := fs.Err0(); err != nil || fs.NumRecords() == 0 {
			t.Fatalf("reader reading signals: %d records, %v", fs.NumRecords(), err)
		}
		cfg := process.Config{Window: 2 * time.Second, Slide: time.Second, AllowedLateness: 100 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)}
		p, err := process.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pcl := kafkaAs("processor", "p", p.ClientOpts()...)
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(rctx, pcl) }()
		deadline := time.Now().Add(8 * time.Second)
		for p.Stats().DeadLettered < 2 && time.Now().Before(deadline) { // both "x" records are malformed
			select {
			case err := <-done:
				t.Fatalf("processor stopped: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		rcancel()
		if err := <-done; err != nil {
			t.Fatalf("processor: %v", err)
		}
		if st := p.Stats(); st.DeadLettered != 2 || st.Checkpoints == 0 {
			t.Fatalf("processor as its role: %+v", st)
		}
	})
}

// connection parses the connection flags from env alone, as a service
// started with SWITCHYARD_* variables does.
func connection(t *testing.T, env map[string]string) cli.Connection {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var c cli.Connection
	c.Register(fs)
	if err := cli.Parse(fs, nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	return c
}
