#!/usr/bin/env bash
# Runs a demo and reads every topic from outside with `switchyard tap`
# while it runs, then reports: records with both headers (content-type and
# message), successful routing events with the billing fields (prompt and
# output tokens, tenant, finish reason, engine region and GPU class,
# affinity-key hash, completion time, attempts), and routing events per
# partition. docs/tap.md quotes its output.
#
#   bench/datacontract/run.sh [SECONDS]   (default 40; needs jq)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-40}
out=$(mktemp -d)
trap 'kill "$demo" 2>/dev/null || true; rm -rf "$out"' EXIT
go build -o "$out/switchyard" ./services/switchyard
kafka=127.0.0.1:29192
"$out/switchyard" demo --duration "$((secs + 30))s" --kafka-listen "$kafka" --nats-listen 127.0.0.1:29222 \
  --gateway-listen 127.0.0.1:29080 --metrics-listen 127.0.0.1:29100 --console-listen "" >"$out/demo.out" 2>&1 &
demo=$!
for _ in $(seq 60); do grep -q '^ready' "$out/demo.out" 2>/dev/null && break; sleep 1; done
sleep "$secs"
total=0
for t in signals routing-events estimates deadletter checkpoints; do
  "$out/switchyard" tap "$t" --kafka-brokers "$kafka" >"$out/$t.jsonl"
  total=$((total + $(wc -l <"$out/$t.jsonl")))
done
headers=$(cat "$out"/*.jsonl | jq -c 'select((._kafka.headers["content-type"] == "application/x-protobuf" or ._kafka.headers["content-type"] == "application/json") and (._kafka.headers.message // "" | startswith("switchyard.v1.")))' | wc -l)
ok=$(jq -c 'select(.status == "REQUEST_STATUS_OK")' "$out/routing-events.jsonl" | wc -l)
full=$(jq -c 'select(.status == "REQUEST_STATUS_OK" and .prompt_tokens > 0 and .output_tokens > 0 and .tenant != "" and .finish_reason != ""
  and .engine_region != "" and .engine_gpu_class != "" and .affinity_key_hash > 0 and .completion_time_unix_ms >= .event_time_unix_ms
  and (.tried | length) >= 1)' "$out/routing-events.jsonl" | wc -l)
parts=$(jq -r '._kafka.partition' "$out/routing-events.jsonl" | sort | uniq -c | awk '{printf "%s%s:%s", sep, $2, $1; sep=" "}')
echo "records $total, with both headers $headers; successful routing events $ok, with the billing fields $full; routing events by partition $parts"
