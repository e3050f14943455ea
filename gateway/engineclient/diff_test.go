package engineclient

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// parsed is what the proxy uses of an engine's response.
type parsed struct {
	status         int
	ct, retryAfter string
	body           string
	bodyErr        bool
	close          bool
}

func (p parsed) String() string {
	return fmt.Sprintf("%d ct=%q retry-after=%q close=%v body=%q bodyErr=%v", p.status, p.ct, p.retryAfter, p.close, p.body, p.bodyErr)
}

// ours reads raw as the client does (readResponse, then the body to its
// end). bufSize is the connection's read buffer.
func ours(raw string, bufSize int) (parsed, error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(time.Second, time.Now)
	ec := &engineConn{nc: a, pool: c.Host("http://h:1")}
	ec.br = bufio.NewReaderSize(strings.NewReader(raw), bufSize)
	r, err := ec.readResponse()
	if err != nil {
		return parsed{}, err
	}
	r.body.c, r.body.ec, r.body.stop = c, ec, func() bool { return true }
	body, err := io.ReadAll(&r.body)
	return parsed{
		status: r.resp.StatusCode, ct: r.resp.Header.Get("Content-Type"), retryAfter: r.resp.Header.Get("Retry-After"),
		body: string(body), bodyErr: err != nil, close: r.resp.Close,
	}, nil
}

// reference reads raw as net/http.Transport does: http.ReadResponse for
// a POST, 1xx responses other than 101 skipped (at most 5).
func reference(raw string) (parsed, error) {
	br := bufio.NewReader(strings.NewReader(raw))
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
		if err != nil {
			return parsed{}, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != http.StatusSwitchingProtocols {
			if n == max1xx {
				return parsed{}, fmt.Errorf("too many 1xx responses")
			}
			continue
		}
		body, err := io.ReadAll(resp.Body)
		return parsed{
			status: resp.StatusCode, ct: resp.Header.Get("Content-Type"), retryAfter: resp.Header.Get("Retry-After"),
			body: string(body), bodyErr: err != nil, close: resp.Close,
		}, nil
	}
}

// stricter reports whether the client may refuse a response that
// net/http accepts as ref: a status outside 200-599 (000, a 101 the
// gateway never asks for, 600-999), a version other than HTTP/1.0 and
// HTTP/1.1, or obs-folded header lines (RFC 9112 section 5.2 lets a
// client refuse them).
func stricter(raw string, ref parsed) bool {
	if ref.status < 200 || ref.status > 599 || strings.Contains(raw, "\n ") || strings.Contains(raw, "\n\t") {
		return true
	}
	for line := range strings.Lines(raw) { // any status line (after 1xx responses)
		if strings.HasPrefix(line, "HTTP/") && !strings.HasPrefix(line, "HTTP/1.1 ") && !strings.HasPrefix(line, "HTTP/1.0 ") {
			return true
		}
	}
	return false
}

// checkAgainstNetHTTP: the client reads raw as net/http does (status,
// Content-Type, Retry-After, body and whether it ended cleanly, whether
// the connection closes), or refuses it where stricter allows; it never
// accepts what net/http refuses.
func checkAgainstNetHTTP(t *testing.T, raw string) {
	t.Helper()
	ref, refErr := reference(raw)
	for _, size := range []int{64, ReadBufSize} {
		if size < ReadBufSize && longestLine(raw) >= size {
			continue // the line does not fit the small buffer
		}
		got, err := ours(raw, size)
		switch {
		case refErr != nil && err == nil:
			t.Fatalf("%q: client accepts (%v), net/http: %v", raw, got, refErr)
		case refErr != nil:
		case err != nil:
			if !stricter(raw, ref) {
				t.Fatalf("%q: client refuses (%v), net/http reads %v", raw, err, ref)
			}
		case got.bodyErr != ref.bodyErr || (!got.bodyErr && got != ref) || got.status != ref.status || (!got.close && ref.close):
			t.Fatalf("%q (buffer %d):\nclient   %v\nnet/http %v", raw, size, got, ref)
		}
	}
}

func longestLine(s string) int {
	n := 0
	for line := range strings.Lines(s) {
		n = max(n, len(line))
	}
	return n
}

var diffCases = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
	"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\n\r\nall of it",
	"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
	"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 000 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX(y): x\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 02\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Type: b\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX: 1\n\n",
	"HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n Folded: x\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 \ntrAnsfer-enCoding:Chunked\n\n0\r\n\n\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX: 1\r\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0000000000000000000001\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx",
}

// TestClientMatchesNetHTTP runs the differential check on the cases that
// the fuzz test found diverging, and on plain ones.
func TestClientMatchesNetHTTP(t *testing.T) {
	for _, raw := range diffCases {
		t.Run(raw[:min(len(raw), 40)], func(t *testing.T) { checkAgainstNetHTTP(t, raw) })
	}
}

// FuzzClientMatchesNetHTTP: any response bytes are read by the client as
// by http.ReadResponse (with net/http.Transport's handling of 1xx), or
// refused where the client is documented to be stricter.
func FuzzClientMatchesNetHTTP(f *testing.F) {
	for _, raw := range diffCases {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) { checkAgainstNetHTTP(t, raw) })
}
