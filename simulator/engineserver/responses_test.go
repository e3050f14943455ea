package engineserver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponsesAPI checks /v1/responses against the official Go SDK:
// a whole response and a stream of typed events ending at
// response.incomplete (max_output_tokens) with the usage, and the
// Responses parameters named in errors.
func TestResponsesAPI(t *testing.T) {
	_, base := start(t, Config{})
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:           DefaultModel,
		Instructions:    openai.String("You are terse."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
		MaxOutputTokens: openai.Int(6),
	}
	r, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 6 || r.Usage.InputTokens == 0 || r.OutputText() == "" {
		t.Fatalf("response %s", r.RawJSON())
	}

	stream := client.Responses.NewStreaming(ctx, params)
	var types []string
	var text strings.Builder
	var last responses.Response
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.incomplete", "response.completed":
			last = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.output_item.added response.content_part.added" + strings.Repeat(" response.output_text.delta", 6) +
		" response.output_text.done response.content_part.done response.output_item.done response.incomplete"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if last.Usage.OutputTokens != 6 || last.OutputText() != text.String() || text.Len() == 0 {
		t.Fatalf("last %s, deltas %q", last.RawJSON(), text.String())
	}

	// Without max_output_tokens: completed; input as items.
	r, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model: DefaultModel,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("hi", responses.EasyInputMessageRoleUser),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "completed" || r.Usage.OutputTokens == 0 {
		t.Fatalf("response %s", r.RawJSON())
	}

	for _, tt := range []struct {
		params responses.ResponseNewParams
		param  string
	}{
		{responses.ResponseNewParams{Model: DefaultModel}, "input"},
		{responses.ResponseNewParams{Model: DefaultModel, Input: params.Input, MaxOutputTokens: openai.Int(0)}, "max_output_tokens"},
	} {
		_, err := client.Responses.New(ctx, tt.params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != tt.param {
			t.Errorf("%s: %v", tt.param, err)
		}
	}
}
