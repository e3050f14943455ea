package trace

import (
	"bytes"
	"errors"
	"testing"
)

// TestWriteRowWritesOneJSONLine pins the keys of a row: they are what
// simulator/workload reads back (Mooncake's plus Switchyard's).
func TestWriteRowWritesOneJSONLine(t *testing.T) {
	var b bytes.Buffer
	r := Row{Timestamp: 1500, InputLength: 300, OutputLength: 20, CachedTokens: 128,
		AffinityHash: "00000000deadbeef", Cluster: "eu", Stream: true, EngineID: "eu-h100-0", TTFTms: 41.5}
	if err := WriteRow(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `{"timestamp":1500,"input_length":300,"output_length":20,"cached_tokens":128,` +
		`"affinity_hash":"00000000deadbeef","cluster":"eu","stream":true,"engine_id":"eu-h100-0","ttft_ms":41.5}` + "\n"
	if got := b.String(); got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
}

type failingWriter struct{}

var errDiskFull = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestWriteRowReturnsWriteError(t *testing.T) {
	if err := WriteRow(failingWriter{}, Row{}); !errors.Is(err, errDiskFull) {
		t.Fatalf("error %v, want %v", err, errDiskFull)
	}
}
