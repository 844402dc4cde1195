// Serves the topics qflow derives from Camunda 7 Java bindings, with the official
// camunda-external-task-client-js, unmodified but for a bearer token (an interceptor).
// The models are Camunda's own examples, deployed unchanged (cli/tests/camunda_worker.rs):
//   spring-boot-starter/example-twitter  #{tweetAdapter}, #{emailAdapter}
//   failed-job-retry-profile             ServiceTaskOneDelegate, ServiceTaskTwoDelegate
// Each task must carry its binding in `extensionProperties` (asked for with
// includeExtensionProperties) beside the model's camunda:properties. The first
// serviceTaskTwoDelegate task fails once with retries=1 and a 300 ms retry timeout.
// Environment: QFLOW_URL, QFLOW_TOKEN, QFLOW_EXPECT (JSON: topic -> tasks to complete).
// Prints one `done: <topic> <activityId> <json of extensionProperties>` line per completed
// task; exits 0 when every expected task completed, 1 on any error or after 90 s.
import { Client, Variables, logger } from "camunda-external-task-client-js";

const base = process.env.QFLOW_URL;
const token = process.env.QFLOW_TOKEN;
const expect = JSON.parse(process.env.QFLOW_EXPECT || "null");
if (!base || !token || !expect) {
  console.error("QFLOW_URL, QFLOW_TOKEN and QFLOW_EXPECT must be set");
  process.exit(2);
}

const bearer = (config) => ({
  ...config,
  headers: { ...config.headers, Authorization: `Bearer ${token}` },
});

const client = new Client({
  baseUrl: `${base}/engine-rest`,
  workerId: "camunda-js-delegates",
  asyncResponseTimeout: 2000,
  interceptors: bearer,
  use: logger,
});

const left = { ...expect };
const fail = (what, e) => {
  console.error(`failed: ${what}: ${e && (e.stack || e)}`);
  process.exit(1);
};
setTimeout(() => fail("timeout", `still expected after 90 s: ${JSON.stringify(left)}`), 90_000).unref();

const bindings = {
  tweetAdapter: ["delegateExpression", "#{tweetAdapter}"],
  emailAdapter: ["delegateExpression", "#{emailAdapter}"],
  serviceTaskOneDelegate: ["class", "org.camunda.bpm.example.delegate.ServiceTaskOneDelegate"],
  serviceTaskTwoDelegate: ["class", "org.camunda.bpm.example.delegate.ServiceTaskTwoDelegate"],
};
let failedOnce = false;

for (const topic of Object.keys(expect)) {
  client.subscribe(topic, { includeExtensionProperties: true }, async ({ task, taskService }) => {
    try {
      const props = task.extensionProperties || {};
      const [key, value] = bindings[topic];
      if (props[key] !== value) {
        fail(topic, `extensionProperties ${JSON.stringify(props)} lack ${key}=${value}`);
      }
      if (topic === "serviceTaskTwoDelegate" && !failedOnce) {
        failedOnce = true;
        await taskService.handleFailure(task, {
          errorMessage: "ERP unavailable",
          errorDetails: "connection refused",
          retries: 1,
          retryTimeout: 300,
        });
        console.log(`failed once: ${topic} ${task.activityId}`);
        return;
      }
      const vars = new Variables();
      vars.set(`${task.activityId}_by`, topic);
      await taskService.complete(task, vars);
      console.log(`done: ${topic} ${task.activityId} ${JSON.stringify(props)}`);
      left[topic] -= 1;
      if (left[topic] < 0) {
        fail(topic, "more tasks than expected");
      }
      if (Object.values(left).every((n) => n === 0)) {
        client.stop();
        setTimeout(() => process.exit(0), 200);
      }
    } catch (e) {
      fail(topic, e);
    }
  });
}
