package engineserver

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

func postJSON(t *testing.T, url, body string, v any) {
	t.Helper()
	status, b := post(t, url, body)
	if status != 200 {
		t.Fatalf("%s: %d %s", url, status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v: %s", url, err, b)
	}
}

// TestEmbeddings: unit vectors, one per input, the same for float and
// base64 (little-endian float32s) and for the same text; texts sharing
// words are closer than texts that share none; usage counts the inputs'
// tokens as tokenize does.
func TestEmbeddings(t *testing.T) {
	_, base := start(t, Config{})
	var f struct {
		Object string `json:"object"`
		Data   []struct {
			Index     int       `json:"index"`
			Object    string    `json:"object"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	texts := []string{"the freight train waits in the switchyard", "a freight train in the yard", "quantum chromodynamics lecture notes", "the freight train waits in the switchyard"}
	in, _ := json.Marshal(texts)
	postJSON(t, base+"/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":%s}`, DefaultModel, in), &f)
	if f.Object != "list" || len(f.Data) != 4 {
		t.Fatalf("%+v", f)
	}
	tokens := 0
	for i, d := range f.Data {
		if d.Index != i || d.Object != "embedding" || len(d.Embedding) != embedDim || math.Abs(cosine(d.Embedding, d.Embedding)-1) > 1e-9 {
			t.Fatalf("item %d: index %d object %s dim %d", i, d.Index, d.Object, len(d.Embedding))
		}
		tokens += len(tokenize(texts[i]))
	}
	if f.Usage.PromptTokens != tokens || f.Usage.TotalTokens != tokens {
		t.Fatalf("usage %+v, want %d", f.Usage, tokens)
	}
	same, near, far := cosine(f.Data[0].Embedding, f.Data[3].Embedding), cosine(f.Data[0].Embedding, f.Data[1].Embedding), cosine(f.Data[0].Embedding, f.Data[2].Embedding)
	if same < 1-1e-9 || near <= far+0.2 {
		t.Fatalf("cosine same %.3f, sharing words %.3f, none %.3f", same, near, far)
	}
	var b struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	postJSON(t, base+"/v1/embeddings", `{"input":"the freight train waits in the switchyard","encoding_format":"base64","dimensions":8}`, &b)
	v := embed(texts[0], embedDim)[:8]
	n := math.Sqrt(cosine(v, v))
	want := make([]byte, 0, 32)
	for _, x := range v {
		u := math.Float32bits(float32(x / n))
		want = append(want, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	var got []byte
	if err := json.Unmarshal([]byte(`"`+b.Data[0].Embedding+`"`), &got); err != nil || string(got) != string(want) {
		t.Fatalf("base64 %q (%v), want the 8 leading dimensions normalized", b.Data[0].Embedding, err)
	}
}

// TestRerankAndScore: the query's closest document ranks first, top_n
// cuts the list; score pairs one text with many.
func TestRerankAndScore(t *testing.T) {
	_, base := start(t, Config{})
	var rr struct {
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
			Document       struct {
				Text string `json:"text"`
			} `json:"document"`
		} `json:"results"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	for _, path := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		postJSON(t, base+path, `{"query":"freight train","documents":["poems about the sea","the freight train is late","a train of thought"],"top_n":2}`, &rr)
		if len(rr.Results) != 2 || rr.Results[0].Index != 1 || rr.Results[0].Document.Text != "the freight train is late" ||
			rr.Results[0].RelevanceScore < rr.Results[1].RelevanceScore || rr.Usage.TotalTokens <= 0 {
			t.Fatalf("%s: %+v", path, rr)
		}
	}
	var sc struct {
		Data []struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
		} `json:"data"`
	}
	for _, path := range []string{"/v1/score", "/score"} {
		postJSON(t, base+path, `{"text_1":"freight train","text_2":["freight train","ocean waves"]}`, &sc)
		if len(sc.Data) != 2 || sc.Data[0].Score < 0.99 || sc.Data[1].Score >= sc.Data[0].Score || sc.Data[1].Score < 0 {
			t.Fatalf("%s: %+v", path, sc)
		}
	}
}

// TestTokenize: tokenize counts a chat request's messages as its usage's
// prompt_tokens, and detokenize gives back the text.
func TestTokenize(t *testing.T) {
	_, base := start(t, Config{})
	msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"Grüße 🚂 from the switchyard"}]`
	var tk struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int64  `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}
	postJSON(t, base+"/tokenize", `{"messages":`+msgs+`,"return_token_strs":true}`, &tk)
	var chat struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	postJSON(t, base+"/v1/chat/completions", `{"max_tokens":1,"messages":`+msgs+`}`, &chat)
	if tk.Count != chat.Usage.PromptTokens || tk.Count != len(tk.Tokens) || len(tk.TokenStrs) != tk.Count || tk.MaxModelLen <= 0 {
		t.Fatalf("tokenize %+v, chat prompt_tokens %d", tk, chat.Usage.PromptTokens)
	}
	text := "Grüße 🚂 aus dem Rangierbahnhof"
	postJSON(t, base+"/tokenize", fmt.Sprintf(`{"model":%q,"prompt":%q}`, DefaultModel, text), &tk)
	ids, _ := json.Marshal(tk.Tokens)
	var dt struct {
		Prompt string `json:"prompt"`
	}
	postJSON(t, base+"/detokenize", `{"tokens":`+string(ids)+`}`, &dt)
	if dt.Prompt != text || tk.Count != estimateTokens(len(text)) {
		t.Fatalf("detokenize %q, want %q (%d tokens)", dt.Prompt, text, tk.Count)
	}
}

// TestChoicesAndLogprobs: n choices, each with its own text, indexed,
// whole and streamed; usage counts the prompt once and every choice's
// tokens; logprobs when asked, top_logprobs long.
func TestChoicesAndLogprobs(t *testing.T) {
	_, base := start(t, Config{})
	var whole struct {
		Choices []struct {
			Index    int `json:"index"`
			Message  struct{ Content string }
			Logprobs *struct {
				Content []struct {
					Token       string     `json:"token"`
					Logprob     float64    `json:"logprob"`
					TopLogprobs []struct{} `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	postJSON(t, base+"/v1/chat/completions", `{"n":3,"max_tokens":4,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`, &whole)
	texts := map[string]bool{}
	for i, c := range whole.Choices {
		texts[c.Message.Content] = true
		if c.Index != i || c.Logprobs == nil || len(c.Logprobs.Content) != 4 || len(c.Logprobs.Content[0].TopLogprobs) != 2 || c.Logprobs.Content[0].Logprob > 0 {
			t.Fatalf("choice %d: %+v", i, c)
		}
	}
	if len(whole.Choices) != 3 || len(texts) != 3 || whole.Usage.CompletionTokens != 12 || whole.Usage.PromptTokens == 0 {
		t.Fatalf("%+v", whole)
	}
	status, b := post(t, base+"/v1/completions", `{"n":2,"max_tokens":3,"prompt":"once","stream":true,"stream_options":{"include_usage":true},"logprobs":1}`)
	if status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	perChoice := map[int]int{}
	finished, usage := 0, 0
	for _, ev := range sseEvents(t, strings.NewReader(string(b))) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Index        int     `json:"index"`
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
				Logprobs     *struct {
					Tokens []string `json:"tokens"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			usage = c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finished++
			} else if ch.Text != "" {
				if ch.Logprobs == nil || len(ch.Logprobs.Tokens) != 1 || ch.Logprobs.Tokens[0] != ch.Text {
					t.Fatalf("chunk %s", ev)
				}
				perChoice[ch.Index]++
			}
		}
	}
	if perChoice[0] != 3 || perChoice[1] != 3 || finished != 2 || usage != 6 {
		t.Fatalf("tokens per choice %v, %d finished, usage %d", perChoice, finished, usage)
	}
}
