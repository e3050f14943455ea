#!/bin/sh
# Snapshot fan-out: one publisher, 200 gateways watching their key on their
# own NATS connections (a separate process), at 1,000 and 20,000 engines per
# snapshot. Usage: bench/fanout/run.sh [-gateways N] [-engines 1000,20000] [-snapshots N] [-fast]
#   [-compression none|s2] [-weights same|vary|rtt] [-apply gateway|decode|none]
set -eu
cd "$(dirname "$0")/../.."
go build -o /tmp/switchyard-fanout ./bench/fanout
exec /tmp/switchyard-fanout "$@"
