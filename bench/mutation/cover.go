package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// block is one basic block of a coverage profile.
type block struct {
	l0, c0, l1, c1 int
	hit            bool
}

// coverage holds a package's blocks per absolute file path.
type coverage map[string][]block

// readCover reads a go test -coverprofile of package pkg in dir.
func readCover(path, pkg, dir string) (coverage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cov := coverage{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		var (
			name         string
			b            block
			stmts, count int
		)
		i := strings.LastIndex(line, ":")
		if i < 0 {
			return nil, fmt.Errorf("coverage profile line %q", line)
		}
		name = line[:i]
		if _, err := fmt.Sscanf(line[i+1:], "%d.%d,%d.%d %d %d", &b.l0, &b.c0, &b.l1, &b.c1, &stmts, &count); err != nil {
			return nil, fmt.Errorf("coverage profile line %q: %w", line, err)
		}
		b.hit = count > 0
		rel, ok := strings.CutPrefix(name, pkg+"/")
		if !ok {
			continue
		}
		abs := filepath.Join(dir, rel)
		cov[abs] = append(cov[abs], b)
	}
	return cov, sc.Err()
}

// covered reports whether a test executes the position: it lies in a
// block that ran, or in no block at all (declarations outside function
// bodies: the mutant is run to find out).
func (c coverage) covered(abs string, line, col int) bool {
	in := false
	for _, b := range c[abs] {
		after := line > b.l0 || line == b.l0 && col >= b.c0
		before := line < b.l1 || line == b.l1 && col < b.c1
		if after && before {
			if b.hit {
				return true
			}
			in = true
		}
	}
	return !in
}
