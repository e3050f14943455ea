#!/usr/bin/env bash
# The digital twin's check (issue 24 item 6): run a demo, read its brokers
# back, and compare the twin with the live TTFT p50/p99 and KV hit rate the
# demo measured (bench/twin/compare.sh: export-trace, export-fleet, sim
# --fleet-from, policy switchyard). Goal: TTFT within 20%, KV hit within 10
# points. See docs/sim.md ("Digital twin").
#
# result.json also compares each engine's TTFT (live from the trace's
# engine_id/ttft_ms, twin from sim --requests) and reports the demo's
# stall probe: live.stalls, and live.disturbed when the stalls the
# process suffered could by themselves fill the live p99 tail (the
# requests whose TTFT spanned one, estimated as the request rate times
# each stall plus the live p50, add up to 1% of the requests or more).
# The live numbers then measure the machine, not the fleet: re-run on a
# quieter machine.
#
# Usage: bench/twin/run.sh [DURATION [WORKDIR [DEMO FLAGS...]]]
#   DURATION  demo load duration (default 5m)
#   WORKDIR   where the data, trace, fleet and results go (default: a temp dir)
#   DEMO FLAGS are passed to switchyard demo (e.g. --rate 16 --seed 2)
# Needs jq. Exits 0 when every goal is met, 1 when one is missed, 3 when
# the live run was disturbed (no verdict either way).
set -euo pipefail
cd "$(dirname "$0")/../.."
dur=${1:-5m}
dir=${2:-$(mktemp -d /tmp/twin.XXXXXX)}
shift $(( $# < 2 ? $# : 2 ))
mkdir -p "$dir"
bin=$dir/switchyard
go build -o "$bin" ./services/switchyard
rm -rf "$dir/data"

from=$(date +%s%3N)
flock -o /tmp/bench.lock "$bin" demo --duration "$dur" --data-dir "$dir/data" --json \
	--kafka-listen 127.0.0.1:0 --nats-listen 127.0.0.1:0 --gateway-listen 127.0.0.1:0 \
	--metrics-listen "" --console-listen "" "$@" >"$dir/demo.out" 2>"$dir/demo.err"
to=$(date +%s%3N)
tail -n 1 "$dir/demo.out" >"$dir/live.json"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" brokers --data-dir "$dir/data" --kafka-listen "127.0.0.1:$port" --nats-listen 127.0.0.1:0 >"$dir/brokers.log" 2>&1 &
brokers=$!
trap 'kill $brokers 2>/dev/null || true' EXIT
for _ in $(seq 100); do
	(echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done

bench/twin/compare.sh "$bin" "127.0.0.1:$port" "$from" "$to" "$dir" || rc=$?
echo "workdir: $dir"
exit "${rc:-0}"
