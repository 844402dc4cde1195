#!/usr/bin/env bash
# HTTP benchmark (docs/performance.md): durable starts per second of a one-task process
# over HTTP on SQLite with 64 keep-alive connections, and the latency of start-and-wait
# (R6) on an idle server; then, back to back, the Restate peer's ingress doing the same
# (one durable step per invocation) when PEER_DIR names its prepared folder
# (../shared/peer/restate/README.md, with a `one` handler added to service.mjs).
#
#   scripts/bench-http/run.sh [SECONDS]      # needs wrk; loopback only; stops by itself
set -euo pipefail
cd "$(dirname "$0")/../.."
secs="${1:-20}"
lua="$PWD/scripts/bench-http/post.lua"
cargo build --release --locked -q -p qflow-tests --bin qflow-server-host
work="$(mktemp -d)"
token="bench-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
port=18090
QFLOW_HOST_TOKEN="$token" target/release/qflow-server-host --db "$work/bench.sqlite" \
  --listen "127.0.0.1:$port" > "$work/host.log" 2>&1 &
host=$!
trap 'kill "$host" 2>/dev/null || true; wait "$host" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

run() { # name url path body token connections
  echo "== $1 (-c$6, ${secs}s)"
  local threads=2; [ "$6" -lt 2 ] && threads=1
  BENCH_PATH="$3" BENCH_BODY="$4" BENCH_TOKEN="$5" \
    wrk -t"$threads" -c"$6" -d"${secs}s" --timeout 10s -s "$lua" "$2" \
    | grep -E "p50|p99|rps|requests in|Non-2xx|Socket"
}

run "qflow durable start (201 once the first step is durable)" "http://127.0.0.1:$port" \
  /v1/processes/one/instances '{"variables":{}}' "$token" 64
sleep 2   # let the started instances finish: the next run measures an idle server
run "qflow start-and-wait to the end (R6), idle server" "http://127.0.0.1:$port" \
  /v1/processes/one/instances '{"variables":{},"wait_ms":10000}' "$token" 1
run "qflow start-and-wait to the end (R6), 64 connections" "http://127.0.0.1:$port" \
  /v1/processes/one/instances '{"variables":{},"wait_ms":10000}' "$token" 64
kill "$host"; wait "$host" 2>/dev/null || true

if [ -n "${PEER_DIR:-}" ]; then
  (cd "$PEER_DIR" && ./start.sh > /dev/null)
  trap '(cd "$PEER_DIR" && ./stop.sh > /dev/null) || true; rm -rf "$work"' EXIT
  run "restate send (202 once the invocation is durably enqueued)" http://127.0.0.1:8080 \
    /bench/one/send '{}' "" 64
  sleep 2
  run "restate call to the end, idle server" http://127.0.0.1:8080 /bench/one '{}' "" 1
  run "restate call to the end, 64 connections" http://127.0.0.1:8080 /bench/one '{}' "" 64
fi
