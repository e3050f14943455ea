package engineserver

import (
	"strings"
	"testing"
)

func TestTextBlockHashesSharePrefixes(t *testing.T) {
	a := strings.Repeat("a", 64*10)
	b := a[:64*6] + strings.Repeat("b", 64*4)
	ha, hb := textBlockHashes(a, 16, 100), textBlockHashes(b, 16, 100)
	if len(ha) != 10 || len(hb) != 10 {
		t.Fatalf("lengths %d %d, want 10", len(ha), len(hb))
	}
	for i := range 10 {
		if (ha[i] == hb[i]) != (i < 6) {
			t.Errorf("block %d: equal=%v, want %v", i, ha[i] == hb[i], i < 6)
		}
	}
	if got := textBlockHashes(a, 16, 3); len(got) != 3 {
		t.Errorf("limit ignored: %d", len(got))
	}
	ids, err := idBlockHashes([]uint64{5, 6}, 512, 16, 1000)
	if err != nil || len(ids) != 64 {
		t.Fatalf("id hashes: %d, %v", len(ids), err)
	}
	ids2, _ := idBlockHashes([]uint64{5, 7}, 512, 16, 1000)
	if ids[31] != ids2[31] || ids[32] == ids2[32] {
		t.Error("id hashes do not follow the shared prefix")
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`), true)
	f.Add([]byte(`{"model":"m","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true}}`), false)
	f.Add([]byte(`{"model":"m","prompt":"x","switchyard":{"prompt_tokens":10,"hash_ids":[1,2],"hash_block_tokens":16}}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`), true)
	lim := limits{blockSize: 16, maxModelLen: 4096, defaultMaxTokens: 64}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		p, err := parseRequest(body, chat, lim)
		if err != nil {
			if err.status < 400 || err.status > 499 || err.message == "" {
				t.Fatalf("error %+v", err)
			}
			return
		}
		if p.model == "" || p.promptTokens < 1 || p.maxTokens < 1 || p.promptTokens+p.maxTokens > lim.maxModelLen ||
			len(p.hashes) > lim.maxModelLen/lim.blockSize {
			t.Fatalf("accepted invalid %+v", p)
		}
	})
}
