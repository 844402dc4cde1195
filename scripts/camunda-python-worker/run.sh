#!/usr/bin/env bash
# Runs the PyPI camunda-external-task-client-python3 (pinned in requirements.txt),
# unmodified, against `qflow serve` on loopback: it completes, fails with retries and
# throws a BPMN error (run.py says how; docs/workers.md, "Camunda 7 compatibility").
# By hand, not in CI. Build the binary first: cargo build -p qflow-cli.
#
# Usage: scripts/camunda-python-worker/run.sh [QFLOW_BINARY]   (default target/debug/qflow)
# The virtual environment is made in $QFLOW_PY_VENV (default /tmp/qflow-camunda-py-venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
qflow=${1:-$root/target/debug/qflow}
venv=${QFLOW_PY_VENV:-/tmp/qflow-camunda-py-venv}
if [ ! -x "$qflow" ]; then
  echo "no qflow binary at $qflow: build it with cargo build -p qflow-cli" >&2
  exit 2
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
exec "$venv/bin/python" "$here/run.py" "$qflow"
