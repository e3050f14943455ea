#!/usr/bin/env bash
# Soak test of the gateway's HTTP servers against connection attacks:
# starts enginesim and `switchyard gateway --engines` in front of it, then
# runs bench/soak (the Go program next to this script) against the
# gateway: 250 slow-body connections (a 4 MB Content-Length, 110 bytes
# sent 10 a second), 250 slowloris heads (one byte a second) and 2,000
# idle connections, all at once for DURATION, while normal requests go
# every 50 ms. It fails when the gateway's RSS or Go heap in use (from
# its /metrics) grows by 50 MB or more, or a normal request fails. Runs
# once per HTTP server (fast, std).
#
# usage: bench/soak/run.sh [duration=20s]
# env:   SWITCHYARD_BIN (default: build /tmp/switchyard-soak),
#        SERVERS (default "fast std"), BASE_PORT (default 18500),
#        GATEWAY_FLAGS (extra gateway flags), SOAK_FLAGS (extra bench/soak flags).
set -euo pipefail
DURATION=${1:-20s}
SERVERS=${SERVERS:-fast std}
BASE_PORT=${BASE_PORT:-18500}
ENGINE=127.0.0.1:$BASE_PORT
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

# 2,500 attack connections on each side, plus the gateway's own.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 6000 ]; then
  echo "open-file limit $(ulimit -n) is below 6000" >&2; exit 1
fi

BIN=${SWITCHYARD_BIN:-}
if [ -z "$BIN" ]; then
  BIN=/tmp/switchyard-soak
  go build -o "$BIN" ./services/switchyard
fi
SOAK=/tmp/switchyard-soak-attack
go build -o "$SOAK" ./bench/soak

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_http() { # url
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "not up: $1" >&2; return 1
}

"$BIN" enginesim --listen "$ENGINE" --id sim-0 --time-scale 100 --replicas 16 \
  --default-max-tokens 5 2>"$WORK/enginesim.log" &
PIDS+=($!)
wait_http "http://$ENGINE/health"

status=0
port=$((BASE_PORT + 1))
for server in $SERVERS; do
  gw=127.0.0.1:$port
  # shellcheck disable=SC2086
  "$BIN" gateway --cluster soak --listen "$gw" --engines "sim-0=http://$ENGINE" \
    --http-server "$server" --health-interval -1s --nats-url "" --kafka-brokers "" --log-level warn ${GATEWAY_FLAGS:-} 2>"$WORK/gateway-$server.log" &
  gpid=$!
  PIDS+=($gpid)
  wait_http "http://$gw/health"
  echo "== $server server (gateway pid $gpid), $DURATION"
  # shellcheck disable=SC2086
  "$SOAK" -addr "$gw" -pid "$gpid" -duration "$DURATION" ${SOAK_FLAGS:-} || status=1
  kill "$gpid"; wait "$gpid" 2>/dev/null || true
  port=$((port + 1))
done
exit $status
