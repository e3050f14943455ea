package schemas_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

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
	for _, f := range []string{"switchyard.pb.go", "switchyard.binpb"} {
		got, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("schemas/%s is stale: run `go generate ./schemas` and commit the result", f)
		}
	}
}

// TestDescriptorSetMatchesGoCode checks that the embedded descriptor set
// (with comments) describes the same file as the generated Go code, so
// `schema export` never hands out a schema the binaries do not write.
func TestDescriptorSetMatchesGoCode(t *testing.T) {
	fds, err := schemas.DescriptorSetProto()
	if err != nil {
		t.Fatal(err)
	}
	if len(fds.GetFile()) != 1 {
		t.Fatalf("%d files in the descriptor set, want 1", len(fds.GetFile()))
	}
	got := proto.Clone(fds.GetFile()[0]).(*descriptorpb.FileDescriptorProto)
	got.SourceCodeInfo = nil
	want := protodesc.ToFileDescriptorProto(schemas.File_switchyard_proto)
	if !proto.Equal(got, want) {
		t.Fatal("schemas/switchyard.binpb differs from switchyard.pb.go: run `go generate ./schemas`")
	}
	if got.GetPackage() != schemas.Package {
		t.Fatalf("package %q, want %q", got.GetPackage(), schemas.Package)
	}
	if n := schemas.MessageName(&schemas.RoutingEvent{}); n != "switchyard.v1.RoutingEvent" {
		t.Fatalf("MessageName = %q", n)
	}
}

// TestReadersIgnoreNewerFields decodes a record from a newer writer (a
// field number this build does not know, a higher schema_version): the
// known fields decode and the unknown one survives a re-encode.
func TestReadersIgnoreNewerFields(t *testing.T) {
	b, err := proto.Marshal(&schemas.RoutingEvent{SchemaVersion: schemas.Version + 1, RequestId: "r1", PromptTokens: 7})
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 999, protowire.BytesType)
	b = protowire.AppendString(b, "from the future")
	var ev schemas.RoutingEvent
	if err := proto.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.GetRequestId() != "r1" || ev.GetPromptTokens() != 7 || len(ev.ProtoReflect().GetUnknown()) == 0 {
		t.Fatalf("decoded %v", &ev)
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
