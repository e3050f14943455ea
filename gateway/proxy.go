package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-llm/switchyard/gateway/engineclient"
	"github.com/switchyard-llm/switchyard/gateway/internal/httpwire"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/gateway/relay"
	"github.com/switchyard-llm/switchyard/gateway/shed"
	"github.com/switchyard-llm/switchyard/schemas"
)

const (
	maxErrorBytes = 1 << 20
	doneGrace     = time.Second
)

// The proxy routes.
const (
	pathChat        = "/v1/chat/completions"
	pathCompletions = "/v1/completions"
	// pathResponses is the Responses API: its stream is typed events that
	// end at response.completed (or .incomplete, .failed), not data:
	// [DONE], with the usage in that last event (relay.Stream.Responses).
	pathResponses = "/v1/responses"
)

// otherRoutes are the other inference routes of vLLM-compatible engines
// (vLLM's, SGLang's), POST with a JSON body and a JSON answer: routed on
// the weights as chat is (the pick, admission, retries within the budget
// before the answer's first byte, a routing event), the body forwarded
// unchanged and the engine's answer relayed as it is. They generate no
// tokens, so their latency teaches the engine models nothing
// (generates).
var otherRoutes = [...]string{
	"/v1/embeddings", "/v1/rerank", "/rerank", "/v2/rerank", "/v1/score", "/score",
	"/pooling", "/classify", "/tokenize", "/detokenize",
}

// generates reports whether path is a route whose answer is generated
// tokens (chat, completions, the Responses API).
func generates(path string) bool {
	return path == pathChat || path == pathCompletions || path == pathResponses
}

// inferencePaths are every route serveInference answers.
func inferencePaths() []string {
	return append([]string{pathChat, pathCompletions, pathResponses}, otherRoutes[:]...)
}

func (g *Gateway) routes() http.Handler {
	mux := http.NewServeMux()
	for _, p := range inferencePaths() {
		mux.HandleFunc(p, g.serveInference)
	}
	mux.HandleFunc("/v1/models", g.serveModels)
	mux.HandleFunc("/v1/models/{id...}", g.serveModel)
	if g.cfg.adminListen == "" {
		g.adminRoutes(mux)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		setRequestID(w, r)
		writeError(w, http.StatusNotFound, typeInvalid, "unknown_url", "", "unknown URL "+r.URL.Path)
	})
	return mux
}

// setRequestID echoes the client's X-Request-Id when it is valid, else
// sets a new one, on the API's answers other than inference's (which
// checks the header itself, call.authorize): every answer, errors
// included, names its request as OpenAI's do (the SDKs' requestID).
func setRequestID(w http.ResponseWriter, r *http.Request) {
	if v := r.Header[HeaderRequestID]; len(v) > 0 && v[0] != "" && validHeaderValue(v[0]) {
		w.Header()[HeaderRequestID] = v[:1]
		return
	}
	w.Header().Set(HeaderRequestID, newRequestID())
}

// adminRoutes registers /health and /metrics: on the API's listener, or
// on the admin listener with AdminListen (admin.go).
func (g *Gateway) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/health/ready", g.serveReady) // snapshot.go
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"status\":\"ok\",\"cluster\":%q,\"snapshot_version\":%d}\n", g.cfg.cluster, g.Stats().SnapshotVersion)
	})
	if h := g.metricsHandler(); h != nil {
		mux.Handle("/metrics", h)
	}
}

// outcome of a request.
type outcome struct {
	status     schemas.RequestStatus
	httpStatus int
}

func (g *Gateway) serveInference(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		setRequestID(w, r)
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, typeInvalid, "method_not_allowed", "", r.Method+" not allowed; use POST")
		return
	}
	start := g.cfg.now()
	g.requests.Add(1)
	g.budget.Request(start)
	ev := g.newEvent(r, start) // event.go
	// Without a TracerProvider the incoming trace context is still
	// continued: the engine gets the client's traceparent.
	ctx := g.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	span := trace.SpanFromContext(ctx)
	if g.tracing {
		ctx, span = g.tracer.Start(ctx, "switchyard.gateway "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
	}
	defer span.End()
	c := call{g: g, w: w, r: r, ev: ev, start: start}
	out := c.handle(ctx) // call.go
	ev.E2EMs = ms(g.cfg.now().Sub(start))
	g.finishEvent(ev, out)
	g.record(ev, out, start)
	if !g.tracing {
		return
	}
	span.SetAttributes(
		attribute.String("switchyard.engine", ev.EngineId),
		attribute.Int64("switchyard.snapshot", int64(ev.SnapshotVersion)),
		attribute.Int("switchyard.attempts", int(ev.Attempts)),
		attribute.String("switchyard.decision_reason", ev.DecisionReason),
		attribute.String("switchyard.cluster", g.cfg.cluster),
		attribute.Int("http.response.status_code", out.httpStatus),
	)
	span.SetAttributes(genAIAttributes(r.URL.Path, ev)...)
	if out.status == schemas.RequestStatus_REQUEST_STATUS_ERROR {
		span.SetStatus(codes.Error, "upstream failed")
	}
}

// serverAttributes are the semantic-convention server.address and
// server.port of an engine URL (none when it does not parse).
func serverAttributes(engineURL string) []attribute.KeyValue {
	u, err := url.Parse(engineURL)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	kv := []attribute.KeyValue{attribute.String("server.address", u.Hostname())}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		kv = append(kv, attribute.Int("server.port", p))
	}
	return kv
}

// genAIAttributes are the OpenTelemetry GenAI semantic-convention
// attributes of an inference request: the operation, the requested model
// and, when the engine reported usage, the token counts.
func genAIAttributes(path string, ev *schemas.RoutingEvent) []attribute.KeyValue {
	// The semantic conventions name no operation for the Responses API:
	// it is a chat (a conversation's next output), their closest one.
	op := "chat"
	switch path {
	case pathChat, pathResponses:
	case pathCompletions:
		op = "text_completion"
	case "/v1/embeddings":
		op = "embeddings"
	default:
		op = strings.TrimPrefix(strings.TrimPrefix(path, "/v1/"), "/")
	}
	kv := []attribute.KeyValue{attribute.String("gen_ai.operation.name", op)}
	if ev.Model != "" {
		kv = append(kv, attribute.String("gen_ai.request.model", ev.Model))
	}
	if ev.PromptTokens > 0 || ev.OutputTokens > 0 {
		kv = append(kv, attribute.Int("gen_ai.usage.input_tokens", int(ev.PromptTokens)),
			attribute.Int("gen_ai.usage.output_tokens", int(ev.OutputTokens)))
	}
	return kv
}

func (g *Gateway) record(ev *schemas.RoutingEvent, out outcome, start time.Time) {
	label := "ok"
	switch out.status {
	case schemas.RequestStatus_REQUEST_STATUS_OK:
		g.succeeded.Add(1)
		if ev.TtftMs > 0 {
			g.hot.ttft.Observe(ev.TtftMs / 1000)
		}
		g.hot.e2e.Observe(ev.E2EMs / 1000)
	case schemas.RequestStatus_REQUEST_STATUS_SHED:
		g.shedN.Add(1)
		label = "shed"
	case schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR:
		g.clientErr.Add(1)
		label = "client_error"
	case schemas.RequestStatus_REQUEST_STATUS_CANCELED:
		g.canceled.Add(1)
		label = "canceled"
	default:
		g.failed.Add(1)
		label = "error"
	}
	g.hot.requests[label].Inc()
	g.degrade.observe(rejectionOf(ev, out)) // degrade.go
	if g.cfg.events == nil || !g.cfg.events.Emit(eventKey(ev), ev) {
		g.eventDropped()
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var (
	statusClientErr = schemas.RequestStatus_REQUEST_STATUS_CLIENT_ERROR
	statusShed      = schemas.RequestStatus_REQUEST_STATUS_SHED
	statusErr       = schemas.RequestStatus_REQUEST_STATUS_ERROR
	statusOK        = schemas.RequestStatus_REQUEST_STATUS_OK
	statusCanceled  = schemas.RequestStatus_REQUEST_STATUS_CANCELED
)

func clientError(w http.ResponseWriter, status int, code, param, msg string) outcome {
	writeError(w, status, typeInvalid, code, param, msg)
	return outcome{statusClientErr, status}
}

func (g *Gateway) shed(w http.ResponseWriter, reason string, prio shed.Priority) outcome {
	g.m.shed.WithLabelValues(g.cfg.cluster, reason, prio.String()).Inc()
	w.Header().Set("Retry-After", "1")
	msg := "the cluster is shedding load; retry after 1s"
	switch reason {
	case "capacity":
		msg = "every engine is at its in-flight limit; retry after 1s"
	case "admission":
		msg = "every engine is at its concurrency limit and no slot is expected in time; retry after 1s"
	}
	writeError(w, http.StatusTooManyRequests, typeRateLimit, "rate_limit_exceeded", "", msg)
	return outcome{statusShed, http.StatusTooManyRequests}
}

func readBody(r io.Reader, n int64) ([]byte, error) {
	if n < 0 || n > 1<<20 {
		n = 512
	}
	buf := bytes.NewBuffer(make([]byte, 0, n+1))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// upstreamURL is path on the engine at base: a base URL ending in /v1
// is an OpenAI base URL, and the routes (/v1/... and the root ones such
// as /tokenize) are the server's.
func upstreamURL(base, path string) string {
	if strings.HasSuffix(base, "/v1") && strings.HasPrefix(path, "/") {
		base = base[:len(base)-3]
	}
	return base + path
}

// roundTrip sends the call's request, with body, to eng: by the
// gateway's own client to a plain-http engine, else by Config.Transport.
func (c *call) roundTrip(ctx context.Context, eng *pick.Engine, body []byte) (*http.Response, error) {
	g, r, w := c.g, c.r, c.w
	if g.client != nil {
		if hp := g.client.Host(eng.URL); hp != nil {
			rb := g.reqBufs.Get().(*reqBuf)
			rb.b = rb.b[:0]
			c.appendRequest(ctx, rb, hp, body)
			resp, err := g.client.Do(ctx, hp, rb.b)
			if cap(rb.b) <= maxPooledRequest {
				g.reqBufs.Put(rb)
			}
			return resp, err
		}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, upstreamURL(eng.URL, r.URL.Path), rd)
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(body))
	req.Header["Content-Type"] = jsonContentType
	for _, h := range forwardedHeaders {
		if h == "Authorization" && g.cfg.tenants != nil {
			continue // the gateway's own API key, not the engine's
		}
		if v := r.Header[h]; len(v) > 0 && v[0] != "" {
			req.Header[h] = v[:1]
		}
	}
	if v := w.Header()[HeaderRequestID]; len(v) > 0 && v[0] != "" {
		req.Header[HeaderRequestID] = v[:1]
	}
	g.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return g.cfg.transport.RoundTrip(req)
}

// maxPooledRequest bounds the request buffers kept for reuse.
const maxPooledRequest = 64 << 10

// reqBuf is a request being written for the engine client; as a
// propagation.TextMapCarrier it appends the trace context headers.
type reqBuf struct{ b []byte }

func (rb *reqBuf) Get(string) string { return "" }
func (rb *reqBuf) Keys() []string    { return nil }
func (rb *reqBuf) Set(key, value string) {
	rb.b = httpwire.AppendHeader(rb.b, key, value)
}

// appendRequest appends the engine's HTTP/1.1 request: the same headers
// as the net/http path (Content-Type, the forwarded client headers, the
// request id, the trace context), then body.
func (c *call) appendRequest(ctx context.Context, rb *reqBuf, hp *engineclient.Host, body []byte) {
	g, r, w := c.g, c.r, c.w
	b := hp.AppendRequestLine(rb.b, r.Method, r.URL.EscapedPath())
	b = append(b, "Content-Type: application/json\r\n"...)
	if body != nil {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	for _, h := range forwardedHeaders {
		if h == HeaderRequestID || (h == "Authorization" && g.cfg.tenants != nil) {
			continue
		}
		if v := r.Header[h]; len(v) > 0 && v[0] != "" {
			b = httpwire.AppendHeader(b, h, v[0])
		}
	}
	if v := w.Header()[HeaderRequestID]; len(v) > 0 && v[0] != "" {
		b = httpwire.AppendHeader(b, HeaderRequestID, v[0])
	}
	rb.b = b
	g.prop.Inject(ctx, rb)
	rb.b = append(append(rb.b, "\r\n"...), body...)
}

// Constant header values, shared by every request (net/http does not
// modify header values).
var (
	jsonContentType = []string{"application/json"}
)

// forwardedHeaders are passed from the client to the engine (canonical
// form).
var forwardedHeaders = [...]string{"Accept", "Authorization", "User-Agent", HeaderRequestID, HeaderSession}

// drain reads the rest of a complete response (at most maxErrorBytes, for
// at most doneGrace) so that its connection goes back to the pool, then
// releases the upstream request.
func (g *Gateway) drain(body io.ReadCloser, cancel context.CancelCauseFunc) {
	defer g.drains.done()
	t := time.AfterFunc(doneGrace, func() { cancel(relay.ErrIdle) })
	var b [512]byte
	for n := 0; n < maxErrorBytes; {
		m, err := body.Read(b[:])
		n += m
		if err != nil {
			break
		}
	}
	t.Stop()
	body.Close()
	cancel(nil)
}

func (g *Gateway) serveModels(w http.ResponseWriter, r *http.Request) {
	setRequestID(w, r)
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, typeInvalid, "method_not_allowed", "", r.Method+" not allowed; use GET")
		return
	}
	if _, ok := g.keyTenant(w, r); !ok { // tenants.go
		return
	}
	g.askModels(w, r)
}

// askModels answers GET /v1/models: the union of the engines' model
// lists when their signals give every engine's, else an engine's own
// answer relayed (trying up to MaxAttempts engines); a 503 or 502 error
// when none answers.
func (g *Gateway) askModels(w http.ResponseWriter, r *http.Request) {
	rt := g.cur.Load()
	if rt == nil || rt.table == nil {
		writeError(w, 503, typeUnavailable, "no_engines", "", "no engines to ask for models")
		return
	}
	if ids, ok := g.listedModels(rt); ok { // models.go
		writeModelList(w, ids)
		return
	}
	var tried [DefaultMaxAttempts]int32
	preq := pick.Request{Key: rand.Uint64()}
	c := call{g: g, w: w, r: r, versionHeader: rt.versionHeader}
	for n := 0; n < g.cfg.maxAttempts; n++ {
		preq.NowMs = g.cfg.now().UnixMilli()
		i, _, tk := rt.table.PickRequest(&preq, tried[:n])
		if i < 0 {
			break
		}
		tried[n] = int32(i)
		a := try{eng: rt.table.Engine(i)} // no body, no first token to tell
		c.start = g.cfg.now()
		c.send(r.Context(), &a) // call.go
		rt.table.Finished(i, tk, false, 0, 0)
		rt.table.Done(i)
		if a.res.committed || r.Context().Err() != nil {
			return
		}
	}
	writeError(w, http.StatusBadGateway, typeServer, "upstream_error", "", "no engine answered")
}

// serveModel answers GET /v1/models/{id} as OpenAI does: the model object,
// or 404 model_not_found. With --models the gateway's list decides;
// otherwise it is the entry of an engine's /v1/models list (engines need
// not implement /v1/models/{id} themselves).
func (g *Gateway) serveModel(w http.ResponseWriter, r *http.Request) {
	setRequestID(w, r)
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, typeInvalid, "method_not_allowed", "", r.Method+" not allowed; use GET")
		return
	}
	if _, ok := g.keyTenant(w, r); !ok { // tenants.go
		return
	}
	id := r.PathValue("id")
	notFound := func() {
		writeError(w, http.StatusNotFound, typeInvalid, "model_not_found", "model", fmt.Sprintf("the model %q does not exist", id))
	}
	if g.models != nil {
		if !g.models[id] {
			notFound()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "switchyard"})
		_, _ = w.Write(append(b, '\n'))
		return
	}
	list := newBufferedResponse()
	lr := r.Clone(r.Context())
	lr.URL.Path, lr.URL.RawPath = "/v1/models", ""
	g.askModels(list, lr)
	if list.status != http.StatusOK {
		copyBuffered(w, list) // the engines' (or the gateway's) error as is
		return
	}
	var models struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(list.body.Bytes(), &models); err != nil {
		writeError(w, http.StatusBadGateway, typeServer, "upstream_error", "", "the engine's model list is not JSON")
		return
	}
	for _, m := range models.Data {
		var head struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &head) == nil && head.ID == id {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(append(m, '\n'))
			return
		}
	}
	notFound()
}

// bufferedResponse is an http.ResponseWriter that keeps the response (at
// most maxErrorBytes of body) for the gateway to read.
type bufferedResponse struct {
	hdr    http.Header
	status int
	body   bytes.Buffer
}

func newBufferedResponse() *bufferedResponse { return &bufferedResponse{hdr: http.Header{}} }

func (b *bufferedResponse) Header() http.Header { return b.hdr }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	if b.body.Len()+len(p) > maxErrorBytes {
		return 0, errors.New("model list too large")
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) Flush() {}

// copyBuffered writes a buffered response to w.
func copyBuffered(w http.ResponseWriter, b *bufferedResponse) {
	for k, v := range b.hdr {
		w.Header()[k] = v
	}
	w.WriteHeader(max(b.status, http.StatusOK))
	_, _ = w.Write(b.body.Bytes())
}
