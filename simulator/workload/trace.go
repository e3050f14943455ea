package workload

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report says what a trace reader skipped.
type Report struct {
	Rows    int
	Skipped int
	// SwitchyardRows are rows with a Switchyard trace's fields
	// (TraceRow): their arrivals are exact milliseconds, and they carry
	// their cluster and session.
	SwitchyardRows int
	// BlockTokens is the size of the requests' prefix blocks.
	BlockTokens int
	// Tick is the quantum of arrivals that come in batches of equal
	// times (Mooncake's 3-s ticks; zero when they do not): a replay
	// spreads each batch across it.
	Tick time.Duration
	// FirstBad holds the line numbers of the first few skipped rows.
	FirstBad []int
}

const maxBadLines = 5

func (r *Report) skip(line int) {
	r.Skipped++
	if len(r.FirstBad) < maxBadLines {
		r.FirstBad = append(r.FirstBad, line)
	}
}

// bom is the UTF-8 byte-order mark some tools write first; a trace's
// readers skip it.
const bom = "\ufeff"

// ErrMalformed is wrapped by strict-mode errors about a bad row.
var ErrMalformed = errors.New("malformed trace row")

// ErrNoRows is returned for a trace without a request row: empty, or
// every row malformed.
var ErrNoRows = errors.New("no request rows in the trace")

// NoRows is an error wrapping ErrNoRows when rep counts no row, naming
// the first malformed lines.
func (r Report) NoRows() error {
	if r.Rows > 0 {
		return nil
	}
	if r.Skipped == 0 {
		return ErrNoRows
	}
	return fmt.Errorf("%w: all %d rows malformed (first at lines %v; --strict names the reason)", ErrNoRows, r.Skipped, r.FirstBad)
}

type mooncakeRow struct {
	Timestamp    *json.Number `json:"timestamp"`
	InputLength  *int         `json:"input_length"`
	OutputLength *int         `json:"output_length"`
	HashIDs      []uint64     `json:"hash_ids"`
	// ChatID and ParentChatID link the turns of a conversation (the
	// Qwen-Bailian traces; a root's parent is -1).
	ChatID       *int64 `json:"chat_id"`
	ParentChatID *int64 `json:"parent_chat_id"`
	switchyardRow
}

// maxTimestamp bounds a JSONL timestamp (ms or s): above it the arrival
// would not fit a time.Duration once read in seconds.
const maxTimestamp = 4e9

// ReadMooncake reads a JSONL trace of prefix-block hashes: Mooncake's
// (timestamp in ms, input and output lengths, hash_ids of 512-token
// blocks), the Qwen-Bailian traces' (timestamp in seconds, hash_ids of
// 16-token blocks, chat_id and parent_chat_id linking a conversation's
// turns), or a Switchyard trace (TraceRow: Mooncake's fields without
// hash_ids, plus cached tokens, affinity hash, cluster and streaming).
// Timestamps are seconds when any has a fraction or the rows carry
// chat_id, else milliseconds; Report.BlockTokens is the block size the
// hash_ids fit (docs/sim.md). A conversation's turns (chat_id chains)
// share a Session. Malformed rows are skipped and reported, or, with
// strict, returned as an error naming the line.
func ReadMooncake(r io.Reader, strict bool) ([]Request, Report, error) {
	return ReadJSONL(r, strict, Format{})
}

// Format overrides what the trace readers infer; the zero value infers
// everything.
type Format struct {
	// TimeUnit is the unit of the trace's numeric times, time.Millisecond
	// or time.Second; 0 infers it (JSONL: ReadMooncake's rule; CSV:
	// seconds, or milliseconds for a time column named so).
	TimeUnit time.Duration
	// BlockTokens is the size of a JSONL trace's hash_ids blocks, or of
	// the blocks synthesised for a CSV trace's prompts; 0 infers it
	// (JSONL: the size the hash_ids fit; CSV: DefaultBlockTokens).
	BlockTokens int
}

// maxBlockTokens bounds Format.BlockTokens.
const maxBlockTokens = 1 << 16

// ParseFormat returns the Format of a time unit name ("" to infer it,
// "ms" or "s") and a block size (0 to infer it, or 1 to 65,536 tokens),
// as the --trace-time-unit and --trace-block-tokens flags give them.
func ParseFormat(unit string, blockTokens int) (Format, error) {
	var f Format
	switch unit {
	case "":
	case "ms":
		f.TimeUnit = time.Millisecond
	case "s":
		f.TimeUnit = time.Second
	default:
		return f, fmt.Errorf("time unit %q: want ms or s", unit)
	}
	if blockTokens < 0 || blockTokens > maxBlockTokens {
		return f, fmt.Errorf("block tokens %d: want 0 (inferred) to %d", blockTokens, maxBlockTokens)
	}
	f.BlockTokens = blockTokens
	return f, nil
}

// ReadJSONL is ReadMooncake with f's overrides of the time unit and the
// block size.
func ReadJSONL(r io.Reader, strict bool, f Format) ([]Request, Report, error) {
	var rep Report
	var out []Request
	var stamps []float64
	seconds := false
	root := map[int64]int64{} // chat_id → the chat its conversation started with
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			text = strings.TrimPrefix(text, bom)
		}
		if text == "" {
			continue
		}
		var row mooncakeRow
		var ts float64
		err := json.Unmarshal([]byte(text), &row)
		if err == nil && row.Timestamp != nil {
			ts, err = row.Timestamp.Float64()
		}
		switch {
		case err != nil:
		case row.Timestamp == nil || ts < 0 || ts > maxTimestamp:
			err = fmt.Errorf("timestamp missing, negative or above %g", float64(maxTimestamp))
		case row.InputLength == nil || *row.InputLength <= 0:
			err = errors.New("input_length missing or not positive")
		case row.OutputLength == nil || *row.OutputLength < 0:
			err = errors.New("output_length missing or negative")
		}
		if err != nil {
			if strict {
				return nil, rep, fmt.Errorf("%w: line %d: %v", ErrMalformed, line, err)
			}
			rep.skip(line)
			continue
		}
		req := Request{
			Blocks:       row.HashIDs,
			PromptTokens: *row.InputLength,
			OutputTokens: max(1, *row.OutputLength),
		}
		if row.present() {
			if err := row.apply(&req, line); err != nil {
				if strict {
					return nil, rep, fmt.Errorf("%w: line %d: %v", ErrMalformed, line, err)
				}
				rep.skip(line)
				continue
			}
			rep.SwitchyardRows++
		}
		if row.ChatID != nil {
			seconds = true
			req.Session = "chat" + strconv.FormatInt(chatRoot(root, *row.ChatID, row.ParentChatID), 10)
		}
		seconds = seconds || ts != math.Trunc(ts)
		rep.Rows++
		stamps = append(stamps, ts)
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, rep, fmt.Errorf("reading mooncake trace: %w", err)
	}
	unit := float64(time.Millisecond)
	switch {
	case f.TimeUnit > 0:
		unit = float64(f.TimeUnit)
	case seconds:
		unit = float64(time.Second)
	}
	for i, ts := range stamps {
		out[i].Arrival = time.Duration(math.Round(ts * unit))
	}
	rep.BlockTokens = f.BlockTokens
	if rep.BlockTokens <= 0 {
		rep.BlockTokens = fitBlockTokens(out)
	}
	if rep.SwitchyardRows == 0 { // exported traces have exact times
		rep.Tick = arrivalTick(out)
	}
	return out, rep, nil
}

// chatRoot is the chat a conversation started with, given a turn's
// chat_id and parent_chat_id (negative or absent for a first turn); a
// parent not seen before is taken as the root, so the turns after it
// still share it.
func chatRoot(root map[int64]int64, chat int64, parent *int64) int64 {
	r := chat
	if parent != nil && *parent >= 0 && *parent != chat {
		r = *parent
		if pr, ok := root[*parent]; ok {
			r = pr
		}
	}
	root[chat] = r
	return r
}

// fitBlockTokens is the prefix-block size, a power of two up to 65,536,
// that the requests' hash_ids fit (len(hash_ids) = ceil(input_length /
// size), or the floor where a trace hashes whole blocks only) most often (on a tie DefaultBlockTokens, else the smaller);
// DefaultBlockTokens when no request has hash_ids or no size fits half
// of them.
func fitBlockTokens(reqs []Request) int {
	const sizes = 17 // 1 … 65,536
	var fits [sizes]int
	n := 0
	for _, r := range reqs {
		if len(r.Blocks) == 0 {
			continue
		}
		n++
		for k := range sizes {
			if b := 1 << k; (r.PromptTokens+b-1)/b == len(r.Blocks) || r.PromptTokens/b == len(r.Blocks) {
				fits[k]++
			}
		}
	}
	best := -1
	for k := range sizes {
		if fits[k] > 0 && (best < 0 || fits[k] > fits[best] || fits[k] == fits[best] && 1<<k == DefaultBlockTokens) {
			best = k
		}
	}
	if best < 0 || 2*fits[best] < n {
		return DefaultBlockTokens
	}
	return 1 << best
}

// minTickRows is the fewest arrivals arrivalTick finds a quantum in.
const minTickRows = 16

// arrivalTick is the quantum of the arrivals when they come in batches
// of equal times, as Mooncake's 3-s ticks do (at least half the gaps
// between consecutive arrivals zero): the median non-zero gap rounded to
// 100 ms. Zero when the arrivals are not quantised so, or too few
// (under minTickRows) to tell.
func arrivalTick(reqs []Request) time.Duration {
	if len(reqs) < minTickRows {
		return 0
	}
	at := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		at[i] = r.Arrival
	}
	slices.Sort(at)
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		if g := at[i] - at[i-1]; g > 0 {
			gaps = append(gaps, g)
		}
	}
	if zero := len(at) - 1 - len(gaps); 2*zero < len(at)-1 || len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2].Round(100 * time.Millisecond)
}

// AzureTimeLayout is the TIMESTAMP format of the Azure 2023 traces.
const AzureTimeLayout = "2006-01-02 15:04:05.0000000"

// AzureConversations synthesises prefixes for the Azure trace, which has
// none: each request continues a recent conversation with probability
// FollowUp (default 0.4) — its prompt then starts with that
// conversation's blocks — or starts a new one that shares one of
// SystemPrompts (default 4) system prompts of SystemTokens (default 256).
type AzureConversations struct {
	FollowUp      float64
	SystemPrompts int
	SystemTokens  int
	BlockTokens   int
	// Recent is how many open conversations a follow-up picks from
	// (default 256).
	Recent int
	Seed   uint64
}

// csvColumns are the columns of a CSV trace's fields (-1: absent).
type csvColumns struct {
	time, prompt, output, session int
	// timeMs: numeric times are milliseconds (the column is named so),
	// not seconds.
	timeMs bool
}

// azureColumns is the Azure traces' layout, assumed without a header.
var azureColumns = csvColumns{time: 0, prompt: 1, output: 2, session: -1}

// csvNames are the header names of each field, lower case without
// spaces, underscores or hyphens: Azure's (TIMESTAMP, ContextTokens,
// GeneratedTokens), BurstGPT's (Timestamp, Request tokens, Response
// tokens, Session ID) and common variants.
var csvNames = map[string][]string{
	"time":    {"timestamp", "time", "arrivaltime", "arrivedat", "timestampms", "arrivaltimems", "timems"},
	"prompt":  {"contexttokens", "requesttokens", "inputlength", "inputtokens", "prompttokens", "inputlen", "promptlen", "numprefilltokens"},
	"output":  {"generatedtokens", "responsetokens", "outputlength", "outputtokens", "completiontokens", "outputlen", "numdecodetokens"},
	"session": {"sessionid", "conversationid", "chatid"},
}

// csvHeader reads rec as a header: the columns it names, and whether it
// names any (a record naming none is data, in Azure's layout).
func csvHeader(rec []string) (csvColumns, bool, error) {
	c := csvColumns{time: -1, prompt: -1, output: -1, session: -1}
	cols := map[string]*int{"time": &c.time, "prompt": &c.prompt, "output": &c.output, "session": &c.session}
	named := false
	for i, f := range rec {
		name := strings.NewReplacer(" ", "", "_", "", "-", "").Replace(strings.ToLower(strings.TrimSpace(f)))
		for field, names := range csvNames {
			if slices.Contains(names, name) && *cols[field] < 0 {
				*cols[field] = i
				named = true
				if field == "time" {
					c.timeMs = strings.HasSuffix(name, "ms")
				}
			}
		}
	}
	if !named {
		return azureColumns, false, nil
	}
	if c.time < 0 || c.prompt < 0 || c.output < 0 {
		return c, true, fmt.Errorf("%w: the CSV header %q names no timestamp, prompt-token or output-token column (Azure: TIMESTAMP,ContextTokens,GeneratedTokens; BurstGPT: Timestamp,…,Request tokens,Response tokens)",
			ErrMalformed, strings.Join(rec, ","))
	}
	return c, true, nil
}

// csvTimeLayouts are the date-time forms a CSV trace's times take; a
// fraction of a second after the seconds is read whatever its digits
// (Azure 2023: 2023-11-16 18:15:46.6805900; Azure 2024: 2024-05-10
// 00:00:00.009930+00:00).
var csvTimeLayouts = []string{"2006-01-02 15:04:05Z07:00", "2006-01-02 15:04:05", time.RFC3339, "2006-01-02T15:04:05"}

// parseCSVTime reads a CSV trace's time as a duration since the Unix
// epoch (a date-time) or since the trace's origin (a number of units).
func parseCSVTime(s string, unit time.Duration) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		f *= unit.Seconds()
		if !(f >= 0 && f <= maxTimestamp) {
			return 0, fmt.Errorf("time %q negative or above %g s", s, float64(maxTimestamp))
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	for _, l := range csvTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			if t.Year() < 1970 || t.Year() > 2200 {
				return 0, fmt.Errorf("time %q out of range", s)
			}
			return time.Duration(t.UnixNano()), nil
		}
	}
	return 0, fmt.Errorf("time %q is neither a number of seconds nor a date-time like %q", s, "2024-05-10 00:00:00.009930+00:00")
}

// csvRow is a CSV trace's row as read.
type csvRow struct {
	at             time.Duration
	ctxTok, genTok int
	session        string
	line           int
}

// readCSVRow reads rec, line of a CSV trace with columns c and numeric
// times in unit (0: seconds, or milliseconds for a column named so).
func readCSVRow(rec []string, c csvColumns, line int, unit time.Duration) (csvRow, error) {
	row := csvRow{line: line}
	if need := max(c.time, c.prompt, c.output, c.session) + 1; len(rec) < need || c == azureColumns && len(rec) != 3 {
		return row, fmt.Errorf("want %d fields, got %d", max(need, 3), len(rec))
	}
	var err error
	if unit <= 0 {
		unit = time.Second
		if c.timeMs {
			unit = time.Millisecond
		}
	}
	if row.at, err = parseCSVTime(rec[c.time], unit); err != nil {
		return row, err
	}
	if row.ctxTok, err = strconv.Atoi(strings.TrimSpace(rec[c.prompt])); err != nil || row.ctxTok <= 0 {
		return row, fmt.Errorf("prompt tokens %q not a positive integer", rec[c.prompt])
	}
	if row.genTok, err = strconv.Atoi(strings.TrimSpace(rec[c.output])); err != nil || row.genTok < 0 {
		return row, fmt.Errorf("output tokens %q not a non-negative integer", rec[c.output])
	}
	if c.session >= 0 {
		row.session = strings.TrimSpace(rec[c.session])
	}
	return row, nil
}

// ReadAzure reads a CSV trace of arrival times and token counts: the
// Azure LLM inference traces (TIMESTAMP,ContextTokens,GeneratedTokens,
// 2023 and 2024 time forms, with or without the header), BurstGPT
// (Timestamp in seconds, Request tokens, Response tokens, and Session ID
// where the release has it) or any CSV whose header names such columns
// (csvNames). Rows are taken in time order, arrivals relative to the
// earliest. These traces carry no prefixes, so conv synthesises them: a
// row with a session continues that session's conversation; without
// one, a row continues a recent conversation at random (conv.FollowUp).
func ReadAzure(r io.Reader, strict bool, conv AzureConversations) ([]Request, Report, error) {
	return ReadCSV(r, strict, conv, 0)
}

// ReadCSV is ReadAzure with the unit of numeric times given (0: seconds,
// or milliseconds for a time column named so).
func ReadCSV(r io.Reader, strict bool, conv AzureConversations, unit time.Duration) ([]Request, Report, error) {
	rep := Report{BlockTokens: DefaultBlockTokens}
	if conv.BlockTokens > 0 {
		rep.BlockTokens = conv.BlockTokens
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cols := azureColumns
	var rows []csvRow
	line := 0
	for {
		rec, err := cr.Read()
		line++
		if errors.Is(err, io.EOF) {
			break
		}
		if line == 1 && err == nil && len(rec) > 0 {
			rec[0] = strings.TrimPrefix(rec[0], bom)
			c, header, herr := csvHeader(rec)
			if herr != nil {
				return nil, rep, herr
			}
			if cols = c; header {
				continue
			}
		}
		var row csvRow
		if err == nil {
			row, err = readCSVRow(rec, cols, line, unit)
		}
		if err != nil {
			if strict {
				return nil, rep, fmt.Errorf("%w: line %d: %v", ErrMalformed, line, err)
			}
			rep.skip(line)
			continue
		}
		rows = append(rows, row)
	}
	slices.SortStableFunc(rows, func(a, b csvRow) int { return cmp.Compare(a.at, b.at) })
	out := conv.synthesise(rows)
	rep.Rows = len(out)
	rep.Tick = arrivalTick(out)
	return out, rep, nil
}

// synthesise turns rows, in time order, into requests whose prompts
// start with their conversation's blocks (AzureConversations).
func (conv AzureConversations) synthesise(rows []csvRow) []Request {
	if conv.FollowUp <= 0 {
		conv.FollowUp = 0.4
	}
	if conv.SystemPrompts <= 0 {
		conv.SystemPrompts = 4
	}
	if conv.SystemTokens <= 0 {
		conv.SystemTokens = 256
	}
	if conv.BlockTokens <= 0 {
		conv.BlockTokens = DefaultBlockTokens
	}
	if conv.Recent <= 0 {
		conv.Recent = 256
	}
	rng := rand.New(rand.NewPCG(conv.Seed, 0xA2))
	type convo struct {
		id     string
		blocks []uint64
	}
	var recent []*convo
	sessions := map[string]*convo{}
	var nextBlock uint64 = 1 << 20
	out := make([]Request, 0, len(rows))
	for _, row := range rows {
		var c *convo
		switch {
		case row.session != "":
			c = sessions[row.session]
		case len(recent) > 0 && rng.Float64() < conv.FollowUp:
			i := rng.IntN(len(recent))
			c = recent[i]
			recent = append(recent[:i], recent[i+1:]...)
		}
		if c == nil {
			sys := rng.IntN(conv.SystemPrompts)
			n := (conv.SystemTokens + conv.BlockTokens - 1) / conv.BlockTokens
			c = &convo{id: "az" + strconv.Itoa(row.line)}
			if row.session != "" {
				c.id = "s-" + row.session
				sessions[row.session] = c
			}
			for k := 0; k < n; k++ {
				c.blocks = append(c.blocks, uint64(sys*1000+k))
			}
		}
		// The prompt keeps the conversation's blocks as its prefix while
		// they fit, then fresh blocks for the rest of the prompt.
		keep := min(len(c.blocks), row.ctxTok/conv.BlockTokens)
		blocks := append([]uint64(nil), c.blocks[:keep]...)
		for len(blocks)*conv.BlockTokens < row.ctxTok {
			blocks = append(blocks, nextBlock)
			nextBlock++
		}
		c.blocks = blocks
		if row.session == "" {
			recent = append(recent, c)
			if len(recent) > conv.Recent {
				recent = recent[1:]
			}
		}
		out = append(out, Request{
			Arrival: row.at - rows[0].at, Session: c.id,
			Blocks: append([]uint64(nil), blocks...), PromptTokens: row.ctxTok, OutputTokens: max(1, row.genTok),
		})
	}
	return out
}

// ReadFile picks the reader by content: a first byte '{' (after any
// byte-order mark) is a JSONL trace (ReadMooncake), anything else a CSV
// trace (ReadAzure). A trace without a request row is an error
// (Report.NoRows).
func ReadFile(r io.Reader, strict bool, seed uint64) ([]Request, Report, error) {
	return ReadTrace(r, TraceOptions{Strict: strict, Seed: seed})
}

// TraceOptions say how ReadTrace reads a trace.
type TraceOptions struct {
	// Strict makes a malformed row an error instead of a skip.
	Strict bool
	// Seed seeds a CSV trace's prefix synthesis.
	Seed uint64
	// Format overrides what the readers infer.
	Format
}

// ReadTrace is ReadFile with o's options.
func ReadTrace(r io.Reader, o TraceOptions) ([]Request, Report, error) {
	br := bufio.NewReader(r)
	peek, _ := br.Peek(len(bom) + 1)
	peek = bytes.TrimPrefix(peek, []byte(bom))
	read := func() ([]Request, Report, error) {
		return ReadCSV(br, o.Strict, AzureConversations{Seed: o.Seed, BlockTokens: o.BlockTokens}, o.TimeUnit)
	}
	if len(peek) > 0 && peek[0] == '{' {
		read = func() ([]Request, Report, error) { return ReadJSONL(br, o.Strict, o.Format) }
	}
	reqs, rep, err := read()
	if err == nil {
		err = rep.NoRows()
	}
	return reqs, rep, err
}
