package httpserver

import (
	"net/http"
	"strings"

	"github.com/switchyard-llm/switchyard/gateway/internal/httpwire"
)

// reqHead is what parseHead keeps of a request head besides the headers.
type reqHead struct {
	path          string
	host          string
	contentLength int64
	close         bool // Connection: close
}

// parseHead parses a complete request head (request line through the
// blank line) that the server serves itself, adding its headers
// (canonical keys, Host left out, values sharing head's memory) to h.
// It accepts only the plain case: "POST <path> HTTP/1.1" for one of
// paths, CRLF line ends, well-formed
// header names and values, exactly one simple Host, exactly one
// Content-Length of at most maxBody, and no Transfer-Encoding, Expect,
// Upgrade, Trailer or Connection: upgrade. Anything else reports false,
// and the connection goes to net/http, which decides as before.
func parseHead(head string, paths []string, maxBody int64, h http.Header) (rh reqHead, ok bool) {
	line, rest, found := strings.Cut(head, "\r\n")
	if !found {
		return rh, false
	}
	target, post := strings.CutPrefix(line, "POST ")
	target, http11 := strings.CutSuffix(target, " HTTP/1.1")
	if !post || !http11 {
		return rh, false
	}
	for _, p := range paths {
		if target == p {
			rh.path = p
			break
		}
	}
	if rh.path == "" {
		return rh, false
	}
	vals := make([]string, 0, strings.Count(rest, "\n"))
	haveHost, haveLen := false, false
	for {
		line, rest, found = strings.Cut(rest, "\r\n")
		if !found {
			return rh, false
		}
		if line == "" {
			if rest != "" {
				return rh, false
			}
			break
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 || !httpwire.ValidToken(line[:colon]) {
			return rh, false
		}
		v := trimOWS(line[colon+1:])
		if !validFieldValue(v) {
			return rh, false
		}
		key := http.CanonicalHeaderKey(line[:colon])
		switch key {
		case "Host":
			if haveHost || !validHost(v) {
				return rh, false
			}
			haveHost, rh.host = true, v
			continue
		case "Content-Length":
			n, ok := httpwire.ParseLength(v)
			if haveLen || !ok || n > maxBody {
				return rh, false
			}
			haveLen, rh.contentLength = true, n
		case "Transfer-Encoding", "Expect", "Upgrade", "Trailer":
			return rh, false
		case "Connection":
			for _, tok := range strings.Split(v, ",") {
				switch strings.ToLower(trimOWS(tok)) {
				case "close":
					rh.close = true
				case "upgrade":
					return rh, false
				}
			}
		}
		vals = append(vals, v)
		if old, dup := h[key]; dup {
			h[key] = append(old, v)
		} else {
			h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	if !haveHost || !haveLen {
		return rh, false
	}
	return rh, true
}

func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// validFieldValue: visible ASCII, obs-text, spaces and tabs.
func validFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// validHost accepts a plain host[:port] or [v6]:port, nothing fancier.
func validHost(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '-', c == ':', c == '[', c == ']', c == '_':
		default:
			return false
		}
	}
	return true
}
