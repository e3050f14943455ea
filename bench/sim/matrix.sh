#!/bin/sh
# The simulator's evaluation matrix (issue 10): every shipped scenario with
# its own workload, and every trace in ../shared/traces on the scenarios
# whose workload is a trace, each with seeds 1-5 under every policy; prints
# switchyard's wins/ties/losses against each baseline on p99 TTFT, goodput
# and KV hit rate, and the goal checks. See docs/sim.md ("Matrix").
# Usage: bench/sim/matrix.sh [-seeds N] [-only a,b] [-traces DIR] [-json FILE]
set -eu
cd "$(dirname "$0")/../.."
exec go run ./bench/sim "$@"
