package exporttrace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/schemas/trace"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/simulator/workload"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/replay"
)

// TestRoundTrip produces a minute of routing events as gateways do (final
// records at completion, arrival records for long requests, shed
// requests without tokens, requests outside the range), exports
// [from, from+40s) with the command, and reads the file back with the
// simulator's trace reader and its scenario builder: every finished
// request of the range with tokens arrives at its time with its tokens,
// cluster, streaming and conversation (affinity hash), and its cached
// tokens are a prefix shared with the conversation's other requests.
func TestRoundTrip(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "tr"
	topics := streams.TopicsFor(prefix)
	cl := testenv.Client(t, kc)
	if err := streams.EnsureTopics(context.Background(), cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(-time.Hour).Truncate(time.Minute)
	type want struct {
		at                     int64
		prompt, cached, output int
		cluster                string
		hash                   uint64
		stream                 bool
		engine                 string
		ttft                   float64
	}
	var wants []want
	var recs []*kgo.Record
	add := func(topic string, ev *schemas.RoutingEvent, at time.Time) {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(ev.GetRequestId()), Value: b, Timestamp: at})
	}
	shed, outside := 0, 0
	for i := range 600 {
		start := from.Add(time.Duration(i)*100*time.Millisecond - 5*time.Second)
		dur := time.Duration(200+(i*7919)%9000) * time.Millisecond
		ev := &schemas.RoutingEvent{
			SchemaVersion: schemas.Version, RequestId: fmt.Sprint("r", i), Cluster: []string{"us", "eu"}[i%2], EngineId: fmt.Sprint("e", i%4),
			EventTimeUnixMs: start.UnixMilli(), CompletionTimeUnixMs: start.Add(dur).UnixMilli(), E2EMs: float64(dur.Milliseconds()),
			Status: schemas.RequestStatus_REQUEST_STATUS_OK, Stream: i%5 != 0, AffinityKeyHash: uint64(i%9) * 0x9e3779b97f4a7c15,
			PromptTokens: uint32(600 + i%1500), CachedTokens: uint32((i % 3) * 512), OutputTokens: uint32(i % 300),
		}
		if ev.Stream {
			ev.TtftMs = float64(i%97) + 0.25
		}
		if i%17 == 0 {
			ev.Status, ev.PromptTokens, ev.CachedTokens, ev.OutputTokens, ev.EngineId = schemas.RequestStatus_REQUEST_STATUS_SHED, 0, 0, 0, ""
		}
		if dur > 5*time.Second { // the gateway's arrival record, on its own topic
			arr := proto.CloneOf(ev)
			arr.Status, arr.CompletionTimeUnixMs, arr.PromptTokens, arr.CachedTokens, arr.OutputTokens = schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS, 0, 0, 0, 0
			add(topics.RoutingArrivals, arr, start)
			ev.CountedAtArrival = true
		}
		add(topics.RoutingEvents, ev, start.Add(dur))
		switch at := start.Sub(from); {
		case at < 0 || at >= 40*time.Second:
			outside++
		case ev.GetPromptTokens() == 0:
			shed++
		default:
			wants = append(wants, want{at: at.Milliseconds(), prompt: int(ev.GetPromptTokens()), cached: int(min(ev.GetCachedTokens(), ev.GetPromptTokens())),
				output: int(ev.GetOutputTokens()), cluster: ev.GetCluster(), hash: ev.GetAffinityKeyHash(), stream: ev.GetStream(),
				engine: ev.GetEngineId(), ttft: ev.GetTtftMs()})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	out := filepath.Join(dir, "trace.jsonl")
	var stdout, stderr bytes.Buffer
	args := []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", prefix,
		"--from", from.Format(time.RFC3339Nano), "--to", fmt.Sprint(from.Add(40 * time.Second).UnixMilli()), "--out", out, "--max-request", "1m"}
	if err := Command().Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res replay.TraceResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("summary %q: %v", stdout.String(), err)
	}
	if res.Requests != len(wants) || res.NoPrompt != shed || res.Unfinished != 0 || res.Arrivals == 0 || res.Undecodable != 0 {
		t.Fatalf("summary %+v; want %d requests, %d without prompt", res, len(wants), shed)
	}

	// Each row carries what the live run observed: its engine and TTFT.
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var row trace.Row
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if w := wants[i]; row.EngineID != w.engine || row.TTFTms != w.ttft {
			t.Fatalf("row %d: engine %q ttft %v ms, want %q and %v", i, row.EngineID, row.TTFTms, w.engine, w.ttft)
		}
	}

	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, rep, err := workload.ReadMooncake(f, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != len(wants) || rep.SwitchyardRows != len(wants) {
		t.Fatalf("read %d requests (%d Switchyard rows), want %d", len(reqs), rep.SwitchyardRows, len(wants))
	}
	// An exported trace's prefix blocks are the engine model's KV block
	// (workload.TraceBlockTokens), so a cached prefix is one to the token.
	bs := rep.BlockTokens
	if bs != workload.TraceBlockTokens {
		t.Fatalf("block size %d, want %d", bs, workload.TraceBlockTokens)
	}
	prefixOf := map[string][]uint64{}
	sharing := 0
	for i, r := range reqs {
		w := wants[i]
		if r.Arrival != time.Duration(w.at)*time.Millisecond || r.PromptTokens != w.prompt || r.OutputTokens != max(1, w.output) ||
			r.Cluster != w.cluster || r.NonStreaming == w.stream || r.Session != fmt.Sprintf("ak%016x", w.hash) {
			t.Fatalf("request %d: %+v, want %+v", i, r, w)
		}
		if len(r.Blocks) != (w.prompt+bs-1)/bs {
			t.Fatalf("request %d: %d blocks for %d tokens", i, len(r.Blocks), w.prompt)
		}
		shared := r.Blocks[:w.cached/bs]
		if p := prefixOf[r.Session]; len(p) > 0 && len(shared) > 0 {
			n := min(len(p), len(shared))
			sharing++
			if fmt.Sprint(p[:n]) != fmt.Sprint(shared[:n]) {
				t.Fatalf("request %d: cached prefix %v differs from its conversation's %v", i, shared, p)
			}
		}
		if len(shared) > len(prefixOf[r.Session]) {
			prefixOf[r.Session] = shared
		}
	}

	if sharing < 100 {
		t.Fatalf("only %d requests share a cached prefix with their conversation", sharing)
	}

	// The simulator's scenario builder keeps the trace's times, clusters
	// and conversations.
	sc, err := scenario.Parse([]byte(`{
  "name": "exported", "slo": {"ttft_ms": 2000, "tbot_ms": 100},
  "regions": ["us", "eu"], "rtt_ms": {"us": {"eu": 80}},
  "clusters": [{"id": "us", "region": "us", "share": 1}, {"id": "eu", "region": "eu", "share": 1}],
  "engines": [{"id": "us-0", "region": "us", "gpu": "h100"}, {"id": "eu-0", "region": "eu", "gpu": "h100"}],
  "workload": {"kind": "mooncake", "trace": "unused.jsonl"}
}`))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := sc.Build(scenario.BuildOptions{Trace: out, Strict: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(stream.Requests) != len(wants) {
		t.Fatalf("scenario built %d requests, want %d", len(stream.Requests), len(wants))
	}
	for i, r := range stream.Requests {
		if w := wants[i]; r.Arrival != time.Duration(w.at)*time.Millisecond || r.Cluster != w.cluster || r.Session != reqs[i].Session {
			t.Fatalf("scenario request %d: arrival %v cluster %s session %s, want %+v", i, r.Arrival, r.Cluster, r.Session, w)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--to", "1", "--out", "-"},
		{"--from", "x", "--to", "1", "--out", "-"},
		{"--from", "2", "--to", "1", "--out", "-"},
		{"--from", "1", "--to", "2"},
		{"--from", "1", "--to", "2", "--out", "-", "--max-request", "0s"},
		{"--from", "1", "--to", "2", "--out", "-", "--kafka-brokers", ","},
	} {
		err := Command().Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}
