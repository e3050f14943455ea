#!/usr/bin/env bash
# Overload benchmark (issues 12 and 22): one L4-class enginesim engine
# (batch limit 48) behind `switchyard gateway` with default flags (static
# engine, no control plane); bench/overload measures the engine's capacity
# directly, then offers 2x and 10x that rate to the gateway and prints
# goodput, the share of rejections that were 429 with Retry-After, and
# rejection and served latencies. Exits non-zero if a goal is missed
# (goodput >= 90% of capacity; every rejection 429 + Retry-After, 0 5xx;
# rejection p99 <= 50 ms).
#
# usage: bench/overload/run.sh [window=20s] [mults=2,10]
# env:   SWITCHYARD_BIN (default: build /tmp/switchyard-overload), BASE_PORT
#        (default 18100), GATEWAY_FLAGS (extra gateway flags).
set -euo pipefail
WINDOW=${1:-20s}
MULTS=${2:-2,10}
PORT=${BASE_PORT:-18100}
cd "$(dirname "$0")/../.."
BIN=${SWITCHYARD_BIN:-/tmp/switchyard-overload}
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  go build -o "$BIN" ./services/switchyard
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$BIN" enginesim --listen 127.0.0.1:$PORT --id sim --gpu-class l4 >/tmp/overload-engine.log 2>&1 &
pids+=($!)
# shellcheck disable=SC2086
"$BIN" gateway --cluster local --listen 127.0.0.1:$((PORT + 1)) --engines sim=http://127.0.0.1:$PORT \
  --nats-url "" --kafka-brokers "" --log-level warn ${GATEWAY_FLAGS:-} >/tmp/overload-gateway.log 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf http://127.0.0.1:$((PORT + 1))/health >/dev/null && curl -sf http://127.0.0.1:$PORT/health >/dev/null && break
  sleep 0.1
done
go run ./bench/overload -engine http://127.0.0.1:$PORT -gateway http://127.0.0.1:$((PORT + 1)) -window "$WINDOW" -mults "$MULTS"
