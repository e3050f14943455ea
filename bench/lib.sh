# shellcheck shell=bash
# The pieces bench/live/run.sh and bench/models/run.sh share: their common
# settings, the checks before a run, the builds, starting and stopping the
# engines' proxies and the Switchyard pipeline, and what a Switchyard cell
# leaves behind. Sourced from the repository root after the script sets
#   BENCH   its name in messages (bench/live); its runs go to /tmp/<BENCH
#           with / as ->/<date-time>/ (/tmp/bench-live/...)
#   PORT    its first port (BASE_PORT); engine i listens on PORT+i
#   FLEET   (before its helpers run) one id:... spec an engine, the id first
# Sourcing sets N, TRACE, MAX_PROMPT_TOKENS and MAX_OUTPUT_TOKENS from the
# environment (defaults 800, the Mooncake conversation trace beside the
# repository, 8192, 128), OUT, LOCK (/tmp/bench.lock, the load phases'
# lock), the ports below, and PIDS: every process started, all stopped on
# exit.
N=${N:-800}
TRACE=$(realpath -m "${TRACE:-$PWD/../shared/traces/mooncake_conversation_trace.jsonl}")
MAX_PROMPT_TOKENS=${MAX_PROMPT_TOKENS:-8192}
MAX_OUTPUT_TOKENS=${MAX_OUTPUT_TOKENS:-128}
OUT=/tmp/${BENCH//\//-}/$(date +%Y%m%d-%H%M%S)
# shellcheck disable=SC2034 # the scripts' load phases take it
LOCK=/tmp/bench.lock
PROXY=$((PORT + 10))   # nginx and HAProxy listen here
GATEWAY=$((PORT + 20)) # Switchyard's (first) gateway
KAFKA=$((PORT + 21))   # the brokers' Kafka and NATS
NATS=$((PORT + 22))
# The agent, processor and optimizer serve /metrics on PORT+23 to PORT+25.
OPTIMIZER_METRICS=$((PORT + 25))

PIDS=()
stop_all() { # SIGTERM: each engine logs its totals as it stops
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap stop_all EXIT

need() { # command how-to-install
  command -v "$1" >/dev/null || { echo "$BENCH: $1 is not installed ($2)" >&2; exit 1; }
}

# prepare port...: checks the tools every run needs, the trace and that
# the ports are free, makes OUT (and OUT's sibling latest), and builds BIN
# (unless SWITCHYARD_BIN names one) and LIVE, bench/live's load generator.
prepare() {
  local p
  need flock util-linux
  need curl "apt-get install -y curl"
  [ -r "$TRACE" ] || { echo "$BENCH: no trace at $TRACE" >&2; exit 1; }
  for p in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$BENCH: port $p is in use (another $BENCH run?); set BASE_PORT" >&2
      exit 1
    fi
  done
  mkdir -p "$OUT/cells"
  ln -sfn "$OUT" "${OUT%/*}/latest"
  BIN=${SWITCHYARD_BIN:-}
  if [ -z "$BIN" ]; then
    BIN=$OUT/switchyard
    go build -o "$BIN" ./services/switchyard
  fi
  LIVE=$OUT/live
  go build -o "$LIVE" ./bench/live
}

wait_http() { # url
  for _ in $(seq 1 200); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$BENCH: not up: $1" >&2
  return 1
}

wait_engines() { # until every engine of FLEET answers /health
  local i
  for ((i = 0; i < ${#FLEET[@]}; i++)); do wait_http "http://127.0.0.1:$((PORT + i))/health"; done
}

engine_list() { # sep: id=url of FLEET's engines, joined by sep
  local i out=()
  for ((i = 0; i < ${#FLEET[@]}; i++)); do out+=("${FLEET[$i]%%:*}=http://127.0.0.1:$((PORT + i))"); done
  (IFS=$1; echo "${out[*]}")
}

metric() { # url name-and-labels-prefix: the values of matching series, one a line
  curl -fsS "$1" 2>/dev/null | awk -v m="$2" 'index($0, m) == 1 { print $NF }'
}

# run_nginx logdir upstream-lines proxy-pass: nginx on PROXY passing every
# request to proxy-pass (an upstream of upstream-lines, or a variable a
# map there sets), streaming, over kept-alive connections.
run_nginx() {
  mkdir -p "$1/nginx"
  cat >"$1/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $1/nginx/nginx.pid;
error_log $1/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1/nginx/body;
  proxy_temp_path $1/nginx/proxy;
  fastcgi_temp_path $1/nginx/fastcgi;
  uwsgi_temp_path $1/nginx/uwsgi;
  scgi_temp_path $1/nginx/scgi;
  client_max_body_size 8m;
  client_body_buffer_size 1m;
$2
  server {
    listen 127.0.0.1:$PROXY;
    location / {
      proxy_pass http://$3;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
CONF
  nginx -p "$1/nginx" -c "$1/nginx/nginx.conf" -g 'daemon off;' 2>"$1/nginx/stderr.log" &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$PROXY/health"
}

# run_haproxy logdir frontend-name frontend-rules backends: HAProxy on
# PROXY, one thread.
run_haproxy() {
  cat >"$1/haproxy.cfg" <<CONF
global
  maxconn 4096
  nbthread 1
defaults
  mode http
  timeout connect 2s
  timeout client 300s
  timeout server 300s
frontend $2
  bind 127.0.0.1:$PROXY
$3
$4
CONF
  haproxy -db -f "$1/haproxy.cfg" >"$1/haproxy.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$PROXY/health"
}

# with_brokers: the env command that points a Switchyard process at the
# brokers (an array, so that $! is the process's own id).
with_brokers=(env "SWITCHYARD_KAFKA_BROKERS=127.0.0.1:$KAFKA" "SWITCHYARD_NATS_URL=nats://127.0.0.1:$NATS")

# start_pipeline logdir agent-engines clusters: Switchyard's brokers,
# agent (told agent-engines, as its --engines), processor and optimizer
# (planning clusters, comma-separated), each a process, logs in logdir.
start_pipeline() {
  "$BIN" brokers --kafka-listen "127.0.0.1:$KAFKA" --nats-listen "127.0.0.1:$NATS" >"$1/brokers.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$NATS") 2>/dev/null && break; sleep 0.1; done
  "${with_brokers[@]}" "$BIN" agent --engines "$2" --metrics-listen "127.0.0.1:$((PORT + 23))" 2>"$1/agent.log" &
  PIDS+=($!)
  "${with_brokers[@]}" "$BIN" processor --metrics-listen "127.0.0.1:$((PORT + 24))" 2>"$1/processor.log" &
  PIDS+=($!)
  "${with_brokers[@]}" "$BIN" optimizer --clusters "$3" --metrics-listen "127.0.0.1:$OPTIMIZER_METRICS" 2>"$1/optimizer.log" &
  PIDS+=($!)
}

start_gateway() { # log cluster port engines: a gateway of cluster routing to engines (id=url,...); GATEWAY_FLAGS: more flags
  local extra=()
  read -ra extra <<<"${GATEWAY_FLAGS:-}"
  "${with_brokers[@]}" "$BIN" gateway --cluster "$2" --listen "127.0.0.1:$3" --engines "$4" "${extra[@]}" 2>"$1" &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$3/health"
}

# wait_weighted logdir cluster:engines:gateway-port...: returns once, for
# every cluster named, the optimizer weights that many engines and the
# gateway on that port routes on a snapshot (the processor's first window
# with estimates of all of them); fails after 180 s.
wait_weighted() {
  local logs=$1 t0=$SECONDS spec c want gw n v ready
  shift
  while :; do
    ready=1
    for spec in "$@"; do
      IFS=: read -r c want gw <<<"$spec"
      n=$(metric "http://127.0.0.1:$OPTIMIZER_METRICS/metrics" "switchyard_optimizer_weight{cluster=\"$c\"" | wc -l)
      v=$(metric "http://127.0.0.1:$gw/metrics" "switchyard_gateway_snapshot_version{cluster=\"$c\"}" | head -1)
      if [ "$n" -lt "$want" ] || [ "${v:-0}" = 0 ]; then ready=0; fi
    done
    [ "$ready" = 1 ] && break
    if ((SECONDS - t0 > 180)); then echo "$BENCH: no snapshot weighting all engines in 180 s (logs in $logs)" >&2; return 1; fi
    sleep 1
  done
  echo "switchyard: snapshots weighting every engine after $((SECONDS - t0)) s"
}

# keep_switchyard dir: after a Switchyard cell, the gateway's /metrics
# (its shed and admission-rejected counts printed: what its 429s were),
# every snapshot (snapshots.txt) and the processor's estimates
# (estimates.jsonl) into dir.
keep_switchyard() {
  curl -fsS "http://127.0.0.1:$GATEWAY/metrics" >"$1/gateway-metrics.txt" || true
  grep -E '^switchyard_gateway_(shed_total|admission_rejected_total)' "$1/gateway-metrics.txt" | sed 's/^/  /' || true
  "$LIVE" snapshots -nats-url "nats://127.0.0.1:$NATS" >"$1/snapshots.txt" || true
  "$BIN" tap estimates --kafka-brokers "127.0.0.1:$KAFKA" >"$1/estimates.jsonl" 2>/dev/null || true
}
