#!/usr/bin/env bash
# Pull-task benchmark (docs/performance.md, "Pull tasks through HTTP"; issue 11): on a
# release `qflow serve` over a fresh, durable SQLite file, on loopback only —
#   1. throughput: TASKS instances of a one-pull-task process are started, then WORKERS
#      worker processes fetch batches of BATCH and complete every task; tasks/s is from
#      the workers' common start to the last completion, and the run fails unless the
#      store counts exactly TASKS more completed instances;
#   2. long polling: a fetch waits on an empty topic and an instance is started
#      mid-wait; the time from the start's 201 (the offer is durable) to the fetch's
#      answer, over ROUNDS rounds;
#   3. idle waiting: the server's CPU share (/proc/<pid>/stat) over 5 s with no request,
#      then over 5 s with 100 fetches parked on a topic nobody offers.
#
#   scripts/bench-pull/run.sh [TASKS=50000] [WORKERS=4] [BATCH=100] [LANES=2] [ROUNDS=50]
#
# Bounded: every node mode exits past its own deadline; the server is killed on exit.
# Needs node (20+) and a release build (`cargo build --release -p qflow-cli`; the script
# builds it, honouring CARGO_TARGET_DIR). QFLOW_BIN=path runs that binary instead and
# builds nothing: how two builds are compared in one session (A/B). BENCH_API=native
# (default), camunda7, zeebe or zeebe-client picks the workers' API (bench.mjs);
# BENCH_THROUGHPUT_ONLY=1 skips the long-poll and idle parts (scripts/bench-pull/apis.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
tasks="${1:-50000}" workers="${2:-4}" batch="${3:-100}" lanes="${4:-2}" rounds="${5:-50}"
target="${CARGO_TARGET_DIR:-target}"
if [ -n "${QFLOW_BIN:-}" ]; then
  qflow="$QFLOW_BIN"
else
  nice cargo build --release --locked -q -p qflow-cli
  qflow="$target/release/qflow"
fi
work="$(mktemp -d)"
port=18091
url="http://127.0.0.1:$port"
bench="node scripts/bench-pull/bench.mjs"

start_server() { # db
  "$qflow" serve --listen "127.0.0.1:$port" --db "$1" --lanes "$lanes" \
    > /dev/null 2> "$work/serve.log" &
  server=$!
  for _ in $(seq 1 100); do curl -fs "$url/healthz" > /dev/null 2>&1 && break; sleep 0.1; done
  token="$(grep -o 'qf_[A-Za-z0-9_-]*' "$work/serve.log" | head -1)"
  [ -n "$token" ] || { echo "no token from qflow serve" >&2; cat "$work/serve.log" >&2; exit 1; }
}
stop_server() { kill "$server" 2> /dev/null || true; wait "$server" 2> /dev/null || true; }
trap 'stop_server; rm -rf "$work"' EXIT

echo "== throughput: $tasks tasks, $workers workers, batches of $batch, $lanes lanes (SQLite, durable)"
start_server "$work/throughput.sqlite"
$bench throughput --url="$url" --token="$token" --tasks="$tasks" --workers="$workers" --batch="$batch" \
  --pid="$server" --api="${BENCH_API:-native}"
stop_server
[ "${BENCH_THROUGHPUT_ONLY:-0}" = 1 ] && exit 0

echo "== long polling: a task offered mid-wait, $rounds rounds"
start_server "$work/longpoll.sqlite"
$bench longpoll --url="$url" --token="$token" --rounds="$rounds"
echo "== idle: 100 waiting fetches"
$bench idle --url="$url" --token="$token" --pid="$server" --waiting=100 --secs=5
stop_server
