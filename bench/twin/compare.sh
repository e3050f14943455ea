#!/usr/bin/env bash
# The digital twin's comparison, shared by bench/twin/run.sh (a demo) and
# bench/live/run.sh with TWIN=1 (the multi-process pipeline on enginesim
# processes with vLLM's metrics): export the range's traffic
# (export-trace) and fleet (export-fleet) from the live brokers, replay
# the traffic through the fleet's twin (sim --fleet-from, policy
# switchyard), and compare the twin's TTFT p50/p99 and KV hit rate with
# the live ones. Goals: TTFT within 20%, KV hit within 10 points.
#
# usage: bench/twin/compare.sh BIN KAFKA FROM TO DIR
#   BIN    the switchyard binary
#   KAFKA  host:port of the live run's Kafka
#   FROM, TO  the live range (Unix ms)
#   DIR    holds live.json: {"requests", "ttft_ms": {"p50", "p99"},
#          "kv_hit_rate"}, and "stalls" when the run had a stall probe
#          (switchyard demo --json); the trace, fleet and results go there
# Writes DIR/result.json. Exit 0: goals met; 1: one missed; 3: the live run
# was disturbed (its stalls could fill its p99 tail), no verdict.
set -euo pipefail
bin=$1 kafka=$2 from=$3 to=$4 dir=$5
LOCK=${LOCK:-/tmp/bench.lock}

"$bin" export-trace --kafka-brokers "$kafka" --from "$from" --to "$to" --out "$dir/trace.jsonl" >"$dir/export-trace.json"
"$bin" export-fleet --kafka-brokers "$kafka" --from "$from" --to "$to" --out "$dir/fleet.json" >"$dir/export-fleet.json"
flock -o "$LOCK" "$bin" sim --fleet-from "$dir/fleet.json" --trace "$dir/trace.jsonl" --policies switchyard --json \
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
	(if $l.duration_s > 0 then ($l.requests / $l.duration_s) * (($st.stalled_ms // 0) + ($st.stalls // 0) * $l.ttft_ms.p50) / 1000 else 0 end) as $exposed |
	{live: {requests: $l.requests, ttft_p50: $l.ttft_ms.p50, ttft_p99: $l.ttft_ms.p99, kv_hit: $l.kv_hit_rate,
	        stalls: {count: $st.stalls, stalled_ms: $st.stalled_ms, max_ms: $st.max_ms, gc_pause_max_ms: $st.gc_pause_max_ms,
	                 worst: $st.worst, exposed_requests: ($exposed * 10 | round / 10)},
	        disturbed: ($l.stalls != null and $exposed >= 0.01 * $l.requests)},
	 sim: {requests: $s.requests, ttft_p50: $s.ttft_ms.p50, ttft_p99: $s.ttft_ms.p99, kv_hit: $s.kv_hit_rate},
	 p50_ratio: ratio($s.ttft_ms.p50; $l.ttft_ms.p50), p99_ratio: ratio($s.ttft_ms.p99; $l.ttft_ms.p99),
	 kv_points: (100 * ($s.kv_hit_rate - $l.kv_hit_rate)),
	 engines: $engines[0]}
	| .goals = {p50: (.p50_ratio != null and (.p50_ratio - 1 | fabs) <= 0.2),
	            p99: (.p99_ratio != null and (.p99_ratio - 1 | fabs) <= 0.2),
	            kv: ((.kv_points | fabs) <= 10)}' | tee "$dir/result.json"
if jq -e '.live.disturbed' "$dir/result.json" >/dev/null; then
	echo "the live run was disturbed (stalls could fill its p99 tail): no verdict; re-run on a quieter machine" >&2
	exit 3
fi
jq -e '.goals.p50 and .goals.p99 and .goals.kv' "$dir/result.json" >/dev/null
