// Command formats rewrites the public traces of ../shared/traces in the
// other public formats the trace readers take (docs/sim.md#trace-formats),
// so the simulator can be measured on them and the readers checked
// against each other:
//
//	go run ./bench/sim/formats -out /tmp/formats
//	go run ./bench/sim -only conversations -traces /tmp/formats -seeds 3
//
// It writes, from the Azure 2023 conversation trace, the Azure 2024 form
// (azure2024_form.csv: microsecond times with a +00:00 offset) and the
// BurstGPT form (burstgpt_form.csv: whole seconds since the first row,
// six columns); from the Mooncake trace, the Qwen-Bailian form
// (bailian_form.jsonl: seconds, 16-token hash blocks, chat_id chains).
// The rewritten traces carry the same requests; only their format
// differs.
package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	in := flag.String("traces", "../shared/traces", "directory of the public traces")
	out := flag.String("out", "", "directory to write the rewritten traces to (created)")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "formats:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if out == "" {
		return errors.New("-out is required")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	jobs := []struct {
		src, dst string
		rewrite  func(io.Reader, io.Writer) error
	}{
		{"azure2023_conv.csv", "azure2024_form.csv", azure2024},
		{"azure2023_conv.csv", "burstgpt_form.csv", burstGPT},
		{"mooncake_conversation_trace.jsonl", "bailian_form.jsonl", bailian},
	}
	for _, j := range jobs {
		if err := rewriteFile(filepath.Join(in, j.src), filepath.Join(out, j.dst), j.rewrite); err != nil {
			return fmt.Errorf("%s from %s: %w", j.dst, j.src, err)
		}
		fmt.Println("wrote", filepath.Join(out, j.dst))
	}
	return nil
}

func rewriteFile(src, dst string, rewrite func(io.Reader, io.Writer) error) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	o, err := os.Create(dst)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(o)
	if err := rewrite(f, w); err != nil {
		o.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

// azureRows reads the Azure 2023 CSV's rows: time, prompt and output
// tokens as written.
func azureRows(r io.Reader, each func(t time.Time, prompt, output string) error) error {
	cr := csv.NewReader(r)
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if line == 1 && strings.EqualFold(rec[0], "TIMESTAMP") {
			continue
		}
		if len(rec) != 3 {
			return fmt.Errorf("line %d: %d fields", line, len(rec))
		}
		t, err := time.Parse("2006-01-02 15:04:05", rec[0])
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if err := each(t, rec[1], rec[2]); err != nil {
			return err
		}
	}
}

// azure2024 writes the rows with the Azure 2024 traces' times:
// microseconds and a UTC offset.
func azure2024(r io.Reader, w io.Writer) error {
	if _, err := io.WriteString(w, "TIMESTAMP,ContextTokens,GeneratedTokens\n"); err != nil {
		return err
	}
	return azureRows(r, func(t time.Time, prompt, output string) error {
		_, err := fmt.Fprintf(w, "%s,%s,%s\n", t.UTC().Format("2006-01-02 15:04:05.000000-07:00"), prompt, output)
		return err
	})
}

// burstGPT writes the rows in BurstGPT's columns, times in whole seconds
// since the first row.
func burstGPT(r io.Reader, w io.Writer) error {
	if _, err := io.WriteString(w, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"); err != nil {
		return err
	}
	var start time.Time
	return azureRows(r, func(t time.Time, prompt, output string) error {
		if start.IsZero() {
			start = t
		}
		p, err1 := strconv.Atoi(prompt)
		o, err2 := strconv.Atoi(output)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "%d,ChatGPT,%d,%d,%d,Conversation log\n", int64(t.Sub(start)/time.Second), p, o, p+o)
		return err
	})
}

// mooncakeRow is a row of the Mooncake trace.
type mooncakeRow struct {
	Timestamp    int64    `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// bailianRow is a row in the Qwen-Bailian traces' format.
type bailianRow struct {
	ChatID       int64    `json:"chat_id"`
	ParentChatID int64    `json:"parent_chat_id"`
	Timestamp    float64  `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	Type         string   `json:"type"`
	Turn         int      `json:"turn"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// bailianBlocks is the block size of the Qwen-Bailian traces and
// mooncakeBlocks Mooncake's.
const (
	bailianBlocks  = 16
	mooncakeBlocks = 512
)

// bailian writes the Mooncake rows in the Qwen-Bailian format: times in
// seconds, each 512-token block split into 16-token blocks, and a
// conversation (the rows sharing their second block, as the simulator
// reads Mooncake) a chat_id chain.
func bailian(r io.Reader, w io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	enc := json.NewEncoder(w)
	type chat struct {
		id   int64
		turn int
	}
	last := map[uint64]chat{}
	var id int64
	for sc.Scan() {
		var m mooncakeRow
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("row %d: %w", id+1, err)
		}
		id++
		row := bailianRow{ChatID: id, ParentChatID: -1, Timestamp: float64(m.Timestamp) / 1000, Type: "text", Turn: 1,
			InputLength: m.InputLength, OutputLength: m.OutputLength}
		if len(m.HashIDs) >= 2 {
			key := m.HashIDs[1]
			if p, ok := last[key]; ok {
				row.ParentChatID, row.Turn = p.id, p.turn+1
			}
			last[key] = chat{id, row.Turn}
		}
		split := mooncakeBlocks / bailianBlocks
		for k := range (m.InputLength + bailianBlocks - 1) / bailianBlocks {
			if b := k / split; b < len(m.HashIDs) {
				row.HashIDs = append(row.HashIDs, m.HashIDs[b]*uint64(split)+uint64(k%split))
			}
		}
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	return sc.Err()
}
