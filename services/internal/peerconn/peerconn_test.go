package peerconn

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/gateway/peers"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start"),
	)
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// inbox collects the payloads a subscription delivers.
type inbox struct {
	mu   sync.Mutex
	msgs []string
}

func (b *inbox) add(data []byte) {
	b.mu.Lock()
	b.msgs = append(b.msgs, string(data))
	b.mu.Unlock()
}

func (b *inbox) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.msgs)
}

// TestSubscribeDeliversPayloadsUntilUnsubscribed: Subscribe hands fn
// every payload published on the subject, in order, and none after
// Unsubscribe; the Subscription carries the hooks a Sharer bounds and
// counts it by (pending limits, drops).
func TestSubscribeDeliversPayloadsUntilUnsubscribed(t *testing.T) {
	srv := testenv.NATS(t)
	c := New(connect(t, srv.ClientURL()))
	pub := New(connect(t, srv.ClientURL()))
	var got, witness inbox
	sub, err := c.Subscribe("s", got.add)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sub.(interface{ SetPendingLimits(int, int) error }); !ok {
		t.Error("subscription has no SetPendingLimits: a Sharer cannot bound it")
	}
	if _, ok := sub.(interface{ Dropped() (int, error) }); !ok {
		t.Error("subscription has no Dropped: a Sharer cannot count its drops")
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b", "c"} {
		if err := pub.Publish("s", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return slices.Equal(got.get(), []string{"a", "b", "c"}) }, "a, b, c delivered in order")

	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Subscribe("s", witness.add); err != nil {
		t.Fatal(err)
	}
	if err := pub.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("s", []byte("late")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return len(witness.get()) == 1 }, "the late message reaches another subscriber")
	if err := c.nc.Flush(); err != nil { // anything in flight to c arrives first
		t.Fatal(err)
	}
	if m := got.get(); len(m) != 3 {
		t.Fatalf("after Unsubscribe: got %q, want only a, b, c", m)
	}
}

// TestConnectionHooks: IsConnected and MaxPayload are the connection's,
// so a Sharer neither publishes while it is down nor sends reports the
// server would refuse.
func TestConnectionHooks(t *testing.T) {
	srv := testenv.NATS(t)
	nc := connect(t, srv.ClientURL())
	c := New(nc)
	if !c.IsConnected() {
		t.Fatal("connected, but IsConnected is false")
	}
	if got, want := c.MaxPayload(), nc.MaxPayload(); got != want || got <= 0 {
		t.Fatalf("MaxPayload %d, want the server's %d", got, want)
	}
	nc.Close()
	if c.IsConnected() {
		t.Fatal("closed, but IsConnected is true")
	}
}

// TestSharersThroughAdapter: two Sharers, each on its own adapted
// connection, see each other's queued prefill, as the gateway and demo
// services run them.
func TestSharersThroughAdapter(t *testing.T) {
	srv := testenv.NATS(t)
	specs := []pick.Spec{{ID: "x", URL: "http://x", Weight: 1}}
	poolA, poolB := pick.NewPool(), pick.NewPool()
	tableA, err := poolA.Build(specs, pick.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := poolB.Build(specs, pick.Options{}); err != nil {
		t.Fatal(err)
	}
	cfg := func(id string) peers.Config {
		return peers.Config{Cluster: "eu", ID: id, Interval: 20 * time.Millisecond}
	}
	a, err := peers.New(New(connect(t, srv.ClientURL())), poolA, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := peers.New(New(connect(t, srv.ClientURL())), poolB, cfg("b"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- a.Run(ctx) }()
	go func() { done <- b.Run(ctx) }()
	tableA.PickRequest(&pick.Request{Key: 1, PromptTokens: 5_000}, nil)
	xB, _ := poolB.Lookup("x")
	testenv.Eventually(t, 5*time.Second, func() bool { return xB.ForeignPrefill() == 5_000 }, "B sees A's 5,000 queued tokens on x")
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
