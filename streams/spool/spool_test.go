package spool_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-llm/switchyard/streams/spool"
)

func open(t *testing.T, dir string, max int64) *spool.Spool {
	t.Helper()
	s, err := spool.Open(dir, max)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entry(i int) []byte { return fmt.Appendf(nil, "entry-%06d-%0100d", i, i) }

// drain reads every unread entry, checking they come in order from
// want.
func drain(t *testing.T, s *spool.Spool, want int) (seqs []uint64) {
	t.Helper()
	for {
		seq, b, ok, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return seqs
		}
		if string(b) != string(entry(want)) {
			t.Fatalf("entry %d: got %q", want, b)
		}
		want++
		seqs = append(seqs, seq)
	}
}

// TestSpoolOrderAckReopen: entries come back in append order across
// segments; an entry is kept until acknowledged, in any order; a spool
// reopened after Close returns exactly the entries not acknowledged,
// oldest first; wholly acknowledged segments are deleted.
func TestSpoolOrderAckReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20) // segments of 128 KiB: ~1100 entries each
	const n = 5000
	for i := range n {
		if err := s.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	seqs := drain(t, s, 0)
	if len(seqs) != n {
		t.Fatalf("read %d of %d", len(seqs), n)
	}
	// Acknowledge 0..2999 except 1500, from the end.
	for i := 2999; i >= 0; i-- {
		if i != 1500 {
			if err := s.Ack(seqs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := s.Pending(); got != n-1500 {
		t.Fatalf("pending %d, want %d", got, n-1500)
	}
	before := s.Bytes()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, 1<<20)
	// The head is the first entry not acknowledged (1500): it and
	// everything after it come back, acknowledged or not (at least once).
	got := drain(t, s, 1500)
	if len(got) != n-1500 {
		t.Fatalf("reopened: %d entries, want %d", len(got), n-1500)
	}
	for _, q := range got {
		if err := s.Ack(q); err != nil {
			t.Fatal(err)
		}
	}
	if s.Pending() != 0 || s.Bytes() >= before || s.Bytes() != 0 {
		t.Fatalf("all acknowledged: pending %d, %d bytes (were %d)", s.Pending(), s.Bytes(), before)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("%d segment files left: %v", len(segs), segs)
	}
	// Appends go on after everything was delivered.
	if err := s.Append(entry(7)); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s, 7); len(got) != 1 {
		t.Fatalf("after restart: %d entries", len(got))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSpoolBound: appends past the byte bound fail with ErrFull and the
// files never exceed it; acknowledging frees room.
func TestSpoolBound(t *testing.T) {
	dir := t.TempDir()
	const max = 256 << 10
	s := open(t, dir, max)
	defer s.Close()
	n := 0
	for ; ; n++ {
		err := s.Append(entry(n))
		if errors.Is(err, spool.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.Bytes() > max || n < max/200 {
		t.Fatalf("%d entries, %d bytes in a spool of %d", n, s.Bytes(), max)
	}
	var size int64
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	for _, p := range segs {
		st, _ := os.Stat(p)
		size += st.Size()
	}
	if size != s.Bytes() {
		t.Fatalf("files hold %d bytes, spool counts %d", size, s.Bytes())
	}
	seqs := drain(t, s, 0)
	for _, q := range seqs[:n/2] {
		if err := s.Ack(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append(entry(n)); err != nil {
		t.Fatalf("after acknowledging half: %v", err)
	}
}

// TestSpoolTornTail: a partial entry at the end (a crash mid-append) is
// cut off at Open; the whole entries before it are kept.
func TestSpoolTornTail(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	for i := range 10 {
		if err := s.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{50, 0, 0, 0, 1, 2, 3, 4, 'x'}) // 50 bytes announced, 1 written
	f.Close()
	s = open(t, dir, 1<<20)
	defer s.Close()
	if got := drain(t, s, 0); len(got) != 10 {
		t.Fatalf("%d entries after a torn tail, want 10", len(got))
	}
	if err := s.Append(entry(10)); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s, 10); len(got) != 1 {
		t.Fatalf("append after the cut: %d", len(got))
	}
}

// TestSpoolLocked: a second Open of the same directory fails.
func TestSpoolLocked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	if _, err := spool.Open(dir, 1<<20); !errors.Is(err, spool.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	s.Close()
	open(t, dir, 1<<20).Close()
}
