package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	gw "github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/gateway/tenant"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestBaselineReaderCountsRequestsExactly runs the gateway command with
// API keys, Kafka and arrival records after 20 ms, in front of an
// engine that holds some requests 300 ms; sends requests of two tenants
// that reuse the same X-Request-Ids, requests without one, streams the
// client leaves, and requests with no key. A reader that knows only
// schemas/baseline/switchyard.binpb (the last release's RoutingEvent)
// then reads one record per request from the routing-events topic, and
// deduplicating by request_id keeps every one; the long requests' arrival
// records are on the routing-arrivals topic, each naming a request whose
// final record says counted_at_arrival.
func TestBaselineReaderCountsRequestsExactly(t *testing.T) {
	kc := testenv.Kafka(t)
	admin := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, admin, topics, 3); err != nil {
		t.Fatal(err)
	}
	engine := holdingEngine(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keys, []byte("tenants:\n  - name: acme\n    keys: ["+tenant.HashKey("sk-acme")+"]\n  - name: globex\n    keys: ["+tenant.HashKey("sk-globex")+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var logs testenv.Buffer
	go func() {
		done <- run(runCtx, []string{"--cluster", "eu", "--listen", listen, "--engines", "e1=" + engine, "--api-keys", keys,
			"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--arrival-record-after", "20ms", "--health-interval", "-1s",
			"--peer-load-interval", "0", "--drain-delay", "0s"}, io.Discard, &logs)
	}()
	base := "http://" + listen
	testenv.Eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "gateway not listening")

	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		wg       sync.WaitGroup
	)
	send := func(key, clientID, content string, stream, leave bool) {
		defer wg.Done()
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, content)
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if clientID != "" {
			req.Header.Set(gw.HeaderRequestID, clientID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		if leave { // read the first chunk, then go away
			_, _ = resp.Body.Read(make([]byte, 16))
			rcancel()
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		mu.Lock()
		statuses[resp.StatusCode]++
		mu.Unlock()
	}
	n := 0
	for i := range 20 { // both tenants send "dup-i"; every other one is held
		content := "quick"
		if i%2 == 0 {
			content = "hold"
		}
		for _, key := range []string{"sk-acme", "sk-globex"} {
			wg.Add(1)
			n++
			go send(key, fmt.Sprint("dup-", i), content, i%3 == 0, false)
		}
	}
	for range 6 { // no X-Request-Id
		wg.Add(1)
		n++
		go send("sk-acme", "", "quick", false, false)
	}
	for range 4 { // the client leaves a held stream
		wg.Add(1)
		n++
		go send("sk-globex", "dup-0", "hold", true, true)
	}
	for range 3 { // no key: 401, recorded too
		wg.Add(1)
		n++
		go send("", "dup-0", "quick", false, false)
	}
	wg.Wait()
	stop()
	if err := <-done; err != nil {
		t.Fatalf("gateway command: %v\n%s", err, logs.String())
	}
	answered := 0
	for _, c := range statuses {
		answered += c
	}
	if answered != n || statuses[401] != 3 || statuses[200] < n/2 { // some may be shed (429): requests all the same
		t.Fatalf("statuses %v of %d requests", statuses, n)
	}

	desc := baselineRoutingEvent(t)
	events := readTopic(t, ctx, admin, topics.RoutingEvents)
	ids := map[string]bool{}
	clientIDs := map[string]int{}
	for _, r := range events {
		m := dynamicpb.NewMessage(desc)
		if err := proto.Unmarshal(r.Value, m); err != nil {
			t.Fatalf("baseline reader: %v", err)
		}
		ids[m.Get(desc.Fields().ByName("request_id")).String()] = true
		var ev schemas.RoutingEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		clientIDs[ev.GetClientRequestId()]++
		if ev.GetStatus() == schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS {
			t.Errorf("arrival record %v on %s", &ev, topics.RoutingEvents)
		}
	}
	if len(events) != n || len(ids) != n {
		t.Fatalf("baseline reader: %d records, %d distinct request ids, for %d requests", len(events), len(ids), n)
	}
	if clientIDs["dup-0"] < 2+4+3 || clientIDs[""] != 6 {
		t.Errorf("client request ids %v: the test sent dup-0 by two tenants, the leavers and the unauthenticated", clientIDs)
	}
	arrivals := readTopic(t, ctx, admin, topics.RoutingArrivals)
	if len(arrivals) == 0 {
		t.Fatal("no arrival records: the test did not hold a request past --arrival-record-after")
	}
	counted := map[string]bool{}
	for _, r := range events {
		var ev schemas.RoutingEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.GetCountedAtArrival() {
			counted[ev.GetRequestId()] = true
		}
	}
	for _, r := range arrivals {
		var ev schemas.RoutingEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.GetStatus() != schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS || !counted[ev.GetRequestId()] || string(r.Key) != ev.GetRequestId() {
			t.Errorf("arrival record %v (key %q) without a final record counted at arrival", &ev, r.Key)
		}
	}
	if len(counted) != len(arrivals) {
		t.Errorf("%d final records counted at arrival, %d arrival records", len(counted), len(arrivals))
	}
}

// holdingEngine is an OpenAI-compatible engine that answers at once, but
// holds a request whose prompt says "hold" for 300 ms (or until the
// client leaves); streams send one chunk first.
func holdingEngine(t *testing.T) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		stream := strings.Contains(string(b), `"stream":true`)
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		if strings.Contains(string(b), "hold") {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		usage := `"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`
		if stream {
			_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
			if strings.Contains(string(b), "include_usage") {
				_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],`+usage+"}\n\n")
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"}],`+usage+"}")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// baselineRoutingEvent is RoutingEvent as the last release's descriptor
// set (schemas/baseline) has it.
func baselineRoutingEvent(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	b, err := os.ReadFile("../../schemas/baseline/switchyard.binpb")
	if err != nil {
		t.Fatal(err)
	}
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &fds); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&fds)
	if err != nil {
		t.Fatal(err)
	}
	d, err := files.FindDescriptorByName("switchyard.v1.RoutingEvent")
	if err != nil {
		t.Fatal(err)
	}
	md := d.(protoreflect.MessageDescriptor)
	if md.Fields().ByName("client_request_id") != nil || md.Fields().ByNumber(31) != nil {
		t.Fatal("schemas/baseline has fields after the release: not the old descriptor")
	}
	return md
}

// readTopic reads every record of topic up to its current end.
func readTopic(t *testing.T, ctx context.Context, admin *kgo.Client, topic string) []*kgo.Record {
	t.Helper()
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(admin.OptValue(kgo.SeedBrokers).([]string)...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if int64(len(out)) != want {
		t.Fatalf("%s: read %d of %d records", topic, len(out), want)
	}
	return out
}
