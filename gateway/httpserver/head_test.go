package httpserver

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// paths are the gateway's proxy routes.
var paths = []string{"/v1/chat/completions", "/v1/completions"}

func TestParseHead(t *testing.T) {
	tests := []struct {
		name string
		head string
		ok   bool
		want reqHead
	}{
		{"plain", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw:80\r\nContent-Length: 12\r\n\r\n", true, reqHead{path: "/v1/chat/completions", host: "gw:80", contentLength: 12}},
		{"completions", "POST /v1/completions HTTP/1.1\r\nContent-Length: 0\r\nHost: gw\r\nConnection: keep-alive, Close\r\n\r\n", true, reqHead{path: "/v1/completions", host: "gw", close: true}},
		{"over the limit", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 101\r\n\r\n", false, reqHead{}},
		{"chunked", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n", false, reqHead{}},
		{"upgrade", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nConnection: Upgrade\r\n\r\n", false, reqHead{}},
		{"bare LF", "POST /v1/completions HTTP/1.1\nHost: gw\nContent-Length: 1\n\n", false, reqHead{}},
		{"mixed line ends", "POST /v1/completions HTTP/1.1\r\nHost: gw\nContent-Length: 1\r\n\r\n", false, reqHead{}},
		{"length and chunked", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", false, reqHead{}},
		{"obs-fold", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nX-A: 1\r\n 2\r\n\r\n", false, reqHead{}},
		{"control byte", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nX-A: 1\x01\r\n\r\n", false, reqHead{}},
		{"signed length", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: +1\r\n\r\n", false, reqHead{}},
		{"trailing bytes", "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\n\r\nx", false, reqHead{}},
		{"get", "GET /v1/completions HTTP/1.1\r\nHost: gw\r\n\r\n", false, reqHead{}},
		{"other path", "POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\n\r\n", false, reqHead{}},
		{"longer path", "POST /v1/completionsx HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\n\r\n", false, reqHead{}},
		{"http/1.0", "POST /v1/completions HTTP/1.0\r\nHost: gw\r\nContent-Length: 1\r\n\r\n", false, reqHead{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			got, ok := parseHead(tt.head, paths, 100, h)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Fatalf("parseHead = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
			if ok && (h.Get("Content-Length") == "" || h.Get("Host") != "") {
				t.Errorf("headers %v", h)
			}
		})
	}
}

// FuzzParseHead: whatever parseHead accepts, net/http parses the same
// way (method, path, headers, length, host, close).
func FuzzParseHead(f *testing.F) {
	f.Add("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 12\r\nX-Request-Id: a\r\n\r\n")
	f.Add("POST /v1/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: 0\r\nconnection: close\r\nx-a:  b \t\r\nX-A: c\r\n\r\n")
	f.Add("POST /v1/completions HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 7\r\nAccept: */*\r\n\r\n")
	f.Add("POST /v1/completions HTTP/1.1\nHost: gw\nContent-Length: 7\n\n")
	f.Add("POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n")
	f.Fuzz(func(t *testing.T, head string) {
		h := http.Header{}
		rh, ok := parseHead(head, paths, 1<<20, h)
		if !ok {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			t.Fatalf("parseHead accepted what net/http refuses (%v): %q", err, head)
		}
		if req.Method != http.MethodPost || req.URL.Path != rh.path || req.RequestURI != rh.path || req.Host != rh.host ||
			req.ContentLength != rh.contentLength || req.Close != rh.close || req.ProtoMinor != 1 {
			t.Fatalf("parseHead %+v, net/http %s %s host %q length %d close %v: %q", rh, req.Method, req.RequestURI, req.Host, req.ContentLength, req.Close, head)
		}
		if fmt.Sprint(h) != fmt.Sprint(req.Header) {
			t.Fatalf("headers: parseHead %v, net/http %v: %q", h, req.Header, head)
		}
	})
}
