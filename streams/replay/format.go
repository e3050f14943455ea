package replay

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Format of the output file.
type Format int

const (
	// JSONLines writes one compact protojson WeightSnapshot per line.
	JSONLines Format = iota
	// Binary writes each snapshot as a uvarint length followed by its
	// deterministic protobuf encoding.
	Binary
)

// write appends snap to w in format.
func write(w io.Writer, snap *schemas.WeightSnapshot, format Format) error {
	switch format {
	case Binary:
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(snap)
		if err != nil {
			return fmt.Errorf("encoding snapshot %d: %w", snap.GetVersion(), err)
		}
		var n [binary.MaxVarintLen64]byte
		if _, err := w.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))]); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	default:
		b, err := protojson.Marshal(snap)
		if err != nil {
			return fmt.Errorf("encoding snapshot %d: %w", snap.GetVersion(), err)
		}
		// protojson randomises whitespace; compacting makes lines stable.
		var c bytes.Buffer
		if err := json.Compact(&c, b); err != nil {
			return err
		}
		c.WriteByte('\n')
		_, err = w.Write(c.Bytes())
		return err
	}
}

// ReadSnapshots reads a file written with format.
func ReadSnapshots(r io.Reader, format Format) ([]*schemas.WeightSnapshot, error) {
	var out []*schemas.WeightSnapshot
	br := bufio.NewReader(r)
	for {
		var b []byte
		if format == Binary {
			n, err := binary.ReadUvarint(br)
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return nil, fmt.Errorf("reading snapshot length: %w", err)
			}
			if n > 64<<20 {
				return nil, fmt.Errorf("snapshot of %d bytes", n)
			}
			b = make([]byte, n)
			if _, err := io.ReadFull(br, b); err != nil {
				return nil, fmt.Errorf("reading snapshot: %w", err)
			}
			var s schemas.WeightSnapshot
			if err := proto.Unmarshal(b, &s); err != nil {
				return nil, fmt.Errorf("decoding snapshot: %w", err)
			}
			out = append(out, &s)
			continue
		}
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var s schemas.WeightSnapshot
			if uerr := protojson.Unmarshal(line, &s); uerr != nil {
				return nil, fmt.Errorf("decoding snapshot: %w", uerr)
			}
			out = append(out, &s)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ParseTime parses a command-line time: RFC 3339 or Unix milliseconds.
func ParseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339 or Unix milliseconds", s)
	}
	return t, nil
}
