package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// apiError is an OpenAI-style error body:
// {"error":{"message":…,"type":…,"param":…,"code":…}}.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Error types.
const (
	typeInvalid     = "invalid_request_error"
	typeRateLimit   = "rate_limit_error"
	typeServer      = "server_error"
	typeUnavailable = "service_unavailable_error"
)

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// writeError writes an OpenAI-style error with status.
func writeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	b, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: msg, Type: typ, Param: strp(param), Code: strp(code)}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// maxEngineErrorText bounds the text of a non-JSON engine error carried
// in the message.
const maxEngineErrorText = 512

// openAIShaped returns an engine's 4xx error body in OpenAI's shape, so
// that the SDKs read its message, type, param and code: b itself when it
// already is {"error":{…}}; otherwise a new body (and true) whose message
// is the engine's "message" (vLLM's and SGLang's flat
// {"object":"error","message",…}), its "error" string (TGI's), its
// "detail" (FastAPI's; a string, or other JSON as text), or else, for a
// body that is not a JSON object, its text (at most maxEngineErrorText
// bytes). The type is invalid_request_error; param and code are the
// engine's where they are strings (vLLM's numeric code is dropped).
func openAIShaped(status int, b []byte) ([]byte, bool) {
	var flat map[string]json.RawMessage
	if json.Unmarshal(b, &flat) == nil && flat != nil {
		if e := bytes.TrimSpace(flat["error"]); len(e) > 0 && e[0] == '{' {
			return b, false
		}
	}
	str := func(k string) string {
		var s string
		if v, ok := flat[k]; ok && json.Unmarshal(v, &s) == nil {
			return s
		}
		return ""
	}
	msg := str("message")
	if msg == "" {
		msg = str("error") // TGI's {"error":"…","error_type":"…"}
	}
	if msg == "" {
		if d := bytes.TrimSpace(flat["detail"]); len(d) > 0 {
			if msg = str("detail"); msg == "" {
				msg = string(d)
			}
		}
	}
	if msg == "" && flat == nil {
		msg = strings.ToValidUTF8(string(bytes.TrimSpace(b[:min(len(b), maxEngineErrorText)])), "")
	}
	if msg == "" {
		msg = fmt.Sprintf("the engine answered %d", status)
	}
	out, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: msg, Type: typeInvalid, Param: strp(str("param")), Code: strp(str("code"))}})
	return append(out, '\n'), true
}
