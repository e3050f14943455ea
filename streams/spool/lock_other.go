//go:build !unix

package spool

import (
	"fmt"
	"os"
)

// lockDir opens path; without flock the directory is not guarded
// against a second process.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	return f, nil
}

func unlockDir(f *os.File) error { return f.Close() }
