package engineserver

import (
	"context"
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestOpenAIClient checks the wire format against the official Go SDK.
func TestOpenAIClient(t *testing.T) {
	_, base := start(t, Config{})
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:     DefaultModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		MaxTokens: openai.Int(6),
	}
	c, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || c.Usage.CompletionTokens != 6 || c.Choices[0].FinishReason != "length" || c.Choices[0].Message.Content == "" {
		t.Fatalf("completion %+v", c)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks != 8 || acc.Usage.CompletionTokens != 6 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" {
		t.Fatalf("%d chunks, accumulated %+v", chunks, acc.ChatCompletion)
	}

	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(DefaultModel),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon a time")},
		MaxTokens: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Usage.CompletionTokens != 3 || comp.Choices[0].Text == "" {
		t.Fatalf("completion %+v", comp)
	}

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nope", Messages: params.Messages})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Fatalf("unknown model: %v", err)
	}
}
