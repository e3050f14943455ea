#!/usr/bin/env bash
# Live head-to-head on a multi-model fleet (issue 25's evidence): the
# bench/live workload, each conversation given a base model or a LoRA
# adapter, through nginx and HAProxy routing each model to its engines by
# a header, and through Switchyard deployed as its docs describe (brokers,
# agent, processor, optimizer, gateway as separate processes, default
# flags but addresses).
#
# Fleet: six enginesim processes serving vLLM's metrics only
# (--metrics vllm), each router's run on new processes (empty caches):
#   llama-h100-0, llama-h100-1  h100, 8 slots, base model llama
#   llama-a100-0, llama-a100-1  a100, 4 slots, base model llama
#     all four list the 8 adapters lora1..lora8 (--lora-modules, as a
#     vLLM pool lists the same adapters on every replica) and hold at most
#     2 at once (--max-loras 2, --lora-load 25ms)
#   qwen-a100-0  a100, 4 slots, base model qwen
#   qwen-h100-0  h100, 8 slots, base model qwen, and model mistral served
#     beside it in the same batch (--lora-modules mistral --max-loras 1: a
#     second model sharing this engine's slots, cache and steps; enginesim
#     serves one base model per process, so mistral is loaded the way an
#     adapter is, once: it is the only one)
# So three models (llama, qwen, mistral), two of them (qwen, mistral)
# sharing an engine, and 8 adapters on 4 of the 6 engines.
#
# Workload (live models): the first N requests of the Mooncake
# conversation trace as bench/live sends them; each conversation's model
# by a hash of its session: llama 27%, qwen 20%, mistral 13%, an adapter
# 40% (the k-th adapter's share proportional to 1/k, Zipf); `model` in the
# body and X-Model in a header.
#
# Routers: nginx-lc (one upstream per pool, map $http_x_model, least_conn
# in each), haproxy-lc (use_backend on the x-model header, leastconn),
# switchyard (the agent told each engine's GPU class and max_batch; it
# reads the models from /v1/models). Capacity: a closed loop of 64 clients
# through nginx-lc on the same mix (20 s warm-up, 60 s counted), as
# bench/live measures it; each cell replays the requests open-loop at
# LOAD x that.
#
# usage: bench/models/run.sh
# env:   LOADS (0.7,1.0), ROUTERS ("nginx-lc haproxy-lc switchyard"), N (800),
#        TRACE, MAX_PROMPT_TOKENS (8192), MAX_OUTPUT_TOKENS (128),
#        CAPACITY (skip the measurement), SWITCHYARD_BIN, BASE_PORT (19500;
#        ports BASE_PORT to BASE_PORT+25), SLO_TTFT (5s), SLO_TBOT (100ms)
# needs: nginx, haproxy, flock, curl, Go.
# out:   /tmp/bench-models/<date-time>/ (also /tmp/bench-models/latest):
#        logs per cell (Switchyard's: gateway /metrics, snapshots.txt,
#        explain.txt, estimates.jsonl), cells/*.json, report.txt,
#        report.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH=bench/models
LOADS=${LOADS:-0.7,1.0}
ROUTERS=${ROUTERS:-nginx-lc haproxy-lc switchyard}
PORT=${BASE_PORT:-19500}
# N, TRACE, MAX_*_TOKENS, OUT, LOCK, the ports, PIDS and the helpers
# shellcheck source=bench/lib.sh
. bench/lib.sh
ADAPTERS=lora1,lora2,lora3,lora4,lora5,lora6,lora7,lora8
# id:gpu-class:batch-slots:model:lora-modules:max-loras, on ports PORT, PORT+1, ...
FLEET=(
  llama-h100-0:h100:8:llama:$ADAPTERS:2
  llama-h100-1:h100:8:llama:$ADAPTERS:2
  llama-a100-0:a100:4:llama:$ADAPTERS:2
  llama-a100-1:a100:4:llama:$ADAPTERS:2
  qwen-a100-0:a100:4:qwen::
  qwen-h100-0:h100:8:qwen:mistral:1
)
MIX=(-mix llama=0.27,qwen=0.20,mistral=0.13 -adapters "$ADAPTERS" -adapter-share 0.40 -zipf 1)

for r in $ROUTERS; do
  case $r in
  nginx-lc) need nginx "apt-get install -y nginx" ;;
  haproxy-lc) need haproxy "apt-get install -y haproxy" ;;
  switchyard) ;;
  *) echo "bench/models: unknown router $r (nginx-lc haproxy-lc switchyard)" >&2; exit 2 ;;
  esac
done
prepare "$PORT" "$PROXY" "$GATEWAY" "$KAFKA" "$NATS"
WORKLOAD=(-trace "$TRACE" -n "$N" -max-prompt-tokens "$MAX_PROMPT_TOKENS" -max-output-tokens "$MAX_OUTPUT_TOKENS" "${MIX[@]}")

field() { # index field-number (1-based) of FLEET[index]
  echo "${FLEET[$1]}" | cut -d: -f"$2"
}

start_engines() { # logdir
  local i lora maxl args
  for ((i = 0; i < ${#FLEET[@]}; i++)); do
    args=(--listen "127.0.0.1:$((PORT + i))" --id "$(field "$i" 1)" --gpu-class "$(field "$i" 2)" --max-num-seqs "$(field "$i" 3)"
      --model "$(field "$i" 4)" --metrics vllm --seed "$i")
    lora=$(field "$i" 5)
    maxl=$(field "$i" 6)
    [ -z "$lora" ] || args+=(--lora-modules "$lora" --max-loras "$maxl" --lora-load 25ms)
    "$BIN" enginesim "${args[@]}" 2>"$1/engine-$(field "$i" 1).log" &
    PIDS+=($!)
  done
  wait_engines
}

# The proxies' pools: the engines of each base model; mistral's is the
# engine that serves it beside qwen.
pool_ports() { # pool: the ports of its engines, one a line
  local i
  for ((i = 0; i < ${#FLEET[@]}; i++)); do
    case $1 in
    mistral) [[ ",$(field "$i" 5)," == *,mistral,* ]] || continue ;;
    *) [ "$(field "$i" 4)" = "$1" ] || continue ;;
    esac
    echo $((PORT + i))
  done
}

# nginx routes on the header the client sends beside the body (nginx
# does not read bodies); adapters are llama's.
start_nginx() { # logdir
  local pool p upstreams="  map \$http_x_model \$pool { default llama; qwen qwen; mistral mistral; }"
  for pool in llama qwen mistral; do
    upstreams+=$'\n'"  upstream $pool { least_conn; "
    for p in $(pool_ports $pool); do upstreams+="server 127.0.0.1:$p; "; done
    upstreams+="keepalive 256; }"
  done
  # shellcheck disable=SC2016 # nginx's variable
  run_nginx "$1" "$upstreams" '$pool'
}

start_haproxy() { # logdir
  local pool p backends=""
  for pool in llama qwen mistral; do
    backends+="backend $pool"$'\n'"  balance leastconn"$'\n'
    for p in $(pool_ports $pool); do backends+="  server e$p 127.0.0.1:$p"$'\n'; done
  done
  run_haproxy "$1" models "  use_backend qwen if { req.hdr(x-model) -m str qwen }
  use_backend mistral if { req.hdr(x-model) -m str mistral }
  default_backend llama" "$backends"
}

start_switchyard() { # logdir
  local i agent_engines=()
  for ((i = 0; i < ${#FLEET[@]}; i++)); do
    agent_engines+=("$(field "$i" 1)=http://127.0.0.1:$((PORT + i)),region=live,gpu=$(field "$i" 2),max_batch=$(field "$i" 3)")
  done
  start_pipeline "$1" "$(IFS=';'; echo "${agent_engines[*]}")" live
  start_gateway "$1/gateway.log" live "$GATEWAY" "$(engine_list ,)"
  # Load starts once the gateway routes on a snapshot weighting every
  # engine, as in bench/live (the per-model plans follow the demand the
  # load itself shows the processor).
  wait_weighted "$1" "live:${#FLEET[@]}:$GATEWAY"
}

echo "bench/models: $N requests of $(basename "$TRACE"), prompts cut to $MAX_PROMPT_TOKENS tokens, outputs to $MAX_OUTPUT_TOKENS;" \
  "fleet ${FLEET[*]}; loads $LOADS; routers $ROUTERS; logs in $OUT"

if [ -n "${CAPACITY:-}" ]; then
  echo "capacity: $CAPACITY rps (given)"
else
  mkdir -p "$OUT/capacity"
  start_engines "$OUT/capacity"
  start_nginx "$OUT/capacity"
  CAPACITY=$(flock -o "$LOCK" "$LIVE" models capacity "${WORKLOAD[@]}" -target "http://127.0.0.1:$PROXY" | tee "$OUT/capacity/out.txt" | tail -1)
  stop_all
  echo "capacity: $CAPACITY rps (closed loop of 64 clients through nginx-lc on the mix, 60 s after 20 s of warm-up)"
fi

for load in ${LOADS//,/ }; do
  for router in $ROUTERS; do
    dir=$OUT/$router-$load
    mkdir -p "$dir"
    start_engines "$dir"
    case $router in
    nginx-lc) start_nginx "$dir"; url=http://127.0.0.1:$PROXY ;;
    haproxy-lc) start_haproxy "$dir"; url=http://127.0.0.1:$PROXY ;;
    switchyard) start_switchyard "$dir"; url=http://127.0.0.1:$GATEWAY ;;
    esac
    cell=$OUT/cells/$router-$load.json
    flock -o "$LOCK" "$LIVE" models replay "${WORKLOAD[@]}" -target "$url" -router "$router" -load "$load" -capacity "$CAPACITY" \
      -engines "$(engine_list ,)" -slo-ttft "${SLO_TTFT:-5s}" -slo-tbot "${SLO_TBOT:-100ms}" -out "$cell"
    if [ "$router" = switchyard ]; then
      keep_switchyard "$dir"
      "$BIN" explain --cluster live --nats-url "nats://127.0.0.1:$NATS" >"$dir/explain.txt" 2>&1 || true
    fi
    for ((i = 0; i < ${#FLEET[@]}; i++)); do curl -fsS "http://127.0.0.1:$((PORT + i))/metrics" >"$dir/engine-$(field "$i" 1)-metrics.txt" || true; done
    stop_all
    # The adapter hits: the llama engines' stop lines (their adapters are
    # the fleet's LoRA adapters; mistral's one load is not an adapter's).
    logs=()
    for ((i = 0; i < ${#FLEET[@]}; i++)); do
      [[ ",$(field "$i" 5)," == *,lora1,* ]] && logs+=("$(field "$i" 1)=$dir/engine-$(field "$i" 1).log")
    done
    "$LIVE" models tally -cell "$cell" -logs "$(IFS=,; echo "${logs[*]}")"
  done
done

"$LIVE" models report -out "$OUT/report.json" "$OUT"/cells/*.json | tee "$OUT/report.txt"
