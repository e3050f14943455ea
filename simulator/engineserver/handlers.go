package engineserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 8 << 20

func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, apiChat) })
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, apiCompletions) })
	mux.HandleFunc("/v1/responses", func(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, apiResponses) })
	s.poolingRoutes(mux) // pooling.go
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("GET /health", s.serveHealth)
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("GET /admin/fault", s.serveFault)
	mux.HandleFunc("POST /admin/fault", s.serveFault)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path), typ: "invalid_request_error", code: "not_found"})
	})
	return mux
}

func (s *Service) serveModels(w http.ResponseWriter, _ *http.Request) {
	cards := []modelCard{{ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "switchyard", Root: s.cfg.Model, MaxModelLen: s.preset.MaxModelLen}}
	for _, a := range s.cfg.LoRAModules { // as vLLM lists its LoRA modules
		cards = append(cards, modelCard{ID: a, Object: "model", Created: s.created, OwnedBy: "switchyard", Root: a, Parent: s.cfg.Model, MaxModelLen: s.preset.MaxModelLen})
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: cards})
}

// adapterOf returns the LoRA adapter id of a request's model (0: the
// base model, also when no model is named), false for a model the engine
// does not serve.
func (s *Service) adapterOf(model string) (int, bool) {
	if model == "" || model == s.cfg.Model {
		return 0, true
	}
	if i := slices.Index(s.cfg.LoRAModules, model); i >= 0 {
		return i + 1, true
	}
	return 0, false
}

func (s *Service) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if s.Fault().Unhealthy {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, message: "engine unhealthy (injected fault)", typ: "server_error"})
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Service) serveFault(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var u faultUpdate
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&u); err != nil {
			writeError(w, badRequest("", "invalid JSON body: %v", err))
			return
		}
		f := s.Fault()
		if u.ErrorRate != nil {
			f.ErrorRate = *u.ErrorRate
		}
		if u.Unhealthy != nil {
			f.Unhealthy = *u.Unhealthy
		}
		if err := s.SetFault(f); err != nil {
			writeError(w, badRequest("error_rate", "%v", err))
			return
		}
	}
	writeJSON(w, http.StatusOK, s.Fault())
}

func (s *Service) reject(w http.ResponseWriter, reason string, e *apiError) {
	s.met.rejected.WithLabelValues(reason).Inc()
	writeError(w, e)
}

// api is the OpenAI API a request came by.
type api int

const (
	apiChat        api = iota // POST /v1/chat/completions
	apiCompletions            // POST /v1/completions
	apiResponses              // POST /v1/responses (responses.go)
)

func (s *Service) serveCompletion(w http.ResponseWriter, r *http.Request, kind api) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, message: "use POST", typ: "invalid_request_error"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.reject(w, "invalid", &apiError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("request body larger than %d bytes", maxBodyBytes), typ: "invalid_request_error"})
			return
		}
		s.reject(w, "invalid", badRequest("", "reading body: %v", err))
		return
	}
	lim := limits{blockSize: s.preset.BlockSize, maxModelLen: s.preset.MaxModelLen, defaultMaxTokens: s.cfg.DefaultMaxTokens}
	var p parsed
	var apiErr *apiError
	if kind == apiResponses {
		p, apiErr = parseResponses(body, lim)
	} else {
		p, apiErr = parseRequest(body, kind == apiChat, lim)
	}
	if apiErr != nil {
		reason := "invalid"
		if apiErr.code == "context_length_exceeded" {
			reason = "too_long"
		}
		s.reject(w, reason, apiErr)
		return
	}
	adapter, ok := s.adapterOf(p.model) // vLLM: no model is the served one
	if !ok {
		s.reject(w, "invalid", &apiError{status: http.StatusNotFound, message: fmt.Sprintf("The model `%s` does not exist.", p.model), typ: "invalid_request_error", param: "model", code: "model_not_found"})
		return
	}
	if adapter != 0 { // an adapter's KV blocks are its own, as vLLM keys them
		salt := hashkey.Mix(uint64(adapter))
		for i := range p.hashes {
			p.hashes[i] ^= salt
		}
	}
	if s.injectError() {
		s.reject(w, "fault", &apiError{status: http.StatusInternalServerError, message: "injected engine fault", typ: "server_error"})
		return
	}
	// n choices are n sequences sharing the prompt, as vLLM runs them:
	// the first fills the prefix cache the others hit.
	ids := make([]uint64, p.n)
	evs := make([]<-chan engine.Event, p.n)
	finished := false
	defer func() {
		if !finished {
			for i, id := range ids {
				if evs[i] != nil {
					s.cancel(id)
				}
			}
		}
	}()
	for i := range ids {
		ids[i] = s.nextID.Add(1)
		var err error
		evs[i], err = s.submit(r.Context(), engine.Request{ID: ids[i], PromptTokens: p.promptTokens, OutputTokens: p.maxTokens, PrefixHashes: p.hashes, Adapter: adapter})
		switch {
		case err == nil:
			continue
		case errors.Is(err, engine.ErrTooLong):
			s.reject(w, "too_long", contextTooLong(s.preset.MaxModelLen, p.promptTokens, p.maxTokens))
		case errors.Is(err, engine.ErrQueueFull):
			s.reject(w, "queue_full", &apiError{status: http.StatusServiceUnavailable, message: "engine overloaded: waiting queue full", typ: "server_error"})
		case errors.Is(err, errStopped):
			s.reject(w, "stopped", &apiError{status: http.StatusServiceUnavailable, message: "engine stopped", typ: "server_error"})
		case r.Context().Err() != nil:
			// client gone
		default:
			s.reject(w, "invalid", badRequest("", "%v", err))
		}
		return
	}
	resp := responder{s: s, chat: kind == apiChat, id: ids[0], ids: ids, p: p}
	switch {
	case kind == apiResponses && p.stream:
		finished = resp.streamResponse(r.Context(), w, evs[0])
	case kind == apiResponses:
		finished = resp.wholeResponse(r.Context(), w, evs[0])
	case p.stream:
		finished = resp.stream(r.Context(), w, evs)
	default:
		finished = resp.whole(r.Context(), w, evs)
	}
}

// responder renders one request's events as an OpenAI response.
type responder struct {
	s    *Service
	chat bool
	id   uint64   // the first choice's engine request (the response's id)
	ids  []uint64 // every choice's
	p    parsed
}

func (rs responder) respID() string {
	if rs.chat {
		return fmt.Sprintf("chatcmpl-%s-%d", rs.s.cfg.ID, rs.id)
	}
	return fmt.Sprintf("cmpl-%s-%d", rs.s.cfg.ID, rs.id)
}

func (rs responder) object(chunk bool) string {
	switch {
	case rs.chat && chunk:
		return "chat.completion.chunk"
	case rs.chat:
		return "chat.completion"
	}
	return "text_completion"
}

func (rs responder) finishReason() *string {
	r := "stop"
	if rs.p.explicitMax {
		r = "length"
	}
	return &r
}

// usage of the choices' results: the prompt once (as vLLM counts it),
// every choice's output.
func (rs responder) usage(res ...engine.Result) *usage {
	out := 0
	for _, r := range res {
		out += r.OutputTokens
	}
	return &usage{
		PromptTokens: res[0].PromptTokens, CompletionTokens: out, TotalTokens: res[0].PromptTokens + out,
		PromptTokensDetails: &promptDetail{CachedTokens: res[0].CachedTokens},
	}
}

func (rs responder) countSuccess() {
	rs.s.met.success.WithLabelValues(*rs.finishReason()).Inc()
}

// text is the request's first n output tokens.
func (rs responder) text(n int) string { return rs.choiceText(rs.id, n) }

// choiceText is the first n output tokens of the choice generated by
// engine request id.
func (rs responder) choiceText(id uint64, n int) string {
	var text strings.Builder
	for i := range n {
		text.WriteString(word(rs.s.vocab, rs.s.cfg.Seed, id, i))
	}
	return text.String()
}

// finished waits for the request's finish event and returns its result;
// nil, after writing a 503, when the engine stopped, and false when ctx
// ended first. It reports whether the request finished.
func finished(ctx context.Context, w http.ResponseWriter, events <-chan engine.Event) (*engine.Result, bool) {
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case ev, ok := <-events:
			if !ok {
				writeError(w, &apiError{status: http.StatusServiceUnavailable, message: "engine stopped", typ: "server_error"})
				return nil, true
			}
			if ev.Kind == engine.EventFinished {
				return &ev.Result, true
			}
		}
	}
}

// startSSE writes the head of an event stream and returns the writer's
// controller, to flush each event.
func startSSE(w http.ResponseWriter) *http.ResponseController {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	return http.NewResponseController(w)
}

// whole waits for every choice to finish and writes one JSON response.
// It reports whether the requests finished.
func (rs responder) whole(ctx context.Context, w http.ResponseWriter, events []<-chan engine.Event) bool {
	results := make([]engine.Result, len(events))
	choices := make([]choice, len(events))
	for i, evs := range events {
		res, done := finished(ctx, w, evs)
		if res == nil {
			return done
		}
		results[i] = *res
		text := rs.choiceText(rs.ids[i], res.OutputTokens)
		c := choice{Index: i, FinishReason: rs.finishReason()}
		if rs.chat {
			c.Message = &message{Role: "assistant", Content: text}
		} else {
			c.Text = &text
		}
		if rs.p.logprobs {
			c.Logprobs = rs.logprobs(rs.ids[i], 0, res.OutputTokens)
		}
		choices[i] = c
		rs.countSuccess()
	}
	writeJSON(w, http.StatusOK, completion{
		ID: rs.respID(), Object: rs.object(false), Created: rs.s.created, Model: rs.s.cfg.Model,
		Choices: choices, Usage: rs.usage(results...),
	})
	return true
}

// merged returns the next event of any choice (i its index; ok false
// when that choice's channel closed, live false when ctx ended).
type merged func() (i int, ev engine.Event, ok, live bool)

// mergeEvents reads the choices' event channels as one; for one choice
// without a goroutine.
func mergeEvents(ctx context.Context, events []<-chan engine.Event) merged {
	if len(events) == 1 {
		return func() (int, engine.Event, bool, bool) {
			select {
			case <-ctx.Done():
				return 0, engine.Event{}, false, false
			case ev, ok := <-events[0]:
				return 0, ev, ok, true
			}
		}
	}
	type item struct {
		i  int
		ev engine.Event
		ok bool
	}
	out := make(chan item, len(events))
	for i, evs := range events {
		go func() {
			for {
				var it item
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-evs:
					it = item{i, ev, ok}
				}
				select {
				case out <- it:
				case <-ctx.Done():
					return
				}
				if !it.ok || it.ev.Kind == engine.EventFinished {
					return
				}
			}
		}()
	}
	return func() (int, engine.Event, bool, bool) {
		select {
		case <-ctx.Done():
			return 0, engine.Event{}, false, false
		case it := <-out:
			return it.i, it.ev, it.ok, true
		}
	}
}

// stream writes one SSE chunk per token of each choice, a final chunk
// with each choice's finish reason, an optional usage chunk once every
// choice finished, and data: [DONE]. It reports whether the requests
// finished.
func (rs responder) stream(ctx context.Context, w http.ResponseWriter, events []<-chan engine.Event) bool {
	rc := startSSE(w)
	if rc.Flush() != nil {
		return false
	}
	base := completion{ID: rs.respID(), Object: rs.object(true), Created: rs.s.created, Model: rs.s.cfg.Model}
	send := func(c completion) bool {
		b, err := json.Marshal(c)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// The choices run on in the engine after the client left: the
	// caller cancels them unless all finished.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	next := mergeEvents(sctx, events)
	sent := make([]int, len(events))
	results := make([]engine.Result, len(events))
	done := 0
	for {
		i, ev, ok, live := next()
		if !live {
			return false
		}
		if !ok {
			_, _ = fmt.Fprintf(w, "data: {\"error\":{\"message\":\"engine stopped\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n")
			_ = rc.Flush()
			return true
		}
		for ; sent[i] < ev.Tokens; sent[i]++ {
			tok := word(rs.s.vocab, rs.s.cfg.Seed, rs.ids[i], sent[i])
			c := choice{Index: i}
			if rs.chat {
				c.Delta = &delta{Content: &tok}
				if sent[i] == 0 {
					c.Delta.Role = "assistant"
				}
			} else {
				c.Text = &tok
			}
			if rs.p.logprobs {
				c.Logprobs = rs.logprobs(rs.ids[i], sent[i], sent[i]+1)
			}
			chunk := base
			chunk.Choices = []choice{c}
			if !send(chunk) {
				return false
			}
		}
		if ev.Kind != engine.EventFinished {
			continue
		}
		rs.countSuccess()
		results[i] = ev.Result
		final := choice{Index: i, FinishReason: rs.finishReason()}
		if rs.chat {
			final.Delta = &delta{}
		} else {
			empty := ""
			final.Text = &empty
		}
		chunk := base
		chunk.Choices = []choice{final}
		if !send(chunk) {
			return false
		}
		if done++; done < len(events) {
			continue
		}
		if rs.p.includeUsage {
			chunk = base
			chunk.Choices = []choice{}
			chunk.Usage = rs.usage(results...)
			if !send(chunk) {
				return true
			}
		}
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
		_ = rc.Flush()
		return true
	}
}
