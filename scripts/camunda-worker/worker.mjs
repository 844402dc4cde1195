// Runs the official camunda-external-task-client-js against qflow serve's /engine-rest,
// unmodified but for a bearer token (an interceptor). Four topics, one behaviour each:
//   qf-complete  completes with variables
//   qf-retry     fails once with retries=1 and retryTimeout=500 ms, then completes
//   qf-bpmn      throws the BPMN error DECLINED (with a variable)
//   qf-extend    extends its 1 s lock to 10 s, works 2.5 s, then completes
// Exits 0 once every topic reached its final action, 1 on any error or after 90 s.
// Environment: QFLOW_URL (http://127.0.0.1:port), QFLOW_TOKEN (a token with the worker
// scope). Driven by cli/tests/camunda_worker.rs; see docs/workers.md.
import { Client, Variables, logger } from "camunda-external-task-client-js";

const base = process.env.QFLOW_URL;
const token = process.env.QFLOW_TOKEN;
if (!base || !token) {
  console.error("QFLOW_URL and QFLOW_TOKEN must be set");
  process.exit(2);
}

const bearer = (config) => ({
  ...config,
  headers: { ...config.headers, Authorization: `Bearer ${token}` },
});

const client = new Client({
  baseUrl: `${base}/engine-rest`,
  workerId: "camunda-js-worker",
  asyncResponseTimeout: 2000,
  interceptors: bearer,
  use: logger,
});

const pending = new Set(["qf-complete", "qf-retry", "qf-bpmn", "qf-extend"]);
const done = (topic) => {
  pending.delete(topic);
  console.log(`done: ${topic}`);
  if (pending.size === 0) {
    client.stop();
    // Let the last answer's socket close before leaving.
    setTimeout(() => process.exit(0), 200);
  }
};
const fail = (what, e) => {
  console.error(`failed: ${what}: ${e && (e.stack || e)}`);
  process.exit(1);
};
setTimeout(() => fail("timeout", `still pending after 90 s: ${[...pending]}`), 90_000).unref();

client.subscribe("qf-complete", async ({ task, taskService }) => {
  try {
    const vars = new Variables();
    vars.set("receipt", "r-42");
    vars.set("charged", task.variables.get("amount") * 2);
    vars.set("details", { by: "js", items: [1, 2] });
    await taskService.complete(task, vars);
    done("qf-complete");
  } catch (e) {
    fail("complete", e);
  }
});

client.subscribe("qf-retry", async ({ task, taskService }) => {
  try {
    if (task.retries > 1) {
      await taskService.handleFailure(task, {
        errorMessage: "gateway down",
        errorDetails: "503 from upstream",
        retries: 1,
        retryTimeout: 500,
      });
      console.log(`retry: failed attempt with retries=1 (task ${task.id})`);
    } else {
      await taskService.complete(task);
      done("qf-retry");
    }
  } catch (e) {
    fail("retry", e);
  }
});

client.subscribe("qf-bpmn", async ({ task, taskService }) => {
  try {
    const vars = new Variables();
    vars.set("reason", "card limit");
    await taskService.handleBpmnError(task, "DECLINED", "the card was declined", vars);
    done("qf-bpmn");
  } catch (e) {
    fail("bpmnError", e);
  }
});

client.subscribe("qf-extend", { lockDuration: 1000 }, async ({ task, taskService }) => {
  try {
    await taskService.extendLock(task, 10000);
    await new Promise((r) => setTimeout(r, 2500));
    await taskService.complete(task);
    done("qf-extend");
  } catch (e) {
    fail("extendLock", e);
  }
});
