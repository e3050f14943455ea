package workload

import (
	"cmp"
	"encoding/csv"
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
