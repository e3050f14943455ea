#!/usr/bin/env bash
# Live head-to-head: the same trace, on the same fresh fleet of simulated
# engines, through nginx (round robin, least_conn, consistent hash on the
# session header), HAProxy (leastconn) and Switchyard deployed as its docs
# describe (brokers, agent, processor, optimizer, gateway as separate
# processes, default flags but addresses).
#
# Fleet: 2 h100-class engines with 8 batch slots and 2 a100-class engines
# with 4 (enginesim --max-num-seqs), each with its own prefix cache, served
# with vLLM's metrics only (--metrics vllm); the agent is told each
# engine's GPU class and batch limit, as docs/agent.md says operators do
# for vLLM. Every router's run starts on new engine processes (empty
# caches) and, for Switchyard, a new pipeline.
#
# Workload (bench/live): the first N requests of the Mooncake
# conversation trace, prompts cut to 8,192 tokens and outputs to 128,
# streaming chat completions with the session in X-Switchyard-Session and
# `user`. Capacity is measured once per run: a closed loop of 64 clients
# sending the same requests through nginx least_conn (20 s warm-up, 60 s
# counted); each load cell replays the requests open-loop with arrivals
# rescaled to LOAD x that capacity. A request fails on no first token in
# 30 s, a status other than 200, or a broken stream.
#
# Restart scenario (SCENARIO=restart): two regions (clusters east and
# west), each with an h100 (8 slots) and an a100 (4 slots) and its own
# gateway; RESTART_RPS (1.5) requests per second to each gateway; after
# 60 s the east h100 is killed (SIGKILL), 30 s later started again, and
# the load runs 90 s more. Reports per 10-s bucket its share of east's
# requests against the snapshots' planned weight, and the time from its
# restart until the share is within 20% of the weight planned before.
#
# usage: bench/live/run.sh
#        SCENARIO=restart bench/live/run.sh
# env:   LOADS (default 0.7,0.9,1.1), ROUTERS (default "nginx-rr nginx-lc
#        nginx-hash haproxy-lc switchyard"), N (default 800), TRACE
#        (default ../shared/traces/mooncake_conversation_trace.jsonl from
#        the repository root), MAX_PROMPT_TOKENS (8192), MAX_OUTPUT_TOKENS
#        (128), CAPACITY (skip the measurement and use this many rps),
#        SWITCHYARD_BIN (default: build one from this tree into the run's
#        directory), BASE_PORT (19400; ports BASE_PORT to BASE_PORT+26),
#        SCENARIO (head-to-head, or restart), RESTART_RPS (1.5), SLO_TTFT
#        (5s) and SLO_TBOT (100ms): goodput counts the served requests
#        within both (the sim's hetero-slots scenarios' SLO), ENGINE
#        (enginesim, or indie: bench/live/indie/engine.py, an independent
#        vLLM-compatible engine in Python, preset fast for h100, slow for
#        a100, with FLEET's slots), TWIN (set: after each Switchyard cell,
#        its digital twin, bench/twin/compare.sh, into the cell's twin/;
#        needs jq).
# needs: nginx and haproxy on PATH for their routers (apt-get install -y
#        nginx haproxy), flock, curl, Go.
# out:   /tmp/bench-live/<date-time>/, also /tmp/bench-live/latest: logs
#        per cell (and, for Switchyard's cells, the gateway's /metrics and
#        every snapshot's demand, shed and weights: snapshots.txt, and
#        the processor's estimates: estimates.jsonl), every request's
#        outcome per cell (requests.jsonl: tokens, TTFT, e2e, engine),
#        cells/*.json, report.txt, report.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BENCH=bench/live
LOADS=${LOADS:-0.7,0.9,1.1}
ROUTERS=${ROUTERS:-nginx-rr nginx-lc nginx-hash haproxy-lc switchyard}
PORT=${BASE_PORT:-19400}
# N, TRACE, MAX_*_TOKENS, OUT, LOCK, the ports, PIDS and the helpers
# shellcheck source=bench/lib.sh
. bench/lib.sh
SCENARIO=${SCENARIO:-head-to-head}
ENGINE=${ENGINE:-enginesim}
MODEL=switchyard-sim-8b # the model name live sends (its -model default)
# id:gpu-class:batch-slots[:region (default live)], one engine each, on
# ports PORT, PORT+1, ...
case $SCENARIO in
head-to-head) FLEET=(h100-0:h100:8 h100-1:h100:8 a100-0:a100:4 a100-1:a100:4) ;;
restart)
  FLEET=(east-h100:h100:8:east east-a100:a100:4:east west-h100:h100:8:west west-a100:a100:4:west)
  ROUTERS=switchyard
  ;;
*) echo "bench/live: unknown SCENARIO $SCENARIO (head-to-head, restart)" >&2; exit 2 ;;
esac

case $ENGINE in
enginesim) ;;
indie) need python3 "apt-get install -y python3" ;;
*) echo "bench/live: unknown ENGINE $ENGINE (enginesim, indie)" >&2; exit 2 ;;
esac
for r in $ROUTERS; do
  case $r in
  nginx-*) need nginx "apt-get install -y nginx" ;;
  haproxy-*) need haproxy "apt-get install -y haproxy" ;;
  switchyard) ;;
  *) echo "bench/live: unknown router $r (nginx-rr nginx-lc nginx-hash haproxy-lc switchyard)" >&2; exit 2 ;;
  esac
done
[ -z "${TWIN:-}" ] || need jq "apt-get install -y jq"
prepare "$PORT" "$PROXY" "$GATEWAY" "$KAFKA"
WORKLOAD=(-trace "$TRACE" -n "$N" -max-prompt-tokens "$MAX_PROMPT_TOKENS" -max-output-tokens "$MAX_OUTPUT_TOKENS")

declare -A ENGINE_PID # engine id -> process id

engine_cmd() { # index: the command line of FLEET[index]'s engine
  local id class slots region
  IFS=: read -r id class slots region <<<"${FLEET[$1]}"
  if [ "$ENGINE" = indie ]; then
    echo python3 "$ROOT/bench/live/indie/engine.py" --port "$((PORT + $1))" --preset "$(indie_preset "$class")" \
      --slots "$slots" --model "$MODEL" --seed "$1"
    return
  fi
  echo "$BIN" enginesim --listen "127.0.0.1:$((PORT + $1))" --id "$id" --gpu-class "$class" --max-num-seqs "$slots" \
    --metrics vllm --seed "$1"
}

indie_preset() { # gpu class: the indie engine's preset standing in for it
  case $1 in
  h100) echo fast ;;
  a100) echo slow ;;
  *) echo "bench/live: no indie engine preset for GPU class $1 (h100, a100)" >&2; return 1 ;;
  esac
}

start_engines() { # logdir
  local i id
  for ((i = 0; i < ${#FLEET[@]}; i++)); do
    id=${FLEET[$i]%%:*}
    $(engine_cmd "$i") 2>"$1/engine-$id.log" &
    PIDS+=($!)
    ENGINE_PID[$id]=$!
  done
  wait_engines
}

start_nginx() { # logdir balance-directive
  local i upstreams=""
  for ((i = 0; i < ${#FLEET[@]}; i++)); do upstreams+="server 127.0.0.1:$((PORT + i)); "; done
  run_nginx "$1" "  upstream engines { $2 ${upstreams}keepalive 256; }" engines
}

start_haproxy() { # logdir
  local i servers=""
  for ((i = 0; i < ${#FLEET[@]}; i++)); do servers+="  server e$i 127.0.0.1:$((PORT + i))"$'\n'; done
  run_haproxy "$1" live "  default_backend engines" "backend engines"$'\n'"  balance leastconn"$'\n'"$servers"
}

regions() { # the regions of FLEET, in order, one a line
  local spec region
  for spec in "${FLEET[@]}"; do
    IFS=: read -r _ _ _ region <<<"$spec"
    echo "${region:-live}"
  done | awk '!seen[$0]++'
}

region_engines() { # region: its engines as id=url,...
  local i=0 spec id region out=()
  for spec in "${FLEET[@]}"; do
    IFS=: read -r id _ _ region <<<"$spec"
    [ "${region:-live}" = "$1" ] && out+=("$id=http://127.0.0.1:$((PORT + i))")
    i=$((i + 1))
  done
  (IFS=,; echo "${out[*]}")
}

gateway_port() { # region index: the first region's gateway is on GATEWAY, the others' from PORT+26
  if [ "$1" = 0 ]; then echo "$GATEWAY"; else echo $((PORT + 25 + $1)); fi
}

start_switchyard() { # logdir
  local spec id class slots region agent_engines=() k r log regs weighted=()
  local i=0
  for spec in "${FLEET[@]}"; do
    IFS=: read -r id class slots region <<<"$spec"
    agent_engines+=("$id=http://127.0.0.1:$((PORT + i)),region=${region:-live},gpu=$class,max_batch=$slots")
    i=$((i + 1))
  done
  mapfile -t regs < <(regions)
  start_pipeline "$1" "$(IFS=';'; echo "${agent_engines[*]}")" "$(IFS=,; echo "${regs[*]}")"
  # One gateway per region (cluster), given its region's engines. Load
  # starts once every gateway routes on a snapshot that weights every
  # engine of its region.
  for k in "${!regs[@]}"; do
    r=${regs[$k]}
    log=$1/gateway.log
    [ "${#regs[@]}" -gt 1 ] && log=$1/gateway-$r.log
    start_gateway "$log" "$r" "$(gateway_port "$k")" "$(region_engines "$r")"
    weighted+=("$r:$(region_engines "$r" | tr , '\n' | wc -l):$(gateway_port "$k")")
  done
  wait_weighted "$1" "${weighted[@]}"
}

start_router() { # router logdir
  case $1 in
  nginx-rr) start_nginx "$2" "" ;;
  nginx-lc) start_nginx "$2" "least_conn;" ;;
  nginx-hash) start_nginx "$2" 'hash $http_x_switchyard_session consistent;' ;;
  haproxy-lc) start_haproxy "$2" ;;
  switchyard) start_switchyard "$2" ;;
  esac
}

router_url() { # router
  if [ "$1" = switchyard ]; then echo "http://127.0.0.1:$GATEWAY"; else echo "http://127.0.0.1:$PROXY"; fi
}

# twin dir cell from to: the digital twin of a Switchyard cell (TWIN=1;
# bench/twin/compare.sh): the range's traffic and fleet exported from the
# cell's brokers, replayed through sim --fleet-from, and compared with the
# cell's served TTFT and engine prefix-cache hit rate.
twin() {
  mkdir -p "$1"
  jq '{requests: .served, duration_s, ttft_ms: {p50: (.ttft_served_p50 * 1000), p99: (.ttft_served_p99 * 1000)},
       kv_hit_rate: .prefix_cache_hit_rate}' "$2" >"$1/live.json"
  LOCK=$LOCK bench/twin/compare.sh "$BIN" "127.0.0.1:$KAFKA" "$3" "$4" "$1" >"$1/compare.out" 2>&1 || true
  jq -c '{twin: {p50_ratio, p99_ratio, kv_points, goals}}' "$1/result.json" 2>/dev/null || cat "$1/compare.out"
}

[ "$SCENARIO" = restart ] || echo "bench/live: $N requests of $(basename "$TRACE"), prompts cut to $MAX_PROMPT_TOKENS tokens, outputs to $MAX_OUTPUT_TOKENS;" \
  "fleet ${FLEET[*]} (id:class:slots); loads $LOADS; routers $ROUTERS; logs in $OUT"

if [ "$SCENARIO" = restart ]; then
  dir=$OUT/restart
  mkdir -p "$dir"
  start_engines "$dir"
  start_switchyard "$dir"
  targets=()
  mapfile -t regs < <(regions)
  for k in "${!regs[@]}"; do targets+=("${regs[$k]}=http://127.0.0.1:$(gateway_port "$k")"); done
  # The first engine (the east h100) is the one killed.
  victim=${FLEET[0]%%:*}
  flock -o "$LOCK" "$LIVE" restart "${WORKLOAD[@]}" -targets "$(IFS=,; echo "${targets[*]}")" -region "${regs[0]}" \
    -engine "$victim" -engine-url "http://127.0.0.1:$PORT" -pid "${ENGINE_PID[$victim]}" -rps "${RESTART_RPS:-1.5}" \
    -nats-url "nats://127.0.0.1:$NATS" -restart-log "$dir/engine-$victim.log" -out "$OUT/restart.json" \
    -- $(engine_cmd 0) | tee "$OUT/report.txt"
  for k in "${!regs[@]}"; do curl -fsS "http://127.0.0.1:$(gateway_port "$k")/metrics" >"$dir/gateway-${regs[$k]}-metrics.txt" || true; done
  "$LIVE" snapshots -nats-url "nats://127.0.0.1:$NATS" -cluster "${regs[0]}" >"$dir/snapshots.txt" || true
  "$BIN" tap estimates --kafka-brokers "127.0.0.1:$KAFKA" >"$dir/estimates.jsonl" 2>/dev/null || true
  stop_all
  exit 0
fi

if [ -n "${CAPACITY:-}" ]; then
  echo "capacity: $CAPACITY rps (given)"
else
  mkdir -p "$OUT/capacity"
  start_engines "$OUT/capacity"
  start_nginx "$OUT/capacity" "least_conn;"
  CAPACITY=$(flock -o "$LOCK" "$LIVE" capacity "${WORKLOAD[@]}" -target "http://127.0.0.1:$PROXY" | tee "$OUT/capacity/out.txt" | tail -1)
  stop_all
  echo "capacity: $CAPACITY rps (closed loop of 64 clients through nginx least_conn, 60 s after 20 s of warm-up)"
fi

for load in ${LOADS//,/ }; do
  for router in $ROUTERS; do
    dir=$OUT/$router-$load
    mkdir -p "$dir"
    start_engines "$dir"
    start_router "$router" "$dir"
    from=$(date +%s%3N)
    flock -o "$LOCK" "$LIVE" replay "${WORKLOAD[@]}" -target "$(router_url "$router")" -router "$router" -load "$load" \
      -capacity "$CAPACITY" -engines "$(engine_list ,)" -slo-ttft "${SLO_TTFT:-5s}" -slo-tbot "${SLO_TBOT:-100ms}" \
      -out "$OUT/cells/$router-$load.json" -requests "$dir/requests.jsonl"
    to=$(date +%s%3N)
    [ "$router" != switchyard ] || keep_switchyard "$dir"
    [ "$router" != switchyard ] || [ -z "${TWIN:-}" ] || twin "$dir/twin" "$OUT/cells/$router-$load.json" "$from" "$to"
    stop_all
  done
done

"$LIVE" report -out "$OUT/report.json" "$OUT"/cells/*.json | tee "$OUT/report.txt"
