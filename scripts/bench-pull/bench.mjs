// Pull-task benchmark driver (docs/performance.md, "Pull tasks through HTTP"), run by
// scripts/bench-pull/run.sh against a running `qflow serve`. Node's standard library
// only: keep-alive HTTP/1.1 on loopback.
//
//   node bench.mjs throughput --url=… --token=… --tasks=N --workers=W --batch=B
//   node bench.mjs longpoll   --url=… --token=… --rounds=R
//   node bench.mjs idle       --url=… --token=… --pid=P --waiting=100 --secs=5
//   node bench.mjs worker     (a child of `throughput`; arguments from the parent)
//
// `throughput` takes `--api=`: `native` (default: /v1/external-tasks), `camunda7`
// (/engine-rest/external-task: fetchAndLock and complete as Camunda 7's REST API has
// them), `zeebe` (/v2/jobs/activation and /completion, by hand) or `zeebe-client`
// (Camunda 8's official client's `createJobWorker`, from scripts/camunda8-client, as its
// README writes a worker: `maxParallelJobs` = the batch). Same load, same counts.
//
// Every mode is bounded in count and in time: it exits non-zero past its deadline.

import http from "node:http";
import fs from "node:fs";
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";

const args = Object.fromEntries(
  process.argv.slice(3).map((a) => {
    const [k, v] = a.replace(/^--/, "").split("=");
    return [k, v ?? "1"];
  }),
);
const mode = process.argv[2];
const base = new URL(args.url ?? "http://127.0.0.1:18091");
const token = args.token ?? process.env.QFLOW_TOKEN;
const agent = new http.Agent({ keepAlive: true, maxSockets: Number(args.sockets ?? 128) });

function call(method, path, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      {
        host: base.hostname,
        port: base.port,
        method,
        path,
        agent,
        headers: {
          Authorization: `Bearer ${token}`,
          ...(data ? { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) } : {}),
        },
      },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          resolve({ status: res.statusCode, body: text ? JSON.parse(text) : null });
        });
      },
    );
    req.on("error", reject);
    if (data) req.write(data);
    req.end();
  });
}

async function must(method, path, body, ok = [200, 201, 204]) {
  const r = await call(method, path, body);
  if (!ok.includes(r.status)) {
    throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  return r.body;
}

const model = (processId, topic) => `<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d_${processId}" targetNamespace="t">
  <process id="${processId}" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="work" q:topic="${topic}"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="work"/>
    <sequenceFlow id="f1" sourceRef="work" targetRef="end"/>
  </process>
</definitions>`;

function deadline(secs, what) {
  const t = setTimeout(() => {
    console.error(`bench: ${what} did not finish within ${secs} s`);
    process.exit(2);
  }, secs * 1000);
  t.unref();
}

// Starts `n` instances of `processId`, `conc` requests at a time.
async function startMany(processId, n, conc) {
  let next = 0;
  const one = async () => {
    while (next < n) {
      next += 1;
      await must("POST", `/v1/processes/${processId}/instances`, { variables: { n: next } });
    }
  };
  await Promise.all(Array.from({ length: conc }, one));
}

// CPU seconds (user + system) of process `pid` so far, from /proc/<pid>/stat.
function cpuSecs(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return (Number(rest[11]) + Number(rest[12])) / 100; // utime, stime in USER_HZ
}

function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function throughput() {
  const tasks = Number(args.tasks ?? 50000);
  const workers = Number(args.workers ?? 4);
  const batch = Number(args.batch ?? 100);
  deadline(Number(args.limit ?? 600), "the throughput run");
  await must("POST", "/v1/deployments", { source: model("pulled", "bench") });
  const t0 = performance.now();
  await startMany("pulled", tasks, 64);
  const loadSecs = (performance.now() - t0) / 1000;
  console.log(`loaded ${tasks} offered tasks in ${loadSecs.toFixed(1)} s (${Math.round(tasks / loadSecs)} starts/s)`);
  const before = await must("GET", "/v1/instance-counts");
  const serverCpu0 = args.pid ? cpuSecs(Number(args.pid)) : 0;
  // Workers start together; each reports its count and the instant of its last answer.
  const started = Date.now() + 300;
  const children = Array.from({ length: workers }, (_, i) =>
    fork(fileURLToPath(import.meta.url), [
      "worker",
      `--url=${base.href}`,
      `--token=${token}`,
      `--id=bench-${i}`,
      `--batch=${batch}`,
      `--at=${started}`,
      `--sockets=${args.conc ?? batch}`,
      `--api=${args.api ?? "native"}`,
    ]),
  );
  const reports = await Promise.all(
    children.map(
      (c) =>
        new Promise((resolve, reject) => {
          c.on("message", resolve);
          c.on("exit", (code) => code !== 0 && reject(new Error(`worker exited ${code}`)));
        }),
    ),
  );
  const done = reports.reduce((s, r) => s + r.completed, 0);
  const last = Math.max(...reports.map((r) => r.lastAt));
  const fetches = reports.reduce((s, r) => s + r.fetches, 0);
  const secs = (last - started) / 1000;
  const serverCpu = args.pid ? cpuSecs(Number(args.pid)) - serverCpu0 : null;
  const workerCpu = reports.reduce((s, r) => s + r.cpuSecs, 0);
  const after = await must("GET", "/v1/instance-counts");
  console.log(
    JSON.stringify({
      api: args.api ?? "native",
      tasks,
      workers,
      batch,
      completed_by_workers: done,
      fetches,
      mean_batch: +(done / Math.max(1, fetches)).toFixed(1),
      secs: +secs.toFixed(2),
      tasks_per_s: Math.round(done / secs),
      refused_answers: reports.reduce((s, r) => s + r.refused, 0),
      server_cpu_secs: serverCpu === null ? null : +serverCpu.toFixed(2),
      server_cpu_us_per_task: serverCpu === null ? null : Math.round((serverCpu * 1e6) / done),
      workers_cpu_secs: +workerCpu.toFixed(2),
      counts_before: before,
      counts_after: after,
    }),
  );
  if (done !== tasks || after.completed - before.completed !== tasks) {
    console.error("bench: not every task was completed exactly once");
    process.exit(1);
  }
  agent.destroy();
}

// One fetch of up to `batch` tasks for worker `id` over `api`, as `{id, complete}` pairs
// (`complete` answers the task and resolves to whether it was taken); `[]` when nothing
// was offered within half a second.
async function fetchBatch(api, id, batch) {
  switch (api) {
    case "native": {
      const locked = await must("POST", "/v1/external-tasks/fetch-and-lock", {
        worker_id: id,
        max_tasks: batch,
        wait_ms: 500,
        topics: [{ name: "bench", lock_duration_ms: 60000 }],
      });
      return locked.map((t) => async () =>
        (await call("POST", `/v1/external-tasks/${t.id}/complete`, { worker_id: id, variables: { done: true } }))
          .status === 200);
    }
    case "camunda7": {
      const locked = await must("POST", "/engine-rest/external-task/fetchAndLock", {
        workerId: id,
        maxTasks: batch,
        asyncResponseTimeout: 500,
        topics: [{ topicName: "bench", lockDuration: 60000 }],
      });
      return locked.map((t) => async () =>
        (await call("POST", `/engine-rest/external-task/${t.id}/complete`, {
          workerId: id,
          variables: { done: { value: true, type: "Boolean" } },
        })).status === 204);
    }
    case "zeebe": {
      const { jobs } = await must("POST", "/v2/jobs/activation", {
        type: "bench",
        worker: id,
        timeout: 60000,
        maxJobsToActivate: batch,
        requestTimeout: 500,
      });
      return jobs.map((j) => async () =>
        (await call("POST", `/v2/jobs/${j.jobKey}/completion`, { variables: { done: true } })).status === 204);
    }
    default:
      throw new Error(`unknown --api ${api}`);
  }
}

async function worker() {
  const id = args.id;
  const batch = Number(args.batch);
  const api = args.api ?? "native";
  await new Promise((r) => setTimeout(r, Math.max(0, Number(args.at) - Date.now())));
  if (api === "zeebe-client") return clientWorker(id, batch);
  let completed = 0;
  let refused = 0;
  let fetches = 0;
  let lastAt = Date.now();
  for (;;) {
    const locked = await fetchBatch(api, id, batch);
    if (locked.length === 0) break; // nothing offered for half a second: the load is done
    fetches += 1;
    await Promise.all(
      locked.map(async (complete) => {
        if (await complete()) completed += 1;
        else refused += 1;
      }),
    );
    lastAt = Date.now();
  }
  const cpu = process.cpuUsage();
  process.send({ completed, refused, fetches, lastAt, cpuSecs: (cpu.user + cpu.system) / 1e6 });
  agent.destroy();
}

// A worker as Camunda 8's official client's README writes one: `createJobWorker` with
// `maxParallelJobs` = the batch, a long poll of half a second, each job completed with
// `job.complete`. Stops once nothing has been activated for a second after its first job.
async function clientWorker(id, batch) {
  const here = fileURLToPath(new URL("../camunda8-client/node_modules/@camunda8/orchestration-cluster-api/dist/index.js", import.meta.url));
  const { default: createCamundaClient } = await import(here);
  const camunda = createCamundaClient({
    config: { CAMUNDA_REST_ADDRESS: base.href.replace(/\/$/, ""), CAMUNDA_AUTH_STRATEGY: "NONE" },
    fetch: (input, init) => {
      const req = new Request(input, init);
      const headers = new Headers(req.headers);
      headers.set("Authorization", `Bearer ${token}`);
      return fetch(new Request(req, { headers }));
    },
  });
  let completed = 0;
  let refused = 0;
  let lastAt = Date.now();
  camunda.createJobWorker({
    jobType: "bench",
    workerName: id,
    maxParallelJobs: batch,
    jobTimeoutMs: 60000,
    pollTimeoutMs: 500,
    jobHandler: async (job) => {
      try {
        const receipt = await job.complete({ done: true });
        completed += 1;
        lastAt = Date.now();
        return receipt;
      } catch (e) {
        refused += 1;
        throw e;
      }
    },
  });
  await new Promise((resolve) => {
    const tick = setInterval(() => {
      if (completed + refused > 0 && Date.now() - lastAt > 1000) {
        clearInterval(tick);
        resolve();
      }
    }, 100);
  });
  camunda.stopAllWorkers();
  const cpu = process.cpuUsage();
  process.send({ completed, refused, fetches: 0, lastAt, cpuSecs: (cpu.user + cpu.system) / 1e6 });
  setTimeout(() => process.exit(0), 100);
}

// A fetch waits on an empty topic; an instance is started mid-wait. Measured: from the
// start's 201 (the offer is durable) to the fetch's answer, and from sending the start.
async function longpoll() {
  const rounds = Number(args.rounds ?? 50);
  deadline(rounds * 2 + 30, "the long-polling run");
  await must("POST", "/v1/deployments", { source: model("lp", "lp") });
  const fromOffer = [];
  const fromStart = [];
  for (let i = 0; i < rounds; i += 1) {
    let answeredAt = 0;
    const fetch = must("POST", "/v1/external-tasks/fetch-and-lock", {
      worker_id: "lp",
      max_tasks: 1,
      wait_ms: 10000,
      topics: [{ name: "lp", lock_duration_ms: 10000 }],
    }).then((l) => {
      answeredAt = performance.now();
      return l;
    });
    // Let the fetch reach its wait (it looks once, finds nothing, parks).
    await new Promise((r) => setTimeout(r, 100 + (i % 7) * 13));
    const sentAt = performance.now();
    await must("POST", "/v1/processes/lp/instances", { variables: {} });
    const offeredAt = performance.now();
    const locked = await fetch;
    if (locked.length !== 1) throw new Error(`round ${i}: the waiting fetch got ${locked.length}`);
    await must("POST", `/v1/external-tasks/${locked[0].id}/complete`, { worker_id: "lp", variables: {} });
    fromOffer.push(Math.max(0, answeredAt - offeredAt));
    fromStart.push(answeredAt - sentAt);
  }
  const s = (a) => {
    const v = [...a].sort((x, y) => x - y);
    return { p50: +pct(v, 50).toFixed(2), p99: +pct(v, 99).toFixed(2), max: +v[v.length - 1].toFixed(2) };
  };
  console.log(JSON.stringify({ rounds, ms_after_offer_committed: s(fromOffer), ms_after_start_sent: s(fromStart) }));
  agent.destroy();
}

// CPU of the server process (`/proc/<pid>/stat` utime + stime) over `secs` with no
// request at all, then with `waiting` fetches parked on an empty topic.
async function idle() {
  const pid = Number(args.pid);
  const waiting = Number(args.waiting ?? 100);
  const secs = Number(args.secs ?? 5);
  deadline(secs * 2 + 30, "the idle run");
  const sample = async () => {
    const a = cpuSecs(pid);
    const t = performance.now();
    await new Promise((r) => setTimeout(r, secs * 1000));
    return (cpuSecs(pid) - a) / ((performance.now() - t) / 1000);
  };
  const quiet = await sample();
  const wait_ms = Math.min(25000, (secs + 5) * 1000);
  const fetches = Array.from({ length: waiting }, (_, i) =>
    must("POST", "/v1/external-tasks/fetch-and-lock", {
      worker_id: `idle-${i}`,
      max_tasks: 1,
      wait_ms,
      topics: [{ name: "nobody-offers-this", lock_duration_ms: 1000 }],
    }),
  );
  await new Promise((r) => setTimeout(r, 1000)); // every fetch has looked once and parked
  const parked = await sample();
  const answers = await Promise.all(fetches);
  const empty = answers.every((a) => a.length === 0);
  console.log(
    JSON.stringify({
      waiting,
      secs,
      cpu_share_no_requests: +(quiet * 100).toFixed(2) + "%",
      cpu_share_with_waiting: +(parked * 100).toFixed(2) + "%",
      all_answered_empty_at_deadline: empty,
    }),
  );
  agent.destroy();
}

const modes = { throughput, worker, longpoll, idle };
if (!modes[mode]) {
  console.error("usage: node bench.mjs throughput|longpoll|idle …");
  process.exit(64);
}
modes[mode]().catch((e) => {
  console.error(`bench: ${e.stack ?? e}`);
  process.exit(1);
});
