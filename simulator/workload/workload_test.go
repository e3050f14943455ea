package workload

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestGeneratorDeterministicAndSharesPrefixes(t *testing.T) {
	g := Generator{RatePerSecond: 20, Clusters: []string{"a", "b"}, Seed: 7}
	r1 := g.Generate(30 * time.Second)
	r2 := g.Generate(30 * time.Second)
	if !reflect.DeepEqual(r1, r2) {
		t.Fatal("same seed gave different workloads")
	}
	if n := len(r1); n < 2*20*30*8/10 || n > 2*20*30*12/10 {
		t.Fatalf("got %d requests, want about %d", n, 2*20*30)
	}
	perCluster := map[string]int{}
	followUps := 0
	seen := map[string]bool{}
	for i, r := range r1 {
		if i > 0 && r.Arrival < r1[i-1].Arrival {
			t.Fatal("not sorted by arrival")
		}
		perCluster[r.Cluster]++
		if seen[r.Session] {
			followUps++
		}
		seen[r.Session] = true
		if r.PromptTokens <= 0 || r.OutputTokens <= 0 || len(r.Blocks) == 0 {
			t.Fatalf("bad request %+v", r)
		}
	}
	if perCluster["a"] == 0 || perCluster["b"] == 0 {
		t.Fatalf("clusters %v", perCluster)
	}
	if followUps < len(r1)/2 {
		t.Fatalf("only %d of %d requests continue a conversation", followUps, len(r1))
	}
}

func TestPromptSharesTextPrefixForSharedBlocks(t *testing.T) {
	a := Request{Blocks: []uint64{1, 2, 3}, PromptTokens: 150}
	b := Request{Blocks: []uint64{1, 2, 9}, PromptTokens: 150}
	pa, pb := Prompt(a, 64, 0), Prompt(b, 64, 0)
	if len(pa) != 600 || len(pb) != 600 {
		t.Fatalf("lengths %d %d, want 600", len(pa), len(pb))
	}
	if pa[:512] != pb[:512] {
		t.Fatal("shared blocks do not share text")
	}
	if pa[512:] == pb[512:] {
		t.Fatal("different blocks gave the same text")
	}
	if got := Prompt(a, 64, 10); len(got) != 40 {
		t.Fatalf("capped prompt has %d chars", len(got))
	}
}

func TestReadMooncakeSample(t *testing.T) {
	f, err := os.Open("../../testdata/traces/mooncake_conversation_head1000.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, rep, err := ReadFile(f, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1000 || rep.Skipped != 0 {
		t.Fatalf("%d requests, report %+v", len(reqs), rep)
	}
	for _, r := range reqs {
		if want := (r.PromptTokens + 511) / 512; len(r.Blocks) != want || r.Blocks[0] != 0 {
			t.Fatalf("request %+v: want %d blocks starting with 0", r, want)
		}
	}
}

func TestReadAzureSample(t *testing.T) {
	f, err := os.Open("../../testdata/traces/azure2023_conv_head1000.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, rep, err := ReadFile(f, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1000 || rep.Skipped != 0 {
		t.Fatalf("%d requests, report %+v", len(reqs), rep)
	}
	// 18:15:50.9951690 - 18:15:46.6805900 = 4.314579 s
	if want := 4314579 * time.Microsecond; reqs[0].Arrival != 0 || reqs[1].Arrival != want {
		t.Fatalf("arrivals %v %v, want 0 and %v", reqs[0].Arrival, reqs[1].Arrival, want)
	}
	shared := 0
	for _, r := range reqs {
		if r.Blocks[0] < 1<<20 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("no request starts with a shared system prompt")
	}
}

func TestMalformedRows(t *testing.T) {
	moon := `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}
not json
{"timestamp": -1, "input_length": 10, "output_length": 5}
{"timestamp": 5, "input_length": 10, "output_length": 5, "hash_ids": [0]}
`
	reqs, rep, err := ReadMooncake(strings.NewReader(moon), false)
	if err != nil || len(reqs) != 2 || rep.Skipped != 2 || !reflect.DeepEqual(rep.FirstBad, []int{2, 3}) {
		t.Fatalf("lenient: %d %+v %v", len(reqs), rep, err)
	}
	if _, _, err := ReadMooncake(strings.NewReader(moon), true); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("strict: %v", err)
	}
	az := "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\nbad,1,2\r\n2023-11-16 18:15:47.6805900,-3,44\r\n2023-11-16 18:15:48.6805900,10,1"
	reqs, rep, err = ReadAzure(strings.NewReader(az), false, AzureConversations{})
	if err != nil || len(reqs) != 2 || rep.Skipped != 2 || !reflect.DeepEqual(rep.FirstBad, []int{3, 4}) {
		t.Fatalf("azure lenient: %d %+v %v", len(reqs), rep, err)
	}
	if _, _, err := ReadAzure(strings.NewReader(az), true, AzureConversations{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("azure strict: %v", err)
	}
}

func FuzzReadFile(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}`))
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44"))
	f.Fuzz(func(t *testing.T, b []byte) {
		reqs, rep, err := ReadFile(strings.NewReader(string(b)), false, 1)
		if err != nil {
			return
		}
		if rep.Rows != len(reqs) {
			t.Fatalf("rows %d, requests %d", rep.Rows, len(reqs))
		}
		for _, r := range reqs {
			if r.PromptTokens <= 0 || r.OutputTokens <= 0 || r.Arrival < 0 {
				t.Fatalf("bad request %+v", r)
			}
		}
	})
}
