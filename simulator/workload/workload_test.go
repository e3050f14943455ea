package workload

import (
	"errors"
	"os"
	"reflect"
	"slices"
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
	f.Add([]byte(bailian))
	f.Add([]byte("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n1,GPT-4,4,0,4,API log"))
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,4808,10"))
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

// bailian is written after the documented format of the Qwen-Bailian
// traces (alibaba-edu/qwen-bailian-usagetraces-anon): seconds with a
// fraction, 16-token hash blocks, chat_id chains. Chat 7's parent 3 is
// not in the file.
const bailian = `{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, "output_length": 10, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}
{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1.25, "input_length": 33, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1, 4, 5]}
{"chat_id": 5, "parent_chat_id": 1, "timestamp": 61.114, "input_length": 70, "output_length": 132, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 6, 7]}
{"chat_id": 7, "parent_chat_id": 3, "timestamp": 62, "input_length": 16, "output_length": 0, "type": "search", "turn": 3, "hash_ids": [8]}
{"chat_id": 9, "parent_chat_id": 5, "timestamp": 90, "input_length": 100, "output_length": 1, "type": "text", "turn": 3, "hash_ids": [1, 2, 3, 6, 7, 9, 10]}
`

func TestReadQwenBailianRows(t *testing.T) {
	reqs, rep, err := ReadFile(strings.NewReader(bailian), true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 5 || rep.Rows != 5 || rep.Skipped != 0 {
		t.Fatalf("%d requests, report %+v", len(reqs), rep)
	}
	if rep.BlockTokens != 16 || rep.Tick != 0 {
		t.Fatalf("block tokens %d, tick %v: want 16 and no tick", rep.BlockTokens, rep.Tick)
	}
	wantAt := []time.Duration{500 * time.Millisecond, 1250 * time.Millisecond, 61114 * time.Millisecond, 62 * time.Second, 90 * time.Second}
	wantSession := []string{"chat1", "chat2", "chat1", "chat3", "chat1"}
	for i, r := range reqs {
		if r.Arrival != wantAt[i] || r.Session != wantSession[i] {
			t.Errorf("request %d: arrival %v session %q, want %v %q", i, r.Arrival, r.Session, wantAt[i], wantSession[i])
		}
	}
}

func TestJSONLTimeUnit(t *testing.T) {
	// Integer timestamps without chat ids are Mooncake's milliseconds;
	// one fraction makes the file seconds.
	for _, c := range []struct {
		rows string
		want time.Duration
	}{
		{`{"timestamp": 0, "input_length": 10, "output_length": 5}
{"timestamp": 1500, "input_length": 10, "output_length": 5}`, 1500 * time.Millisecond},
		{`{"timestamp": 0, "input_length": 10, "output_length": 5}
{"timestamp": 1500.5, "input_length": 10, "output_length": 5}`, 1500500 * time.Millisecond},
		{`{"timestamp": 0, "input_length": 10, "output_length": 5, "chat_id": 1}
{"timestamp": 2, "input_length": 10, "output_length": 5, "chat_id": 2}`, 2 * time.Second},
	} {
		reqs, _, err := ReadMooncake(strings.NewReader(c.rows), true)
		if err != nil || len(reqs) != 2 || reqs[1].Arrival != c.want {
			t.Errorf("%s: %v %+v, want the second at %v", c.rows, err, reqs, c.want)
		}
	}
	if _, _, err := ReadMooncake(strings.NewReader(`{"timestamp": 1e300, "input_length": 10, "output_length": 5}`), true); !errors.Is(err, ErrMalformed) {
		t.Errorf("a timestamp of 1e300: %v, want ErrMalformed", err)
	}
}

func TestFitBlockTokens(t *testing.T) {
	row := func(prompt, blocks int) Request { return Request{PromptTokens: prompt, Blocks: make([]uint64, blocks)} }
	for _, c := range []struct {
		name string
		reqs []Request
		want int
	}{
		{"none", []Request{{PromptTokens: 100}}, DefaultBlockTokens},
		{"mooncake", []Request{row(891, 2), row(6909, 14), row(100, 1)}, 512},
		{"bailian", []Request{row(40, 3), row(16, 1), row(1000, 63)}, 16},
		{"whole blocks only", []Request{row(40, 2), row(1000, 62), row(70, 4)}, 16},
		{"one short row ties", []Request{row(10, 1)}, DefaultBlockTokens},
		{"fits nothing", []Request{row(1000, 7), row(1000, 9), row(10, 3)}, DefaultBlockTokens},
	} {
		if got := fitBlockTokens(c.reqs); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestReadMooncakeTick(t *testing.T) {
	f, err := os.Open("../../testdata/traces/mooncake_conversation_head1000.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, rep, err := ReadFile(f, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tick != 3*time.Second || rep.BlockTokens != 512 {
		t.Fatalf("tick %v, block tokens %d: want Mooncake's 3 s and 512", rep.Tick, rep.BlockTokens)
	}
}

func TestReadCSVTraceFormats(t *testing.T) {
	for _, c := range []struct {
		name, body string
		wantAt     []time.Duration
		wantOut    []int
	}{
		{"azure 2024", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,4808,10\n2024-05-10 00:00:01+00:00,3180,8\n2024-05-10 00:00:01.5+00:00,110,27\n",
			[]time.Duration{0, 990070 * time.Microsecond, 1490070 * time.Microsecond}, []int{10, 8, 27}},
		{"azure 2023 without a header", "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n",
			[]time.Duration{0, 4314579 * time.Microsecond}, []int{44, 109}},
		{"burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,230,1317,Conversation log\n118,GPT-4,417,0,417,API log\n",
			[]time.Duration{0, 40 * time.Second, 113 * time.Second}, []int{18, 230, 1}},
		{"rows out of order", "timestamp_ms,input_tokens,output_tokens\n2500,10,1\n1000,20,2\n",
			[]time.Duration{0, 1500 * time.Millisecond}, []int{2, 1}},
	} {
		reqs, rep, err := ReadFile(strings.NewReader(c.body), true, 1)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(reqs) != len(c.wantAt) || rep.BlockTokens != DefaultBlockTokens {
			t.Errorf("%s: %d requests, report %+v", c.name, len(reqs), rep)
			continue
		}
		for i, r := range reqs {
			if r.Arrival != c.wantAt[i] || r.OutputTokens != c.wantOut[i] {
				t.Errorf("%s: request %d at %v with %d output tokens, want %v and %d", c.name, i, r.Arrival, r.OutputTokens, c.wantAt[i], c.wantOut[i])
			}
		}
	}
}

func TestCSVSessionsContinueTheirConversation(t *testing.T) {
	// BurstGPT's release with sessions: a session's turns share its
	// prefix; a new session starts on a system prompt.
	body := "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n" +
		"1,s1,0,ChatGPT,600,50,650,Conversation log\n" +
		"2,s2,0,ChatGPT,700,50,750,Conversation log\n" +
		"3,s1,2,ChatGPT,1300,50,1350,Conversation log\n"
	reqs, _, err := ReadFile(strings.NewReader(body), true, 1)
	if err != nil || len(reqs) != 3 {
		t.Fatalf("%v, %d requests", err, len(reqs))
	}
	if reqs[0].Session != reqs[2].Session || reqs[0].Session == reqs[1].Session {
		t.Fatalf("sessions %q %q %q", reqs[0].Session, reqs[1].Session, reqs[2].Session)
	}
	if !slices.Equal(reqs[2].Blocks[:len(reqs[0].Blocks)-1], reqs[0].Blocks[:len(reqs[0].Blocks)-1]) {
		t.Fatalf("s1's second turn %v does not start with its first %v", reqs[2].Blocks, reqs[0].Blocks)
	}
}

func TestCSVHeaderWithoutTheColumns(t *testing.T) {
	_, _, err := ReadFile(strings.NewReader("Timestamp,Model,Words\n1,ChatGPT,3\n"), false, 1)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "names no") {
		t.Fatalf("got %v, want an error saying the header names no token columns", err)
	}
}

func TestArrivalTick(t *testing.T) {
	at := func(ms ...int) []Request {
		var out []Request
		for _, m := range ms {
			out = append(out, Request{Arrival: time.Duration(m) * time.Millisecond})
		}
		return out
	}
	var batches, spread []int
	for k := range 24 {
		batches = append(batches, (k/4)*3000+(k/8)%2) // 4 a tick, ticks of 2,999-3,001 ms
		spread = append(spread, k*250+k%3)
	}
	spread[5] = spread[4] // a tie or two do not make a quantum
	for _, c := range []struct {
		name string
		reqs []Request
		want time.Duration
	}{
		{"3-s batches", at(batches...), 3 * time.Second},
		{"distinct times", at(spread...), 0},
		{"too few", at(0, 0, 0, 3000, 3000, 3000), 0},
	} {
		if got := arrivalTick(c.reqs); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestByteOrderMarkIsSkipped(t *testing.T) {
	for _, body := range []string{
		"\ufeff" + `{"timestamp": 0, "input_length": 10, "output_length": 5}`,
		"\ufeff2023-11-16 18:15:46.6805900,374,44",
		"\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44",
	} {
		if reqs, rep, err := ReadFile(strings.NewReader(body), true, 1); err != nil || len(reqs) != 1 {
			t.Errorf("%q: %v, %d requests, report %+v", body, err, len(reqs), rep)
		}
	}
}

func TestFormatOverridesWhatIsInferred(t *testing.T) {
	// Whole seconds without chat ids would be read as milliseconds.
	rows := `{"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]}
{"timestamp": 2, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]}`
	reqs, rep, err := ReadTrace(strings.NewReader(rows), TraceOptions{Format: Format{TimeUnit: time.Second, BlockTokens: 32}})
	if err != nil || reqs[1].Arrival != 2*time.Second || rep.BlockTokens != 32 {
		t.Fatalf("%v: second arrival %v, block tokens %d; want 2s and 32", err, reqs[1].Arrival, rep.BlockTokens)
	}
	reqs, rep, err = ReadTrace(strings.NewReader(rows), TraceOptions{})
	if err != nil || reqs[1].Arrival != 2*time.Millisecond || rep.BlockTokens != 16 {
		t.Fatalf("inferred: %v: second arrival %v, block tokens %d; want 2ms and 16", err, reqs[1].Arrival, rep.BlockTokens)
	}
	csv := "Timestamp,Request tokens,Response tokens\n0,600,5\n1500,600,5\n"
	reqs, rep, err = ReadTrace(strings.NewReader(csv), TraceOptions{Format: Format{TimeUnit: time.Millisecond, BlockTokens: 64}})
	if err != nil || reqs[1].Arrival != 1500*time.Millisecond || rep.BlockTokens != 64 || len(reqs[0].Blocks) != 10 {
		t.Fatalf("csv: %v: second arrival %v, block tokens %d, %d blocks; want 1.5s, 64 and 10", err, reqs[1].Arrival, rep.BlockTokens, len(reqs[0].Blocks))
	}
}

func TestParseFormat(t *testing.T) {
	for _, c := range []struct {
		unit   string
		blocks int
		want   Format
		ok     bool
	}{
		{"", 0, Format{}, true},
		{"ms", 16, Format{TimeUnit: time.Millisecond, BlockTokens: 16}, true},
		{"s", 0, Format{TimeUnit: time.Second}, true},
		{"h", 0, Format{}, false},
		{"", -1, Format{}, false},
		{"", 1 << 17, Format{}, false},
	} {
		got, err := ParseFormat(c.unit, c.blocks)
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("%q, %d: %+v, %v", c.unit, c.blocks, got, err)
		}
	}
}

// TestSpreadTicks: a batch of n equal arrivals is spread at tick/n steps
// in trace order, the result sorted by arrival; tick 0 only sorts.
func TestSpreadTicks(t *testing.T) {
	s := time.Second
	at := func(reqs []Request) []time.Duration {
		var out []time.Duration
		for _, r := range reqs {
			out = append(out, r.Arrival)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		tick time.Duration
		in   []time.Duration
		want []time.Duration
	}{
		{"three in a tick, one in the next", 3 * s, []time.Duration{0, 0, 0, 3 * s}, []time.Duration{0, s, 2 * s, 3 * s}},
		{"two in the second tick", 3 * s, []time.Duration{3 * s, 0, 3 * s}, []time.Duration{0, 3 * s, 3*s + 1500*time.Millisecond}},
		{"no tick: sorted only", 0, []time.Duration{2 * s, 0, 2 * s}, []time.Duration{0, 2 * s, 2 * s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := make([]Request, len(tc.in))
			for i, a := range tc.in {
				reqs[i] = Request{Arrival: a, PromptTokens: i + 1}
			}
			SpreadTicks(reqs, tc.tick)
			if got := at(reqs); !slices.Equal(got, tc.want) {
				t.Errorf("arrivals %v, want %v", got, tc.want)
			}
		})
	}
	// Trace order within a batch: the first row of the batch comes first.
	reqs := []Request{{Arrival: 0, PromptTokens: 1}, {Arrival: 0, PromptTokens: 2}}
	SpreadTicks(reqs, 3*s)
	if reqs[0].PromptTokens != 1 || reqs[1].Arrival != 1500*time.Millisecond {
		t.Errorf("batch order lost: %+v", reqs)
	}
}

// TestInferSessions: requests sharing their second block share a session;
// a session already set is kept.
func TestInferSessions(t *testing.T) {
	reqs := []Request{
		{Blocks: []uint64{0, 46, 47}},
		{Blocks: []uint64{0, 46, 47, 90}},
		{Blocks: []uint64{0, 14}},
		{Blocks: []uint64{7}},
		{},
		{Blocks: []uint64{0, 46}, Session: "chat3"},
	}
	InferSessions(reqs)
	var got []string
	for _, r := range reqs {
		got = append(got, r.Session)
	}
	if want := []string{"mc1a", "mc1a", "mce", "mc7", "mc-row4", "chat3"}; !slices.Equal(got, want) {
		t.Errorf("sessions %q, want %q", got, want)
	}
}
