#!/usr/bin/env bash
# The digital twin's check (issue 24 item 6): run a demo, read its brokers
# back, export the range's traffic (export-trace) and fleet (export-fleet),
# replay the traffic through the fleet's twin (sim --fleet-from, policy
# switchyard) and compare the simulated TTFT p50/p99 and KV hit rate with
# the live ones the demo measured. Goal: TTFT within 20%, KV hit within 10
# points. See docs/sim.md ("Digital twin").
#
# Usage: bench/twin/run.sh [DURATION [WORKDIR [DEMO FLAGS...]]]
#   DURATION  demo load duration (default 5m)
#   WORKDIR   where the data, trace, fleet and results go (default: a temp dir)
#   DEMO FLAGS are passed to switchyard demo (e.g. --rate 16 --seed 2)
# Needs jq. Exits 1 when a goal is missed.
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

"$bin" export-trace --kafka-brokers "127.0.0.1:$port" --from "$from" --to "$to" --out "$dir/trace.jsonl" >"$dir/export-trace.json"
"$bin" export-fleet --kafka-brokers "127.0.0.1:$port" --from "$from" --to "$to" --out "$dir/fleet.json" >"$dir/export-fleet.json"
flock -o /tmp/bench.lock "$bin" sim --fleet-from "$dir/fleet.json" --trace "$dir/trace.jsonl" --policies switchyard --json \
	>"$dir/sim.out"
tail -n 1 "$dir/sim.out" >"$dir/sim.json"

jq -n --slurpfile live "$dir/live.json" --slurpfile sim "$dir/sim.json" '
	($live[0]) as $l | ($sim[0].policies.switchyard) as $s |
	def ratio(a; b): if b > 0 then a / b else null end;
	{live: {requests: $l.requests, ttft_p50: $l.ttft_ms.p50, ttft_p99: $l.ttft_ms.p99, kv_hit: $l.kv_hit_rate},
	 sim: {requests: $s.requests, ttft_p50: $s.ttft_ms.p50, ttft_p99: $s.ttft_ms.p99, kv_hit: $s.kv_hit_rate},
	 p50_ratio: ratio($s.ttft_ms.p50; $l.ttft_ms.p50), p99_ratio: ratio($s.ttft_ms.p99; $l.ttft_ms.p99),
	 kv_points: (100 * ($s.kv_hit_rate - $l.kv_hit_rate))}
	| .goals = {p50: (.p50_ratio != null and (.p50_ratio - 1 | fabs) <= 0.2),
	            p99: (.p99_ratio != null and (.p99_ratio - 1 | fabs) <= 0.2),
	            kv: ((.kv_points | fabs) <= 10)}' | tee "$dir/result.json"
echo "workdir: $dir"
jq -e '.goals.p50 and .goals.p99 and .goals.kv' "$dir/result.json" >/dev/null
