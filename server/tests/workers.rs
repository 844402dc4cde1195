//! The pull-task API through HTTP (`/v1/external-tasks/...`, SPEC P1) against a durable
//! SQLite store with a runtime serving it, on a manual clock: every operation, and every
//! refusal a worker can meet — each checked for its problem document and for leaving the
//! instance as it was.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use qflow_ops::Ops;
use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, ManualClock, Runtime, RuntimeConfig};
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use qflow_store::{InstanceId, Store};
use serde_json::{json, Value};
use tower::ServiceExt;

const T0: i64 = 1_700_000_000_000;
const ADMIN: &str = "admin-secret";
const WORKER: &str = "worker-secret";
const READER: &str = "reader-secret";

/// `start → charge (topic payments) → end`, with an error boundary for `DECLINED`.
const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <error id="declined" errorCode="DECLINED"/>
  <process id="checkout" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="charge" q:topic="payments"/>
    <boundaryEvent id="on_declined" attachedToRef="charge"><errorEventDefinition errorRef="declined"/></boundaryEvent>
    <endEvent id="paid"/>
    <endEvent id="refused"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>
    <sequenceFlow id="f1" sourceRef="charge" targetRef="paid"/>
    <sequenceFlow id="f2" sourceRef="on_declined" targetRef="refused"/>
  </process>
</definitions>"#;

struct World {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    /// The same store, to close it under the server.
    sqlite: Arc<SqliteStore>,
    clock: Arc<ManualClock>,
    rt: Arc<Runtime>,
    app: Router,
}

fn token(name: &str, secret: &str, scopes: &[Scope]) -> Token {
    let mut sha256 = [0u8; 32];
    let hex = hash_token(secret);
    for (i, byte) in sha256.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
    Token {
        name: name.to_owned(),
        sha256,
        scopes: scopes.iter().copied().collect(),
    }
}

async fn world() -> World {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = Arc::new(
        SqliteStore::open(dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
    let store: Arc<dyn Store> = sqlite.clone();
    let clock = Arc::new(ManualClock::new(T0));
    let config = RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        ..RuntimeConfig::default()
    };
    let rt = Arc::new(Runtime::start(
        store.clone(),
        AsyncHandlers::new(),
        clock.clone(),
        config,
    ));
    let ops = Ops::with_runtime(rt.clone(), "server");
    let tokens = Tokens::new(vec![
        token("admin", ADMIN, &Scope::ALL),
        token("worker", WORKER, &[Scope::Worker]),
        token("reader", READER, &[Scope::Read]),
    ]);
    let app = qflow_server::router(ops, tokens, Some(rt.stats()), &Limits::default());
    World {
        _dir: dir,
        store,
        sqlite,
        clock,
        rt,
        app,
    }
}

struct Reply {
    status: StatusCode,
    body: Value,
    text: String,
}

impl World {
    async fn send(&self, method: Method, uri: &str, token: &str, body: Option<Value>) -> Reply {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {token}"));
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&b).expect("json"))),
            None => req.body(Body::empty()),
        }
        .expect("request");
        let res = self.app.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        Reply {
            status,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    async fn post(&self, uri: &str, body: Value) -> Reply {
        self.send(Method::POST, uri, WORKER, Some(body)).await
    }

    /// Deploys the model and starts one instance with `{"amount": 42}`.
    async fn start(&self) -> String {
        let r = self
            .send(
                Method::POST,
                "/v1/deployments",
                ADMIN,
                Some(json!({ "source": MODEL })),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let r = self
            .send(
                Method::POST,
                "/v1/instances",
                ADMIN,
                Some(json!({ "deployment": r.body["id"], "variables": { "amount": 42, "card": "x" } })),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.body["instance"].as_str().expect("instance").to_owned()
    }

    /// One fetch-and-lock of `payments` by `worker`, expecting one task; returns its id.
    async fn lock(&self, worker: &str, lock_ms: i64) -> Value {
        let r = self.fetch(worker, lock_ms, 0).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let tasks = r.body.as_array().expect("a list");
        assert_eq!(tasks.len(), 1, "{}", r.text);
        tasks[0].clone()
    }

    async fn fetch(&self, worker: &str, lock_ms: i64, wait_ms: i64) -> Reply {
        self.post(
            "/v1/external-tasks/fetch-and-lock",
            json!({"worker_id": worker, "max_tasks": 5, "wait_ms": wait_ms,
                   "topics": [{"name": "payments", "lock_duration_ms": lock_ms}]}),
        )
        .await
    }

    async fn instance(&self, id: &str) -> Value {
        let r = self
            .send(Method::GET, &format!("/v1/instances/{id}"), ADMIN, None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.body
    }

    async fn history(&self, id: &str) -> Vec<Value> {
        let r = self
            .send(
                Method::GET,
                &format!("/v1/instances/{id}/history"),
                ADMIN,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.body.as_array().expect("a list").clone()
    }

    async fn fence(&self, id: &str) -> u64 {
        let id = InstanceId::parse_str(id).unwrap();
        self.store.instance(id).await.unwrap().unwrap().fence
    }

    /// Moves the clock and waits until the runtime has made `n` more steps.
    async fn advance(&self, ms: i64, steps: u64) {
        let before = self.rt.stats().view().steps;
        self.clock.advance_ms(ms);
        let wait = self.rt.wait_until(move |s| s.steps >= before + steps);
        tokio::time::timeout(std::time::Duration::from_secs(120), wait)
            .await
            .expect("the runtime stopped making progress (hang guard, not a timing check)");
    }
}

fn refused(r: &Reply, status: StatusCode, needle: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    let detail = r.body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(needle),
        "`{needle}` not in the problem: {}",
        r.text
    );
}

#[tokio::test]
async fn a_worker_fetches_locks_and_completes_a_task_with_variables() {
    let w = world().await;
    let id = w.start().await;
    let r = w
        .post(
            "/v1/external-tasks/fetch-and-lock",
            json!({"worker_id": "billing-1", "topics": [
                {"name": "payments", "lock_duration_ms": 30000, "variables": ["amount"]}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let task = &r.body[0];
    assert_eq!(task["instance"], json!(id));
    assert_eq!(task["node"], "charge");
    assert_eq!(task["topic"], "payments");
    assert_eq!(task["attempt"], 1);
    assert_eq!(task["retries"], 3);
    assert_eq!(task["worker"], "billing-1");
    assert_eq!(task["lock_expires_at_ms"], T0 + 30_000);
    assert_eq!(
        task["variables"],
        json!({"amount": 42}),
        "only the selection"
    );
    // Nothing more to fetch while it is locked.
    let again = w.fetch("billing-2", 30_000, 0).await;
    assert_eq!(again.body, json!([]));
    let task_id = task["id"].as_str().unwrap();
    let r = w
        .post(
            &format!("/v1/external-tasks/{task_id}/complete"),
            json!({"worker_id": "billing-1", "variables": {"receipt": "r-1"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "completed");
    let view = w.instance(&id).await;
    assert_eq!(view["snapshot"]["variables"]["receipt"], "r-1", "{view}");
    let history = w.history(&id).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["worker"], "billing-1");
    assert_eq!(history[0]["outcome"], "ok");
}

#[tokio::test]
async fn a_completion_from_another_worker_is_refused_and_changes_nothing() {
    let w = world().await;
    let id = w.start().await;
    let task = w.lock("billing-1", 30_000).await;
    let fence = w.fence(&id).await;
    let r = w
        .post(
            &format!(
                "/v1/external-tasks/{}/complete",
                task["id"].as_str().unwrap()
            ),
            json!({"worker_id": "intruder"}),
        )
        .await;
    refused(
        &r,
        StatusCode::CONFLICT,
        "locked by worker `billing-1`, not `intruder`",
    );
    assert_eq!(w.fence(&id).await, fence, "nothing written");
    assert_eq!(w.instance(&id).await["instance"]["status"], "running");
}

#[tokio::test]
async fn a_completion_after_the_lock_expired_is_refused_and_the_attempt_was_spent() {
    let w = world().await;
    let id = w.start().await;
    let task = w.lock("billing-1", 1_000).await;
    // The lock's timer fires: a failed attempt, offered again as attempt 2.
    w.advance(1_000, 1).await;
    let r = w
        .post(
            &format!(
                "/v1/external-tasks/{}/complete",
                task["id"].as_str().unwrap()
            ),
            json!({"worker_id": "billing-1"}),
        )
        .await;
    refused(&r, StatusCode::CONFLICT, "attempt 1 of `charge` is over");
    let history = w.history(&id).await;
    assert_eq!(history[0]["code"], "LOCK_EXPIRED");
    assert_eq!(history[0]["worker"], "billing-1");
    let next = w.lock("billing-2", 30_000).await;
    assert_eq!(next["attempt"], 2);
    assert_eq!(next["retries"], 2);
}

#[tokio::test]
async fn expired_locks_spend_every_attempt_and_end_failed_with_lock_expired() {
    let w = world().await;
    let id = w.start().await;
    for attempt in 1..=3 {
        let task = w.lock(&format!("vanishing-{attempt}"), 1_000).await;
        assert_eq!(task["attempt"], attempt);
        w.advance(1_000, 1).await;
    }
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "failed", "{view}");
    assert_eq!(view["instance"]["failure_code"], "LOCK_EXPIRED", "{view}");
    let history = w.history(&id).await;
    let codes: Vec<&str> = history
        .iter()
        .map(|h| h["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["LOCK_EXPIRED"; 3]);
    let incidents = w
        .send(
            Method::GET,
            &format!("/v1/incidents?instance={id}"),
            ADMIN,
            None,
        )
        .await;
    assert_eq!(
        incidents.body[0]["code"], "LOCK_EXPIRED",
        "{}",
        incidents.text
    );
    // Withdrawn: nothing left to fetch.
    assert_eq!(w.fetch("late", 1_000, 0).await.body, json!([]));
}

#[tokio::test]
async fn a_failure_with_retries_parks_for_its_timeout_and_with_none_left_ends_failed() {
    let w = world().await;
    let id = w.start().await;
    let task = w.lock("billing-1", 30_000).await;
    let r = w
        .post(
            &format!(
                "/v1/external-tasks/{}/failure",
                task["id"].as_str().unwrap()
            ),
            json!({"worker_id": "billing-1", "retries": 1, "retry_timeout_ms": 5000,
                   "error_message": "gateway down"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "running");
    // Parked: not offered until the timeout has passed.
    assert_eq!(w.fetch("billing-1", 30_000, 0).await.body, json!([]));
    w.advance(5_000, 1).await;
    let task = w.lock("billing-1", 30_000).await;
    assert_eq!(task["attempt"], 2);
    assert_eq!(task["retries"], 1);
    let r = w
        .post(
            &format!(
                "/v1/external-tasks/{}/failure",
                task["id"].as_str().unwrap()
            ),
            json!({"worker_id": "billing-1", "retries": 0, "error_message": "gave up"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "failed");
    let view = w.instance(&id).await;
    assert_eq!(
        view["instance"]["failure_code"], "PULL_TASK_FAILED",
        "{view}"
    );
}

#[tokio::test]
async fn a_failure_with_negative_retries_or_timeout_is_refused() {
    let w = world().await;
    let id = w.start().await;
    let task = w.lock("billing-1", 30_000).await;
    let uri = format!(
        "/v1/external-tasks/{}/failure",
        task["id"].as_str().unwrap()
    );
    let fence = w.fence(&id).await;
    let r = w
        .post(&uri, json!({"worker_id": "billing-1", "retries": -1}))
        .await;
    refused(&r, StatusCode::BAD_REQUEST, "-1 is not a count of retries");
    assert_eq!(r.body["errors"][0]["pointer"], "/retries", "{}", r.text);
    let r = w
        .post(
            &uri,
            json!({"worker_id": "billing-1", "retries": 2, "retry_timeout_ms": -5}),
        )
        .await;
    refused(&r, StatusCode::BAD_REQUEST, "-5 is not a wait");
    assert_eq!(w.fence(&id).await, fence, "nothing written");
}

#[tokio::test]
async fn a_bpmn_error_routes_to_its_boundary_without_spending_budget() {
    let w = world().await;
    let id = w.start().await;
    let task = w.lock("billing-1", 30_000).await;
    let r = w
        .post(
            &format!(
                "/v1/external-tasks/{}/bpmn-error",
                task["id"].as_str().unwrap()
            ),
            json!({"worker_id": "billing-1", "error_code": "DECLINED",
                   "error_message": "card declined", "variables": {"reason": "limit"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "completed");
    let view = w.instance(&id).await;
    assert_eq!(view["snapshot"]["variables"]["reason"], "limit");
    assert!(view["snapshot"].get("attempts").is_none(), "{view}");
    assert_eq!(w.history(&id).await[0]["outcome"], "bpmn_error");
}

#[tokio::test]
async fn extending_a_lock_keeps_it_past_its_first_expiry_and_unlock_offers_it_again() {
    let w = world().await;
    let id = w.start().await;
    let task = w.lock("billing-1", 1_000).await;
    let task_id = task["id"].as_str().unwrap().to_owned();
    let r = w
        .post(
            &format!("/v1/external-tasks/{task_id}/extend-lock"),
            json!({"worker_id": "billing-1", "new_duration_ms": 60000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["lock_expires_at_ms"], T0 + 60_000);
    // Past the first expiry nothing happened: no attempt was spent.
    w.clock.advance_ms(5_000);
    assert!(w.history(&id).await.is_empty());
    // Another worker cannot extend or unlock it.
    let r = w
        .post(
            &format!("/v1/external-tasks/{task_id}/extend-lock"),
            json!({"worker_id": "other", "new_duration_ms": 1000}),
        )
        .await;
    refused(&r, StatusCode::CONFLICT, "not `other`");
    let r = w
        .post(
            &format!("/v1/external-tasks/{task_id}/unlock"),
            json!({"worker_id": "billing-1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let again = w.lock("billing-2", 30_000).await;
    assert_eq!(again["attempt"], 1, "an unlock spends nothing");
    assert_eq!(again["id"], json!(task_id));
}

#[tokio::test]
async fn an_unknown_task_is_not_found() {
    let w = world().await;
    let _ = w.start().await;
    for id in [
        "nonsense".to_owned(),
        format!("{}:1:charge", uuid_nil()),
        "00000000-0000-4000-8000-000000000001:0:charge".to_owned(),
    ] {
        let r = w
            .post(
                &format!("/v1/external-tasks/{id}/complete"),
                json!({"worker_id": "w"}),
            )
            .await;
        refused(&r, StatusCode::NOT_FOUND, "external task");
    }
}

fn uuid_nil() -> &'static str {
    "00000000-0000-4000-8000-00000000dead"
}

#[tokio::test]
async fn the_worker_scope_is_needed_and_bad_fetches_are_refused() {
    let w = world().await;
    let body =
        json!({"worker_id": "w", "topics": [{"name": "payments", "lock_duration_ms": 1000}]});
    let r = w
        .send(
            Method::POST,
            "/v1/external-tasks/fetch-and-lock",
            READER,
            Some(body),
        )
        .await;
    refused(&r, StatusCode::FORBIDDEN, "`worker` scope");
    for (bad, needle) in [
        (
            json!({"worker_id": "", "topics": [{"name": "t", "lock_duration_ms": 1}]}),
            "worker_id",
        ),
        (json!({"worker_id": "w", "topics": []}), "topics"),
        (
            json!({"worker_id": "w", "topics": [{"name": "t", "lock_duration_ms": 0}]}),
            "lock",
        ),
        (
            json!({"worker_id": "w", "max_tasks": 0, "topics": [{"name": "t", "lock_duration_ms": 1}]}),
            "max_tasks",
        ),
        (
            json!({"worker_id": "w", "wait_ms": 30000, "topics": [{"name": "t", "lock_duration_ms": 1}]}),
            "over 25000 ms",
        ),
    ] {
        let r = w.post("/v1/external-tasks/fetch-and-lock", bad).await;
        refused(&r, StatusCode::BAD_REQUEST, needle);
    }
}

#[tokio::test]
async fn a_long_poll_is_answered_by_a_task_started_while_it_waits() {
    let w = Arc::new(world().await);
    let r = w
        .send(
            Method::POST,
            "/v1/deployments",
            ADMIN,
            Some(json!({ "source": MODEL })),
        )
        .await;
    let deployment = r.body["id"].clone();
    let waiting = {
        let w = w.clone();
        tokio::spawn(async move { w.fetch("poller", 30_000, 20_000).await })
    };
    let wait = async {
        while w.rt.pull_bell().waiting_topics() == 0 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), wait)
        .await
        .expect("the fetch waits (hang guard)");
    let r = w
        .send(
            Method::POST,
            "/v1/instances",
            ADMIN,
            Some(json!({ "deployment": deployment })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    // Answered without the clock moving: the start woke the waiting fetch.
    let got = tokio::time::timeout(std::time::Duration::from_secs(120), waiting)
        .await
        .expect("hang guard")
        .unwrap();
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    assert_eq!(got.body.as_array().unwrap().len(), 1, "{}", got.text);
    assert_eq!(got.body[0]["instance"], r.body["instance"]);
}

/// The Camunda 7 shapes over the same operations: typed variables out and in, 204 for
/// answers, `{type, message}` errors with Camunda's statuses.
#[tokio::test]
async fn the_camunda_7_endpoints_speak_camundas_shapes() {
    let w = world().await;
    let id = w.start().await;
    let r = w
        .post(
            "/engine-rest/external-task/fetchAndLock",
            json!({"workerId": "c7", "maxTasks": 2, "usePriority": true,
                   "topics": [{"topicName": "payments", "lockDuration": 10000}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let task = &r.body[0];
    assert_eq!(task["topicName"], "payments");
    assert_eq!(task["activityId"], "charge");
    assert_eq!(task["processInstanceId"], json!(id));
    assert_eq!(task["workerId"], "c7");
    assert_eq!(task["lockExpirationTime"], "2023-11-14T22:13:30.000+0000");
    assert_eq!(
        task["variables"]["amount"],
        json!({"value": 42, "type": "Integer", "valueInfo": {}})
    );
    let task_id = task["id"].as_str().unwrap().to_owned();
    // Another worker: 400 with Camunda's error body.
    let r = w
        .post(
            &format!("/engine-rest/external-task/{task_id}/complete"),
            json!({"workerId": "other"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.body["type"], "BadUserRequestException");
    assert!(r.body["message"].as_str().unwrap().contains("not `other`"));
    // An unknown task: 404.
    let r = w
        .post(
            "/engine-rest/external-task/nope/complete",
            json!({"workerId": "c7"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(r.body["type"], "InvalidRequestException");
    // A filter qflow cannot apply is refused, not ignored.
    let r = w
        .post(
            "/engine-rest/external-task/fetchAndLock",
            json!({"workerId": "c7", "maxTasks": 1,
                   "topics": [{"topicName": "payments", "lockDuration": 1000, "businessKey": "b"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.body["message"].as_str().unwrap().contains("businessKey"));
    // Extend, then complete with a typed Json variable: 204 both.
    let r = w
        .post(
            &format!("/engine-rest/external-task/{task_id}/extendLock"),
            json!({"workerId": "c7", "newDuration": 60000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = w
        .post(
            &format!("/engine-rest/external-task/{task_id}/complete"),
            json!({"workerId": "c7", "variables": {
                "receipt": {"value": "{\"n\":1}", "type": "Json"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed");
    assert_eq!(view["snapshot"]["variables"]["receipt"], json!({"n": 1}));
    // Without the worker scope: 403 in Camunda's shape.
    let r = w
        .send(
            Method::POST,
            "/engine-rest/external-task/fetchAndLock",
            READER,
            Some(json!({"workerId": "c7", "maxTasks": 1, "topics": []})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_eq!(r.body["type"], "AuthorizationException");
}

/// The fetch body `camunda-external-task-client-python3` 4.5.0 sends with its default
/// configuration (`ExternalTaskClient.default_config`: one task, 5 min locks, a 30 s long
/// poll, extension properties and deserialized values asked for, an empty variable
/// filter, no selection, no sorting), captured from `scripts/camunda-python-worker` with
/// `QFLOW_PY_CAPTURE` — only the topic names are this file's model's.
fn python_client_fetch() -> Value {
    let topic = |name: &str| {
        json!({"topicName": name, "lockDuration": 300000, "processVariables": {},
               "includeExtensionProperties": true, "deserializeValues": true,
               "variables": null})
    };
    json!({"workerId": "camunda-py-worker", "maxTasks": 1,
           "topics": [topic("payments"), topic("refunds")],
           "asyncResponseTimeout": 30000, "usePriority": false, "sorting": null})
}

const C7_FETCH: &str = "/engine-rest/external-task/fetchAndLock";

/// A Camunda 7 answer's route for a locked task: `complete`, `failure`, `bpmnError`, ….
fn c7_answer(task: &Value, answer: &str) -> String {
    format!(
        "/engine-rest/external-task/{}/{answer}",
        task["id"].as_str().expect("a task id")
    )
}

/// One Camunda 7 fetch expecting exactly one task, which it returns.
async fn c7_lock(w: &World, body: Value) -> Value {
    let r = w.post(C7_FETCH, body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let tasks = r.body.as_array().expect("a list");
    assert_eq!(tasks.len(), 1, "{}", r.text);
    tasks[0].clone()
}

/// A Camunda 7 refusal: 400 `InvalidRequestException` whose message has `needle`.
fn c7_refused(r: &Reply, needle: &str) {
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.body["type"], "InvalidRequestException", "{}", r.text);
    let message = r.body["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "`{needle}` not in: {}", r.text);
}

/// The Python client's own bodies, as it sends them, complete a task with typed and
/// untyped variables and local variables.
#[tokio::test]
async fn the_python_clients_fetch_and_complete_bodies_are_accepted() {
    let w = world().await;
    let id = w.start().await;
    let task = c7_lock(&w, python_client_fetch()).await;
    assert_eq!(task["topicName"], "payments");
    assert_eq!(task["workerId"], "camunda-py-worker");
    assert_eq!(task["retries"], 3);
    assert_eq!(task["extensionProperties"], json!({}), "asked for: present");
    assert_eq!(task["variables"]["amount"]["value"], 42);
    assert_eq!(task["lockExpirationTime"], "2023-11-14T22:18:20.000+0000");
    let r = w
        .post(
            &format!(
                "/engine-rest/external-task/{}/complete",
                task["id"].as_str().unwrap()
            ),
            json!({"workerId": "camunda-py-worker",
                   "variables": {"receipt": {"value": "r-py"}, "charged": {"value": 42},
                                 "details": {"value": {"by": "python", "items": [1, 2]}}},
                   "localVariables": {"note": {"value": "local"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");
    let vars = &view["snapshot"]["variables"];
    assert_eq!(vars["receipt"], "r-py");
    assert_eq!(vars["charged"], 42);
    assert_eq!(vars["details"], json!({"by": "python", "items": [1, 2]}));
    assert_eq!(vars["note"], "local");
}

/// The Python client's failure body (retries counted down from the task's, a retry
/// timeout, details) parks the task; its BPMN error body routes the next attempt to
/// the boundary.
#[tokio::test]
async fn the_python_clients_failure_and_bpmn_error_bodies_are_accepted() {
    let w = world().await;
    let id = w.start().await;
    let task = c7_lock(&w, python_client_fetch()).await;
    let r = w
        .post(
            &format!(
                "/engine-rest/external-task/{}/failure",
                task["id"].as_str().unwrap()
            ),
            json!({"workerId": "camunda-py-worker", "errorMessage": "gateway down",
                   "retries": 2, "retryTimeout": 500, "errorDetails": "503 from upstream"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    w.advance(500, 1).await;
    let task = c7_lock(&w, python_client_fetch()).await;
    assert_eq!(task["retries"], 2, "{task}");
    let r = w
        .post(
            &format!(
                "/engine-rest/external-task/{}/bpmnError",
                task["id"].as_str().unwrap()
            ),
            json!({"workerId": "camunda-py-worker", "errorCode": "DECLINED",
                   "errorMessage": "card declined",
                   "variables": {"reason": {"value": "card limit"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");
    assert_eq!(view["snapshot"]["variables"]["reason"], "card limit");
    let h = w.history(&id).await;
    let outcomes: Vec<&str> = h.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["failed", "bpmn_error"], "{h:?}");
    assert_eq!(h[0]["message"], "gateway down\n503 from upstream");
}

/// Every field of Camunda's fetch DTOs, at a value that asks for nothing beyond what
/// qflow does, is accepted: null, empty lists and maps, `""` for `businessKey` (no
/// filter in Camunda), the defaults, `withoutTenantId: true` (qflow has no tenants),
/// `sorting` by `createTime` ascending (qflow's order: the older offer is locked first),
/// a negative long poll (answered at once). A failure's empty variables too.
#[tokio::test]
async fn camunda_fields_asking_for_nothing_qflow_lacks_are_accepted() {
    let w = world().await;
    let first = w.start().await;
    w.clock.advance_ms(10);
    let second = w.start().await;
    let body = json!({
        "workerId": "c7", "maxTasks": 1, "usePriority": true,
        "includeExtensionProperties": true, "asyncResponseTimeout": -5,
        "sorting": [{"sortBy": "createTime", "sortOrder": "asc", "parameters": null}],
        "topics": [{
            "topicName": "payments", "lockDuration": 10000, "variables": ["amount"],
            "businessKey": "", "processDefinitionId": null, "processDefinitionIdIn": [],
            "processDefinitionKey": null, "processDefinitionKeyIn": [],
            "processDefinitionVersionTag": null, "processVariables": {},
            "tenantIdIn": [], "withoutTenantId": true, "localVariables": false,
            "deserializeValues": false, "includeExtensionProperties": false}]});
    let task = c7_lock(&w, body.clone()).await;
    assert_eq!(
        task["processInstanceId"],
        json!(first),
        "oldest offer first"
    );
    assert_eq!(
        task["variables"],
        json!({"amount": {"value": 42, "type": "Integer", "valueInfo": {}}})
    );
    assert_eq!(task["extensionProperties"], json!({}));
    let later = c7_lock(&w, body).await;
    assert_eq!(later["processInstanceId"], json!(second));
    let r = w
        .post(
            &format!(
                "/engine-rest/external-task/{}/failure",
                task["id"].as_str().unwrap()
            ),
            json!({"workerId": "c7", "retries": 1, "retryTimeout": null,
                   "variables": {}, "localVariables": null, "errorMessage": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.history(&first).await[0]["outcome"], "failed");
}

/// A field whose value asks for what qflow does not do — a filter, a tenant, local
/// variables alone, another order, variables on a failure — and a field Camunda's DTO
/// does not have are refused with a 400 naming the field; nothing changes: the task is
/// still offered to the next fetch, the instance's fence and history as they were.
#[tokio::test]
async fn camunda_fields_asking_for_what_qflow_lacks_are_refused_naming_them() {
    let w = world().await;
    let id = w.start().await;
    let fence = w.fence(&id).await;
    let fetch = |extra: Value| {
        let mut topic = json!({"topicName": "payments", "lockDuration": 10000});
        let mut body = json!({"workerId": "c7", "maxTasks": 1});
        for (k, v) in extra.as_object().unwrap() {
            match k.strip_prefix("topic.") {
                Some(k) => topic[k] = v.clone(),
                None => body[k] = v.clone(),
            }
        }
        body["topics"] = json!([topic]);
        body
    };
    let cases = [
        (json!({"topic.businessKey": "order-7"}), "`businessKey` \"order-7\" is not supported"),
        (json!({"topic.processDefinitionId": "checkout:1"}), "`processDefinitionId`"),
        (json!({"topic.processDefinitionIdIn": ["checkout:1"]}), "`processDefinitionIdIn`"),
        (json!({"topic.processDefinitionKey": "checkout"}), "`processDefinitionKey`"),
        (json!({"topic.processDefinitionKeyIn": ["checkout"]}), "`processDefinitionKeyIn`"),
        (json!({"topic.processDefinitionVersionTag": "v1"}), "`processDefinitionVersionTag`"),
        (json!({"topic.processVariables": {"amount": 42}}), "`processVariables` {\"amount\":42} is not supported"),
        (json!({"topic.tenantIdIn": ["acme"]}), "`tenantIdIn`"),
        (json!({"topic.localVariables": true}), "`localVariables` true is not supported"),
        (json!({"sorting": [{"sortBy": "createTime", "sortOrder": "desc"}]}), "`sorting[0].sortOrder` \"desc\" is not supported: qflow offers tasks oldest offer first"),
        (json!({"sorting": [{"sortBy": "priority", "sortOrder": "asc"}]}), "`sorting[0].sortBy`"),
        (json!({"sorting": [{"sortBy": "createTime"}]}), "`sorting[0].sortOrder` null"),
        (json!({"asyncResponseTimeout": 1_800_001}), "`asyncResponseTimeout`"),
        (json!({"topic.priority": 5}), "at `topics[0].priority`: unknown field `priority`"),
        (json!({"tenantId": "acme"}), "unknown field `tenantId`"),
        (json!({"maxTasks": -1}), "`maxTasks` -1 is negative"),
        (json!({"maxTasks": 0, "topic.lockDuration": 0}), "`topics[0].lockDuration` 0 is not a lock duration"),
        // qflow's bounds, named as Camunda spells the field.
        (json!({"workerId": ""}), "`workerId`: is 1 to 128 characters"),
        (json!({"topic.topicName": ""}), "`topicName`: is 1 to 256 characters"),
        (json!({"topic.lockDuration": 0}), "`lockDuration`: 0 is not a lock duration"),
    ];
    for (extra, needle) in cases {
        let r = w.post(C7_FETCH, fetch(extra)).await;
        c7_refused(&r, needle);
    }
    let r = w
        .post(C7_FETCH, fetch(json!({"topic.businessKey": "b"})))
        .await;
    c7_refused(&r, "topic `payments`: `businessKey`");
    assert_eq!(
        w.fence(&id).await,
        fence,
        "no refused fetch locked anything"
    );

    let task = c7_lock(&w, fetch(json!({}))).await;
    let fence = w.fence(&id).await;
    let uri = format!(
        "/engine-rest/external-task/{}/failure",
        task["id"].as_str().unwrap()
    );
    let r = w
        .post(
            &uri,
            json!({"workerId": "c7", "retries": 2,
                           "variables": {"why": {"value": "down"}}}),
        )
        .await;
    c7_refused(
        &r,
        "`variables` [\"why\"] is not supported: qflow sets no variables when an attempt fails",
    );
    let r = w
        .post(
            &uri,
            json!({"workerId": "c7", "retries": 2,
                           "localVariables": {"why": {"value": "down"}}}),
        )
        .await;
    c7_refused(&r, "`localVariables`");
    let r = w
        .post(
            &format!(
                "/engine-rest/external-task/{}/complete",
                task["id"].as_str().unwrap()
            ),
            json!({"workerId": "c7", "variable": {}}),
        )
        .await;
    c7_refused(&r, "unknown field `variable`");
    // A transient variable (Camunda does not store it), a Bytes one, and qflow's bounds,
    // each named as Camunda spells the field.
    let answers = [
        (
            "complete",
            json!({"workerId": "c7", "variables": {"receipt": {"value": "r",
            "type": "String", "valueInfo": {"transient": true}}}}),
            "`variables.receipt.valueInfo.transient` true is not supported: qflow stores every \
          variable",
        ),
        (
            "complete",
            json!({"workerId": "c7", "localVariables": {"f": {"value": "AAE=",
            "type": "Bytes"}}}),
            "`localVariables`: variable `f`: bytes variables are not supported",
        ),
        (
            "complete",
            json!({"workerId": ""}),
            "`workerId`: is 1 to 128 characters",
        ),
        (
            "failure",
            json!({"workerId": "c7", "retries": -1}),
            "`retries`: -1 is not a count",
        ),
        (
            "failure",
            json!({"workerId": "c7", "retries": 1, "retryTimeout": -1}),
            "`retryTimeout`: -1",
        ),
        (
            "bpmnError",
            json!({"workerId": "c7", "errorCode": ""}),
            "`errorCode`: is 1 to 256",
        ),
        (
            "bpmnError",
            json!({"workerId": "c7", "errorCode": "DECLINED",
            "errorMessage": "x".repeat(4_097)}),
            "`errorMessage`: longer than 4096",
        ),
        (
            "extendLock",
            json!({"workerId": "c7", "newDuration": 0}),
            "`newDuration`: 0 is not a lock duration",
        ),
    ];
    for (answer, body, needle) in answers {
        let r = w.post(&c7_answer(&task, answer), body).await;
        c7_refused(&r, needle);
    }
    assert_eq!(w.fence(&id).await, fence, "no refused answer was stepped");
    assert!(w.history(&id).await.is_empty());
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "running", "{view}");
}

/// The failure body the Python client sends when neither the task nor the handler has a
/// retry count (`task.failure(message, None, None, 0)` on a task whose `retries` is unset:
/// `retries: null`, captured by hand through a logging proxy): Camunda reads a Java `int`
/// left null as 0, no attempt left, and so does qflow — the instance ends FAILED with an
/// incident. A message longer than qflow keeps (the client sends what the handler gives,
/// often `str(exception)`) is cut at 4,096 characters, as Camunda cuts it at 666.
#[tokio::test]
async fn the_python_clients_failure_without_retries_ends_the_task_as_camunda_does() {
    let w = world().await;
    let id = w.start().await;
    let task = c7_lock(&w, python_client_fetch()).await;
    let r = w
        .post(
            &c7_answer(&task, "failure"),
            json!({"workerId": "camunda-py-worker", "errorMessage": "y".repeat(5_000),
                   "retries": null, "retryTimeout": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "failed", "{view}");
    assert_eq!(view["instance"]["failure_code"], "PULL_TASK_FAILED");
    let h = w.history(&id).await;
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["message"], json!("y".repeat(4_096)));
}

/// Each Camunda 7 DTO as a Java client's default-constructed DTO serializes it (Jackson
/// writes every field: null, `false`, `0`), with the fields Camunda requires given, is
/// answered as Camunda answers it: the fetch locks, extendLock, complete and bpmnError
/// answer 204, unlock with no body 204, and a failure left at its defaults (`retries` 0,
/// `retryTimeout` 0) ends the instance FAILED, as Camunda creates an incident.
#[tokio::test]
async fn camundas_full_dtos_at_their_default_values_are_answered_as_camunda_does() {
    let w = world().await;
    let mut ids = vec![w.start().await, w.start().await, w.start().await];
    let fetch = json!({
        "workerId": "c7", "maxTasks": 1, "usePriority": false,
        "includeExtensionProperties": false, "sorting": null, "asyncResponseTimeout": null,
        "topics": [{
            "topicName": "payments", "lockDuration": 10000, "businessKey": null,
            "processDefinitionId": null, "processDefinitionIdIn": null,
            "processDefinitionKey": null, "processDefinitionKeyIn": null,
            "processDefinitionVersionTag": null, "variables": null, "processVariables": null,
            "deserializeValues": false, "localVariables": false,
            "includeExtensionProperties": false, "withoutTenantId": false, "tenantIdIn": null}]});
    let instance = |t: &Value| t["processInstanceId"].as_str().unwrap().to_owned();
    let first = c7_lock(&w, fetch.clone()).await;
    assert_eq!(
        first["variables"]["amount"]["value"], 42,
        "null `variables`: all"
    );
    let r = w
        .send(Method::POST, &c7_answer(&first, "unlock"), WORKER, None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let first = c7_lock(&w, fetch.clone()).await;
    let r = w
        .post(
            &c7_answer(&first, "extendLock"),
            json!({"workerId": "c7", "newDuration": 60000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = w
        .post(
            &c7_answer(&first, "complete"),
            json!({"workerId": "c7", "variables": null, "localVariables": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let first = instance(&first);
    assert_eq!(w.instance(&first).await["instance"]["status"], "completed");

    let second = c7_lock(&w, fetch.clone()).await;
    let r = w
        .post(
            &c7_answer(&second, "bpmnError"),
            json!({"workerId": "c7", "errorCode": "DECLINED", "errorMessage": null,
                   "variables": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let second = instance(&second);
    assert_eq!(w.instance(&second).await["instance"]["status"], "completed");
    assert_eq!(w.history(&second).await[0]["outcome"], "bpmn_error");

    let third = c7_lock(&w, fetch).await;
    let r = w
        .post(
            &c7_answer(&third, "failure"),
            json!({"workerId": "c7", "errorMessage": null, "errorDetails": null,
                   "retryTimeout": 0, "retries": 0, "variables": null,
                   "localVariables": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let third = instance(&third);
    let view = w.instance(&third).await;
    assert_eq!(view["instance"]["status"], "failed", "{view}");
    assert_eq!(view["instance"]["failure_code"], "PULL_TASK_FAILED");

    let mut answered = vec![first, second, third];
    answered.sort();
    ids.sort();
    assert_eq!(answered, ids, "each fetch locked another instance's task");
}

/// A fetch that can lock nothing — `maxTasks` left out, null or 0 (a Java `int`: Camunda
/// reads 0), or no topics (left out, null, `[]`) — is answered `[]`, as in Camunda, after
/// its long poll, and locks nothing. Above qflow's 1,000 tasks a fetch, `maxTasks` is a
/// bound the fetch keeps: it locks what there is.
#[tokio::test]
async fn a_fetch_that_can_lock_nothing_answers_empty_as_camunda_does() {
    let w = world().await;
    let id = w.start().await;
    let fence = w.fence(&id).await;
    let topics = json!([{"topicName": "payments", "lockDuration": 10000}]);
    for body in [
        json!({"workerId": "c7", "topics": topics}),
        json!({"workerId": "c7", "maxTasks": null, "topics": topics}),
        json!({"workerId": "c7", "maxTasks": 0, "topics": topics}),
        json!({"workerId": "c7", "maxTasks": 5}),
        json!({"workerId": "c7", "maxTasks": 5, "topics": null}),
        json!({"workerId": "c7", "maxTasks": 5, "topics": []}),
    ] {
        let r = w.post(C7_FETCH, body.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{body}: {}", r.text);
        assert_eq!(r.body, json!([]), "{body}");
    }
    let started = std::time::Instant::now();
    let r = w
        .post(
            C7_FETCH,
            json!({"workerId": "c7", "maxTasks": 5, "topics": [], "asyncResponseTimeout": 200}),
        )
        .await;
    assert_eq!(
        (r.status, &r.body),
        (StatusCode::OK, &json!([])),
        "{}",
        r.text
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(200),
        "answered before its long poll ended"
    );
    assert_eq!(w.fence(&id).await, fence, "nothing was locked");
    assert!(w.history(&id).await.is_empty());
    let task = c7_lock(
        &w,
        json!({"workerId": "c7", "maxTasks": 5_000, "topics": topics}),
    )
    .await;
    assert_eq!(task["processInstanceId"], json!(id));
}

/// One Zeebe activation of `payments` for `worker`, expecting one job.
async fn activate(w: &World, worker: &str, timeout_ms: i64) -> Value {
    let r = w
        .post(
            "/v2/jobs/activation",
            json!({"type": "payments", "worker": worker, "timeout": timeout_ms,
                   "maxJobsToActivate": 5, "requestTimeout": -1, "fetchVariable": ["amount"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let jobs = r.body["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 1, "{}", r.text);
    jobs[0].clone()
}

/// A Camunda 8 key as the API sends it: a decimal string of a positive 64-bit integer,
/// in partition 1 (`key >> 51`).
fn zeebe_key(value: &Value) -> i64 {
    let key: i64 = value
        .as_str()
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("{value} is not a key"));
    assert_eq!(key >> 51, 1, "{key} is of partition 1");
    key
}

#[tokio::test]
async fn zeebe_jobs_activate_complete_fail_and_throw_with_camunda_8_shapes() {
    let w = world().await;
    let id = w.start().await;
    let job = activate(&w, "z-1", 30_000).await;
    assert_eq!(job["type"], "payments");
    // Keys are Camunda's: positive 64-bit integers in decimal, of partition 1.
    let first_key = zeebe_key(&job["jobKey"]);
    let instance_key = zeebe_key(&job["processInstanceKey"]);
    let element_key = zeebe_key(&job["elementInstanceKey"]);
    assert_eq!(
        BTreeSet::from([first_key, instance_key, element_key]).len(),
        3,
        "{job}"
    );
    assert_eq!(job["kind"], "BPMN_ELEMENT");
    assert_eq!(job["listenerEventType"], "UNSPECIFIED");
    assert_eq!(job["processDefinitionVersion"], 1);
    assert!(job["processDefinitionKey"]
        .as_str()
        .is_some_and(|k| k.parse::<i64>().is_ok()));
    assert_eq!(job["elementId"], "charge");
    assert_eq!(job["processDefinitionId"], "checkout");
    assert_eq!(job["worker"], "z-1");
    assert_eq!(job["retries"], 3);
    assert_eq!(job["deadline"], T0 + 30_000);
    assert_eq!(job["variables"], json!({"amount": 42}));
    assert_eq!(job["tenantId"], "<default>");
    let key = job["jobKey"].as_str().unwrap().to_owned();
    // A failure with one retry left and a back-off: parked, then offered as attempt 2.
    let r = w
        .post(
            &format!("/v2/jobs/{key}/failure"),
            json!({"retries": 1, "errorMessage": "down", "retryBackOff": 5000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    // The old key went with its job (withdrawn for the back-off): not found, as Zeebe
    // answers for a job that is over.
    let r = w
        .post(&format!("/v2/jobs/{key}/completion"), json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    w.advance(5_000, 1).await;
    let job = activate(&w, "z-2", 30_000).await;
    let key = job["jobKey"].as_str().unwrap().to_owned();
    // Attempt 2 is a new job of the same element instance of the same instance.
    assert_ne!(zeebe_key(&job["jobKey"]), first_key, "{job}");
    assert_eq!(zeebe_key(&job["processInstanceKey"]), instance_key, "{job}");
    assert_eq!(zeebe_key(&job["elementInstanceKey"]), element_key, "{job}");
    let r = w
        .post(
            &format!("/v2/jobs/{key}/completion"),
            json!({"variables": {"receipt": "z"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");
    assert_eq!(view["snapshot"]["variables"]["receipt"], "z", "{view}");
    let history = w.history(&id).await;
    assert_eq!(history[0]["worker"], "z-1");
    assert_eq!(history[1]["worker"], "z-2");

    // A BPMN error routes to the boundary.
    let id = w.start().await;
    let job = activate(&w, "z-3", 30_000).await;
    let key = job["jobKey"].as_str().unwrap();
    let r = w
        .post(
            &format!("/v2/jobs/{key}/error"),
            json!({"errorCode": "DECLINED", "errorMessage": "no"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");
}

#[tokio::test]
async fn zeebe_refusals_unknown_jobs_tenants_results_and_failure_variables() {
    let w = world().await;
    let _id = w.start().await;
    // A key is a 64-bit integer: anything else (qflow's own task id too) is a 400 naming
    // the parameter; an integer that names no job, a 404.
    for bad in [
        format!("{}:1:charge", uuid_nil()),
        "1e3".into(),
        "9223372036854775808".into(),
    ] {
        let r = w
            .post(&format!("/v2/jobs/{bad}/completion"), json!({}))
            .await;
        refused(&r, StatusCode::BAD_REQUEST, "jobKey");
    }
    for unknown in ["12345", "0", "-3"] {
        let r = w
            .post(&format!("/v2/jobs/{unknown}/completion"), json!({}))
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    }
    // The instance's key is a key, but not a job's.
    let job = activate(&w, "z-0", 30_000).await;
    let instance_key = job["processInstanceKey"].as_str().unwrap();
    let r = w
        .post(&format!("/v2/jobs/{instance_key}/completion"), json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = w
        .post(
            &format!("/v2/jobs/{}/failure", job["jobKey"].as_str().unwrap()),
            json!({"retries": 1, "errorMessage": "later"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = w
        .post(
            "/v2/jobs/activation",
            json!({"type": "payments", "timeout": 1000, "maxJobsToActivate": 1,
                   "tenantIds": ["acme"]}),
        )
        .await;
    refused(
        &r,
        StatusCode::BAD_REQUEST,
        "`tenantIds` [\"acme\"] is not supported",
    );
    let job = activate(&w, "z-1", 30_000).await;
    let key = job["jobKey"].as_str().unwrap();
    let r = w
        .post(
            &format!("/v2/jobs/{key}/completion"),
            json!({"result": {"denied": true}}),
        )
        .await;
    refused(
        &r,
        StatusCode::BAD_REQUEST,
        "`result.denied` true is not supported",
    );
    let r = w
        .post(
            &format!("/v2/jobs/{key}/failure"),
            json!({"retries": 1, "variables": {"x": 1}}),
        )
        .await;
    refused(&r, StatusCode::BAD_REQUEST, "no variables");
    let r = w
        .post(&format!("/v2/jobs/{key}/failure"), json!({"retries": -1}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    // The worker scope is needed.
    let r = w
        .send(
            Method::POST,
            "/v2/jobs/activation",
            READER,
            Some(json!({"type": "payments", "timeout": 1000, "maxJobsToActivate": 1})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
}

/// The activation body the official `@camunda8/orchestration-cluster-api` 9.1.5 (npm,
/// the `latest` tag) sends from a `JobWorker` with `jobType: "payments"`,
/// `jobTimeoutMs: 30000`, `maxParallelJobs: 10` and no `fetchVariables`, read from its
/// published `dist/` (`JobWorker._poll`, `activateJobs`): the worker's generated name,
/// `requestTimeout` 0 (its default long poll) and `tenantIds` `["<default>"]` (its
/// `CAMUNDA_DEFAULT_TENANT_ID`, injected into every activation without tenants);
/// `fetchVariable` only when the worker names some.
fn js_client_activation() -> Value {
    json!({"type": "payments", "worker": "worker-payments-1", "maxJobsToActivate": 10,
           "requestTimeout": 0, "timeout": 30000, "tenantIds": ["<default>"]})
}

/// One activation expecting exactly one job, which it returns.
async fn activate_one(w: &World, body: Value) -> Value {
    let r = w.post("/v2/jobs/activation", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let jobs = r.body["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 1, "{}", r.text);
    jobs[0].clone()
}

fn zeebe_answer(job: &Value, answer: &str) -> String {
    format!(
        "/v2/jobs/{}/{answer}",
        job["jobKey"].as_str().expect("a key")
    )
}

/// The official JS client's bodies, as its `JobWorker` and job actions send them: an
/// activation; a handler that throws (`failJob` with `retries` one less, no back-off);
/// `job.complete(variables)`; `job.error({errorCode, errorMessage})`; and the failure it
/// sends when a job's variables fail its schema (no `retries`: 0, as in Camunda).
#[tokio::test]
async fn the_official_js_clients_job_bodies_are_accepted() {
    let w = world().await;
    let id = w.start().await;
    let job = activate_one(&w, js_client_activation()).await;
    assert_eq!(job["worker"], "worker-payments-1");
    assert_eq!(
        job["variables"],
        json!({"amount": 42, "card": "x"}),
        "no selection: all"
    );
    // The handler threw: `failJob({jobKey, errorMessage, retries: retries - 1})`.
    let r = w
        .post(
            &zeebe_answer(&job, "failure"),
            json!({"errorMessage": "card service down", "retries": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    // No back-off: the next attempt is offered at once.
    let job = activate_one(&w, js_client_activation()).await;
    assert_eq!(job["retries"], 2, "{job}");
    // `job.complete({receipt: "r-1"})`.
    let r = w
        .post(
            &zeebe_answer(&job, "completion"),
            json!({"variables": {"receipt": "r-1"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");
    assert_eq!(view["snapshot"]["variables"]["receipt"], "r-1", "{view}");
    let history = w.history(&id).await;
    assert_eq!(history[0]["worker"], "worker-payments-1");

    // `job.complete()` sends `{"variables": {}}`.
    let id = w.start().await;
    let job = activate_one(&w, js_client_activation()).await;
    let r = w
        .post(&zeebe_answer(&job, "completion"), json!({"variables": {}}))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.instance(&id).await["instance"]["status"], "completed");

    // `job.error({errorCode: "DECLINED", errorMessage: "no"})` routes to the boundary.
    let id = w.start().await;
    let job = activate_one(&w, js_client_activation()).await;
    let r = w
        .post(
            &zeebe_answer(&job, "error"),
            json!({"errorCode": "DECLINED", "errorMessage": "no"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");

    // Variables that fail the worker's schema: `failJob({jobKey, errorMessage})`, so
    // Camunda's default of 0 retries ends the instance FAILED.
    let id = w.start().await;
    let job = activate_one(&w, js_client_activation()).await;
    let r = w
        .post(
            &zeebe_answer(&job, "failure"),
            json!({"errorMessage": "Invalid variables"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.instance(&id).await["instance"]["status"], "failed");
}

/// Every field of Camunda 8.10's request schemas at a value that asks for nothing qflow
/// lacks — null, empty, Camunda's default — is accepted and means what it means in
/// Camunda: an empty `worker` is the default name, an empty `fetchVariable` all
/// variables, a null `retries` 0.
#[tokio::test]
async fn zeebe_fields_at_empty_null_or_default_values_are_accepted() {
    let w = world().await;
    let id = w.start().await;
    let job = activate_one(
        &w,
        json!({"type": "payments", "worker": "", "timeout": 30000, "maxJobsToActivate": 1,
               "fetchVariable": [], "requestTimeout": -1, "tenantIds": [],
               "tenantFilter": "PROVIDED", "withLease": false}),
    )
    .await;
    assert_eq!(job["worker"], "zeebe-worker", "{job}");
    assert_eq!(
        job["variables"],
        json!({"amount": 42, "card": "x"}),
        "[] selects all: {job}"
    );
    let r = w
        .post(
            &zeebe_answer(&job, "failure"),
            json!({"retries": 2, "errorMessage": "down", "retryBackOff": null,
                   "variables": {}, "leaseToken": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let job = activate_one(
        &w,
        json!({"type": "payments", "worker": null, "timeout": 30000, "maxJobsToActivate": 1,
               "fetchVariable": null, "requestTimeout": null, "tenantIds": null,
               "tenantFilter": null, "withLease": null}),
    )
    .await;
    assert_eq!(job["retries"], 2, "attempt 2, offered at once: {job}");
    let r = w
        .post(
            &zeebe_answer(&job, "completion"),
            json!({"variables": null, "leaseToken": null, "businessId": null,
                   "result": {"type": "userTask", "denied": false, "deniedReason": "",
                              "corrections": {"assignee": null, "dueDate": null,
                                              "followUpDate": null, "candidateUsers": null,
                                              "candidateGroups": null, "priority": null}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.instance(&id).await["instance"]["status"], "completed");

    let id = w.start().await;
    let job = activate_one(
        &w,
        json!({"type": "payments", "timeout": 30000, "maxJobsToActivate": 1,
               "requestTimeout": -1, "tenantIds": ["<default>"]}),
    )
    .await;
    let r = w
        .post(
            &zeebe_answer(&job, "completion"),
            json!({"result": {"type": "adHocSubProcess", "activateElements": [],
                              "isCompletionConditionFulfilled": false,
                              "isCancelRemainingInstances": false}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.instance(&id).await["instance"]["status"], "completed");

    let id = w.start().await;
    let job = activate_one(
        &w,
        json!({"type": "payments", "timeout": 30000, "maxJobsToActivate": 1,
               "requestTimeout": -1}),
    )
    .await;
    let r = w
        .post(
            &zeebe_answer(&job, "error"),
            json!({"errorCode": "DECLINED", "errorMessage": null, "variables": null,
                   "leaseToken": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.instance(&id).await["instance"]["status"], "completed");
}

/// A 400 naming the field at `pointer` in its detail (`needle`) and its JSON pointer.
fn zeebe_refused(r: &Reply, pointer: &str, needle: &str) {
    refused(r, StatusCode::BAD_REQUEST, needle);
    assert_eq!(r.body["errors"][0]["pointer"], pointer, "{}", r.text);
}

/// A field whose value asks for what qflow lacks (tenants, leases, user-task denials and
/// corrections, ad-hoc activations, a business id, failure variables) is refused naming
/// it, as is a field outside Camunda's schema; nothing is locked, stepped or recorded.
#[tokio::test]
async fn zeebe_fields_asking_for_what_qflow_lacks_are_refused_naming_them() {
    let w = world().await;
    let id = w.start().await;
    let activation = |extra: Value| {
        let mut body = json!({"type": "payments", "timeout": 30000, "maxJobsToActivate": 1,
                              "requestTimeout": -1});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let fence = w.fence(&id).await;
    for (extra, pointer, needle) in [
        (
            json!({"tenantIds": ["<default>", "acme"]}),
            "/tenantIds",
            "`tenantIds`",
        ),
        (
            json!({"tenantFilter": "ASSIGNED"}),
            "/tenantFilter",
            "`tenantFilter` \"ASSIGNED\"",
        ),
        (json!({"withLease": true}), "/withLease", "`withLease` true"),
        (
            json!({"tenantFilter": "MINE"}),
            "/tenantFilter",
            "unknown variant `MINE`",
        ),
        (
            json!({"priority": 1}),
            "/priority",
            "unknown field `priority`",
        ),
    ] {
        let r = w.post("/v2/jobs/activation", activation(extra)).await;
        zeebe_refused(&r, pointer, needle);
    }
    assert_eq!(
        w.fence(&id).await,
        fence,
        "no refused activation locked the job"
    );

    let job = activate_one(&w, activation(json!({}))).await;
    let fence = w.fence(&id).await;
    let completion = zeebe_answer(&job, "completion");
    for (body, pointer, needle) in [
        (
            json!({"result": {"type": "userTask", "denied": true}}),
            "/result/denied",
            "`result.denied` true is not supported",
        ),
        (
            json!({"result": {"deniedReason": "not mine"}}),
            "/result/deniedReason",
            "`result.deniedReason`",
        ),
        (
            json!({"result": {"type": "userTask", "corrections": {"assignee": "bo"}}}),
            "/result/corrections/assignee",
            "`result.corrections.assignee`",
        ),
        (
            json!({"result": {"corrections": {"candidateGroups": []}}}),
            "/result/corrections/candidateGroups",
            "`result.corrections.candidateGroups`",
        ),
        (
            json!({"result": {"type": "adHocSubProcess",
                           "activateElements": [{"elementId": "review"}]}}),
            "/result/activateElements",
            "`result.activateElements` [\"review\"]",
        ),
        (
            json!({"result": {"isCompletionConditionFulfilled": true}}),
            "/result/isCompletionConditionFulfilled",
            "`result.isCompletionConditionFulfilled`",
        ),
        (
            json!({"result": {"isCancelRemainingInstances": true}}),
            "/result/isCancelRemainingInstances",
            "`result.isCancelRemainingInstances`",
        ),
        (
            json!({"result": {"type": "listener"}}),
            "/result/type",
            "unknown variant `listener`",
        ),
        (
            json!({"result": {"corrections": {"name": "x"}}}),
            "/result/corrections/name",
            "unknown field `name`",
        ),
        (
            json!({"leaseToken": "lease-1"}),
            "/leaseToken",
            "`leaseToken` is not supported",
        ),
        (
            json!({"businessId": "order-1"}),
            "/businessId",
            "`businessId` \"order-1\"",
        ),
        (
            json!({"variable": {}}),
            "/variable",
            "unknown field `variable`",
        ),
    ] {
        let r = w.post(&completion, body).await;
        zeebe_refused(&r, pointer, needle);
    }
    let failure = zeebe_answer(&job, "failure");
    for (body, pointer, needle) in [
        (
            json!({"retries": 1, "variables": {"why": "down"}}),
            "/variables",
            "`variables` [\"why\"] is not supported",
        ),
        (
            json!({"retries": 1, "leaseToken": "lease-1"}),
            "/leaseToken",
            "`leaseToken`",
        ),
        (
            json!({"retries": 1, "errorDetails": "x"}),
            "/errorDetails",
            "unknown field `errorDetails`",
        ),
    ] {
        let r = w.post(&failure, body).await;
        zeebe_refused(&r, pointer, needle);
    }
    let r = w
        .post(
            &zeebe_answer(&job, "error"),
            json!({"errorCode": "DECLINED", "leaseToken": "lease-1"}),
        )
        .await;
    zeebe_refused(&r, "/leaseToken", "`leaseToken`");
    assert_eq!(w.fence(&id).await, fence, "no refused answer was stepped");
    assert!(w.history(&id).await.is_empty());
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "running", "{view}");
    // The job is still the activation's to answer.
    let r = w.post(&completion, json!({})).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.instance(&id).await["instance"]["status"], "completed");
}

/// A Camunda 8 model: `start → ship (zeebe:taskDefinition type="ship", 2 retries) → end`.
const ZEEBE_MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="dz" targetNamespace="t">
  <bpmn:process id="shipping" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="ship">
      <bpmn:extensionElements><zeebe:taskDefinition type="ship" retries="2"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="ship"/>
    <bpmn:sequenceFlow id="f1" sourceRef="ship" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

#[tokio::test]
async fn a_zeebe_model_runs_through_the_camunda_8_job_endpoints() {
    let w = world().await;
    let r = w
        .send(
            Method::POST,
            "/v1/deployments",
            ADMIN,
            Some(json!({ "source": ZEEBE_MODEL })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = w
        .send(
            Method::POST,
            "/v1/processes/shipping/instances",
            ADMIN,
            Some(json!({ "variables": { "parcel": "p-1" } })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.body["instance"].as_str().unwrap().to_owned();
    let r = w
        .post(
            "/v2/jobs/activation",
            json!({"type": "ship", "worker": "courier", "timeout": 10000,
                   "maxJobsToActivate": 1, "requestTimeout": -1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let job = &r.body["jobs"][0];
    assert_eq!(job["retries"], 2, "the model's budget: {}", r.text);
    assert_eq!(job["processDefinitionId"], "shipping");
    assert_eq!(job["variables"]["parcel"], "p-1");
    let key = job["jobKey"].as_str().unwrap();
    let r = w
        .post(
            &format!("/v2/jobs/{key}/completion"),
            json!({"variables": {"tracking": "t-9"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");
    assert_eq!(w.history(&id).await[0]["worker"], "courier");
}

/// `PATCH /v2/jobs/{jobKey}` (Camunda 8 `updateJob`): a new timeout counts from now and
/// moves the job's lock timer, so it outlives its first timeout and still completes;
/// retries set the attempts the job has left; retries below 1, an operation reference,
/// no change or a timeout out of range are refused at their pointer and change nothing;
/// an unknown job is 404.
#[tokio::test]
async fn zeebe_job_update_moves_its_timeout_and_sets_retries() {
    let w = world().await;
    let id = w.start().await;
    let job = activate(&w, "z-1", 1_000).await;
    let key = job["jobKey"].as_str().unwrap().to_owned();
    let lock_due = |view: &Value| -> Vec<i64> {
        view["timers"]
            .as_array()
            .expect("timers")
            .iter()
            .filter(|t| t["node"] == "charge")
            .filter_map(|t| t["due_at_ms"].as_i64())
            .collect()
    };
    assert_eq!(lock_due(&w.instance(&id).await), vec![T0 + 1_000]);
    let fence = w.fence(&id).await;
    let patch = |body: Value| {
        let uri = format!("/v2/jobs/{key}");
        let w = &w;
        async move { w.send(Method::PATCH, &uri, WORKER, Some(body)).await }
    };
    for (body, pointer, needle) in [
        (
            json!({"changeset": {"retries": 0}}),
            "/changeset/retries",
            "retries from 1",
        ),
        (
            json!({"changeset": {"timeout": 0}}),
            "/changeset/timeout",
            "1..=86400000",
        ),
        (
            json!({"changeset": {}}),
            "/changeset",
            "sets `retries`, `timeout` or both",
        ),
        (
            json!({"changeset": {"retries": null, "timeout": null}}),
            "/changeset",
            "sets `retries`",
        ),
        (
            json!({"changeset": {"timeout": 5000}, "operationReference": 7}),
            "/operationReference",
            "operation records",
        ),
    ] {
        zeebe_refused(&patch(body).await, pointer, needle);
    }
    let r = patch(json!({"changeset": {"timeout": 5000}, "extra": 1})).await;
    refused(&r, StatusCode::BAD_REQUEST, "extra");
    assert_eq!(w.fence(&id).await, fence, "a refusal stepped the instance");

    w.clock.advance_ms(500);
    let r = patch(
        json!({"changeset": {"retries": null, "timeout": 60000}, "operationReference": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    // Retries of the activated job: the attempts it has left, this one counted.
    let r = patch(json!({"changeset": {"retries": "5"}})).await;
    refused(&r, StatusCode::BAD_REQUEST, "retries");
    let r = patch(json!({"changeset": {"retries": 5}})).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.instance(&id).await;
    assert_eq!(view["snapshot"]["pull_retries"]["charge"], 5, "{view}");
    // From now (T0 + 500), not from the activation.
    assert_eq!(lock_due(&w.instance(&id).await), vec![T0 + 60_500]);
    // Past its first timeout, the job is still the worker's.
    w.clock.advance_ms(5_000);
    let r = w
        .post(&format!("/v2/jobs/{key}/completion"), json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let history = w.history(&id).await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["outcome"], "ok", "{history:?}");
    assert_eq!(history[0]["finished_at_ms"], T0 + 5_500, "{history:?}");
    // A completed job's key went with it: not found, and nothing steps.
    let fence = w.fence(&id).await;
    let r = patch(json!({"changeset": {"timeout": 5000}})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(w.fence(&id).await, fence);

    let r = w
        .send(
            Method::PATCH,
            "/v2/jobs/2251799813685249000",
            WORKER,
            Some(json!({"changeset": {"timeout": 5000}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

/// The probes a Camunda 8 client calls on start: the topology and the license need a
/// valid token (any scope), the status none; the topology's partition is healthy while
/// the store answers, and the status is 204 then and 503 once the store is gone.
#[tokio::test]
async fn zeebe_topology_license_and_status_answer_in_camunda_8_shapes() {
    let w = world().await;
    for token in [WORKER, READER, ADMIN] {
        let r = w.send(Method::GET, "/v2/topology", token, None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.body["clusterSize"], 1);
        assert_eq!(r.body["partitionsCount"], 1);
        assert_eq!(r.body["replicationFactor"], 1);
        assert_eq!(r.body["gatewayVersion"], "8.8.0");
        assert_eq!(r.body["lastCompletedChangeId"], "-1");
        assert_eq!(r.body["clusterId"], Value::Null);
        let broker = &r.body["brokers"][0];
        assert_eq!(broker["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(
            broker["partitions"],
            json!([{"partitionId": 1, "role": "leader", "health": "healthy", "state": "active"}])
        );
        assert_eq!(broker["nodeId"], 0);
        assert_eq!(broker["brokerId"], "0");
    }
    let r = w.send(Method::GET, "/v2/license", WORKER, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"validLicense": true, "licenseType": "Apache-2.0", "isCommercial": false,
               "expiresAt": null})
    );
    for uri in ["/v2/topology", "/v2/license"] {
        let r = w.send(Method::GET, uri, "not-a-token", None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{uri}: {}", r.text);
    }
    // The status needs no token at all.
    let req = Request::builder()
        .uri("/v2/status")
        .body(Body::empty())
        .expect("request");
    let res = w.app.clone().oneshot(req).await.expect("infallible");
    assert_eq!(res.status(), StatusCode::NO_CONTENT);

    // The store goes away: the partition is unhealthy and the status 503.
    w.sqlite.close().await;
    let r = w.send(Method::GET, "/v2/topology", WORKER, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["brokers"][0]["partitions"][0]["health"], "unhealthy");
    let r = w.send(Method::GET, "/v2/status", WORKER, None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
}

/// The qflow id of the instance a Camunda 8 key names.
async fn instance_of_key(w: &World, key: &Value) -> String {
    let name = w
        .store
        .camunda_key(zeebe_key(key))
        .await
        .unwrap()
        .expect("a key");
    name.instance.to_string()
}

/// Camunda 8 process instances and incidents by key (`/v2/process-instances/…`,
/// `/v2/incidents/…`): an instance reads back with Camunda's state (FAILED is `ACTIVE`
/// with an incident); a search selects by state, incident, definition and key, page by
/// page; a job failed with no retries left shows an incident naming the job, whose
/// retries update leaves the instance FAILED until the incident's resolution offers the
/// job again with those retries; a cancellation ends a running instance and is a 404 on
/// an ended one; filters qflow cannot judge are refused at their field.
#[tokio::test]
async fn zeebe_instances_and_incidents_by_key_search_cancel_and_resolve() {
    let w = world().await;
    // A millisecond apart, so that the listing's order (creation instant, then id) is
    // the start order.
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(w.start().await);
        w.clock.advance_ms(1);
    }
    let r = w
        .post(
            "/v2/jobs/activation",
            json!({"type": "payments", "worker": "z", "timeout": 30000, "maxJobsToActivate": 5}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let jobs = r.body["jobs"].as_array().expect("jobs").clone();
    assert_eq!(jobs.len(), 3, "{}", r.text);
    // Keys by instance, in start order: done, failed, running.
    let mut by_instance = Vec::new();
    for id in &ids {
        let mut found = None;
        for job in &jobs {
            if instance_of_key(&w, &job["processInstanceKey"]).await == *id {
                found = Some(job.clone());
            }
        }
        by_instance.push(found.expect("a job per instance"));
    }
    let key_of = |i: usize| {
        by_instance[i]["processInstanceKey"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let job_of = |i: usize| by_instance[i]["jobKey"].as_str().unwrap().to_owned();
    let r = w
        .post(&format!("/v2/jobs/{}/completion", job_of(0)), json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = w
        .post(
            &format!("/v2/jobs/{}/failure", job_of(1)),
            json!({"retries": 0, "errorMessage": "ledger down"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);

    let get = |key: String| {
        let w = &w;
        async move {
            let r = w
                .send(
                    Method::GET,
                    &format!("/v2/process-instances/{key}"),
                    READER,
                    None,
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            r.body
        }
    };
    let done = get(key_of(0)).await;
    assert_eq!(done["state"], "COMPLETED", "{done}");
    assert_eq!(done["hasIncident"], false);
    assert_eq!(done["processDefinitionId"], "checkout");
    assert_eq!(done["processDefinitionVersion"], 1);
    assert_eq!(done["tenantId"], "<default>");
    assert!(
        done["startDate"]
            .as_str()
            .is_some_and(|d| d.starts_with("2023-11-14T")),
        "{done}"
    );
    assert!(done["endDate"].is_string(), "{done}");
    let failed = get(key_of(1)).await;
    assert_eq!(
        (failed["state"].as_str(), failed["hasIncident"].as_bool()),
        (Some("ACTIVE"), Some(true))
    );
    // Null, as Camunda's servers send what an instance lacks (its schema since 8.9).
    for member in [
        "endDate",
        "parentProcessInstanceKey",
        "processDefinitionVersionTag",
    ] {
        assert_eq!(failed[member], Value::Null, "{member}: {failed}");
    }
    assert_eq!(failed["tags"], json!([]));
    let running = get(key_of(2)).await;
    assert_eq!(
        (running["state"].as_str(), running["hasIncident"].as_bool()),
        (Some("ACTIVE"), Some(false))
    );

    // Searches.
    let search = |body: Value| {
        let w = &w;
        async move {
            let r = w
                .send(
                    Method::POST,
                    "/v2/process-instances/search",
                    READER,
                    Some(body.clone()),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{body}: {}", r.text);
            r.body
        }
    };
    let keys = |found: &Value| -> Vec<String> {
        found["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["processInstanceKey"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = search(json!({})).await;
    assert_eq!(
        keys(&all),
        [key_of(0), key_of(1), key_of(2)],
        "oldest first"
    );
    assert_eq!(all["page"]["totalItems"], 3);
    for (filter, want) in [
        (json!({"state": "COMPLETED"}), vec![0]),
        (json!({"state": "ACTIVE"}), vec![1, 2]),
        (json!({"hasIncident": true}), vec![1]),
        (
            json!({"state": {"$eq": "ACTIVE"}, "hasIncident": false}),
            vec![2],
        ),
        (json!({"state": "TERMINATED"}), vec![]),
        (
            json!({"processDefinitionId": "checkout", "processDefinitionVersion": 1}),
            vec![0, 1, 2],
        ),
        (json!({"processDefinitionId": "elsewhere"}), vec![]),
        (json!({"processDefinitionKey": "999"}), vec![]),
        (
            json!({"processInstanceKey": key_of(2), "tenantId": "<default>"}),
            vec![2],
        ),
        (
            json!({"processInstanceKey": key_of(2), "state": "COMPLETED"}),
            vec![],
        ),
        (json!({"startDate": null, "variables": null}), vec![0, 1, 2]),
    ] {
        let want: Vec<String> = want.into_iter().map(key_of).collect();
        assert_eq!(
            keys(&search(json!({"filter": filter.clone()})).await),
            want,
            "{filter}"
        );
    }
    // ACTIVE pages through rows the listing reads but the filter leaves out.
    let first = search(json!({"filter": {"state": "ACTIVE"}, "page": {"limit": 1}})).await;
    assert_eq!(keys(&first), [key_of(1)]);
    assert_eq!(first["page"]["hasMoreTotalItems"], true);
    let after = first["page"]["endCursor"].as_str().expect("a cursor");
    let second = search(
        json!({"filter": {"state": "ACTIVE"}, "page": {"limit": 1, "after": after},
                               "sort": [{"field": "startDate", "order": "ASC"}]}),
    )
    .await;
    assert_eq!(keys(&second), [key_of(2)]);
    for (body, pointer) in [
        (
            json!({"filter": {"startDate": {"$gt": "2023-01-01T00:00:00Z"}}}),
            "/filter/startDate",
        ),
        (
            json!({"filter": {"$or": [{"state": "ACTIVE"}]}}),
            "/filter/$or",
        ),
        (
            json!({"filter": {"state": {"$in": ["ACTIVE"]}}}),
            "/filter/state",
        ),
        (json!({"filter": {"state": "RUNNING"}}), "/filter/state"),
        (
            json!({"sort": [{"field": "state", "order": "DESC"}]}),
            "/sort",
        ),
        (
            json!({"sort": [{"field": "startDate", "order": "DESC"}]}),
            "/sort",
        ),
        (json!({"page": {"limit": 0}}), "/page/limit"),
    ] {
        let r = w
            .send(
                Method::POST,
                "/v2/process-instances/search",
                READER,
                Some(body.clone()),
            )
            .await;
        zeebe_refused(&r, pointer, "");
    }
    // Cursors this search did not answer: 422 at the cursor.
    for after in ["not-a-cursor", "b7c57d1d64e0", "31322e78"] {
        let r = w
            .send(
                Method::POST,
                "/v2/process-instances/search",
                READER,
                Some(json!({"page": {"after": after}})),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{after}: {}",
            r.text
        );
        assert_eq!(r.body["errors"][0]["pointer"], "/page/after", "{}", r.text);
    }

    // The incident of the job that failed with no retries left.
    let incidents = |body: Value| {
        let w = &w;
        async move {
            let r = w
                .send(
                    Method::POST,
                    "/v2/incidents/search",
                    READER,
                    Some(body.clone()),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{body}: {}", r.text);
            r.body["items"].as_array().expect("items").clone()
        }
    };
    let found = incidents(json!({"filter": {"processInstanceKey": key_of(1)}})).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let incident = found[0].clone();
    assert_eq!(incident["state"], "ACTIVE");
    assert_eq!(incident["errorType"], "JOB_NO_RETRIES");
    assert_eq!(incident["elementId"], "charge");
    // The failed job's key: a new one, since the activation's went with the task when
    // the instance failed (it is not found any more).
    let failed_job = incident["jobKey"].as_str().expect("a job key").to_owned();
    assert_ne!(incident["jobKey"], by_instance[1]["jobKey"], "{incident}");
    let r = w
        .post(&format!("/v2/jobs/{}/completion", job_of(1)), json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(
        incident["elementInstanceKey"],
        by_instance[1]["elementInstanceKey"]
    );
    assert!(incident["errorMessage"]
        .as_str()
        .unwrap()
        .contains("ledger down"));
    let incident_key = incident["incidentKey"].as_str().unwrap().to_owned();
    let r = w
        .send(
            Method::GET,
            &format!("/v2/incidents/{incident_key}"),
            READER,
            None,
        )
        .await;
    assert_eq!(r.body, incident, "{}", r.text);
    assert_eq!(
        incidents(json!({"filter": {"state": "ACTIVE"}})).await,
        std::slice::from_ref(&incident)
    );
    assert!(incidents(json!({"filter": {"errorType": "UNKNOWN"}}))
        .await
        .is_empty());
    assert!(
        incidents(json!({"filter": {"processInstanceKey": key_of(0)}}))
            .await
            .is_empty()
    );

    // A change that asks for a timeout on a job nobody holds is refused whole: its
    // retries are not set either.
    let r = w
        .send(
            Method::PATCH,
            &format!("/v2/jobs/{failed_job}"),
            WORKER,
            Some(json!({"changeset": {"retries": 3, "timeout": 1000}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    let view = w.instance(&ids[1]).await;
    assert_eq!(view["snapshot"]["pull_retries"]["charge"], 0, "{view}");
    // Camunda's repair: retries back on the job (the instance stays FAILED), then the
    // incident resolved — the job is offered again with those retries, as a new job.
    let r = w
        .send(
            Method::PATCH,
            &format!("/v2/jobs/{failed_job}"),
            WORKER,
            Some(json!({"changeset": {"retries": 2}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(get(key_of(1)).await["hasIncident"], true);
    let resolve = || {
        let w = &w;
        let uri = format!("/v2/incidents/{incident_key}/resolution");
        async move { w.send(Method::POST, &uri, ADMIN, None).await }
    };
    let r = resolve().await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(get(key_of(1)).await["hasIncident"], false);
    let r = resolve().await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "a resolved incident: {}",
        r.text
    );
    assert_eq!(
        incidents(json!({"filter": {"state": "RESOLVED"}})).await[0]["incidentKey"],
        incident_key
    );
    let job = activate(&w, "z-again", 30_000).await;
    assert_eq!(job["processInstanceKey"], key_of(1));
    assert_eq!(job["retries"], 2, "{job}");
    assert_ne!(job["jobKey"], by_instance[1]["jobKey"]);

    // Cancellation: the running instance ends TERMINATED; an ended one is a 404.
    let cancel = |key: String, body: Option<Value>| {
        let w = &w;
        async move {
            w.send(
                Method::POST,
                &format!("/v2/process-instances/{key}/cancellation"),
                ADMIN,
                body,
            )
            .await
        }
    };
    let r = cancel(key_of(2), Some(json!({"operationReference": 5}))).await;
    zeebe_refused(&r, "/operationReference", "operation records");
    let r = cancel(key_of(2), Some(json!({}))).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(get(key_of(2)).await["state"], "TERMINATED");
    for key in [key_of(2), key_of(0)] {
        let r = cancel(key, None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    }
    // Keys: malformed is a 400, another kind's a 404.
    let r = w
        .send(Method::GET, "/v2/process-instances/x1", READER, None)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = w
        .send(
            Method::GET,
            &format!("/v2/process-instances/{}", job_of(0)),
            READER,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = w
        .send(
            Method::GET,
            &format!("/v2/incidents/{}", key_of(0)),
            READER,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

/// What Camunda 8.9 and 8.10 clients send (the official Python SDK): a completion or a
/// failure with no body at all, `jobLeaseToken` (8.10's name for the lease) as null,
/// `changeset.priority` as null; and what they read: the request's path as every
/// problem's `instance`.
#[tokio::test]
async fn zeebe_bodies_of_newer_clients_are_taken() {
    let w = world().await;
    let bare = |uri: String| {
        let app = w.app.clone();
        async move {
            let req = Request::builder()
                .method(Method::POST)
                .uri(uri)
                .header(header::AUTHORIZATION, format!("Bearer {WORKER}"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::empty())
                .expect("request");
            app.oneshot(req).await.expect("infallible").status()
        }
    };
    // A completion with no body.
    let id = w.start().await;
    let job = activate(&w, "py", 30_000).await;
    let key = job["jobKey"].as_str().unwrap().to_owned();
    assert_eq!(
        bare(format!("/v2/jobs/{key}/completion")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(w.instance(&id).await["instance"]["status"], "completed");
    // A failure with no body: no retries left, as Camunda reads it.
    let id = w.start().await;
    let job = activate(&w, "py", 30_000).await;
    let key = job["jobKey"].as_str().unwrap().to_owned();
    let r = w
        .send(
            Method::PATCH,
            &format!("/v2/jobs/{key}"),
            WORKER,
            Some(json!({"changeset": {"retries": 2, "priority": null}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = w
        .send(
            Method::PATCH,
            &format!("/v2/jobs/{key}"),
            WORKER,
            Some(json!({"changeset": {"priority": 5}})),
        )
        .await;
    zeebe_refused(&r, "/changeset/priority", "priority");
    assert_eq!(
        bare(format!("/v2/jobs/{key}/failure")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(w.instance(&id).await["instance"]["status"], "failed");
    // 8.10's lease token name, null.
    let id = w.start().await;
    let job = activate(&w, "py", 30_000).await;
    let key = job["jobKey"].as_str().unwrap().to_owned();
    let r = w
        .post(
            &format!("/v2/jobs/{key}/completion"),
            json!({"jobLeaseToken": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.instance(&id).await["instance"]["status"], "completed");
    // Every problem names the request's path.
    let r = w.post("/v2/jobs/77/completion", json!({})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(r.body["instance"], "/v2/jobs/77/completion", "{}", r.text);
    let r = w.send(Method::GET, "/v2/nothing-here", WORKER, None).await;
    assert_eq!(r.body["instance"], "/v2/nothing-here", "{}", r.text);
}

/// Camunda 8 variables (`/v2/variables/…`): an instance's variables by name with their
/// keys, filtered by name and value, page by page; one read back whole by its key; a
/// search that names no instance is refused, one naming an unknown one finds nothing.
#[tokio::test]
async fn zeebe_variables_of_an_instance_by_key() {
    let w = world().await;
    let _id = w.start().await;
    let job = activate(&w, "v", 30_000).await;
    let instance_key = job["processInstanceKey"].as_str().unwrap().to_owned();
    let search = |body: Value| {
        let w = &w;
        async move {
            w.send(Method::POST, "/v2/variables/search", READER, Some(body))
                .await
        }
    };
    let r = search(json!({"filter": {"processInstanceKey": instance_key}})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let items = r.body["items"].as_array().expect("items").clone();
    let pairs: Vec<(&str, &str)> = items
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["value"].as_str().unwrap()))
        .collect();
    assert_eq!(pairs, [("amount", "42"), ("card", "\"x\"")], "{}", r.text);
    for v in &items {
        assert_eq!(v["processInstanceKey"], instance_key.as_str());
        assert_eq!(v["scopeKey"], instance_key.as_str());
        assert_eq!(v["isTruncated"], false);
        assert_eq!(v["tenantId"], "<default>");
        zeebe_key(&v["variableKey"]);
    }
    // Filters: by name, by value (JSON text), by the variable's own key.
    let names = |r: &Reply| -> Vec<String> {
        r.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let card_key = items[1]["variableKey"].as_str().unwrap().to_owned();
    for (filter, want) in [
        (
            json!({"processInstanceKey": instance_key, "name": "card"}),
            vec!["card"],
        ),
        (
            json!({"scopeKey": instance_key, "value": "42"}),
            vec!["amount"],
        ),
        (json!({"variableKey": {"$eq": card_key}}), vec!["card"]),
        (
            json!({"processInstanceKey": instance_key, "isTruncated": true}),
            vec![],
        ),
        (json!({"processInstanceKey": "2251799813685248000"}), vec![]),
    ] {
        let r = search(json!({ "filter": filter.clone() })).await;
        assert_eq!(r.status, StatusCode::OK, "{filter}: {}", r.text);
        assert_eq!(names(&r), want, "{filter}");
    }
    // Pages of one.
    let r =
        search(json!({"filter": {"processInstanceKey": instance_key}, "page": {"limit": 1}})).await;
    assert_eq!(names(&r), ["amount"]);
    let after = r.body["page"]["endCursor"]
        .as_str()
        .expect("a cursor")
        .to_owned();
    let r = search(json!({"filter": {"processInstanceKey": instance_key},
                          "page": {"limit": 1, "after": after}, "sort": [{"field": "name"}]}))
    .await;
    assert_eq!(names(&r), ["card"]);
    assert_eq!(r.body["page"]["hasMoreTotalItems"], false, "{}", r.text);
    // No instance named: refused, naming the filter.
    let r = search(json!({"filter": {"name": "card"}})).await;
    refused(&r, StatusCode::UNPROCESSABLE_ENTITY, "names its instance");
    assert_eq!(
        r.body["errors"][0]["pointer"], "/filter/processInstanceKey",
        "{}",
        r.text
    );
    // One read back by its key, whole.
    let r = w
        .send(
            Method::GET,
            &format!("/v2/variables/{card_key}"),
            READER,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["name"], "card");
    assert_eq!(r.body["value"], "\"x\"");
    assert!(r.body.get("isTruncated").is_none(), "{}", r.text);
    let r = w
        .send(
            Method::GET,
            &format!("/v2/variables/{instance_key}"),
            READER,
            None,
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "an instance's key is no variable's: {}",
        r.text
    );
}

/// Camunda 8 element instances of an instance (`/v2/element-instances/…`): a search by
/// the instance's key finds the process (its key the instance's) and the active task
/// (its key the job's `elementInstanceKey`), filters by type, state, element and
/// incident, pages by key; each reads back by key; a failed job's element shows its
/// incident; once the instance has ended only the process is left (COMPLETED, with an
/// end date) and the task's key is not found; a search that names no instance is a
/// 422, a filter qflow cannot judge a 400 at its field.
#[tokio::test]
async fn zeebe_element_instances_of_an_instance_by_key() {
    let w = world().await;
    let _id = w.start().await;
    let job = activate(&w, "e", 30_000).await;
    let instance_key = job["processInstanceKey"].as_str().unwrap().to_owned();
    let element_key = job["elementInstanceKey"].as_str().unwrap().to_owned();
    let search = |body: Value| {
        let w = &w;
        async move {
            w.send(
                Method::POST,
                "/v2/element-instances/search",
                READER,
                Some(body),
            )
            .await
        }
    };
    let r = search(json!({"filter": {"processInstanceKey": instance_key}})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let items = r.body["items"].as_array().expect("items").clone();
    let shapes: Vec<(&str, &str, &str, &str)> = items
        .iter()
        .map(|e| {
            (
                e["elementInstanceKey"].as_str().unwrap(),
                e["elementId"].as_str().unwrap(),
                e["type"].as_str().unwrap(),
                e["state"].as_str().unwrap(),
            )
        })
        .collect();
    let mut want = vec![
        (instance_key.as_str(), "checkout", "PROCESS", "ACTIVE"),
        (element_key.as_str(), "charge", "SERVICE_TASK", "ACTIVE"),
    ];
    want.sort_by_key(|(k, ..)| k.parse::<i64>().unwrap());
    assert_eq!(shapes, want, "{}", r.text);
    for e in &items {
        assert_eq!(e["processInstanceKey"], instance_key.as_str());
        assert_eq!(e["processDefinitionId"], "checkout");
        assert_eq!(e["processDefinitionKey"], "1");
        assert_eq!(e["tenantId"], "<default>");
        assert_eq!(e["hasIncident"], false);
        zeebe_key(&e["elementInstanceKey"]);
    }
    let process = items.iter().find(|e| e["type"] == "PROCESS").unwrap();
    assert!(
        process["startDate"]
            .as_str()
            .is_some_and(|d| d.starts_with("2023-11-14T")),
        "{process}"
    );
    assert!(process["endDate"].is_null(), "{process}");
    let keys = |r: &Reply| -> Vec<String> {
        r.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|e| e["elementInstanceKey"].as_str().unwrap().to_owned())
            .collect()
    };
    for (filter, want) in [
        (
            json!({"processInstanceKey": instance_key, "type": "SERVICE_TASK"}),
            vec![element_key.clone()],
        ),
        (
            json!({"elementInstanceKey": {"$eq": element_key}}),
            vec![element_key.clone()],
        ),
        (
            json!({"processInstanceKey": instance_key, "elementId": "checkout", "state": "ACTIVE"}),
            vec![instance_key.clone()],
        ),
        (
            json!({"processInstanceKey": instance_key, "state": "COMPLETED"}),
            vec![],
        ),
        (
            json!({"processInstanceKey": instance_key, "hasIncident": true}),
            vec![],
        ),
        (json!({"processInstanceKey": "2251799813685248000"}), vec![]),
    ] {
        let r = search(json!({ "filter": filter.clone() })).await;
        assert_eq!(r.status, StatusCode::OK, "{filter}: {}", r.text);
        assert_eq!(keys(&r), want, "{filter}");
    }
    // Pages of one, in key order.
    let r =
        search(json!({"filter": {"processInstanceKey": instance_key}, "page": {"limit": 1}})).await;
    assert_eq!(keys(&r), [want[0].0]);
    let after = r.body["page"]["endCursor"]
        .as_str()
        .expect("a cursor")
        .to_owned();
    let r = search(json!({"filter": {"processInstanceKey": instance_key},
                          "page": {"limit": 1, "after": after},
                          "sort": [{"field": "elementInstanceKey", "order": "ASC"}]}))
    .await;
    assert_eq!(keys(&r), [want[1].0]);
    assert_eq!(r.body["page"]["hasMoreTotalItems"], false, "{}", r.text);
    // Refusals.
    let r = search(json!({"filter": {"type": "SERVICE_TASK"}})).await;
    refused(&r, StatusCode::UNPROCESSABLE_ENTITY, "names its instance");
    let r = search(json!({"filter": {"processInstanceKey": instance_key,
                                     "startDate": "2023-11-14T00:00:00Z"}}))
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(
        r.body["errors"][0]["pointer"], "/filter/startDate",
        "{}",
        r.text
    );
    let r = search(json!({"filter": {"processInstanceKey": instance_key, "state": "DONE"}})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    // By key: the task, and the process by the instance's key.
    let get = |key: String| {
        let w = &w;
        async move {
            w.send(
                Method::GET,
                &format!("/v2/element-instances/{key}"),
                READER,
                None,
            )
            .await
        }
    };
    let r = get(element_key.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["elementId"], "charge");
    let r = get(instance_key.clone()).await;
    assert_eq!(r.body["type"], "PROCESS", "{}", r.text);
    // The job fails with no retries left: FAILED, the task's element has the incident.
    let r = w
        .post(
            &format!("/v2/jobs/{}/failure", job["jobKey"].as_str().unwrap()),
            json!({"retries": 0, "errorMessage": "ledger down"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = get(element_key.clone()).await;
    assert_eq!(r.body["hasIncident"], true, "{}", r.text);
    let incident_key = r.body["incidentKey"]
        .as_str()
        .expect("an incident key")
        .to_owned();
    let r = w
        .send(
            Method::GET,
            &format!("/v2/incidents/{incident_key}"),
            READER,
            None,
        )
        .await;
    assert_eq!(
        r.body["elementInstanceKey"],
        element_key.as_str(),
        "{}",
        r.text
    );
    let r =
        search(json!({"filter": {"processInstanceKey": instance_key, "hasIncident": true}})).await;
    assert_eq!(keys(&r).len(), 2, "the process has it too: {}", r.text);
    // Cancelled: the process alone, TERMINATED, with an end date; the task is gone.
    let r = w
        .send(
            Method::POST,
            &format!("/v2/process-instances/{instance_key}/cancellation"),
            ADMIN,
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = search(json!({"filter": {"processInstanceKey": instance_key}})).await;
    assert_eq!(keys(&r), std::slice::from_ref(&instance_key), "{}", r.text);
    assert_eq!(r.body["items"][0]["state"], "TERMINATED");
    assert_eq!(
        r.body["items"][0]["hasIncident"], false,
        "resolved: {}",
        r.text
    );
    assert!(r.body["items"][0]["endDate"].is_string(), "{}", r.text);
    let r = get(element_key).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = w
        .send(
            Method::GET,
            &format!("/v2/incidents/{incident_key}"),
            READER,
            None,
        )
        .await;
    assert_eq!(r.body["state"], "RESOLVED", "{}", r.text);

    // A failure where no token stands (a gateway no flow leaves): the gateway is listed
    // with the incident, and the incident's element key reads back.
    let r = w
        .send(
            Method::POST,
            "/v1/deployments",
            ADMIN,
            Some(json!({ "source": GATEWAY_FAILS })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let dep = r.body["id"].clone();
    let r = w
        .send(
            Method::POST,
            "/v1/instances",
            ADMIN,
            Some(json!({ "deployment": dep, "variables": {"amount": 1} })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let r = w
        .send(
            Method::POST,
            "/v2/process-instances/search",
            READER,
            Some(json!({"filter": {"processDefinitionId": "routing"}})),
        )
        .await;
    let routed = r.body["items"][0]["processInstanceKey"]
        .as_str()
        .expect("a key")
        .to_owned();
    let r = search(json!({"filter": {"processInstanceKey": routed, "type": "EXCLUSIVE_GATEWAY"}}))
        .await;
    let gateway = r.body["items"][0].clone();
    assert_eq!(gateway["elementId"], "gw", "{}", r.text);
    assert_eq!(gateway["hasIncident"], true, "{}", r.text);
    let r = w
        .send(
            Method::POST,
            "/v2/incidents/search",
            READER,
            Some(json!({"filter": {"processInstanceKey": routed}})),
        )
        .await;
    assert_eq!(
        r.body["items"][0]["elementInstanceKey"], gateway["elementInstanceKey"],
        "{}",
        r.text
    );
    assert_eq!(r.body["items"][0]["incidentKey"], gateway["incidentKey"]);
    let r = get(gateway["elementInstanceKey"].as_str().unwrap().to_owned()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// `start → gw`, whose one flow's condition is false: FAILED at the gateway.
const GATEWAY_FAILS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="routing" isExecutable="true">
    <startEvent id="start"/>
    <exclusiveGateway id="gw"/>
    <endEvent id="big"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="gw"/>
    <sequenceFlow id="f1" sourceRef="gw" targetRef="big"><conditionExpression>amount &gt; 100</conditionExpression></sequenceFlow>
  </process>
</definitions>"#;

/// A caller waiting on a child that waits at a user task.
const CALLER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="caller" isExecutable="true">
    <startEvent id="start"/>
    <callActivity id="call_child" calledElement="child"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="call_child"/>
    <sequenceFlow id="f1" sourceRef="call_child" targetRef="end"/>
  </process>
</definitions>"#;

const CHILD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="child" isExecutable="true">
    <startEvent id="start"/>
    <userTask id="review"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="review"/>
    <sequenceFlow id="f1" sourceRef="review" targetRef="end"/>
  </process>
</definitions>"#;

/// Camunda 8 process instances of a call activity: the called instance names its caller,
/// the call activity's element instance there (the key an element-instance search of
/// the caller answers) and its root; the caller names none.
#[tokio::test]
async fn zeebe_a_called_instance_names_its_caller_and_root() {
    let w = world().await;
    let dispatcher = qflow_channels::Dispatcher::start(
        w.rt.clone(),
        Arc::new(qflow_channels::Channels::new()),
        qflow_channels::DispatcherConfig {
            poll_interval_ms: 5,
            ..qflow_channels::DispatcherConfig::default()
        },
    );
    for source in [CHILD, CALLER] {
        let r = w
            .send(
                Method::POST,
                "/v1/deployments",
                ADMIN,
                Some(json!({ "source": source })),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    let r = w
        .send(
            Method::POST,
            "/v2/process-instances",
            ADMIN,
            Some(json!({"processDefinitionId": "caller"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let caller = r.body["processInstanceKey"].as_str().unwrap().to_owned();
    let search = |process: &'static str| {
        let w = &w;
        async move {
            w.send(
                Method::POST,
                "/v2/process-instances/search",
                READER,
                Some(json!({"filter": {"processDefinitionId": process}})),
            )
            .await
        }
    };
    let mut child = Value::Null;
    for _ in 0..500 {
        let r = search("child").await;
        if let Some(found) = r.body["items"].get(0) {
            child = found.clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(child.is_object(), "the child started");
    assert_eq!(
        child["parentProcessInstanceKey"],
        caller.as_str(),
        "{child}"
    );
    assert_eq!(child["rootProcessInstanceKey"], caller.as_str(), "{child}");
    let r = w
        .send(
            Method::POST,
            "/v2/element-instances/search",
            READER,
            Some(json!({"filter": {"processInstanceKey": caller, "type": "CALL_ACTIVITY"}})),
        )
        .await;
    assert_eq!(
        r.body["items"][0]["elementInstanceKey"], child["parentElementInstanceKey"],
        "{}",
        r.text
    );
    let key = child["processInstanceKey"].as_str().unwrap();
    let r = w
        .send(
            Method::GET,
            &format!("/v2/process-instances/{key}"),
            READER,
            None,
        )
        .await;
    assert_eq!(
        r.body["parentProcessInstanceKey"],
        caller.as_str(),
        "{}",
        r.text
    );
    let r = search("caller").await;
    let top = &r.body["items"][0];
    assert_eq!(top["processInstanceKey"], caller.as_str());
    for field in [
        "parentProcessInstanceKey",
        "parentElementInstanceKey",
        "rootProcessInstanceKey",
    ] {
        assert!(top[field].is_null(), "{field}: {top}");
    }
    dispatcher.shutdown().await;
}
