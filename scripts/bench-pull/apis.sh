#!/usr/bin/env bash
# Jobs per second over each worker API, side by side in one run (docs/performance.md,
# "Jobs per second by API"; issue 28): the same release `qflow serve` on a fresh SQLite
# file per row, the same load (TASKS one-pull-task instances, WORKERS workers fetching up
# to BATCH), workers speaking the native API, Camunda 7's external-task endpoints,
# Camunda 8's job endpoints by hand, and Camunda 8's official client's job worker; the
# four rows in turn, ROUNDS times, so the machine's drift falls on every API alike.
#
#   scripts/bench-pull/apis.sh [TASKS=20000] [WORKERS=4] [BATCH=250] [LANES=1] [ROUNDS=3]
#
# Bounded: each row is bench-pull/run.sh's throughput part (its own deadline). Needs node
# (20+), scripts/camunda8-client installed (`npm ci --prefix scripts/camunda8-client`)
# and a release build (built here unless QFLOW_BIN names one).
set -euo pipefail
cd "$(dirname "$0")/../.."
tasks="${1:-20000}" workers="${2:-4}" batch="${3:-250}" lanes="${4:-1}" rounds="${5:-3}"
target="${CARGO_TARGET_DIR:-target}"
if [ -z "${QFLOW_BIN:-}" ]; then
  nice cargo build --release --locked -q -p qflow-cli
  QFLOW_BIN="$target/release/qflow"
fi
export QFLOW_BIN BENCH_THROUGHPUT_ONLY=1
for round in $(seq 1 "$rounds"); do
  for api in native camunda7 zeebe zeebe-client; do
    echo "== round $round, $api, load average $(cut -d' ' -f1 /proc/loadavg)"
    BENCH_API="$api" scripts/bench-pull/run.sh "$tasks" "$workers" "$batch" "$lanes" 1 | grep '^{'
  done
done
