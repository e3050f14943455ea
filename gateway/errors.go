package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
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
