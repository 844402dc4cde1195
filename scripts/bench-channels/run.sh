#!/usr/bin/env bash
# Channel-call benchmark (docs/performance.md, "Channel calls"; issue 9): durable channel
# calls per second end to end on SQLite — the in-process adapter, then the HTTP webhook on
# loopback (channels/examples/channel_bench.rs), RUNS runs of SECONDS each — then, back to
# back, the Restate peer's `linear10` (ten `ctx.run` steps per invocation: its steps/s is
# the nearest comparable figure) when PEER_DIR names its prepared folder
# (../shared/peer/restate/README.md: copy the files, `npm ci`).
#
#   scripts/bench-channels/run.sh [SECONDS=5] [RUNS=3]
#
# Loopback only; every run stops by itself (the peer's driver has its own 180 s bound).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs="${1:-5}" runs="${2:-3}"
target="${CARGO_TARGET_DIR:-target}"
nice cargo build --release --locked -q -p qflow-channels --example channel_bench
for adapter in in_process webhook; do
  echo "== qflow, $adapter adapter, SQLite (durable), $runs runs of ${secs}s"
  for _ in $(seq 1 "$runs"); do
    timeout 300 "$target/release/examples/channel_bench" --adapter="$adapter" --secs="$secs"
  done
done
if [ -n "${PEER_DIR:-}" ]; then
  echo "== restate, linear10 (ten ctx.run steps per invocation), its bench.sh"
  # A server left by an earlier run would answer instead of the fresh one bench.sh starts.
  (cd "$PEER_DIR" && { ./stop.sh > /dev/null 2>&1 || true; } && ./bench.sh; ./stop.sh > /dev/null 2>&1 || true)
fi
