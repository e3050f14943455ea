package schemas_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestGeneratedCodeFresh regenerates switchyard.pb.go into a temporary
// folder and fails when it differs from the committed file. Without
// protoc it is skipped, except in CI (CI set), where it fails.
func TestGeneratedCodeFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("protoc not installed: CI must install protobuf-compiler")
		}
		t.Skip("protoc not installed")
	}
	out := t.TempDir()
	cmd := exec.Command("./generate.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(filepath.Join(out, "switchyard.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("switchyard.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("schemas/switchyard.pb.go is stale: run `go generate ./schemas` and commit the result")
	}
}

func TestRoundTripCarriesSchemaVersion(t *testing.T) {
	in := &schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "e1", KvCacheUsage: 0.5,
		TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{1, 2, 3}}}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out schemas.EngineSignal
	if err := proto.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, &out) || out.GetSchemaVersion() != schemas.Version {
		t.Fatalf("round trip: %v", &out)
	}
}
