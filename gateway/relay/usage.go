package relay

import (
	"encoding/json"

	"github.com/switchyard-llm/switchyard/gateway/internal/jscan"
)

// Usage is a response's token accounting, from its "usage" object (or,
// for a stream without one, its content events).
type Usage struct {
	PromptTokens, OutputTokens, CachedTokens uint32
	// FinishReason is the response's last finish_reason (see
	// finishReason), "" when it had none.
	FinishReason string
}

// usageJSON is the usage object as encoding/json reads it.
type usageJSON struct {
	PromptTokens        uint32 `json:"prompt_tokens"`
	CompletionTokens    uint32 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens uint32 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Set reads the usage object of b (a chunk or a whole response) into u
// and reports whether b had one. CachedTokens is only set when the usage
// has prompt_tokens_details. A scan without allocation decides when it
// can, encoding/json otherwise.
func (u *Usage) Set(b []byte) bool {
	if fr := finishReason(b); fr != "" {
		u.FinishReason = fr
	}
	if c, found, ok := scanUsage(b); ok {
		if !found {
			return false
		}
		u.PromptTokens, u.OutputTokens = c.prompt, c.completion
		if c.hasDetails {
			u.CachedTokens = c.cached
		}
		return true
	}
	var v struct {
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil {
		return false
	}
	u.PromptTokens, u.OutputTokens = v.Usage.PromptTokens, v.Usage.CompletionTokens
	if d := v.Usage.PromptTokensDetails; d != nil {
		u.CachedTokens = d.CachedTokens
	}
	return true
}

var (
	usageTop     = []string{"usage"}
	usageFields  = []string{"prompt_tokens", "completion_tokens", "prompt_tokens_details"}
	usageDetails = []string{"cached_tokens"}
)

// scanUsage reads the usage object of a chunk or response, as Usage.Set
// does with encoding/json; ok is false when it gives up (then
// encoding/json decides), found reports a usage object.
func scanUsage(b []byte) (u usageCounts, found, ok bool) {
	s := jscan.Scanner{B: b}
	s.WS()
	ok = s.Object(usageTop, func(i int) bool {
		if i < 0 {
			return s.Value()
		}
		if s.B[s.I] != '{' {
			return false // null or a type error: encoding/json decides
		}
		found = true
		return s.Object(usageFields, func(i int) bool {
			var ok bool
			switch i {
			case 0:
				u.prompt, ok = s.Uint32()
			case 1:
				u.completion, ok = s.Uint32()
			case 2:
				if s.B[s.I] != '{' {
					return false
				}
				u.hasDetails = true
				return s.Object(usageDetails, func(i int) bool {
					if i < 0 {
						return s.Value()
					}
					u.cached, ok = s.Uint32()
					return ok
				})
			default:
				ok = s.Value()
			}
			return ok
		})
	})
	s.WS()
	return u, found, ok && s.I == len(b)
}

// usageCounts are the token counts of a usage object.
type usageCounts struct {
	prompt, completion, cached uint32
	hasDetails                 bool
}

// The Responses API (POST /v1/responses) reports usage as input_tokens,
// output_tokens and input_tokens_details.cached_tokens: at the top of a
// whole response, and in the response of its stream's last event
// (response.completed, response.incomplete or response.failed).

// responseJSON is a Responses API response as encoding/json reads the
// parts the gateway uses.
type responseJSON struct {
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage *struct {
		InputTokens        uint32 `json:"input_tokens"`
		OutputTokens       uint32 `json:"output_tokens"`
		InputTokensDetails *struct {
			CachedTokens uint32 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

// responseEventJSON is a Responses API stream event.
type responseEventJSON struct {
	Type     string        `json:"type"`
	Response *responseJSON `json:"response"`
}

// response is what the gateway reads of a Responses API response: its
// status, the reason it is incomplete, and its usage (found: it has a
// usage object). The strings are plain ASCII, within the scanned bytes
// on the fast path.
type response struct {
	status, reason []byte
	usage          usageCounts
	found          bool
}

// SetResponse reads a whole Responses API response b: its usage into u
// (CachedTokens only when the usage has input_tokens_details) and its
// status as u.FinishReason (see responseFinish). It reports whether b had
// a usage object. A scan without allocation decides when it can,
// encoding/json otherwise.
func (u *Usage) SetResponse(b []byte) bool {
	var r response
	s := jscan.Scanner{B: b}
	s.WS()
	ok := scanResponse(&s, &r)
	s.WS()
	if !ok || s.I != len(b) {
		var v responseJSON
		if json.Unmarshal(b, &v) != nil {
			return false
		}
		r = fromJSON(&v)
	}
	return u.setFrom(&r)
}

// setFrom copies r into u.
func (u *Usage) setFrom(r *response) bool {
	if fr := responseFinish(r.status, r.reason); fr != "" {
		u.FinishReason = fr
	}
	if !r.found {
		return false
	}
	u.PromptTokens, u.OutputTokens = r.usage.prompt, r.usage.completion
	if r.usage.hasDetails {
		u.CachedTokens = r.usage.cached
	}
	return true
}

// setResponseEvent reads the data of a Responses API stream event b.
// When it is a last event (its type is response.completed,
// response.incomplete or response.failed; without a type, named so by
// its event: line, named) it reads its response as SetResponse does and
// reports terminal; found: the response had usage.
func (u *Usage) setResponseEvent(b []byte, named bool) (terminal, found bool) {
	typ, r, ok := scanResponseEvent(b)
	if !ok {
		var v responseEventJSON
		if json.Unmarshal(b, &v) != nil {
			return named, false
		}
		typ = []byte(v.Type)
		if v.Response != nil {
			r = fromJSON(v.Response)
		}
	}
	switch {
	case lastEvent(typ):
	case len(typ) == 0 && named:
	default:
		return false, false
	}
	return true, u.setFrom(&r)
}

// lastEvent reports whether typ names a Responses stream's last event.
func lastEvent(typ []byte) bool {
	switch string(typ) {
	case "response.completed", "response.incomplete", "response.failed":
		return true
	}
	return false
}

// responseFinish maps a response's status (and the reason it is
// incomplete) to the chat finish reason the routing event records:
// completed is stop, incomplete for max_output_tokens is length, for
// content_filter content_filter; any other status is other; no status,
// "".
func responseFinish(status, reason []byte) string {
	switch string(status) {
	case "":
		return ""
	case "completed":
		return "stop"
	case "incomplete":
		switch string(reason) {
		case "max_output_tokens":
			return "length"
		case "content_filter":
			return "content_filter"
		}
	}
	return "other"
}

func fromJSON(v *responseJSON) response {
	r := response{status: []byte(v.Status)}
	if d := v.IncompleteDetails; d != nil {
		r.reason = []byte(d.Reason)
	}
	if us := v.Usage; us != nil {
		r.found = true
		r.usage.prompt, r.usage.completion = us.InputTokens, us.OutputTokens
		if d := us.InputTokensDetails; d != nil {
			r.usage.cached, r.usage.hasDetails = d.CachedTokens, true
		}
	}
	return r
}

var (
	eventFields     = []string{"type", "response"}
	responseFields  = []string{"status", "incomplete_details", "usage"}
	incompleteField = []string{"reason"}
	responseUsage   = []string{"input_tokens", "output_tokens", "input_tokens_details"}
)

// scanResponseEvent reads a stream event's type and response, as
// setResponseEvent does with encoding/json; ok is false when it gives up
// (a type or status that is not a plain ASCII string, a response that is
// not an object, invalid JSON, ...).
func scanResponseEvent(b []byte) (typ []byte, r response, ok bool) {
	s := jscan.Scanner{B: b}
	s.WS()
	ok = s.Object(eventFields, func(i int) bool {
		switch i {
		case 0:
			var ok bool
			typ, ok = plainString(&s)
			return ok
		case 1:
			return scanResponse(&s, &r)
		}
		return s.Value()
	})
	s.WS()
	return typ, r, ok && s.I == len(b)
}

// scanResponse reads the response object at s.I into r.
func scanResponse(s *jscan.Scanner, r *response) bool {
	return s.Object(responseFields, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			r.status, ok = plainString(s)
		case 1:
			if s.Literal("null") {
				return true
			}
			return s.Object(incompleteField, func(i int) bool {
				if i < 0 {
					return s.Value()
				}
				r.reason, ok = plainString(s)
				return ok
			})
		case 2:
			if s.Literal("null") {
				return true
			}
			if s.B[s.I] != '{' {
				return false
			}
			r.found = true
			return s.Object(responseUsage, func(i int) bool {
				var ok bool
				switch i {
				case 0:
					r.usage.prompt, ok = s.Uint32()
				case 1:
					r.usage.completion, ok = s.Uint32()
				case 2:
					if s.Literal("null") {
						return true
					}
					if s.B[s.I] != '{' {
						return false
					}
					r.usage.hasDetails = true
					return s.Object(usageDetails, func(i int) bool {
						if i < 0 {
							return s.Value()
						}
						r.usage.cached, ok = s.Uint32()
						return ok
					})
				default:
					ok = s.Value()
				}
				return ok
			})
		default:
			ok = s.Value()
		}
		return ok
	})
}

// plainString scans a string without escapes or non-ASCII bytes and
// returns its text; ok is false for anything else.
func plainString(s *jscan.Scanner) ([]byte, bool) {
	if s.B[s.I] != '"' {
		return nil, false
	}
	vs, ve, plain, ok := s.Str()
	if !ok || !plain {
		return nil, false
	}
	return s.B[vs:ve], true
}
