package brokerstate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/internal/testenv"
)

// TestSetLogsOnceThenRateLimited: losing a broker logs one WARN and
// counts one outage; further failed checks repeat the WARN only every
// WarnEvery (with how long); the first good check logs one INFO with the
// outage's length and sets the gauge back to 1.
func TestSetLogsOnceThenRateLimited(t *testing.T) {
	var logs testenv.Buffer
	now := time.Unix(1000, 0)
	reg := prometheus.NewRegistry()
	tr, err := New(slog.New(slog.NewTextHandler(&logs, nil)), reg, WarnEvery(30*time.Second), Clock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("dial tcp: connection refused")
	tr.Set(Kafka, nil)
	for i := 0; i < 40; i++ { // a check a second for 40 s
		tr.Set(Kafka, down)
		now = now.Add(time.Second)
	}
	if n := strings.Count(logs.String(), `level=WARN msg="broker unavailable"`); n != 1 {
		t.Errorf("%d WARN on losing kafka, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `level=WARN msg="broker still unavailable"`); n != 1 || !strings.Contains(logs.String(), `msg="broker still unavailable" broker=kafka down_for=30s`) {
		t.Errorf("%d repeated WARN in 40 s at one per 30 s, want 1:\n%s", n, logs.String())
	}
	if g := value(tr.connected.WithLabelValues(Kafka)); g != 0 {
		t.Errorf("connected %v while down", g)
	}
	if ready, detail := tr.Health(); ready || !strings.Contains(detail, "kafka: unavailable for 40s: dial tcp") {
		t.Errorf("health while down: %v %q", ready, detail)
	}
	tr.Set(Kafka, nil)
	if !strings.Contains(logs.String(), `level=INFO msg="broker available again" broker=kafka down_for=40s`) {
		t.Errorf("no INFO on recovery:\n%s", logs.String())
	}
	if g, o := value(tr.connected.WithLabelValues(Kafka)), value(tr.outages.WithLabelValues(Kafka)); g != 1 || o != 1 {
		t.Errorf("after recovery connected %v outages %v, want 1 and 1", g, o)
	}
	mfs, err := reg.Gather()
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	if err != nil || n != 4 {
		t.Errorf("%d series (%v), want both brokers' labels of both metrics initialised: 4", n, err)
	}
}

// TestWatchRealBrokers stops a real kfake cluster and nats-server under a
// Tracker: each broker's WARN, gauge 0 and a 503 /ready (while /health
// stays 200) follow; restarted on the same ports, each is connected again
// with an INFO.
func TestWatchRealBrokers(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // after the servers' cleanups
	kc, kport := startKafka(t, 0)
	ns, nport := startNATS(t, -1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	var logs testenv.Buffer
	reg := prometheus.NewRegistry()
	tr, err := New(slog.New(slog.NewTextHandler(&logs, nil)), reg, CheckEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stopHTTP, err := obs.ServeMetrics(ctx, "127.0.0.1:0", reg, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer stopHTTP()
	stopK := tr.Go(ctx, Kafka, PingKafka(cl))
	defer stopK()
	stopN := tr.Go(ctx, NATS, NATSConnected(nc))
	defer stopN()

	waitFor(t, "both connected", func() bool {
		return value(tr.connected.WithLabelValues(Kafka)) == 1 && value(tr.connected.WithLabelValues(NATS)) == 1
	})
	if code, _ := get(t, addr, "/ready"); code != http.StatusOK {
		t.Fatalf("/ready %d with both brokers up", code)
	}

	kc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()
	for _, b := range []string{Kafka, NATS} {
		waitFor(t, b+" WARN and gauge 0", func() bool {
			return strings.Contains(logs.String(), `level=WARN msg="broker unavailable" broker=`+b) &&
				value(tr.connected.WithLabelValues(b)) == 0
		})
	}
	if code, body := get(t, addr, "/health"); code != http.StatusOK || !strings.Contains(body, "kafka: unavailable") || !strings.Contains(body, "nats: unavailable") {
		t.Errorf("/health while down: %d %q (liveness stays 200, with the detail)", code, body)
	}
	if code, body := get(t, addr, "/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("/ready while down: %d %q, want 503", code, body)
	}

	kc2, _ := startKafka(t, kport)
	defer kc2.Close()
	startNATS(t, nport)
	for _, b := range []string{Kafka, NATS} {
		waitFor(t, b+" INFO and gauge 1", func() bool {
			return strings.Contains(logs.String(), `level=INFO msg="broker available again" broker=`+b) &&
				value(tr.connected.WithLabelValues(b)) == 1
		})
	}
	if n := strings.Count(logs.String(), `msg="broker unavailable"`); n != 2 {
		t.Errorf("%d WARN on losing, want one per broker:\n%s", n, logs.String())
	}
	stopK()
	stopN()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20 s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a wait for an event
	}
}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func startKafka(t *testing.T, port int) (*kfake.Cluster, int) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(kc.ListenAddrs()[0])
	n, _ := strconv.Atoi(p)
	return kc, n
}

func startNATS(t *testing.T, port int) (*server.Server, int) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, s.Addr().(*net.TCPAddr).Port
}

// value reads a gauge or counter.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Gauge != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}
