package engineserver

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"unicode"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// The routes of vLLM's that generate no tokens: embeddings, rerank,
// score, tokenize and detokenize, in vLLM's shapes. The pooling ones run
// their prompt through the engine model as a prefill of one step (the
// engine's load and latency as vLLM's pooling runner shows them);
// tokenize and detokenize answer at once, as vLLM's API server does.
//
// Embeddings are plausible rather than meaningful: each word of the text
// (lower-cased letters and digits) adds a pseudo-random unit direction of
// embedDim dimensions, and the sum is normalized, so texts that share
// words have a positive cosine similarity and the same text the same
// vector. Rerank and score use that cosine, mapped to [0, 1].
//
// Tokens are 4-byte pieces of the UTF-8 text (the estimate the engine
// bills prompts by): a token id is its piece's bytes as a little-endian
// integer, so detokenize gives back the text (NUL bytes at a piece's end
// excepted).

// embedDim is the embeddings' dimension.
const embedDim = 384

func (s *Service) poolingRoutes(mux *http.ServeMux) {
	post := func(path string, h http.HandlerFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				writeError(w, &apiError{status: http.StatusMethodNotAllowed, message: "use POST", typ: "invalid_request_error"})
				return
			}
			h(w, r)
		})
	}
	post("/v1/embeddings", s.serveEmbeddings)
	for _, p := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		post(p, s.serveRerank)
	}
	for _, p := range []string{"/v1/score", "/score"} {
		post(p, s.serveScore)
	}
	post("/tokenize", s.serveTokenize)
	post("/detokenize", s.serveDetokenize)
}

// readJSON reads and decodes a request body into v; false after writing
// the error.
func (s *Service) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.reject(w, "invalid", &apiError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("request body larger than %d bytes", maxBodyBytes), typ: "invalid_request_error"})
			return false
		}
		s.reject(w, "invalid", badRequest("", "reading body: %v", err))
		return false
	}
	if e := decodeBody(body, v); e != nil {
		s.reject(w, "invalid", e)
		return false
	}
	return true
}

// checkModel answers 404 for a model other than the served one (none:
// the served one) and reports whether the request may go on.
func (s *Service) checkModel(w http.ResponseWriter, model string) bool {
	if model != "" && model != s.cfg.Model {
		s.reject(w, "invalid", &apiError{status: http.StatusNotFound, message: fmt.Sprintf("The model `%s` does not exist.", model), typ: "invalid_request_error", param: "model", code: "model_not_found"})
		return false
	}
	return true
}

// prefill runs a prompt of tokens through the engine model (one output
// step) and reports whether it finished; false after writing the error
// or when the client left.
func (s *Service) prefill(w http.ResponseWriter, r *http.Request, tokens int) bool {
	if tokens >= s.preset.MaxModelLen {
		s.reject(w, "too_long", contextTooLong(s.preset.MaxModelLen, tokens, 0))
		return false
	}
	if s.injectError() {
		s.reject(w, "fault", &apiError{status: http.StatusInternalServerError, message: "injected engine fault", typ: "server_error"})
		return false
	}
	id := s.nextID.Add(1)
	events, err := s.submit(r.Context(), engine.Request{ID: id, PromptTokens: max(tokens, 1), OutputTokens: 1})
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrQueueFull):
		s.reject(w, "queue_full", &apiError{status: http.StatusServiceUnavailable, message: "engine overloaded: waiting queue full", typ: "server_error"})
		return false
	case errors.Is(err, errStopped):
		s.reject(w, "stopped", &apiError{status: http.StatusServiceUnavailable, message: "engine stopped", typ: "server_error"})
		return false
	case r.Context().Err() != nil:
		return false
	default:
		s.reject(w, "invalid", badRequest("", "%v", err))
		return false
	}
	res, done := finished(r.Context(), w, events)
	if !done {
		s.cancel(id)
	}
	return res != nil
}

// textInputs reads an input: a string, an array of strings, an array of
// token ids or an array of arrays of token ids.
func textInputs(raw json.RawMessage, param string) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest(param, "you must provide %s", param)
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		if len(many) == 0 {
			return nil, badRequest(param, "%s must not be empty", param)
		}
		return many, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return []string{detokenize(ids)}, nil
	}
	var batch [][]int64
	if json.Unmarshal(raw, &batch) == nil && len(batch) > 0 {
		out := make([]string, len(batch))
		for i, b := range batch {
			out[i] = detokenize(b)
		}
		return out, nil
	}
	return nil, badRequest(param, "%s must be a string, an array of strings, or an array of token ids", param)
}

// embed is text's embedding of dim dimensions (unit length).
func embed(text string, dim int) []float64 {
	v := make([]float64, dim)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(words) == 0 {
		words = []string{text}
	}
	for _, w := range words {
		h := hashkey.String(w)
		for d := range v {
			// A uniform value in [-1, 1) per word and dimension.
			v[d] += float64(int64(hashkey.Mix(h+uint64(d))>>11))/float64(1<<52) - 1
		}
	}
	norm := 0.0
	for _, x := range v {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for d := range v {
		v[d] /= norm
	}
	return v
}

func cosine(a, b []float64) float64 {
	dot := 0.0
	for i := range a {
		dot += a[i] * b[i]
	}
	return dot
}

// relevance maps a cosine similarity to [0, 1].
func relevance(cos float64) float64 { return min(max((cos+1)/2, 0), 1) }

type embeddingsBody struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type embeddingItem struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float64, or base64 of little-endian float32s
}

type poolingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type embeddingsResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingItem `json:"data"`
	Usage   poolingUsage    `json:"usage"`
}

func (s *Service) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingsBody
	if !s.readJSON(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	texts, e := textInputs(req.Input, "input")
	if e != nil {
		s.reject(w, "invalid", e)
		return
	}
	dim := embedDim
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > embedDim {
			s.reject(w, "invalid", badRequest("dimensions", "dimensions must be in [1, %d], got %d", embedDim, *req.Dimensions))
			return
		}
		dim = *req.Dimensions
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		s.reject(w, "invalid", badRequest("encoding_format", "encoding_format must be 'float' or 'base64', got %q", req.EncodingFormat))
		return
	}
	tokens := 0
	for _, t := range texts {
		tokens += estimateTokens(len(t))
	}
	if !s.prefill(w, r, tokens) {
		return
	}
	out := embeddingsResponse{ID: fmt.Sprintf("embd-%s-%d", s.cfg.ID, s.nextID.Load()), Object: "list", Created: s.created, Model: s.cfg.Model,
		Data: make([]embeddingItem, len(texts)), Usage: poolingUsage{PromptTokens: tokens, TotalTokens: tokens}}
	for i, t := range texts {
		v := embed(t, embedDim)
		if dim < embedDim { // matryoshka: the leading dimensions, normalized again
			v = embed(t, embedDim)[:dim]
			n := math.Sqrt(cosine(v, v))
			for d := range v {
				v[d] /= n
			}
		}
		it := embeddingItem{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for d, x := range v {
				binary.LittleEndian.PutUint32(b[4*d:], math.Float32bits(float32(x)))
			}
			it.Embedding = base64.StdEncoding.EncodeToString(b)
		}
		out.Data[i] = it
	}
	s.countPooling()
	writeJSON(w, http.StatusOK, out)
}

// countPooling counts a served pooling request as a success.
func (s *Service) countPooling() { s.met.success.WithLabelValues("stop").Inc() }

type rerankBody struct {
	Model     string          `json:"model"`
	Query     *string         `json:"query"`
	Documents json.RawMessage `json:"documents"`
	TopN      int             `json:"top_n"`
}

type rerankResult struct {
	Index          int          `json:"index"`
	Document       rerankDocRef `json:"document"`
	RelevanceScore float64      `json:"relevance_score"`
}

type rerankDocRef struct {
	Text string `json:"text"`
}

type rerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Usage   rerankUsage    `json:"usage"`
	Results []rerankResult `json:"results"`
}

type rerankUsage struct {
	TotalTokens int `json:"total_tokens"`
}

func (s *Service) serveRerank(w http.ResponseWriter, r *http.Request) {
	var req rerankBody
	if !s.readJSON(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	if req.Query == nil {
		s.reject(w, "invalid", badRequest("query", "you must provide a query"))
		return
	}
	docs, e := textInputs(req.Documents, "documents")
	if e != nil {
		s.reject(w, "invalid", e)
		return
	}
	if req.TopN < 0 {
		s.reject(w, "invalid", badRequest("top_n", "top_n must not be negative"))
		return
	}
	tokens := 0
	for _, d := range docs { // a cross-encoder reads the query with each document
		tokens += estimateTokens(len(*req.Query)) + estimateTokens(len(d))
	}
	if !s.prefill(w, r, tokens) {
		return
	}
	q := embed(*req.Query, embedDim)
	out := rerankResponse{ID: fmt.Sprintf("rerank-%s-%d", s.cfg.ID, s.nextID.Load()), Model: s.cfg.Model, Usage: rerankUsage{TotalTokens: tokens},
		Results: make([]rerankResult, len(docs))}
	for i, d := range docs {
		out.Results[i] = rerankResult{Index: i, Document: rerankDocRef{Text: d}, RelevanceScore: relevance(cosine(q, embed(d, embedDim)))}
	}
	sort.SliceStable(out.Results, func(a, b int) bool { return out.Results[a].RelevanceScore > out.Results[b].RelevanceScore })
	if req.TopN > 0 && req.TopN < len(out.Results) {
		out.Results = out.Results[:req.TopN]
	}
	s.countPooling()
	writeJSON(w, http.StatusOK, out)
}

type scoreBody struct {
	Model string          `json:"model"`
	Text1 json.RawMessage `json:"text_1"`
	Text2 json.RawMessage `json:"text_2"`
}

type scoreItem struct {
	Index  int     `json:"index"`
	Object string  `json:"object"`
	Score  float64 `json:"score"`
}

type scoreResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Data    []scoreItem  `json:"data"`
	Usage   poolingUsage `json:"usage"`
}

// serveScore scores text_1 against text_2: one against many, or pairs
// of equal-length lists, as vLLM's.
func (s *Service) serveScore(w http.ResponseWriter, r *http.Request) {
	var req scoreBody
	if !s.readJSON(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	a, e := textInputs(req.Text1, "text_1")
	if e == nil {
		var b []string
		if b, e = textInputs(req.Text2, "text_2"); e == nil {
			switch {
			case len(a) == 1:
				a = slicesRepeat(a[0], len(b))
			case len(a) != len(b):
				e = badRequest("text_2", "text_1 and text_2 must have the same length, or text_1 one text (got %d and %d)", len(a), len(b))
			}
			if e == nil {
				s.scorePairs(w, r, a, b)
				return
			}
		}
	}
	s.reject(w, "invalid", e)
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func (s *Service) scorePairs(w http.ResponseWriter, r *http.Request, a, b []string) {
	tokens := 0
	for i := range a {
		tokens += estimateTokens(len(a[i])) + estimateTokens(len(b[i]))
	}
	if !s.prefill(w, r, tokens) {
		return
	}
	out := scoreResponse{ID: fmt.Sprintf("score-%s-%d", s.cfg.ID, s.nextID.Load()), Object: "list", Created: s.created, Model: s.cfg.Model,
		Data: make([]scoreItem, len(a)), Usage: poolingUsage{PromptTokens: tokens, TotalTokens: tokens}}
	for i := range a {
		out.Data[i] = scoreItem{Index: i, Object: "score", Score: relevance(cosine(embed(a[i], embedDim), embed(b[i], embedDim)))}
	}
	s.countPooling()
	writeJSON(w, http.StatusOK, out)
}

type tokenizeBody struct {
	Model               string          `json:"model"`
	Prompt              *string         `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	ReturnTokenStrs     bool            `json:"return_token_strs"`
	Tools               json.RawMessage `json:"tools"`
}

type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int64  `json:"tokens"`
	TokenStrs   []string `json:"token_strs,omitempty"`
}

// serveTokenize tokenizes a prompt, or chat messages as the chat route
// renders them (so its count is that request's prompt_tokens).
func (s *Service) serveTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeBody
	if !s.readJSON(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	var text string
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case len(req.Messages) > 0:
		var b strings.Builder
		for i, m := range req.Messages {
			if m.Role == "" {
				s.reject(w, "invalid", badRequest(fmt.Sprintf("messages[%d].role", i), "message role is required"))
				return
			}
			c, err := messageText(m.Content)
			if err != nil {
				s.reject(w, "invalid", badRequest(fmt.Sprintf("messages[%d].content", i), "%v", err))
				return
			}
			b.WriteString("<|" + m.Role + "|>\n" + c + "\n")
		}
		if req.AddGenerationPrompt == nil || *req.AddGenerationPrompt {
			b.WriteString("<|assistant|>\n")
		}
		text = b.String()
	default:
		s.reject(w, "invalid", badRequest("prompt", "you must provide a prompt or messages"))
		return
	}
	toks := tokenize(text)
	out := tokenizeResponse{Count: len(toks), MaxModelLen: s.preset.MaxModelLen, Tokens: toks}
	if req.ReturnTokenStrs {
		out.TokenStrs = make([]string, len(toks))
		for i, t := range toks {
			out.TokenStrs[i] = detokenize([]int64{t})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

type detokenizeBody struct {
	Model  string  `json:"model"`
	Tokens []int64 `json:"tokens"`
}

func (s *Service) serveDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeBody
	if !s.readJSON(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	for i, t := range req.Tokens {
		if t < 0 || t > math.MaxUint32 {
			s.reject(w, "invalid", badRequest(fmt.Sprintf("tokens[%d]", i), "token id %d out of vocabulary", t))
			return
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Prompt string `json:"prompt"`
	}{detokenize(req.Tokens)})
}

// tokenize cuts text into 4-byte pieces, each a token id (its bytes as a
// little-endian integer); the last piece may be shorter.
func tokenize(text string) []int64 {
	out := make([]int64, 0, (len(text)+charsPerToken-1)/charsPerToken)
	for i := 0; i < len(text); i += charsPerToken {
		var b [4]byte
		copy(b[:], text[i:min(i+charsPerToken, len(text))])
		out = append(out, int64(binary.LittleEndian.Uint32(b[:])))
	}
	return out
}

// detokenize is tokenize's inverse (a piece's trailing NUL bytes are
// dropped); ids outside [0, 2^32) are skipped.
func detokenize(ids []int64) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || id > math.MaxUint32 {
			continue
		}
		var p [4]byte
		binary.LittleEndian.PutUint32(p[:], uint32(id))
		b.Write(bytes.TrimRight(p[:], "\x00"))
	}
	return b.String()
}
