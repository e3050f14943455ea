package gateway

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/schemas"
)

func TestDecodeSnapshotJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/snapshot.good.json")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := DecodeSnapshotJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	cw, err := ValidateSnapshot(snap, "us-east")
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetVersion() != 7 || len(cw.GetWeights()) != 3 || cw.GetShedFraction() != 0.1 {
		t.Fatalf("%v", snap)
	}
	if _, err := ValidateSnapshot(snap, "ap-south"); !errors.Is(err, ErrSnapshotCluster) {
		t.Fatalf("missing cluster: %v", err)
	}
	if _, err := DecodeSnapshotJSON(b[:len(b)/2]); !errors.Is(err, ErrSnapshotDecode) {
		t.Fatalf("truncated snapshot: %v", err)
	}
}

func TestValidateSnapshot(t *testing.T) {
	good := func() *schemas.WeightSnapshot {
		return &schemas.WeightSnapshot{SchemaVersion: 1, Version: 3, Clusters: []*schemas.ClusterWeights{{
			Cluster: "c", ShedFraction: 0.2,
			Weights: []*schemas.EngineWeight{
				{EngineId: "a", EndpointUrl: "http://a:1", Weight: 0.5},
				{EngineId: "b", EndpointUrl: "https://b", Weight: 0.3},
			},
		}}}
	}
	tests := []struct {
		name string
		edit func(s *schemas.WeightSnapshot)
		want error
	}{
		{"good", func(*schemas.WeightSnapshot) {}, nil},
		{"schema 0 read as 1", func(s *schemas.WeightSnapshot) { s.SchemaVersion = 0 }, nil},
		{"all shed", func(s *schemas.WeightSnapshot) {
			s.Clusters[0].ShedFraction = 1
			s.Clusters[0].Weights[0].Weight, s.Clusters[0].Weights[1].Weight = 0, 0
		}, nil},
		{"newer schema read", func(s *schemas.WeightSnapshot) { s.SchemaVersion = schemas.Version + 1 }, nil},
		{"version 0", func(s *schemas.WeightSnapshot) { s.Version = 0 }, ErrSnapshotInvalid},
		{"other cluster", func(s *schemas.WeightSnapshot) { s.Clusters[0].Cluster = "d" }, ErrSnapshotCluster},
		{"cluster twice", func(s *schemas.WeightSnapshot) { s.Clusters = append(s.Clusters, s.Clusters[0]) }, ErrSnapshotInvalid},
		{"sum below 1", func(s *schemas.WeightSnapshot) { s.Clusters[0].ShedFraction = 0 }, ErrSnapshotInvalid},
		{"negative weight", func(s *schemas.WeightSnapshot) {
			s.Clusters[0].Weights[1].Weight = -0.3
			s.Clusters[0].ShedFraction = 0.8
		}, ErrSnapshotInvalid},
		{"weight above 1", func(s *schemas.WeightSnapshot) { s.Clusters[0].Weights[0].Weight = 1.5 }, ErrSnapshotInvalid},
		{"NaN weight", func(s *schemas.WeightSnapshot) { s.Clusters[0].Weights[0].Weight = math.NaN() }, ErrSnapshotInvalid},
		{"NaN shed", func(s *schemas.WeightSnapshot) { s.Clusters[0].ShedFraction = math.NaN() }, ErrSnapshotInvalid},
		{"shed above 1", func(s *schemas.WeightSnapshot) { s.Clusters[0].ShedFraction = 1.2 }, ErrSnapshotInvalid},
		{"no id", func(s *schemas.WeightSnapshot) { s.Clusters[0].Weights[0].EngineId = "" }, ErrSnapshotInvalid},
		{"duplicate id", func(s *schemas.WeightSnapshot) { s.Clusters[0].Weights[1].EngineId = "a" }, ErrSnapshotInvalid},
		{"no endpoint", func(s *schemas.WeightSnapshot) { s.Clusters[0].Weights[0].EndpointUrl = "" }, ErrSnapshotInvalid},
		{"relative endpoint", func(s *schemas.WeightSnapshot) { s.Clusters[0].Weights[0].EndpointUrl = "a:1/x" }, ErrSnapshotInvalid},
		{"ftp endpoint", func(s *schemas.WeightSnapshot) { s.Clusters[0].Weights[0].EndpointUrl = "ftp://a" }, ErrSnapshotInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.edit(s)
			_, err := ValidateSnapshot(s, "c")
			if tt.want == nil && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestApplyKeepsLastGoodAndVersionsIncrease(t *testing.T) {
	g, err := New("us-east", HealthInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	a := &fakeEngine{id: "a"}
	enc := func(s *schemas.WeightSnapshot) []byte { b, _ := proto.Marshal(s); return b }
	mk := func(v uint64, w float64) *schemas.WeightSnapshot {
		return &schemas.WeightSnapshot{SchemaVersion: 1, Version: v, Clusters: []*schemas.ClusterWeights{{Cluster: "us-east",
			ShedFraction: 1 - w, Weights: []*schemas.EngineWeight{{EngineId: a.id, EndpointUrl: "http://127.0.0.1:1", Weight: w}}}}}
	}
	steps := []struct {
		b    []byte
		ok   bool
		hold uint64
	}{
		{enc(mk(5, 1)), true, 5},
		{enc(mk(5, 1)), true, 5},       // the same snapshot again: a no-op
		{enc(mk(5, 0.5)), true, 5},     // same version, other weights: replaces (TestEqualVersionReplaces)
		{enc(mk(4, 1)), false, 5},      // older
		{enc(mk(4, 1)), false, 5},      // older again
		{[]byte{0xff, 0x01}, false, 5}, // garbage
		{enc(mk(6, 0.5)), true, 6},
		{enc(mk(7, 0)), true, 7}, // sheds everything
	}
	for i, s := range steps {
		err := g.ApplySnapshot(s.b)
		if (err == nil) != s.ok {
			t.Fatalf("step %d: err %v", i, err)
		}
		if v := g.Stats().SnapshotVersion; v != s.hold {
			t.Fatalf("step %d: holding %d, want %d", i, v, s.hold)
		}
	}
	if got := counter(g.m.rejected.WithLabelValues("us-east", "stale")); got != 2 {
		t.Errorf("%v stale rejections", got)
	}
	if got := counter(g.m.rejected.WithLabelValues("us-east", "decode")); got != 1 {
		t.Errorf("%v decode rejections", got)
	}
}

// FuzzSnapshot: any bytes decode, validate and build without panic, and a
// snapshot that validates builds a table without NaN shares.
func FuzzSnapshot(f *testing.F) {
	js, _ := os.ReadFile("testdata/snapshot.good.json")
	good, _ := DecodeSnapshotJSON(js)
	b, _ := proto.Marshal(good)
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x20, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		cw, err := ValidateSnapshot(snap, "us-east")
		if err != nil {
			return
		}
		var specs []pick.Spec
		for _, w := range cw.GetWeights() {
			specs = append(specs, pick.Spec{ID: w.GetEngineId(), URL: w.GetEndpointUrl(), Weight: w.GetWeight()})
		}
		tb, err := pick.NewPool().Build(specs, pick.Options{})
		if err != nil {
			if cw.GetShedFraction() < 1-sumTolerance {
				t.Fatalf("valid snapshot did not build: %v", err)
			}
			return
		}
		for i := 0; i < tb.Len(); i++ {
			if s := tb.Engine(i).Share; math.IsNaN(s) || s <= 0 || s > 1 {
				t.Fatalf("share %v", s)
			}
		}
		if i, _ := tb.Pick(1, nil); i < 0 {
			t.Fatal("no pick from a valid table")
		}
	})
}

// TestSnapshotErrorsHideCredentials: a rejected endpoint's password never
// reaches the error (which is logged).
func TestSnapshotErrorsHideCredentials(t *testing.T) {
	for _, ep := range []string{"ftp://user:s3cret@x/?q=1", "http://user:s3cret@x/", "http://user:s3cret@x/%zz"} {
		snap := &schemas.WeightSnapshot{SchemaVersion: 1, Version: 1, Clusters: []*schemas.ClusterWeights{{Cluster: "c",
			Weights: []*schemas.EngineWeight{{EngineId: "e", EndpointUrl: ep, Weight: 1}}}}}
		_, err := ValidateSnapshot(snap, "c")
		if err == nil {
			t.Fatalf("%s: accepted", ep)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error shows the password: %v", ep, err)
		}
	}
}
