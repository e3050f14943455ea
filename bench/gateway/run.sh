#!/usr/bin/env bash
# Side-by-side benchmark of the gateway's proxy overhead, on this machine:
# wrk POSTs streaming chat completions (50 SSE tokens each) against
#   (a) enginesim directly,
#   (b) `switchyard gateway --snapshot-file` in front of it (its defaults:
#       the own HTTP/1.1 server loop, engine client and JSON scan, raw
#       recvfrom/sendto socket calls),
#   (c) the same gateway with net/http's server and client
#       (`--http-server std --engine-client std`: "gwstd"; STD=0 skips it),
#   (d) the default gateway without raw socket calls
#       (`--raw-syscalls=false`: "gwsys"; RAW=0 skips it),
#   (e) nginx as a plain streaming reverse proxy in front of it,
# and prints throughput and p50/p99 latency of each plus the gateway/nginx
# (and gwstd/nginx, gateway/gwstd, gwsys/nginx, gateway/gwsys) ratios.
# The whole run holds `flock /tmp/bench.lock` (the shared-machine rule for
# timing-sensitive work), so concurrent runs queue instead of skewing each
# other.
#
# Two phases: (1) closed loop, CONNS connections as fast as they go, for
# throughput; (2) paced near RATE requests/s (each of PACED_CONNS
# connections waits PACED_CONNS/RATE minus the direct p50 between
# requests), for latency at a fixed load.
#
# The machine is shared, so the background load drifts: each phase runs
# ROUNDS rounds of DURATION per target, the order of the targets rotated
# each round, and reports per target the median over rounds, and the
# median (and range) of the per-round gateway/nginx ratios. It also
# prints each proxy's own CPU time per request (utime+stime of its
# processes over the round / requests; and the user part of it), the
# steadiest measure of a proxy's cost here, and the engine's; and each
# gateway's heap allocations per request (go_memstats_mallocs_total).
#
# usage: bench/gateway/run.sh [duration=5s] [connections=32]
# needs: wrk and nginx (apt-get install -y wrk nginx), Go.
# env:   SWITCHYARD_BIN (default: build /tmp/switchyard from services/switchyard),
#        ROUNDS (default 5),
#        TIME_SCALE (enginesim speed-up, default 100), REPLICAS (default 16),
#        RATE (default 2000; 0 skips phase 2), PACED_CONNS (default 128),
#        PROXY_CPUS (default 1: the gateway's GOMAXPROCS and nginx's
#        worker_processes, so both proxies get the same CPU budget; on a
#        2-core machine shared with wrk and the engine, 1 avoids cross-core
#        hand-offs for both),
#        GATEWAY_ENV (extra environment for both gateways, e.g. GOGC=200),
#        STD (default 1: also measure the net/http gateway),
#        RAW (default 1: also measure the gateway with --raw-syscalls=false),
#        KEEP_RAW (a directory to copy the per-round results to),
#        BASE_PORT (default 18000).
set -euo pipefail
if [ -z "${BENCH_LOCKED:-}" ] && command -v flock >/dev/null; then
  BENCH_LOCKED=1 exec flock -o /tmp/bench.lock "$0" "$@"
fi
DURATION=${1:-5s}
CONNS=${2:-32}
TIME_SCALE=${TIME_SCALE:-100}
ROUNDS=${ROUNDS:-5}
GATEWAY_ENV=${GATEWAY_ENV:-}
STD=${STD:-1}
RAW=${RAW:-1}
RATE=${RATE:-2000}
PACED_CONNS=${PACED_CONNS:-128}
PROXY_CPUS=${PROXY_CPUS:-1}
REPLICAS=${REPLICAS:-16}
BASE_PORT=${BASE_PORT:-18000}
ENGINE=127.0.0.1:$BASE_PORT
GATEWAY=127.0.0.1:$((BASE_PORT + 80))
NGINX=127.0.0.1:$((BASE_PORT + 81))
GWSTD=127.0.0.1:$((BASE_PORT + 82))
GWSYS=127.0.0.1:$((BASE_PORT + 83))
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
ENGINE_PID=${PIDS[-1]}
wait_http "http://$ENGINE/health"

cat >"$WORK/snapshot.json" <<JSON
{"schemaVersion":1,"version":"1","clusters":[{"cluster":"bench","weights":[
  {"engineId":"sim-0","endpointUrl":"http://$ENGINE","weight":1}]}]}
JSON
env GOMAXPROCS=$PROXY_CPUS $GATEWAY_ENV "$BIN" gateway --cluster bench --listen "$GATEWAY" --snapshot-file "$WORK/snapshot.json" \
  --nats-url "" --kafka-brokers "" --log-level warn 2>"$WORK/gateway.log" &
PIDS+=($!)
wait_http "http://$GATEWAY/health"
GATEWAY_PID=${PIDS[-1]}
NAMES=(direct gateway nginx)
if [ "$STD" = 1 ]; then
  env GOMAXPROCS=$PROXY_CPUS $GATEWAY_ENV "$BIN" gateway --cluster bench --listen "$GWSTD" --snapshot-file "$WORK/snapshot.json" \
    --nats-url "" --kafka-brokers "" --log-level warn --http-server std --engine-client std 2>"$WORK/gwstd.log" &
  PIDS+=($!)
  wait_http "http://$GWSTD/health"
  GWSTD_PID=${PIDS[-1]}
  NAMES=(direct gateway gwstd nginx)
fi
if [ "$RAW" = 1 ]; then
  env GOMAXPROCS=$PROXY_CPUS $GATEWAY_ENV "$BIN" gateway --cluster bench --listen "$GWSYS" --snapshot-file "$WORK/snapshot.json" \
    --nats-url "" --kafka-brokers "" --log-level warn --raw-syscalls=false 2>"$WORK/gwsys.log" &
  PIDS+=($!)
  wait_http "http://$GWSYS/health"
  GWSYS_PID=${PIDS[-1]}
  NAMES+=(gwsys)
fi

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
NGINX_PID=$!
wait_http "http://$NGINX/health"

cpu_ticks() { # pid...: utime+stime of the processes and their children, in clock ticks
  local t=0 p
  for p in "$@" $(for q in "$@"; do pgrep -P "$q" || true; done); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat")))
  done
  echo "$t"
}
user_ticks() { # pid...: utime only
  local t=0 p
  for p in "$@" $(for q in "$@"; do pgrep -P "$q" || true; done); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14}' "/proc/$p/stat")))
  done
  echo "$t"
}
HZ=$(getconf CLK_TCK)

warm() { # addr connections
  wrk -t2 -c"$2" -d2s -s "$HERE/post.lua" "http://$1/v1/chat/completions" >/dev/null
}

mallocs() { # addr: the gateway's heap allocations so far (0 for others)
  curl -fsS "http://$1/metrics" 2>/dev/null | awk '$1 == "go_memstats_mallocs_total" { printf "%d", $2; f = 1 } END { if (!f) print 0 }'
}

measure() { # name addr connections delay_ms pids...: one RESULT line plus cpu_us (proxy CPU per request), engine_us and allocs (per request)
  local name=$1 addr=$2 conns=$3 delay=$4 out c0 c1 u0 u1 e0 e1 m0 m1 req
  shift 4
  m0=$(mallocs "$addr")
  c0=$(cpu_ticks "$@")
  u0=$(user_ticks "$@")
  e0=$(cpu_ticks "$ENGINE_PID")
  out=$(WRK_DELAY_MS=$delay wrk -t2 -c"$conns" -d"$DURATION" --latency -s "$HERE/post.lua" "http://$addr/v1/chat/completions" | grep '^RESULT')
  c1=$(cpu_ticks "$@")
  u1=$(user_ticks "$@")
  e1=$(cpu_ticks "$ENGINE_PID")
  m1=$(mallocs "$addr")
  req=$(echo "$out" | sed 's/.*requests=\([0-9]*\).*/\1/')
  echo "$out" | sed "s/^RESULT/$name/" | awk -v c=$((c1 - c0)) -v u=$((u1 - u0)) -v m=$((m1 - m0)) -v e=$((e1 - e0)) -v hz="$HZ" -v r="$req" -v has=$# \
    '{ cpu = (has > 0 && r > 0) ? c * 1e6 / hz / r : -1; usr = (has > 0 && r > 0) ? u * 1e6 / hz / r : -1; eng = r > 0 ? e * 1e6 / hz / r : -1; print $0, "cpu_us=" cpu, "user_us=" usr, "engine_us=" eng, "allocs=" (r > 0 ? m / r : 0) }'
}

phase() { # connections delay_ms: ROUNDS rotated rounds over the targets
  local r i k n=${#NAMES[@]}
  for ((r = 0; r < ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
      k=${NAMES[$(((i + r) % n))]}
      case $k in
      direct) measure direct "$ENGINE" "$1" "$2" | sed "s/^/$r /" ;;
      gateway) measure gateway "$GATEWAY" "$1" "$2" "$GATEWAY_PID" | sed "s/^/$r /" ;;
      gwstd) measure gwstd "$GWSTD" "$1" "$2" "$GWSTD_PID" | sed "s/^/$r /" ;;
      gwsys) measure gwsys "$GWSYS" "$1" "$2" "$GWSYS_PID" | sed "s/^/$r /" ;;
      nginx) measure nginx "$NGINX" "$1" "$2" "$NGINX_PID" | sed "s/^/$r /" ;;
      esac
    done
  done
}

report() { # lines "round name requests=.. rps=.. p50_ms=.. p99_ms=.. errors=.. cpu_us=.."
  TARGETS="${NAMES[*]}" awk '
  function median(a, n,   i, j, t, b) {
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 2; i <= n; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
    return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
  }
  function minmax(a, n,   i) { lo = a[1]; hi = a[1]; for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] } }
  { r = $1; name = $2; for (i = 3; i <= NF; i++) { split($i, kv, "="); v[r, name, kv[1]] = kv[2] } if (r + 1 > R) R = r + 1 }
  END {
    names = ENVIRON["TARGETS"]; T = split(names, tn, " ")
    printf "%-8s %10s %10s %10s %8s %12s %10s %12s %11s   (medians of %d rounds)\n", "target", "req/s", "p50 ms", "p99 ms", "errors", "proxy us/req", "of it user", "engine us/req", "allocs/req", R
    for (t = 1; t <= T; t++) {
      k = tn[t]; err = 0
      for (r = 0; r < R; r++) { a1[r + 1] = v[r, k, "rps"]; a2[r + 1] = v[r, k, "p50_ms"]; a3[r + 1] = v[r, k, "p99_ms"]; a4[r + 1] = v[r, k, "cpu_us"]; a5[r + 1] = v[r, k, "engine_us"]; a6[r + 1] = v[r, k, "user_us"]; a7[r + 1] = v[r, k, "allocs"]; err += v[r, k, "errors"] }
      cpu = median(a4, R); usr = median(a6, R); al = median(a7, R)
      printf "%-8s %10.1f %10.3f %10.3f %8d %12s %10s %13.0f %11s\n", k, median(a1, R), median(a2, R), median(a3, R), err, cpu < 0 ? "-" : sprintf("%.0f", cpu), cpu < 0 ? "-" : sprintf("%.0f", usr), median(a5, R), (al > 0 ? sprintf("%.0f", al) : "-")
    }
    for (r = 0; r < R; r++) {
      tr[r + 1] = v[r, "gateway", "rps"] / v[r, "nginx", "rps"]
      pr[r + 1] = v[r, "gateway", "p99_ms"] / v[r, "nginx", "p99_ms"]
      cr[r + 1] = v[r, "gateway", "cpu_us"] / v[r, "nginx", "cpu_us"]
      ur[r + 1] = v[r, "nginx", "user_us"] > 0 ? v[r, "gateway", "user_us"] / v[r, "nginx", "user_us"] : 0
      ag[r + 1] = v[r, "gateway", "p99_ms"] - v[r, "direct", "p99_ms"]
      an[r + 1] = v[r, "nginx", "p99_ms"] - v[r, "direct", "p99_ms"]
    }
    minmax(tr, R); printf "gateway/nginx throughput ratio: %.3f (rounds %.3f..%.3f)\n", median(tr, R), lo, hi
    minmax(pr, R); printf "gateway/nginx p99 ratio:        %.3f (rounds %.3f..%.3f)\n", median(pr, R), lo, hi
    minmax(cr, R); printf "gateway/nginx cpu per request:  %.3f (rounds %.3f..%.3f)\n", median(cr, R), lo, hi
    minmax(ur, R); printf "  of it user (gateway/nginx):   %.3f (rounds %.3f..%.3f)\n", median(ur, R), lo, hi
    printf "added p99 over direct (median of rounds): gateway %+.3f ms, nginx %+.3f ms\n", median(ag, R), median(an, R)
    if (names ~ /gwstd/) {
      for (r = 0; r < R; r++) {
        sr[r + 1] = v[r, "gwstd", "cpu_us"] / v[r, "nginx", "cpu_us"]
        gs[r + 1] = v[r, "gateway", "cpu_us"] / v[r, "gwstd", "cpu_us"]
        st[r + 1] = v[r, "gwstd", "rps"] / v[r, "nginx", "rps"]
      }
      minmax(st, R); printf "gwstd/nginx throughput ratio:   %.3f (rounds %.3f..%.3f)\n", median(st, R), lo, hi
      minmax(sr, R); printf "gwstd/nginx cpu per request:    %.3f (rounds %.3f..%.3f)\n", median(sr, R), lo, hi
      minmax(gs, R); printf "gateway/gwstd cpu per request:  %.3f (rounds %.3f..%.3f)\n", median(gs, R), lo, hi
    }
    if (names ~ /gwsys/) {
      for (r = 0; r < R; r++) {
        rn[r + 1] = v[r, "gwsys", "cpu_us"] / v[r, "nginx", "cpu_us"]
        rg[r + 1] = v[r, "gateway", "cpu_us"] / v[r, "gwsys", "cpu_us"]
        rt[r + 1] = v[r, "gwsys", "rps"] / v[r, "nginx", "rps"]
      }
      minmax(rt, R); printf "gwsys/nginx throughput ratio:   %.3f (rounds %.3f..%.3f)\n", median(rt, R), lo, hi
      minmax(rn, R); printf "gwsys/nginx cpu per request:    %.3f (rounds %.3f..%.3f)\n", median(rn, R), lo, hi
      minmax(rg, R); printf "gateway/gwsys cpu per request:  %.3f (rounds %.3f..%.3f)\n", median(rg, R), lo, hi
    }
  }'
}

echo "== closed loop: $CONNS connections, $ROUNDS rounds of $DURATION per target, 50-token SSE responses (enginesim time-scale $TIME_SCALE, $REPLICAS replicas; proxies on $PROXY_CPUS CPU)"
for a in "$ENGINE" "$GATEWAY" "$NGINX" ${GWSTD_PID:+"$GWSTD"} ${GWSYS_PID:+"$GWSYS"}; do warm "$a" "$CONNS"; done
RES=$(phase "$CONNS" 0)
echo "$RES" >"$WORK/closed"
report <"$WORK/closed"

if [ "$RATE" -gt 0 ]; then
  P50=$(awk '$2=="direct" { for (i=3;i<=NF;i++) { split($i,kv,"="); if (kv[1]=="p50_ms") print kv[2] } }' "$WORK/closed" | sort -n | awk '{ a[NR]=$1 } END { print a[int((NR+1)/2)] }')
  DELAY=$(awk -v c="$PACED_CONNS" -v r="$RATE" -v p="$P50" 'BEGIN { d=c*1000/r-p; if (d<1) d=1; printf "%d", d }')
  echo
  echo "== paced near $RATE req/s: $PACED_CONNS connections, ${DELAY} ms between requests per connection, $ROUNDS rounds of $DURATION per target"
  for a in "$ENGINE" "$GATEWAY" "$NGINX" ${GWSTD_PID:+"$GWSTD"} ${GWSYS_PID:+"$GWSYS"}; do warm "$a" "$PACED_CONNS"; done
  phase "$PACED_CONNS" "$DELAY" >"$WORK/paced"
  report <"$WORK/paced"
fi
if [ -n "${KEEP_RAW:-}" ]; then cp "$WORK"/closed "$WORK"/paced "$KEEP_RAW"/ 2>/dev/null || true; fi
