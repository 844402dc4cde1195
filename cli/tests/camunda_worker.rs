//! The official `camunda-external-task-client-js` (pinned in
//! `scripts/camunda-worker/package.json`, installed by `.ci/run` with `npm ci`) against a
//! real `qflow serve` over a socket (SPEC P2): Camunda 7 models with external tasks are
//! deployed and started, the unmodified npm worker completes one, fails one with retries
//! and a retry timeout, throws a BPMN error in one and extends its lock in one; each
//! instance must end as expected. Then two of Camunda's own examples with Java delegates
//! (from the outside corpus, unchanged) run to their ends with the same client serving
//! the topics qflow derives from the bindings (`scripts/camunda-worker/delegates.mjs`).
//!
//! When `node` or the installed client is missing the test prints `skipped: …` and
//! passes, unless `QFLOW_CAMUNDA_WORKER=required` (CI sets it), when it fails instead.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{serve, workspace, Server};
use serde_json::{json, Value};

/// A Camunda 7 model: `start → external task on {topic} → done`, with an error boundary
/// for `DECLINED` leading to `declined`.
fn model(process: &str, topic: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="defs_{process}" targetNamespace="http://bpmn.io/schema/bpmn">
  <bpmn:error id="declined_error" name="Declined" errorCode="DECLINED"/>
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="work" name="Work" camunda:type="external" camunda:topic="{topic}"/>
    <bpmn:boundaryEvent id="on_declined" attachedToRef="work">
      <bpmn:errorEventDefinition errorRef="declined_error"/>
    </bpmn:boundaryEvent>
    <bpmn:endEvent id="done"/>
    <bpmn:endEvent id="declined"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="work"/>
    <bpmn:sequenceFlow id="f1" sourceRef="work" targetRef="done"/>
    <bpmn:sequenceFlow id="f2" sourceRef="on_declined" targetRef="declined"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

impl Server {
    /// One HTTP/1.1 exchange: (status, JSON body).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("sets a read bound");
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Authorization: Bearer {}\r\n",
            self.addr, self.token
        );
        if !body.is_empty() {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(req.as_bytes()).expect("writes");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).expect("reads");
        let status = raw
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP response: {raw}"));
        let text = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(text).unwrap_or(Value::Null))
    }

    fn start(&self, process: &str, topic: &str) -> String {
        let (status, dep) = self.call(
            "POST",
            "/v1/deployments",
            Some(json!({"source": model(process, topic)})),
        );
        assert_eq!(status, 200, "{dep}");
        let (status, started) = self.call(
            "POST",
            "/v1/instances",
            Some(json!({"deployment": dep["id"], "variables": {"amount": 21}})),
        );
        assert_eq!(status, 201, "{started}");
        started["instance"].as_str().expect("instance").to_owned()
    }

    fn instance(&self, id: &str) -> Value {
        let (status, view) = self.call("GET", &format!("/v1/instances/{id}"), None);
        assert_eq!(status, 200, "{view}");
        view
    }

    fn history(&self, id: &str) -> Vec<Value> {
        let (status, h) = self.call("GET", &format!("/v1/instances/{id}/history"), None);
        assert_eq!(status, 200, "{h}");
        h.as_array().expect("a list").clone()
    }
}

/// Why the worker cannot run here, if it cannot.
fn missing() -> Option<String> {
    let installed = workspace()
        .join("scripts/camunda-worker/node_modules/camunda-external-task-client-js/package.json");
    if !installed.exists() {
        return Some(format!(
            "the client is not installed ({} is missing; run `npm ci --prefix scripts/camunda-worker`)",
            installed.display()
        ));
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("`node` is not on the PATH".to_owned()),
    }
}

/// Whether the worker can run here; when it cannot, says `skipped: {what}: …` (or fails,
/// with `QFLOW_CAMUNDA_WORKER=required`).
fn worker_ready(what: &str) -> bool {
    let Some(why) = missing() else {
        return true;
    };
    if std::env::var("QFLOW_CAMUNDA_WORKER").as_deref() == Ok("required") {
        panic!("QFLOW_CAMUNDA_WORKER=required, but {why}");
    }
    eprintln!("skipped: {what}: {why}");
    false
}

#[test]
fn the_official_camunda_js_worker_completes_fails_throws_and_extends() {
    if !worker_ready("camunda-external-task-client-js against qflow serve") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let server = serve(&dir.path().join("qflow.sqlite"));
    let completes = server.start("c7_complete", "qf-complete");
    let retries = server.start("c7_retry", "qf-retry");
    let throws = server.start("c7_bpmn", "qf-bpmn");
    let extends = server.start("c7_extend", "qf-extend");

    let out = Command::new("node")
        .arg(workspace().join("scripts/camunda-worker/worker.mjs"))
        .env("QFLOW_URL", format!("http://{}", server.addr))
        .env("QFLOW_TOKEN", &server.token)
        .output()
        .expect("runs node");
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the worker failed: {said}");

    // Completed, with the worker's typed variables (an Integer, a String, a Json).
    let view = server.instance(&completes);
    assert_eq!(view["instance"]["status"], "completed", "{view}\n{said}");
    let vars = &view["snapshot"]["variables"];
    assert_eq!(vars["receipt"], "r-42", "{view}");
    assert_eq!(vars["charged"], 42, "{view}");
    assert_eq!(
        vars["details"],
        json!({"by": "js", "items": [1, 2]}),
        "{view}"
    );
    let h = server.history(&completes);
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["worker"], "camunda-js-worker");

    // One failed attempt (with the worker's message and details), then completed.
    let view = server.instance(&retries);
    assert_eq!(view["instance"]["status"], "completed", "{view}\n{said}");
    let h = server.history(&retries);
    let outcomes: Vec<&str> = h.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["failed", "ok"], "{h:?}");
    assert_eq!(h[0]["code"], "PULL_TASK_FAILED");
    assert!(
        h[0]["message"]
            .as_str()
            .unwrap()
            .contains("gateway down\n503 from upstream"),
        "{h:?}"
    );
    let parked_ms =
        h[1]["finished_at_ms"].as_i64().unwrap() - h[0]["finished_at_ms"].as_i64().unwrap();
    assert!(
        parked_ms >= 500,
        "offered again only after the retry timeout: {h:?}"
    );

    // The BPMN error routed to the boundary, with its variable, spending no budget.
    let view = server.instance(&throws);
    assert_eq!(view["instance"]["status"], "completed", "{view}\n{said}");
    assert_eq!(view["snapshot"]["variables"]["reason"], "card limit");
    let h = server.history(&throws);
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["outcome"], "bpmn_error");
    assert_eq!(h[0]["code"], "DECLINED");

    // The extended lock outlived its first second: one attempt, completed.
    let view = server.instance(&extends);
    assert_eq!(view["instance"]["status"], "completed", "{view}\n{said}");
    let h = server.history(&extends);
    assert_eq!(h.len(), 1, "no LOCK_EXPIRED attempt: {h:?}");
    assert_eq!(h[0]["outcome"], "ok");
}

/// A Camunda example model from the outside corpus, as published, or `None` (after
/// saying `skipped: …`) when the corpus is not beside the workspace.
fn camunda_example(name: &str) -> Option<String> {
    let path = workspace()
        .join("../shared/corpus/camunda/camunda-bpm-examples")
        .join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) => {
            eprintln!("skipped: no Camunda example at {}: {e}", path.display());
            None
        }
    }
}

const TWITTER: &str = "spring-boot-starter__example-twitter__TwitterDemoProcess.bpmn";
const RETRY_PROFILE: &str = "process-engine-plugin__failed-job-retry-profile__retry-example.bpmn";

/// Camunda's own examples with Java delegates — the Spring Boot Twitter demo
/// (`#{tweetAdapter}`, `#{emailAdapter}`, an exclusive gateway on `#{approved}`, a user
/// task) and the retry-profile example (`camunda:class` on four tasks, two classes) —
/// deployed unchanged and run to their ends by the official npm worker serving the
/// topics qflow derives from the bindings, each task carrying its binding in
/// `extensionProperties`.
#[test]
fn camunda_examples_with_java_delegates_run_with_the_official_worker_on_the_derived_topics() {
    if !worker_ready("Camunda delegate examples against qflow serve") {
        return;
    }
    let (Some(twitter), Some(retry)) = (camunda_example(TWITTER), camunda_example(RETRY_PROFILE))
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let server = serve(&dir.path().join("qflow.sqlite"));

    // The deploy answers name the topics to run workers for, with their bindings.
    let (status, dep) = server.call("POST", "/v1/deployments", Some(json!({"source": twitter})));
    assert_eq!(status, 200, "{dep}");
    let topics: Vec<(&str, Value)> = dep["topics"]
        .as_array()
        .unwrap_or_else(|| panic!("no topics in {dep}"))
        .iter()
        .map(|t| (t["topic"].as_str().unwrap(), t["bindings"].clone()))
        .collect();
    assert_eq!(
        topics,
        [
            (
                "emailAdapter",
                json!(["camunda:delegateExpression #{emailAdapter}"])
            ),
            (
                "tweetAdapter",
                json!(["camunda:delegateExpression #{tweetAdapter}"])
            ),
        ],
        "{dep}"
    );
    let twitter_dep = dep["id"].clone();
    let (status, dep) = server.call("POST", "/v1/deployments", Some(json!({"source": retry})));
    assert_eq!(status, 200, "{dep}");
    let retry_dep = dep["id"].clone();

    let start = |deployment: &Value, variables: Value| {
        let (status, started) = server.call(
            "POST",
            "/v1/instances",
            Some(json!({"deployment": deployment, "variables": variables})),
        );
        assert_eq!(status, 201, "{started}");
        started["instance"].as_str().expect("instance").to_owned()
    };
    let approved = start(&twitter_dep, json!({"approved": true}));
    let rejected = start(&twitter_dep, json!({"approved": false}));
    let profiled = start(&retry_dep, json!({}));
    // The tweets are reviewed (the user task assigned to `demo`) before any delegate runs.
    for id in [&approved, &rejected] {
        let (status, done) = server.call(
            "POST",
            &format!("/v1/instances/{id}/user-tasks/user_task_review_tweet/complete"),
            Some(json!({"variables": {}})),
        );
        assert_eq!(status, 200, "{done}");
    }

    let out = Command::new("node")
        .arg(workspace().join("scripts/camunda-worker/delegates.mjs"))
        .env("QFLOW_URL", format!("http://{}", server.addr))
        .env("QFLOW_TOKEN", &server.token)
        .env(
            "QFLOW_EXPECT",
            json!({"tweetAdapter": 1, "emailAdapter": 1,
                   "serviceTaskOneDelegate": 2, "serviceTaskTwoDelegate": 2})
            .to_string(),
        )
        .output()
        .expect("runs node");
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the worker failed: {said}");
    // The model's own camunda:properties came with the binding.
    assert!(
        said.contains(r##""delegateExpression":"#{tweetAdapter}""##)
            && said.contains(r#""KPI-Ratio":"Tweet Approved""#)
            && said.contains(r#""retryProfile":"ERP""#),
        "{said}"
    );

    // Each tweet took the branch its review chose, through the worker of that delegate.
    let view = server.instance(&approved);
    assert_eq!(view["instance"]["status"], "completed", "{view}\n{said}");
    let vars = &view["snapshot"]["variables"];
    assert_eq!(
        vars["service_task_publish_on_twitter_by"], "tweetAdapter",
        "{view}"
    );
    assert!(
        vars.get("service_task_send_rejection_notification_by")
            .is_none(),
        "{view}"
    );
    let view = server.instance(&rejected);
    assert_eq!(view["instance"]["status"], "completed", "{view}\n{said}");
    assert_eq!(
        view["snapshot"]["variables"]["service_task_send_rejection_notification_by"],
        "emailAdapter",
        "{view}"
    );

    // The four delegates ran in order; the first ERP call failed once and was retried.
    let view = server.instance(&profiled);
    assert_eq!(view["instance"]["status"], "completed", "{view}\n{said}");
    let h = server.history(&profiled);
    let steps: Vec<(&str, &str)> = h
        .iter()
        .map(|a| (a["node"].as_str().unwrap(), a["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            ("service-fetch-data", "ok"),
            ("service-fetch-address", "ok"),
            ("service-send-data", "failed"),
            ("service-send-data", "ok"),
            ("service-add-address", "ok"),
        ],
        "{h:?}"
    );
    assert!(
        h[2]["message"]
            .as_str()
            .unwrap()
            .contains("ERP unavailable"),
        "{h:?}"
    );
}
