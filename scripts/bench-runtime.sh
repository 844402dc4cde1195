#!/usr/bin/env bash
# Runtime throughput, side by side with the peer engine, in one run (issue 4; the results
# and how to read them are in docs/performance.md, "Runtime throughput").
#
# 1. qflow: `cargo bench -p qflow-cli --bench runtime` — the 10-service-task linear model
#    on the in-memory store, SQLite (WAL, synchronous=FULL) and PostgreSQL
#    (synchronous_commit=on), lanes 1/2/4, plus the timer-poll cost with 10k vs 1M parked
#    timers. Arguments to this script are passed to the bench (e.g. `--stores=memory,sqlite`
#    or `--no-timers`).
# 2. The peer: bpmn-engine's bench.mjs on the same model, in memory (skipped with a message
#    when node or the peer directory is missing).
# 3. A table: each qflow row against bpmn-engine's a_linear_10svc conc=1 rate.
#
# Environment: QFLOW_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test; set it
# empty to skip PostgreSQL), QFLOW_PEER_DIR (default ../peer-bench/bpmn next to the
# checkout: bench.mjs with node_modules installed), PEER_N (default 500), PEER=0 to skip
# the peer, PEER_REFERENCE (default 90: the peer's idle-machine rate from its README, the
# figure issue 4 states its targets against; the last column compares with it).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
export QFLOW_TEST_PG_URL=${QFLOW_TEST_PG_URL-postgres://postgres@127.0.0.1:5432/test}
peer_dir=${QFLOW_PEER_DIR:-$root/../peer-bench/bpmn}
peer_n=${PEER_N:-500}
peer_reference=${PEER_REFERENCE:-90}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export QFLOW_BENCH_RESULTS=$work/results.txt
: >"$QFLOW_BENCH_RESULTS"

echo "## qflow runtime bench ($(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg))"
(cd "$root" && cargo bench -p qflow-cli --bench runtime -- "$@")

peer_rate=""
echo
if [[ "${PEER:-1}" == 0 ]]; then
    echo "## peer skipped: PEER=0"
elif ! command -v node >/dev/null; then
    echo "## peer skipped: node is not installed"
elif [[ ! -f "$peer_dir/bench.mjs" || ! -d "$peer_dir/node_modules" ]]; then
    echo "## peer skipped: no bench.mjs with node_modules in $peer_dir (see shared/peer/bpmn-engine/README.md)"
else
    echo "## peer: bpmn-engine bench.mjs --n=$peer_n ($(date -u '+%H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg))"
    # The watchdog is raised: on a loaded machine the full peer run can exceed its default.
    (cd "$peer_dir" && node bench.mjs --n="$peer_n" --limit-ms=900000) | tee "$work/peer.txt"
    peer_rate=$(awk '$1 == "a_linear_10svc" && $2 == "conc=" && $3 == "1" {
        for (i = 1; i <= NF; i++) if ($i ~ /^inst_per_s=/) { v = substr($i, 12); if (v == "") v = $(i + 1); print v } }' \
        "$work/peer.txt" | head -n1)
fi

echo
echo "## side by side: 10-service-task linear model, completed instances/s"
if [[ -n "$peer_rate" ]]; then
    echo "bpmn-engine a_linear_10svc conc=1 (in memory): $peer_rate inst/s"
else
    echo "bpmn-engine: not measured in this run; ratios left blank"
fi
echo
echo "| engine | store | lanes | inst/s | steps/s | commits/s | mean batch | × peer (this run) | target | × $peer_reference/s | target |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
if [[ -n "$peer_rate" ]]; then
    echo "| bpmn-engine | memory | 1 | $peer_rate | | | | 1.0 | | | |"
fi
awk -v peer="$peer_rate" -v ref="$peer_reference" '
    function verdict(rate, base, need) {
        if (need == 0) return ""
        return sprintf("≥ %d× %s", need, (rate / base >= need) ? "met" : "MISSED")
    }
    $1 == "throughput" {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        need = 0
        if (f["store"] == "memory") need = 200
        if (f["store"] == "sqlite") need = 20
        ratio = ""; target = ""
        if (peer != "" && peer > 0) {
            ratio = sprintf("%.0f", f["inst_per_s"] / peer)
            target = verdict(f["inst_per_s"], peer, need)
        }
        printf "| qflow | %s | %s | %.0f | %.0f | %.0f | %.1f | %s | %s | %.0f | %s |\n",
            f["store"], f["lanes"], f["inst_per_s"], f["steps_per_s"], f["commits_per_s"],
            f["mean_batch"], ratio, target, f["inst_per_s"] / ref, verdict(f["inst_per_s"], ref, need)
    }' "$QFLOW_BENCH_RESULTS"
if grep -q '^poll ' "$QFLOW_BENCH_RESULTS"; then
    echo
    echo "| timer poll | parked timers | mean µs | p50 µs | p99 µs |"
    echo "|---|---|---|---|---|"
    awk '$1 == "poll" {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        printf "| %s | %s | %s | %s | %s |\n", f["store"], f["parked"], f["mean_us"], f["p50_us"], f["p99_us"]
    }' "$QFLOW_BENCH_RESULTS"
fi
