"""The PyPI Camunda 7 client, camunda-external-task-client-python3 (version pinned in
requirements.txt), unmodified, against a real `qflow serve` on loopback (docs/workers.md,
"Camunda 7 compatibility").

It starts `qflow serve` on 127.0.0.1 with a fresh SQLite file, deploys one Camunda 7
model per topic (an external task with an error boundary for DECLINED), starts one
instance of each, and runs the client's ExternalTaskWorker with its default
configuration except the bearer token (the client's own `auth_bearer` option), a short
long poll and a short sleep after errors:

  qf-py-complete  completes with variables and local variables
  qf-py-retry     fails once (retries = task retries - 1, retryTimeout 500 ms), then
                  completes
  qf-py-bpmn      throws the BPMN error DECLINED with a variable

The worker is driven through `ExternalTaskWorker.fetch_and_execute`, the call its
`subscribe` loop makes forever, so that a refused request fails this run at once instead
of being logged and retried. Each instance must end as expected; the run prints
`3 passed, 0 failed` and exits 0, or says what went wrong and exits 1.

Usage: python run.py QFLOW_BINARY   (run.sh makes the virtual environment and calls it)
With QFLOW_PY_CAPTURE=FILE, every request body the client sends is appended to FILE as
one JSON line {"url", "body"} (a wrapper around requests.post; the client is unchanged).
"""

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import requests

from camunda.external_task.external_task_worker import ExternalTaskWorker, NoExternalTaskFound

HERE = Path(__file__).resolve().parent
TOPICS = ["qf-py-complete", "qf-py-retry", "qf-py-bpmn"]
WORKER_ID = "camunda-py-worker"
# Bounds on a hang, not timing assertions.
BANNER_S = 60
RUN_S = 90


def fail(what):
    print(f"failed: {what}", file=sys.stderr)
    sys.exit(1)


def capture_requests(path):
    """Appends each body the client posts to `path`, then posts it unchanged."""
    real_post = requests.post

    def post(url, *args, **kwargs):
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"url": url, "body": kwargs.get("json")}) + "\n")
        return real_post(url, *args, **kwargs)

    requests.post = post


class Server:
    """`qflow serve` on a free loopback port; its first-contact admin token."""

    def __init__(self, binary, db):
        self.child = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--db", str(db)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "QFLOW_DATABASE_URL"},
        )
        lines = queue.Queue()
        threading.Thread(target=self._read, args=(lines,), daemon=True).start()
        said = []
        deadline = time.monotonic() + BANNER_S
        self.addr = None
        while self.addr is None:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                fail(f"no banner from qflow serve; it said: {said}")
            said.append(line)
            if line.startswith("qflow: serving http://"):
                self.addr = line.removeprefix("qflow: serving http://").split()[0]
        # The first-contact token follows the banner.
        deadline = time.monotonic() + BANNER_S
        self.token = None
        while self.token is None:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                fail(f"no token printed: {said}")
            said.append(line)
            if line.strip().startswith("qf_"):
                self.token = line.strip()

    def _read(self, lines):
        for line in self.child.stderr:
            lines.put(line.rstrip("\n"))

    def stop(self):
        self.child.kill()
        self.child.wait()

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://{self.addr}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}",
                     "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return res.status, json.loads(res.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def start(self, topic):
        process = topic.replace("-", "_")
        source = (HERE / "model.bpmn").read_text().replace("PROCESS", process).replace("TOPIC", topic)
        status, dep = self.call("POST", "/v1/deployments", {"source": source})
        if status != 200:
            fail(f"deploy {topic}: {status} {dep}")
        status, started = self.call("POST", "/v1/instances",
                                    {"deployment": dep["id"], "variables": {"amount": 21}})
        if status != 201:
            fail(f"start {topic}: {status} {started}")
        return started["instance"]

    def instance(self, id):
        return self.call("GET", f"/v1/instances/{id}")[1]

    def history(self, id):
        return self.call("GET", f"/v1/instances/{id}/history")[1]


def work(server):
    """Runs the client until every topic reached its final answer."""
    config = {
        "auth_bearer": {"access_token": server.token},
        "asyncResponseTimeout": 2000,
        "sleepSeconds": 1,
    }
    worker = ExternalTaskWorker(WORKER_ID, f"http://{server.addr}/engine-rest", config)
    pending = set(TOPICS)
    failed_once = set()

    def handle(task):
        topic = task.get_topic_name()
        if topic == "qf-py-complete":
            pending.discard(topic)
            return task.complete(
                {"receipt": "r-py", "charged": task.get_variable("amount") * 2,
                 "details": {"by": "python", "items": [1, 2]}},
                {"note": "local"},
            )
        if topic == "qf-py-retry" and topic not in failed_once:
            failed_once.add(topic)
            return task.failure("gateway down", "503 from upstream", 3, 500)
        if topic == "qf-py-retry":
            pending.discard(topic)
            return task.complete({"second": True})
        pending.discard(topic)
        return task.bpmn_error("DECLINED", "card declined", {"reason": "card limit"})

    deadline = time.monotonic() + RUN_S
    while pending:
        if time.monotonic() > deadline:
            fail(f"still pending after {RUN_S} s: {sorted(pending)}")
        try:
            worker.fetch_and_execute(TOPICS, handle)
        except NoExternalTaskFound:
            continue
        except Exception as e:  # noqa: BLE001 - the run reports whatever the client raised
            fail(f"the client raised: {type(e).__name__}: {e}")


def check(server, ids):
    results = []

    def expect(name, ok, detail):
        results.append(ok)
        print(f"{'ok' if ok else 'FAILED'}: {name}" + ("" if ok else f": {detail}"))

    view = server.instance(ids["qf-py-complete"])
    variables = view["snapshot"]["variables"]
    h = server.history(ids["qf-py-complete"])
    expect("complete", view["instance"]["status"] == "completed"
           and variables.get("receipt") == "r-py" and variables.get("charged") == 42
           and variables.get("details") == {"by": "python", "items": [1, 2]}
           and variables.get("note") == "local"
           and [a["worker"] for a in h] == [WORKER_ID], (view, h))

    view = server.instance(ids["qf-py-retry"])
    h = server.history(ids["qf-py-retry"])
    outcomes = [a["outcome"] for a in h]
    expect("failure with retries, then complete",
           view["instance"]["status"] == "completed" and outcomes == ["failed", "ok"]
           and h[0]["code"] == "PULL_TASK_FAILED"
           and "gateway down\n503 from upstream" in h[0]["message"]
           and h[1]["finished_at_ms"] - h[0]["finished_at_ms"] >= 500, (view, h))

    view = server.instance(ids["qf-py-bpmn"])
    h = server.history(ids["qf-py-bpmn"])
    expect("BPMN error", view["instance"]["status"] == "completed"
           and view["snapshot"]["variables"].get("reason") == "card limit"
           and [(a["outcome"], a["code"]) for a in h] == [("bpmn_error", "DECLINED")], (view, h))

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return passed == len(results)


def main():
    if len(sys.argv) != 2:
        fail("usage: run.py QFLOW_BINARY")
    if os.environ.get("QFLOW_PY_CAPTURE"):
        capture_requests(os.environ["QFLOW_PY_CAPTURE"])
    with tempfile.TemporaryDirectory() as dir:
        server = Server(sys.argv[1], Path(dir) / "qflow.sqlite")
        try:
            ids = {topic: server.start(topic) for topic in TOPICS}
            work(server)
            ok = check(server, ids)
        finally:
            server.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
