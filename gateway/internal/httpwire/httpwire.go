// Package httpwire holds the HTTP/1.1 byte-level pieces that the gateway's
// server (httpserver), engine client (engineclient) and relay share: raw
// socket I/O and header field helpers.
package httpwire

import "strings"

// AppendHeader appends "key: value\r\n", leaving out a value that could
// break the message (a CR, LF or NUL; net/http's server has already
// refused those in requests).
func AppendHeader(b []byte, key, value string) []byte {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c == '\r' || c == '\n' || c == 0 {
			return b
		}
	}
	b = append(b, key...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// TrimEOL is bytes.TrimRight(b, "\r\n") without the cutset set-up.
func TrimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// ParseLength parses a Content-Length value: 1 to 18 digits.
func ParseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// ValidToken reports whether s is an RFC 9110 token (a header name).
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
