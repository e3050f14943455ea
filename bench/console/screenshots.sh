#!/usr/bin/env bash
# Screenshots of the web console on a running demo, for docs/console.md:
# starts `switchyard demo` on free ports, lets it run WARMUP seconds
# (default 90) so the charts have history, then runs the console's
# headless-Chromium test against the demo's console, which fails on any
# console error and writes one PNG per page to OUT (default docs/console).
# Needs chromium (apt-get install chromium).
set -euo pipefail
cd "$(dirname "$0")/../.."
warmup=${WARMUP:-90}
out=${OUT:-docs/console}
tmp=$(mktemp -d)
trap 'kill "$demo_pid" 2>/dev/null || true; wait "$demo_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT

go build -o "$tmp/switchyard" ./services/switchyard
"$tmp/switchyard" demo --kafka-listen 127.0.0.1:0 --nats-listen 127.0.0.1:0 --gateway-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --console-listen 127.0.0.1:0 --status-interval 10s >"$tmp/demo.out" 2>"$tmp/demo.err" &
demo_pid=$!

url=""
for _ in $(seq 1 600); do
  url=$(awk '$1 == "console:" { print $2; exit }' "$tmp/demo.out")
  [ -n "$url" ] && break
  kill -0 "$demo_pid" 2>/dev/null || { cat "$tmp/demo.err"; echo "demo exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "the demo printed no console address" >&2; exit 1; }
echo "console at $url; warming up for ${warmup}s"
sleep "$warmup"

mkdir -p "$out"
SWITCHYARD_CONSOLE_URL="$url" SWITCHYARD_CONSOLE_SCREENSHOTS="$(cd "$out" && pwd)" \
  go test -count=1 -run '^TestBrowser$' -v ./console/ | grep -E '^(---|ok|FAIL|\s+browser_test)'
echo "screenshots in $out:"; ls "$out"
