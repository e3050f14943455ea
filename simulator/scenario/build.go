package scenario

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// Stream is the request stream of a run, sorted by arrival, every
// request assigned to a cluster.
type Stream struct {
	Requests []workload.Request
	// BlockTokens is the size of the requests' prefix blocks.
	BlockTokens int
	// Report says what the trace reader skipped (zero for the generator).
	Report workload.Report
	// Span is the arrival window: goodput is counted over it.
	Span time.Duration
}

// BuildOptions select the seed and the trace.
type BuildOptions struct {
	Seed uint64
	// Trace overrides the scenario's trace file when non-empty.
	Trace string
	// Strict makes a malformed trace row an error instead of a skip.
	Strict bool
	// Format overrides what the trace readers infer (the time unit, the
	// block size).
	Format workload.Format
}

// generatorBlockTokens is the prefix-block size the generator uses.
const generatorBlockTokens = 64

// ErrTraceOnGenerator is returned by Build when BuildOptions.Trace is
// set on a scenario whose workload is the generator: there is no trace to
// replace, and ignoring the option would silently run something else
// than the caller asked for.
var ErrTraceOnGenerator = errors.New("a trace given for a generator workload")

// Build produces the scenario's workload.
func (s *Scenario) Build(opt BuildOptions) (*Stream, error) {
	if opt.Trace != "" && s.Workload.Kind == KindGenerator {
		return nil, fmt.Errorf("%w: scenario %q generates its requests; only a mooncake or azure workload's trace can be replaced",
			ErrTraceOnGenerator, s.Name)
	}
	dur := time.Duration(s.DurationS * float64(time.Second))
	shares := s.shares()
	out := &Stream{}
	var reqs []workload.Request
	var baseRate float64
	switch s.Workload.Kind {
	case KindGenerator:
		out.BlockTokens = generatorBlockTokens
		peak := s.peakMultiplier()
		for i, c := range s.Clusters {
			rate := s.Workload.RateRPS * shares[i]
			if rate <= 0 {
				continue
			}
			reqs = append(reqs, s.generate(c.ID, i+1, rate*peak, 0, dur, opt.Seed)...)
		}
		baseRate = s.Workload.RateRPS
	case KindMooncake, KindAzure:
		path := opt.Trace
		if path == "" {
			path = s.TracePath()
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("opening trace: %w", err)
		}
		defer f.Close()
		var rep workload.Report
		br := bufio.NewReader(f)
		kind := sniff(br)
		reqs, rep, err = readTrace(br, kind, opt)
		if err == nil {
			err = rep.NoRows()
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s trace %s: %w", kind, path, err)
		}
		out.Report = rep
		out.BlockTokens = rep.BlockTokens
		workload.SpreadTicks(reqs, rep.Tick)
		scale := s.Workload.TimeScale
		if scale == 0 {
			scale = 1
		}
		kept := reqs[:0]
		for _, r := range reqs {
			r.Arrival = time.Duration(float64(r.Arrival) / scale)
			if dur > 0 && r.Arrival >= dur {
				continue
			}
			kept = append(kept, r)
		}
		reqs = kept
		s.assignClusters(reqs, shares)
		if dur == 0 && len(reqs) > 0 {
			dur = reqs[len(reqs)-1].Arrival + time.Millisecond
		}
		if dur > 0 {
			baseRate = float64(len(reqs)) / dur.Seconds()
		}
	}
	// Thin by the rate profile and by rate events with factor < 1; add
	// flash crowds (factor > 1) as extra conversations.
	rng := rand.New(rand.NewPCG(opt.Seed, 0x7417))
	peak := s.peakMultiplier()
	if s.Workload.Kind != KindGenerator {
		peak = 1 // traces are only thinned relative to their own rate
	}
	kept := reqs[:0]
	for _, r := range reqs {
		keep := s.multiplier(r.Arrival, dur) / peak
		for _, ev := range s.Events {
			if ev.Kind == EventRate && ev.Factor < 1 && s.inEvent(ev, r.Arrival, r.Cluster) {
				keep *= ev.Factor
			}
		}
		if keep >= 1 || rng.Float64() < keep {
			kept = append(kept, r)
		}
	}
	reqs = kept
	for k, ev := range s.Events {
		if ev.Kind != EventRate || ev.Factor <= 1 {
			continue
		}
		from := time.Duration(ev.AtS * float64(time.Second))
		until := time.Duration(ev.UntilS * float64(time.Second))
		if dur > 0 {
			until = min(until, dur)
		}
		for i, c := range s.Clusters {
			if ev.Cluster != "" && ev.Cluster != c.ID {
				continue
			}
			rate := (ev.Factor - 1) * baseRate * shares[i]
			if rate <= 0 || until <= from {
				continue
			}
			extra := s.generate(c.ID, 1000*(k+1)+i+1, rate, from, until, opt.Seed)
			if s.Workload.Kind != KindGenerator {
				// Trace blocks are 512 tokens; rescale the generator's ids
				// so they never collide with the trace's.
				for j := range extra {
					for b := range extra[j].Blocks {
						extra[j].Blocks[b] |= 1 << 62
					}
				}
			}
			reqs = append(reqs, extra...)
		}
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].Arrival < reqs[j].Arrival })
	s.markNonStreaming(reqs, opt.Seed)
	out.Requests = reqs
	out.Span = dur
	return out, nil
}

// markNonStreaming makes workload.non_streaming_share of the
// conversations non-streaming, drawn per session from a hash of the
// session and the seed (no random stream is consumed, so a share of 0
// leaves the workload exactly as it was).
func (s *Scenario) markNonStreaming(reqs []workload.Request, seed uint64) {
	share := s.Workload.NonStreamingShare
	if share <= 0 {
		return
	}
	salt := strconv.FormatUint(seed, 36) + "|"
	for i := range reqs {
		u := float64(hash64(salt+reqs[i].Session)>>11) / (1 << 53)
		reqs[i].NonStreaming = u < share
	}
}

// sniff tells the trace format by content, so --trace may replace a
// scenario's trace with one of the other format: JSON lines are Mooncake,
// anything else Azure CSV.
func sniff(br *bufio.Reader) string {
	for i := 1; i <= 4096; i++ {
		b, err := br.Peek(i)
		if err != nil || len(b) < i {
			return KindAzure
		}
		switch b[i-1] {
		case ' ', '\t', '\r', '\n', 0xEF, 0xBB, 0xBF:
			continue
		case '{':
			return KindMooncake
		}
		return KindAzure
	}
	return KindAzure
}

func readTrace(r io.Reader, kind string, opt BuildOptions) ([]workload.Request, workload.Report, error) {
	if kind == KindMooncake {
		reqs, rep, err := workload.ReadJSONL(r, opt.Strict, opt.Format)
		if err != nil {
			return nil, rep, err
		}
		workload.InferSessions(reqs)
		return reqs, rep, nil
	}
	return workload.ReadCSV(r, opt.Strict, workload.AzureConversations{Seed: opt.Seed, BlockTokens: opt.Format.BlockTokens}, opt.Format.TimeUnit)
}

// assignClusters assigns trace requests to clusters by a hash of their
// session, in proportion to the shares, so a conversation stays in one
// cluster; a request of a Switchyard trace whose cluster is one of the
// scenario's keeps it.
func (s *Scenario) assignClusters(reqs []workload.Request, shares []float64) {
	cum := make([]float64, len(shares))
	acc := 0.0
	for i, v := range shares {
		acc += v
		cum[i] = acc
	}
	known := map[string]bool{}
	for _, c := range s.Clusters {
		known[c.ID] = true
	}
	for i := range reqs {
		if known[reqs[i].Cluster] {
			continue // a Switchyard trace's cluster
		}
		u := float64(hash64(reqs[i].Session)>>11) / (1 << 53) * acc
		k, _ := slices.BinarySearch(cum, u)
		reqs[i].Cluster = s.Clusters[min(k, len(cum)-1)].ID
	}
}

func (s *Scenario) shares() []float64 {
	out := make([]float64, len(s.Clusters))
	sum := 0.0
	for i, c := range s.Clusters {
		out[i] = c.Share
		sum += c.Share
	}
	for i := range out {
		if sum > 0 {
			out[i] /= sum
		} else {
			out[i] = 1 / float64(len(out))
		}
	}
	return out
}

// generate runs the built-in generator for one cluster over [from,
// until), with session ids and conversation blocks unique to stream.
func (s *Scenario) generate(cluster string, stream int, rate float64, from, until time.Duration, seed uint64) []workload.Request {
	w := s.Workload
	g := workload.Generator{
		RatePerSecond: rate, Clusters: []string{cluster},
		Sessions: w.Sessions, SystemPrompts: w.SystemPrompts, SystemTokens: w.SystemTokens,
		TurnTokens: w.TurnTokens, OutputTokens: w.OutputTokens, MaxTurns: w.MaxTurns,
		BlockTokens: generatorBlockTokens, Seed: seed*1_000_003 + uint64(stream),
	}
	reqs := g.Generate(until - from)
	prefix := strconv.Itoa(stream) + "/"
	for i := range reqs {
		reqs[i].Arrival += from
		reqs[i].Session = prefix + reqs[i].Session
		for b, id := range reqs[i].Blocks {
			if id >= 1<<20 { // conversation blocks: unique per stream
				reqs[i].Blocks[b] = id + uint64(stream)<<40
			}
		}
	}
	return reqs
}

// multiplier evaluates the rate profile at t (1 without a profile).
func (s *Scenario) multiplier(t, dur time.Duration) float64 {
	p := s.Workload.RateProfile
	if len(p) == 0 || dur <= 0 {
		return 1
	}
	x := float64(t) / float64(dur)
	if x <= p[0][0] {
		return p[0][1]
	}
	for i := 1; i < len(p); i++ {
		if x <= p[i][0] {
			a, b := p[i-1], p[i]
			return a[1] + (b[1]-a[1])*(x-a[0])/(b[0]-a[0])
		}
	}
	return p[len(p)-1][1]
}

func (s *Scenario) peakMultiplier() float64 {
	peak := 0.0
	for _, p := range s.Workload.RateProfile {
		peak = math.Max(peak, p[1])
	}
	if peak == 0 {
		return 1
	}
	return peak
}

func (s *Scenario) inEvent(ev Event, t time.Duration, cluster string) bool {
	from := time.Duration(ev.AtS * float64(time.Second))
	until := time.Duration(ev.UntilS * float64(time.Second))
	return t >= from && t < until && (ev.Cluster == "" || ev.Cluster == cluster)
}

func hash64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	h ^= h >> 29
	return h
}
