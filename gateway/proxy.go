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
	"github.com/switchyard-llm/switchyard/gateway/httpserver"
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
// checks the header itself, handleInference): every answer, errors
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
	out := g.handleInference(ctx, w, r, ev, start)
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

func (g *Gateway) handleInference(ctx context.Context, w http.ResponseWriter, r *http.Request, ev *schemas.RoutingEvent, start time.Time) outcome {
	if !g.identify(w, r, ev) { // event.go
		return clientError(w, 400, "invalid_header", HeaderRequestID, "header "+HeaderRequestID+" must be printable ASCII of at most 256 bytes")
	}
	prio, weight, tenantDone, out, ok := g.authorize(w, r, ev) // tenants.go
	if !ok {
		return out
	}
	if tenantDone != nil {
		defer tenantDone()
	}
	session := r.Header.Get(HeaderSession)
	if !validHeaderValue(session) {
		return clientError(w, 400, "invalid_header", HeaderSession, "header "+HeaderSession+" must be printable ASCII of at most 256 bytes")
	}
	if r.ContentLength > g.cfg.maxBodyBytes {
		return clientError(w, 413, "request_too_large", "", fmt.Sprintf("request body of %d bytes exceeds the limit of %d", r.ContentLength, g.cfg.maxBodyBytes))
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, g.cfg.maxBodyBytes), r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return clientError(w, 413, "request_too_large", "", fmt.Sprintf("request body exceeds the limit of %d bytes", g.cfg.maxBodyBytes))
		}
		if errors.Is(err, httpserver.ErrBodyTimeout) {
			w.Header().Set("Connection", "close")
			return clientError(w, http.StatusRequestTimeout, "request_timeout", "", "the request body did not arrive in time")
		}
		if r.Context().Err() != nil {
			return outcome{statusCanceled, 499}
		}
		return clientError(w, 400, "invalid_body", "", "reading request body: "+err.Error())
	}
	in, err := parseInference(body)
	if err != nil {
		var br *badRequest
		if errors.As(err, &br) {
			return clientError(w, br.status, br.code, br.param, br.msg)
		}
		return clientError(w, 400, "invalid_json", "", err.Error())
	}
	ev.Model, ev.Stream = in.Model, in.Stream
	ev.AffinityKeyHash = affinityKey(session, in)
	if g.models != nil {
		if br := in.checkModel(g.models); br != nil {
			return clientError(w, br.status, br.code, br.param, br.msg)
		}
	}
	rt := g.cur.Load()
	if rt == nil {
		writeError(w, 503, typeUnavailable, "no_engines", "", "no snapshot and no static engines: nothing to route to")
		return outcome{statusErr, 503}
	}
	ev.SnapshotVersion = rt.version
	w.Header()[HeaderSnapshot] = rt.versionHeader
	if rt.table != nil {
		t, mv, ok := g.tableFor(rt, in.Model) // models.go
		if !ok {
			return clientError(w, http.StatusNotFound, "model_not_found", "model", fmt.Sprintf("the model %q does not exist: no engine of cluster %s serves it", in.Model, g.cfg.cluster))
		}
		if mv != nil && mv.shed > 0 && rand.Float64() < mv.shed && (mv.shed >= 1 || !g.admit.freeSlot(t)) {
			// The model's own plan sheds it (at random: the cluster's
			// priority mix is not kept per model), unless one of its
			// engines would start it at once (admission.freeSlot).
			ev.DecisionReason, ev.FailureReason = "shed", schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT
			return g.shed(w, "snapshot", prio)
		}
		if t != rt.table || mv != nil {
			part := *rt
			part.table, part.modelPart = t, t != rt.table
			if mv != nil {
				part.shed = 0 // the model's plan's shed is decided above
			}
			rt = &part
		}
	}
	if rt.shed > 0 {
		g.shedder.Count(prio)
		if rt.table == nil || (g.shedder.Decide(prio, rand.Float64()) && (rt.shed >= 1 || !g.admit.freeSlot(rt.table))) {
			ev.DecisionReason, ev.FailureReason = "shed", schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT
			return g.shed(w, "snapshot", prio)
		}
	}
	if err := g.admit.acquire(ctx, g.cfg.cluster, int(prio), ev.Tenant, weight, g.cfg.now); err != nil { // admission.go
		if r.Context().Err() != nil {
			return outcome{statusCanceled, 499}
		}
		ev.DecisionReason, ev.FailureReason = "shed", schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION
		return g.shed(w, "admission", prio)
	}
	defer g.admit.release(int(prio), ev.Tenant)
	arr := g.startArrival(ev) // arrival.go
	defer arr.finish(ev)
	var blk [32]uint64
	fwd, strip := body, false
	var blocks []uint64
	var promptBytes int
	switch r.URL.Path {
	case pathResponses:
		// Its usage always comes in the stream's last event: nothing to
		// ask for.
		blocks, promptBytes = responsesChain(blk[:0], in.Instructions, in.Input)
	case pathChat, pathCompletions:
		fwd, strip = withUsage(body, in)
		blocks, promptBytes = promptChain(blk[:0], in.Messages, in.Prompt)
	default:
		// Embeddings and pooling take input, tokenize prompt or
		// messages; the others (rerank, score, detokenize) are counted
		// by their body's size.
		blocks, promptBytes = promptChain(blk[:0], in.Messages, in.Prompt)
		if promptBytes == 0 {
			blocks, promptBytes = responsesChain(blk[:0], nil, in.Input)
		}
		if promptBytes == 0 {
			promptBytes = len(body)
		}
	}
	preq := pick.Request{Key: ev.AffinityKeyHash, PromptTokens: promptBytes / 4, Blocks: blocks, BlockTokens: blockTokens, Model: modelHash(in.Model)}
	return g.route(ctx, w, r, rt, &preq, bodies{fwd: fwd, own: body, choices: in.choices(), generates: generates(r.URL.Path)}, in.Stream, strip, prio, ev, start)
}

// bodies are a request's forwarded body (with the stream_options the
// gateway added, see withUsage) and the client's own, and how its answer
// is accounted: the choices the engine generates (n; a stream's time
// between tokens is per choice) and whether the route generates tokens
// at all (an embedding's or a tokenization's latency is no sample of the
// engine's generation).
type bodies struct {
	fwd, own  []byte
	choices   int
	generates bool
}

// firstToken tells the table of an attempt's first output token (for
// relay.Stream.Relay): the engine's TTFT is the gateway's, from the
// attempt's start, less the round trip to the engine, floored at 0.
type firstToken struct {
	t      *pick.Table
	i      int
	tk     pick.Ticket
	queued time.Duration // the attempt's start, after the request's
	rttMs  float64
	// choices a stream interleaves (relay.Stream.Choices).
	choices int
}

func (f *firstToken) firstToken(ttft time.Duration) {
	f.t.FirstToken(f.i, f.tk, max(ms(ttft-f.queued)-f.rttMs, 0))
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

// route runs up to MaxAttempts attempts on different engines, each
// placed by the table's PickRequest and accounted back to it
// (FirstToken, Finished, Done). An engine that answers 429 or 503 is
// saturated: the request is retried elsewhere (within the budget) and
// the engine penalized; only the last such answer reaches the client.
//
// body is forwarded as is (see withUsage); stream: the client asked for
// a stream; strip: the gateway asked for the usage chunk, so it is
// stripped from the client's stream. (preq is apart from body so that
// its prompt blocks stay on the caller's stack.)
func (g *Gateway) route(ctx context.Context, w http.ResponseWriter, r *http.Request, rt *routing, preq *pick.Request, body bodies, stream, strip bool, prio shed.Priority, ev *schemas.RoutingEvent, start time.Time) outcome {
	var tried [DefaultMaxAttempts]int32
	n := 0
	var last attemptResult
	for attempt := 0; attempt < g.cfg.maxAttempts; attempt++ {
		if attempt > 0 {
			if r.Context().Err() != nil {
				return outcome{statusCanceled, 499}
			}
			if g.cut.Err() != nil {
				break // the drain timed out: no other engine (drain.go)
			}
			if !g.budget.TryRetry(g.cfg.now()) {
				g.m.budgetDenied.WithLabelValues(g.cfg.cluster).Inc()
				ev.FailureReason = schemas.FailureReason_FAILURE_REASON_RETRY_BUDGET
				break
			}
			g.retries.Add(1)
			g.m.retries.WithLabelValues(g.cfg.cluster).Inc()
		}
		preq.NowMs = g.cfg.now().UnixMilli()
		i, reason, tk := rt.table.PickRequest(preq, tried[:n])
		if i < 0 && rt.modelPart {
			// Admission counted the cluster's slots; the model's own
			// engines are full: queue in one rather than answer 429.
			i, reason, tk = rt.table.PickBeyondLimit(preq, tried[:n])
		}
		if i < 0 {
			if attempt == 0 {
				ev.DecisionReason, ev.FailureReason = "shed", schemas.FailureReason_FAILURE_REASON_SHED_CAPACITY
				return g.shed(w, "capacity", prio)
			}
			break
		}
		tried[n] = int32(i)
		n++
		if int(reason) < len(g.hot.picks) && g.hot.picks[reason] != nil {
			g.hot.picks[reason].Inc()
		} else {
			g.m.picks.WithLabelValues(g.cfg.cluster, reason.String()).Inc()
		}
		eng := rt.table.Engine(i)
		ev.AdapterPlacement = schemas.AdapterPlacement_ADAPTER_PLACEMENT_UNSPECIFIED
		if preq.Model != 0 {
			if adapter, home := eng.State.AdapterHome(preq.Model); adapter {
				placement := "elsewhere"
				ev.AdapterPlacement = schemas.AdapterPlacement_ADAPTER_PLACEMENT_ELSEWHERE
				if home {
					placement = "home"
					ev.AdapterPlacement = schemas.AdapterPlacement_ADAPTER_PLACEMENT_HOME
				}
				g.m.adapterPicks.WithLabelValues(g.cfg.cluster, placement).Inc()
			}
		}
		ev.EngineId = eng.ID
		ev.Attempts = uint32(attempt + 1)
		ev.DecisionReason = reason.String()
		if attempt > 0 {
			ev.DecisionReason = "retry"
		}
		rtt := g.engineRTT(eng.State, eng.URL)
		ft := firstToken{t: rt.table, i: i, tk: tk, rttMs: eng.RTTms, choices: body.choices}
		if !(ft.rttMs > 0) {
			ft.rttMs = ms(rtt)
		}
		began := g.cfg.now()
		res := g.attemptBody(ctx, w, r, rt, eng, body, stream, strip, &ft, start)
		tbot, e2e := 0.0, 0.0
		if res.sse {
			tbot = ms(res.tbot)
		}
		if res.complete && body.generates {
			e2e = max(ms(g.cfg.now().Sub(began))-ft.rttMs, 0) // the engine's time on it
		}
		rt.table.Finished(i, tk, res.firstToken, tbot, e2e)
		sampled := &res
		if !body.generates {
			// Only a refusal (saturated, timed out) is news of the
			// engine's load: no latency sample.
			sampled = &attemptResult{saturated: res.saturated, failReason: res.failReason}
		}
		g.admit.sample(eng, sampled, began, g.cfg.now(), time.Duration(ft.rttMs*float64(time.Millisecond))) // admission.go
		rt.table.Done(i)
		if rtt == 0 { // a first connection may have measured it
			rtt = g.engineRTT(eng.State, eng.URL)
		}
		if res.status != 0 {
			ev.Stream = res.sse
		}
		ev.TtftMs, ev.MeanTbotMs = ms(res.ttft), ms(res.tbot)
		ev.NetworkRttMs, ev.EngineTtftMs = ms(rtt), 0
		if res.firstToken && rtt > 0 {
			ev.EngineTtftMs = max(ms(res.ttft-res.queued-rtt), 0)
		}
		ev.PromptTokens, ev.OutputTokens, ev.CachedTokens = res.usage.PromptTokens, res.usage.OutputTokens, res.usage.CachedTokens
		// The picker's estimate when the engine took the request but no
		// usage came (event.go).
		ev.UsageEstimated = estimatePrompt(ev, &res, preq.PromptTokens, r.Context().Err() != nil)
		g.noteAttempt(ev, eng.ID, &res, began, r.Context().Err() != nil) // event.go
		if res.saturated && r.Context().Err() == nil {
			g.m.upstreamFails.WithLabelValues(g.cfg.cluster, res.failReason).Inc()
			g.outlier.Saturated(eng.State)
		} else if res.failReason != "" && res.failReason != "drain_timeout" && r.Context().Err() == nil && !res.complete {
			g.m.upstreamFails.WithLabelValues(g.cfg.cluster, res.failReason).Inc()
			if res.failReason == "first_token_timeout" || res.failReason == "idle_timeout" {
				g.outlier.Timeout(eng.State) // busy, not broken: a penalty, never an ejection
			} else if g.outlier.Failure(eng.State, g.cfg.now()) {
				g.m.ejections.WithLabelValues(g.cfg.cluster, eng.ID).Inc()
				g.log.Warn("engine ejected", "engine", eng.ID)
			}
		} else if res.failReason == "" {
			var ttft time.Duration // unknown without a streamed first token
			if res.firstToken {
				ttft = res.ttft - res.queued
			}
			g.outlier.Success(eng.State, ttft)
		}
		switch {
		case res.complete:
			return outcome{statusOK, res.status}
		case r.Context().Err() != nil:
			return outcome{statusCanceled, 499}
		case res.committed && res.failReason != "":
			return outcome{statusErr, res.status}
		case res.committed && res.status >= 400:
			return outcome{statusClientErr, res.status}
		case res.committed:
			return outcome{statusOK, res.status}
		}
		last = res
	}
	if last.saturated {
		if last.retryAfter != "" {
			w.Header().Set("Retry-After", last.retryAfter)
		}
		typ, code := typeRateLimit, "rate_limit_exceeded"
		if last.status == http.StatusServiceUnavailable {
			typ, code = typeUnavailable, "engine_overloaded"
		}
		writeError(w, last.status, typ, code, "", fmt.Sprintf("engine %s is saturated (status %d) and no other engine could take the request", ev.EngineId, last.status))
		return outcome{statusErr, last.status}
	}
	if last.failReason == "drain_timeout" {
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusServiceUnavailable, typeUnavailable, "gateway_shutdown", "", "gateway shutting down: the request outlived the drain timeout; retry the request")
		return outcome{statusErr, http.StatusServiceUnavailable}
	}
	status, code := http.StatusBadGateway, "upstream_error"
	if last.failReason == "first_token_timeout" {
		status, code = http.StatusGatewayTimeout, "upstream_timeout"
	}
	// The client learns which engine failed and how (the fail reason),
	// never the engine's address or the transport's error, which stay in
	// the log.
	msg := "no engine answered"
	if last.failReason != "" {
		msg = fmt.Sprintf("engine %s failed (%s) and no other engine could take the request", ev.EngineId, last.failReason)
	}
	if last.err != nil {
		g.log.Debug("request failed", "engine", ev.EngineId, "reason", last.failReason, "err", last.err)
	}
	writeError(w, status, typeServer, code, "", msg)
	return outcome{statusErr, status}
}

// attemptBody is attempt with the forwarded body, or the client's own
// when the engine does not take the stream_options the gateway added:
// known from an earlier refusal, or learned now from a 400 that names
// them (then sent again at once with the client's body).
func (g *Gateway) attemptBody(ctx context.Context, w http.ResponseWriter, r *http.Request, rt *routing, eng *pick.Engine, body bodies, stream, strip bool, ft *firstToken, start time.Time) attemptResult {
	if strip {
		if _, no := g.noStreamOptions.Load(eng.State); no {
			return g.attempt(ctx, w, r, rt, eng, body.own, stream, false, ft, start)
		}
	}
	res := g.attempt(ctx, w, r, rt, eng, body.fwd, stream, strip, ft, start)
	if res.usageRefused {
		g.noStreamOptions.Store(eng.State, struct{}{})
		g.log.Warn("engine refuses stream_options; relaying without usage", "engine", eng.ID)
		res = g.attempt(ctx, w, r, rt, eng, body.own, stream, false, ft, start)
	}
	return res
}

// attemptResult says what one attempt did.
type attemptResult struct {
	committed  bool   // bytes reached the client: no retry possible
	complete   bool   // the whole response (up to data: [DONE] or a Responses stream's last event) was relayed
	status     int    // HTTP status sent (or received)
	failReason string // "" unless the engine failed
	err        error
	ttft, tbot time.Duration // ttft only for a streamed response
	firstToken bool          // a streamed output event arrived
	sse        bool          // the response was an event stream
	queued     time.Duration // time before this attempt started
	drain      bool          // complete with the engine's response still open: drain it
	usage      relay.Usage
	saturated  bool // the engine answered 429 or 503
	// usageRefused: the engine answered 400 naming stream_options, which
	// the gateway added (strip): nothing was relayed.
	usageRefused bool
	retryAfter   string // its Retry-After
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

// attempt sends body to eng and relays the answer; stream and strip as
// in route.
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, r *http.Request, rt *routing, eng *pick.Engine, body []byte, stream, strip bool, ft *firstToken, start time.Time) (res attemptResult) {
	res.queued = g.cfg.now().Sub(start)
	if ft != nil {
		ft.queued = res.queued
	}
	// The upstream request follows the client (a client that leaves
	// cancels it) but is not derived from its context: the tail of a
	// stream that is complete at data: [DONE] is drained after the handler
	// returned, which keeps the engine connection for reuse without making
	// the client wait for it.
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	client := ctx // ctx is reassigned below; the AfterFunc may run at once
	stopFollow := context.AfterFunc(client, func() { cancel(context.Cause(client)) })
	// A stream still running at the drain timeout ends (drain.go).
	stopCut := context.AfterFunc(g.cut, func() { cancel(relay.ErrDrain) })
	var respBody io.ReadCloser
	defer func() {
		stopCut()
		if res.drain && stopFollow() && g.drains.start() {
			go g.drain(respBody, cancel)
			return
		}
		stopFollow()
		if respBody != nil {
			respBody.Close()
		}
		cancel(nil)
	}()
	ctx, span := actx, trace.SpanFromContext(actx)
	if g.tracing {
		ctx, span = g.tracer.Start(actx, "switchyard.gateway.upstream", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("switchyard.engine", eng.ID)), trace.WithAttributes(serverAttributes(eng.URL)...))
	}
	defer span.End()
	firstTimer := time.AfterFunc(g.cfg.firstTokenTimeout, func() { cancel(relay.ErrFirstToken) })
	defer firstTimer.Stop()

	resp, err := g.roundTrip(ctx, r, w, eng, body)
	if err != nil {
		res.failReason, res.err = relay.FailReason(actx, "connect"), fmt.Errorf("%s: %w", eng.ID, relay.CauseOr(actx, err))
		span.SetStatus(codes.Error, res.failReason)
		return res
	}
	respBody = resp.Body
	res.status = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		// The engine is saturated: try another one.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		res.saturated, res.retryAfter = true, resp.Header.Get("Retry-After")
		res.failReason, res.err = "saturated", fmt.Errorf("status %d", resp.StatusCode)
		span.SetStatus(codes.Error, res.failReason)
		return res
	case resp.StatusCode >= 500:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		res.failReason, res.err = "status_5xx", fmt.Errorf("status %d", resp.StatusCode)
		span.SetStatus(codes.Error, res.failReason)
		return res
	case resp.StatusCode >= 400:
		// The request's fault: pass the engine's answer through, no retry.
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		if err != nil {
			res.failReason, res.err = relay.FailReason(actx, "stream"), relay.CauseOr(actx, err)
			return res
		}
		if strip && (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity) &&
			bytes.Contains(b, []byte("stream_options")) {
			res.usageRefused = true // our addition, not the client's fault
			return res
		}
		g.setHeaders(w, resp, eng, rt)
		if shaped, changed := openAIShaped(resp.StatusCode, b); changed {
			b = shaped
			w.Header()["Content-Type"] = jsonContentType
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(b)
		res.committed = true
		return res
	}
	responses := r.URL.Path == pathResponses
	// An event stream is relayed as one, whether or not the client's
	// stream read as true: the engine judges the field.
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		g.relaySSE(actx, w, resp, eng, rt, start, firstTimer, cancel, strip, responses, ft, &res)
	} else {
		g.copyWhole(actx, w, resp, eng, rt, start, responses, &res)
	}
	if res.failReason != "" {
		span.SetStatus(codes.Error, res.failReason)
	}
	return res
}

// roundTrip sends the request to eng: by the gateway's own client to a
// plain-http engine, else by Config.Transport.
func (g *Gateway) roundTrip(ctx context.Context, r *http.Request, w http.ResponseWriter, eng *pick.Engine, body []byte) (*http.Response, error) {
	if g.client != nil {
		if hp := g.client.Host(eng.URL); hp != nil {
			rb := g.reqBufs.Get().(*reqBuf)
			rb.b = rb.b[:0]
			g.appendRequest(ctx, rb, hp, r, w, body)
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
func (g *Gateway) appendRequest(ctx context.Context, rb *reqBuf, hp *engineclient.Host, r *http.Request, w http.ResponseWriter, body []byte) {
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

func (g *Gateway) setHeaders(w http.ResponseWriter, resp *http.Response, eng *pick.Engine, rt *routing) {
	h := w.Header()
	if ct := resp.Header["Content-Type"]; len(ct) > 0 && ct[0] != "" {
		h["Content-Type"] = ct[:1]
	}
	h.Set(HeaderEngine, eng.ID)
	h[HeaderSnapshot] = rt.versionHeader
}

// copyWhole relays a non-streaming response, read whole first so that a
// failure before its end can still be retried.
// A Responses API response (responses) has its own usage object.
func (g *Gateway) copyWhole(ctx context.Context, w http.ResponseWriter, resp *http.Response, eng *pick.Engine, rt *routing, start time.Time, responses bool, res *attemptResult) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, relay.MaxResponseBytes))
	if err != nil {
		res.failReason, res.err = relay.FailReason(ctx, "stream"), relay.CauseOr(ctx, err)
		return
	}
	// No TTFT: a whole response tells the time to its end only.
	if bytes.Contains(b, []byte(`"usage"`)) {
		if responses {
			res.usage.SetResponse(b)
		} else {
			res.usage.Set(b)
		}
	}
	g.setHeaders(w, resp, eng, rt)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
	res.committed, res.complete = true, true
}

// relaySSE relays an event stream (see relay.Stream.Relay); responses: a
// Responses API stream.
func (g *Gateway) relaySSE(ctx context.Context, w http.ResponseWriter, resp *http.Response, eng *pick.Engine, rt *routing, start time.Time, firstTimer *time.Timer, cancel context.CancelCauseFunc, strip, responses bool, ft *firstToken, res *attemptResult) {
	bp := g.bufs.Get().(*[]byte)
	defer g.bufs.Put(bp)
	st := relay.Stream{
		Now:         g.cfg.now,
		Start:       start,
		Status:      resp.StatusCode,
		IdleTimeout: g.cfg.idleTimeout,
		Cancel:      cancel,
		FirstToken:  firstTimer,
		Buf:         *bp,
		StripUsage:  strip,
		Responses:   responses,
		Choices:     1,
	}
	if ft != nil {
		st.Choices = max(ft.choices, 1)
	}
	var first func(time.Duration)
	if ft != nil {
		first = ft.firstToken
	}
	r := st.Relay(ctx, w, resp.Body, func(http.Header) { g.setHeaders(w, resp, eng, rt) }, first)
	res.committed, res.complete, res.drain = r.Committed, r.Complete, r.Drain
	res.failReason, res.err = r.FailReason, r.Err
	res.ttft, res.tbot, res.usage = r.TTFT, r.TBOT, r.Usage
	res.sse, res.firstToken = true, r.FirstToken
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
	for n := 0; n < g.cfg.maxAttempts; n++ {
		preq.NowMs = g.cfg.now().UnixMilli()
		i, _, tk := rt.table.PickRequest(&preq, tried[:n])
		if i < 0 {
			break
		}
		tried[n] = int32(i)
		res := g.attempt(r.Context(), w, r, rt, rt.table.Engine(i), nil, false, false, nil, g.cfg.now())
		rt.table.Finished(i, tk, false, 0, 0)
		rt.table.Done(i)
		if res.committed || r.Context().Err() != nil {
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
