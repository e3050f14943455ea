package peers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Reasons a received report is dropped (the reason label of
// switchyard_gateway_peer_reports_dropped_total).
var (
	// ErrMalformed: the bytes are no GatewayLoad, or one without a
	// gateway id, or with an empty or over-long id.
	ErrMalformed = errors.New("malformed")
	// ErrOversized: more bytes or engines than the limits.
	ErrOversized = errors.New("oversized")
)

// Subject returns the subject a gateway of cluster publishes to:
// <prefix>.gateway.load.<cluster>, where characters a subject token
// cannot hold (., *, >, whitespace) become '_'.
func Subject(prefix, cluster string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + ".gateway.load." + token(cluster)
}

// Wildcard returns the subject every gateway subscribes to.
func Wildcard(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + ".gateway.load.>"
}

func token(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n', '\f', '\v':
			return '_'
		}
		return r
	}, s)
}

// report is one received report as decoded: the sender's id and the
// engines it lists. The byte slices alias the message (or its decoded
// copy) and are valid until the next decode.
type report struct {
	id      []byte
	engines []engineLoad
}

// engineLoad is one engine of a report.
type engineLoad struct {
	id                []byte
	prefill, inFlight int64
}

// decoder decodes reports into memory it reuses. Not safe for concurrent
// use; the zero value is ready.
type decoder struct {
	r report
}

// decode parses and checks one received report: at most maxBytes and
// maxEngines, a gateway id and engine ids of 1 to maxIDBytes bytes. It
// clamps each engine's queued prefill to [0, MaxPrefillTokens] and its
// in-flight count to [0, MaxInFlight]. The error wraps ErrMalformed or
// ErrOversized. A plainly encoded report (only the fields of GatewayLoad
// and EngineLoad, each with its wire type, and UTF-8 strings) is scanned
// without allocating; any other goes through proto.Unmarshal, so the
// outcome is always proto's (TestScanMatchesProto, FuzzDecode).
func (d *decoder) decode(b []byte, maxBytes, maxEngines int) (*report, error) {
	if len(b) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrOversized, len(b), maxBytes)
	}
	r := &d.r
	if !d.scan(b) {
		var m schemas.GatewayLoad
		if err := proto.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		r.id = []byte(m.GetGatewayId())
		r.engines = r.engines[:0]
		if len(m.GetCluster()) > maxIDBytes {
			r.id = nil // checked below as one
		}
		for _, e := range m.GetEngines() {
			r.engines = append(r.engines, engineLoad{id: []byte(e.GetEngineId()), prefill: e.GetQueuedPrefillTokens(), inFlight: e.GetInFlight()})
		}
	}
	if len(r.id) == 0 || len(r.id) > maxIDBytes {
		return nil, fmt.Errorf("%w: gateway id of %d bytes (or cluster over %d)", ErrMalformed, len(r.id), maxIDBytes)
	}
	if n := len(r.engines); n > maxEngines {
		return nil, fmt.Errorf("%w: %d engines, limit %d", ErrOversized, n, maxEngines)
	}
	for k := range r.engines {
		e := &r.engines[k]
		if len(e.id) == 0 || len(e.id) > maxIDBytes {
			return nil, fmt.Errorf("%w: engine id of %d bytes", ErrMalformed, len(e.id))
		}
		e.prefill = min(max(e.prefill, 0), MaxPrefillTokens)
		e.inFlight = min(max(e.inFlight, 0), MaxInFlight)
	}
	return r, nil
}

// GatewayLoad's and EngineLoad's field numbers.
const (
	fieldSchemaVersion = 1
	fieldGatewayID     = 2
	fieldCluster       = 3
	fieldSentAt        = 4
	fieldEngines       = 5

	fieldEngineID = 1
	fieldPrefill  = 2
	fieldInFlight = 3
)

// scan decodes b into d.r if it is plainly encoded; false sends the
// caller to proto.Unmarshal. A cluster over maxIDBytes leaves d.r.id nil.
func (d *decoder) scan(b []byte) bool {
	r := &d.r
	r.id, r.engines = nil, r.engines[:0]
	var cluster []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var v []byte
		switch {
		case (num == fieldSchemaVersion || num == fieldSentAt) && typ == protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
		case num == fieldGatewayID && typ == protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
			r.id = v
			if !utf8.Valid(v) {
				return false // every occurrence is checked, not just the last
			}
		case num == fieldCluster && typ == protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
			cluster = v
			if !utf8.Valid(v) {
				return false
			}
		case num == fieldEngines && typ == protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
			if n >= 0 {
				e, ok := scanEngine(v)
				if !ok {
					return false
				}
				r.engines = append(r.engines, e)
			}
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	if len(cluster) > maxIDBytes {
		r.id = nil
	}
	return true
}

func scanEngine(b []byte) (engineLoad, bool) {
	var e engineLoad
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, false
		}
		b = b[n:]
		var x uint64
		switch {
		case num == fieldEngineID && typ == protowire.BytesType:
			e.id, n = protowire.ConsumeBytes(b)
			if !utf8.Valid(e.id) {
				return e, false
			}
		case num == fieldPrefill && typ == protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
			e.prefill = int64(x)
		case num == fieldInFlight && typ == protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
			e.inFlight = int64(x)
		default:
			return e, false
		}
		if n < 0 {
			return e, false
		}
		b = b[n:]
	}
	return e, true
}

// encode appends the wire form of m to buf. When it exceeds maxBytes it
// keeps the engines with the most queued prefill (then in flight) that
// fit, and reports how many it left out.
func encode(buf []byte, m *schemas.GatewayLoad, maxBytes int) ([]byte, int, error) {
	opt := proto.MarshalOptions{Deterministic: true}
	if opt.Size(m) <= maxBytes {
		b, err := opt.MarshalAppend(buf, m)
		return b, 0, err
	}
	all := m.Engines
	slices.SortStableFunc(all, func(a, b *schemas.EngineLoad) int {
		if c := b.GetQueuedPrefillTokens() - a.GetQueuedPrefillTokens(); c != 0 {
			return sign(c)
		}
		return sign(b.GetInFlight() - a.GetInFlight())
	})
	// The largest n whose report fits.
	lo, hi := 0, len(all)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		m.Engines = all[:mid]
		if opt.Size(m) <= maxBytes {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	m.Engines = all[:lo]
	if opt.Size(m) > maxBytes {
		return buf, len(all), fmt.Errorf("report header of %d bytes exceeds %d", opt.Size(m), maxBytes)
	}
	b, err := opt.MarshalAppend(buf, m)
	return b, len(all) - lo, err
}

func sign(x int64) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
