#!/usr/bin/env bash
# Regenerates switchyard.pb.go and switchyard.binpb (the FileDescriptorSet
# with comments, which `switchyard schema export` writes and docs/schemas.md
# is generated from) from switchyard.proto into OUT_DIR (default: this
# folder). protoc-gen-go is built from the version go.mod pins, so the
# output only depends on protoc's version (Debian's protobuf-compiler).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$here/.." && go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go)
protoc --plugin=protoc-gen-go="$bin/protoc-gen-go" -I "$here" \
  --go_out="$out" --go_opt=paths=source_relative \
  --include_source_info --descriptor_set_out="$out/switchyard.binpb" "$here/switchyard.proto"
