package workload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"time"
)

// Report says what a trace reader skipped.
type Report struct {
	Rows    int
	Skipped int
	// SwitchyardRows are rows with a Switchyard trace's fields
	// (schemas/trace.Row): their arrivals are exact milliseconds, and
	// they carry their cluster and session.
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

// SpreadTicks puts reqs in arrival order and, when the trace's arrivals
// come in batches of equal times (tick > 0: Mooncake's 3-s ticks,
// Report.Tick), spreads each batch evenly over the tick, in trace order.
func SpreadTicks(reqs []Request, tick time.Duration) {
	sort.SliceStable(reqs, func(a, b int) bool { return reqs[a].Arrival < reqs[b].Arrival })
	for i := 0; tick > 0 && i < len(reqs); {
		j := i
		for j < len(reqs) && reqs[j].Arrival == reqs[i].Arrival {
			j++
		}
		n := j - i
		for k := i; k < j; k++ {
			reqs[k].Arrival += tick * time.Duration(k-i) / time.Duration(n)
		}
		i = j
	}
	sort.SliceStable(reqs, func(a, b int) bool { return reqs[a].Arrival < reqs[b].Arrival })
}

// InferSessions gives each request without a Session one from its prefix
// blocks, as a JSONL trace without session ids (Mooncake) implies them: a
// conversation is the chain that shares its second block (the first is
// the shared system prompt), "mc" and the block id in base 36; a
// one-block request is keyed by that block, a request without blocks by
// its index ("mc-row" and the index).
func InferSessions(reqs []Request) {
	for i := range reqs {
		b := reqs[i].Blocks
		switch {
		case reqs[i].Session != "": // a trace's own session or affinity key
		case len(b) >= 2:
			reqs[i].Session = "mc" + strconv.FormatUint(b[1], 36)
		case len(b) == 1:
			reqs[i].Session = "mc" + strconv.FormatUint(b[0], 36)
		default:
			reqs[i].Session = "mc-row" + strconv.Itoa(i)
		}
	}
}
