package schema

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
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
		err := run(context.Background(), args, io.Discard, io.Discard)
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		} else if strings.Contains(err.Error(), "usage: usage") {
			t.Errorf("%q: %q says usage twice", args, err)
		}
	}
}
