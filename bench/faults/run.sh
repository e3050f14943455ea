#!/usr/bin/env bash
# Long fault-injection run: TestFaultInjection (services/switchyard) with
# ROUNDS rounds of SIGKILL and restart of an engine, the processor, the
# optimizer and the brokers, under RPS requests per second through the
# gateway (half streaming, streams of 128 tokens). It prints, per kill,
# the time to the first snapshot of a window that ended after it and to
# the gateway routing on it, then the requests sent and failed and the
# requests the demand estimates counted. docs/faults.md quotes a run.
#
#   bench/faults/run.sh [ROUNDS] [RPS]   (default 3 rounds at 20 rps; RACE=1 adds -race)
#   SWITCHYARD_FAULTS=brokers,brokers bench/faults/run.sh   (only these faults, in this order)
set -euo pipefail
cd "$(dirname "$0")/../.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
SWITCHYARD_FAULTS_LONG=1 SWITCHYARD_FAULTS_ROUNDS="${1:-3}" SWITCHYARD_FAULTS_RPS="${2:-20}" \
  go test ${RACE:+-race} -count=1 -timeout 60m -run '^TestFaultInjection$' -v ./services/switchyard >"$log" 2>&1 || status=$?
if [ "$status" -eq 0 ]; then
  grep -E 'faults_test.go|^(--- |ok|PASS)' "$log"
else
  cat "$log"
fi
exit "$status"
