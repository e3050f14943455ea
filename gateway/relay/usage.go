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
