package peers

import (
	"errors"
	"fmt"
	"slices"
	"strings"

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

// decode parses and checks one received report: at most maxBytes and
// maxEngines, a gateway id and engine ids of 1 to maxIDBytes bytes. It
// clamps each engine's queued prefill to [0, MaxPrefillTokens] and its
// in-flight count to [0, MaxInFlight]. The error wraps ErrMalformed or
// ErrOversized.
func decode(b []byte, maxBytes, maxEngines int) (*schemas.GatewayLoad, error) {
	if len(b) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrOversized, len(b), maxBytes)
	}
	var m schemas.GatewayLoad
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if id := m.GetGatewayId(); id == "" || len(id) > maxIDBytes {
		return nil, fmt.Errorf("%w: gateway id of %d bytes", ErrMalformed, len(id))
	}
	if len(m.GetCluster()) > maxIDBytes {
		return nil, fmt.Errorf("%w: cluster of %d bytes", ErrMalformed, len(m.GetCluster()))
	}
	if n := len(m.GetEngines()); n > maxEngines {
		return nil, fmt.Errorf("%w: %d engines, limit %d", ErrOversized, n, maxEngines)
	}
	for _, e := range m.GetEngines() {
		if e == nil || e.GetEngineId() == "" || len(e.GetEngineId()) > maxIDBytes {
			return nil, fmt.Errorf("%w: engine id of %d bytes", ErrMalformed, len(e.GetEngineId()))
		}
		e.QueuedPrefillTokens = min(max(e.GetQueuedPrefillTokens(), 0), MaxPrefillTokens)
		e.InFlight = min(max(e.GetInFlight(), 0), MaxInFlight)
	}
	return &m, nil
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
