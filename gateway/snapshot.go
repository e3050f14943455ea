package gateway

import (
	"cmp"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots/trust"
)

// Snapshot validation errors; Reason maps them to metric labels.
var (
	ErrSnapshotDecode  = errors.New("snapshot does not decode")
	ErrSnapshotSchema  = errors.New("snapshot schema version not understood") // no longer returned: newer versions are read
	ErrSnapshotInvalid = errors.New("snapshot invalid")
	ErrSnapshotCluster = errors.New("snapshot has no weights for this cluster")
	ErrSnapshotStale   = errors.New("snapshot version older than the one held")
	// errSnapshotRepeated: the version held, with the same weights for
	// the cluster; applying it is a no-op, not a rejection.
	errSnapshotRepeated = errors.New("snapshot repeats the one held")
	// ErrSnapshotUnsigned: keys are configured and the snapshot carries
	// no signature.
	ErrSnapshotUnsigned = errors.New("snapshot not signed")
	// ErrSnapshotSignature: keys are configured and the signature does
	// not verify against any of them.
	ErrSnapshotSignature = errors.New("snapshot signature invalid")
	// ErrSnapshotFuture: the version or creation time is beyond the
	// gateway's clock plus the maximum skew.
	ErrSnapshotFuture = errors.New("snapshot dated in the future")
	// ErrSnapshotUnregistered: a registry is configured and the snapshot
	// names an engine it does not hold, or one at another endpoint.
	ErrSnapshotUnregistered = errors.New("snapshot names an engine outside the registry")
)

// snapshotTrust is what the gateway checks of the snapshots it receives,
// and where it keeps the last one (cfg.snap).
type snapshotTrust struct {
	verifier *trust.Verifier // nil: signatures not checked
	maxSkew  time.Duration
	cache    string
	maxAge   time.Duration
	oldWarn  time.Time // the last too-old warning; zero while fresh (control's)
}

// DefaultSnapshotMaxAge is SnapshotMaxAge's default: six of the
// optimizer's 30 s windows.
const DefaultSnapshotMaxAge = 3 * time.Minute

// SnapshotMaxAge is the age (since its creation) past which the snapshot
// the gateway routes on is called too old: it still routes on it (static
// stability), but warns (a WARN log when it becomes too old and every
// minute after, and switchyard_gateway_snapshot_too_old = 1), since the
// optimizer is down or the newest snapshot the gateway can see is an old
// one. Default DefaultSnapshotMaxAge; <= 0 means the default.
func SnapshotMaxAge(d time.Duration) Opt { return opt(func(c *cfg) { c.snap.maxAge = d }) }

// snapshotTooOld reports whether the snapshot routed on is older than
// the maximum age.
func (g *Gateway) snapshotTooOld() bool {
	rt := g.cur.Load()
	if rt == nil || rt.fallback {
		return false
	}
	return g.cfg.now().Sub(rt.created) > cmp.Or(max(g.cfg.snap.maxAge, 0), DefaultSnapshotMaxAge)
}

// checkSnapshotAge warns when the snapshot routed on is too old: when it
// becomes so, then at most once a minute (control's tick).
func (g *Gateway) checkSnapshotAge() {
	if !g.snapshotTooOld() {
		g.cfg.snap.oldWarn = time.Time{}
		return
	}
	now := g.cfg.now()
	if last := g.cfg.snap.oldWarn; !last.IsZero() && now.Sub(last) < time.Minute {
		return
	}
	g.cfg.snap.oldWarn = now
	rt := g.cur.Load()
	g.log.Warn("routing on a snapshot older than --snapshot-max-age: the optimizer is not publishing, or the newest snapshot this gateway can see is old",
		"version", rt.version, "age", now.Sub(rt.created).Round(time.Second), "max_age", cmp.Or(max(g.cfg.snap.maxAge, 0), DefaultSnapshotMaxAge))
}

// SnapshotKeys makes the gateway apply only snapshots signed by one of
// keys (the optimizers' public keys), from its source or its cache;
// unsigned and badly signed ones are rejected (counted by reason
// "unsigned" or "signature", and logged). Default none: signatures are
// not checked.
func SnapshotKeys(keys ...ed25519.PublicKey) Opt {
	return opt(func(c *cfg) {
		c.snap.verifier = nil
		if len(keys) > 0 {
			c.snap.verifier = trust.NewVerifier(keys...)
		}
	})
}

// SnapshotMaxSkew is how far ahead of the gateway's clock a snapshot's
// version (its window end in Unix milliseconds) and creation time may be;
// a snapshot dated further ahead is rejected (reason "future"), so it
// cannot hold the gateway above every later version. Default
// trust.DefaultMaxSkew (1 minute); 0 means the default.
func SnapshotMaxSkew(d time.Duration) Opt { return opt(func(c *cfg) { c.snap.maxSkew = d }) }

// SnapshotCache keeps the last snapshot the gateway applied from its
// source in the file at path (replaced atomically), and applies the file
// at New when it exists, with the same checks as a snapshot from the
// source, so a gateway restarted while NATS is down routes on it. Default
// "": no cache.
func SnapshotCache(path string) Opt { return opt(func(c *cfg) { c.snap.cache = path }) }

// admitSnapshot checks the signature of b (when keys are configured),
// decodes it (its view for the gateway's cluster; prev is the entry
// applied last, see decodeView) and bounds its dates by the clock.
func (g *Gateway) admitSnapshot(b []byte, prev *clusterView) (snapView, error) {
	if v := g.cfg.snap.verifier; v != nil {
		switch err := v.Verify(b); {
		case err == nil:
		case errors.Is(err, trust.ErrUnsigned):
			return snapView{}, fmt.Errorf("%w: %w", ErrSnapshotUnsigned, err)
		case errors.Is(err, trust.ErrMalformed):
			return snapView{}, fmt.Errorf("%w: %w", ErrSnapshotDecode, err)
		default:
			return snapView{}, fmt.Errorf("%w: %w", ErrSnapshotSignature, err)
		}
	}
	snap, err := decodeView(b, g.cfg.cluster, prev) // decode.go
	if err != nil {
		return snapView{}, err
	}
	skew := g.cfg.snap.maxSkew
	if skew <= 0 {
		skew = trust.DefaultMaxSkew
	}
	dates := schemas.WeightSnapshot{Version: snap.version, CreatedUnixMs: snap.created}
	if err := trust.CheckTime(&dates, g.cfg.now(), skew); err != nil {
		return snapView{}, fmt.Errorf("%w: %w", ErrSnapshotFuture, err)
	}
	return snap, nil
}

// saveSnapshot writes b, an applied snapshot, to the cache file: a
// temporary file in the same directory renamed over it, so a crash never
// leaves half a snapshot.
func (g *Gateway) saveSnapshot(b []byte) {
	path := g.cfg.snap.cache
	if path == "" {
		return
	}
	if err := writeAtomic(path, b); err != nil {
		g.log.Warn("writing snapshot cache", "path", path, "err", err)
	}
}

func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating temporary file: %w", err)
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("renaming into place: %w", err)
	}
	return nil
}

// loadSnapshotCache applies the cache file, if any. A missing file is
// not an error; an unreadable or rejected one is logged and ignored.
func (g *Gateway) loadSnapshotCache() {
	path := g.cfg.snap.cache
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		g.log.Warn("reading snapshot cache", "path", path, "err", err)
		return
	}
	snap, err := g.admitSnapshot(b, nil)
	if err == nil {
		err = g.applyView(snap)
	} else {
		g.m.rejected.WithLabelValues(g.cfg.cluster, rejectReason(err)).Inc()
	}
	if err != nil {
		g.log.Warn("snapshot cache rejected", "path", path, "err", err)
		return
	}
	g.log.Info("routing on the cached snapshot until the control plane sends one", "path", path, "version", snap.version)
}

// HasSnapshot reports whether the gateway routes on a snapshot (from its
// source, cache or initial snapshot), not on static engines or nothing.
func (g *Gateway) HasSnapshot() bool {
	rt := g.cur.Load()
	return rt != nil && !rt.fallback
}

// serveReady is /health/ready: 200 once the gateway has a snapshot, 503
// before (routing blind on static engines, or not at all) and from the
// start of a drain.
func (g *Gateway) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	body := struct {
		Status          string `json:"status"`
		Cluster         string `json:"cluster"`
		SnapshotVersion uint64 `json:"snapshot_version"`
		Reason          string `json:"reason,omitempty"`
	}{Status: "ready", Cluster: g.cfg.cluster, SnapshotVersion: g.Stats().SnapshotVersion}
	switch {
	case g.Draining():
		body.Status, body.Reason = "not_ready", "draining" // drain.go
		w.WriteHeader(http.StatusServiceUnavailable)
	case !g.HasSnapshot():
		body.Status, body.Reason = "not_ready", "no snapshot yet"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

// sumTolerance is how far weights plus shed may be from 1.
const sumTolerance = 1e-3

// maxSnapshotEngines bounds one cluster's engines.
const maxSnapshotEngines = 1 << 16

// DecodeSnapshot decodes a proto-binary WeightSnapshot.
func DecodeSnapshot(b []byte) (*schemas.WeightSnapshot, error) {
	var s schemas.WeightSnapshot
	if err := proto.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshotDecode, err)
	}
	return &s, nil
}

// DecodeSnapshotJSON decodes a WeightSnapshot in protobuf JSON (the
// --snapshot-file format).
func DecodeSnapshotJSON(b []byte) (*schemas.WeightSnapshot, error) {
	var s schemas.WeightSnapshot
	if err := protojson.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshotDecode, err)
	}
	return &s, nil
}

// ValidateSnapshot checks snap and returns cluster's weights: any
// schema version (0 is read as 1), version > 0, the cluster present
// once, every engine with a unique non-empty id and an absolute http(s)
// endpoint, every weight and the shed fraction finite and in [0,1], and
// weights plus shed equal to 1 (within 1e-3).
func ValidateSnapshot(snap *schemas.WeightSnapshot, cluster string) (*schemas.ClusterWeights, error) {
	if snap == nil {
		return nil, fmt.Errorf("%w: nil", ErrSnapshotInvalid)
	}
	v := viewOf(snap, cluster)
	if err := validateHead(v, cluster); err != nil {
		return nil, err
	}
	if err := validateCluster(v.cw, nil); err != nil {
		return nil, err
	}
	return v.cw.msg, nil
}

// validateHead is ValidateSnapshot's checks of the snapshot: its
// version, and its cluster's entry present once.
func validateHead(v snapView, cluster string) error {
	// A newer schema_version is read like ours: changes are additive
	// (schemas/switchyard.proto), so there is nothing to reject.
	if v.version == 0 {
		return fmt.Errorf("%w: version 0", ErrSnapshotInvalid)
	}
	if v.twice {
		return fmt.Errorf("%w: cluster %q listed twice", ErrSnapshotInvalid, cluster)
	}
	if !v.found {
		return fmt.Errorf("%w: %q", ErrSnapshotCluster, cluster)
	}
	return nil
}

// validateCluster is ValidateSnapshot's checks of the cluster's entry, a
// function of its engines' ids, endpoints and weights and its shed
// fraction alone. held is an entry that passed them (the one the gateway
// routes on) or nil: when cw lists the same ids in the same order, they
// are non-empty and unique without a look, and an endpoint equal to
// held's at the same place is not checked again.
func validateCluster(cw, held *clusterView) error {
	shed := cw.shed
	if !(shed >= 0 && shed <= 1) {
		return fmt.Errorf("%w: shed fraction %v", ErrSnapshotInvalid, shed)
	}
	if len(cw.engines) > maxSnapshotEngines {
		return fmt.Errorf("%w: %d engines", ErrSnapshotInvalid, len(cw.engines))
	}
	var prev []engineView
	if held != nil {
		prev = held.engines
	}
	sameIDs := len(prev) == len(cw.engines)
	for i := 0; sameIDs && i < len(prev); i++ {
		sameIDs = prev[i].id == cw.engines[i].id
	}
	var seen map[string]bool
	if !sameIDs {
		seen = make(map[string]bool, len(cw.engines))
	}
	sum := 0.0
	for i := range cw.engines {
		w := &cw.engines[i]
		id := w.id
		if !sameIDs {
			if id == "" {
				return fmt.Errorf("%w: engine without id", ErrSnapshotInvalid)
			}
			if seen[id] {
				return fmt.Errorf("%w: engine %q listed twice", ErrSnapshotInvalid, id)
			}
			seen[id] = true
		}
		if x := w.weight; !(x >= 0 && x <= 1) {
			return fmt.Errorf("%w: engine %q weight %v", ErrSnapshotInvalid, id, x)
		}
		if i >= len(prev) || prev[i].url != w.url {
			if err := checkEndpoint(w.url); err != nil {
				return fmt.Errorf("%w: engine %q: %w", ErrSnapshotInvalid, id, err)
			}
		}
		sum += w.weight
	}
	if math.Abs(sum+shed-1) > sumTolerance {
		return fmt.Errorf("%w: weights %.6f + shed %.6f != 1", ErrSnapshotInvalid, sum, shed)
	}
	return nil
}

func checkEndpoint(s string) error {
	if endpointPlain(s) { // endpoint.go
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("endpoint is not a URL: %w", redactURLError(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("endpoint %q is not an absolute http(s) URL", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("endpoint %q has a query, fragment or user info", u.Redacted())
	}
	return nil
}

// redactURLError drops the URL from a url.Parse error: it may hold a
// password, and the error is logged.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// rejectReason is the metric label of a snapshot error.
func rejectReason(err error) string {
	switch {
	case errors.Is(err, ErrSnapshotDecode):
		return "decode"
	case errors.Is(err, ErrSnapshotSchema):
		return "schema"
	case errors.Is(err, ErrSnapshotCluster):
		return "cluster"
	case errors.Is(err, ErrSnapshotStale):
		return "stale"
	case errors.Is(err, ErrSnapshotUnsigned):
		return "unsigned"
	case errors.Is(err, ErrSnapshotSignature):
		return "signature"
	case errors.Is(err, ErrSnapshotFuture):
		return "future"
	case errors.Is(err, ErrSnapshotUnregistered):
		return "unregistered"
	}
	return "invalid"
}
