package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	gw "github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// TestThroughEnginesim streams chat completions from real enginesim
// engines through a gateway with the OpenAI SDK, sharing a session so the
// second request hits the same engine's prefix cache.
func TestThroughEnginesim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := []string{"sim-a", "sim-b"}
	var engines []gw.StaticEngine
	for i, base := range startEngines(t, ctx, cancel, ids...) {
		engines = append(engines, gw.StaticEngine{ID: ids[i], URL: base})
	}
	g, err := gw.New("local", gw.Listen("127.0.0.1:0"), gw.Engines(engines...), gw.HealthInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	gdone := make(chan error, 1)
	go func() { gdone <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-gdone })
	<-g.Ready()

	client := openai.NewClient(option.WithBaseURL("http://"+g.Addr()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	var served []string
	for turn := 0; turn < 2; turn++ {
		var resp *http.Response
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         engineserver.DefaultModel,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a helpful assistant that answers at length about trains."), openai.UserMessage("Tell me about switchyards.")},
			MaxTokens:     openai.Int(8),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}, option.WithHeader(gw.HeaderSession, "conversation-1"), option.WithResponseInto(&resp))
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Usage.CompletionTokens != 8 || acc.Choices[0].Message.Content == "" {
			t.Fatalf("turn %d: usage %+v content %q", turn, acc.Usage, acc.Choices[0].Message.Content)
		}
		served = append(served, resp.Header.Get(gw.HeaderEngine))
	}
	if served[0] == "" || served[0] != served[1] {
		t.Fatalf("session not kept on one engine: %v", served)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s := g.Stats(); s.Succeeded != 2 || s.Failed != 0; s = g.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", s)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// startEngines runs one enginesim engine (50x time scale) per id until
// ctx ends, cancelling it and waiting for them at cleanup, and returns
// their base URLs in ids' order.
func startEngines(t *testing.T, ctx context.Context, cancel context.CancelFunc, ids ...string) []string {
	t.Helper()
	var bases []string
	for _, id := range ids {
		s, err := engineserver.New(engineserver.Config{ID: id, Listen: "127.0.0.1:0", TimeScale: 50})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		<-s.Ready()
		bases = append(bases, "http://"+s.Addr())
	}
	return bases
}

// TestResponsesThroughEnginesim drives the Responses API through a
// gateway to enginesim engines with the OpenAI Go SDK: a whole response,
// then a streamed follow-up naming it by previous_response_id; with the
// same user both turns stay on one engine, and the stream ends at its
// last event with the usage.
func TestResponsesThroughEnginesim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := []string{"sim-a", "sim-b", "sim-c"}
	var engines []gw.StaticEngine
	for i, base := range startEngines(t, ctx, cancel, ids...) {
		engines = append(engines, gw.StaticEngine{ID: ids[i], URL: base})
	}
	g, err := gw.New("local", gw.Listen("127.0.0.1:0"), gw.Engines(engines...), gw.HealthInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	gdone := make(chan error, 1)
	go func() { gdone <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-gdone })
	<-g.Ready()

	client := openai.NewClient(option.WithBaseURL("http://"+g.Addr()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	var first *http.Response
	r, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:           engineserver.DefaultModel,
		Instructions:    openai.String("You answer about trains."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("What is a switchyard?")},
		MaxOutputTokens: openai.Int(5),
		User:            openai.String("alice"),
	}, option.WithResponseInto(&first))
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.OutputTokens != 5 || r.OutputText() == "" {
		t.Fatalf("response %s", r.RawJSON())
	}
	var second *http.Response
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model:              engineserver.DefaultModel,
		PreviousResponseID: openai.String(r.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("And a hump yard?")},
		MaxOutputTokens:    openai.Int(4),
		User:               openai.String("alice"),
	}, option.WithResponseInto(&second))
	var text string
	var last responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed", "response.incomplete":
			last = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if last.Usage.OutputTokens != 4 || text == "" || last.OutputText() != text {
		t.Fatalf("last event %s, text %q", last.RawJSON(), text)
	}
	if a, b := first.Header.Get(gw.HeaderEngine), second.Header.Get(gw.HeaderEngine); a == "" || a != b {
		t.Fatalf("turns on engines %q and %q", a, b)
	}
}
