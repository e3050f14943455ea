package optimizer

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestCommandServesConsole runs the optimizer with --console-listen: the
// console in its process shows the snapshot it publishes.
func TestCommandServesConsole(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, cl, topics, 1); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Truncate(time.Second).UnixMilli()
	prof := &schemas.LatencyProfile{Points: []*schemas.ProfilePoint{{Utilization: 0, LatencyMs: 100}, {Utilization: 0.9, LatencyMs: 500}}}
	var recs []*kgo.Record
	for _, e := range []*schemas.Estimate{
		{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{SchemaVersion: schemas.Version, EngineId: "e1",
			EndpointUrl: "http://e1", Region: "r1", GpuClass: "h100", WindowEndUnixMs: end, CapacityRps: 50,
			Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, TtftProfile: prof, TbotProfile: prof}}},
		{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{SchemaVersion: schemas.Version, Cluster: "r1",
			WindowEndUnixMs: end, DemandRps: 10, MeanOutputTokens: 10}}},
	} {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: b})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the command listens there
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var stderr lockedBuffer
	go func() {
		done <- Command().Run(runCtx, []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--nats-url", ns.ClientURL(),
			"--metrics-listen", "", "--settle", "50ms", "--clusters", "r1", "--console-listen", addr}, io.Discard, &stderr)
	}()
	var page string
	testenv.Eventually(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/engine?id=e1")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		return resp.StatusCode == 200 && strings.Contains(page, "Weights in snapshot v") && strings.Contains(page, "fitted profile")
	}, "the optimizer's console shows engine e1 with its profile and its weight")
	stop()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
}
