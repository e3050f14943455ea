// Package spool is a bounded first-in first-out queue of byte entries on
// disk: what an emitter keeps while Kafka cannot take its records, so
// that a broker outage (or a restart during one) loses nothing up to the
// spool's size.
//
// Entries are appended to segment files in a directory (named by the
// sequence number of their first entry) and read back in append order by
// one reader; an entry stays on disk until it is acknowledged (Ack), in
// any order, and a segment is deleted once every entry in it is. The
// first unacknowledged sequence number is kept in the directory (file
// "head"), so a spool reopened after a restart returns every entry not
// acknowledged before, from the oldest. Each entry carries a CRC-32C; a
// torn entry at a segment's end (a crash while appending) is cut off when
// the spool is opened. Appends are written with one write(2) each and
// not fsynced: a process that dies keeps them, a host that crashes may
// lose those the kernel had not written back.
//
// A directory is used by one Spool at a time: Open takes an exclusive
// lock (flock) on a file in it and fails when another process holds it.
package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Errors.
var (
	// ErrFull: the entry does not fit in the spool's byte bound.
	ErrFull = errors.New("spool full")
	// ErrClosed: the spool was closed.
	ErrClosed = errors.New("spool closed")
	// ErrLocked: another spool (another process) holds the directory.
	ErrLocked = errors.New("spool directory in use")
)

const (
	segSuffix  = ".seg"
	headFile   = "head"
	lockFile   = "lock"
	entryHead  = 8 // length (4) and CRC-32C (4), little endian
	maxEntry   = 64 << 20
	minSegment = 64 << 10
	maxSegment = 8 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type segment struct {
	base uint64   // sequence number of the first entry
	n    uint64   // entries
	size int64    // bytes in the file
	path string   // file
	rf   *os.File // open for reading, or nil
}

// Spool is a bounded FIFO of entries on disk. Its methods are safe for
// concurrent use; Next is meant for one reader.
type Spool struct {
	dir      string
	maxBytes int64
	segMax   int64

	mu     sync.Mutex
	closed bool
	lock   *os.File
	segs   []*segment // oldest first; the last one is appended to
	wf     *os.File   // the last segment, open for appending
	bytes  int64      // sum of the segments' sizes
	next   uint64     // sequence number of the next append
	head   uint64     // every entry below is acknowledged
	acked  map[uint64]struct{}
	// read cursor: the next entry Next returns.
	rseq uint64
	rseg int   // index in segs
	roff int64 // offset in that segment
}

// Open opens (creating it if needed) the spool in dir, holding at most
// maxBytes of segment files (at least 64 KiB). Entries left by an
// earlier spool in dir and not acknowledged are read first.
func Open(dir string, maxBytes int64) (*Spool, error) {
	if maxBytes < minSegment {
		return nil, fmt.Errorf("spool %s: bound of %d bytes: want at least %d", dir, maxBytes, minSegment)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating spool directory: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	s := &Spool{dir: dir, maxBytes: maxBytes, segMax: min(max(maxBytes/8, minSegment), maxSegment),
		lock: lock, acked: map[uint64]struct{}{}}
	if err := s.load(); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	return s, nil
}

// load reads the directory: segments, head, and the read cursor at the
// head.
func (s *Spool) load() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("reading directory: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		base, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil {
			continue
		}
		s.segs = append(s.segs, &segment{base: base, path: filepath.Join(s.dir, name)})
	}
	slices.SortFunc(s.segs, func(a, b *segment) int { return cmpU64(a.base, b.base) })
	for _, sg := range s.segs {
		if err := scan(sg); err != nil {
			return err
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, headFile)); err == nil && len(b) == 8 {
		s.head = binary.LittleEndian.Uint64(b)
	} else if len(s.segs) > 0 {
		s.head = s.segs[0].base
	}
	// Segments wholly acknowledged go; the head is at least the first
	// entry on disk.
	for len(s.segs) > 0 && s.segs[0].base+s.segs[0].n <= s.head && len(s.segs) > 1 {
		if err := os.Remove(s.segs[0].path); err != nil {
			return fmt.Errorf("removing acknowledged segment: %w", err)
		}
		s.segs = s.segs[1:]
	}
	if len(s.segs) == 0 {
		s.next = s.head
		return s.newSegment()
	}
	first, last := s.segs[0], s.segs[len(s.segs)-1]
	s.head = max(s.head, first.base)
	s.next = last.base + last.n
	s.head = min(s.head, s.next)
	for _, sg := range s.segs {
		s.bytes += sg.size
	}
	wf, err := os.OpenFile(last.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening segment: %w", err)
	}
	s.wf = wf
	// Cursor at the head.
	s.rseq, s.rseg, s.roff = first.base, 0, 0
	for s.rseq < s.head {
		if _, err := s.readLocked(); err != nil {
			return err
		}
	}
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// scan counts sg's whole entries and cuts off a torn or corrupt tail.
func scan(sg *segment) error {
	f, err := os.OpenFile(sg.path, os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("opening segment: %w", err)
	}
	defer f.Close()
	var off int64
	hdr := make([]byte, entryHead)
	var buf []byte
	for {
		if _, err := f.ReadAt(hdr, off); err != nil {
			break
		}
		n := int64(binary.LittleEndian.Uint32(hdr))
		if n > maxEntry {
			break
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		if _, err := f.ReadAt(buf, off+entryHead); err != nil {
			break
		}
		if crc32.Checksum(buf, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			break
		}
		off += entryHead + n
		sg.n++
	}
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("truncating segment %s: %w", sg.path, err)
	}
	sg.size = off
	return nil
}

// newSegment starts a segment at s.next (under mu).
func (s *Spool) newSegment() error {
	sg := &segment{base: s.next, path: filepath.Join(s.dir, fmt.Sprintf("%020d%s", s.next, segSuffix))}
	f, err := os.OpenFile(sg.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating segment: %w", err)
	}
	if s.wf != nil {
		_ = s.wf.Sync() // a full segment is flushed once
		_ = s.wf.Close()
	}
	s.wf = f
	if len(s.segs) == 0 {
		s.rseq, s.rseg, s.roff = s.next, 0, 0
	}
	s.segs = append(s.segs, sg)
	return nil
}

// Append adds b as the last entry: ErrFull when the segment files would
// exceed the spool's bound, ErrClosed after Close.
func (s *Spool) Append(b []byte) error {
	if len(b) > maxEntry {
		return fmt.Errorf("%w: entry of %d bytes", ErrFull, len(b))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	n := int64(entryHead + len(b))
	if s.bytes+n > s.maxBytes {
		return ErrFull
	}
	last := s.segs[len(s.segs)-1]
	if last.size > 0 && last.size+n > s.segMax {
		if err := s.newSegment(); err != nil {
			return err
		}
		last = s.segs[len(s.segs)-1]
	}
	rec := make([]byte, entryHead+len(b))
	binary.LittleEndian.PutUint32(rec, uint32(len(b)))
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(b, castagnoli))
	copy(rec[entryHead:], b)
	if _, err := s.wf.Write(rec); err != nil {
		// A partial write is cut off at the next Open; this segment is
		// not appended to again.
		_ = s.newSegment()
		return fmt.Errorf("appending to spool: %w", err)
	}
	last.n++
	last.size += n
	s.bytes += n
	s.next++
	return nil
}

// Next returns the oldest entry not yet returned by Next since Open, and
// its sequence number for Ack; ok is false when there is none.
func (s *Spool) Next() (seq uint64, b []byte, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, false, ErrClosed
	}
	if s.rseq >= s.next {
		return 0, nil, false, nil
	}
	seq = s.rseq
	b, err = s.readLocked()
	if err != nil {
		return 0, nil, false, err
	}
	return seq, b, true, nil
}

// readLocked reads the entry at the cursor and advances it (under mu;
// an entry exists).
func (s *Spool) readLocked() ([]byte, error) {
	for s.rseg < len(s.segs)-1 && s.rseq >= s.segs[s.rseg].base+s.segs[s.rseg].n {
		if rf := s.segs[s.rseg].rf; rf != nil {
			_ = rf.Close()
			s.segs[s.rseg].rf = nil
		}
		s.rseg++
		s.roff = 0
		s.rseq = s.segs[s.rseg].base
	}
	sg := s.segs[s.rseg]
	if sg.rf == nil {
		f, err := os.Open(sg.path)
		if err != nil {
			return nil, fmt.Errorf("opening segment: %w", err)
		}
		sg.rf = f
	}
	var hdr [entryHead]byte
	if _, err := sg.rf.ReadAt(hdr[:], s.roff); err != nil {
		return nil, fmt.Errorf("reading spool entry %d: %w", s.rseq, err)
	}
	n := int64(binary.LittleEndian.Uint32(hdr[:]))
	b := make([]byte, n)
	if _, err := sg.rf.ReadAt(b, s.roff+entryHead); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return nil, fmt.Errorf("reading spool entry %d: %w", s.rseq, err)
	}
	if crc32.Checksum(b, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
		return nil, fmt.Errorf("spool entry %d: checksum mismatch", s.rseq)
	}
	s.roff += entryHead + n
	s.rseq++
	return b, nil
}

// Ack marks entry seq delivered. Once every entry of a segment is, the
// segment is deleted; the head (first entry not acknowledged) is kept in
// the directory for the next Open.
func (s *Spool) Ack(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if seq < s.head || seq >= s.next {
		return nil
	}
	s.acked[seq] = struct{}{}
	moved := false
	for {
		if _, ok := s.acked[s.head]; !ok {
			break
		}
		delete(s.acked, s.head)
		s.head++
		moved = true
	}
	if !moved {
		return nil
	}
	var errs []error
	for len(s.segs) > 1 && s.segs[0].base+s.segs[0].n <= s.head {
		sg := s.segs[0]
		if sg.rf != nil {
			_ = sg.rf.Close()
		}
		if err := os.Remove(sg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing segment: %w", err))
		}
		s.bytes -= sg.size
		s.segs = s.segs[1:]
		if s.rseg--; s.rseg < 0 { // the cursor was at the removed segment's end
			s.rseg, s.roff, s.rseq = 0, 0, max(s.rseq, s.segs[0].base)
		}
	}
	if len(s.segs) == 1 && s.head == s.next && s.segs[0].size > 0 {
		// Everything delivered: start the only segment over.
		sg := s.segs[0]
		if sg.rf != nil {
			_ = sg.rf.Close()
			sg.rf = nil
		}
		if err := s.wf.Truncate(0); err != nil {
			errs = append(errs, fmt.Errorf("truncating segment: %w", err))
		} else {
			s.bytes -= sg.size
			sg.size, sg.n = 0, 0
			if err := s.renameOnly(sg); err != nil {
				errs = append(errs, err)
			}
			s.rseq, s.rseg, s.roff = s.next, 0, 0
		}
	}
	var hb [8]byte
	binary.LittleEndian.PutUint64(hb[:], s.head)
	if err := writeHead(filepath.Join(s.dir, headFile), hb[:]); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// renameOnly renames the emptied segment sg to start at s.next, so that
// its name stays its first entry's sequence number.
func (s *Spool) renameOnly(sg *segment) error {
	np := filepath.Join(s.dir, fmt.Sprintf("%020d%s", s.next, segSuffix))
	if np == sg.path {
		return nil
	}
	if err := os.Rename(sg.path, np); err != nil {
		return fmt.Errorf("renaming segment: %w", err)
	}
	sg.path, sg.base = np, s.next
	return nil
}

// writeHead writes the head file in place (8 bytes; one write).
func writeHead(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("writing spool head: %w", err)
	}
	_, werr := f.WriteAt(b, 0)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("writing spool head: %w", err)
	}
	return nil
}

// Pending is the number of entries from the first one not acknowledged
// to the last (what a reopened spool would return).
func (s *Spool) Pending() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.next - s.head)
}

// Unread is the number of entries Next has not returned yet.
func (s *Spool) Unread() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.next - s.rseq)
}

// Bytes is the size of the segment files, which the bound applies to.
func (s *Spool) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// MaxBytes is the spool's bound.
func (s *Spool) MaxBytes() int64 { return s.maxBytes }

// Close flushes the last segment and releases the directory. Entries
// not acknowledged stay for the next Open.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.wf != nil {
		err = s.wf.Sync()
	}
	return errors.Join(err, s.closeFiles())
}

func (s *Spool) closeFiles() error {
	var errs []error
	for _, sg := range s.segs {
		if sg.rf != nil {
			errs = append(errs, sg.rf.Close())
			sg.rf = nil
		}
	}
	if s.wf != nil {
		errs = append(errs, s.wf.Close())
		s.wf = nil
	}
	if s.lock != nil {
		errs = append(errs, unlockDir(s.lock))
		s.lock = nil
	}
	return errors.Join(errs...)
}
