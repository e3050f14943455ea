package engineserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// apiError is an OpenAI-style error response.
type apiError struct {
	status  int
	message string
	typ     string
	param   string
	code    string
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...), typ: "invalid_request_error", param: param}
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	d := errorDetail{Message: e.message, Type: e.typ}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	writeJSON(w, e.status, errorBody{Error: d})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"encoding response","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Request bodies. Unknown fields are ignored, as OpenAI clients send many.

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// simExtension is the optional "switchyard" object of a request body: it
// overrides the prompt length estimated from the text and supplies trace
// prefix hash ids (Mooncake's hash_ids, each covering hash_block_tokens).
type simExtension struct {
	PromptTokens    int      `json:"prompt_tokens"`
	HashIDs         []uint64 `json:"hash_ids"`
	HashBlockTokens int      `json:"hash_block_tokens"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type requestBody struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	// Logprobs is chat's bool or completions' count of top tokens.
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	Switchyard  *simExtension   `json:"switchyard"`
}

// parsed is a validated completion request.
type parsed struct {
	model        string // "": the served model
	n            int    // choices
	logprobs     bool
	topLogprobs  int
	stream       bool
	includeUsage bool
	maxTokens    int
	explicitMax  bool
	promptTokens int
	hashes       []uint64
}

// limits are what parseRequest checks against.
type limits struct {
	blockSize        int
	maxModelLen      int
	defaultMaxTokens int
}

// parseRequest decodes and validates a chat (chat=true) or completions
// request body. The model name is checked by the caller.
func parseRequest(body []byte, chat bool, lim limits) (parsed, *apiError) {
	var req requestBody
	if e := decodeBody(body, &req); e != nil {
		return parsed{}, e
	}
	return req.parse(chat, lim)
}

// decodeBody decodes one JSON object from body into v.
func decodeBody(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		// A well-formed value of the wrong type or range: name the field,
		// not the Go type it did not fit.
		if ute := (*json.UnmarshalTypeError)(nil); errors.As(err, &ute) && ute.Field != "" {
			return badRequest(ute.Field, "invalid type or value for '%s': %s", ute.Field, ute.Value)
		}
		return badRequest("", "invalid JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("", "invalid JSON body: trailing data after the object")
	}
	return nil
}

// responsesBody is a Responses API request body (POST /v1/responses).
type responsesBody struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	Stream          bool            `json:"stream"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Switchyard      *simExtension   `json:"switchyard"`
}

// inputItem is an item of a Responses request's input array: a message
// (role and content), or another item (a function call's output, ...)
// whose JSON is taken as its text.
type inputItem struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// parseResponses decodes and validates a Responses API request as the
// chat request it amounts to: instructions as a system message, then
// input (a string as one user message, or an array of items), with
// max_output_tokens as max_tokens. Its errors name the Responses
// parameters.
func parseResponses(body []byte, lim limits) (parsed, *apiError) {
	var rb responsesBody
	if e := decodeBody(body, &rb); e != nil {
		return parsed{}, e
	}
	req := requestBody{Model: rb.Model, Stream: rb.Stream, MaxTokens: rb.MaxOutputTokens, Switchyard: rb.Switchyard}
	if rb.Instructions != nil {
		c, _ := json.Marshal(*rb.Instructions)
		req.Messages = append(req.Messages, chatMessage{Role: "system", Content: c})
	}
	in := bytes.TrimSpace(rb.Input)
	switch {
	case len(in) == 0 || bytes.Equal(in, []byte("null")):
		return parsed{}, badRequest("input", "you must provide an input parameter")
	case in[0] == '"':
		req.Messages = append(req.Messages, chatMessage{Role: "user", Content: in})
	default:
		var items []json.RawMessage
		if err := json.Unmarshal(in, &items); err != nil {
			return parsed{}, badRequest("input", "input must be a string or an array of input items")
		}
		for i, raw := range items {
			var it inputItem
			if err := json.Unmarshal(raw, &it); err != nil {
				return parsed{}, badRequest(fmt.Sprintf("input[%d]", i), "input items must be objects")
			}
			if it.Role == "" { // not a message: its JSON is its text
				it.Role = "tool"
				it.Content, _ = json.Marshal(string(raw))
			}
			req.Messages = append(req.Messages, chatMessage(it))
		}
	}
	p, e := req.parse(true, lim)
	if e != nil {
		switch {
		case e.param == "max_tokens":
			e.param, e.message = "max_output_tokens", strings.Replace(e.message, "max_tokens", "max_output_tokens", 1)
		case strings.HasPrefix(e.param, "messages"):
			e.param = "input"
		}
	}
	return p, e
}

// parse validates a decoded chat (chat=true) or completions request.
func (req *requestBody) parse(chat bool, lim limits) (parsed, *apiError) {
	p := parsed{model: req.Model, stream: req.Stream, maxTokens: lim.defaultMaxTokens, n: 1}
	if req.N != nil {
		if *req.N < 1 || *req.N > maxChoices {
			return parsed{}, badRequest("n", "n must be in [1, %d], got %d", maxChoices, *req.N)
		}
		p.n = *req.N
	}
	if e := req.parseLogprobs(chat, &p); e != nil {
		return parsed{}, e
	}
	if req.StreamOptions != nil {
		if !req.Stream {
			return parsed{}, badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		p.includeUsage = req.StreamOptions.IncludeUsage
	}
	if req.MaxTokens != nil {
		p.maxTokens, p.explicitMax = *req.MaxTokens, true
	}
	if req.MaxCompletionTokens != nil {
		p.maxTokens, p.explicitMax = *req.MaxCompletionTokens, true
	}
	if p.maxTokens < 1 {
		return parsed{}, badRequest("max_tokens", "max_tokens must be at least 1, got %d", p.maxTokens)
	}
	if p.maxTokens >= lim.maxModelLen {
		return parsed{}, contextTooLong(lim.maxModelLen, 1, p.maxTokens)
	}
	hashLimit := lim.maxModelLen / lim.blockSize
	if chat {
		if len(req.Messages) == 0 {
			return parsed{}, badRequest("messages", "messages must be a non-empty array")
		}
		var text strings.Builder
		for i, m := range req.Messages {
			if m.Role == "" {
				return parsed{}, badRequest(fmt.Sprintf("messages[%d].role", i), "message role is required")
			}
			c, err := messageText(m.Content)
			if err != nil {
				return parsed{}, badRequest(fmt.Sprintf("messages[%d].content", i), "%v", err)
			}
			text.WriteString("<|" + m.Role + "|>\n")
			text.WriteString(c)
			text.WriteString("\n")
		}
		text.WriteString("<|assistant|>\n")
		s := text.String()
		p.promptTokens = estimateTokens(len(s))
		p.hashes = textBlockHashes(s, lim.blockSize, hashLimit)
	} else {
		if err := completionPrompt(req.Prompt, lim.blockSize, hashLimit, &p); err != nil {
			return parsed{}, err
		}
	}
	if x := req.Switchyard; x != nil {
		if x.PromptTokens < 0 {
			return parsed{}, badRequest("switchyard.prompt_tokens", "prompt_tokens must not be negative")
		}
		if len(x.HashIDs) > 0 {
			bt := x.HashBlockTokens
			if bt == 0 {
				bt = 512
			}
			h, err := idBlockHashes(x.HashIDs, bt, lim.blockSize, hashLimit)
			if err != nil {
				return parsed{}, badRequest("switchyard.hash_block_tokens", "%v", err)
			}
			p.hashes = h
			if x.PromptTokens == 0 && len(x.HashIDs) <= lim.maxModelLen {
				p.promptTokens = len(x.HashIDs) * bt
			}
		}
		if x.PromptTokens > 0 {
			p.promptTokens = x.PromptTokens
		}
	}
	if p.promptTokens >= lim.maxModelLen || p.promptTokens+p.maxTokens > lim.maxModelLen {
		return parsed{}, contextTooLong(lim.maxModelLen, p.promptTokens, p.maxTokens)
	}
	return p, nil
}

// maxChoices bounds n.
const maxChoices = 128

// maxTopLogprobs bounds top_logprobs (chat) and logprobs (completions),
// as vLLM's default max_logprobs.
const maxTopLogprobs = 20

// parseLogprobs reads chat's logprobs (a bool) and top_logprobs, or
// completions' logprobs (the count of top tokens, 0 for the chosen
// token's only).
func (req *requestBody) parseLogprobs(chat bool, p *parsed) *apiError {
	raw := bytes.TrimSpace(req.Logprobs)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		if req.TopLogprobs != nil && *req.TopLogprobs != 0 && chat {
			return badRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		return nil
	}
	if chat {
		if err := json.Unmarshal(raw, &p.logprobs); err != nil {
			return badRequest("logprobs", "logprobs must be a boolean")
		}
		if req.TopLogprobs != nil {
			if !p.logprobs && *req.TopLogprobs != 0 {
				return badRequest("top_logprobs", "top_logprobs requires logprobs to be true")
			}
			p.topLogprobs = *req.TopLogprobs
		}
	} else {
		if err := json.Unmarshal(raw, &p.topLogprobs); err != nil {
			return badRequest("logprobs", "logprobs must be an integer")
		}
		p.logprobs = true
	}
	if p.topLogprobs < 0 || p.topLogprobs > maxTopLogprobs {
		return badRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", maxTopLogprobs, p.topLogprobs)
	}
	return nil
}

func contextTooLong(maxLen, prompt, output int) *apiError {
	total := prompt + output
	if output > math.MaxInt-prompt {
		total = math.MaxInt // the sum would wrap around to a negative count
	}
	e := badRequest("messages", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		maxLen, total, prompt, output)
	e.code = "context_length_exceeded"
	return e
}

// messageText returns the text of a message content: a string, null, or
// an array of parts whose "text" parts are concatenated.
func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("content: %w", err)
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		// err names Go types (engineserver.contentPart): not for clients.
		return "", errors.New("content must be a string or an array of content part objects")
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text": // chat's, the Responses API's
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// completionPrompt fills p's prompt length and hashes from a completions
// prompt: a string, an array of one string, an array of token ids, or an
// array of one array of token ids.
func completionPrompt(raw json.RawMessage, blockSize, hashLimit int, p *parsed) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return badRequest("prompt", "you must provide a prompt")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		p.promptTokens = estimateTokens(len(s))
		p.hashes = textBlockHashes(s, blockSize, hashLimit)
		return nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		if len(ss) != 1 {
			return badRequest("prompt", "exactly one prompt is supported, got %d", len(ss))
		}
		p.promptTokens = estimateTokens(len(ss[0]))
		p.hashes = textBlockHashes(ss[0], blockSize, hashLimit)
		return nil
	}
	var toks []int64
	if err := json.Unmarshal(raw, &toks); err == nil {
		if len(toks) == 0 {
			return badRequest("prompt", "prompt must not be empty")
		}
		p.promptTokens = len(toks)
		p.hashes = tokenBlockHashes(toks, blockSize, hashLimit)
		return nil
	}
	var batch [][]int64
	if err := json.Unmarshal(raw, &batch); err == nil {
		if len(batch) != 1 || len(batch[0]) == 0 {
			return badRequest("prompt", "exactly one non-empty prompt is supported")
		}
		p.promptTokens = len(batch[0])
		p.hashes = tokenBlockHashes(batch[0], blockSize, hashLimit)
		return nil
	}
	return badRequest("prompt", "prompt must be a string, an array of one string, or an array of token ids")
}

// Response bodies.

type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails *promptDetail `json:"prompt_tokens_details,omitempty"`
}

type promptDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

type message struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type choice struct {
	Index        int      `json:"index"`
	Message      *message `json:"message,omitempty"`
	Delta        *delta   `json:"delta,omitempty"`
	Text         *string  `json:"text,omitempty"`
	Logprobs     any      `json:"logprobs"` // chatLogprobs or textLogprobs; null when not asked for
	FinishReason *string  `json:"finish_reason"`
}

type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root,omitempty"`
	Parent      string `json:"parent,omitempty"`
	MaxModelLen int    `json:"max_model_len"`
}

// Fault is the engine's injected failure state (see /admin/fault).
type Fault struct {
	// ErrorRate is the fraction of completion requests answered with a
	// 500 error, in [0, 1].
	ErrorRate float64 `json:"error_rate"`
	// Unhealthy makes /health answer 503.
	Unhealthy bool `json:"unhealthy"`
}

type faultUpdate struct {
	ErrorRate *float64 `json:"error_rate"`
	Unhealthy *bool    `json:"unhealthy"`
}
