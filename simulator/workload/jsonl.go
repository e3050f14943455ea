package workload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// mooncakeRow is a row of a JSONL trace: Mooncake's fields, the
// Qwen-Bailian traces' chat ids, a Switchyard trace's additions.
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
// turns), or a Switchyard trace (schemas/trace.Row: Mooncake's fields
// without hash_ids, plus cached tokens, affinity hash, cluster and
// streaming).
// Timestamps are seconds when any has a fraction or the rows carry
// chat_id, else milliseconds; Report.BlockTokens is the block size the
// hash_ids fit (docs/sim.md). A conversation's turns (chat_id chains)
// share a Session. Malformed rows are skipped and reported, or, with
// strict, returned as an error naming the line.
func ReadMooncake(r io.Reader, strict bool) ([]Request, Report, error) {
	return ReadJSONL(r, strict, Format{})
}

// ReadJSONL is ReadMooncake with f's overrides of the time unit and the
// block size.
func ReadJSONL(r io.Reader, strict bool, f Format) ([]Request, Report, error) {
	var rep Report
	var out []Request
	var stamps []float64
	seconds := false
	root := map[int64]int64{} // chat_id → the chat its conversation started with
	var twin []twinRow        // Switchyard rows without hash_ids
	hashed := false
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
			t, err := row.apply(&req, line)
			if err != nil {
				if strict {
					return nil, rep, fmt.Errorf("%w: line %d: %v", ErrMalformed, line, err)
				}
				rep.skip(line)
				continue
			}
			rep.SwitchyardRows++
			if len(req.Blocks) == 0 {
				t.index = len(out)
				twin = append(twin, t)
			}
		}
		hashed = hashed || len(req.Blocks) > 0
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
	switch {
	case rep.BlockTokens > 0:
	case len(twin) > 0 && !hashed:
		rep.BlockTokens = TraceBlockTokens
	default:
		rep.BlockTokens = fitBlockTokens(out)
	}
	if len(twin) > 0 {
		switchyardBlocks(out, twin, rep.BlockTokens)
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
