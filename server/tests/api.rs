//! The HTTP API against a durable SQLite store with a runtime serving it, on a manual
//! clock: requests go through the whole router (limits, auth, problem details) without a
//! socket. Every refusal is checked twice: its problem document, and that the instance
//! and the audit log are exactly as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use qflow_ops::Ops;
use qflow_persistence::SqliteStore;
use qflow_runtime::{
    AsyncHandlers, ManualClock, Runtime, RuntimeConfig, StatsView, TaskContext, TaskOutcome,
};
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use qflow_store::Store;
use serde_json::{json, Value};
use tower::ServiceExt;

const T0: i64 = 1_700_000_000_000;
const ADMIN: &str = "admin-secret";
const READER: &str = "reader-secret";

fn model(process: &str, task: &str, policy: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="{process}" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="{task}" q:task="pay"><extensionElements>{policy}</extensionElements></serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="{task}"/>
    <sequenceFlow id="f1" sourceRef="{task}" targetRef="end"/>
  </process>
</definitions>"#
    )
}

const PARKING: &str =
    r#"<q:retry maxAttempts="5" initialInterval="PT1H" maxInterval="PT1H" jitter="none"/>"#;

struct World {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
    rt: Arc<Runtime>,
    app: Router,
    broken: Arc<AtomicBool>,
}

fn token(name: &str, secret: &str, scopes: &[Scope]) -> Token {
    let mut sha256 = [0u8; 32];
    hex_decode(&hash_token(secret), &mut sha256);
    Token {
        name: name.to_owned(),
        sha256,
        scopes: scopes.iter().copied().collect(),
    }
}

fn hex_decode(hex: &str, out: &mut [u8; 32]) {
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
}

async fn world_with(limits: Limits) -> World {
    world_journaled(limits, qflow_runtime::journal::JournalPolicy::Off).await
}

async fn world_journaled(limits: Limits, journal: qflow_runtime::journal::JournalPolicy) -> World {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
    let clock = Arc::new(ManualClock::new(T0));
    let broken = Arc::new(AtomicBool::new(true));
    let b = broken.clone();
    let handlers = AsyncHandlers::new().with_sync("pay", move |_: &TaskContext<'_>| {
        if b.load(Ordering::SeqCst) {
            TaskOutcome::Fail {
                code: "GATEWAY_DOWN".into(),
                message: "503 from the gateway".into(),
            }
        } else {
            TaskOutcome::Ok(Default::default())
        }
    });
    let config = RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        journal,
        ..RuntimeConfig::default()
    };
    let rt = Arc::new(Runtime::start(
        store.clone(),
        handlers,
        clock.clone(),
        config,
    ));
    let ops = Ops::with_runtime(rt.clone(), "server");
    let tokens = Tokens::new(vec![
        token("admin", ADMIN, &Scope::ALL),
        token("reader", READER, &[Scope::Read]),
    ]);
    let app = qflow_server::router(ops, tokens, Some(rt.stats()), &limits);
    World {
        _dir: dir,
        store,
        clock,
        rt,
        app,
        broken,
    }
}

async fn world() -> World {
    world_with(Limits::default()).await
}

struct Reply {
    status: StatusCode,
    content_type: String,
    body: Value,
    text: String,
}

impl World {
    /// The qflow id of the instance a Camunda 8 key (as the API sends it) names.
    async fn instance_of_key(&self, key: &Value) -> String {
        let key: i64 = key
            .as_str()
            .and_then(|k| k.parse().ok())
            .unwrap_or_else(|| panic!("{key} is not a Camunda key"));
        let name = self.store.camunda_key(key).await.unwrap();
        let name = name.unwrap_or_else(|| panic!("{key} names nothing"));
        assert_eq!(name.kind, qflow_store::KeyKind::Instance, "{name:?}");
        name.instance.to_string()
    }

    async fn send(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&b).expect("json"))),
            None => req.body(Body::empty()),
        }
        .expect("request");
        self.raw(req).await
    }

    async fn raw(&self, req: Request<Body>) -> Reply {
        let res = self.app.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let content_type = res
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().expect("ascii").to_owned())
            .unwrap_or_default();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            content_type,
            body,
            text,
        }
    }

    async fn deploy(&self, source: &str) -> i64 {
        let r = self
            .send(
                Method::POST,
                "/v1/deployments",
                Some(ADMIN),
                Some(json!({ "source": source })),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.body["id"].as_i64().expect("id")
    }

    async fn start(&self, deployment: i64) -> String {
        let r = self
            .send(
                Method::POST,
                "/v1/instances",
                Some(ADMIN),
                Some(json!({ "deployment": deployment, "variables": { "order": 7 } })),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.body["instance"].as_str().expect("instance").to_owned()
    }

    async fn wait(&self, done: impl Fn(&StatsView) -> bool) {
        self.clock.advance_ms(1);
        let wait = self.rt.wait_until(done);
        tokio::time::timeout(std::time::Duration::from_secs(120), wait)
            .await
            .expect("the runtime stopped making progress (hang guard, not a timing check)");
    }

    /// The instance row and the whole audit log: what a refusal must leave as it was.
    async fn state_of(&self, id: &str) -> (u64, Vec<u8>, usize) {
        let id = qflow_ops::parse_instance_id(id).expect("id");
        let rec = self
            .store
            .instance(id)
            .await
            .expect("reads")
            .expect("exists");
        let audit = self.store.audit(None, 0).await.expect("audit").len();
        (rec.fence, rec.snapshot, audit)
    }
}

fn assert_problem(r: &Reply, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.content_type, "application/problem+json", "{}", r.text);
    assert_eq!(r.body["code"], code, "{}", r.text);
    assert_eq!(r.body["status"], status.as_u16(), "{}", r.text);
    assert_eq!(
        r.body["type"],
        format!("urn:qflow:problem:{code}"),
        "{}",
        r.text
    );
    assert!(
        r.body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn a_failed_instance_is_found_inspected_resumed_and_completes_over_http() {
    let w = world().await;
    let dep = w.deploy(&model("billing", "pay", "")).await;
    // Same content, same version.
    assert_eq!(w.deploy(&model("billing", "pay", "")).await, dep);
    let id = w.start(dep).await;
    w.wait(|s| s.failed >= 1).await;

    let r = w
        .send(
            Method::GET,
            "/v1/instances?state=failed&failure_code=GATEWAY_DOWN",
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["items"][0]["id"], id.as_str());
    assert!(r.body.get("next").is_none(), "{}", r.text);

    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["instance"]["status"], "failed");
    assert_eq!(r.body["snapshot"]["variables"]["order"], 7, "{}", r.text);

    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}/history"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body[0]["code"], "GATEWAY_DOWN", "{}", r.text);

    w.broken.store(false, Ordering::SeqCst);
    let r = w
        .send(
            Method::POST,
            &format!("/v1/instances/{id}/resume"),
            Some(ADMIN),
            Some(json!({ "budget": "keep" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "running");
    w.wait(|s| s.completed >= 1).await;

    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body["instance"]["status"], "completed", "{}", r.text);
    let r = w
        .send(
            Method::GET,
            &format!("/v1/audit?instance={id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body[0]["actor"], "admin", "{}", r.text);
    assert_eq!(r.body[0]["action"], "resume", "{}", r.text);
}

/// The instance row's fence and snapshot (the audit log grows with the other instance).
async fn row(w: &World, id: &str) -> (u64, Vec<u8>) {
    let (fence, snapshot, _) = w.state_of(id).await;
    (fence, snapshot)
}

/// A plan that moves one instance and refuses another is answered 200 with the report:
/// the summary counts both outcomes, each result names its instance, and the refused one
/// is exactly as it was — in the dry run and in the migration itself.
#[tokio::test]
async fn a_migration_that_refuses_one_instance_counts_it_in_the_summary() {
    let w = world().await;
    let v1 = w.deploy(&model("billing", "pay", "")).await;
    let moving = w.start(v1).await;
    w.wait(|s| s.failed >= 1).await;
    let other = w.deploy(&model("shipping", "pay", "")).await;
    let elsewhere = w.start(other).await;
    w.wait(|s| s.failed >= 2).await;
    let v2 = w.deploy(&model("billing", "charge", "")).await;
    let plan = |dry_run: bool| {
        json!({
            "plan": {
                "source": v1,
                "target": v2,
                "mapping": { "pay": "charge" },
                "instances": [moving, elsewhere],
            },
            "dry_run": dry_run,
        })
    };
    let (moving_before, elsewhere_before) = (row(&w, &moving).await, row(&w, &elsewhere).await);

    let r = w
        .send(
            Method::POST,
            "/v1/migrations",
            Some(ADMIN),
            Some(plan(true)),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["summary"],
        json!({ "total": 2, "migrated": 0, "would_migrate": 1, "refused": 1 }),
        "{}",
        r.text
    );
    assert_eq!(r.body["results"][0]["instance"], moving.as_str());
    assert_eq!(r.body["results"][0]["outcome"], "would_migrate");
    assert_eq!(r.body["results"][1]["instance"], elsewhere.as_str());
    assert_eq!(r.body["results"][1]["outcome"], "refused");
    assert_eq!(
        row(&w, &moving).await,
        moving_before,
        "a dry run writes nothing"
    );

    let r = w
        .send(
            Method::POST,
            "/v1/migrations",
            Some(ADMIN),
            Some(plan(false)),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "refusals are outcomes: {}",
        r.text
    );
    assert_eq!(
        r.body["summary"],
        json!({ "total": 2, "migrated": 1, "would_migrate": 0, "refused": 1 }),
        "{}",
        r.text
    );
    let results = r.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{}", r.text);
    assert_eq!(results[0]["instance"], moving.as_str());
    assert_eq!(results[0]["outcome"], "migrated");
    assert!(results[0]["fence_after"].is_u64(), "{}", r.text);
    assert!(results[0].get("reason").is_none(), "{}", r.text);
    assert_eq!(results[1]["instance"], elsewhere.as_str());
    assert_eq!(results[1]["outcome"], "refused");
    assert_eq!(
        results[1]["reason"],
        format!("instance is on deployment {other}, not {v1}"),
        "{}",
        r.text
    );
    assert!(results[1].get("fence_after").is_none(), "{}", r.text);
    assert_eq!(row(&w, &elsewhere).await, elsewhere_before);
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{moving}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body["instance"]["deployment"], v2, "{}", r.text);
}

#[tokio::test]
async fn every_refusal_is_a_problem_document_and_changes_nothing() {
    let w = world_with(Limits {
        body_bytes: 4096,
        ..Limits::default()
    })
    .await;
    let dep = w.deploy(&model("billing", "pay", PARKING)).await;
    let id = w.start(dep).await;
    // Parked in a one-hour backoff: running, with a retry pending.
    w.wait(|s| s.parks >= 1).await;
    let before = w.state_of(&id).await;
    let resume = format!("/v1/instances/{id}/resume");
    let keep = json!({ "budget": "keep" });

    let r = w
        .send(Method::POST, &resume, None, Some(keep.clone()))
        .await;
    assert_problem(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    let r = w
        .send(Method::POST, &resume, Some("guess"), Some(keep.clone()))
        .await;
    assert_problem(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    let r = w
        .send(Method::POST, &resume, Some(READER), Some(keep.clone()))
        .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
    assert!(
        r.body["detail"].as_str().unwrap().contains("`operate`"),
        "{}",
        r.text
    );
    // Resume of a RUNNING instance: the core refuses it.
    let r = w
        .send(Method::POST, &resume, Some(ADMIN), Some(keep.clone()))
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    // A bad field is pointed at.
    let r = w
        .send(
            Method::POST,
            &resume,
            Some(ADMIN),
            Some(json!({ "budget": "half" })),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/budget", "{}", r.text);
    // Malformed JSON.
    let req = Request::post(&resume)
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"budget\": "))
        .unwrap();
    let r = w.raw(req).await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "malformed_json");
    // Not JSON at all.
    let req = Request::post(&resume)
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .body(Body::from("budget=keep"))
        .unwrap();
    assert_problem(
        &w.raw(req).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    // Over the body limit.
    let big = json!({ "budget": "keep", "pad": "x".repeat(8192) });
    let r = w.send(Method::POST, &resume, Some(ADMIN), Some(big)).await;
    assert_problem(&r, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    // Cancel with the wrong scope.
    let cancel = format!("/v1/instances/{id}/cancel");
    assert_problem(
        &w.send(Method::POST, &cancel, Some(READER), None).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    // Retire while referenced.
    let retire = format!("/v1/deployments/{dep}/retire");
    let r = w.send(Method::POST, &retire, Some(ADMIN), None).await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    // A migration mapping to a node the target lacks.
    let v2 = w.deploy(&model("billing", "charge", PARKING)).await;
    let plan = json!({ "plan": { "source": dep, "target": v2, "mapping": { "pay": "nowhere" } } });
    let r = w
        .send(Method::POST, "/v1/migrations", Some(ADMIN), Some(plan))
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    assert_eq!(
        r.body["errors"][0]["pointer"], "/plan/mapping",
        "{}",
        r.text
    );
    // A plan from a deployment onto itself.
    let plan = json!({ "plan": { "source": dep, "target": dep } });
    let r = w
        .send(Method::POST, "/v1/migrations", Some(ADMIN), Some(plan))
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/plan/target", "{}", r.text);

    assert_eq!(
        w.state_of(&id).await,
        before,
        "a refusal changed the instance or the audit log"
    );

    // Unknown instance, malformed id, unknown path, a bad query parameter.
    let missing = "018f0000-0000-7000-8000-000000000000";
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{missing}"),
            Some(READER),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not_found");
    let r = w
        .send(Method::GET, "/v1/instances/not-a-uuid", Some(READER), None)
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["parameter"], "instance", "{}", r.text);
    assert_problem(
        &w.send(Method::GET, "/v1/nothing", Some(READER), None).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let r = w
        .send(
            Method::GET,
            "/v1/instances?state=sleeping",
            Some(READER),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["parameter"], "state", "{}", r.text);
    let r = w
        .send(Method::GET, "/v1/instances?limit=lots", Some(READER), None)
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    let r = w
        .send(Method::GET, "/v1/instances?cursor=zzz", Some(READER), None)
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    let r = w
        .send(Method::DELETE, "/v1/deployments", Some(READER), None)
        .await;
    assert_problem(&r, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");

    // Retry-now with no backoff pending (a FAILED instance) is refused and changes
    // nothing; on the parked one it starts the next attempt at once.
    let plain = w.deploy(&model("billing", "pay", "")).await;
    let failed = w.start(plain).await;
    w.wait(|s| s.failed >= 1).await;
    let failed_before = w.state_of(&failed).await;
    let r = w
        .send(
            Method::POST,
            &format!("/v1/instances/{failed}/retry-now"),
            Some(ADMIN),
            Some(json!({})),
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    assert_eq!(w.state_of(&failed).await, failed_before);
    let r = w
        .send(
            Method::POST,
            &format!("/v1/instances/{id}/retry-now"),
            Some(ADMIN),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["fence_after"], before.0 + 1, "{}", r.text);
}

#[tokio::test]
async fn a_standalone_server_refuses_a_task_it_has_no_handler_for() {
    let w = world().await;
    let r = w
        .send(
            Method::POST,
            "/v1/deployments",
            Some(ADMIN),
            Some(json!({ "source": model("billing", "ship", "").replace("q:task=\"pay\"", "q:task=\"ship\"") })),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "model_refused");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("`ship` (q:task=\"ship\")") && detail.contains("q:topic"),
        "{detail}"
    );
    let r = w
        .send(
            Method::POST,
            "/v1/deployments",
            Some(ADMIN),
            Some(json!({ "source": "<definitions" })),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "model_refused");
    let r = w
        .send(Method::GET, "/v1/deployments", Some(READER), None)
        .await;
    assert_eq!(r.body, json!([]), "a refused model was stored: {}", r.text);
}

#[tokio::test]
async fn pages_walk_every_instance_once_in_order() {
    let w = world().await;
    w.broken.store(false, Ordering::SeqCst);
    let dep = w.deploy(&model("billing", "pay", "")).await;
    let mut started = Vec::new();
    for _ in 0..7 {
        started.push(w.start(dep).await);
    }
    let mut seen = Vec::new();
    let mut uri = "/v1/instances?limit=3".to_owned();
    loop {
        let r = w.send(Method::GET, &uri, Some(READER), None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        for item in r.body["items"].as_array().unwrap() {
            seen.push(item["id"].as_str().unwrap().to_owned());
        }
        match r.body["next"].as_str() {
            Some(next) => uri = format!("/v1/instances?limit=3&cursor={next}"),
            None => break,
        }
        assert!(seen.len() <= started.len(), "pages never end");
    }
    let mut sorted = started.clone();
    sorted.sort();
    assert_eq!(seen, sorted);
}

#[tokio::test]
async fn service_endpoints_answer_and_metrics_need_a_token() {
    let w = world().await;
    let r = w.send(Method::GET, "/healthz", None, None).await;
    assert_eq!((r.status, r.text.as_str()), (StatusCode::OK, "ok\n"));
    let r = w.send(Method::GET, "/readyz", None, None).await;
    assert_eq!((r.status, r.text.as_str()), (StatusCode::OK, "ready\n"));
    assert_problem(
        &w.send(Method::GET, "/metrics", None, None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    let r = w.send(Method::GET, "/metrics", Some(READER), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains("qflow_steps_total "), "{}", r.text);
    // The 401 just answered is counted.
    assert!(
        r.text
            .contains("qflow_http_requests_total{class=\"4xx\"} 1"),
        "{}",
        r.text
    );
    let r = w.send(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(r.body["openapi"], "3.1.0", "{}", r.text);
}

/// The committed `docs/openapi.json` is the document the server serves. After an API
/// change, `QFLOW_BLESS=1 cargo test -p qflow-server` rewrites it.
#[test]
fn the_committed_openapi_document_is_the_served_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let generated = qflow_server::openapi();
    if std::env::var_os("QFLOW_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("writes docs/openapi.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json differs from the API the server serves; rerun with QFLOW_BLESS=1 \
         and commit the file"
    );
}

const WAITS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <message id="m" name="contract-signed"/>
  <process id="contract" isExecutable="true">
    <startEvent id="start"/>
    <userTask id="approve"/>
    <receiveTask id="signed" messageRef="m"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="approve"/>
    <sequenceFlow id="f1" sourceRef="approve" targetRef="signed"/>
    <sequenceFlow id="f2" sourceRef="signed" targetRef="end"/>
  </process>
</definitions>"#;

#[tokio::test]
async fn a_user_task_and_a_message_move_an_instance_to_its_end() {
    let w = world().await;
    let dep = w.deploy(WAITS).await;
    let r = w
        .send(
            Method::POST,
            "/v1/processes/contract/instances",
            Some(ADMIN),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["deployment"], dep);
    let id = r.body["instance"].as_str().unwrap().to_owned();
    let before = w.state_of(&id).await;

    // Out of order: nothing waits for the message yet (refused), and `signed` is no user
    // task of the model (not found). Neither changes anything.
    let message = format!("/v1/instances/{id}/messages/contract-signed");
    let r = w
        .send(Method::POST, &message, Some(ADMIN), Some(json!({})))
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    let wrong = format!("/v1/instances/{id}/user-tasks/signed/complete");
    let r = w
        .send(Method::POST, &wrong, Some(ADMIN), Some(json!({})))
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not_found");
    let deep = (0..40).fold(json!(1), |v, _| json!([v]));
    let approve = format!("/v1/instances/{id}/user-tasks/approve/complete");
    let r = w
        .send(
            Method::POST,
            &approve,
            Some(ADMIN),
            Some(json!({ "variables": { "x": deep } })),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/variables", "{}", r.text);
    assert_eq!(w.state_of(&id).await, before);

    let r = w
        .send(
            Method::POST,
            &approve,
            Some(ADMIN),
            Some(json!({ "variables": { "approved": true } })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "running");
    let r = w
        .send(
            Method::POST,
            &message,
            Some(ADMIN),
            Some(json!({ "variables": { "signer": "ada" } })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "completed", "{}", r.text);

    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(
        r.body["snapshot"]["variables"]["approved"], true,
        "{}",
        r.text
    );
    assert_eq!(
        r.body["snapshot"]["variables"]["signer"], "ada",
        "{}",
        r.text
    );
    let r = w
        .send(
            Method::GET,
            &format!("/v1/audit?instance={id}"),
            Some(READER),
            None,
        )
        .await;
    let actions: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["complete_user_task", "message"], "{}", r.text);
}

fn respond_model(policy: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="order" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="pay" q:task="pay"><extensionElements>{policy}</extensionElements></serviceTask>
    <userTask id="confirm" q:respond="true"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
    <sequenceFlow id="f1" sourceRef="pay" targetRef="confirm"/>
    <sequenceFlow id="f2" sourceRef="confirm" targetRef="end"/>
  </process>
</definitions>"#
    )
}

#[tokio::test]
async fn a_start_that_waits_is_answered_at_the_respond_point_or_the_end() {
    let w = world().await;
    w.broken.store(false, Ordering::SeqCst);
    let dep = w.deploy(&respond_model("")).await;
    let body = json!({ "deployment": dep, "variables": { "order": 7 }, "wait_ms": 10_000 });
    let r = w
        .send(Method::POST, "/v1/instances", Some(ADMIN), Some(body))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["reached"], "respond", "{}", r.text);
    assert_eq!(r.body["node"], "confirm", "{}", r.text);
    assert_eq!(r.body["status"], "running", "{}", r.text);
    assert_eq!(r.body["variables"]["order"], 7, "{}", r.text);
    let id = r.body["instance"].as_str().unwrap().to_owned();
    // The instance went on as it would have: it waits at `confirm`.
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(
        r.body["snapshot"]["frontier"],
        json!(["confirm"]),
        "{}",
        r.text
    );

    // Without a respond point on the way, the answer comes at the end.
    let plain = w.deploy(&model("billing", "pay", "")).await;
    let body = json!({ "wait_ms": 10_000 });
    let r = w
        .send(
            Method::POST,
            "/v1/processes/billing/instances",
            Some(ADMIN),
            Some(body),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        (r.body["reached"].as_str(), r.body["status"].as_str()),
        (Some("ended"), Some("completed")),
        "{}",
        r.text
    );
    assert_eq!(r.body["deployment"], plain);

    // A wait at or over the request time limit is refused before anything starts.
    let before = w
        .send(Method::GET, "/v1/instances", Some(READER), None)
        .await
        .body["items"]
        .as_array()
        .unwrap()
        .len();
    let body = json!({ "deployment": dep, "wait_ms": 30_000 });
    let r = w
        .send(Method::POST, "/v1/instances", Some(ADMIN), Some(body))
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/wait_ms", "{}", r.text);
    let after = w
        .send(Method::GET, "/v1/instances", Some(READER), None)
        .await
        .body["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "a refused start started an instance");
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_time_limit_and_the_instance_goes_on() {
    let w = Arc::new(world().await);
    let dep = w.deploy(&respond_model(PARKING)).await;
    let call = {
        let w = w.clone();
        tokio::spawn(async move {
            let body = json!({ "deployment": dep, "wait_ms": 2_000 });
            w.send(Method::POST, "/v1/instances", Some(ADMIN), Some(body))
                .await
        })
    };
    // The manual clock moves until the wait has run out (bounded, not timed).
    for _ in 0..1_000 {
        if call.is_finished() {
            break;
        }
        w.clock.advance_ms(100);
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let r = call.await.expect("the request task");
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["reached"], "time_limit", "{}", r.text);
    assert_eq!(r.body["status"], "running", "{}", r.text);
    // Still parked in its backoff, a durable timer row: it goes on without the caller.
    let id = r.body["instance"].as_str().unwrap();
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}"),
            Some(READER),
            None,
        )
        .await;
    let timers = r.body["timers"].as_array().unwrap();
    assert!(
        timers
            .iter()
            .any(|t| t["kind"] == "retry" && t["node"] == "pay"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn a_business_key_is_unique_per_deployment_and_finds_its_instance() {
    let w = world().await;
    w.broken.store(false, Ordering::SeqCst);
    let dep = w.deploy(&model("billing", "pay", "")).await;
    let body = json!({ "deployment": dep, "business_key": "order-4711" });
    let r = w
        .send(
            Method::POST,
            "/v1/instances",
            Some(ADMIN),
            Some(body.clone()),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let first = r.body["instance"].as_str().unwrap().to_owned();

    let r = w
        .send(Method::POST, "/v1/instances", Some(ADMIN), Some(body))
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    assert!(
        r.body["detail"].as_str().unwrap().contains(&first),
        "{}",
        r.text
    );
    let r = w
        .send(
            Method::POST,
            "/v1/instances",
            Some(ADMIN),
            Some(json!({ "deployment": dep, "business_key": "bad\u{7}key" })),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(
        r.body["errors"][0]["pointer"], "/business_key",
        "{}",
        r.text
    );

    // The same key on another deployment is another instance.
    let v2 = w.deploy(&model("billing", "charge", "")).await;
    let r = w
        .send(
            Method::POST,
            "/v1/instances",
            Some(ADMIN),
            Some(json!({ "deployment": v2, "business_key": "order-4711" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);

    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances?deployment={dep}&business_key=order-4711"),
            Some(READER),
            None,
        )
        .await;
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", r.text);
    assert_eq!(items[0]["id"], first.as_str());
    assert_eq!(items[0]["business_key"], "order-4711");
    let r = w
        .send(Method::GET, "/v1/instances", Some(READER), None)
        .await;
    assert_eq!(
        r.body["items"].as_array().unwrap().len(),
        2,
        "a refused start left an instance: {}",
        r.text
    );
}

#[tokio::test]
async fn an_incident_is_resolved_by_hand_once() {
    let w = world().await;
    let dep = w.deploy(&model("billing", "pay", "")).await;
    let id = w.start(dep).await;
    w.wait(|s| s.failed >= 1).await;
    let list = format!("/v1/incidents?instance={id}");
    let r = w.send(Method::GET, &list, Some(READER), None).await;
    assert_eq!(r.body[0]["node"], "pay", "{}", r.text);
    assert!(r.body[0].get("resolved_at_ms").is_none(), "{}", r.text);

    let before = w.state_of(&id).await;
    let r = w
        .send(
            Method::POST,
            &format!("/v1/instances/{id}/incidents/ship/resolve"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    assert_eq!(w.state_of(&id).await, before);

    let resolve = format!("/v1/instances/{id}/incidents/pay/resolve");
    let r = w.send(Method::POST, &resolve, Some(ADMIN), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["status"], "failed",
        "the instance stays FAILED: {}",
        r.text
    );
    let r = w.send(Method::GET, &list, Some(READER), None).await;
    assert!(r.body[0]["resolved_at_ms"].is_i64(), "{}", r.text);
    let r = w.send(Method::POST, &resolve, Some(ADMIN), None).await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    let r = w
        .send(
            Method::GET,
            &format!("/v1/audit?instance={id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body[0]["action"], "resolve_incident", "{}", r.text);
}

const KEYED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1"
    id="d" targetNamespace="t">
  <message id="m" name="payment-received" q:correlationKey="order_id"/>
  <process id="shop" isExecutable="true">
    <startEvent id="start"/>
    <receiveTask id="paid" messageRef="m"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="paid"/>
    <sequenceFlow id="f1" sourceRef="paid" targetRef="end"/>
  </process>
</definitions>"#;

/// Deploys `KEYED` and starts one instance per order id, each waiting at `paid` under its
/// key once started; returns their ids in order.
async fn start_orders(w: &World, orders: &[&str]) -> Vec<String> {
    let dep = w.deploy(KEYED).await;
    let mut ids = Vec::new();
    for order in orders {
        let r = w
            .send(
                Method::POST,
                "/v1/instances",
                Some(ADMIN),
                Some(json!({ "deployment": dep, "variables": { "order_id": order } })),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        ids.push(r.body["instance"].as_str().unwrap().to_owned());
    }
    let n = orders.len() as u64;
    w.wait(move |s| s.started >= n).await;
    ids
}

#[tokio::test]
async fn a_message_is_correlated_by_name_and_key_to_the_one_waiting_instance() {
    let w = world().await;
    let ids = start_orders(&w, &["A-1", "A-2", "A-2"]).await;
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{}", ids[0]),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(
        r.body["subscriptions"],
        json!([{ "node": "paid", "message": "payment-received", "correlation_key": "A-1",
                 "opened_at_ms": r.body["subscriptions"][0]["opened_at_ms"] }]),
        "{}",
        r.text
    );
    let waiting: Vec<String> = ids.clone();
    let states = states_of(&w, &waiting).await;

    let publish = |key: &str, all: bool| {
        json!({ "name": "payment-received", "correlation_key": key,
                "variables": { "paid_cents": 4200 }, "all": all })
    };
    // No such key, a key two instances wait under, a reader, a bad body: refused, nothing
    // changed.
    let r = w
        .send(
            Method::POST,
            "/v1/messages",
            Some(ADMIN),
            Some(publish("B-9", false)),
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not_found");
    let r = w
        .send(
            Method::POST,
            "/v1/messages",
            Some(ADMIN),
            Some(publish("A-2", false)),
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "refused");
    assert!(
        r.body["detail"].as_str().unwrap().contains("more than one"),
        "{}",
        r.text
    );
    let r = w
        .send(
            Method::POST,
            "/v1/messages",
            Some(READER),
            Some(publish("A-1", false)),
        )
        .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
    let r = w
        .send(
            Method::POST,
            "/v1/messages",
            Some(ADMIN),
            Some(json!({ "name": "payment-received", "correlation_key": "" })),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(
        r.body["errors"][0]["pointer"], "/correlation_key",
        "{}",
        r.text
    );
    assert_eq!(states_of(&w, &waiting).await, states);

    // The key reaches its instance only.
    let r = w
        .send(
            Method::POST,
            "/v1/messages",
            Some(ADMIN),
            Some(publish("A-1", false)),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["deliveries"].as_array().unwrap().len(),
        1,
        "{}",
        r.text
    );
    assert_eq!(r.body["deliveries"][0]["instance"], ids[0].as_str());
    assert_eq!(r.body["deliveries"][0]["outcome"], "delivered");
    assert_eq!(r.body["deliveries"][0]["applied"]["status"], "completed");
    // Published again: the wait is over, nothing is buffered.
    let r = w
        .send(
            Method::POST,
            "/v1/messages",
            Some(ADMIN),
            Some(publish("A-1", false)),
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not_found");
    // `all` reaches both instances waiting under A-2.
    let r = w
        .send(
            Method::POST,
            "/v1/messages",
            Some(ADMIN),
            Some(publish("A-2", true)),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let mut reached: Vec<&str> = r.body["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["instance"].as_str().unwrap())
        .collect();
    reached.sort();
    let mut expected = vec![ids[1].as_str(), ids[2].as_str()];
    expected.sort();
    assert_eq!(reached, expected, "{}", r.text);
    let r = w
        .send(Method::GET, "/v1/instance-counts", Some(READER), None)
        .await;
    assert_eq!(
        r.body,
        json!({ "running": 0, "completed": 3, "failed": 0, "cancelled": 0 }),
        "{}",
        r.text
    );
    let r = w
        .send(
            Method::GET,
            &format!("/v1/audit?instance={}", ids[1]),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body[0]["action"], "correlate", "{}", r.text);
    assert!(
        r.body[0]["detail"].as_str().unwrap().contains("key=A-2"),
        "{}",
        r.text
    );
}

/// Fence and snapshot of each instance: what a refused correlation must leave as it was.
async fn states_of(w: &World, ids: &[String]) -> Vec<(u64, Vec<u8>, usize)> {
    let mut out = Vec::new();
    for id in ids {
        out.push(w.state_of(id).await);
    }
    out
}

#[tokio::test]
async fn listings_filter_by_node_and_end_and_metrics_count_instances_by_state() {
    let w = world().await;
    let parking = w.deploy(&model("order", "pay", PARKING)).await;
    let parked = w.start(parking).await;
    w.wait(|s| s.parks >= 1).await;
    let failing = w.deploy(&model("refund", "pay", "")).await;
    let failed = w.start(failing).await;
    w.wait(|s| s.failed >= 1).await;
    let waits = w.deploy(WAITS).await;
    let waiting = w.start(waits).await;
    w.wait(|s| s.started >= 3).await;
    // The retry park (a timer of `pay`) and the failure (an open incident on `pay`).
    assert_eq!(
        listed(&w, "node=pay").await,
        vec![parked.clone(), failed.clone()]
    );
    assert_eq!(
        listed(&w, "node=pay&state=failed").await,
        vec![failed.clone()]
    );
    assert!(
        listed(&w, "node=approve").await.is_empty(),
        "a user task is not a park"
    );
    let r = w
        .send(
            Method::POST,
            &format!("/v1/instances/{waiting}/cancel"),
            Some(ADMIN),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(listed(&w, "ended_from_ms=0").await, vec![waiting.clone()]);
    assert!(listed(&w, &format!("ended_to_ms={T0}")).await.is_empty());
    let r = w.send(Method::GET, "/metrics", Some(READER), None).await;
    for line in [
        "qflow_instances{state=\"failed\"} 1",
        "qflow_instances{state=\"cancelled\"} 1",
        "qflow_instances{state=\"running\"} 1",
        "# TYPE qflow_step_duration_seconds histogram",
        "# TYPE qflow_timer_lag_seconds histogram",
    ] {
        assert!(r.text.contains(line), "{line} missing:\n{}", r.text);
    }
    let steps = r
        .text
        .lines()
        .find_map(|l| l.strip_prefix("qflow_step_duration_seconds_count "))
        .and_then(|n| n.parse::<u64>().ok())
        .expect("a step count");
    assert!(steps >= 3, "every committed step is timed: {steps}");
}

/// The ids `GET /v1/instances?{query}` lists.
async fn listed(w: &World, query: &str) -> Vec<String> {
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances?{query}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_replay_over_http_reports_journaled_instances_and_refuses_bad_requests() {
    let w = world_journaled(
        Limits::default(),
        qflow_runtime::journal::JournalPolicy::All,
    )
    .await;
    w.broken.store(false, Ordering::SeqCst);
    let dep = w.deploy(&model("billing", "pay", "")).await;
    let id = w.start(dep).await;
    w.wait(|s| s.completed >= 1).await;
    let (fence, _, _) = w.state_of(&id).await;

    let all = w
        .send(Method::POST, "/v1/replays", Some(ADMIN), Some(json!({})))
        .await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(all.body["instances"], 1, "{}", all.text);
    assert_eq!(all.body["identical"], 1, "{}", all.text);
    assert_eq!(all.body["steps"], fence, "{}", all.text);
    let one = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "instance": id, "limit": 5 })),
        )
        .await;
    assert_eq!(one.body["identical"], 1, "{}", one.text);
    // An integral number in float spelling is an integer (JSON Schema's rule; schemathesis
    // sends `1815.0`); a fraction is not.
    let float = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "limit": 1815.0, "deployment": 1.0 })),
        )
        .await;
    assert_eq!(float.status, StatusCode::OK, "{}", float.text);
    assert_eq!(float.body["identical"], 1, "{}", float.text);
    let fraction = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "limit": 2.5 })),
        )
        .await;
    assert_problem(&fraction, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(
        fraction.body["errors"][0]["pointer"], "/limit",
        "{}",
        fraction.text
    );

    // A reader may not replay; bad bodies are problems with a pointer; nothing changes.
    let before = w.state_of(&id).await;
    let r = w
        .send(Method::POST, "/v1/replays", Some(READER), Some(json!({})))
        .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
    let r = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "limit": 0 })),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/limit", "{}", r.text);
    let r = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "stauts": "failed" })),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    let r = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "status": "stuck" })),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/status", "{}", r.text);
    // A status the schema names is a filter (the document lists the four as an enum).
    let r = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "status": "running" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = w
        .send(
            Method::POST,
            "/v1/replays",
            Some(ADMIN),
            Some(json!({ "instance": "0190c7a2-5b1e-7c3d-9f00-3a4b5c6d7e8f" })),
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not_found");
    assert_eq!(w.state_of(&id).await, before);
}

/// Camunda 8's message correlation (`POST /v2/messages/correlation`): the message reaches
/// every instance waiting under its key and answers with the first one's key; nothing
/// waiting is a 404 (nothing buffered); an empty key or another tenant is refused at its
/// field, changing nothing.
#[tokio::test]
async fn a_camunda_8_correlation_reaches_every_wait_under_its_key() {
    let w = world().await;
    let ids = start_orders(&w, &["A-1", "A-2", "A-2"]).await;
    let states = states_of(&w, &ids).await;
    let correlate = |body: Value| {
        w.send(
            Method::POST,
            "/v2/messages/correlation",
            Some(ADMIN),
            Some(body),
        )
    };

    let r = correlate(json!({"name": "payment-received", "correlationKey": ""})).await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(
        r.body["errors"][0]["pointer"], "/correlationKey",
        "{}",
        r.text
    );
    let r = correlate(json!({"name": "payment-received"})).await;
    assert_eq!(
        r.body["errors"][0]["pointer"], "/correlationKey",
        "{}",
        r.text
    );
    let r = correlate(json!({"name": "payment-received", "correlationKey": "A-1",
                             "tenantId": "acme"}))
    .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/tenantId", "{}", r.text);
    let r = correlate(json!({"name": "payment-received", "correlationKey": "A-1",
                             "timeToLive": 0}))
    .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    let r = correlate(json!({"name": "payment-received", "correlationKey": "B-9"})).await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not_found");
    let r = w
        .send(
            Method::POST,
            "/v2/messages/correlation",
            Some(READER),
            Some(json!({"name": "payment-received", "correlationKey": "A-1"})),
        )
        .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(states_of(&w, &ids).await, states, "nothing changed");

    // One waiting instance: its key comes back.
    let r = correlate(json!({"name": "payment-received", "correlationKey": "A-1",
                             "variables": {"paid_cents": 4200}, "tenantId": "<default>"}))
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        w.instance_of_key(&r.body["processInstanceKey"]).await,
        ids[0]
    );
    assert_eq!(r.body["tenantId"], "<default>");
    assert!(r.body["messageKey"]
        .as_str()
        .and_then(|k| k.parse::<i64>().ok())
        .is_some_and(|k| k >> 51 == 1));
    // Two waiting under A-2: both reached, the answer names one of them.
    let r = correlate(json!({"name": "payment-received", "correlationKey": "A-2"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let first = w.instance_of_key(&r.body["processInstanceKey"]).await;
    assert!(first == ids[1] || first == ids[2], "{}", r.text);
    let r = w
        .send(Method::GET, "/v1/instance-counts", Some(READER), None)
        .await;
    assert_eq!(
        r.body,
        json!({ "running": 0, "completed": 3, "failed": 0, "cancelled": 0 }),
        "{}",
        r.text
    );
    // The waits are over and nothing was buffered.
    let r = correlate(json!({"name": "payment-received", "correlationKey": "A-1"})).await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not_found");
}

const SIGNALLED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
    id="d" targetNamespace="t">
  <signal id="s" name="go"/>
  <process id="waiter" isExecutable="true">
    <startEvent id="start"/>
    <intermediateCatchEvent id="wait">
      <signalEventDefinition signalRef="s"/>
    </intermediateCatchEvent>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="wait"/>
    <sequenceFlow id="f1" sourceRef="wait" targetRef="end"/>
  </process>
</definitions>"#;

/// Camunda 8's signal broadcast (`POST /v2/signals/broadcast`): every waiting instance
/// catches it with its variables, the answer carries the broadcast's id as its key, a
/// broadcast reaching nothing is not an error, and another tenant, an empty name or a
/// reader's token is refused, changing nothing.
#[tokio::test]
async fn a_camunda_8_signal_broadcast_reaches_every_waiting_instance() {
    let w = world().await;
    let dep = w.deploy(SIGNALLED).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = w
            .send(
                Method::POST,
                "/v1/instances",
                Some(ADMIN),
                Some(json!({ "deployment": dep })),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        ids.push(r.body["instance"].as_str().unwrap().to_owned());
    }
    w.wait(|s| s.started >= 2).await;
    let states = states_of(&w, &ids).await;
    let broadcast = |token: &'static str, body: Value| {
        w.send(
            Method::POST,
            "/v2/signals/broadcast",
            Some(token),
            Some(body),
        )
    };
    let r = broadcast(ADMIN, json!({"signalName": "go", "tenantId": "acme"})).await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/tenantId", "{}", r.text);
    let r = broadcast(ADMIN, json!({"signalName": ""})).await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/signalName", "{}", r.text);
    let r = broadcast(READER, json!({"signalName": "go"})).await;
    assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(states_of(&w, &ids).await, states, "nothing changed");

    let r = broadcast(
        ADMIN,
        json!({"signalName": "go", "variables": {"why": "now"},
                                    "tenantId": "<default>"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["tenantId"], "<default>");
    assert!(
        r.body["signalKey"].as_str().is_some_and(|k| !k.is_empty()),
        "{}",
        r.text
    );
    for id in &ids {
        let r = w
            .send(
                Method::GET,
                &format!("/v1/instances/{id}"),
                Some(READER),
                None,
            )
            .await;
        assert_eq!(r.body["instance"]["status"], "completed", "{}", r.text);
        assert_eq!(r.body["snapshot"]["variables"]["why"], "now", "{}", r.text);
    }
    // Nothing waits any more: still a broadcast, reaching nothing.
    let r = broadcast(ADMIN, json!({"signalName": "go"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// Camunda 8's process-instance creation (`POST /v2/process-instances`): by process id
/// (newest live, or the n-th version), by definition key, and with `awaitCompletion`
/// answered at the end or at a `q:respond` task with the fetched variables; what asks
/// for more than qflow does is refused at its field and starts nothing.
#[tokio::test]
async fn a_camunda_8_creation_starts_by_id_version_or_key_and_can_await_completion() {
    let w = world().await;
    w.broken.store(false, Ordering::SeqCst);
    let v1 = w.deploy(&model("billing", "pay", "")).await;
    let v2 = w
        .deploy(&respond_model("").replace("\"order\"", "\"billing\""))
        .await;
    let create = |body: Value| {
        w.send(
            Method::POST,
            "/v2/process-instances",
            Some(ADMIN),
            Some(body),
        )
    };
    let counts = || w.send(Method::GET, "/v1/instance-counts", Some(READER), None);
    let before = counts().await.body;

    for (body, pointer) in [
        (json!({"variables": {}}), "/processDefinitionId"),
        (
            json!({"processDefinitionId": "billing", "processDefinitionKey": v1.to_string()}),
            "/processDefinitionId",
        ),
        (
            json!({"processDefinitionKey": "x1"}),
            "/processDefinitionKey",
        ),
        (
            json!({"processDefinitionId": "billing", "tenantId": "acme"}),
            "/tenantId",
        ),
        (
            json!({"processDefinitionId": "billing", "tags": ["a"]}),
            "/tags",
        ),
        (
            json!({"processDefinitionId": "billing", "startInstructions": [{"elementId": "pay"}]}),
            "/startInstructions",
        ),
        (
            json!({"processDefinitionId": "billing", "operationReference": 7}),
            "/operationReference",
        ),
    ] {
        let r = create(body.clone()).await;
        assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
        assert_eq!(
            r.body["errors"][0]["pointer"], pointer,
            "{body}: {}",
            r.text
        );
    }
    let r = create(json!({"processDefinitionId": "billing", "processDefinitionVersion": 3})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = create(json!({"processDefinitionId": "nothing"})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(counts().await.body, before, "nothing started");

    // By id: the newest live deployment, version 2.
    let r = create(json!({"processDefinitionId": "billing", "variables": {"order": 1}})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["processDefinitionId"], "billing");
    assert_eq!(r.body["processDefinitionVersion"], 2);
    assert_eq!(r.body["processDefinitionKey"], v2.to_string());
    assert_eq!(r.body["variables"], json!({}));
    assert_eq!(r.body["tenantId"], "<default>");
    assert_eq!(r.body["tags"], json!([]));
    let first = w.instance_of_key(&r.body["processInstanceKey"]).await;
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{first}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body["instance"]["deployment"], v2, "{}", r.text);
    // By id and version 1, and by key: the first deployment.
    for body in [
        json!({"processDefinitionId": "billing", "processDefinitionVersion": 1}),
        json!({"processDefinitionKey": v1.to_string()}),
    ] {
        let r = create(body.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "{body}: {}", r.text);
        assert_eq!(r.body["processDefinitionVersion"], 1, "{}", r.text);
        assert_eq!(r.body["processDefinitionKey"], v1.to_string(), "{}", r.text);
    }
    // Awaiting completion: version 1 runs to its end, version 2 stops at its respond
    // point; only the fetched variables come back.
    let r = create(
        json!({"processDefinitionKey": v1.to_string(), "awaitCompletion": true,
                          "variables": {"order": 7, "note": "x"}, "fetchVariables": ["order"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["variables"], json!({"order": 7}), "{}", r.text);
    let r = create(
        json!({"processDefinitionId": "billing", "awaitCompletion": true,
                          "requestTimeout": 5000, "variables": {"order": 8}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["variables"]["order"], 8, "{}", r.text);
    let id = w.instance_of_key(&r.body["processInstanceKey"]).await;
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(
        r.body["snapshot"]["frontier"],
        json!(["confirm"]),
        "{}",
        r.text
    );
    let r = create(
        json!({"processDefinitionId": "billing", "awaitCompletion": true,
                          "requestTimeout": 90000}),
    )
    .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
}

/// A `multipart/form-data` body of `parts`: (field name, file name, content).
fn multipart(parts: &[(&str, Option<&str>, &str)]) -> (String, Vec<u8>) {
    let boundary = "qflow-test-boundary-7d1f";
    let mut body = String::new();
    for (field, file, content) in parts {
        body.push_str(&format!("--{boundary}\r\n"));
        match file {
            Some(file) => body.push_str(&format!(
                "Content-Disposition: form-data; name=\"{field}\"; filename=\"{file}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )),
            None => body.push_str(&format!(
                "Content-Disposition: form-data; name=\"{field}\"\r\n\r\n"
            )),
        }
        body.push_str(content);
        body.push_str("\r\n");
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    (
        format!("multipart/form-data; boundary={boundary}"),
        body.into_bytes(),
    )
}

/// Camunda 8's deployment (`POST /v2/deployments`, multipart): each BPMN resource becomes
/// a deployment whose key starts instances, the same content answers the same key, a new
/// version of a process counts up; other resources, tenants, fields and tokens are
/// refused at their field, and a model the loader refuses is a 422 naming its resource.
#[tokio::test]
async fn a_camunda_8_deployment_deploys_each_bpmn_resource() {
    let w = world().await;
    let deploy = |token: &'static str, parts: Vec<(&'static str, Option<&'static str>, String)>| {
        let parts: Vec<(&str, Option<&str>, &str)> =
            parts.iter().map(|(f, n, c)| (*f, *n, c.as_str())).collect();
        let (content_type, body) = multipart(&parts);
        let req = Request::builder()
            .method(Method::POST)
            .uri("/v2/deployments")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .expect("request");
        w.raw(req)
    };
    let r = deploy(
        ADMIN,
        vec![
            ("resources", Some("shop.bpmn"), KEYED.to_owned()),
            ("resources", Some("waiter.bpmn20.xml"), SIGNALLED.to_owned()),
            ("tenantId", None, "<default>".to_owned()),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let entries = r.body["deployments"].as_array().expect("deployments");
    assert_eq!(entries.len(), 2, "{}", r.text);
    let shop = &entries[0]["processDefinition"];
    assert_eq!(shop["processDefinitionId"], "shop");
    assert_eq!(shop["processDefinitionVersion"], 1);
    assert_eq!(shop["resourceName"], "shop.bpmn");
    assert_eq!(shop["tenantId"], "<default>");
    assert_eq!(r.body["deploymentKey"], shop["processDefinitionKey"]);
    assert_eq!(
        entries[1]["processDefinition"]["processDefinitionId"],
        "waiter"
    );
    let key = shop["processDefinitionKey"].as_str().unwrap().to_owned();
    // The key starts an instance.
    let r = w
        .send(
            Method::POST,
            "/v2/process-instances",
            Some(ADMIN),
            Some(json!({"processDefinitionKey": key, "variables": {"order_id": "A-1"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // The same content: the same key. Changed content: version 2.
    let r = deploy(
        ADMIN,
        vec![("resources", Some("shop.bpmn"), KEYED.to_owned())],
    )
    .await;
    assert_eq!(r.body["deploymentKey"], key.as_str(), "{}", r.text);
    let changed = KEYED
        .replace("<endEvent id=\"end\"/>", "<endEvent id=\"done\"/>")
        .replace("targetRef=\"end\"", "targetRef=\"done\"");
    let r = deploy(ADMIN, vec![("resources", Some("shop.bpmn"), changed)]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["deployments"][0]["processDefinition"]["processDefinitionVersion"], 2,
        "{}",
        r.text
    );

    let r = deploy(
        ADMIN,
        vec![("resources", Some("rules.dmn"), "<definitions/>".to_owned())],
    )
    .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "model_refused");
    assert_eq!(r.body["errors"][0]["pointer"], "/resources", "{}", r.text);
    for (parts, pointer) in [
        (
            vec![
                ("resources", Some("shop.bpmn"), KEYED.to_owned()),
                ("tenantId", None, "acme".to_owned()),
            ],
            "/tenantId",
        ),
        (
            vec![("resource", Some("shop.bpmn"), KEYED.to_owned())],
            "/resource",
        ),
        (
            vec![("tenantId", None, "<default>".to_owned())],
            "/resources",
        ),
    ] {
        let r = deploy(ADMIN, parts).await;
        assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
        assert_eq!(r.body["errors"][0]["pointer"], pointer, "{}", r.text);
    }
    let r = deploy(
        ADMIN,
        vec![("resources", Some("broken.bpmn"), "<definitions".to_owned())],
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert!(
        r.body["detail"].as_str().unwrap().contains("broken.bpmn"),
        "{}",
        r.text
    );
    let r = deploy(
        READER,
        vec![("resources", Some("shop.bpmn"), KEYED.to_owned())],
    )
    .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
    // A JSON body is not a form: a problem, not the framework's plain text.
    let r = w
        .send(
            Method::POST,
            "/v2/deployments",
            Some(ADMIN),
            Some(json!({"resources": []})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    let r = w
        .send(Method::GET, "/v1/deployments", Some(READER), None)
        .await;
    assert_eq!(
        r.body.as_array().unwrap().len(),
        3,
        "only the three good ones: {}",
        r.text
    );
}

/// Camunda 8's publication (`POST /v2/messages/publication`): with a time to live of 0
/// the waiting instance takes it, and with nothing waiting it is dropped and still 200
/// (as Camunda answers); with a time to live it is kept, and an instance that waits for
/// it later takes it; a second publication with a kept message's `messageId` is 409 and
/// changes nothing; a negative time to live is refused at its field.
#[tokio::test]
async fn a_camunda_8_publication_reaches_the_wait_is_kept_or_is_dropped() {
    let w = world().await;
    let id = start_orders(&w, &["A-1"]).await.remove(0);
    let states = states_of(&w, std::slice::from_ref(&id)).await;
    let publish = |body: Value| {
        w.send(
            Method::POST,
            "/v2/messages/publication",
            Some(ADMIN),
            Some(body),
        )
    };
    let r = publish(json!({"name": "payment-received", "correlationKey": "A-1",
                           "timeToLive": -1}))
    .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert_eq!(r.body["errors"][0]["pointer"], "/timeToLive", "{}", r.text);
    let r = publish(json!({"name": "payment-received", "correlationKey": ""})).await;
    assert_eq!(
        r.body["errors"][0]["pointer"], "/correlationKey",
        "{}",
        r.text
    );
    assert_eq!(states_of(&w, std::slice::from_ref(&id)).await, states);

    // Nothing waits under B-9: dropped, 200.
    let r = publish(json!({"name": "payment-received", "correlationKey": "B-9"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(
        r.body["messageKey"].as_str().is_some_and(|k| !k.is_empty()),
        "{}",
        r.text
    );
    assert_eq!(states_of(&w, std::slice::from_ref(&id)).await, states);
    // Nothing waits under B-7 yet, but the message is kept: its key is answered, its id
    // taken while it is kept; the instance that waits under B-7 later takes it.
    let kept = publish(json!({"name": "payment-received", "correlationKey": "B-7",
                              "timeToLive": "60000", "messageId": "psp-7",
                              "variables": {"paid": "kept"}}))
    .await;
    assert_eq!(kept.status, StatusCode::OK, "{}", kept.text);
    let key: i64 = kept.body["messageKey"].as_str().unwrap().parse().unwrap();
    assert_eq!(key >> 51, 1, "a partition-1 key: {key}");
    let again = publish(json!({"name": "payment-received", "correlationKey": "B-7",
                               "timeToLive": 60000, "messageId": "psp-7"}))
    .await;
    assert_problem(&again, StatusCode::CONFLICT, "conflict");
    assert!(again.text.contains("psp-7"), "{}", again.text);
    assert_eq!(states_of(&w, std::slice::from_ref(&id)).await, states);
    // The native API: a time to live past 2^53 - 1 ms is refused at its field, changing
    // nothing; an integral number written with a fraction (`1000.0`) is an integer.
    let native = |body: Value| w.send(Method::POST, "/v1/messages", Some(ADMIN), Some(body));
    let r = native(json!({"name": "payment-received", "correlation_key": "C-1",
                          "time_to_live_ms": 9007199254740992_i64}))
    .await;
    assert_problem(&r, StatusCode::BAD_REQUEST, "invalid");
    assert!(r.text.contains("time_to_live_ms"), "{}", r.text);
    let r = native(json!({"name": "payment-received", "correlation_key": "C-1",
                          "time_to_live_ms": 1000.0}))
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.body["buffered"]["key"].is_i64(), "{}", r.text);
    let later = start_orders(&w, &["B-7"]).await.remove(0);
    let mut waited = 0;
    let view = loop {
        let r = w
            .send(
                Method::GET,
                &format!("/v1/instances/{later}"),
                Some(READER),
                None,
            )
            .await;
        if r.body["instance"]["status"] == "completed" || waited >= 500 {
            break r;
        }
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        view.body["instance"]["status"], "completed",
        "{}",
        view.text
    );
    assert_eq!(
        view.body["snapshot"]["variables"]["paid"], "kept",
        "{}",
        view.text
    );
    // A-1 waits: taken.
    let r = publish(json!({"name": "payment-received", "correlationKey": "A-1",
                           "timeToLive": 0, "messageId": "m-1", "variables": {"paid": true},
                           "tenantId": "<default>"}))
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["tenantId"], "<default>");
    let r = w
        .send(
            Method::GET,
            &format!("/v1/instances/{id}"),
            Some(READER),
            None,
        )
        .await;
    assert_eq!(r.body["instance"]["status"], "completed", "{}", r.text);
    assert_eq!(r.body["snapshot"]["variables"]["paid"], true, "{}", r.text);
}
