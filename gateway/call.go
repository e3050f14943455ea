package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-llm/switchyard/gateway/httpserver"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/gateway/relay"
	"github.com/switchyard-llm/switchyard/gateway/shed"
	"github.com/switchyard-llm/switchyard/schemas"
)

// call is one inference request on its way through the proxy: what
// serveInference knows at its start, and what each stage (handle) fills
// in for the later ones. It lives on serveInference's stack. Its
// pick.Request is kept apart (route's preq) so that the prompt blocks
// stay on the caller's stack: a call holds values that leak (the
// writer, the request), and escape analysis does not tell one field
// from another.
type call struct {
	g     *Gateway
	w     http.ResponseWriter
	r     *http.Request
	ev    *schemas.RoutingEvent
	start time.Time

	// authorize: the tenant's priority and weight, and its release (nil
	// without tenants).
	prio       shed.Priority
	weight     float64
	tenantDone func()

	// parse: the request as read, and the client's body.
	in  *inference
	own []byte

	// plan: the table the request is routed on (the snapshot's, or the
	// part of it that serves the request's model: modelPart), and the
	// snapshot's version as the X-Switchyard-Snapshot value.
	table         *pick.Table
	modelPart     bool
	versionHeader []string

	// forward: the body forwarded (own, or own with the stream_options the
	// gateway added, withUsage: strip then says the usage chunk is
	// stripped from the client's stream), and how the answer is
	// accounted: the choices the engine generates (n; a stream's time
	// between tokens is per choice) and whether the route generates tokens
	// at all (an embedding's or a tokenization's latency is no sample of
	// the engine's generation).
	fwd       []byte
	strip     bool
	choices   int
	generates bool
}

// handle runs the request through its stages: authorize, parse, plan,
// admit, forward, then route (pick, attempt, relay and account, per
// attempt). A stage that ends the request has answered the client and
// returns its outcome, which serveInference records.
func (c *call) handle(ctx context.Context) outcome {
	if out, ok := c.authorize(); !ok {
		return out
	}
	if c.tenantDone != nil {
		defer c.tenantDone()
	}
	if out, ok := c.parse(); !ok {
		return out
	}
	if out, ok := c.plan(); !ok {
		return out
	}
	if out, ok := c.admit(ctx); !ok {
		return out
	}
	g := c.g
	defer g.admit.release(int(c.prio), c.ev.Tenant)
	arr := g.startArrival(c.ev) // arrival.go
	defer arr.finish(c.ev)
	var blk [32]uint64
	preq := c.forward(blk[:0])
	return c.route(ctx, &preq)
}

// canceled reports whether the client went away.
func (c *call) canceled() bool { return c.r.Context().Err() != nil }

// shed answers 429 for reason (snapshot, admission, capacity; Gateway.shed)
// and marks the event shed, why.
func (c *call) shed(reason string, why schemas.FailureReason) outcome {
	c.ev.DecisionReason, c.ev.FailureReason = "shed", why
	return c.g.shed(c.w, reason, c.prio)
}

// authorize checks the request id (event.go) and the API key, and takes
// the tenant's priority, weight and concurrency slot (tenants.go).
func (c *call) authorize() (outcome, bool) {
	if !c.g.identify(c.w, c.r, c.ev) { // event.go
		return clientError(c.w, 400, "invalid_header", HeaderRequestID, "header "+HeaderRequestID+" must be printable ASCII of at most 256 bytes"), false
	}
	prio, weight, done, out, ok := c.g.authorize(c.w, c.r, c.ev) // tenants.go
	c.prio, c.weight, c.tenantDone = prio, weight, done
	return out, ok
}

// parse checks the session header, reads the body and parses it, and
// checks its model against the accepted ones (--models).
func (c *call) parse() (outcome, bool) {
	g, w, r := c.g, c.w, c.r
	session := r.Header.Get(HeaderSession)
	if !validHeaderValue(session) {
		return clientError(w, 400, "invalid_header", HeaderSession, "header "+HeaderSession+" must be printable ASCII of at most 256 bytes"), false
	}
	if r.ContentLength > g.cfg.maxBodyBytes {
		return clientError(w, 413, "request_too_large", "", fmt.Sprintf("request body of %d bytes exceeds the limit of %d", r.ContentLength, g.cfg.maxBodyBytes)), false
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, g.cfg.maxBodyBytes), r.ContentLength)
	if err != nil {
		return c.bodyError(err), false
	}
	in, err := parseInference(body)
	if err != nil {
		var br *badRequest
		if errors.As(err, &br) {
			return clientError(w, br.status, br.code, br.param, br.msg), false
		}
		return clientError(w, 400, "invalid_json", "", err.Error()), false
	}
	c.ev.Model, c.ev.Stream = in.Model, in.Stream
	c.ev.AffinityKeyHash = affinityKey(session, in)
	if g.models != nil {
		if br := in.checkModel(g.models); br != nil {
			return clientError(w, br.status, br.code, br.param, br.msg), false
		}
	}
	c.in, c.own = in, body
	return outcome{}, true
}

// bodyError answers a body that could not be read.
func (c *call) bodyError(err error) outcome {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return clientError(c.w, 413, "request_too_large", "", fmt.Sprintf("request body exceeds the limit of %d bytes", c.g.cfg.maxBodyBytes))
	}
	if errors.Is(err, httpserver.ErrBodyTimeout) {
		c.w.Header().Set("Connection", "close")
		return clientError(c.w, http.StatusRequestTimeout, "request_timeout", "", "the request body did not arrive in time")
	}
	if c.canceled() {
		return outcome{statusCanceled, 499}
	}
	return clientError(c.w, 400, "invalid_body", "", "reading request body: "+err.Error())
}

// plan takes the table the request is routed on, the snapshot's or its
// model's (models.go), and sheds the request when the snapshot's plan,
// or the model's own, says to.
func (c *call) plan() (outcome, bool) {
	g := c.g
	rt := g.cur.Load()
	if rt == nil {
		writeError(c.w, 503, typeUnavailable, "no_engines", "", "no snapshot and no static engines: nothing to route to")
		return outcome{statusErr, 503}, false
	}
	c.ev.SnapshotVersion = rt.version
	c.w.Header()[HeaderSnapshot] = rt.versionHeader
	c.table, c.versionHeader = rt.table, rt.versionHeader
	shedShare := rt.shed
	if rt.table != nil {
		t, mv, ok := g.tableFor(rt, c.in.Model) // models.go
		if !ok {
			return clientError(c.w, http.StatusNotFound, "model_not_found", "model", fmt.Sprintf("the model %q does not exist: no engine of cluster %s serves it", c.in.Model, g.cfg.cluster)), false
		}
		if mv != nil && mv.shed > 0 && rand.Float64() < mv.shed && (mv.shed >= 1 || !g.admit.freeSlot(t)) {
			// The model's own plan sheds it (at random: the cluster's
			// priority mix is not kept per model), unless one of its
			// engines would start it at once (admission.freeSlot).
			return c.shed("snapshot", schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT), false
		}
		c.table, c.modelPart = t, t != rt.table
		if mv != nil {
			shedShare = 0 // the model's plan's shed is decided above
		}
	}
	if shedShare > 0 {
		g.shedder.Count(c.prio)
		if c.table == nil || (g.shedder.Decide(c.prio, rand.Float64()) && (shedShare >= 1 || !g.admit.freeSlot(c.table))) {
			return c.shed("snapshot", schemas.FailureReason_FAILURE_REASON_SHED_SNAPSHOT), false
		}
	}
	return outcome{}, true
}

// admit waits for an engine slot in admission control (admission.go);
// the caller releases it.
func (c *call) admit(ctx context.Context) (outcome, bool) {
	g := c.g
	if err := g.admit.acquire(ctx, g.cfg.cluster, int(c.prio), c.ev.Tenant, c.weight, g.cfg.now); err != nil {
		if c.canceled() {
			return outcome{statusCanceled, 499}, false
		}
		return c.shed("admission", schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION), false
	}
	return outcome{}, true
}

// forward prepares what goes to the engines: the body forwarded (see
// call) and the request the table places, whose prompt blocks are
// appended to blk.
func (c *call) forward(blk []uint64) pick.Request {
	in, body := c.in, c.own
	c.fwd = body
	var blocks []uint64
	var promptBytes int
	switch c.r.URL.Path {
	case pathResponses:
		// Its usage always comes in the stream's last event: nothing to
		// ask for.
		blocks, promptBytes = responsesChain(blk, in.Instructions, in.Input)
	case pathChat, pathCompletions:
		c.fwd, c.strip = withUsage(body, in)
		blocks, promptBytes = promptChain(blk, in.Messages, in.Prompt)
	default:
		// Embeddings and pooling take input, tokenize prompt or
		// messages; the others (rerank, score, detokenize) are counted
		// by their body's size.
		blocks, promptBytes = promptChain(blk, in.Messages, in.Prompt)
		if promptBytes == 0 {
			blocks, promptBytes = responsesChain(blk, nil, in.Input)
		}
		if promptBytes == 0 {
			promptBytes = len(body)
		}
	}
	c.choices, c.generates = in.choices(), generates(c.r.URL.Path)
	return pick.Request{Key: c.ev.AffinityKeyHash, PromptTokens: promptBytes / 4, Blocks: blocks, BlockTokens: blockTokens, Model: modelHash(in.Model)}
}

// try is one attempt of a call on one engine: where the table placed
// it, the body sent, the upstream request's controls while it runs
// (send), and what came of it.
type try struct {
	eng *pick.Engine
	// ft holds the table, the engine's index in it and the ticket
	// (nil table: none to tell, askModels).
	ft    firstToken
	rtt   time.Duration // the gateway's round trip to the engine when picked (0: unknown)
	began time.Time
	body  []byte // the call's fwd or own
	strip bool   // body asks for the usage the client did not (call.strip)

	span       trace.Span
	cancel     context.CancelCauseFunc // ends the upstream request
	firstTimer *time.Timer             // cancels it at the first-token timeout

	res attemptResult
}

// route runs up to MaxAttempts attempts on different engines, each
// placed by the table's PickRequest and accounted back to it
// (FirstToken, Finished, Done). An engine that answers 429 or 503 is
// saturated: the request is retried elsewhere (within the budget) and
// the engine penalized; only the last such answer reaches the client.
func (c *call) route(ctx context.Context, preq *pick.Request) outcome {
	var tried [DefaultMaxAttempts]int32
	var last attemptResult
	for n := 0; n < c.g.cfg.maxAttempts; n++ {
		if n > 0 {
			if c.canceled() {
				return outcome{statusCanceled, 499}
			}
			if !c.retry() {
				break
			}
		}
		var a try
		if !c.pick(preq, tried[:n], &a) {
			if n == 0 {
				return c.shed("capacity", schemas.FailureReason_FAILURE_REASON_SHED_CAPACITY)
			}
			break
		}
		tried[n] = int32(a.ft.i)
		c.attempt(ctx, &a)
		c.account(&a, preq.PromptTokens)
		if out, done := c.settle(&a.res); done {
			return out
		}
		last = a.res
	}
	return c.fail(&last)
}

// retry reports whether another attempt may start: not after the drain
// timed out (drain.go), nor beyond the retry budget.
func (c *call) retry() bool {
	g := c.g
	if g.cut.Err() != nil {
		return false // the drain timed out: no other engine
	}
	if !g.budget.TryRetry(g.cfg.now()) {
		g.m.budgetDenied.WithLabelValues(g.cfg.cluster).Inc()
		c.ev.FailureReason = schemas.FailureReason_FAILURE_REASON_RETRY_BUDGET
		return false
	}
	g.retries.Add(1)
	g.m.retries.WithLabelValues(g.cfg.cluster).Inc()
	return true
}

// pick places attempt a, after those on the engines in tried, on an
// engine; false when the table has none left.
func (c *call) pick(preq *pick.Request, tried []int32, a *try) bool {
	g, t, ev := c.g, c.table, c.ev
	preq.NowMs = g.cfg.now().UnixMilli()
	i, reason, tk := t.PickRequest(preq, tried)
	if i < 0 && c.modelPart {
		// Admission counted the cluster's slots; the model's own
		// engines are full: queue in one rather than answer 429.
		i, reason, tk = t.PickBeyondLimit(preq, tried)
	}
	if i < 0 {
		return false
	}
	if int(reason) < len(g.hot.picks) && g.hot.picks[reason] != nil {
		g.hot.picks[reason].Inc()
	} else {
		g.m.picks.WithLabelValues(g.cfg.cluster, reason.String()).Inc()
	}
	eng := t.Engine(i)
	c.placeAdapter(eng, preq.Model)
	ev.EngineId = eng.ID
	ev.Attempts = uint32(len(tried) + 1)
	ev.DecisionReason = reason.String()
	if len(tried) > 0 {
		ev.DecisionReason = "retry"
	}
	a.eng, a.rtt = eng, g.engineRTT(eng.State, eng.URL)
	a.ft = firstToken{t: t, i: i, tk: tk, rttMs: eng.RTTms, choices: c.choices}
	if !(a.ft.rttMs > 0) {
		a.ft.rttMs = ms(a.rtt)
	}
	return true
}

// placeAdapter notes whether eng holds the request's adapter (model) at
// home or elsewhere, for an adapter's request.
func (c *call) placeAdapter(eng *pick.Engine, model uint64) {
	c.ev.AdapterPlacement = schemas.AdapterPlacement_ADAPTER_PLACEMENT_UNSPECIFIED
	if model == 0 {
		return
	}
	adapter, home := eng.State.AdapterHome(model)
	if !adapter {
		return
	}
	placement := "elsewhere"
	c.ev.AdapterPlacement = schemas.AdapterPlacement_ADAPTER_PLACEMENT_ELSEWHERE
	if home {
		placement = "home"
		c.ev.AdapterPlacement = schemas.AdapterPlacement_ADAPTER_PLACEMENT_HOME
	}
	c.g.m.adapterPicks.WithLabelValues(c.g.cfg.cluster, placement).Inc()
}

// attempt sends the forwarded body to a's engine, or the client's own
// when the engine does not take the stream_options the gateway added:
// known from an earlier refusal, or learned now from a 400 that names
// them (then sent again at once with the client's body).
func (c *call) attempt(ctx context.Context, a *try) {
	g := c.g
	a.began = g.cfg.now()
	a.body, a.strip = c.fwd, c.strip
	if c.strip {
		if _, no := g.noStreamOptions.Load(a.eng.State); no {
			a.body, a.strip = c.own, false
		}
	}
	c.send(ctx, a)
	if a.res.usageRefused {
		g.noStreamOptions.Store(a.eng.State, struct{}{})
		g.log.Warn("engine refuses stream_options; relaying without usage", "engine", a.eng.ID)
		a.body, a.strip = c.own, false
		c.send(ctx, a)
	}
}

// account tells what attempt a did to the table, admission control, the
// routing event and the outlier detector; estimated is the prompt's
// tokens as the picker estimated them.
func (c *call) account(a *try, estimated int) {
	g, ev, res := c.g, c.ev, &a.res
	tbot, e2e := 0.0, 0.0
	if res.sse {
		tbot = ms(res.tbot)
	}
	if res.complete && c.generates {
		e2e = max(ms(g.cfg.now().Sub(a.began))-a.ft.rttMs, 0) // the engine's time on it
	}
	a.ft.t.Finished(a.ft.i, a.ft.tk, res.firstToken, tbot, e2e)
	sampled := res
	if !c.generates {
		// Only a refusal (saturated, timed out) is news of the
		// engine's load: no latency sample.
		sampled = &attemptResult{saturated: res.saturated, failReason: res.failReason}
	}
	g.admit.sample(a.eng, sampled, a.began, g.cfg.now(), time.Duration(a.ft.rttMs*float64(time.Millisecond))) // admission.go
	a.ft.t.Done(a.ft.i)
	rtt := a.rtt
	if rtt == 0 { // a first connection may have measured it
		rtt = g.engineRTT(a.eng.State, a.eng.URL)
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
	ev.UsageEstimated = estimatePrompt(ev, res, estimated, c.canceled())
	g.noteAttempt(ev, a.eng.ID, res, a.began, c.canceled()) // event.go
	c.judge(a)
}

// judge tells the outlier detector how a's engine did: saturated, failed
// (a timeout is a penalty, never an ejection) or answered. A client that
// left, or the drain's cut, says nothing of the engine.
func (c *call) judge(a *try) {
	g, res, st := c.g, &a.res, a.eng.State
	switch {
	case res.saturated && !c.canceled():
		g.m.upstreamFails.WithLabelValues(g.cfg.cluster, res.failReason).Inc()
		g.outlier.Saturated(st)
	case res.failReason != "" && res.failReason != "drain_timeout" && !c.canceled() && !res.complete:
		g.m.upstreamFails.WithLabelValues(g.cfg.cluster, res.failReason).Inc()
		if res.failReason == "first_token_timeout" || res.failReason == "idle_timeout" {
			g.outlier.Timeout(st) // busy, not broken: a penalty, never an ejection
		} else if g.outlier.Failure(st, g.cfg.now()) {
			g.m.ejections.WithLabelValues(g.cfg.cluster, a.eng.ID).Inc()
			g.log.Warn("engine ejected", "engine", a.eng.ID)
		}
	case res.failReason == "":
		var ttft time.Duration // unknown without a streamed first token
		if res.firstToken {
			ttft = res.ttft - res.queued
		}
		g.outlier.Success(st, ttft)
	}
}

// settle returns the request's outcome once an attempt ended it (done):
// complete, the client gone, or bytes relayed that no retry can take
// back.
func (c *call) settle(res *attemptResult) (out outcome, done bool) {
	switch {
	case res.complete:
		return outcome{statusOK, res.status}, true
	case c.canceled():
		return outcome{statusCanceled, 499}, true
	case res.committed && res.failReason != "":
		return outcome{statusErr, res.status}, true
	case res.committed && res.status >= 400:
		return outcome{statusClientErr, res.status}, true
	case res.committed:
		return outcome{statusOK, res.status}, true
	}
	return outcome{}, false
}

// fail answers the client when no attempt succeeded; last is the last
// attempt's result.
func (c *call) fail(last *attemptResult) outcome {
	w, ev := c.w, c.ev
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
		c.g.log.Debug("request failed", "engine", ev.EngineId, "reason", last.failReason, "err", last.err)
	}
	writeError(w, status, typeServer, code, "", msg)
	return outcome{statusErr, status}
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

// send sends a.body to a's engine and relays the answer into a.res.
func (c *call) send(ctx context.Context, a *try) {
	g := c.g
	a.res = attemptResult{queued: g.cfg.now().Sub(c.start)}
	a.ft.queued = a.res.queued
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
		if a.res.drain && stopFollow() && g.drains.start() {
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
			trace.WithAttributes(attribute.String("switchyard.engine", a.eng.ID)), trace.WithAttributes(serverAttributes(a.eng.URL)...))
	}
	defer span.End()
	firstTimer := time.AfterFunc(g.cfg.firstTokenTimeout, func() { cancel(relay.ErrFirstToken) })
	defer firstTimer.Stop()

	resp, err := c.roundTrip(ctx, a.eng, a.body)
	if err != nil {
		a.res.failReason, a.res.err = relay.FailReason(actx, "connect"), fmt.Errorf("%s: %w", a.eng.ID, relay.CauseOr(actx, err))
		span.SetStatus(codes.Error, a.res.failReason)
		return
	}
	respBody = resp.Body
	a.span, a.cancel, a.firstTimer = span, cancel, firstTimer
	c.relay(actx, a, resp)
}

// relay passes the engine's answer resp to the client, or notes why it
// cannot (saturated, failed, refused the gateway's stream_options).
func (c *call) relay(ctx context.Context, a *try, resp *http.Response) {
	res := &a.res
	res.status = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		// The engine is saturated: try another one.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		res.saturated, res.retryAfter = true, resp.Header.Get("Retry-After")
		res.failReason, res.err = "saturated", fmt.Errorf("status %d", resp.StatusCode)
		a.span.SetStatus(codes.Error, res.failReason)
		return
	case resp.StatusCode >= 500:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		res.failReason, res.err = "status_5xx", fmt.Errorf("status %d", resp.StatusCode)
		a.span.SetStatus(codes.Error, res.failReason)
		return
	case resp.StatusCode >= 400:
		c.relayRefusal(ctx, a, resp)
		return
	}
	// An event stream is relayed as one, whether or not the client's
	// stream read as true: the engine judges the field.
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		c.relaySSE(ctx, a, resp)
	} else {
		c.copyWhole(ctx, a, resp)
	}
	if res.failReason != "" {
		a.span.SetStatus(codes.Error, res.failReason)
	}
}

// relayRefusal passes the engine's 4xx answer through, the request's
// fault (no retry), unless it refuses the stream_options the gateway
// added (res.usageRefused).
func (c *call) relayRefusal(ctx context.Context, a *try, resp *http.Response) {
	res := &a.res
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if err != nil {
		res.failReason, res.err = relay.FailReason(ctx, "stream"), relay.CauseOr(ctx, err)
		a.span.SetStatus(codes.Error, res.failReason) // as every other failed attempt
		return
	}
	if a.strip && (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity) &&
		bytes.Contains(b, []byte("stream_options")) {
		res.usageRefused = true // our addition, not the client's fault
		return
	}
	c.setHeaders(resp, a.eng)
	w := c.w
	if shaped, changed := openAIShaped(resp.StatusCode, b); changed {
		b = shaped
		w.Header()["Content-Type"] = jsonContentType
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
	res.committed = true
}

// copyWhole relays a non-streaming response, read whole first so that a
// failure before its end can still be retried.
// A Responses API response has its own usage object.
func (c *call) copyWhole(ctx context.Context, a *try, resp *http.Response) {
	res := &a.res
	b, err := io.ReadAll(io.LimitReader(resp.Body, relay.MaxResponseBytes))
	if err != nil {
		res.failReason, res.err = relay.FailReason(ctx, "stream"), relay.CauseOr(ctx, err)
		return
	}
	// No TTFT: a whole response tells the time to its end only.
	if bytes.Contains(b, []byte(`"usage"`)) {
		if c.r.URL.Path == pathResponses {
			res.usage.SetResponse(b)
		} else {
			res.usage.Set(b)
		}
	}
	c.setHeaders(resp, a.eng)
	c.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	c.w.WriteHeader(resp.StatusCode)
	_, _ = c.w.Write(b)
	res.committed, res.complete = true, true
}

// relaySSE relays an event stream (see relay.Stream.Relay).
func (c *call) relaySSE(ctx context.Context, a *try, resp *http.Response) {
	g := c.g
	bp := g.bufs.Get().(*[]byte)
	defer g.bufs.Put(bp)
	st := relay.Stream{
		Now:         g.cfg.now,
		Start:       c.start,
		Status:      resp.StatusCode,
		IdleTimeout: g.cfg.idleTimeout,
		Cancel:      a.cancel,
		FirstToken:  a.firstTimer,
		Buf:         *bp,
		StripUsage:  a.strip,
		Responses:   c.r.URL.Path == pathResponses,
		Choices:     1,
	}
	var first func(time.Duration)
	if a.ft.t != nil {
		st.Choices = max(a.ft.choices, 1)
		first = a.ft.firstToken
	}
	r := st.Relay(ctx, c.w, resp.Body, func(http.Header) { c.setHeaders(resp, a.eng) }, first)
	res := &a.res
	res.committed, res.complete, res.drain = r.Committed, r.Complete, r.Drain
	res.failReason, res.err = r.FailReason, r.Err
	res.ttft, res.tbot, res.usage = r.TTFT, r.TBOT, r.Usage
	res.sse, res.firstToken = true, r.FirstToken
}

// setHeaders sets the answer's headers from the engine's response resp.
func (c *call) setHeaders(resp *http.Response, eng *pick.Engine) {
	h := c.w.Header()
	if ct := resp.Header["Content-Type"]; len(ct) > 0 && ct[0] != "" {
		h["Content-Type"] = ct[:1]
	}
	h.Set(HeaderEngine, eng.ID)
	h[HeaderSnapshot] = c.versionHeader
}
