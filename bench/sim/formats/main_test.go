package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// read reads a trace with workload.ReadFile.
func read(t *testing.T, b []byte) ([]workload.Request, workload.Report) {
	t.Helper()
	reqs, rep, err := workload.ReadFile(bytes.NewReader(b), true, 1)
	if err != nil {
		t.Fatal(err)
	}
	return reqs, rep
}

// rewritten is the sample at path, as read, and rewritten by rewrite.
func rewritten(t *testing.T, path string, rewrite func(r *bytes.Reader, w *bytes.Buffer) error) (orig, out []byte) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rewrite(bytes.NewReader(orig), &buf); err != nil {
		t.Fatal(err)
	}
	return orig, buf.Bytes()
}

const (
	azureSample    = "../../../testdata/traces/azure2023_conv_head1000.csv"
	mooncakeSample = "../../../testdata/traces/mooncake_conversation_head1000.jsonl"
)

// TestAzure2024FormReadsAsThe2023Trace: the readers give the same
// requests, prefixes included, for the Azure 2023 sample and its 2024
// form (times to the microsecond, with an offset).
func TestAzure2024FormReadsAsThe2023Trace(t *testing.T) {
	orig, out := rewritten(t, azureSample, func(r *bytes.Reader, w *bytes.Buffer) error { return azure2024(r, w) })
	a, _ := read(t, orig)
	b, _ := read(t, out)
	if len(a) != 1000 || len(b) != len(a) {
		t.Fatalf("%d and %d requests", len(a), len(b))
	}
	for i := range a {
		if d := a[i].Arrival - b[i].Arrival; d <= -time.Microsecond || d >= time.Microsecond ||
			a[i].PromptTokens != b[i].PromptTokens || a[i].OutputTokens != b[i].OutputTokens || len(a[i].Blocks) != len(b[i].Blocks) || a[i].Blocks[0] != b[i].Blocks[0] {
			t.Fatalf("request %d: %+v against %+v", i, a[i], b[i])
		}
	}
}

// TestBurstGPTFormReadsAsTheAzureTrace: BurstGPT's columns give the same
// requests, at whole seconds.
func TestBurstGPTFormReadsAsTheAzureTrace(t *testing.T) {
	orig, out := rewritten(t, azureSample, func(r *bytes.Reader, w *bytes.Buffer) error { return burstGPT(r, w) })
	a, _ := read(t, orig)
	b, _ := read(t, out)
	if len(b) != len(a) {
		t.Fatalf("%d and %d requests", len(a), len(b))
	}
	for i := range a {
		if b[i].Arrival != a[i].Arrival.Truncate(time.Second) || a[i].PromptTokens != b[i].PromptTokens || a[i].OutputTokens != b[i].OutputTokens {
			t.Fatalf("request %d: %+v against %+v", i, a[i], b[i])
		}
	}
}

// TestBailianFormReadsAsTheMooncakeTrace: the Qwen-Bailian form of the
// Mooncake sample reads with the same arrivals and tokens, 16-token
// blocks with the same shared prefixes, and one session per conversation
// (the rows sharing their second Mooncake block).
func TestBailianFormReadsAsTheMooncakeTrace(t *testing.T) {
	orig, out := rewritten(t, mooncakeSample, func(r *bytes.Reader, w *bytes.Buffer) error { return bailian(r, w) })
	a, ra := read(t, orig)
	b, rb := read(t, out)
	if len(b) != len(a) || ra.BlockTokens != 512 || rb.BlockTokens != 16 || rb.Tick != ra.Tick {
		t.Fatalf("%d and %d requests, reports %+v and %+v", len(a), len(b), ra, rb)
	}
	session := map[uint64]string{}
	for i := range a {
		if a[i].Arrival != b[i].Arrival || a[i].PromptTokens != b[i].PromptTokens || a[i].OutputTokens != b[i].OutputTokens ||
			len(b[i].Blocks) != (b[i].PromptTokens+15)/16 {
			t.Fatalf("request %d: %+v against %+v", i, a[i], b[i])
		}
		if s, ok := session[a[i].Blocks[1]]; ok && s != b[i].Session || !ok && b[i].Session == "" {
			t.Fatalf("request %d: session %q, its conversation's is %q", i, b[i].Session, s)
		}
		session[a[i].Blocks[1]] = b[i].Session
		for j := range i {
			shared := 0
			for shared < min(len(a[i].Blocks), len(a[j].Blocks)) && a[i].Blocks[shared] == a[j].Blocks[shared] {
				shared++
			}
			if k := min(32*shared, len(b[i].Blocks), len(b[j].Blocks)) - 1; k >= 0 && b[i].Blocks[k] != b[j].Blocks[k] {
				t.Fatalf("requests %d and %d share %d blocks, not their 16-token split", j, i, shared)
			}
		}
	}
	if len(session) == len(a) {
		t.Fatal("no conversation has two turns in the sample")
	}
}
