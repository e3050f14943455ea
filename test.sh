#!/usr/bin/env bash
# The project's test command (README, .ci/run): every package, race
# detector on, including the generated-code freshness check (needs protoc,
# skipped without it unless CI is set) and a 20-second end-to-end demo.
set -euo pipefail
cd "$(dirname "$0")"
exec go test -race -count=1 -timeout 25m ./... "$@"
