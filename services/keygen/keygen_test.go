package keygen

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gatewaycmd "github.com/switchyard-llm/switchyard/services/gateway"
	optimizercmd "github.com/switchyard-llm/switchyard/services/optimizer"
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
	if opts, err := (optimizercmd.Signing{KeyFile: out}).StoreOpts(); err != nil || len(opts) != 1 {
		t.Fatalf("signing key: %v", err)
	}
	if keys, err := (gatewaycmd.SnapshotTrust{KeyFiles: out + ".pub"}).Keys(); err != nil || len(keys) != 1 {
		t.Fatalf("public key: %d keys, %v", len(keys), err)
	}
	if err := run(context.Background(), []string{"--out", out}, &stdout, &stdout); err == nil {
		t.Fatal("overwrote an existing key")
	}
}

// TestKeygenKeepExisting: with --keep-existing a second run (a
// deployment's init step at every start) keeps the pair it wrote, and the
// public key goes where --public-out says.
func TestKeygenKeepExisting(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "private", "k"), filepath.Join(dir, "k.pub")
	if err := os.Mkdir(filepath.Dir(priv), 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"--out", priv, "--public-out", pub, "--keep-existing"}
	var stdout bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), args, &stdout, &stdout); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if again, _ := os.ReadFile(pub); !bytes.Equal(first, again) {
		t.Fatal("the public key changed")
	}
	if err := run(context.Background(), args[:4], &stdout, &stdout); err == nil {
		t.Fatal("without --keep-existing, a second run succeeded")
	}
	if keys, err := (gatewaycmd.SnapshotTrust{KeyFiles: pub}).Keys(); err != nil || len(keys) != 1 {
		t.Fatalf("public key: %d keys, %v", len(keys), err)
	}
}
