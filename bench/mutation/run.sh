#!/usr/bin/env bash
# Mutation testing (issue 26, docs/testing.md): one-line mutations of the
# non-test code of each package, each run against the package's tests
# through `go test -overlay` (no file in the tree is written). Prints, per
# package, the score with and without the golden-file tests and every
# survivor's file:line and mutation. Each go test runs under
# `flock -o /tmp/bench.lock`, so it takes turns with the benchmarks.
#
# usage: bench/mutation/run.sh [flags] [packages]
#   flags as `go run ./bench/mutation -h`: -limit N -seed S (a seeded
#   sample per package), -skip-golden, -json, -only file:line, -list
#   packages default: the four of issue 26
# env:  REV=<commit>  measure that commit, exported with git archive to a
#       temporary directory, instead of the working tree (which other
#       engineers may be editing)
set -euo pipefail
cd "$(dirname "$0")/../.."
LOCK=${LOCK:-/tmp/bench.lock}
flags=()
pkgs=()
for a in "$@"; do
  case "$a" in
  -*) flags+=("$a") ;;
  *) if [ ${#flags[@]} -gt 0 ] && [[ "${flags[-1]}" =~ ^-(limit|seed|golden|timeout|only|ops|lock|run|from)$ ]]; then flags+=("$a"); else pkgs+=("$a"); fi ;;
  esac
done
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./streams/process ./gateway/pick ./gateway/admit ./optimizer)
work=$(mktemp -d /tmp/mutation.XXXXXX)
trap 'rm -rf "$work"' EXIT
go build -o "$work/mutation" ./bench/mutation
if [ -n "${REV:-}" ]; then
  git archive "$REV" | tar -x -C "$work" --one-top-level=src
  echo "measuring $(git rev-parse --short "$REV") in $work/src" >&2
  cd "$work/src"
fi
"$work/mutation" -lock "$LOCK" "${flags[@]}" "${pkgs[@]}"
