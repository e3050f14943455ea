package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

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
}

// badRequest is a client error: status, OpenAI code and param.
type badRequest struct {
	status      int
	code, param string
	msg         string
}

func (e *badRequest) Error() string { return e.msg }

// parseInference decodes and checks body.
func parseInference(body []byte) (*inference, error) {
	trim := bytes.TrimLeft(body, " \t\r\n")
	if len(trim) == 0 || trim[0] != '{' {
		return nil, &badRequest{400, "invalid_json", "", "request body must be a JSON object"}
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

// inferenceFields are the JSON names of inference's fields, in the order
// of scanInference's bits.
var inferenceFields = [...]string{"model", "stream", "user", "messages", "prompt", "stream_options"}

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
	var seen uint8
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
			case 3, 4, 5: // messages, prompt, stream_options: any value, raw
				start := s.I
				if !s.Value() {
					return nil, false
				}
				switch field {
				case 3:
					in.Messages = body[start:s.I]
				case 4:
					in.Prompt = body[start:s.I]
				default:
					in.StreamOptions = body[start:s.I]
					in.soStart, in.soEnd = start, s.I
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
// the user field, else a hash of the leading part of the prompt, else a
// random key.
func affinityKey(session string, in *inference) uint64 {
	switch {
	case session != "":
		return pick.HashString("s:" + session)
	case in.User != "":
		return pick.HashString("u:" + in.User)
	}
	p := in.Messages
	if len(p) == 0 || string(p) == "null" {
		p = in.Prompt
	}
	if len(p) == 0 || string(p) == "null" {
		return rand.Uint64()
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
