#!/usr/bin/env bash
# The digital twin's check (issue 24 item 6): run a demo, read its brokers
# back, export the range's traffic (export-trace) and fleet (export-fleet),
# replay the traffic through the fleet's twin (sim --fleet-from, policy
# switchyard) and compare the simulated TTFT p50/p99 and KV hit rate with
# the live ones the demo measured. Goal: TTFT within 20%, KV hit within 10
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

"$bin" export-trace --kafka-brokers "127.0.0.1:$port" --from "$from" --to "$to" --out "$dir/trace.jsonl" >"$dir/export-trace.json"
"$bin" export-fleet --kafka-brokers "127.0.0.1:$port" --from "$from" --to "$to" --out "$dir/fleet.json" >"$dir/export-fleet.json"
flock -o /tmp/bench.lock "$bin" sim --fleet-from "$dir/fleet.json" --trace "$dir/trace.jsonl" --policies switchyard --json \
	--requests "$dir/sim-requests.jsonl" >"$dir/sim.out"
tail -n 1 "$dir/sim.out" >"$dir/sim.json"

# Per engine: the live TTFT of the trace's streamed requests by the engine
# that served them, the twin's by the engine it chose (nearest rank).
jq -n --slurpfile trace "$dir/trace.jsonl" --slurpfile sim "$dir/sim-requests.jsonl" '
	def q(p): sort | if length == 0 then null else .[([(p * length | ceil) - 1, 0] | max)] end;
	def by(e; t): group_by(e) | map({key: (.[0] | e), value: {n: length, ttft_p50: (map(t) | q(0.5)), ttft_p99: (map(t) | q(0.99))}}) | from_entries;
	($trace | map(select(.stream)) | by(.engine_id; .ttft_ms)) as $l |
	($sim | map(select(.status == "ok" and .stream)) | by(.engine; .ttft_ms)) as $s |
	[($l + $s) | keys[]] | unique | map({key: ., value: {live: $l[.], sim: $s[.]}}) | from_entries' >"$dir/engines.json"

jq -n --slurpfile live "$dir/live.json" --slurpfile sim "$dir/sim.json" --slurpfile engines "$dir/engines.json" '
	($live[0]) as $l | ($sim[0].policies.switchyard) as $s |
	def ratio(a; b): if b > 0 then a / b else null end;
	($l.stalls // {}) as $st |
	# Requests whose TTFT a stall spanned: those that arrived during it or
	# were waiting for their first token when it began.
	(($l.requests / $l.duration_s) * (($st.stalled_ms // 0) + ($st.stalls // 0) * $l.ttft_ms.p50) / 1000) as $exposed |
	{live: {requests: $l.requests, ttft_p50: $l.ttft_ms.p50, ttft_p99: $l.ttft_ms.p99, kv_hit: $l.kv_hit_rate,
	        stalls: {count: $st.stalls, stalled_ms: $st.stalled_ms, max_ms: $st.max_ms, gc_pause_max_ms: $st.gc_pause_max_ms,
	                 worst: $st.worst, exposed_requests: ($exposed * 10 | round / 10)},
	        disturbed: ($st.stalls == null or $exposed >= 0.01 * $l.requests)},
	 sim: {requests: $s.requests, ttft_p50: $s.ttft_ms.p50, ttft_p99: $s.ttft_ms.p99, kv_hit: $s.kv_hit_rate},
	 p50_ratio: ratio($s.ttft_ms.p50; $l.ttft_ms.p50), p99_ratio: ratio($s.ttft_ms.p99; $l.ttft_ms.p99),
	 kv_points: (100 * ($s.kv_hit_rate - $l.kv_hit_rate)),
	 engines: $engines[0]}
	| .goals = {p50: (.p50_ratio != null and (.p50_ratio - 1 | fabs) <= 0.2),
	            p99: (.p99_ratio != null and (.p99_ratio - 1 | fabs) <= 0.2),
	            kv: ((.kv_points | fabs) <= 10)}' | tee "$dir/result.json"
echo "workdir: $dir"
if jq -e '.live.disturbed' "$dir/result.json" >/dev/null; then
	echo "the live run was disturbed (stalls could fill its p99 tail): no verdict; re-run on a quieter machine" >&2
	exit 3
fi
jq -e '.goals.p50 and .goals.p99 and .goals.kv' "$dir/result.json" >/dev/null
