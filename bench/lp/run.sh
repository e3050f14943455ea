#!/bin/sh
# Compare Switchyard's optimizer with COIN-OR CLP and GLPK on the same
# instances. Needs: apt-get install -y coinor-clp glpk-utils
# Usage: bench/lp/run.sh [-sizes 8x64,32x256,64x1024] [-load 0.7] [-keep DIR]
set -eu
cd "$(dirname "$0")/../.."
exec go run ./bench/lp "$@"
