package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"unicode/utf8"

	"github.com/switchyard-llm/switchyard/gateway/internal/jscan"
	"github.com/switchyard-llm/switchyard/gateway/pick"
)

// Request headers the gateway reads.
const (
	// HeaderSession names a conversation or session: requests with the
	// same value share an affinity key (and so a KV cache).
	HeaderSession = "X-Switchyard-Session"
	// HeaderPriority is the request's priority class: low, normal
	// (default) or high (or 0, 1, 2). Lower classes are shed first.
	HeaderPriority = "X-Switchyard-Priority"
	// HeaderRequestID is echoed, or generated when absent.
	HeaderRequestID = "X-Request-Id"
	// Response headers.
	HeaderEngine   = "X-Switchyard-Engine"
	HeaderSnapshot = "X-Switchyard-Snapshot"
)

// prefixBytes is how much of the prompt (the JSON of messages or prompt)
// forms the affinity key when neither a session header nor a user is
// given: enough to cover a system prompt and the first turn, so later
// turns of a conversation share the key.
const prefixBytes = 1024

// maxHeaderValue bounds the session and request id headers.
const maxHeaderValue = 256

// inference is the part of a completion request the gateway reads.
type inference struct {
	Model    string          `json:"model"`
	Stream   bool            `json:"stream"`
	User     string          `json:"user"`
	Messages json.RawMessage `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	// StreamOptions is the raw stream_options value; soStart and soEnd
	// are its span in the body when scanInference read it (soEnd 0:
	// unknown or absent).
	StreamOptions  json.RawMessage `json:"stream_options"`
	soStart, soEnd int
	// The raw values the gateway validates (see validate).
	N                   json.RawMessage `json:"n"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	// The Responses API's fields (POST /v1/responses), raw.
	Input              json.RawMessage `json:"input"`
	Instructions       json.RawMessage `json:"instructions"`
	MaxOutputTokens    json.RawMessage `json:"max_output_tokens"`
	PreviousResponseID json.RawMessage `json:"previous_response_id"`
}

// badRequest is a client error: status, OpenAI code and param.
type badRequest struct {
	status      int
	code, param string
	msg         string
}

func (e *badRequest) Error() string { return e.msg }

// parseInference decodes and checks body. A body that is not valid
// UTF-8 is refused (RFC 8259 section 8.1: JSON text exchanged between
// systems must be UTF-8) rather than passed on: encoding/json would
// accept it, and the engine would see bytes its tokenizer may read in
// any way.
func parseInference(body []byte) (*inference, error) {
	trim := bytes.TrimLeft(body, " \t\r\n")
	if len(trim) == 0 || trim[0] != '{' {
		return nil, &badRequest{400, "invalid_json", "", "request body must be a JSON object"}
	}
	if !utf8.Valid(body) {
		return nil, &badRequest{400, "invalid_utf8", "", fmt.Sprintf("request body is not valid UTF-8 (first invalid byte at offset %d)", firstInvalidUTF8(body))}
	}
	in, ok := scanInference(body)
	if !ok {
		in = &inference{}
		if err := json.Unmarshal(body, in); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return nil, &badRequest{400, "invalid_type", te.Field, fmt.Sprintf("invalid type for %q: expected %s", te.Field, te.Type)}
			}
			return nil, &badRequest{400, "invalid_json", "", "request body is not valid JSON: " + err.Error()}
		}
	}
	if in.Model == "" {
		return nil, &badRequest{400, "missing_required_parameter", "model", "you must provide a model parameter"}
	}
	return in, nil
}

// firstInvalidUTF8 is the offset of the first byte of b that does not
// start a valid UTF-8 sequence (len(b) when there is none).
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// inferenceFields are the JSON names of inference's fields, in the order
// of scanInference's bits.
var inferenceFields = [...]string{"model", "stream", "user", "messages", "prompt", "stream_options", "n", "max_tokens", "max_completion_tokens",
	"input", "instructions", "max_output_tokens", "previous_response_id"}

// scanInference is parseInference's fast path: one pass of jscan that
// validates the body and picks the fields, without encoding/json's
// reflection. It gives up (ok false, and encoding/json decides, with the
// same result as before) on invalid JSON, a type error, a model or user
// with escapes or non-ASCII bytes, a top-level key with escapes or
// non-ASCII bytes or that matches a field only case-insensitively (as
// encoding/json matches), and a repeated field.
func scanInference(body []byte) (in *inference, ok bool) {
	s := jscan.Scanner{B: body, Depth: 1}
	s.WS()
	if s.I >= len(body) || body[s.I] != '{' {
		return nil, false
	}
	s.I++
	s.WS()
	in = &inference{}
	var seen uint16
	if s.I < len(body) && body[s.I] == '}' {
		s.I++
	} else {
		for {
			if s.I >= len(body) || body[s.I] != '"' {
				return nil, false
			}
			ks, ke, plain, ok := s.Str()
			if !ok || !plain {
				return nil, false
			}
			key := body[ks:ke]
			field := -1
			for f, name := range inferenceFields {
				if len(key) != len(name) {
					continue
				}
				if string(key) == name {
					field = f
					break
				}
				if bytes.EqualFold(key, []byte(name)) {
					return nil, false
				}
			}
			s.WS()
			if s.I >= len(body) || body[s.I] != ':' {
				return nil, false
			}
			s.I++
			s.WS()
			if s.I >= len(body) {
				return nil, false
			}
			if field >= 0 {
				if seen&(1<<field) != 0 {
					return nil, false
				}
				seen |= 1 << field
			}
			switch field {
			case 0, 2: // model, user: a plain string or null
				if body[s.I] == 'n' {
					if !s.Literal("null") {
						return nil, false
					}
					break
				}
				if body[s.I] != '"' {
					return nil, false
				}
				vs, ve, plain, ok := s.Str()
				if !ok || !plain {
					return nil, false
				}
				if field == 0 {
					in.Model = string(body[vs:ve])
				} else {
					in.User = string(body[vs:ve])
				}
			case 1: // stream: a bool or null
				switch {
				case s.Literal("true"):
					in.Stream = true
				case s.Literal("false"), s.Literal("null"):
				default:
					return nil, false
				}
			case 3, 4, 5, 6, 7, 8, 9, 10, 11, 12: // any value, raw
				start := s.I
				if !s.Value() {
					return nil, false
				}
				v := body[start:s.I]
				switch field {
				case 3:
					in.Messages = v
				case 4:
					in.Prompt = v
				case 5:
					in.StreamOptions = v
					in.soStart, in.soEnd = start, s.I
				case 6:
					in.N = v
				case 7:
					in.MaxTokens = v
				case 8:
					in.MaxCompletionTokens = v
				case 9:
					in.Input = v
				case 10:
					in.Instructions = v
				case 11:
					in.MaxOutputTokens = v
				default:
					in.PreviousResponseID = v
				}
			default:
				if !s.Value() {
					return nil, false
				}
			}
			s.WS()
			if s.I >= len(body) {
				return nil, false
			}
			if body[s.I] == '}' {
				s.I++
				break
			}
			if body[s.I] != ',' {
				return nil, false
			}
			s.I++
			s.WS()
		}
	}
	s.WS()
	return in, s.I == len(body)
}

// affinityKey derives the KV-cache affinity key: the session header, else
// the user field, else a Responses request's previous_response_id, else a
// hash of the leading part of the prompt (the raw JSON of messages, of
// prompt, or of a Responses request's instructions then input), else a
// random key.
func affinityKey(session string, in *inference) uint64 {
	switch {
	case session != "":
		return pick.HashString("s:" + session)
	case in.User != "":
		return pick.HashString("u:" + in.User)
	case isSet(in.PreviousResponseID):
		return pick.HashString("p:" + string(stringText(in.PreviousResponseID)))
	}
	p := in.Messages
	if !isSet(p) {
		p = in.Prompt
	}
	if !isSet(p) {
		if !isSet(in.Input) && !isSet(in.Instructions) {
			return rand.Uint64()
		}
		// instructions then input, as the engine's prompt has them.
		var buf [prefixBytes]byte
		n := 0
		if isSet(in.Instructions) {
			n = copy(buf[:], in.Instructions)
		}
		if isSet(in.Input) {
			n += copy(buf[n:], in.Input)
		}
		return pick.HashBytes(buf[:n])
	}
	if len(p) > prefixBytes {
		p = p[:prefixBytes]
	}
	return pick.HashBytes(p)
}

// validHeaderValue: printable ASCII, bounded.
func validHeaderValue(s string) bool {
	if len(s) > maxHeaderValue {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// includeUsage reports whether stream_options asks for the usage chunk
// (include_usage is true).
func includeUsage(so []byte) bool {
	if len(so) == 0 || so[0] != '{' {
		return false
	}
	found := false
	s := jscan.Scanner{B: so}
	if s.Object(includeUsageKey, func(i int) bool {
		if i < 0 {
			return s.Value()
		}
		if s.Literal("true") {
			found = true
			return true
		}
		return s.Value()
	}) {
		return found
	}
	var v struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return json.Unmarshal(so, &v) == nil && v.IncludeUsage
}

var includeUsageKey = []string{"include_usage"}

// withUsage returns the body to forward for a streaming request whose
// client did not ask for the usage chunk: body with stream_options.
// include_usage set to true, and strip true (the gateway removes the
// usage chunk from the client's stream). Otherwise it returns body
// unchanged. The field is added when stream_options is absent, replaces
// a null one, and is appended to an object (a repeated include_usage
// key: the last one wins in encoding/json and in Python's json, as
// engines read it). A body whose stream_options could not be located
// (the encoding/json path of parseInference) or is not an object is
// forwarded unchanged.
func withUsage(body []byte, in *inference) (out []byte, strip bool) {
	if !in.Stream || includeUsage(in.StreamOptions) {
		return body, false
	}
	const field = `"stream_options":{"include_usage":true}`
	switch {
	case len(in.StreamOptions) == 0:
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return body, false
		}
		out = make([]byte, 0, len(body)+len(field)+1)
		out = append(append(append(out, body[:i+1]...), field...), ',')
		return append(out, body[i+1:]...), true
	case in.soEnd <= in.soStart || in.soEnd > len(body):
		return body, false
	case string(in.StreamOptions) == "null":
		out = make([]byte, 0, len(body)+len(field))
		out = append(append(out, body[:in.soStart]...), `{"include_usage":true}`...)
		return append(out, body[in.soEnd:]...), true
	case in.StreamOptions[0] == '{':
		end := in.soEnd - 1 // the closing brace
		sep := ","
		if len(bytes.TrimSpace(body[in.soStart+1:end])) == 0 {
			sep = ""
		}
		out = make([]byte, 0, len(body)+len(field))
		out = append(append(append(out, body[:end]...), sep...), `"include_usage":true`...)
		return append(out, body[end:]...), true
	}
	return body, false
}

// validateResponses checks a Responses API request (POST /v1/responses):
// input (a string or an array of input items, required), instructions
// and previous_response_id (strings, or absent), max_output_tokens (a
// positive integer, or absent). The input items and every other field
// are the engine's to judge.
func (in *inference) validateResponses() *badRequest {
	if br := positiveInt(in.MaxOutputTokens, "max_output_tokens"); br != nil {
		return br
	}
	switch {
	case !isSet(in.Input):
		return &badRequest{400, "missing_required_parameter", "input", "you must provide an input parameter"}
	case in.Input[0] != '"' && in.Input[0] != '[':
		return &badRequest{400, "invalid_type", "input", "invalid type for 'input': expected a string or an array of input items"}
	case isSet(in.Instructions) && in.Instructions[0] != '"':
		return &badRequest{400, "invalid_type", "instructions", "invalid type for 'instructions': expected a string"}
	case isSet(in.PreviousResponseID) && in.PreviousResponseID[0] != '"':
		return &badRequest{400, "invalid_type", "previous_response_id", "invalid type for 'previous_response_id': expected a string"}
	}
	return nil
}

// validate checks what the gateway knows of the OpenAI API before it
// routes a request for path (pathChat, pathCompletions or pathResponses,
// see validateResponses): messages (a
// non-empty array of objects, each with a valid role and content) or
// prompt, n (1, or absent; more choices are not supported), max_tokens
// and max_completion_tokens (positive integers). stream was typed by
// parseInference. Its errors name the parameter as OpenAI does
// ("messages[0].role").
func (in *inference) validate(path string) *badRequest {
	if path == pathResponses {
		return in.validateResponses()
	}
	if br := positiveInt(in.MaxTokens, "max_tokens"); br != nil {
		return br
	}
	if br := positiveInt(in.MaxCompletionTokens, "max_completion_tokens"); br != nil {
		return br
	}
	if br := positiveInt(in.N, "n"); br != nil {
		return br
	}
	if isSet(in.N) && string(in.N) != "1" {
		return &badRequest{400, "unsupported_value", "n", "n > 1 is not supported: send n requests instead"}
	}
	if path == pathCompletions {
		switch {
		case !isSet(in.Prompt):
			return &badRequest{400, "missing_required_parameter", "prompt", "you must provide a prompt parameter"}
		case in.Prompt[0] != '"' && in.Prompt[0] != '[':
			return &badRequest{400, "invalid_type", "prompt", "invalid type for 'prompt': expected a string or an array"}
		}
		return nil
	}
	return validateMessages(in.Messages)
}

// isSet: the raw value is present and not null.
func isSet(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }

// positiveInt checks an optional integer parameter: absent, null or a
// JSON integer of at least 1.
func positiveInt(v json.RawMessage, param string) *badRequest {
	if !isSet(v) {
		return nil
	}
	neg := v[0] == '-'
	digits := v
	if neg {
		digits = v[1:]
	}
	if len(digits) == 0 {
		return &badRequest{400, "invalid_type", param, fmt.Sprintf("invalid type for '%s': expected an integer", param)}
	}
	zero := true
	for _, c := range digits {
		if c < '0' || c > '9' {
			return &badRequest{400, "invalid_type", param, fmt.Sprintf("invalid type for '%s': expected an integer", param)}
		}
		zero = zero && c == '0'
	}
	if neg || zero {
		return &badRequest{400, "invalid_value", param, fmt.Sprintf("invalid value for '%s': must be at least 1", param)}
	}
	if _, err := strconv.ParseInt(string(digits), 10, 64); err != nil {
		// Engines parse it into a 64-bit integer: refuse here what they
		// would answer with a parser error.
		return &badRequest{400, "invalid_value", param, fmt.Sprintf("invalid value for '%s': must be at most %d", param, int64(1<<63-1))}
	}
	return nil
}

// message is the part of a chat message the gateway checks: raw values,
// nil when absent (a repeated key: the last one, as engines' JSON
// parsers keep).
type message struct {
	role, content, toolCalls, functionCall json.RawMessage
}

// messageKeys are the keys message reads, in its field order.
var messageKeys = [...]string{"role", "content", "tool_calls", "function_call"}

func (m *message) set(key string, v json.RawMessage) {
	switch key {
	case messageKeys[0]:
		m.role = v
	case messageKeys[1]:
		m.content = v
	case messageKeys[2]:
		m.toolCalls = v
	case messageKeys[3]:
		m.functionCall = v
	}
}

// validateMessages checks messages (valid JSON, or absent) with one
// jscan pass; where the scanner gives up (nesting beyond its depth) the
// encoding/json version decides, with the same result
// (FuzzValidateMessages).
func validateMessages(raw json.RawMessage) *badRequest {
	if !isSet(raw) {
		return &badRequest{400, "missing_required_parameter", "messages", "you must provide a messages parameter"}
	}
	if raw[0] != '[' {
		return &badRequest{400, "invalid_type", "messages", "invalid type for 'messages': expected an array"}
	}
	s := jscan.Scanner{B: raw, I: 1}
	s.WS()
	if s.I < len(raw) && raw[s.I] == ']' {
		return emptyMessages()
	}
	for i := 0; ; i++ {
		if s.I >= len(raw) {
			return validateMessagesJSON(raw)
		}
		if raw[s.I] != '{' {
			return notAnObject(i)
		}
		var m message
		if !scanMessage(&s, &m) {
			return validateMessagesJSON(raw)
		}
		if br := m.check(i); br != nil {
			return br
		}
		s.WS()
		if s.I >= len(raw) || raw[s.I] != ',' {
			return nil
		}
		s.I++
		s.WS()
	}
}

// scanMessage scans the object at s.I into m.
func scanMessage(s *jscan.Scanner, m *message) bool {
	b := s.B
	s.I++
	s.WS()
	if s.I < len(b) && b[s.I] == '}' {
		s.I++
		return true
	}
	for {
		if s.I >= len(b) || b[s.I] != '"' {
			return false
		}
		ks, ke, plain, ok := s.Str()
		if !ok {
			return false
		}
		key := string(b[ks:ke])
		if !plain {
			if err := json.Unmarshal(b[ks-1:ke+1], &key); err != nil {
				return false
			}
		}
		s.WS()
		if s.I >= len(b) || b[s.I] != ':' {
			return false
		}
		s.I++
		s.WS()
		start := s.I
		if !s.Value() {
			return false
		}
		m.set(key, b[start:s.I])
		s.WS()
		if s.I >= len(b) {
			return false
		}
		switch b[s.I] {
		case ',':
			s.I++
			s.WS()
		case '}':
			s.I++
			return true
		default:
			return false
		}
	}
}

// validateMessagesJSON is validateMessages by encoding/json.
func validateMessagesJSON(raw json.RawMessage) *badRequest {
	if !isSet(raw) {
		return &badRequest{400, "missing_required_parameter", "messages", "you must provide a messages parameter"}
	}
	var list []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
		return &badRequest{400, "invalid_type", "messages", "invalid type for 'messages': expected an array"}
	}
	if len(list) == 0 {
		return emptyMessages()
	}
	for i, v := range list {
		var obj map[string]json.RawMessage
		if v[0] != '{' || json.Unmarshal(v, &obj) != nil {
			return notAnObject(i)
		}
		var m message
		for _, k := range messageKeys {
			if v, ok := obj[k]; ok {
				m.set(k, v)
			}
		}
		if br := m.check(i); br != nil {
			return br
		}
	}
	return nil
}

func emptyMessages() *badRequest {
	return &badRequest{400, "empty_array", "messages", "invalid 'messages': empty array; expected at least one message"}
}

func notAnObject(i int) *badRequest {
	p := fmt.Sprintf("messages[%d]", i)
	return &badRequest{400, "invalid_type", p, "invalid type for '" + p + "': expected an object"}
}

// roles are the valid message roles.
const rolesList = "'system', 'user', 'assistant', 'tool', 'developer' and 'function'"

func validRole(r string) bool {
	switch r {
	case "system", "user", "assistant", "tool", "developer", "function":
		return true
	}
	return false
}

// check checks message i: a valid role; content a string or an array of
// parts, which an assistant message may leave out (or null) when it has
// tool_calls or a function_call.
func (m *message) check(i int) *badRequest {
	param := func(f string) string { return fmt.Sprintf("messages[%d].%s", i, f) }
	if m.role == nil {
		return &badRequest{400, "missing_required_parameter", param("role"), "missing required parameter: '" + param("role") + "'"}
	}
	if m.role[0] != '"' {
		return &badRequest{400, "invalid_type", param("role"), "invalid type for '" + param("role") + "': expected a string"}
	}
	var role string
	if bytes.IndexByte(m.role, '\\') < 0 {
		role = string(m.role[1 : len(m.role)-1])
	} else if err := json.Unmarshal(m.role, &role); err != nil {
		return &badRequest{400, "invalid_type", param("role"), "invalid type for '" + param("role") + "': expected a string"}
	}
	if !validRole(role) {
		return &badRequest{400, "invalid_value", param("role"), fmt.Sprintf("invalid value for '%s': %q; supported values are %s", param("role"), role, rolesList)}
	}
	if isSet(m.content) {
		if m.content[0] != '"' && m.content[0] != '[' {
			return &badRequest{400, "invalid_type", param("content"), "invalid type for '" + param("content") + "': expected a string or an array of content parts"}
		}
		return nil
	}
	if role == "assistant" && (isSet(m.toolCalls) || isSet(m.functionCall)) {
		return nil
	}
	return &badRequest{400, "missing_required_parameter", param("content"), "missing required parameter: '" + param("content") + "'"}
}
