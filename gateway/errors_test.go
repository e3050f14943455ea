package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOpenAIShaped: an engine's 4xx body reaches the client in OpenAI's
// shape, {"error":{message,type,param,code}}, whatever shape the engine
// used; a body already in it is kept byte for byte.
func TestOpenAIShaped(t *testing.T) {
	for _, tt := range []struct {
		name, body  string
		msg         string
		param, code any
		unchanged   bool
	}{
		{"openai", `{"error":{"message":"bad prompt","type":"invalid_request_error","param":null,"code":null}}`, "bad prompt", nil, nil, true},
		{"vllm flat", `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":"max_tokens","code":400}`, "max_tokens is too large", "max_tokens", nil, false},
		{"vllm 404", `{"object":"error","message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`, "The model `x` does not exist.", nil, nil, false},
		{"string code", `{"message":"m","code":"context_length_exceeded"}`, "m", nil, "context_length_exceeded", false},
		{"tgi", `{"error":"Input validation error: inputs too long","error_type":"validation"}`, "Input validation error: inputs too long", nil, nil, false},
		{"fastapi string", `{"detail":"Not Found"}`, "Not Found", nil, nil, false},
		{"fastapi list", `{"detail":[{"loc":["body","model"],"msg":"field required"}]}`, `[{"loc":["body","model"],"msg":"field required"}]`, nil, nil, false},
		{"text", "Bad Request\n", "Bad Request", nil, nil, false},
		{"empty", ``, "the engine answered 400", nil, nil, false},
		{"empty object", `{}`, "the engine answered 400", nil, nil, false},
		{"long text", strings.Repeat("x", 2000), strings.Repeat("x", maxEngineErrorText), nil, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, changed := openAIShaped(400, []byte(tt.body))
			if changed == tt.unchanged {
				t.Fatalf("changed %v", changed)
			}
			if tt.unchanged {
				if string(out) != tt.body {
					t.Fatalf("rewritten: %s", out)
				}
				return
			}
			var v struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			e := v.Error
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := e[k]; !ok {
					t.Errorf("no %s in %s", k, out)
				}
			}
			if e["message"] != tt.msg || e["type"] != typeInvalid || e["param"] != tt.param || e["code"] != tt.code {
				t.Errorf("got %s", out)
			}
		})
	}
}

// TestEngine4xxInOpenAIShape: an engine's flat vLLM-style 400 reaches the
// client as an OpenAI error with a JSON content type. Both servers.
func TestEngine4xxInOpenAIShape(t *testing.T) { forEachServer(t, testEngine4xxInOpenAIShape) }

func testEngine4xxInOpenAIShape(t *testing.T, server string) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"object":"error","message":"prompt too long","type":"BadRequestError","param":null,"code":400}`))
	}))
	t.Cleanup(eng.Close)
	_, base := startGateway(t, HTTPServer(server), Engines(StaticEngine{ID: "v", URL: eng.URL}))
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+pathChat, strings.NewReader(chatBody(false, "x")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Error struct{ Message, Type string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 400 ||
		resp.Header.Get("Content-Type") != "application/json" || v.Error.Message != "prompt too long" || v.Error.Type != typeInvalid {
		t.Fatalf("%d %s %+v %v", resp.StatusCode, resp.Header.Get("Content-Type"), v, err)
	}
}
