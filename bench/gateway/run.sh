#!/usr/bin/env bash
# Side-by-side benchmark of the gateway's proxy overhead, on this machine:
# wrk POSTs streaming chat completions (50 SSE tokens each) against
#   (a) enginesim directly,
#   (b) `switchyard gateway --snapshot-file` in front of it,
#   (c) nginx as a plain streaming reverse proxy in front of it,
# and prints throughput and p50/p99 latency of each plus the gateway/nginx
# ratios.
#
# Two phases: (1) closed loop, CONNS connections as fast as they go, for
# throughput; (2) paced near RATE requests/s (each of PACED_CONNS
# connections waits PACED_CONNS/RATE minus the direct p50 between
# requests), for latency at a fixed load.
#
# usage: bench/gateway/run.sh [duration=10s] [connections=32]
# needs: wrk and nginx (apt-get install -y wrk nginx), Go.
# env:   SWITCHYARD_BIN (default: build /tmp/switchyard from services/switchyard),
#        TIME_SCALE (enginesim speed-up, default 100), REPLICAS (default 16),
#        RATE (default 2000; 0 skips phase 2), PACED_CONNS (default 128),
#        PROXY_CPUS (default 1: the gateway's GOMAXPROCS and nginx's
#        worker_processes, so both proxies get the same CPU budget; on a
#        2-core machine shared with wrk and the engine, 1 avoids cross-core
#        hand-offs for both),
#        BASE_PORT (default 18000).
set -euo pipefail
DURATION=${1:-10s}
CONNS=${2:-32}
TIME_SCALE=${TIME_SCALE:-100}
RATE=${RATE:-2000}
PACED_CONNS=${PACED_CONNS:-128}
PROXY_CPUS=${PROXY_CPUS:-1}
REPLICAS=${REPLICAS:-16}
BASE_PORT=${BASE_PORT:-18000}
ENGINE=127.0.0.1:$BASE_PORT
GATEWAY=127.0.0.1:$((BASE_PORT + 80))
NGINX=127.0.0.1:$((BASE_PORT + 81))
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

for t in wrk nginx go curl; do
  command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y wrk nginx)" >&2; exit 1; }
done

cd "$ROOT"
BIN=${SWITCHYARD_BIN:-}
if [ -z "$BIN" ]; then
  BIN=/tmp/switchyard
  go build -o "$BIN" ./services/switchyard
fi

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

"$BIN" enginesim --listen "$ENGINE" --id sim-0 --time-scale "$TIME_SCALE" --replicas "$REPLICAS" \
  --default-max-tokens 50 2>"$WORK/enginesim.log" &
PIDS+=($!)
wait_http "http://$ENGINE/health"

cat >"$WORK/snapshot.json" <<JSON
{"schemaVersion":1,"version":"1","clusters":[{"cluster":"bench","weights":[
  {"engineId":"sim-0","endpointUrl":"http://$ENGINE","weight":1}]}]}
JSON
GOMAXPROCS=$PROXY_CPUS "$BIN" gateway --cluster bench --listen "$GATEWAY" --snapshot-file "$WORK/snapshot.json" \
  --nats-url "" --kafka-brokers "" --log-level warn 2>"$WORK/gateway.log" &
PIDS+=($!)
wait_http "http://$GATEWAY/health"

mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes $PROXY_CPUS;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  upstream engine { server $ENGINE; keepalive 256; }
  server {
    listen $NGINX;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_cache off;
      proxy_read_timeout 60s;
    }
  }
}
CONF
nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g 'daemon off;' 2>"$WORK/nginx/stderr.log" &
PIDS+=($!)
wait_http "http://$NGINX/health"

run_wrk() { # name addr connections [delay_ms]
  # Warm up connections and caches, then measure.
  WRK_DELAY_MS=${4:-0} wrk -t2 -c"$3" -d2s -s "$HERE/post.lua" "http://$2/v1/chat/completions" >/dev/null
  local out
  out=$(WRK_DELAY_MS=${4:-0} wrk -t2 -c"$3" -d"$DURATION" --latency -s "$HERE/post.lua" "http://$2/v1/chat/completions")
  echo "$out" | grep '^RESULT' | sed "s/^RESULT/$1/"
}

report() {
  awk '
  { name=$1; for (i=2;i<=NF;i++) { split($i,kv,"="); v[name,kv[1]]=kv[2] } names[++n]=name }
  END {
    printf "%-8s %10s %10s %10s %8s\n", "target", "req/s", "p50 ms", "p99 ms", "errors"
    for (i=1;i<=n;i++) { k=names[i]; printf "%-8s %10.1f %10.3f %10.3f %8d\n", k, v[k,"rps"], v[k,"p50_ms"], v[k,"p99_ms"], v[k,"errors"] }
    printf "gateway/nginx throughput ratio: %.3f\n", v["gateway","rps"]/v["nginx","rps"]
    printf "gateway/nginx p99 ratio:        %.3f\n", v["gateway","p99_ms"]/v["nginx","p99_ms"]
    printf "added p99 over direct: gateway %+.3f ms, nginx %+.3f ms\n", v["gateway","p99_ms"]-v["direct","p99_ms"], v["nginx","p99_ms"]-v["direct","p99_ms"]
  }'
}

echo "== closed loop: $CONNS connections, $DURATION per target, 50-token SSE responses (enginesim time-scale $TIME_SCALE, $REPLICAS replicas; proxies on $PROXY_CPUS CPU)"
RES=$(
  run_wrk direct "$ENGINE" "$CONNS"
  run_wrk gateway "$GATEWAY" "$CONNS"
  run_wrk nginx "$NGINX" "$CONNS"
)
echo "$RES" | report

if [ "$RATE" -gt 0 ]; then
  P50=$(echo "$RES" | awk '$1=="direct" { for (i=2;i<=NF;i++) { split($i,kv,"="); if (kv[1]=="p50_ms") print kv[2] } }')
  DELAY=$(awk -v c="$PACED_CONNS" -v r="$RATE" -v p="$P50" 'BEGIN { d=c*1000/r-p; if (d<1) d=1; printf "%d", d }')
  echo
  echo "== paced near $RATE req/s: $PACED_CONNS connections, ${DELAY} ms between requests per connection"
  run_wrk direct "$ENGINE" "$PACED_CONNS" "$DELAY" >"$WORK/paced"
  run_wrk gateway "$GATEWAY" "$PACED_CONNS" "$DELAY" >>"$WORK/paced"
  run_wrk nginx "$NGINX" "$PACED_CONNS" "$DELAY" >>"$WORK/paced"
  report <"$WORK/paced"
fi
