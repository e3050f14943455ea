package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func chatMessages(turns ...string) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	roles := []string{"system", "user", "assistant"}
	var ms []msg
	for i, t := range turns {
		r := roles[0]
		if i > 0 {
			r = roles[1+(i-1)%2]
		}
		ms = append(ms, msg{r, t})
	}
	b, _ := json.Marshal(ms)
	return b
}

func TestPromptChain(t *testing.T) {
	sys := strings.Repeat("You are a careful assistant. ", 30) // 870 bytes
	first := chatMessages(sys, "What is a KV cache?")
	later := chatMessages(sys, "What is a KV cache?", strings.Repeat("It holds keys and values. ", 20), "And prefix caching?")
	a, na := promptChain(nil, first, nil)
	b, nb := promptChain(nil, later, nil)
	if want := len("system") + len(sys) + len("user") + len("What is a KV cache?"); na != want {
		t.Fatalf("%d prompt bytes, want %d (role + content of each message)", na, want)
	}
	if len(a) != na/blockBytes || len(b) != nb/blockBytes {
		t.Fatalf("%d and %d blocks for %d and %d bytes", len(a), len(b), na, nb)
	}
	if len(a) == 0 || !slices.Equal(b[:len(a)], a) {
		t.Fatalf("a later turn does not share the conversation's leading blocks:\n%x\n%x", a, b)
	}
	other, _ := promptChain(nil, chatMessages("X"+sys[1:], "What is a KV cache?"), nil)
	for k := range other {
		if other[k] == a[k] {
			t.Fatalf("block %d equal although the first byte differs: hashes must cover the whole prefix", k)
		}
	}
	// Key order and spacing do not matter, the role and content do.
	swapped := fmt.Sprintf(`[ {"content": %q, "name":"x", "role": "system"}, {"role":"user","content":%q} ]`, sys, "What is a KV cache?")
	if s, _ := promptChain(nil, []byte(swapped), nil); !slices.Equal(s, a) {
		t.Fatal("the chain depends on key order or other fields")
	}
	// A completion prompt is its text.
	p, np := promptChain(nil, nil, []byte(`"`+strings.Repeat("x", 600)+`"`))
	if np != 600 || len(p) != 2 {
		t.Fatalf("prompt: %d bytes, %d blocks", np, len(p))
	}
	// Deterministic, and the caller's buffer is used.
	var buf [8]uint64
	again, _ := promptChain(buf[:0], first, nil)
	if !slices.Equal(again, a) || &again[0] != &buf[0] {
		t.Fatal("not deterministic, or the caller's buffer was not used")
	}
	// Bounded.
	huge, nh := promptChain(nil, nil, []byte(`"`+strings.Repeat("y", (maxBlocks+10)*blockBytes)+`"`))
	if len(huge) != maxBlocks || nh != (maxBlocks+10)*blockBytes {
		t.Fatalf("huge prompt: %d blocks, %d bytes", len(huge), nh)
	}
}

func FuzzPromptChain(f *testing.F) {
	f.Add([]byte(`[{"role":"user","content":"hi"}]`), []byte(`"x"`))
	f.Add(chatMessages(strings.Repeat("s", 700), "u"), []byte(nil))
	f.Add([]byte(`[{"role":"user","content":[{"type":"text","text":"hi"}]}, 1]`), []byte(`["a","b"]`))
	f.Add([]byte(`[`), []byte(`null`))
	f.Fuzz(func(t *testing.T, messages, prompt []byte) {
		a, na := promptChain(nil, messages, prompt)
		b, nb := promptChain(make([]uint64, 0, 3), messages, prompt)
		if !slices.Equal(a, b) || na != nb {
			t.Fatal("not deterministic")
		}
		if len(a) != min(na/blockBytes, maxBlocks) {
			t.Fatalf("%d blocks for %d bytes", len(a), na)
		}
		// A Responses request: prompt as instructions, messages as input.
		r, nr := responsesChain(nil, prompt, messages)
		r2, nr2 := responsesChain(make([]uint64, 0, 3), prompt, messages)
		if !slices.Equal(r, r2) || nr != nr2 || len(r) != min(nr/blockBytes, maxBlocks) {
			t.Fatalf("responses: %d blocks for %d bytes, not deterministic", len(r), nr)
		}
	})
}

// TestResponsesChain: a Responses request's instructions then its input
// items hash as the chat messages of the same conversation do, after the
// instructions' text; a string input as its text.
func TestResponsesChain(t *testing.T) {
	sys := strings.Repeat("s", 600)
	input := chatMessages("u", strings.Repeat("q", 700))
	got, n := responsesChain(nil, []byte(`"`+sys+`"`), input)
	c := chain{}
	c.write([]byte(sys))
	if !c.messages(input) {
		t.Fatal("messages not read")
	}
	if !slices.Equal(got, c.blocks) || n != c.total || len(got) == 0 {
		t.Fatalf("%d blocks (%d bytes), want %d (%d)", len(got), n, len(c.blocks), c.total)
	}
	s, ns := responsesChain(nil, nil, []byte(`"`+strings.Repeat("p", 600)+`"`))
	p, np := promptChain(nil, nil, []byte(`"`+strings.Repeat("p", 600)+`"`))
	if !slices.Equal(s, p) || ns != np || len(s) != 2 {
		t.Fatalf("string input: %d blocks, prompt %d", len(s), len(p))
	}
}

// BenchmarkPromptChain hashes a completion prompt of 4 KiB, 128 KiB (the
// old cap of 512 blocks) and 1 MiB (past the cap of 2,048 blocks: only
// its first 512 KiB are hashed).
func BenchmarkPromptChain(b *testing.B) {
	for _, size := range []int{4 << 10, 128 << 10, 1 << 20} {
		prompt := []byte(`"` + strings.Repeat("the quick brown fox ", size/20) + `"`)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			dst := make([]uint64, 0, maxBlocks)
			b.SetBytes(int64(len(prompt)))
			for b.Loop() {
				dst, _ = promptChain(dst[:0], nil, prompt)
			}
		})
	}
}
