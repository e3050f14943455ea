package relay

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// brokenBody delivers one event, then fails as a reset connection does:
// with an error that names both ends' addresses.
type brokenBody struct{ sent bool }

func (b *brokenBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "data: {\"choices\":[{\"delta\":{\"content\":\"half\"}}]}\n\n"), nil
	}
	return 0, errors.New("read tcp 10.1.2.3:5123->10.9.8.7:8000: read: connection reset by peer")
}

// TestBrokenStreamErrorNamesNoAddress: a stream that breaks after its
// commit ends with an OpenAI error event (valid JSON, server_error,
// upstream_error) that says what happened without the transport's
// error, which names the engine's address; Result.Err keeps it for the
// log.
func TestBrokenStreamErrorNamesNoAddress(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	first := time.AfterFunc(time.Minute, func() {})
	defer first.Stop()
	st := Stream{Now: time.Now, Start: time.Now(), Status: 200, IdleTimeout: time.Minute, Cancel: cancel, FirstToken: first, Buf: make([]byte, BufSize)}
	w := httptest.NewRecorder()
	res := st.Relay(ctx, w, &brokenBody{}, func(http.Header) {}, nil)
	if !res.Committed || res.Complete || res.FailReason != "stream" || res.Err == nil || !strings.Contains(res.Err.Error(), "10.9.8.7") {
		t.Fatalf("result %+v", res)
	}
	events := strings.Split(strings.TrimSpace(w.Body.String()), "\n\n")
	last, ok := strings.CutPrefix(events[len(events)-1], "data: ")
	if len(events) != 2 || !ok {
		t.Fatalf("stream %q", w.Body.String())
	}
	var ev struct {
		Error struct {
			Message, Type string
			Param, Code   *string
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(last), &ev); err != nil {
		t.Fatalf("error event %q: %v", last, err)
	}
	if ev.Error.Type != "server_error" || ev.Error.Code == nil || *ev.Error.Code != "upstream_error" || ev.Error.Param != nil || ev.Error.Message == "" {
		t.Errorf("error event %q", last)
	}
	if strings.Contains(last, "10.") || strings.Contains(last, "tcp") {
		t.Errorf("error event names the transport: %q", last)
	}
}
