package gateway

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestModelByID: GET /v1/models/{id} answers with the model object from an
// engine's list (the engine need not serve the route), or an OpenAI-style
// 404 model_not_found naming the parameter; with --models the gateway's
// own list decides. Both servers.
func TestModelByID(t *testing.T) { forEachServer(t, testModelByID) }

func testModelByID(t *testing.T, server string) {
	e := newFakeEngine(t, "a")
	_, base := startGateway(t, HTTPServer(server), Engines(static(e)...))
	status, body := get(t, base+"/v1/models/sim")
	var m struct{ ID, Object string }
	if status != 200 || json.Unmarshal([]byte(body), &m) != nil || m.ID != "sim" || m.Object != "model" {
		t.Fatalf("known model: %d %s", status, body)
	}
	status, body = get(t, base+"/v1/models/nope")
	var apiErr struct {
		Error struct{ Code, Param, Type string }
	}
	if status != 404 || json.Unmarshal([]byte(body), &apiErr) != nil || apiErr.Error.Code != "model_not_found" || apiErr.Error.Param != "model" {
		t.Fatalf("unknown model: %d %s", status, body)
	}
	_, listed := startGateway(t, HTTPServer(server), Engines(static(e)...), Models("a", "org/b"))
	if status, body := get(t, listed+"/v1/models/org/b"); status != 200 || !strings.Contains(body, `"id":"org/b"`) {
		t.Fatalf("configured model with a slash: %d %s", status, body)
	}
	if status, _ := get(t, listed+"/v1/models/sim"); status != 404 {
		t.Fatalf("model outside --models: %d", status)
	}
}

// TestFailureHidesEngineAddress: when every engine fails, the client's
// error names the engine and how it failed, never its address or the
// transport's error text.
func TestFailureHidesEngineAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	_, base := startGateway(t, Engines(StaticEngine{ID: "e1", URL: "http://" + addr}))
	status, _, body := post(t, t.Context(), base, chatBody(false, "hello"), nil)
	if status < 500 || strings.Contains(body, addr) || strings.Contains(body, "127.0.0.1") || strings.Contains(body, "dial") ||
		!strings.Contains(body, "e1") {
		t.Fatalf("status %d, body %s", status, body)
	}
}
