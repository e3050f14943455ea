package peers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/testenv"
)

// TestHearsOnlyPeerClusters: on a real NATS server, gateway A (cluster
// a) hears gateway B (cluster b) only while A's peer clusters contain b,
// hears C (cluster c) while they contain c, and hears both through the
// wildcard while it has no peer clusters (before any snapshot).
func TestHearsOnlyPeerClusters(t *testing.T) {
	srv := testenv.NATS(t)
	const interval, staleness = 20 * time.Millisecond, 200 * time.Millisecond
	var heard atomic.Pointer[[]string]
	set := func(cs ...string) { heard.Store(&cs) }
	poolA, _ := pool(t)
	a, err := New(connect(t, srv.ClientURL()), poolA, Config{Cluster: "a", ID: "A", Interval: interval, Staleness: staleness,
		PeerClusters: func() []string {
			if p := heard.Load(); p != nil {
				return *p
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	peer := func(cluster, id, engine string, prompt int) *Sharer {
		p, tb := pool(t)
		queue(t, tb, engine, prompt)
		s, err := New(connect(t, srv.ClientURL()), p, Config{Cluster: cluster, ID: id, Interval: interval, Staleness: staleness})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b := peer("b", "B", "x", 1000)
	c := peer("c", "C", "y", 2000)
	ctx, cancel := context.WithCancel(context.Background())
	var dones []chan error
	for _, s := range []*Sharer{a, b, c} {
		done := make(chan error, 1)
		dones = append(dones, done)
		go func() { done <- s.Run(ctx) }()
	}
	defer func() {
		cancel()
		for _, d := range dones {
			if err := <-d; err != nil {
				t.Error(err)
			}
		}
	}()
	x, _ := poolA.Lookup("x")
	y, _ := poolA.Lookup("y")
	subjects := func(want ...string) {
		t.Helper()
		eventually(t, func() bool { return slices.Equal(a.Subjects(), want) }, "A subscribes to "+strings.Join(want, " "))
	}
	// quiet: x stays 0 while A applies 20 more reports (C's, every
	// interval), so B's reports, sent as often, do not reach A.
	quiet := func() {
		t.Helper()
		from := value(a.m.received)
		eventually(t, func() bool {
			if x.ForeignPrefill() != 0 {
				t.Fatalf("A heard B's %d tokens on x with b not among its peer clusters", x.ForeignPrefill())
			}
			return value(a.m.received) >= from+20
		}, "A keeps hearing C")
	}

	subjects("switchyard.gateway.load.>")
	eventually(t, func() bool { return x.ForeignPrefill() == 1000 && y.ForeignPrefill() == 2000 }, "A hears B and C through the wildcard")

	set("a", "c")
	subjects("switchyard.gateway.load.a", "switchyard.gateway.load.c")
	eventually(t, func() bool { return x.ForeignPrefill() == 0 }, "B's report expires once A stops hearing b")
	quiet()
	if y.ForeignPrefill() != 2000 {
		t.Fatalf("y at A %d, want C's 2000", y.ForeignPrefill())
	}

	set("a", "b")
	subjects("switchyard.gateway.load.a", "switchyard.gateway.load.b")
	eventually(t, func() bool { return x.ForeignPrefill() == 1000 && y.ForeignPrefill() == 0 }, "A hears B again, and C's report expires")

	set()
	subjects("switchyard.gateway.load.>")
	eventually(t, func() bool { return x.ForeignPrefill() == 1000 && y.ForeignPrefill() == 2000 }, "A hears both through the wildcard again")
}

// TestFollowSubjects: the subjects subscribed for a set of peer clusters
// are the clusters' and the gateway's own, sanitized and deduplicated;
// the wildcard with none or more than MaxSubscriptions; and a repeated
// set subscribes nothing anew.
func TestFollowSubjects(t *testing.T) {
	s, _, _ := sharer(t, Config{Cluster: "eu.west", Prefix: "p", MaxSubscriptions: 3})
	for _, tc := range []struct {
		clusters []string
		want     []string
	}{
		{nil, []string{"p.gateway.load.>"}},
		{[]string{"eu.west", "us*"}, []string{"p.gateway.load.eu_west", "p.gateway.load.us_"}},
		{[]string{"us>", "us*", "ap"}, []string{"p.gateway.load.ap", "p.gateway.load.eu_west", "p.gateway.load.us_"}},
		{[]string{"a", "b", "c"}, []string{"p.gateway.load.>"}}, // 4 subjects with its own
		{[]string{}, []string{"p.gateway.load.>"}},
		{[]string{"ap"}, []string{"p.gateway.load.ap", "p.gateway.load.eu_west"}},
		{[]string{}, []string{"p.gateway.load.>"}},
	} {
		if err := s.follow(tc.clusters, tc.clusters == nil); err != nil {
			t.Fatal(err)
		}
		if got := s.Subjects(); !slices.Equal(got, tc.want) {
			t.Errorf("peer clusters %q: subjects %q, want %q", tc.clusters, got, tc.want)
		}
	}
	before := s.subs["p.gateway.load.>"]
	if err := s.follow([]string{}, false); err != nil || s.subs["p.gateway.load.>"] != before {
		t.Fatalf("the same set again resubscribed (err %v)", err)
	}
}

// failConn fails subscriptions to one subject while fail is set.
type failConn struct {
	recorder
	subject string
	fail    bool
}

func (c *failConn) Subscribe(subject string, fn func([]byte)) (Subscription, error) {
	if c.fail && subject == c.subject {
		return nil, errors.New("refused")
	}
	return c.recorder.Subscribe(subject, fn)
}

// TestFollowRetriesFailedSubscription: a subscription that fails keeps
// the old ones (so the gateway still hears its peers) and is retried on
// the next call; at Run's start it is an error.
func TestFollowRetriesFailedSubscription(t *testing.T) {
	p, _ := pool(t)
	c := &failConn{subject: "switchyard.gateway.load.b", fail: true}
	s, err := New(c, p, Config{Cluster: "a", ID: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.follow([]string{"a", "c"}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.follow([]string{"a", "b"}, false); err == nil {
		t.Fatal("subscribing to b failed without an error")
	}
	if got, want := s.Subjects(), []string{"switchyard.gateway.load.a", "switchyard.gateway.load.c"}; !slices.Equal(got, want) {
		t.Fatalf("after a failure: subjects %q, want the old %q", got, want)
	}
	c.fail = false
	if err := s.follow([]string{"a", "b"}, false); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Subjects(), []string{"switchyard.gateway.load.a", "switchyard.gateway.load.b"}; !slices.Equal(got, want) {
		t.Fatalf("on retry: subjects %q, want %q", got, want)
	}
	c.fail = true
	s2, err := New(c, p, Config{Cluster: "a", ID: "me", Registerer: prometheus.NewRegistry(), PeerClusters: func() []string { return []string{"b"} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Run with its first subscription refused: %v", err)
	}
}
