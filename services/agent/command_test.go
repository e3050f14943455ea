package agent

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/cli"
)

func TestCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--engines", "a"},
		{"--engine", "a=http://x", "--engine", "a=http://y"},
		{"--engines", "a=http://x", "--interval", "-1s"},
		{"--engines", "a=http://x", "--kafka-brokers", " "},
		{"--engines", "a=http://x,max_batch=0"},
		{"--no-such-flag"},
	} {
		err := Command().Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}
