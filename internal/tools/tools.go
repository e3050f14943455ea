//go:build tools

// Package tools pins the tools the project builds with whose packages no
// Go file imports, so `go mod tidy` keeps them: protoc-gen-go, built by
// schemas/generate.sh at the version go.mod pins.
package tools

import (
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
