package gateway

import (
	"errors"
	"fmt"
	"math"
	"net/url"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Snapshot validation errors; Reason maps them to metric labels.
var (
	ErrSnapshotDecode  = errors.New("snapshot does not decode")
	ErrSnapshotSchema  = errors.New("snapshot schema version not understood")
	ErrSnapshotInvalid = errors.New("snapshot invalid")
	ErrSnapshotCluster = errors.New("snapshot has no weights for this cluster")
	ErrSnapshotStale   = errors.New("snapshot version not newer than the one held")
)

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

// ValidateSnapshot checks snap and returns cluster's weights: schema
// version understood (0 is read as 1), version > 0, the cluster present
// once, every engine with a unique non-empty id and an absolute http(s)
// endpoint, every weight and the shed fraction finite and in [0,1], and
// weights plus shed equal to 1 (within 1e-3).
func ValidateSnapshot(snap *schemas.WeightSnapshot, cluster string) (*schemas.ClusterWeights, error) {
	if snap == nil {
		return nil, fmt.Errorf("%w: nil", ErrSnapshotInvalid)
	}
	if snap.GetSchemaVersion() > schemas.Version {
		return nil, fmt.Errorf("%w: %d > %d", ErrSnapshotSchema, snap.GetSchemaVersion(), schemas.Version)
	}
	if snap.GetVersion() == 0 {
		return nil, fmt.Errorf("%w: version 0", ErrSnapshotInvalid)
	}
	var cw *schemas.ClusterWeights
	for _, c := range snap.GetClusters() {
		if c.GetCluster() != cluster {
			continue
		}
		if cw != nil {
			return nil, fmt.Errorf("%w: cluster %q listed twice", ErrSnapshotInvalid, cluster)
		}
		cw = c
	}
	if cw == nil {
		return nil, fmt.Errorf("%w: %q", ErrSnapshotCluster, cluster)
	}
	shed := cw.GetShedFraction()
	if !(shed >= 0 && shed <= 1) {
		return nil, fmt.Errorf("%w: shed fraction %v", ErrSnapshotInvalid, shed)
	}
	if len(cw.GetWeights()) > maxSnapshotEngines {
		return nil, fmt.Errorf("%w: %d engines", ErrSnapshotInvalid, len(cw.GetWeights()))
	}
	seen := make(map[string]bool, len(cw.GetWeights()))
	sum := 0.0
	for _, w := range cw.GetWeights() {
		id := w.GetEngineId()
		if id == "" {
			return nil, fmt.Errorf("%w: engine without id", ErrSnapshotInvalid)
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: engine %q listed twice", ErrSnapshotInvalid, id)
		}
		seen[id] = true
		if x := w.GetWeight(); !(x >= 0 && x <= 1) {
			return nil, fmt.Errorf("%w: engine %q weight %v", ErrSnapshotInvalid, id, x)
		}
		if err := checkEndpoint(w.GetEndpointUrl()); err != nil {
			return nil, fmt.Errorf("%w: engine %q: %w", ErrSnapshotInvalid, id, err)
		}
		sum += w.GetWeight()
	}
	if math.Abs(sum+shed-1) > sumTolerance {
		return nil, fmt.Errorf("%w: weights %.6f + shed %.6f != 1", ErrSnapshotInvalid, sum, shed)
	}
	return cw, nil
}

func checkEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("endpoint %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("endpoint %q is not an absolute http(s) URL", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("endpoint %q has a query, fragment or user info", s)
	}
	return nil
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
	}
	return "invalid"
}
