package gateway

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

func openStore(t *testing.T, url string) *snapshots.Store {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// watch runs a watcher of cluster's snapshots on the NATS server at url
// until the test ends (after the gateway, which is started later).
func watch(t *testing.T, url, cluster string) *snapshots.Watcher {
	t.Helper()
	w := snapshots.NewWatcher(url, "", cluster)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	return w
}

// kafkaOpts wire a gateway to kc as the service does: routing events
// through an emitter, engine signals followed, on topics under prefix.
// The clients stop after the gateway (which is started later).
func kafkaOpts(t *testing.T, kc *kfake.Cluster, prefix string) []Opt {
	t.Helper()
	topics := streams.TopicsFor(prefix)
	prod := testenv.Client(t, kc, streams.EmitterProduceOpts(0)...)
	sig := testenv.Client(t, kc, streams.FollowOpts(topics.Signals, time.Now().Add(-SignalLookback))...)
	em, err := streams.NewEmitter(prod, topics.RoutingEvents, "gateway", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("emitter: %v", err)
		}
	})
	return []Opt{Events(em), Signals(streams.NewPoller(sig))}
}

func publish(t *testing.T, st *snapshots.Store, snap *schemas.WeightSnapshot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Publish(ctx, snap); err != nil {
		t.Fatal(err)
	}
}

// engineOf sends one request and returns the engine that served it.
func engineOf(t *testing.T, base string) string {
	t.Helper()
	status, h, body := post(t, context.Background(), base, chatBody(false, "x"), nil)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	return h.Get(HeaderEngine)
}

// TestStaticStabilityAcrossNATSOutage: the gateway starts on its static
// engines, applies snapshots from NATS, rejects a bad one, keeps routing
// on the last good snapshot while NATS is down, and applies a new one
// once NATS is back on the same port and store, without a restart.
func TestStaticStabilityAcrossNATSOutage(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	ns, err := brokers.StartNATS(ctx, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	g, base := startGateway(t, Snapshots(watch(t, url, "us-east")), Engines(static(a)...))
	if e := engineOf(t, base); e != "a" {
		t.Fatalf("fallback routed to %q", e)
	}
	st := openStore(t, url)
	publish(t, st, snapshot(1, "us-east", 0, map[*fakeEngine]float64{a: 0, b: 1}))
	testenv.Eventually(t, 10*time.Second, func() bool { return g.Stats().SnapshotVersion == 1 }, "snapshot 1 not applied")
	if e := engineOf(t, base); e != "b" {
		t.Fatalf("snapshot 1 routed to %q", e)
	}
	publish(t, st, snapshot(2, "us-east", 0, map[*fakeEngine]float64{a: 0.2, b: 0.2})) // sums to 0.4
	testenv.Eventually(t, 10*time.Second, func() bool {
		return counter(g.m.rejected.WithLabelValues("us-east", "invalid")) == 1
	}, "bad snapshot not rejected")
	if v := g.Stats().SnapshotVersion; v != 1 {
		t.Fatalf("holding %d after a bad snapshot, want 1", v)
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	for i := 0; i < 5; i++ {
		if e := engineOf(t, base); e != "b" {
			t.Fatalf("NATS down: routed to %q", e)
		}
	}

	t1 := time.Now()
	ns, err = brokers.StartNATS(ctx, fmt.Sprintf("127.0.0.1:%d", port), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NATS restarted in %v", time.Since(t1))
	st = openStore(t, url)
	publish(t, st, snapshot(3, "us-east", 0, map[*fakeEngine]float64{a: 1, b: 0}))
	t0 := time.Now()
	testenv.Eventually(t, 30*time.Second, func() bool { return g.Stats().SnapshotVersion == 3 }, "snapshot 3 not applied after NATS restart")
	t.Logf("snapshot 3 applied %v after publishing", time.Since(t0))
	if e := engineOf(t, base); e != "a" {
		t.Fatalf("snapshot 3 routed to %q", e)
	}
}

// TestRoutingEventsToKafka: one RoutingEvent per request, keyed by
// cluster, with TTFT, TBOT and token counts from the engine's usage.
func TestRoutingEventsToKafka(t *testing.T) { forEachServer(t, testRoutingEventsToKafka) }

func testRoutingEventsToKafka(t *testing.T, server string) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("sy")
	admin := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := streams.EnsureTopics(ctx, admin, topics, 1); err != nil {
		t.Fatal(err)
	}
	e := newFakeEngine(t, "a")
	e.delay = 2 * time.Millisecond
	_, base := startGateway(t, append(kafkaOpts(t, kc, "sy"), HTTPServer(server), Engines(static(e)...))...)
	for i := 0; i < 3; i++ {
		if s, _, body := post(t, ctx, base, chatBody(true, "x"), nil); s != 200 {
			t.Fatalf("%d %s", s, body)
		}
	}
	post(t, ctx, base, `{"model":`, nil) // a client error is an event too
	cons := testenv.Client(t, kc, kgo.ConsumeTopics(topics.RoutingEvents), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var evs []*schemas.RoutingEvent
	for len(evs) < 4 && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			var ev schemas.RoutingEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				t.Errorf("bad event: %v", err)
			}
			if string(r.Key) != ev.GetRequestId() || ev.GetRequestId() == "" { // spread over partitions
				t.Errorf("key %q, request id %q", r.Key, ev.GetRequestId())
			}
			if len(r.Headers) != 2 || string(r.Headers[1].Value) != "switchyard.v1.RoutingEvent" {
				t.Errorf("headers %v", r.Headers)
			}
			evs = append(evs, &ev)
		})
	}
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4", len(evs))
	}
	ok := 0
	for _, ev := range evs {
		if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR {
			if ev.GetHttpStatus() != 400 {
				t.Errorf("client error event %v", ev)
			}
			continue
		}
		ok++
		if ev.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_OK || ev.GetEngineId() != "a" || ev.GetCluster() != "us-east" ||
			ev.GetTtftMs() <= 0 || ev.GetMeanTbotMs() <= 0 || ev.GetE2EMs() < ev.GetTtftMs() || ev.GetOutputTokens() != 5 || ev.GetPromptTokens() != 11 ||
			ev.GetCachedTokens() != 4 || ev.GetRequestId() == "" || ev.GetAttempts() != 1 || !ev.GetStream() || ev.GetModel() != "sim" ||
			ev.GetSchemaVersion() != schemas.Version || ev.GetDecisionReason() != "fallback" || ev.GetHttpStatus() != 200 {
			t.Errorf("event %v", ev)
		}
	}
	if ok != 3 {
		t.Errorf("%d ok events, want 3", ok)
	}
}

// TestOpenAISDKStreaming drives a streaming chat completion through the
// gateway with the official OpenAI Go SDK.
func TestOpenAISDKStreaming(t *testing.T) { forEachServer(t, testOpenAISDKStreaming) }

func testOpenAISDKStreaming(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "sim",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != "t0 t1 t2 t3 t4 " {
		t.Fatalf("content %q", got)
	}
	if acc.Usage.CompletionTokens != 5 {
		t.Errorf("usage %+v", acc.Usage)
	}
	// And an error the SDK understands: the engine's 400, passed through.
	e.setMode("400")
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var apiErr *openai.Error
	if err == nil || !asAPIError(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "bad prompt") {
		t.Fatalf("want the engine's 400 API error, got %v", err)
	}
}

// TestSignalsGuardrail: an engine whose signals say unhealthy gets no
// traffic until its signals say healthy again.
func TestSignalsGuardrail(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("sig")
	prod := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := streams.EnsureTopics(ctx, prod, topics, 1); err != nil {
		t.Fatal(err)
	}
	a, b := newFakeEngine(t, "a"), newFakeEngine(t, "b")
	snap := snapshot(1, "us-east", 0, map[*fakeEngine]float64{a: 0.5, b: 0.5})
	g, base := startGateway(t, append(kafkaOpts(t, kc, "sig"), InitialSnapshot(snap))...)
	send := func(h schemas.Health, ready uint32) {
		v, _ := proto.Marshal(&schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "a", Health: h, ReadyReplicas: ready, EventTimeUnixMs: time.Now().UnixMilli()})
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Signals, Key: []byte("a"), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	stA, _ := g.pool.Lookup("a")
	send(schemas.Health_HEALTH_UNHEALTHY, 1)
	testenv.Eventually(t, 10*time.Second, stA.SignalDown, "unhealthy signal not applied")
	for i := 0; i < 20; i++ {
		if e := engineOf(t, base); e != "b" {
			t.Fatalf("routed to %q while a is unhealthy", e)
		}
	}
	send(schemas.Health_HEALTH_HEALTHY, 0)
	testenv.Eventually(t, 10*time.Second, func() bool { return counter(g.m.signals.WithLabelValues("us-east", "applied")) >= 2 }, "second signal not applied")
	if !stA.SignalDown() {
		t.Fatal("no ready replicas: still routable")
	}
	send(schemas.Health_HEALTH_HEALTHY, 2)
	testenv.Eventually(t, 10*time.Second, func() bool { return !stA.SignalDown() }, "healthy signal not applied")
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Signals, Value: []byte{0xff}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return counter(g.m.signals.WithLabelValues("us-east", "malformed")) == 1 }, "malformed signal not counted")
}
