package schema

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/schemas"
)

func TestExport(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"export", "--out", "-"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), schemas.DescriptorSet()) {
		t.Fatal("--out - wrote something else than the descriptor set")
	}
	for _, args := range [][]string{{}, {"import"}, {"export"}, {"export", "--out", "f", "x"}} {
		if err := run(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}
