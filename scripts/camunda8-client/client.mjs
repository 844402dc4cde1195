// Camunda 8's official TypeScript client, @camunda8/orchestration-cluster-api (pinned in
// package.json), driving `qflow serve`'s Orchestration Cluster API (`/v2`) the way a
// Camunda 8 user would: read the topology, deploy Zeebe models from files, create
// instances, run job workers that complete, fail with a back-off, throw a BPMN error and
// fail into an incident, publish and correlate messages, find and complete a user task,
// find and resolve the incident, and check that every instance ended COMPLETED.
//
// Each phase prints `ok <phase>` or `FAIL <phase>: <reason>`, followed on failure by the
// HTTP exchanges the client made in it (method, path, body sent; status, body answered)
// and any schema-validation findings. Every phase is attempted; the exit status is 1
// when any failed. The whole run is bounded (90 s); workers are stopped at the end.
//
// Usage: QFLOW_URL=http://127.0.0.1:PORT QFLOW_TOKEN=qf_… node client.mjs [URL]
// Environment:
//   CAMUNDA_SDK_VALIDATION  the client's validation mode, default `req:strict,res:warn`:
//                           requests must fit the client's schemas; answers are checked
//                           too, and each finding must be a member qflow sends as null
//                           where this 8.8 client's schema says "optional" (Camunda's own
//                           servers send these nulls, and 8.9 declares them nullable,
//                           camunda/camunda#46271); any other finding fails the run
//   QFLOW_C8_TRACE=1        print every exchange as it happens (stderr)
//
// Run by cli/tests/camunda8_client.rs against a fresh `qflow serve`.

import { AsyncLocalStorage } from "node:async_hooks";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import createCamundaClient from "@camunda8/orchestration-cluster-api";

const RUN_LIMIT_MS = 90_000;
const address = process.argv[2] ?? process.env.QFLOW_URL;
const token = process.env.QFLOW_TOKEN;
if (!address || !token) {
  console.error("usage: QFLOW_URL=http://host:port QFLOW_TOKEN=qf_… node client.mjs [URL]");
  process.exit(2);
}
const validation = process.env.CAMUNDA_SDK_VALIDATION || "req:strict,res:warn";
const trace = process.env.QFLOW_C8_TRACE === "1";
const started = Date.now();

const overall = setTimeout(() => {
  console.log(`FAIL run: not finished within ${RUN_LIMIT_MS} ms`);
  report();
  process.exit(1);
}, RUN_LIMIT_MS);

// ---------------------------------------------------------------------------------------
// What the client sends and gets, kept per phase (an AsyncLocalStorage carries the phase
// into the client's own promise chains and into the job handlers).

const als = new AsyncLocalStorage();
const logs = new Map(); // phase -> [{ line }]
const scope = (phase) => {
  if (!logs.has(phase)) logs.set(phase, []);
  return { phase, lines: logs.get(phase) };
};
const note = (line) => {
  const s = als.getStore() ?? scope("other");
  s.lines.push(line);
  if (trace) console.error(`[${s.phase}] ${line}`);
};

// The members qflow answered null, as paths with array indices folded (`items.*.endDate`),
// over every answer of the run: a response finding about one of them is the null that
// Camunda's servers send too.
const nullPaths = new Set();
function recordNulls(value, path) {
  if (value === null) {
    if (path) nullPaths.add(path);
  } else if (Array.isArray(value)) {
    for (const v of value) recordNulls(v, path ? `${path}.*` : "*");
  } else if (typeof value === "object") {
    for (const [k, v] of Object.entries(value)) recordNulls(v, path ? `${path}.${k}` : k);
  }
}

// Schema findings, `<operation> <side>` -> issues (array indices folded: `jobs.*.jobKey`).
const findings = new Map();
function schemaFinding(operation, side, issues) {
  const key = `${operation} ${side}`;
  if (!findings.has(key)) findings.set(key, new Set());
  for (const issue of issues ?? []) findings.get(key).add(String(issue).replace(/\.\d+\./g, ".*."));
}

// JSON for messages: the client's search answers carry BigInts (`page.totalItems`),
// which JSON.stringify refuses.
const json = (value) => JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v));

const clip = (text, max = 400) =>
  text.length > max ? `${text.slice(0, max)}… (${text.length} chars)` : text;

async function describeSent(req) {
  const type = req.headers.get("content-type") ?? "";
  if (req.method === "GET" || req.method === "HEAD") return "";
  try {
    if (type.startsWith("multipart/form-data")) {
      const form = await req.formData();
      const parts = [];
      for (const [name, value] of form.entries()) {
        parts.push(
          typeof value === "string" ? `${name}=${value}` : `${name}=<file ${value.name}, ${value.size} B>`,
        );
      }
      return `multipart{${parts.join(", ")}}`;
    }
    return clip(await req.text());
  } catch (e) {
    return `<unreadable body: ${e.message}>`;
  }
}

// The client's auth strategies are NONE, BASIC and OAUTH (client credentials against a
// token endpoint): none sends a static bearer token, and with NONE its header hook is not
// consulted. So qflow's token is added here, in the client's documented custom `fetch`,
// which also records each exchange.
async function qflowFetch(input, init) {
  let req = input instanceof Request ? input : new Request(input, init);
  const headers = new Headers(req.headers);
  headers.set("Authorization", `Bearer ${token}`);
  req = new Request(req, { headers });
  const url = new URL(req.url);
  const sent = await describeSent(req.clone());
  const what = `${req.method} ${url.pathname}${url.search}`;
  let res;
  try {
    res = await fetch(req);
  } catch (e) {
    note(`> ${what} ${sent}\n    < network error: ${e.cause?.message ?? e.message}`);
    throw e;
  }
  const text = await res.clone().text();
  try {
    recordNulls(JSON.parse(text), "");
  } catch {
    // Not JSON (a 204): nothing answered null.
  }
  // A long poll that found nothing is noise.
  const emptyPoll = url.pathname.endsWith("/jobs/activation") && res.status === 200 && /^\{"jobs":\[\]\}$/.test(text);
  if (!emptyPoll) {
    note(`> ${what} ${sent}\n    < ${res.status} ${clip(text)}`);
  }
  return res;
}

const camunda = createCamundaClient({
  config: {
    CAMUNDA_REST_ADDRESS: address,
    CAMUNDA_AUTH_STRATEGY: "NONE",
    CAMUNDA_SDK_VALIDATION: validation,
  },
  fetch: qflowFetch,
  log: {
    level: "warn",
    transport: (evt) => {
      if (!["warn", "error"].includes(evt.level)) return;
      const args = (evt.args ?? []).map((a) => (typeof a === "function" ? a() : a));
      for (const a of args) if (a?.name === "CamundaValidationError") schemaFinding(a.operationId, a.side, a.issues);
      const text = args
        .map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : json(a)))
        .join(" ");
      // A validation warning: `Invalid <operation> <side>: … Issues: - … - …`.
      const warned = /^Invalid (\w+) (request|response):[\s\S]*?Issues:([\s\S]*)$/.exec(text);
      if (warned) {
        const issues = warned[3].split(/\n\s*- /).map((i) => i.trim().replace(/^- /, "")).filter(Boolean);
        schemaFinding(warned[1], warned[2], issues);
        note(`! ${warned[1]} ${warned[2]} fails the client's schema (listed at the end)`);
        return;
      }
      note(`! client ${evt.level} [${evt.scope}] ${clip(text.replace(/\s+/g, " "), 600)}`);
    },
  },
});

// ---------------------------------------------------------------------------------------
// Phases.

const results = []; // [phase, ok, reason]

function describeError(e) {
  if (!e) return String(e);
  switch (e.name) {
    case "HttpSdkError":
      return `${e.operationId ?? "request"}: HTTP ${e.status}${e.title ? ` ${e.title}` : ""}${e.detail ? `: ${e.detail}` : ""}`;
    case "CamundaValidationError":
      return `${e.operationId} ${e.side} failed the client's schema: ${(e.issues ?? []).join("; ")}`;
    case "EventualConsistencyTimeoutError":
      return `${e.operationId}: no satisfying answer within ${e.elapsedMs} ms (${e.attempts} attempts, last status ${e.lastStatus ?? "none"})`;
    default: {
      // In strict mode the client throws a plain Error carrying the issues.
      const invalid = /^Invalid (\w+) (request|response)/.exec(e.message ?? "");
      if (invalid && Array.isArray(e.issues)) {
        schemaFinding(invalid[1], invalid[2], e.issues);
        return `${invalid[1]} ${invalid[2]} failed the client's schema: ${e.issues.join("; ")}`;
      }
      return e.name && e.name !== "Error" ? `${e.name}: ${e.message}` : e.message;
    }
  }
}

async function phase(name, fn) {
  const s = scope(name);
  try {
    await als.run(s, fn);
    results.push([name, true]);
    console.log(`ok ${name}`);
  } catch (e) {
    results.push([name, false, describeError(e)]);
    console.log(`FAIL ${name}: ${describeError(e)}`);
    printLines(s.lines, 12);
  }
}

/** Prints `lines` once each (keys folded: the same exchange for another instance is a
 * repeat), with their repeat counts, at most `max` of them. */
function printLines(lines, max) {
  const fold = (l) =>
    l
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(%3A|:)?[0-9]*(%3A|:)?[\w-]*/g, "<key>")
      .replace(/\b\d{6,}\b/g, "<n>")
      .replace(/"(orderId|amount|behaviour|correlationKey)":("[^"]*"|\d+)/g, '"$1":…');
  const seen = new Map();
  for (const line of lines) {
    const k = fold(line);
    const e = seen.get(k);
    if (e) e.count += 1;
    else seen.set(k, { line, count: 1 });
  }
  const unique = [...seen.values()];
  for (const { line, count } of unique.slice(0, max)) {
    console.log(`    ${line}${count > 1 ? `  (and ${count - 1} more like it)` : ""}`);
  }
  if (unique.length > max) console.log(`    … ${unique.length - max} more`);
}

function check(cond, what) {
  if (!cond) throw new Error(what);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function deferred() {
  let resolve, reject;
  const p = new Promise((a, b) => {
    resolve = a;
    reject = b;
  });
  p.catch(() => {});
  return { p, resolve, reject };
}

/** `p`, or an error saying what did not happen by `deadline` (ms since the epoch). */
function by(deadline, p, what) {
  const left = Math.max(0, deadline - Date.now());
  let timer;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not happen within the wait`)), left);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** The response findings that are not a null qflow sent (see `nullPaths`). */
function unexplainedFindings() {
  const out = [];
  for (const [key, issues] of findings) {
    if (!key.endsWith(" response")) {
      for (const issue of issues) out.push(`${key}: ${issue}`);
      continue;
    }
    for (const issue of issues) {
      const path = String(issue).split(":")[0].trim().replace(/\.\d+\./g, ".*.").replace(/\.\d+$/, ".*");
      if (!nullPaths.has(path)) out.push(`${key}: ${issue}`);
    }
  }
  return out;
}

function report() {
  const unexplained = unexplainedFindings();
  if (unexplained.length) {
    results.push(["schema", false, unexplained.join("; ")]);
    console.log(`FAIL schema: ${unexplained.length} findings that are not a null qflow sent`);
  }
  const failed = results.filter(([, ok]) => !ok);
  console.log(
    `camunda8-client: ${results.length - failed.length} of ${results.length} phases ok ` +
      `(validation ${validation}, ${Date.now() - started} ms)`,
  );
  const worker = logs.get("worker") ?? [];
  if (failed.length && worker.length) {
    console.log("worker exchanges (activations that returned jobs or errors, job answers outside a phase):");
    printLines(worker, 8);
  }
  if (findings.size) {
    console.log(`schema findings (where qflow's requests or answers do not fit the client's schemas; mode ${validation}):`);
    for (const [key, issues] of findings) console.log(`    ${key}: ${[...issues].join("; ")}`);
  }
}

// ---------------------------------------------------------------------------------------
// The models: Zeebe-flavoured BPMN as Camunda Modeler writes it for Camunda 8.

const HEADER = `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
    xmlns:modeler="http://camunda.org/schema/modeler/1.0"`;
const PLATFORM = `targetNamespace="http://bpmn.io/schema/bpmn" exporter="Camunda Modeler" exporterVersion="5.40.0"
    modeler:executionPlatform="Camunda Cloud" modeler:executionPlatformVersion="8.8.0"`;

const MODELS = {
  // A charge job with an error boundary for DECLINED.
  "c8-charge.bpmn": `${HEADER} id="defs-c8-charge" ${PLATFORM}>
  <bpmn:error id="declined_error" name="Declined" errorCode="DECLINED"/>
  <bpmn:process id="c8-charge" name="Charge" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="charge" name="Charge the card">
      <bpmn:extensionElements>
        <zeebe:taskDefinition type="c8-charge" retries="3"/>
        <zeebe:taskHeaders>
          <zeebe:header key="region" value="eu"/>
        </zeebe:taskHeaders>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:boundaryEvent id="on_declined" attachedToRef="charge">
      <bpmn:errorEventDefinition errorRef="declined_error"/>
    </bpmn:boundaryEvent>
    <bpmn:endEvent id="charged"/>
    <bpmn:endEvent id="declined"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>
    <bpmn:sequenceFlow id="f1" sourceRef="charge" targetRef="charged"/>
    <bpmn:sequenceFlow id="f2" sourceRef="on_declined" targetRef="declined"/>
  </bpmn:process>
</bpmn:definitions>
`,
  // A wait for a message correlated by the instance's orderId.
  "c8-payment.bpmn": `${HEADER} id="defs-c8-payment" ${PLATFORM}>
  <bpmn:message id="paid_msg" name="payment-confirmed">
    <bpmn:extensionElements>
      <zeebe:subscription correlationKey="=orderId"/>
    </bpmn:extensionElements>
  </bpmn:message>
  <bpmn:process id="c8-payment" name="Await payment" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:intermediateCatchEvent id="wait_paid" name="Payment confirmed">
      <bpmn:messageEventDefinition messageRef="paid_msg"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:endEvent id="paid"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="wait_paid"/>
    <bpmn:sequenceFlow id="f1" sourceRef="wait_paid" targetRef="paid"/>
  </bpmn:process>
</bpmn:definitions>
`,
  // A Camunda user task, then a ship job with a start execution listener (a job of its
  // own type, run before the ship job).
  "c8-review.bpmn": `${HEADER} id="defs-c8-review" ${PLATFORM}>
  <bpmn:process id="c8-review" name="Review and ship" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:userTask id="review" name="Review the order">
      <bpmn:extensionElements>
        <zeebe:userTask/>
        <zeebe:assignmentDefinition candidateGroups="reviewers"/>
      </bpmn:extensionElements>
    </bpmn:userTask>
    <bpmn:serviceTask id="ship" name="Ship">
      <bpmn:extensionElements>
        <zeebe:taskDefinition type="c8-ship"/>
        <zeebe:executionListeners>
          <zeebe:executionListener eventType="start" type="c8-ship-check" retries="2"/>
        </zeebe:executionListeners>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:endEvent id="shipped"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="review"/>
    <bpmn:sequenceFlow id="f1" sourceRef="review" targetRef="ship"/>
    <bpmn:sequenceFlow id="f2" sourceRef="ship" targetRef="shipped"/>
  </bpmn:process>
</bpmn:definitions>
`,
};

// ---------------------------------------------------------------------------------------
// The scenario.

const dir = mkdtempSync(join(tmpdir(), "qflow-c8-"));
const files = Object.entries(MODELS).map(([name, xml]) => {
  const path = join(dir, name);
  writeFileSync(path, xml);
  return path;
});

// The instances, by role: process id, variables, and the key qflow gives it. Order ids
// (the messages' correlation keys) are unique to the run, so that a server that has seen
// an earlier run correlates with this one's instances only.
const run = Date.now().toString(36);
const instances = {
  complete: { process: "c8-charge", variables: { orderId: `o-complete-${run}`, amount: 42, behaviour: "complete" } },
  retry: { process: "c8-charge", variables: { orderId: `o-retry-${run}`, amount: 7, behaviour: "retry" } },
  declined: { process: "c8-charge", variables: { orderId: `o-declined-${run}`, amount: 9000, behaviour: "declined" } },
  incident: { process: "c8-charge", variables: { orderId: `o-incident-${run}`, amount: 5, behaviour: "incident" } },
  published: { process: "c8-payment", variables: { orderId: `o-pub-${run}` } },
  correlated: { process: "c8-payment", variables: { orderId: `o-cor-${run}` } },
  // Created after its message was published with a time to live (phase g): `late`.
  kept: { process: "c8-payment", variables: { orderId: `o-kept-${run}` }, late: true },
  review: { process: "c8-review", variables: { orderId: `o-review-${run}`, amount: 3 } },
};

// What the job handlers report back to the phases.
const done = {
  complete: deferred(),
  retry: deferred(),
  declined: deferred(),
  incidentRaised: deferred(),
  incidentCompleted: deferred(),
  shipped: deferred(),
  checked: deferred(),
};
const retryAttempts = []; // [{at, retries, jobKey}]
let incidentAttempts = 0;
const workers = [];
// Jobs of the charge phases must arrive by then (set when the workers start).
let jobsDeadline = 0;

await phase("a-topology", async () => {
  const topology = await camunda.getTopology();
  check(Array.isArray(topology.brokers) && topology.brokers.length > 0, `no brokers in ${json(topology)}`);
  const partitions = topology.brokers.flatMap((b) => b.partitions ?? []);
  check(
    partitions.some((p) => p.role === "leader" && p.health === "healthy"),
    `no healthy leader partition in ${json(topology)}`,
  );
});

let deployed = false;
await phase("b-deploy", async () => {
  const result = await camunda.deployResourcesFromFiles(files);
  const ids = (result.processes ?? []).map((p) => p.processDefinitionId).sort();
  check(
    json(ids) === json(["c8-charge", "c8-payment", "c8-review"]),
    `deployed processes ${json(ids)}, expected c8-charge, c8-payment, c8-review`,
  );
  check(typeof result.deploymentKey === "string" && result.deploymentKey !== "", "no deploymentKey");
  deployed = true;
});

await phase("c-create-instances", async () => {
  check(deployed, "nothing deployed");
  const failures = [];
  for (const [role, inst] of Object.entries(instances)) {
    if (inst.late) continue;
    try {
      const created = await camunda.createProcessInstance({
        processDefinitionId: inst.process,
        variables: inst.variables,
      });
      check(created.processDefinitionId === inst.process, `${role}: created ${created.processDefinitionId}`);
      check(created.processInstanceKey, `${role}: no processInstanceKey`);
      inst.key = created.processInstanceKey;
    } catch (e) {
      failures.push(`${role}: ${describeError(e)}`);
    }
  }
  check(failures.length === 0, failures.join("; "));
});

// The workers: one client, one worker per job type, as the README shows.
als.run(scope("worker"), () => {
  jobsDeadline = Date.now() + 25_000;
  const common = {
    maxParallelJobs: 8,
    jobTimeoutMs: 20_000,
    pollTimeoutMs: 5_000,
    pollIntervalMs: 100,
  };
  workers.push(
    camunda.createJobWorker({
      ...common,
      jobType: "c8-charge",
      workerName: "qflow-c8-charge",
      jobHandler: (job) => charge(job),
    }),
    camunda.createJobWorker({
      ...common,
      jobType: "c8-ship",
      workerName: "qflow-c8-ship",
      jobHandler: (job) =>
        answer(job, "h-user-task", done.shipped, async () => {
          const v = job.variables ?? {};
          check(v.checked === true, `the ship job's variables lack the listener's: ${json(v)}`);
          return job.complete({ shipped: true, carrier: "post" });
        }),
    }),
    // The execution listener's job: Camunda 8 marks it EXECUTION_LISTENER, START, at the
    // element it listens on.
    camunda.createJobWorker({
      ...common,
      jobType: "c8-ship-check",
      workerName: "qflow-c8-ship-check",
      jobHandler: (job) =>
        answer(job, "i0-execution-listener", done.checked, async () => {
          check(job.kind === "EXECUTION_LISTENER", `kind ${job.kind}`);
          check(job.listenerEventType === "START", `listenerEventType ${job.listenerEventType}`);
          check(job.elementId === "ship", `elementId ${job.elementId}`);
          return job.complete({ checked: true });
        }),
    }),
  );
});

/** Runs one job action in the phase it belongs to; reports its outcome to `waiter`. */
async function answer(job, phaseName, waiter, action) {
  return als.run(scope(phaseName), async () => {
    try {
      const receipt = await action();
      waiter?.resolve(job);
      return receipt;
    } catch (e) {
      waiter?.reject(e);
      return job.ignore();
    }
  });
}

async function charge(job) {
  const v = job.variables ?? {};
  // Dispatched by instance: a job of an instance this run did not create (an earlier
  // run's, on a reused server) is left alone.
  const [role] = Object.entries(instances).find(([, inst]) => inst.key && inst.key === job.processInstanceKey) ?? [];
  switch (role) {
    case "complete":
      return answer(job, "d-worker-complete", done.complete, async () => {
        check(v.amount === 42 && v.orderId === instances.complete.variables.orderId, `job variables ${json(v)}`);
        check(job.customHeaders?.region === "eu", `customHeaders ${json(job.customHeaders)}`);
        return job.complete({ charged: v.amount, receipt: `r-${v.orderId}` });
      });
    case "retry":
      retryAttempts.push({ at: Date.now(), retries: job.retries, jobKey: job.jobKey });
      if (retryAttempts.length === 1) {
        // Only a refused failure ends the phase here; the next attempt completes it.
        return answer(job, "e-fail-with-backoff", { resolve() {}, reject: done.retry.reject }, () =>
          job.fail({ errorMessage: "gateway down", retries: job.retries - 1, retryBackOff: 1_000 }),
        );
      }
      return answer(job, "e-fail-with-backoff", done.retry, async () => {
        const [first, second] = retryAttempts;
        check(second.retries === first.retries - 1, `retries ${first.retries} then ${second.retries}`);
        check(second.at - first.at >= 900, `offered again after ${second.at - first.at} ms, back-off was 1000 ms`);
        return job.complete({ charged: v.amount });
      });
    case "declined":
      return answer(job, "f-bpmn-error", done.declined, () =>
        job.error({ errorCode: "DECLINED", errorMessage: "card declined", variables: { reason: "limit" } }),
      );
    case "incident":
      incidentAttempts += 1;
      if (incidentAttempts === 1) {
        return answer(job, "i-incident", done.incidentRaised, () =>
          job.fail({ errorMessage: "ledger unreachable", retries: 0 }),
        );
      }
      return answer(job, "i-incident", done.incidentCompleted, () => job.complete({ charged: v.amount }));
    default:
      note(`! left alone: a job of instance ${job.processInstanceKey}, not this run's`);
      return job.ignore();
  }
}

await phase("d-worker-complete", async () => {
  check(instances.complete.key, "no instance");
  await by(jobsDeadline, done.complete.p, "the c8-charge job completed with variables");
});

await phase("e-fail-with-backoff", async () => {
  check(instances.retry.key, "no instance");
  await by(jobsDeadline, done.retry.p, "a failed job (retries 2, retryBackOff 1000 ms) offered again and completed");
});

await phase("f-bpmn-error", async () => {
  check(instances.declined.key, "no instance");
  await by(jobsDeadline, done.declined.p, "a BPMN error DECLINED thrown from the job");
});

await phase("g-message", async () => {
  check(instances.published.key && instances.correlated.key, "no instances");
  const failures = [];
  try {
    // Published with a time to live of 0: the instance waits already.
    const published = await camunda.publishMessage({
      name: "payment-confirmed",
      correlationKey: instances.published.variables.orderId,
      timeToLive: 0,
      variables: { paid: true },
    });
    check(published.messageKey, "no messageKey");
  } catch (e) {
    failures.push(`publishMessage: ${describeError(e)}`);
  }
  try {
    const correlated = await camunda.correlateMessage({
      name: "payment-confirmed",
      correlationKey: instances.correlated.variables.orderId,
      variables: { paid: true },
    });
    check(
      correlated.processInstanceKey === instances.correlated.key,
      `correlated with ${correlated.processInstanceKey}, expected ${instances.correlated.key}`,
    );
  } catch (e) {
    failures.push(`correlateMessage: ${describeError(e)}`);
  }
  // Published with a time to live before its instance exists: kept, and taken by the
  // instance's wait when it opens (phase j sees it COMPLETED). The same messageId again,
  // while the first is kept, is refused with 409.
  const kept = instances.kept;
  const keptMessage = {
    name: "payment-confirmed",
    correlationKey: kept.variables.orderId,
    timeToLive: 60_000,
    messageId: `pay-${run}`,
    variables: { paid: "kept" },
  };
  try {
    const published = await camunda.publishMessage(keptMessage);
    check(published.messageKey, "no messageKey for the kept message");
  } catch (e) {
    failures.push(`publishMessage with timeToLive: ${describeError(e)}`);
  }
  try {
    await camunda.publishMessage(keptMessage);
    failures.push("publishMessage of a kept messageId again: accepted, expected 409");
  } catch (e) {
    const why = describeError(e);
    if (!/HTTP 409/.test(why)) failures.push(`publishMessage of a kept messageId again: ${why}`);
  }
  try {
    const created = await camunda.createProcessInstance({
      processDefinitionId: kept.process,
      variables: kept.variables,
    });
    kept.key = created.processInstanceKey;
  } catch (e) {
    failures.push(`createProcessInstance after the kept message: ${describeError(e)}`);
  }
  check(failures.length === 0, failures.join("; "));
});

await phase("h-user-task", async () => {
  check(instances.review.key, "no instance");
  const found = await camunda.searchUserTasks(
    { filter: { processInstanceKey: instances.review.key, state: "CREATED" } },
    { consistency: { waitUpToMs: 5_000, pollIntervalMs: 250 } },
  );
  const task = found.items?.[0];
  check(task, `no user task in ${json(found)}`);
  check(task.elementId === "review", `found user task at ${task.elementId}`);
  check((task.candidateGroups ?? []).includes("reviewers"), `candidateGroups ${json(task.candidateGroups)}`);
  await camunda.assignUserTask({ userTaskKey: task.userTaskKey, assignee: "demo", allowOverride: true });
  await camunda.completeUserTask({ userTaskKey: task.userTaskKey, variables: { approved: true } });
  await by(Date.now() + 10_000, done.shipped.p, "the c8-ship job after the user task completed");
});

await phase("i0-execution-listener", async () => {
  check(instances.review.key, "no instance");
  await by(Date.now() + 10_000, done.checked.p, "the ship task's start listener job completed");
});

await phase("i-incident", async () => {
  check(instances.incident.key, "no instance");
  await by(jobsDeadline, done.incidentRaised.p, "the job failed with retries 0");
  const found = await camunda.searchIncidents(
    { filter: { processInstanceKey: instances.incident.key, state: "ACTIVE" } },
    { consistency: { waitUpToMs: 5_000, pollIntervalMs: 250 } },
  );
  const incident = found.items?.[0];
  check(incident, `no incident in ${json(found)}`);
  check(incident.elementId === "charge", `incident at ${incident.elementId}`);
  // As Camunda documents it: give the job retries back, then resolve the incident (a
  // job-failure incident resolved with 0 retries is raised again).
  const failures = [];
  if (incident.jobKey) {
    try {
      await camunda.updateJob({ jobKey: incident.jobKey, changeset: { retries: 1 } });
    } catch (e) {
      failures.push(`updateJob retries: ${describeError(e)}`);
    }
  } else {
    failures.push(`the incident names no jobKey: ${json(incident)}`);
  }
  try {
    await camunda.resolveIncident({ incidentKey: incident.incidentKey });
  } catch (e) {
    failures.push(`resolveIncident: ${describeError(e)}`);
  }
  check(failures.length === 0, failures.join("; "));
  await by(Date.now() + 10_000, done.incidentCompleted.p, "the job offered again after the resolution, completed");
});

await phase("j-end-states", async () => {
  const roles = Object.entries(instances).filter(([, inst]) => inst.key);
  check(roles.length === Object.keys(instances).length, "not every instance was created");
  const states = await Promise.all(
    roles.map(async ([role, inst]) => {
      try {
        const pi = await camunda.getProcessInstance(
          { processInstanceKey: inst.key },
          { consistency: { waitUpToMs: 8_000, pollIntervalMs: 250, predicate: (r) => r?.state === "COMPLETED" } },
        );
        return pi.state === "COMPLETED" && pi.processDefinitionId === inst.process
          ? null
          : `${role}: ${pi.state} ${pi.processDefinitionId}`;
      } catch (e) {
        return `${role}: ${describeError(e)}`;
      }
    }),
  );
  const failures = states.filter(Boolean);
  try {
    const wanted = roles.filter(([, inst]) => inst.process === "c8-charge").map(([, inst]) => inst.key);
    const found = await camunda.searchProcessInstances(
      { filter: { processDefinitionId: "c8-charge", state: "COMPLETED" } },
      {
        consistency: {
          waitUpToMs: 5_000,
          pollIntervalMs: 250,
          predicate: (r) => wanted.every((k) => (r.items ?? []).some((i) => i.processInstanceKey === k)),
        },
      },
    );
    const keys = (found.items ?? []).map((i) => i.processInstanceKey);
    check(
      wanted.every((k) => keys.includes(k)),
      `search for COMPLETED c8-charge instances found ${json(keys)}, expected ${json(wanted)}`,
    );
  } catch (e) {
    failures.push(`searchProcessInstances: ${describeError(e)}`);
  }
  check(failures.length === 0, failures.join("; "));
});

// Stop the workers (cancelling their long polls), clean up, report.
for (const w of workers) w.stop();
camunda.stopAllWorkers?.();
rmSync(dir, { recursive: true, force: true });
clearTimeout(overall);
report();
process.exit(results.every(([, ok]) => ok) ? 0 : 1);
