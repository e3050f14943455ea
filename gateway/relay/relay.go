// Package relay copies an engine's server-sent event stream to the
// client as it arrives and accounts for it on the way (TTFT, TBOT, token
// usage, the end at data: [DONE], or at a Responses API stream's last
// event) without changing a byte, except the usage-only event when asked
// to strip it (Stream.StripUsage).
package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/internal/httpwire"
)

// Causes of an upstream request's cancellation (context.Cause).
var (
	// ErrFirstToken: no first byte of the response body in time.
	ErrFirstToken = errors.New("first token timeout")
	// ErrIdle: too long a gap between events.
	ErrIdle = errors.New("idle timeout between events")
	// ErrDrain: the gateway's drain timed out with the stream running.
	ErrDrain = errors.New("gateway drain timeout")
)

const (
	// BufSize is the read buffer of a relayed stream: room for every
	// event that arrives in one read.
	BufSize = 32 << 10
	// MaxResponseBytes bounds what is held of a response before it is
	// committed to the client.
	MaxResponseBytes = 64 << 20
	maxUsageLine     = 64 << 10
	// maxLastEvent bounds what is held of a Responses stream's last
	// event, which repeats the whole output before its usage.
	maxLastEvent = 8 << 20
)

// Constant header values, shared by every response (net/http does not
// modify header values).
var (
	noCache = []string{"no-cache"}
	accelNo = []string{"no"}
)

// FailReason is the failure label of an upstream request canceled with
// ctx: first_token_timeout, idle_timeout, or def.
func FailReason(ctx context.Context, def string) string {
	switch context.Cause(ctx) {
	case ErrFirstToken:
		return "first_token_timeout"
	case ErrIdle:
		return "idle_timeout"
	case ErrDrain:
		return "drain_timeout"
	}
	return def
}

// CauseOr returns the timeout that canceled ctx, if any, else err.
func CauseOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c == ErrFirstToken || c == ErrIdle || c == ErrDrain {
		return c
	}
	return err
}

// Result is what relaying one stream did.
type Result struct {
	Committed  bool   // bytes reached the client: no retry possible
	Complete   bool   // the whole stream (up to data: [DONE]) was relayed
	Drain      bool   // complete with the engine's response still open: drain it
	FailReason string // "" unless the engine failed
	Err        error
	// TTFT is the time from Stream.Start to the first event that carries
	// output (content, text, reasoning or tool calls; in a Responses
	// stream a non-empty delta; 0: none), TBOT the mean time between
	// one choice's output events (Stream.Choices).
	TTFT, TBOT time.Duration
	// FirstToken reports an output event.
	FirstToken bool
	Usage      Usage
}

// Stream is one event stream to relay.
type Stream struct {
	// Now is the clock; Start is the request's arrival, which TTFT is
	// measured from.
	Now   func() time.Time
	Start time.Time
	// Status is the engine's status, sent at the commit.
	Status int
	// IdleTimeout bounds the gap between events once committed; then
	// Cancel(ErrIdle) cancels the upstream request (ctx of Relay).
	IdleTimeout time.Duration
	Cancel      context.CancelCauseFunc
	// FirstToken is stopped at the commit.
	FirstToken *time.Timer
	// Buf is the read buffer, BufSize bytes.
	Buf []byte
	// StripUsage removes usage-only events (a data line with "choices":[]
	// and a usage object) from what the client gets: the whole event when
	// it started in the same read, else its data line and what follows up
	// to the blank line that ends it (the earlier lines, already relayed,
	// then end as an event without data, which clients ignore). The usage
	// is still accounted. A usage line longer than Buf is relayed.
	StripUsage bool
	// Responses: the stream is the Responses API's (POST /v1/responses):
	// typed events whose output arrives as deltas (any event whose data
	// has a non-empty "delta" string: output text, reasoning, function
	// call arguments), that ends at its last event (response.completed,
	// response.incomplete or response.failed, by the data's type or, for
	// data without one, its event: line) rather than data: [DONE], and
	// whose usage is in that event's response. StripUsage does not apply.
	Responses bool
	// Choices is how many choices the stream interleaves (the request's
	// n; 0 reads as 1). Their output events alternate, so the time
	// between one choice's tokens (TBOT) is the span of the output
	// events over their count per choice less one.
	Choices int
}

// Relay relays body, the engine's event stream, to w as it arrives:
// whatever one read returns is written at once and flushed if an event
// ended in it, so events that arrived together leave together and none
// waits. Nothing reaches the client before the first whole event, so a
// failure before it can be retried. At data: [DONE] the response is
// complete: the caller drains the rest in the background (Result.Drain)
// and returns, so the end of the response leaves with the last events.
// At the commit, setHeader sets the response headers before the head is
// written. firstToken, if not nil, is called from Relay's goroutine when
// the first output event arrives, with its TTFT (see Result.TTFT). (They
// are arguments rather than fields so that they stay on the caller's
// stack: a field would leak with Buf and Cancel.)
func (st *Stream) Relay(ctx context.Context, w http.ResponseWriter, body io.Reader, setHeader func(http.Header), firstToken func(ttft time.Duration)) (res Result) {
	buf, cancel := st.Buf, st.Cancel // cancel, not st, goes into the idle timer's closure
	flusher, _ := w.(http.Flusher)
	sc := scan{now: st.Now, start: st.Start, lineStart: true, evStart: -1, atEvent: true, strip: st.StripUsage && !st.Responses, responses: st.Responses}
	var (
		pending []byte // relayed bytes held before the commit
		idle    *time.Timer
		end     int // buf[:end] holds data
	)
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	for {
		n, err := body.Read(buf[end:])
		end += n
		var scanned int
		scanned, end = sc.lines(buf, end, err != nil, &res)
		if sc.firstNow {
			sc.firstNow = false
			if firstToken != nil {
				firstToken(res.TTFT)
			}
		}
		if !res.Committed && (sc.eventEnded || len(pending)+scanned > MaxResponseBytes) {
			if !sc.eventEnded {
				res.FailReason, res.Err = "stream", errors.New("first event too large")
				return res
			}
			st.commit(w, setHeader)
			res.Committed = true
			if len(pending) > 0 {
				if _, werr := w.Write(pending); werr != nil {
					res.Err = werr // client gone; ctx is canceled too
					return res
				}
				pending = nil
			}
			idle = time.AfterFunc(st.IdleTimeout, func() { cancel(ErrIdle) })
		} else if sc.eventEnded && idle != nil {
			idle.Reset(st.IdleTimeout)
		}
		if res.Committed {
			if scanned > 0 {
				if _, werr := w.Write(buf[:scanned]); werr != nil {
					res.Err = werr // client gone; ctx is canceled too
					return res
				}
			}
		} else {
			pending = append(pending, buf[:scanned]...)
		}
		end = copy(buf, buf[scanned:end])
		if sc.sawDone && res.Committed && (sc.doneEnded || err != nil) {
			// Complete: the handler's return ends the response together
			// with the last events; the engine's own end is drained.
			res.Complete = true
			res.Drain = err == nil
			break
		}
		if err != nil {
			st.fail(ctx, w, err, &res)
			if res.Committed && flusher != nil {
				flusher.Flush()
			}
			break
		}
		if sc.eventEnded && res.Committed && flusher != nil {
			flusher.Flush()
		}
		sc.eventEnded = false
	}
	if !sc.sawUsage {
		res.Usage.OutputTokens = uint32(sc.contentN)
	}
	res.FirstToken = sc.contentN > 0
	if k := max(st.Choices, 1); sc.contentN > k && sc.lastData.After(sc.firstData) {
		res.TBOT = sc.lastData.Sub(sc.firstData) * time.Duration(k) / time.Duration(sc.contentN-k)
	}
	return res
}

// commit sends the head: the engine's status and the stream's headers.
func (st *Stream) commit(w http.ResponseWriter, setHeader func(http.Header)) {
	st.FirstToken.Stop()
	h := w.Header()
	setHeader(h)
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = accelNo
	w.WriteHeader(st.Status)
}

// fail records the end of a stream by err before data: [DONE] and, once
// committed (or at an idle timeout), tells an OpenAI client why the
// stream ends early.
func (st *Stream) fail(ctx context.Context, w http.ResponseWriter, err error, res *Result) {
	if err == io.EOF {
		if !res.Committed {
			res.FailReason, res.Err = "stream", errors.New("stream ended before its first event")
		}
		return
	}
	res.FailReason, res.Err = FailReason(ctx, "stream"), CauseOr(ctx, err)
	cause := context.Cause(ctx)
	if (res.Committed && (ctx.Err() == nil || cause == ErrDrain)) || cause == ErrIdle {
		// The message names what happened, never the transport's error,
		// which names the engine's address (res.Err, for the log).
		ev := brokenEvent
		switch res.FailReason {
		case "idle_timeout":
			ev = idleEvent
		case "drain_timeout":
			ev = drainEvent
		}
		_, _ = w.Write(ev)
	}
}

// The error events that end a stream the engine did not finish, as an
// OpenAI client reads them (the SDKs raise an APIError).
var (
	brokenEvent = []byte(`data: {"error":{"message":"engine stream failed: the engine's stream broke off before its end","type":"server_error","param":null,"code":"upstream_error"}}` + "\n\n")
	idleEvent   = []byte(`data: {"error":{"message":"engine stream failed: the engine sent nothing within the idle timeout","type":"server_error","param":null,"code":"upstream_error"}}` + "\n\n")
	// drainEvent ends a stream still running at the gateway's drain
	// timeout (the gateway shuts down); retrying reaches another gateway.
	drainEvent = []byte(`data: {"error":{"message":"gateway shutting down: the stream outlived the drain timeout; retry the request","type":"server_error","param":null,"code":"gateway_shutdown"}}` + "\n\n")
)

var (
	dataPrefix  = []byte("data:")
	donePayload = []byte("[DONE]")
	// The keys are searched without their opening quote: bytes.Index
	// skips ahead with IndexByte on the first byte, and '"' is in every
	// few bytes of JSON.
	quotedChoicesKey = []byte(`"choices":[`)
	usageKey         = []byte(`usage":{`)
)

// hasKey reports whether payload holds "key (key starts after the quote).
func hasKey(payload, key []byte) (int, bool) {
	for off := 0; ; {
		i := bytes.Index(payload[off:], key)
		if i < 0 {
			return -1, false
		}
		i += off
		if i > 0 && payload[i-1] == '"' {
			return i + len(key), true
		}
		off = i + 1
	}
}

// contentEvent reports whether a data payload carries content: anything
// but a chunk with "choices":[] (a usage-only chunk). It looks for the
// '[' (rare in a chunk) and checks the key before it.
func contentEvent(payload []byte) bool {
	for off := 0; ; {
		i := bytes.IndexByte(payload[off:], '[')
		if i < 0 {
			return true
		}
		i += off
		if bytes.HasSuffix(payload[:i+1], quotedChoicesKey) {
			return i+1 >= len(payload) || payload[i+1] != ']'
		}
		off = i + 1
	}
}

// Keys whose non-empty value is output (searched without their opening
// quote, as hasKey does): in chat and completions chunks, and in the
// Responses API's delta events.
var (
	outputKeys = [...][]byte{[]byte(`content"`), []byte(`text"`), []byte(`reasoning_content"`), []byte(`tool_calls"`)}
	deltaKeys  = [...][]byte{[]byte(`delta"`)}
)

// outputEvent reports whether a data payload carries output: a
// non-empty string or array as the value of "content", "text",
// "reasoning_content" or "tool_calls". A role-only or finish-only chunk
// ("content":"" or null, or no such key) and a usage-only chunk do not.
func outputEvent(payload []byte) bool { return hasOutput(payload, outputKeys[:]) }

// deltaEvent reports whether the data payload of a Responses stream
// event carries output: a non-empty "delta" string (or array).
func deltaEvent(payload []byte) bool { return hasOutput(payload, deltaKeys[:]) }

// hasOutput reports whether payload has one of keys with a non-empty
// string or array value.
func hasOutput(payload []byte, keys [][]byte) bool {
	for _, k := range keys {
		for off := 0; off < len(payload); {
			j, ok := hasKey(payload[off:], k)
			if !ok {
				break
			}
			j += off
			off = j
			v := skipWS(payload, j)
			if v >= len(payload) || payload[v] != ':' {
				continue
			}
			v = skipWS(payload, v+1)
			if v+1 >= len(payload) {
				continue
			}
			switch payload[v] {
			case '"':
				if payload[v+1] != '"' {
					return true
				}
			case '[':
				if w := skipWS(payload, v+1); w < len(payload) && payload[w] != ']' {
					return true
				}
			}
		}
	}
	return false
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// What line tells lines to do with the line it scanned.
const (
	keepLine  = iota
	dropLine  // remove the line
	dropEvent // remove the event up to and including the line
)

// scan follows an event stream line by line for accounting (TTFT, TBOT,
// usage, [DONE]); the bytes are relayed unchanged but for usage-only
// events when strip is set.
type scan struct {
	now        func() time.Time
	start      time.Time
	batchNow   time.Time // the clock read once per read: events that arrived together share it
	lineStart  bool
	inUsage    bool
	usageLine  []byte
	eventEnded bool // an event ended since the last flush
	sawDone    bool // a data: [DONE] line
	doneEnded  bool // and the end of its event
	sawUsage   bool
	firstData  time.Time
	lastData   time.Time
	contentN   int
	firstNow   bool // the first output event was in the last lines call

	responses bool // a Responses API stream (Stream.Responses)
	named     bool // and the current event's event: line names a last event

	strip     bool
	atEvent   bool // the next line starts an event
	evStart   int  // offset in the buffer of the current event's first line; -1: an earlier read
	dropping  bool // removing the rest of a usage-only event
	keepBlank bool // and keep the blank line that ends it
}

// output counts an output event, at the time of the read it arrived in.
func (s *scan) output(res *Result) {
	if s.batchNow.IsZero() {
		s.batchNow = s.now()
	}
	if s.contentN == 0 {
		s.firstData = s.batchNow
		res.TTFT = s.batchNow.Sub(s.start)
		s.firstNow = true
	}
	s.contentN++
	s.lastData = s.batchNow
}

var (
	eventPrefix    = []byte("event:")
	quotedResponse = []byte(`"response.`)
	lastEventNames = [...][]byte{[]byte(`completed"`), []byte(`incomplete"`), []byte(`failed"`)}
)

// namesLastEvent reports whether a Responses event's data (or its
// beginning) holds a last event's type as a JSON string
// ("response.completed", "response.incomplete" or "response.failed"),
// which no string inside a JSON value can hold unescaped.
func namesLastEvent(payload []byte) bool {
	for off := 0; ; {
		i := bytes.Index(payload[off:], quotedResponse)
		if i < 0 {
			return false
		}
		i += off + len(quotedResponse)
		for _, name := range lastEventNames {
			if bytes.HasPrefix(payload[i:], name) {
				return true
			}
		}
		off = i
	}
}

// lines scans the complete lines of buf[:end] (and, when a line is longer
// than the buffer or the stream ended, the rest) and returns how many
// bytes it scanned and the end of the data, less what it removed.
func (s *scan) lines(buf []byte, end int, last bool, res *Result) (int, int) {
	s.batchNow = time.Time{}
	s.evStart = -1
	n := 0
	for {
		i := bytes.IndexByte(buf[n:end], '\n')
		if i < 0 {
			break
		}
		if s.atEvent {
			s.evStart = n
		}
		ln := n + i + 1
		from := n
		switch s.line(buf[n:ln], true, res) {
		case keepLine:
			n = ln
			continue
		case dropEvent:
			if s.evStart >= 0 {
				from = s.evStart
			}
		}
		copy(buf[from:], buf[ln:end])
		end -= ln - from
		n = from
	}
	if (n == 0 && end == len(buf)) || (last && n < end) {
		// A line longer than the buffer, or the stream's last bytes.
		if s.atEvent {
			s.evStart = n
		}
		s.line(buf[n:end], false, res)
		n = end
	}
	return n, end
}

// line scans one line (complete: it ends with '\n') or part of a line
// longer than the read buffer, and says whether to remove it.
func (s *scan) line(chunk []byte, complete bool, res *Result) (act int) {
	if s.lineStart {
		s.inUsage = false
		line := httpwire.TrimEOL(chunk)
		blank := len(line) == 0 && complete
		s.atEvent = blank
		if s.dropping {
			switch {
			case !complete:
				s.dropping = false // a line longer than the buffer: relayed
			case blank:
				s.dropping = false
				if !s.keepBlank {
					act = dropLine
				}
			default:
				act = dropLine
			}
		}
		switch {
		case blank:
			s.eventEnded = true
			s.doneEnded = s.sawDone
			s.named = false
		case s.responses && bytes.HasPrefix(line, eventPrefix):
			s.named = lastEvent(bytes.TrimSpace(line[len(eventPrefix):]))
		case s.responses && bytes.HasPrefix(line, dataPrefix):
			payload := bytes.TrimSpace(line[len(dataPrefix):])
			if bytes.Equal(payload, donePayload) {
				s.sawDone = true
				break
			}
			if deltaEvent(payload) {
				s.output(res)
			}
			if s.named || namesLastEvent(payload) {
				s.inUsage = true
				s.usageLine = append(s.usageLine[:0], payload...)
			}
		case bytes.HasPrefix(line, dataPrefix):
			payload := bytes.TrimSpace(line[len(dataPrefix):])
			if bytes.Equal(payload, donePayload) {
				s.sawDone = true
				break
			}
			if fr := finishReason(payload); fr != "" {
				res.Usage.FinishReason = fr
			}
			content := contentEvent(payload)
			if content && outputEvent(payload) {
				s.output(res)
			}
			if _, ok := hasKey(payload, usageKey); ok {
				s.inUsage = true
				s.usageLine = append(s.usageLine[:0], payload...)
				if s.strip && !content && complete && act == keepLine {
					s.dropping, s.keepBlank = true, s.evStart < 0
					act = dropEvent
					if s.keepBlank {
						act = dropLine
					}
				}
			}
		}
	} else if s.inUsage && (len(s.usageLine) < maxUsageLine || (s.responses && len(s.usageLine) < maxLastEvent)) {
		s.usageLine = append(s.usageLine, httpwire.TrimEOL(chunk)...)
	}
	if s.inUsage && complete {
		if s.responses {
			last, found := res.Usage.setResponseEvent(s.usageLine, s.named)
			s.sawDone = s.sawDone || last
			s.sawUsage = s.sawUsage || found
		} else if res.Usage.Set(s.usageLine) {
			s.sawUsage = true
		}
		s.inUsage = false
	}
	s.lineStart = complete
	return act
}
