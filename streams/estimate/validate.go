package estimate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Reason codes of rejected records; the dead-letter reason header is
// "<code>: <detail>".
const (
	ReasonUndecodable   = "undecodable"
	ReasonSchemaVersion = "unsupported_schema_version" // no longer produced: newer versions are read
	ReasonMissingField  = "missing_field"
	ReasonInvalidValue  = "invalid_value"
	ReasonFutureTime    = "future_event_time"
	ReasonInvalidTime   = "invalid_event_time"
)

// MaxFutureSkew is how far past its Kafka timestamp a record's event time
// may be before the record is rejected.
const MaxFutureSkew = 5 * time.Minute

// ErrInvalid is wrapped by every *Invalid.
var ErrInvalid = errors.New("invalid record")

// Invalid says why a record was rejected.
type Invalid struct {
	Code   string
	Detail string
}

func (e *Invalid) Error() string { return e.Code + ": " + e.Detail }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Invalid) Unwrap() error { return ErrInvalid }

func invalid(code, format string, args ...any) *Invalid {
	return &Invalid{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Reason is the dead-letter reason for err: its Invalid text, or
// "undecodable: ..." for any other error.
func Reason(err error) string {
	var in *Invalid
	if errors.As(err, &in) {
		return in.Error()
	}
	return ReasonUndecodable + ": " + err.Error()
}

// DecodeSignal decodes and validates an EngineSignal. recordTime is the
// Kafka record's timestamp (zero: no future check).
func DecodeSignal(b []byte, recordTime time.Time) (*schemas.EngineSignal, error) {
	var s schemas.EngineSignal
	if err := proto.Unmarshal(b, &s); err != nil {
		return nil, invalid(ReasonUndecodable, "%v", err)
	}
	if err := ValidateSignal(&s, recordTime); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodeRoutingEvent decodes and validates a RoutingEvent.
func DecodeRoutingEvent(b []byte, recordTime time.Time) (*schemas.RoutingEvent, error) {
	var ev schemas.RoutingEvent
	if err := proto.Unmarshal(b, &ev); err != nil {
		return nil, invalid(ReasonUndecodable, "%v", err)
	}
	if err := ValidateRoutingEvent(&ev, recordTime); err != nil {
		return nil, err
	}
	return &ev, nil
}

func checkVersion(v uint32) error {
	if v == 0 {
		return invalid(ReasonMissingField, "schema_version")
	}
	// A newer schema_version is read like ours: changes are additive and
	// unknown fields are ignored (schemas/switchyard.proto).
	return nil
}

func checkTime(ms int64, recordTime time.Time) error {
	if ms <= 0 {
		return invalid(ReasonInvalidTime, "event_time_unix_ms %d", ms)
	}
	if !recordTime.IsZero() && ms > recordTime.Add(MaxFutureSkew).UnixMilli() {
		return invalid(ReasonFutureTime, "event time %d ms is %v past the record timestamp", ms,
			time.Duration(ms-recordTime.UnixMilli())*time.Millisecond)
	}
	return nil
}

// plain reports whether checkNum without an upper bound accepts v: not
// NaN (which fails both comparisons), not ±Inf, not negative.
func plain(v float64) bool { return v >= 0 && v <= math.MaxFloat64 }

// checkNum rejects NaN, ±Inf, negatives and values above max (max <= 0:
// no upper bound).
func checkNum(name string, v, max float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (max > 0 && v > max) {
		return invalid(ReasonInvalidValue, "%s=%v", name, v)
	}
	return nil
}

func checkHist(name string, h *schemas.Histogram) error {
	if h == nil {
		return nil
	}
	if len(h.Counts) != len(h.Bounds)+1 && !(len(h.Counts) == 0 && len(h.Bounds) == 0) {
		return invalid(ReasonInvalidValue, "%s has %d counts for %d bounds", name, len(h.Counts), len(h.Bounds))
	}
	for i, b := range h.Bounds {
		if math.IsNaN(b) || math.IsInf(b, 0) || b < 0 || (i > 0 && b <= h.Bounds[i-1]) {
			return invalid(ReasonInvalidValue, "%s bound %d=%v", name, i, b)
		}
	}
	if v := h.Sum; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 { // name built only on error
		return checkNum(name+".sum", v, 0)
	}
	return nil
}

// ValidateSignal checks s: schema version, engine id, event time, and
// that every number is finite and non-negative (KV usage at most 1).
func ValidateSignal(s *schemas.EngineSignal, recordTime time.Time) error {
	if err := checkVersion(s.GetSchemaVersion()); err != nil {
		return err
	}
	if s.GetEngineId() == "" {
		return invalid(ReasonMissingField, "engine_id")
	}
	if !validEngineID(s.GetEngineId()) {
		return invalid(ReasonInvalidValue, "engine_id %q: want printable ASCII of at most %d bytes", s.GetEngineId(), maxEngineIDBytes)
	}
	if u := s.GetEndpointUrl(); u != "" && !validEndpoint(u) {
		// Not echoed: it may carry credentials.
		return invalid(ReasonInvalidValue, "endpoint_url: want http(s)://host[:port][/path] without user info, query or fragment")
	}
	if err := checkTime(s.GetEventTimeUnixMs(), recordTime); err != nil {
		return err
	}
	if err := checkModels(s); err != nil {
		return err
	}
	if plain(s.GetRunningRequests()) && plain(s.GetWaitingRequests()) && plain(s.GetKvCacheUsage()) && s.GetKvCacheUsage() <= 1 &&
		plain(s.GetPrefixCacheHits()) && plain(s.GetPrefixCacheQueries()) && plain(s.GetIntervalSeconds()) &&
		plain(s.GetRequestsFinished()) && plain(s.GetPromptTokens()) && plain(s.GetGenerationTokens()) &&
		plain(s.GetKvCapacityTokens()) {
		return validHists(s)
	}
	for _, f := range []struct {
		name   string
		v, max float64
	}{
		{"running_requests", s.GetRunningRequests(), 0},
		{"waiting_requests", s.GetWaitingRequests(), 0},
		{"kv_cache_usage", s.GetKvCacheUsage(), 1},
		{"prefix_cache_hits", s.GetPrefixCacheHits(), 0},
		{"prefix_cache_queries", s.GetPrefixCacheQueries(), 0},
		{"interval_seconds", s.GetIntervalSeconds(), 0},
		{"requests_finished", s.GetRequestsFinished(), 0},
		{"prompt_tokens", s.GetPromptTokens(), 0},
		{"generation_tokens", s.GetGenerationTokens(), 0},
		{"kv_capacity_tokens", s.GetKvCapacityTokens(), 0},
	} {
		if err := checkNum(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return validHists(s)
}

// checkModels bounds s's models and active_adapters (count, id length,
// no empty id) and max_lora.
func checkModels(s *schemas.EngineSignal) error {
	for _, l := range []struct {
		name string
		ids  []string
	}{{"models", s.GetModels()}, {"active_adapters", s.GetActiveAdapters()}} {
		if len(l.ids) > schemas.MaxSignalModels {
			return invalid(ReasonInvalidValue, "%s: %d ids, at most %d", l.name, len(l.ids), schemas.MaxSignalModels)
		}
		for _, id := range l.ids {
			if id == "" || len(id) > schemas.MaxModelIDBytes {
				return invalid(ReasonInvalidValue, "%s: an id of %d bytes, want 1-%d", l.name, len(id), schemas.MaxModelIDBytes)
			}
		}
	}
	if s.GetMaxLora() > schemas.MaxSignalMaxLoRA {
		return invalid(ReasonInvalidValue, "max_lora %d: at most %d", s.GetMaxLora(), schemas.MaxSignalMaxLoRA)
	}
	return nil
}

func validHists(s *schemas.EngineSignal) error {
	if err := checkHist("ttft_seconds", s.GetTtftSeconds()); err != nil {
		return err
	}
	return checkHist("tbot_seconds", s.GetTbotSeconds())
}

// ValidateRoutingEvent checks ev: schema version, cluster, event time and
// finite non-negative latencies (network_rtt_ms included).
func ValidateRoutingEvent(ev *schemas.RoutingEvent, recordTime time.Time) error {
	if err := checkVersion(ev.GetSchemaVersion()); err != nil {
		return err
	}
	if ev.GetCluster() == "" {
		return invalid(ReasonMissingField, "cluster")
	}
	if err := checkTime(ev.GetEventTimeUnixMs(), recordTime); err != nil {
		return err
	}
	if plain(ev.GetTtftMs()) && plain(ev.GetMeanTbotMs()) && plain(ev.GetE2EMs()) && plain(ev.GetEngineTtftMs()) && plain(ev.GetNetworkRttMs()) {
		return nil // the common case; the loop below names the bad value
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"ttft_ms", ev.GetTtftMs()},
		{"mean_tbot_ms", ev.GetMeanTbotMs()},
		{"e2e_ms", ev.GetE2EMs()},
		{"engine_ttft_ms", ev.GetEngineTtftMs()},
		{"network_rtt_ms", ev.GetNetworkRttMs()},
	} {
		if err := checkNum(f.name, f.v, 0); err != nil {
			return err
		}
	}
	return nil
}

// DecodeEstimate decodes and validates an Estimate envelope from the
// estimates topic: a known kind, a supported schema version, an entity id,
// and finite non-negative numbers (profiles included).
func DecodeEstimate(b []byte) (*schemas.Estimate, error) {
	var e schemas.Estimate
	if err := proto.Unmarshal(b, &e); err != nil {
		return nil, invalid(ReasonUndecodable, "%v", err)
	}
	if err := ValidateEstimate(&e); err != nil {
		return nil, err
	}
	return &e, nil
}

// ValidateEstimate checks an Estimate envelope (see DecodeEstimate).
func ValidateEstimate(e *schemas.Estimate) error {
	switch k := e.GetKind().(type) {
	case *schemas.Estimate_Engine:
		en := k.Engine
		if err := checkVersion(en.GetSchemaVersion()); err != nil {
			return err
		}
		if en.GetEngineId() == "" {
			return invalid(ReasonMissingField, "engine_id")
		}
		for _, f := range []struct {
			name string
			v    float64
		}{
			{"capacity_rps", en.GetCapacityRps()}, {"capacity_tokens_per_s", en.GetCapacityTokensPerS()},
			{"kv_cache_usage", en.GetKvCacheUsage()}, {"prefix_hit_rate", en.GetPrefixHitRate()},
			{"observed_rps", en.GetObservedRps()}, {"utilization", en.GetUtilization()},
			{"kv_capacity_tokens", en.GetKvCapacityTokens()}, {"cache_residency_s", en.GetCacheResidencyS()},
			{"work_per_request_s", en.GetWorkPerRequestS()},
		} {
			if err := checkNum(f.name, f.v, 0); err != nil {
				return err
			}
		}
		if err := checkProfile("ttft_profile", en.GetTtftProfile()); err != nil {
			return err
		}
		return checkProfile("tbot_profile", en.GetTbotProfile())
	case *schemas.Estimate_Demand:
		d := k.Demand
		if err := checkVersion(d.GetSchemaVersion()); err != nil {
			return err
		}
		if d.GetCluster() == "" {
			return invalid(ReasonMissingField, "cluster")
		}
		for _, f := range []struct {
			name string
			v    float64
		}{
			{"demand_rps", d.GetDemandRps()}, {"forecast_rps", d.GetForecastRps()},
			{"mean_prompt_tokens", d.GetMeanPromptTokens()}, {"mean_output_tokens", d.GetMeanOutputTokens()},
		} {
			if err := checkNum(f.name, f.v, 0); err != nil {
				return err
			}
		}
		return nil
	case *schemas.Estimate_Network:
		n := k.Network
		if err := checkVersion(n.GetSchemaVersion()); err != nil {
			return err
		}
		if n.GetCluster() == "" || n.GetEngineId() == "" {
			return invalid(ReasonMissingField, "cluster or engine_id")
		}
		return checkNum("rtt_ms", n.GetRttMs(), 0)
	}
	return invalid(ReasonMissingField, "estimate kind")
}

func checkProfile(name string, p *schemas.LatencyProfile) error {
	if p == nil {
		return nil
	}
	if err := checkNum(name+".fit_rmse_ms", p.GetFitRmseMs(), 0); err != nil {
		return err
	}
	for i, pt := range p.GetPoints() {
		if err := checkNum(fmt.Sprintf("%s.points[%d].utilization", name, i), pt.GetUtilization(), 0); err != nil {
			return err
		}
		if err := checkNum(fmt.Sprintf("%s.points[%d].latency_ms", name, i), pt.GetLatencyMs(), 0); err != nil {
			return err
		}
	}
	return nil
}

// maxEngineIDBytes bounds an engine id (it becomes a response header
// value and a metric label).
const maxEngineIDBytes = 256

// validEngineID: printable ASCII (no control characters, so never a
// header line break), at most maxEngineIDBytes.
func validEngineID(id string) bool {
	if len(id) > maxEngineIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// validEndpoint accepts http(s)://host[:port][/path] with a DNS name or
// IPv4 host, or a bracketed IPv6 one, and a path of unreserved characters:
// a subset of what the gateways' snapshot check (url.Parse, absolute
// http(s), no user info, query or fragment) accepts, so one engine's bad
// endpoint cannot make every snapshot invalid. It allocates nothing.
func validEndpoint(u string) bool {
	rest, ok := strings.CutPrefix(u, "http://")
	if !ok {
		if rest, ok = strings.CutPrefix(u, "https://"); !ok {
			return false
		}
	}
	if len(u) > 2048 {
		return false
	}
	host, path, _ := strings.Cut(rest, "/")
	port := ""
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 2 || !allBytes(host[1:end], ipv6Byte) {
			return false
		}
		if after := host[end+1:]; after != "" {
			if port, ok = strings.CutPrefix(after, ":"); !ok {
				return false
			}
		}
	} else {
		var name string
		name, port, _ = strings.Cut(host, ":")
		if name == "" || !allBytes(name, func(c byte) bool { return alnum(c) || c == '.' || c == '-' || c == '_' }) {
			return false
		}
	}
	return len(port) <= 5 && allBytes(port, digit) &&
		allBytes(path, func(c byte) bool { return alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/' })
}

func digit(c byte) bool { return c >= '0' && c <= '9' }

func alnum(c byte) bool { return digit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z') }

func ipv6Byte(c byte) bool {
	return digit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') || c == ':' || c == '.'
}

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}
