package peers

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start"),
	)
}

// pool returns a pool routing to engines x and y, with weights 1.
func pool(t *testing.T) (*pick.Pool, *pick.Table) {
	t.Helper()
	p := pick.NewPool()
	tb, err := p.Build([]pick.Spec{{ID: "x", URL: "http://x", Weight: 1}, {ID: "y", URL: "http://y", Weight: 1}}, pick.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p, tb
}

// queue places a request of prompt tokens on engine id of tb and
// returns the ticket and the engine's index.
func queue(t *testing.T, tb *pick.Table, id string, prompt int) (int, pick.Ticket) {
	t.Helper()
	i := tb.Index(id)
	other := int32(1 - i)
	j, _, tk := tb.PickRequest(&pick.Request{Key: 7, PromptTokens: prompt}, []int32{other})
	if j != i {
		t.Fatalf("placed on %d, want %d", j, i)
	}
	return i, tk
}

// connect returns a connection to the NATS server at url as a Conn.
func connect(t *testing.T, url string) natsConn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return natsConn{nc}
}

// natsConn is a *nats.Conn as a Conn, as internal/peerconn adapts it for
// the services (which imports peers, so its tests cannot use it); its
// subscriptions are *nats.Subscription.
type natsConn struct{ *nats.Conn }

func (c natsConn) Subscribe(subject string, fn func([]byte)) (Subscription, error) {
	sub, err := c.Conn.Subscribe(subject, func(m *nats.Msg) { fn(m.Data) })
	if err != nil {
		return nil, err
	}
	return sub, nil
}

func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, cond, msg)
}

// TestSharersOverNATS: two gateways' Sharers on a real NATS server. B's
// state of engine x gets the prefill A has queued there within a few
// intervals, goes back to 0 when A's request has its first token, and
// drops A's report after the staleness bound once A stops publishing.
func TestSharersOverNATS(t *testing.T) {
	srv := testenv.NATS(t)
	const interval, staleness = 20 * time.Millisecond, 300 * time.Millisecond
	poolA, tableA := pool(t)
	poolB, _ := pool(t)
	cfg := func(id string) Config {
		return Config{Cluster: "eu.west", ID: id, Interval: interval, Staleness: staleness}
	}
	a, err := New(connect(t, srv.ClientURL()), poolA, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(connect(t, srv.ClientURL()), poolB, cfg("b"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(s *Sharer, ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		return done
	}
	actx, stopA := context.WithCancel(ctx)
	doneA, doneB := run(a, actx), run(b, ctx)
	xB, _ := poolB.Lookup("x")
	yB, _ := poolB.Lookup("y")
	xA, _ := poolA.Lookup("x")

	i, tk := queue(t, tableA, "x", 100_000)
	start := time.Now()
	eventually(t, func() bool { return xB.ForeignPrefill() == 100_000 }, "B sees A's 100,000 queued tokens on x")
	t.Logf("B saw A's queue after %v (interval %v)", time.Since(start), interval)
	if yB.ForeignPrefill() != 0 || xA.ForeignPrefill() != 0 {
		t.Fatalf("foreign prefill y at B %d, x at A %d; want 0 (A queued only on x, and ignores itself)", yB.ForeignPrefill(), xA.ForeignPrefill())
	}
	eventually(t, func() bool { return a.Peers() == 1 && b.Peers() == 1 }, "each tracks the other")

	tableA.FirstToken(i, tk, 50)
	eventually(t, func() bool { return xB.ForeignPrefill() == 0 }, "B sees A's queue drained")

	queue(t, tableA, "x", 30_000)
	eventually(t, func() bool { return xB.ForeignPrefill() == 30_000 }, "B sees A's new queue")
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("A: %v", err)
	}
	stopped := time.Now()
	if xA.ForeignPrefill() != 0 {
		t.Fatal("A left foreign prefill set after it stopped")
	}
	eventually(t, func() bool { return xB.ForeignPrefill() == 0 }, "B drops A's report after the staleness bound")
	t.Logf("B dropped A's report %v after A stopped (staleness %v)", time.Since(stopped), staleness)
	if got := value(b.m.received); got < 3 {
		t.Fatalf("B received %v reports, want at least 3", got)
	}
	cancel()
	if err := <-doneB; err != nil {
		t.Fatalf("B: %v", err)
	}
}

// sharer builds a Sharer for direct calls (no Run) on engines x and y
// with a clock the test sets.
func sharer(t *testing.T, cfg Config) (*Sharer, *pick.Pool, *time.Time) {
	t.Helper()
	p, _ := pool(t)
	now := time.Unix(1_000, 0)
	if cfg.Cluster == "" {
		cfg.Cluster = "eu"
	}
	if cfg.ID == "" {
		cfg.ID = "me"
	}
	cfg.Now = func() time.Time { return now }
	s, err := New(&recorder{}, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.refresh()
	return s, p, &now
}

// recorder is a Conn that keeps what is published.
type recorder struct{ msgs []*schemas.GatewayLoad }

func (r *recorder) Publish(_ string, b []byte) error {
	var m schemas.GatewayLoad
	if err := proto.Unmarshal(b, &m); err != nil {
		return err
	}
	r.msgs = append(r.msgs, &m)
	return nil
}

func (r *recorder) Subscribe(string, func([]byte)) (Subscription, error) {
	return nil, nil
}

// wire encodes a report of gateway id: engine id, queued prefill, ...
func wire(id string, loads ...any) []byte {
	m := &schemas.GatewayLoad{SchemaVersion: 1, GatewayId: id, Cluster: "c"}
	for k := 0; k+1 < len(loads); k += 2 {
		m.Engines = append(m.Engines, &schemas.EngineLoad{EngineId: loads[k].(string), QueuedPrefillTokens: int64(loads[k+1].(int))})
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		panic(err)
	}
	if pb.Counter != nil {
		return pb.Counter.GetValue()
	}
	return pb.Gauge.GetValue()
}

func foreign(p *pick.Pool, id string) int64 {
	s, _ := p.Lookup(id)
	return s.ForeignPrefill()
}

// TestStaleness: a peer's report counts for exactly Staleness after it
// arrived (by the receiver's clock, whatever sent_at says), a newer report
// replaces it, and a silent peer is forgotten after 3 heartbeats.
func TestStaleness(t *testing.T) {
	s, p, now := sharer(t, Config{Interval: 100 * time.Millisecond})
	if s.cfg.Staleness != time.Second {
		t.Fatalf("default staleness %v, want 1s", s.cfg.Staleness)
	}
	s.apply(wire("a", "x", 500, "y", 20))
	s.apply(wire("b", "x", 1000))
	if got := foreign(p, "x"); got != 1500 {
		t.Fatalf("x: %d, want 1500 (sum over peers)", got)
	}
	*now = now.Add(400 * time.Millisecond)
	s.apply(wire("a", "y", 7)) // replaces a's report: x no longer listed
	if x, y := foreign(p, "x"), foreign(p, "y"); x != 1000 || y != 7 {
		t.Fatalf("after a's new report x %d y %d, want 1000 7", x, y)
	}
	*now = now.Add(600 * time.Millisecond) // b's report is exactly 1 s old
	s.expire(*now)
	if got := foreign(p, "x"); got != 1000 {
		t.Fatalf("x at the staleness bound: %d, want 1000", got)
	}
	*now = now.Add(time.Millisecond)
	s.expire(*now)
	if x, y := foreign(p, "x"), foreign(p, "y"); x != 0 || y != 7 {
		t.Fatalf("after b went stale x %d y %d, want 0 7", x, y)
	}
	if s.Peers() != 2 {
		t.Fatalf("peers %d, want 2 (a silent peer is tracked for 3 heartbeats)", s.Peers())
	}
	*now = now.Add(3 * Heartbeat)
	s.expire(*now)
	if foreign(p, "y") != 0 || s.Peers() != 0 || value(s.m.peers) != 0 {
		t.Fatalf("after 3 heartbeats: y %d, peers %d; want 0 0", foreign(p, "y"), s.Peers())
	}
}

// TestMalformedReportsDropped: bytes that are no valid report are counted
// by reason and change nothing; a valid report after them applies.
func TestMalformedReportsDropped(t *testing.T) {
	s, p, _ := sharer(t, Config{MaxEngines: 3, MaxMessageBytes: 4096})
	long := strings.Repeat("e", maxIDBytes+1)
	cases := []struct {
		name   string
		b      []byte
		reason string
	}{
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff}, reasonMalformed},
		{"truncated", func() []byte { b := wire("a", "x", 5); return b[:len(b)-1] }(), reasonMalformed},
		{"no gateway id", wire("", "x", 5), reasonMalformed},
		{"empty engine id", wire("a", "", 5), reasonMalformed},
		{"long engine id", wire("a", long, 5), reasonMalformed},
		{"long gateway id", wire(long, "x", 5), reasonMalformed},
		{"too many engines", wire("a", "x", 1, "y", 1, "z", 1, "w", 1), reasonOversized},
		{"too many bytes", append(wire("a", "x", 1), make([]byte, 4096)...), reasonOversized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := value(s.m.dropped[c.reason])
			s.apply(c.b)
			if got := value(s.m.dropped[c.reason]); got != before+1 {
				t.Fatalf("dropped{%s} went %v -> %v, want +1", c.reason, before, got)
			}
			if foreign(p, "x") != 0 || s.Peers() != 0 || value(s.m.received) != 0 {
				t.Fatal("a dropped report changed the state")
			}
		})
	}
	s.apply(wire("a", "x", 5))
	if foreign(p, "x") != 5 {
		t.Fatalf("valid report after the bad ones: x %d, want 5", foreign(p, "x"))
	}
	s.receive(make([]byte, 4097))
	if got := value(s.m.dropped[reasonOversized]); got != 3 {
		t.Fatalf("oversized at receipt: dropped %v, want 3", got)
	}
}

// TestBounds: peers beyond MaxPeers are dropped until one is forgotten;
// huge, negative and repeated values are clamped; engines not in the
// pool take no memory; the receive queue drops what overflows it.
func TestBounds(t *testing.T) {
	s, p, now := sharer(t, Config{MaxPeers: 2})
	s.apply(wire("a", "x", 1))
	s.apply(wire("b", "x", 2))
	s.apply(wire("c", "x", 4))
	if got := value(s.m.dropped[reasonTooMany]); got != 1 || s.Peers() != 2 || foreign(p, "x") != 3 {
		t.Fatalf("third peer: dropped %v, peers %d, x %d; want 1 2 3", got, s.Peers(), foreign(p, "x"))
	}
	*now = now.Add(3*Heartbeat + time.Millisecond)
	s.expire(*now)
	s.apply(wire("c", "x", 4))
	if s.Peers() != 1 || foreign(p, "x") != 4 {
		t.Fatalf("after the others were forgotten: peers %d, x %d; want 1 4", s.Peers(), foreign(p, "x"))
	}

	m := &schemas.GatewayLoad{GatewayId: "d", Engines: []*schemas.EngineLoad{
		{EngineId: "x", QueuedPrefillTokens: 1 << 62, InFlight: 1 << 62},
		{EngineId: "x", QueuedPrefillTokens: 1 << 40},
		{EngineId: "y", QueuedPrefillTokens: -5},
		{EngineId: "not-ours", QueuedPrefillTokens: 9},
	}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(b)
	if x, y := foreign(p, "x"), foreign(p, "y"); x != 4+MaxPrefillTokens || y != 0 {
		t.Fatalf("clamped: x %d y %d, want %d 0", x, y, 4+MaxPrefillTokens)
	}
	if got := len(s.peers["d"].loads); got != 1 {
		t.Fatalf("d holds %d loads, want 1 (repeats merged, unknown and empty engines not kept)", got)
	}
	many := make([]any, 0, 2*DefaultMaxEngines)
	for range DefaultMaxEngines {
		many = append(many, "y", 1)
	}
	s.apply(wire("d", many...)) // replaces d's report
	if l := s.peers["d"].loads; len(l) != 1 || cap(l) > 9 || foreign(p, "y") != DefaultMaxEngines {
		t.Fatalf("65,536 repeats of y: %d loads (capacity %d), y %d; want 1 (at most 9), %d", len(l), cap(l), foreign(p, "y"), DefaultMaxEngines)
	}

	for range queueLen + 5 {
		s.receive(b)
	}
	if got := value(s.m.dropped[reasonOverflow]); got != 5 {
		t.Fatalf("overflow: dropped %v, want 5", got)
	}
}

// subConn is a Conn that keeps the subscription it made.
type subConn struct {
	natsConn
	mu  sync.Mutex
	sub *nats.Subscription
}

func (c *subConn) Subscribe(subj string, fn func([]byte)) (Subscription, error) {
	sub, err := c.natsConn.Subscribe(subj, fn)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.sub = sub.(*nats.Subscription)
	c.mu.Unlock()
	return sub, nil
}

// TestClientQueueBounded: the NATS client holds at most as many reports
// waiting for the handler as the Sharer's own queue (not nats.go's 64 MB
// default), and what it drops is counted as overflow.
func TestClientQueueBounded(t *testing.T) {
	srv := testenv.NATS(t)
	p, _ := pool(t)
	c := &subConn{natsConn: connect(t, srv.ClientURL())}
	s, err := New(c, p, Config{Cluster: "eu", ID: "me"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.sub == nil {
			return false
		}
		msgs, bytes, err := c.sub.PendingLimits()
		return err == nil && msgs == queueLen && bytes == queueBytes
	}, "the subscription's pending limits are 1024 reports and 32 MiB")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	s2, _, _ := sharer(t, Config{})
	d := &drops{}
	s2.subs["x"] = &subscription{drops: d}
	for _, n := range []int{0, 3, 3, 10} {
		d.n = n
		s2.countClientDrops()
	}
	if got := value(s2.m.dropped[reasonOverflow]); got != 10 {
		t.Fatalf("client drops 0, 3, 3, 10: %v counted, want 10", got)
	}
}

type drops struct{ n int }

func (d *drops) Dropped() (int, error) { return d.n, nil }

// TestForgetAfterStaleness: a peer is forgotten after 3 heartbeats, or
// after the staleness when that is longer (an interval over 300 ms).
func TestForgetAfterStaleness(t *testing.T) {
	for _, c := range []struct {
		interval, forget time.Duration
	}{{100 * time.Millisecond, 3 * Heartbeat}, {500 * time.Millisecond, 5 * time.Second}} {
		s, _, now := sharer(t, Config{Interval: c.interval})
		s.apply(wire("a", "x", 1))
		start := *now
		*now = start.Add(c.forget)
		s.expire(*now)
		if s.Peers() != 1 {
			t.Fatalf("interval %v: forgotten at %v, want tracked", c.interval, c.forget)
		}
		*now = start.Add(c.forget + time.Millisecond)
		s.expire(*now)
		if s.Peers() != 0 {
			t.Fatalf("interval %v: tracked after %v, want forgotten", c.interval, c.forget+time.Millisecond)
		}
	}
}

// TestQueueBytesBounded: reports waiting to be applied hold at most
// queueBytes (1024 reports of 1 MiB would hold 1 GiB); what is over is
// dropped as overflow, and applying frees room again.
func TestQueueBytesBounded(t *testing.T) {
	s, _, _ := sharer(t, Config{})
	big := make([]byte, DefaultMaxMessageBytes)
	fit := queueBytes / DefaultMaxMessageBytes
	for range fit + 3 {
		s.receive(big)
	}
	if got, n := value(s.m.dropped[reasonOverflow]), len(s.in); got != 3 || n != fit || s.queued.Load() != queueBytes {
		t.Fatalf("%d reports of 1 MiB: %d queued (%d bytes), %v dropped; want %d queued (%d bytes), 3 dropped", fit+3, n, s.queued.Load(), got, fit, queueBytes)
	}
	s.receive([]byte{1})
	if got := value(s.m.dropped[reasonOverflow]); got != 4 {
		t.Fatalf("one more byte: %v dropped, want 4", got)
	}
	// What Run does with a queued report.
	b := <-s.in
	s.apply(b)
	s.queued.Add(-int64(len(b)))
	s.receive(big)
	if got, n := value(s.m.dropped[reasonOverflow]), len(s.in); got != 4 || n != fit {
		t.Fatalf("after one was applied: %d queued, %v dropped; want %d, 4", n, got, fit)
	}
}

// TestPublish: a gateway publishes its queued engines every tick, one
// empty report when they drain, then an empty heartbeat once a second;
// a report over the size limit keeps the most loaded engines.
func TestPublish(t *testing.T) {
	s, p, now := sharer(t, Config{})
	rec := s.nc.(*recorder)
	tb, err := p.Build([]pick.Spec{{ID: "x", URL: "http://x", Weight: 1}, {ID: "y", URL: "http://y", Weight: 1}}, pick.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.tick() // first: an empty report at once
	i, tk := queue(t, tb, "x", 1234)
	step := func() { *now = now.Add(100 * time.Millisecond); s.tick() }
	step()
	step()
	tb.FirstToken(i, tk, 10)
	tb.Done(i)
	step() // drained: one empty report
	for range 9 {
		step() // nothing until a second after the last report
	}
	step()
	var got []int
	for _, m := range rec.msgs {
		if m.GetGatewayId() != "me" || m.GetCluster() != "eu" || m.GetSchemaVersion() != schemas.Version {
			t.Fatalf("report %v", m)
		}
		got = append(got, len(m.GetEngines()))
	}
	if want := []int{0, 1, 1, 0, 0}; !equal(got, want) {
		t.Fatalf("engines per report %v, want %v", got, want)
	}
	if e := rec.msgs[1].GetEngines()[0]; e.GetEngineId() != "x" || e.GetQueuedPrefillTokens() != 1234 || e.GetInFlight() != 1 {
		t.Fatalf("report of x: %v", e)
	}

	big := &schemas.GatewayLoad{GatewayId: "me"}
	for k := range 100 {
		big.Engines = append(big.Engines, &schemas.EngineLoad{EngineId: strings.Repeat("e", 20) + string(rune('A'+k%26)) + string(rune('A'+k/26)), QueuedPrefillTokens: int64(k)})
	}
	b, left, err := encode(nil, big, 500)
	if err != nil || len(b) > 500 || left == 0 {
		t.Fatalf("encode: %d bytes, %d left out, %v", len(b), left, err)
	}
	var m schemas.GatewayLoad
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if n := len(m.GetEngines()); n+left != 100 || m.GetEngines()[0].GetQueuedPrefillTokens() != 99 || m.GetEngines()[n-1].GetQueuedPrefillTokens() != int64(100-n) {
		t.Fatalf("kept %d engines from %d down to %d, want the most loaded", n, m.GetEngines()[0].GetQueuedPrefillTokens(), m.GetEngines()[n-1].GetQueuedPrefillTokens())
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSubject(t *testing.T) {
	for _, c := range []struct{ prefix, cluster, want string }{
		{"", "eu-west", "switchyard.gateway.load.eu-west"},
		{"acme", "us.east *>", "acme.gateway.load.us_east___"},
		{"", "", "switchyard.gateway.load._"},
	} {
		if got := Subject(c.prefix, c.cluster); got != c.want {
			t.Errorf("Subject(%q, %q) = %q, want %q", c.prefix, c.cluster, got, c.want)
		}
	}
	if got := Wildcard(""); got != "switchyard.gateway.load.>" {
		t.Errorf("Wildcard = %q", got)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{
		{ID: "a"},
		{Cluster: "c"},
		{Cluster: "c", ID: "a", Interval: -time.Second},
		{Cluster: "c", ID: "a", Interval: time.Second, Staleness: time.Millisecond},
		{Cluster: "c", ID: "a", MaxPeers: -1},
	} {
		if _, err := New(&recorder{}, pick.NewPool(), c); err == nil {
			t.Errorf("New accepted %+v", c)
		}
	}
}

// decodeSeeds are reports plainly encoded and not: unknown fields,
// other wire types, bad UTF-8, truncation, repeats.
func decodeSeeds() [][]byte {
	ok := wire("a", "x", 5, "y", 1<<30)
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(bytes.Clone(b), num, typ)
	}
	engine := func(e []byte) []byte { return protowire.AppendBytes(tag(ok, 5, protowire.BytesType), e) }
	return [][]byte{
		ok,
		nil,
		wire("a"),
		wire("", "x", 1),
		wire("a", "", 1),
		append(wire("a", "x", 1), wire("b", "y", 2)...),                                            // repeats: last id wins, engines add up
		protowire.AppendString(tag(ok, 2, protowire.BytesType), "\xff"),                            // bad UTF-8 id
		protowire.AppendString(tag(ok, 3, protowire.BytesType), "\xff"),                            // bad UTF-8 cluster
		protowire.AppendString(tag(ok, 3, protowire.BytesType), strings.Repeat("c", maxIDBytes+1)), // long cluster
		protowire.AppendVarint(tag(ok, 2, protowire.VarintType), 1),                                // id, other wire type
		protowire.AppendVarint(tag(ok, 9, protowire.VarintType), 1),                                // unknown field
		protowire.AppendVarint(tag(ok, 4, protowire.VarintType), 1<<63),                            // sent_at negative
		protowire.AppendVarint(tag(ok, 1, protowire.VarintType), 1<<40),                            // schema_version over uint32
		protowire.AppendFixed32(tag(ok, 5, protowire.Fixed32Type), 1),                              // engines, other wire type
		engine([]byte{0x0a, 0x01, 0xff}),                                                           // engine id bad UTF-8
		engine([]byte{0x0a, 0x05, 'e'}),                                                            // engine truncated
		engine([]byte{0x0a, 0x01, 'e', 0x78, 0x01}),                                                // engine unknown field
		engine([]byte{0x0a, 0x01, 'e', 0x10, 0x01, 0x10, 0x02, 0x0a, 0x01, 'f'}),                   // engine repeats: last wins
		engine(protowire.AppendVarint([]byte{0x0a, 0x01, 'e', 0x10}, 1<<63)),                       // negative prefill
		engine([]byte{0x0a, 0x01, 'e', 0x15, 0, 0, 0, 0}),                                          // prefill, other wire type
		engine(nil), // empty engine
		ok[:len(ok)-1],
	}
}

// sameDecode checks that the decoder's fast path, when it takes b,
// agrees with proto.Unmarshal.
func sameDecode(t *testing.T, d *decoder, b []byte) {
	t.Helper()
	fast := d.scan(b)
	var m schemas.GatewayLoad
	err := proto.Unmarshal(b, &m)
	if !fast {
		return
	}
	if err != nil {
		t.Fatalf("scan took %x, which proto rejects: %v", b, err)
	}
	wantID := m.GetGatewayId()
	if len(m.GetCluster()) > maxIDBytes {
		wantID = ""
	}
	if string(d.r.id) != wantID || len(d.r.engines) != len(m.GetEngines()) {
		t.Fatalf("scan of %x: id %q, %d engines; proto: %q, %d", b, d.r.id, len(d.r.engines), wantID, len(m.GetEngines()))
	}
	for k, e := range m.GetEngines() {
		g := d.r.engines[k]
		if string(g.id) != e.GetEngineId() || g.prefill != e.GetQueuedPrefillTokens() || g.inFlight != e.GetInFlight() {
			t.Fatalf("scan of %x: engine %d %+v, proto %v", b, k, g, e)
		}
	}
}

// TestScanMatchesProto: the decoder's allocation-free scan agrees with
// proto.Unmarshal on every input it takes, and leaves the rest to it.
func TestScanMatchesProto(t *testing.T) {
	var d decoder
	plain := 0
	for _, b := range decodeSeeds() {
		sameDecode(t, &d, b)
		if d.scan(b) {
			plain++
		}
	}
	if plain < 8 {
		t.Fatalf("scan took %d of the seeds, want the plainly encoded ones", plain)
	}
	b := wire("a", "x", 5, "y", 6)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := d.decode(b, 1<<20, 16); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per plain report", n)
	}
}

// FuzzDecode: decode never panics, what it accepts is within the bounds,
// and its scan agrees with proto.Unmarshal.
func FuzzDecode(f *testing.F) {
	for _, b := range decodeSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d decoder
		sameDecode(t, &d, b)
		r, err := d.decode(b, 1<<16, 64)
		if err != nil {
			return
		}
		if len(r.id) == 0 || len(r.engines) > 64 {
			t.Fatalf("accepted id %q, %d engines", r.id, len(r.engines))
		}
		for _, e := range r.engines {
			if e.prefill < 0 || e.prefill > MaxPrefillTokens || e.inFlight < 0 || e.inFlight > MaxInFlight || len(e.id) == 0 {
				t.Fatalf("accepted engine %+v", e)
			}
		}
	})
}

func TestDefaultID(t *testing.T) {
	a, b := DefaultID(), DefaultID()
	if a == b || a == "" || len(a) > maxIDBytes {
		t.Fatalf("DefaultID %q, %q: want distinct, non-empty ids", a, b)
	}
}

// benchSharer is a Sharer over a pool of n engines "engine-%04d", each
// with 2,000 tokens queued by this gateway.
func benchSharer(b *testing.B, n int) (*Sharer, [][]byte) {
	b.Helper()
	p := pick.NewPool()
	specs := make([]pick.Spec, n)
	for k := range specs {
		specs[k] = pick.Spec{ID: fmt.Sprintf("engine-%04d", k), URL: "http://e", Weight: 1}
	}
	tb, err := p.Build(specs, pick.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for k := range n {
		tb.PickRequest(&pick.Request{Key: uint64(k), PromptTokens: 2000}, nil)
	}
	s, err := New(nopConn{}, p, Config{Cluster: "eu", ID: "me"})
	if err != nil {
		b.Fatal(err)
	}
	s.refresh()
	// Reports of 8 peers, each with every engine loaded.
	var reports [][]byte
	for g := range 8 {
		m := &schemas.GatewayLoad{GatewayId: fmt.Sprintf("peer-%d", g), Cluster: "us"}
		for k := range n {
			m.Engines = append(m.Engines, &schemas.EngineLoad{EngineId: specs[k].ID, QueuedPrefillTokens: int64(1000 + k), InFlight: 2})
		}
		r, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		reports = append(reports, r)
	}
	return s, reports
}

type nopConn struct{}

func (nopConn) Publish(string, []byte) error { return nil }
func (nopConn) Subscribe(string, func([]byte)) (Subscription, error) {
	return nil, nil
}

// BenchmarkApply: receiving one peer's report of 1,000 loaded engines
// (decode, replace the peer's previous report, set the engines' states).
func BenchmarkApply(b *testing.B) {
	s, reports := benchSharer(b, 1000)
	b.SetBytes(int64(len(reports[0])))
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		s.apply(reports[k%len(reports)])
		k++
	}
}

// BenchmarkPublish: building and encoding this gateway's report of
// 1,000 loaded engines.
func BenchmarkPublish(b *testing.B) {
	s, _ := benchSharer(b, 1000)
	now := time.Unix(1_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(100 * time.Millisecond)
		s.publish(now)
	}
	b.ReportMetric(float64(len(s.buf)), "report-bytes")
}
