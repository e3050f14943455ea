package keygen

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/cli"
)

// TestKeygen: the command writes a key pair the optimizer and gateway
// flags load, and refuses to overwrite it.
func TestKeygen(t *testing.T) {
	out := filepath.Join(t.TempDir(), "k")
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"--out", out}, &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "key id:") {
		t.Fatalf("output %q", stdout.String())
	}
	if opts, err := (cli.Signing{KeyFile: out}).StoreOpts(); err != nil || len(opts) != 1 {
		t.Fatalf("signing key: %v", err)
	}
	if keys, err := (cli.SnapshotTrust{KeyFiles: out + ".pub"}).Keys(); err != nil || len(keys) != 1 {
		t.Fatalf("public key: %d keys, %v", len(keys), err)
	}
	if err := run(context.Background(), []string{"--out", out}, &stdout, &stdout); err == nil {
		t.Fatal("overwrote an existing key")
	}
}
