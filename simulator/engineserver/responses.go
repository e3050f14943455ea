package engineserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// The Responses API (POST /v1/responses), rendered from the same
// generation as chat: one assistant message of output_text. A request
// with max_output_tokens ends incomplete for max_output_tokens (as a chat
// request with max_tokens ends with finish_reason length), else
// completed. A stream is typed events (event: line and data), as OpenAI
// and vLLM send them, ending at response.completed or
// response.incomplete, without data: [DONE].

type responseObject struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	CreatedAt         int64          `json:"created_at"`
	Status            string         `json:"status"`
	Model             string         `json:"model"`
	Output            []outputItem   `json:"output"`
	IncompleteDetails *incomplete    `json:"incomplete_details"`
	Error             any            `json:"error"`
	Usage             *responseUsage `json:"usage"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type outputItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type responseUsage struct {
	InputTokens         int             `json:"input_tokens"`
	InputTokensDetails  promptDetail    `json:"input_tokens_details"`
	OutputTokens        int             `json:"output_tokens"`
	OutputTokensDetails reasoningDetail `json:"output_tokens_details"`
	TotalTokens         int             `json:"total_tokens"`
}

type reasoningDetail struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// streamEvent is a Responses stream event; the fields an event type does
// not have are left out.
type streamEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	Item           *outputItem     `json:"item,omitempty"`
	Part           *outputText     `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Message        string          `json:"message,omitempty"`
}

func (rs responder) responseID() string { return fmt.Sprintf("resp_%s_%d", rs.s.cfg.ID, rs.id) }
func (rs responder) messageID() string  { return fmt.Sprintf("msg_%s_%d", rs.s.cfg.ID, rs.id) }

// response is the response object: in progress (res nil) or finished
// with res's text and usage.
func (rs responder) response(res *engine.Result) *responseObject {
	r := &responseObject{ID: rs.responseID(), Object: "response", CreatedAt: rs.s.created, Status: "in_progress", Model: rs.s.cfg.Model, Output: []outputItem{}}
	if res == nil {
		return r
	}
	r.Status = "completed"
	if rs.p.explicitMax {
		r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	}
	r.Output = []outputItem{rs.message(rs.text(res.OutputTokens), "completed")}
	r.Usage = &responseUsage{
		InputTokens: res.PromptTokens, InputTokensDetails: promptDetail{CachedTokens: res.CachedTokens},
		OutputTokens: res.OutputTokens, TotalTokens: res.PromptTokens + res.OutputTokens,
	}
	return r
}

// message is the output message item with text.
func (rs responder) message(text, status string) outputItem {
	it := outputItem{Type: "message", ID: rs.messageID(), Status: status, Role: "assistant", Content: []outputText{}}
	if status == "completed" {
		it.Content = []outputText{{Type: "output_text", Text: text, Annotations: []any{}}}
	}
	return it
}

// wholeResponse waits for the request to finish and writes the response
// object. It reports whether the request finished.
func (rs responder) wholeResponse(ctx context.Context, w http.ResponseWriter, events <-chan engine.Event) bool {
	res, done := finished(ctx, w, events)
	if res == nil {
		return done
	}
	rs.countSuccess()
	writeJSON(w, http.StatusOK, rs.response(res))
	return true
}

// streamResponse writes response.created, the message's added events,
// one response.output_text.delta per token, the done events and
// response.completed (or response.incomplete) with the usage. It reports
// whether the request finished.
func (rs responder) streamResponse(ctx context.Context, w http.ResponseWriter, events <-chan engine.Event) bool {
	rc := startSSE(w)
	seq := 0
	send := func(e streamEvent) bool {
		e.SequenceNumber = seq
		seq++
		b, err := json.Marshal(e)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Type, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	zero, msgID := 0, rs.messageID()
	added := rs.message("", "in_progress")
	if !send(streamEvent{Type: "response.created", Response: rs.response(nil)}) ||
		!send(streamEvent{Type: "response.output_item.added", OutputIndex: &zero, Item: &added}) ||
		!send(streamEvent{Type: "response.content_part.added", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero, Part: &outputText{Type: "output_text", Annotations: []any{}}}) {
		return false
	}
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-events:
			if !ok {
				send(streamEvent{Type: "error", Message: "engine stopped"})
				return true
			}
			for ; sent < ev.Tokens; sent++ {
				tok := word(rs.s.vocab, rs.s.cfg.Seed, rs.id, sent)
				if !send(streamEvent{Type: "response.output_text.delta", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero, Delta: &tok}) {
					return ev.Kind == engine.EventFinished
				}
			}
			if ev.Kind != engine.EventFinished {
				continue
			}
			rs.countSuccess()
			final := rs.response(&ev.Result)
			item := final.Output[0]
			part := item.Content[0]
			last := "response.completed"
			if final.Status == "incomplete" {
				last = "response.incomplete"
			}
			_ = send(streamEvent{Type: "response.output_text.done", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero, Text: &part.Text}) &&
				send(streamEvent{Type: "response.content_part.done", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero, Part: &part}) &&
				send(streamEvent{Type: "response.output_item.done", OutputIndex: &zero, Item: &item}) &&
				send(streamEvent{Type: last, Response: final})
			return true
		}
	}
}
