package workload

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

// ErrMalformed is wrapped by strict-mode errors about a bad row.
var ErrMalformed = errors.New("malformed trace row")

type mooncakeRow struct {
	Timestamp    *int64   `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
	switchyardRow
}

// ReadMooncake reads a Mooncake JSONL trace (timestamp in ms, input and
// output lengths, 512-token prefix-block hash_ids), or a Switchyard trace
// (TraceRow: the same fields without hash_ids, plus cached tokens,
// affinity hash, cluster and streaming). Malformed rows are skipped and
// reported, or, with strict, returned as an error naming the line.
func ReadMooncake(r io.Reader, strict bool) ([]Request, Report, error) {
	var rep Report
	var out []Request
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var row mooncakeRow
		err := json.Unmarshal([]byte(text), &row)
		switch {
		case err != nil:
		case row.Timestamp == nil || *row.Timestamp < 0:
			err = errors.New("timestamp missing or negative")
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
			Arrival:      time.Duration(*row.Timestamp) * time.Millisecond,
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
		rep.Rows++
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, rep, fmt.Errorf("reading mooncake trace: %w", err)
	}
	return out, rep, nil
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

// ReadAzure reads an Azure LLM inference CSV trace
// (TIMESTAMP,ContextTokens,GeneratedTokens), synthesising prefixes with
// conv. Arrivals are relative to the first row.
func ReadAzure(r io.Reader, strict bool, conv AzureConversations) ([]Request, Report, error) {
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
	var rep Report
	var out []Request
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	var start time.Time
	line := 0
	type convo struct {
		id     string
		blocks []uint64
		tokens int
	}
	var recent []*convo
	var nextBlock uint64 = 1 << 20
	for {
		rec, err := cr.Read()
		line++
		if errors.Is(err, io.EOF) {
			break
		}
		if line == 1 && err == nil && len(rec) > 0 && strings.EqualFold(strings.TrimSpace(strings.TrimPrefix(rec[0], "\ufeff")), "TIMESTAMP") {
			continue
		}
		var ts time.Time
		var ctxTok, genTok int
		if err == nil && len(rec) != 3 {
			err = fmt.Errorf("want 3 fields, got %d", len(rec))
		}
		if err == nil {
			ts, err = time.Parse(AzureTimeLayout, strings.TrimSpace(rec[0]))
		}
		if err == nil {
			ctxTok, err = strconv.Atoi(strings.TrimSpace(rec[1]))
			if err == nil && ctxTok <= 0 {
				err = errors.New("ContextTokens not positive")
			}
		}
		if err == nil {
			genTok, err = strconv.Atoi(strings.TrimSpace(rec[2]))
			if err == nil && genTok < 0 {
				err = errors.New("GeneratedTokens negative")
			}
		}
		if err == nil && !start.IsZero() && ts.Before(start) {
			err = errors.New("timestamp before the first row")
		}
		if err != nil {
			if strict {
				return nil, rep, fmt.Errorf("%w: line %d: %v", ErrMalformed, line, err)
			}
			rep.skip(line)
			continue
		}
		if start.IsZero() {
			start = ts
		}
		rep.Rows++
		var c *convo
		if len(recent) > 0 && rng.Float64() < conv.FollowUp {
			i := rng.IntN(len(recent))
			c = recent[i]
			recent = append(recent[:i], recent[i+1:]...)
		} else {
			sys := rng.IntN(conv.SystemPrompts)
			n := (conv.SystemTokens + conv.BlockTokens - 1) / conv.BlockTokens
			c = &convo{id: "az" + strconv.Itoa(line)}
			for k := 0; k < n; k++ {
				c.blocks = append(c.blocks, uint64(sys*1000+k))
			}
			c.tokens = conv.SystemTokens
		}
		// The prompt keeps the conversation's blocks as its prefix while
		// they fit, then fresh blocks for the rest of ContextTokens.
		keep := min(len(c.blocks), ctxTok/conv.BlockTokens)
		blocks := append([]uint64(nil), c.blocks[:keep]...)
		for len(blocks)*conv.BlockTokens < ctxTok {
			blocks = append(blocks, nextBlock)
			nextBlock++
		}
		c.blocks = blocks
		c.tokens = ctxTok + genTok
		recent = append(recent, c)
		if len(recent) > conv.Recent {
			recent = recent[1:]
		}
		out = append(out, Request{
			Arrival: ts.Sub(start), Session: c.id,
			Blocks: append([]uint64(nil), blocks...), PromptTokens: ctxTok, OutputTokens: max(1, genTok),
		})
	}
	return out, rep, nil
}

// ReadFile picks the reader by content: a line starting with '{' is
// Mooncake JSONL, anything else Azure CSV.
func ReadFile(r io.Reader, strict bool, seed uint64) ([]Request, Report, error) {
	br := bufio.NewReader(r)
	peek, _ := br.Peek(1)
	if len(peek) == 1 && peek[0] == '{' {
		return ReadMooncake(br, strict)
	}
	return ReadAzure(br, strict, AzureConversations{Seed: seed})
}
