package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"unicode/utf8"

	"github.com/switchyard-llm/switchyard/gateway/internal/jscan"
	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// Request headers the gateway reads.
const (
	// HeaderSession names a conversation or session: requests with the
	// same value share an affinity key (and so a KV cache).
	HeaderSession = "X-Switchyard-Session"
	// HeaderPriority is the request's priority class: low, normal
	// (default) or high (or 0, 1, 2). Lower classes are shed first.
	HeaderPriority = "X-Switchyard-Priority"
	// HeaderRequestID is echoed, or the gateway's request id when absent;
	// the routing event keeps it as client_request_id.
	HeaderRequestID = "X-Request-Id"
	// HeaderGatewayRequestID is the gateway's own id of an inference
	// request, unique (a UUIDv7): the routing event's request_id.
	HeaderGatewayRequestID = "X-Switchyard-Request-Id"
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
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	User   string `json:"user"`
	// modelBad: the body's model is neither a string nor null.
	modelBad bool
	Messages json.RawMessage `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	// StreamOptions is the raw stream_options value; soStart and soEnd
	// are its span in the body when scanInference read it (soEnd 0:
	// unknown or absent).
	StreamOptions  json.RawMessage `json:"stream_options"`
	soStart, soEnd int
	// N is read for choices; MaxTokens and MaxCompletionTokens are
	// kept for the differential tests of the scanner.
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

// parseInference decodes body as far as the gateway reads it. The
// gateway checks only what it must: a JSON object (the engine's parsers
// take nothing else), valid UTF-8 (refused rather than passed on, RFC
// 8259 section 8.1: JSON text exchanged between systems must be UTF-8;
// encoding/json would accept it, and the engine would see bytes its
// tokenizer may read in any way). Every field is the engine's to judge:
// a model, stream or user of another type is read as absent (modelBad
// says a model that is not a string was given), and the engine answers.
func parseInference(body []byte) (*inference, error) {
	trim := bytes.TrimLeft(body, " \t\r\n")
	if len(trim) == 0 || trim[0] != '{' {
		return nil, &badRequest{400, "invalid_json", "", "request body must be a JSON object"}
	}
	if !utf8.Valid(body) {
		return nil, &badRequest{400, "invalid_utf8", "", fmt.Sprintf("request body is not valid UTF-8 (first invalid byte at offset %d)", firstInvalidUTF8(body))}
	}
	in, ok := scanInference(body)
	if ok {
		return in, nil
	}
	// The scanner gave up: encoding/json decides, the three typed fields
	// read raw so that no type is refused.
	in = &inference{}
	aux := struct {
		*inference
		Model  json.RawMessage `json:"model"`
		Stream json.RawMessage `json:"stream"`
		User   json.RawMessage `json:"user"`
	}{inference: in}
	if err := json.Unmarshal(body, &aux); err != nil {
		return nil, &badRequest{400, "invalid_json", "", "request body is not valid JSON: " + err.Error()}
	}
	in.modelBad = isSet(aux.Model) && aux.Model[0] != '"'
	_ = json.Unmarshal(aux.Model, &in.Model) // a string, else ""
	_ = json.Unmarshal(aux.User, &in.User)
	in.Stream = string(aux.Stream) == "true"
	return in, nil
}

// checkModel checks the model against the accepted models (--models):
// the gateway answers for them, so a request must name one.
func (in *inference) checkModel(models map[string]bool) *badRequest {
	switch {
	case in.modelBad:
		return &badRequest{400, "invalid_type", "model", "invalid type for 'model': expected a string"}
	case in.Model == "":
		return &badRequest{400, "missing_required_parameter", "model", "you must provide a model parameter"}
	case !models[in.Model]:
		return &badRequest{404, "model_not_found", "model", fmt.Sprintf("the model %q does not exist", in.Model)}
	}
	return nil
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
		return hashkey.String("s:" + session)
	case in.User != "":
		return hashkey.String("u:" + in.User)
	case isSet(in.PreviousResponseID):
		return hashkey.String("p:" + string(stringText(in.PreviousResponseID)))
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
		return hashkey.Bytes(buf[:n])
	}
	if len(p) > prefixBytes {
		p = p[:prefixBytes]
	}
	return hashkey.Bytes(p)
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

// isSet: the raw value is present and not null.
func isSet(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }

// choices is how many choices the engine generates for the request:
// n when it is an integer from 1 to maxChoices, else 1 (the engine
// judges n; the gateway only reads it to time a stream's tokens per
// choice, relay.Stream.Choices).
func (in *inference) choices() int {
	v := in.N
	if len(v) == 0 {
		return 1
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 1
		}
		n = min(n*10+int(c-'0'), maxChoices)
	}
	return min(max(n, 1), maxChoices)
}

// maxChoices bounds choices.
const maxChoices = 128
