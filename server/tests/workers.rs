//! The pull-task API through HTTP (`/v1/external-tasks/...`, SPEC P1) against a durable
//! SQLite store with a runtime serving it, on a manual clock: every operation, and every
//! refusal a worker can meet — each checked for its problem document and for leaving the
//! instance as it was.

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
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
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
    assert_eq!(w.fence(&id).await, fence, "no refused answer was stepped");
    assert!(w.history(&id).await.is_empty());
    let view = w.instance(&id).await;
    assert_eq!(view["instance"]["status"], "running", "{view}");
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

#[tokio::test]
async fn zeebe_jobs_activate_complete_fail_and_throw_with_camunda_8_shapes() {
    let w = world().await;
    let id = w.start().await;
    let job = activate(&w, "z-1", 30_000).await;
    assert_eq!(job["type"], "payments");
    assert_eq!(job["processInstanceKey"], json!(id));
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
    // The old key names an attempt that is over.
    let r = w
        .post(&format!("/v2/jobs/{key}/completion"), json!({}))
        .await;
    refused(&r, StatusCode::CONFLICT, "attempt 1 is over");
    w.advance(5_000, 1).await;
    let job = activate(&w, "z-2", 30_000).await;
    let key = job["jobKey"].as_str().unwrap().to_owned();
    assert!(key.contains(":2:charge"), "{key}");
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
    let r = w
        .post(
            &format!("/v2/jobs/{}:1:charge/completion", uuid_nil()),
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = w.post("/v2/jobs/12345/completion", json!({})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
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
/// retries, an operation reference, no change or a timeout out of range are refused at
/// their pointer and change nothing; an unknown job is 404.
#[tokio::test]
async fn zeebe_job_update_moves_its_timeout_and_refuses_retries() {
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
            json!({"changeset": {"retries": 5}}),
            "/changeset/retries",
            "attempts left",
        ),
        (
            json!({"changeset": {"timeout": 0}}),
            "/changeset/timeout",
            "1..=86400000",
        ),
        (json!({"changeset": {}}), "/changeset", "must set `timeout`"),
        (
            json!({"changeset": {"retries": null, "timeout": null}}),
            "/changeset",
            "must set",
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
    // A job whose attempt is over is not activated: 409, and nothing steps.
    let fence = w.fence(&id).await;
    let r = patch(json!({"changeset": {"timeout": 5000}})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(w.fence(&id).await, fence);

    let r = w
        .send(
            Method::PATCH,
            "/v2/jobs/0190c7a2-5b1e-7c3d-9f00-3a4b5c6d7e8f:1:charge",
            WORKER,
            Some(json!({"changeset": {"timeout": 5000}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}
