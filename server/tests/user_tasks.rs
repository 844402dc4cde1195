//! The task list through HTTP (`/v1/user-tasks`, `/v1/instances/{id}/user-tasks/...`)
//! against a durable SQLite store with a runtime serving it, on a manual clock: what a
//! task-list front end does — list by candidate group, assignee and candidate user, page,
//! show, claim, unclaim, complete — and every refusal it can meet, each checked for its
//! problem document and for leaving the instance and the audit log as they were.

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
const READER: &str = "reader-secret";

/// `start → review (a Camunda 7 user task: assignee and candidates) → end`, the review
/// interrupted by a timer boundary after a day, and a message wait `signed` that is no
/// user task.
const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d" targetNamespace="t">
  <message id="m" name="signed"/>
  <process id="expenses" isExecutable="true">
    <startEvent id="start"/>
    <userTask id="review" name="Review the expense claim"
              camunda:assignee="${owner}"
              camunda:candidateGroups="finance, ${team}"
              camunda:candidateUsers="carol"/>
    <boundaryEvent id="late" attachedToRef="review">
      <timerEventDefinition><timeDuration>P1D</timeDuration></timerEventDefinition>
    </boundaryEvent>
    <receiveTask id="signed" messageRef="m"/>
    <endEvent id="end"/>
    <endEvent id="expired"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="review"/>
    <sequenceFlow id="f1" sourceRef="review" targetRef="signed"/>
    <sequenceFlow id="f2" sourceRef="signed" targetRef="end"/>
    <sequenceFlow id="f3" sourceRef="late" targetRef="expired"/>
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
    content_type: String,
    body: Value,
    text: String,
}

impl World {
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
        let res = self.app.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let content_type = res
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().expect("ascii").to_owned())
            .unwrap_or_default();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        Reply {
            status,
            content_type,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, Some(READER), None).await
    }

    async fn post(&self, uri: &str, body: Value) -> Reply {
        self.send(Method::POST, uri, Some(ADMIN), Some(body)).await
    }

    async fn deploy(&self) -> i64 {
        let r = self
            .post("/v1/deployments", json!({ "source": MODEL }))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.body["id"].as_i64().expect("id")
    }

    async fn start(&self, deployment: i64, variables: Value) -> String {
        let r = self
            .post(
                "/v1/instances",
                json!({ "deployment": deployment, "variables": variables }),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.body["instance"].as_str().expect("instance").to_owned()
    }

    /// The `(instance, node)` of every task a listing returns, in its order.
    async fn listed(&self, query: &str) -> Vec<(String, String)> {
        let r = self.get(&format!("/v1/user-tasks{query}")).await;
        assert_eq!(r.status, StatusCode::OK, "{query}: {}", r.text);
        r.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|t| {
                (
                    t["instance"].as_str().unwrap().to_owned(),
                    t["node"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The instance row and the whole audit log: what a refusal must leave as it was.
    async fn state_of(&self, id: &str) -> (u64, Vec<u8>, usize) {
        let id = InstanceId::parse_str(id).expect("id");
        let rec = self
            .store
            .instance(id)
            .await
            .expect("reads")
            .expect("exists");
        let audit = self.store.audit(None, 0).await.expect("audit").len();
        (rec.fence, rec.snapshot, audit)
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

fn problem(r: &Reply, status: StatusCode, code: &str, needle: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.content_type, "application/problem+json", "{}", r.text);
    assert_eq!(r.body["code"], code, "{}", r.text);
    assert_eq!(r.body["status"], status.as_u16(), "{}", r.text);
    let detail = r.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(needle), "`{needle}` not in: {}", r.text);
}

fn pair(id: &str, node: &str) -> (String, String) {
    (id.to_owned(), node.to_owned())
}

#[tokio::test]
async fn a_task_list_front_end_lists_claims_and_completes_over_http() {
    let w = world().await;
    let dep = w.deploy().await;
    let a = w
        .start(dep, json!({ "owner": "ann", "team": "emea", "amount": 40 }))
        .await;
    w.clock.advance_ms(10);
    let b = w
        .start(dep, json!({ "owner": null, "team": "apac", "amount": 900 }))
        .await;

    // Every waiting task, oldest first, with its evaluated assignment and its name.
    let r = w.get("/v1/user-tasks").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{}", r.text);
    assert_eq!(items[0]["instance"], a.as_str());
    assert_eq!(items[0]["node"], "review");
    assert_eq!(items[0]["name"], "Review the expense claim");
    assert_eq!(items[0]["process_id"], "expenses");
    assert_eq!(items[0]["deployment"], dep);
    assert_eq!(items[0]["assignee"], "ann");
    assert_eq!(items[0]["candidate_groups"], json!(["finance", "emea"]));
    assert_eq!(items[0]["candidate_users"], json!(["carol"]));
    assert_eq!(items[0]["created_at_ms"], T0);
    // A null assignee expression names nobody: the key is absent.
    assert!(items[1].get("assignee").is_none(), "{}", r.text);
    assert!(r.body.get("next").is_none(), "{}", r.text);

    // The filters a front end uses.
    assert_eq!(
        w.listed("?candidate_group=finance").await,
        [pair(&a, "review"), pair(&b, "review")]
    );
    assert_eq!(
        w.listed("?candidate_group=emea&candidate_group=apac").await,
        [pair(&a, "review"), pair(&b, "review")]
    );
    assert_eq!(
        w.listed("?candidate_group=apac").await,
        [pair(&b, "review")]
    );
    assert_eq!(w.listed("?assignee=ann").await, [pair(&a, "review")]);
    assert_eq!(
        w.listed("?candidate_group=finance&assigned=false").await,
        [pair(&b, "review")]
    );
    assert_eq!(
        w.listed("?candidate_user=carol&assigned=true").await,
        [pair(&a, "review")]
    );
    assert_eq!(
        w.listed(&format!("?deployment={dep}&candidate_user=carol"))
            .await
            .len(),
        2
    );
    assert!(w.listed("?candidate_group=legal").await.is_empty());
    assert!(w.listed("?deployment=999").await.is_empty());

    // One task with its variables.
    let r = w.get(&format!("/v1/instances/{b}/user-tasks/review")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["variables"]["amount"], 900, "{}", r.text);
    assert_eq!(r.body["candidate_groups"], json!(["finance", "apac"]));

    // Bo claims the unassigned one; the list says so.
    let claim = format!("/v1/instances/{b}/user-tasks/review/claim");
    let r = w.post(&claim, json!({ "assignee": "bo" })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "running");
    assert_eq!(w.listed("?assignee=bo").await, [pair(&b, "review")]);
    assert!(w
        .listed("?candidate_group=finance&assigned=false")
        .await
        .is_empty());
    // Claiming it again is fine for its holder.
    let r = w.post(&claim, json!({ "assignee": "bo" })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    // Ann takes it over with force, gives it back, Bo claims it again.
    let r = w
        .post(&claim, json!({ "assignee": "ann", "force": true }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        w.listed("?assignee=ann").await,
        [pair(&a, "review"), pair(&b, "review")]
    );
    let unclaim = format!("/v1/instances/{b}/user-tasks/review/unclaim");
    let r = w.post(&unclaim, json!({ "assignee": "ann" })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = w.post(&claim, json!({ "assignee": "bo" })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    // Bo completes it: it leaves the list; the instance waits for its message.
    let complete = format!("/v1/instances/{b}/user-tasks/review/complete");
    let r = w
        .post(
            &complete,
            json!({ "assignee": "bo", "variables": { "approved": true } }),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(w.listed("").await, [pair(&a, "review")]);
    let r = w.get(&format!("/v1/instances/{b}")).await;
    assert_eq!(r.body["snapshot"]["variables"]["approved"], true);
    assert_eq!(r.body["snapshot"]["frontier"], json!(["signed"]));

    // Every change is in the audit log, by the token's name, with the person acted for.
    let r = w.get(&format!("/v1/audit?instance={b}")).await;
    let rows: Vec<(String, String)> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap().to_owned(),
                a["detail"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let actions: Vec<&str> = rows.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        actions,
        [
            "claim_user_task",
            "claim_user_task",
            "claim_user_task",
            "unclaim_user_task",
            "claim_user_task",
            "complete_user_task"
        ],
        "{}",
        r.text
    );
    assert_eq!(
        rows[2].1, "node=review assignee=ann force=true",
        "{}",
        r.text
    );
    assert!(r.body[0]["actor"] == "admin", "{}", r.text);
}

#[tokio::test]
async fn every_refusal_is_a_problem_and_changes_nothing() {
    let w = world().await;
    let dep = w.deploy().await;
    let id = w
        .start(dep, json!({ "owner": "ann", "team": "emea" }))
        .await;
    let before = w.state_of(&id).await;
    let at = |node: &str, op: &str| format!("/v1/instances/{id}/user-tasks/{node}/{op}");

    // Held by ann: bo's claim, bo's unclaim and bo's completion are refused.
    let r = w
        .post(&at("review", "claim"), json!({ "assignee": "bo" }))
        .await;
    problem(&r, StatusCode::CONFLICT, "refused", "claimed by `ann`");
    let r = w
        .post(&at("review", "unclaim"), json!({ "assignee": "bo" }))
        .await;
    problem(&r, StatusCode::CONFLICT, "refused", "not `bo`");
    let r = w
        .post(&at("review", "complete"), json!({ "assignee": "bo" }))
        .await;
    problem(
        &r,
        StatusCode::CONFLICT,
        "refused",
        "claimed by `ann`, not `bo`",
    );

    // Unknown tasks: no such node, a node that is no user task, no such instance.
    let r = w
        .post(&at("nowhere", "claim"), json!({ "assignee": "bo" }))
        .await;
    problem(
        &r,
        StatusCode::NOT_FOUND,
        "not_found",
        "user task `nowhere`",
    );
    let r = w.post(&at("signed", "complete"), json!({})).await;
    problem(&r, StatusCode::NOT_FOUND, "not_found", "user task `signed`");
    let r = w
        .get(&format!("/v1/instances/{id}/user-tasks/signed"))
        .await;
    problem(&r, StatusCode::NOT_FOUND, "not_found", "user task `signed`");
    let nil = "00000000-0000-0000-0000-000000000000";
    let r = w
        .post(
            &format!("/v1/instances/{nil}/user-tasks/review/claim"),
            json!({ "assignee": "bo" }),
        )
        .await;
    problem(&r, StatusCode::NOT_FOUND, "not_found", "instance");
    let r = w
        .post(
            "/v1/instances/not-a-uuid/user-tasks/review/claim",
            json!({ "assignee": "bo" }),
        )
        .await;
    problem(&r, StatusCode::BAD_REQUEST, "invalid", "not an instance id");

    // Bad bodies point at the field.
    for (body, pointer) in [
        (json!({}), "/"),
        (json!({ "assignee": "" }), "/assignee"),
        (json!({ "assignee": "x".repeat(129) }), "/assignee"),
        (json!({ "assignee": "a\u{7}b" }), "/assignee"),
        (json!({ "assignee": "bo", "force": "yes" }), "/force"),
        (json!({ "assignee": "bo", "extra": 1 }), "/extra"),
    ] {
        let r = w.post(&at("review", "claim"), body.clone()).await;
        problem(&r, StatusCode::BAD_REQUEST, "invalid", "");
        let got = r.body["errors"][0]["pointer"].as_str().unwrap_or_default();
        assert!(
            got == pointer || (pointer == "/" && got.is_empty()),
            "{body}: {}",
            r.text
        );
    }
    let r = w
        .send(Method::POST, &at("review", "claim"), Some(ADMIN), None)
        .await;
    problem(
        &r,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "JSON",
    );

    // Scopes: reading needs `read`, changing needs `operate`; no token is 401.
    let r = w
        .send(
            Method::POST,
            &at("review", "claim"),
            Some(READER),
            Some(json!({ "assignee": "bo" })),
        )
        .await;
    problem(&r, StatusCode::FORBIDDEN, "forbidden", "operate");
    let r = w.send(Method::GET, "/v1/user-tasks", None, None).await;
    problem(&r, StatusCode::UNAUTHORIZED, "unauthorized", "bearer");
    assert_eq!(w.state_of(&id).await, before);

    // Completed once, a second completion (and a claim) is refused: it no longer waits.
    let r = w
        .post(&at("review", "complete"), json!({ "assignee": "ann" }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let after = w.state_of(&id).await;
    let r = w.post(&at("review", "complete"), json!({})).await;
    problem(&r, StatusCode::CONFLICT, "refused", "is not pending");
    let r = w
        .post(&at("review", "claim"), json!({ "assignee": "ann" }))
        .await;
    problem(&r, StatusCode::CONFLICT, "refused", "is not pending");
    let r = w
        .get(&format!("/v1/instances/{id}/user-tasks/review"))
        .await;
    problem(&r, StatusCode::NOT_FOUND, "not_found", "user task `review`");
    assert_eq!(w.state_of(&id).await, after);
}

#[tokio::test]
async fn bad_filter_values_name_their_parameter() {
    let w = world().await;
    let too_many: String = (0..33).map(|i| format!("&candidate_group=g{i}")).collect();
    let long = "x".repeat(129);
    for (query, parameter) in [
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?limit=ten", "limit"),
        ("?assigned=maybe", "assigned"),
        ("?deployment=v1", "deployment"),
        ("?cursor=nonsense", "cursor"),
        ("?cursor=1.not-a-uuid.review", "cursor"),
        ("?assignee=", "assignee"),
        (&format!("?candidate_user={long}")[..], "candidate_user"),
        ("?candidate_group=", "candidate_group"),
        (&too_many[..], "candidate_group"),
        ("?owner=ann", ""),
    ] {
        let query = if let Some(rest) = query.strip_prefix('&') {
            format!("?{rest}")
        } else {
            query.to_owned()
        };
        let r = w.get(&format!("/v1/user-tasks{query}")).await;
        problem(&r, StatusCode::BAD_REQUEST, "invalid", "");
        if !parameter.is_empty() {
            assert_eq!(
                r.body["errors"][0]["parameter"], parameter,
                "{query}: {}",
                r.text
            );
        }
    }
}

#[tokio::test]
async fn a_front_end_pages_through_the_task_list_with_the_cursor() {
    let w = world().await;
    let dep = w.deploy().await;
    let mut started = Vec::new();
    for i in 0..5 {
        // Two at each instant: the page boundary falls between equal instants too.
        if i % 2 == 0 {
            w.clock.advance_ms(1);
        }
        started.push(w.start(dep, json!({ "owner": null, "team": "emea" })).await);
    }
    let mut seen = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..10 {
        let cursor = next
            .as_ref()
            .map(|c| format!("&cursor={c}"))
            .unwrap_or_default();
        let r = w
            .get(&format!(
                "/v1/user-tasks?candidate_group=emea&limit=2{cursor}"
            ))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        for t in r.body["items"].as_array().unwrap() {
            seen.push(t["instance"].as_str().unwrap().to_owned());
        }
        match r.body.get("next").and_then(Value::as_str) {
            Some(c) => next = Some(c.to_owned()),
            None => break,
        }
    }
    let mut expected = started.clone();
    expected.sort_by_key(|id| {
        let i = started.iter().position(|s| s == id).unwrap();
        // Oldest instant first, then instance id.
        (i / 2, id.clone())
    });
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_boundary_a_cancel_and_a_failed_assignment_take_tasks_off_the_list() {
    let w = world().await;
    let dep = w.deploy().await;
    let late = w
        .start(dep, json!({ "owner": "ann", "team": "emea" }))
        .await;
    w.clock.advance_ms(1);
    let cancelled = w.start(dep, json!({ "owner": "bo", "team": "emea" })).await;
    assert_eq!(w.listed("?candidate_group=emea").await.len(), 2);

    let r = w
        .post(&format!("/v1/instances/{cancelled}/cancel"), json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(w.listed("").await, [pair(&late, "review")]);

    // A day on, the timer boundary interrupts the review: off the list, and completed.
    w.advance(86_400_000, 1).await;
    assert!(w.listed("").await.is_empty());
    let r = w.get(&format!("/v1/instances/{late}")).await;
    assert_eq!(r.body["instance"]["status"], "completed", "{}", r.text);

    // An assignment that does not evaluate (no `team`) fails the instance at the task,
    // which is never listed.
    let broken = w.start(dep, json!({ "owner": "ann" })).await;
    assert!(w.listed("").await.is_empty());
    let r = w.get(&format!("/v1/instances/{broken}")).await;
    assert_eq!(r.body["instance"]["status"], "failed", "{}", r.text);
    assert_eq!(
        r.body["instance"]["failure_code"], "EXPRESSION_FAILED",
        "{}",
        r.text
    );
    let incident = &r.body["incidents"][0];
    assert_eq!(incident["node"], "review", "{}", r.text);
    assert!(
        incident["message"]
            .as_str()
            .unwrap()
            .contains("candidate groups of user task `review`"),
        "{}",
        r.text
    );
}

/// Two tokens in one sub-process: its second instance's user task is `sub@2/review`
/// (docs/activity-instances.md). The task list names both, and a front end addresses the
/// second by its name percent-encoded into one path segment (`/` as `%2F`, `@` as `%40`).
#[tokio::test]
async fn the_user_task_of_a_second_sub_process_instance_is_listed_and_completed_by_name() {
    const TWICE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="twice" isExecutable="true">
    <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
    <parallelGateway id="split"/>
    <sequenceFlow id="f1" sourceRef="split" targetRef="sub"/>
    <sequenceFlow id="f2" sourceRef="split" targetRef="sub"/>
    <subProcess id="sub">
      <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="review"/>
      <userTask id="review"/><sequenceFlow id="g1" sourceRef="review" targetRef="se"/>
      <endEvent id="se"/>
    </subProcess>
    <sequenceFlow id="f3" sourceRef="sub" targetRef="e"/><endEvent id="e"/>
  </process>
</definitions>"#;
    let w = world().await;
    let r = w.post("/v1/deployments", json!({ "source": TWICE })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let dep = r.body["id"].as_i64().expect("id");
    let id = w.start(dep, json!({})).await;
    assert_eq!(
        w.listed("").await,
        [pair(&id, "review"), pair(&id, "sub@2/review")]
    );
    let one = w
        .get(&format!("/v1/instances/{id}/user-tasks/sub%402%2Freview"))
        .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.text);
    assert_eq!(one.body["node"], "sub@2/review", "{}", one.text);
    let done = w
        .post(
            &format!("/v1/instances/{id}/user-tasks/sub%402%2Freview/complete"),
            json!({ "variables": { "second": true } }),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    assert_eq!(w.listed("").await, [pair(&id, "review")]);
    // The same name again is stale: that instance is gone, and nothing changes.
    let before = w.state_of(&id).await;
    let again = w
        .post(
            &format!("/v1/instances/{id}/user-tasks/sub%402%2Freview/complete"),
            json!({}),
        )
        .await;
    assert!(again.status.is_client_error(), "{}", again.text);
    assert_eq!(w.state_of(&id).await, before);
    let last = w
        .post(
            &format!("/v1/instances/{id}/user-tasks/review/complete"),
            json!({}),
        )
        .await;
    assert_eq!(last.status, StatusCode::OK, "{}", last.text);
    let rec = w
        .store
        .instance(InstanceId::parse_str(&id).expect("id"))
        .await
        .expect("reads")
        .expect("exists");
    assert_eq!(rec.status, qflow_store::InstanceStatus::Completed);
}

/// The Camunda 8 task list (`/v2/user-tasks/…`): a search finds the waiting tasks with
/// Camunda's keys and shapes, by instance, assignee, candidate group, state and element,
/// page by page; a task is read, assigned (taking it over unless `allowOverride` is
/// false), unassigned and completed by its key; filters qflow cannot judge are refused
/// at their field, and a completed task's key is gone.
#[tokio::test]
async fn a_camunda_8_task_list_searches_assigns_and_completes_by_key() {
    let world = world().await;
    let w = &world;
    let dep = w.deploy().await;
    let a = w.start(dep, json!({"owner": "alice", "team": "ops"})).await;
    let b = w.start(dep, json!({"owner": "bob", "team": "sales"})).await;
    w.advance(0, 0).await;
    let search = move |body: Value| async move {
        let r = w
            .send(
                Method::POST,
                "/v2/user-tasks/search",
                Some(READER),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.body
    };
    let all = search(json!({})).await;
    let items = all["items"].as_array().expect("items").clone();
    assert_eq!(items.len(), 2, "{all}");
    assert_eq!(all["page"]["totalItems"], 2, "{all}");
    assert_eq!(all["page"]["hasMoreTotalItems"], false, "{all}");
    let task_a = items
        .iter()
        .find(|t| t["assignee"] == "alice")
        .expect("alice's task")
        .clone();
    assert_eq!(task_a["state"], "CREATED");
    assert_eq!(task_a["elementId"], "review");
    assert_eq!(task_a["name"], "Review the expense claim");
    assert_eq!(task_a["candidateGroups"], json!(["finance", "ops"]));
    assert_eq!(task_a["candidateUsers"], json!(["carol"]));
    assert_eq!(task_a["processDefinitionId"], "expenses");
    assert_eq!(task_a["processDefinitionVersion"], 1);
    assert_eq!(task_a["processDefinitionKey"], dep.to_string());
    assert_eq!(task_a["tenantId"], "<default>");
    let key = |v: &Value| -> i64 { v.as_str().and_then(|k| k.parse().ok()).expect("a key") };
    let task_key = key(&task_a["userTaskKey"]);
    let instance_key = key(&task_a["processInstanceKey"]);
    assert_ne!(task_key, instance_key);
    assert_eq!(task_key >> 51, 1, "partition 1");

    // Filters.
    let only = move |body: Value| async move {
        let found = search(body).await;
        found["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|t| t["assignee"].as_str().unwrap_or("-").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        only(json!({"filter": {"processInstanceKey": instance_key.to_string()}})).await,
        ["alice"]
    );
    assert_eq!(
        only(json!({"filter": {"userTaskKey": {"$eq": task_key.to_string()}}})).await,
        ["alice"]
    );
    assert_eq!(
        only(json!({"filter": {"candidateGroup": "sales"}})).await,
        ["bob"]
    );
    assert_eq!(
        only(json!({"filter": {"assignee": "alice", "state": "CREATED"}})).await,
        ["alice"]
    );
    assert!(only(json!({"filter": {"state": "COMPLETED"}}))
        .await
        .is_empty());
    assert!(only(json!({"filter": {"elementId": "signed"}}))
        .await
        .is_empty());
    assert!(
        only(json!({"filter": {"processInstanceKey": "2251799813685248000"}}))
            .await
            .is_empty()
    );
    assert_eq!(
        only(json!({"filter": {"priority": null, "tenantId": "<default>"}}))
            .await
            .len(),
        2
    );
    for (body, pointer) in [
        (
            json!({"filter": {"state": {"$in": ["CREATED"]}}}),
            "/filter/state",
        ),
        (json!({"filter": {"priority": 50}}), "/filter/priority"),
        (json!({"filter": {"tenantId": "acme"}}), "/filter/tenantId"),
        (json!({"filter": {"state": "DONE"}}), "/filter/state"),
        (json!({"page": {"from": 5}}), "/page/from"),
        (json!({"sort": [{"field": "priority"}]}), "/sort"),
        (
            json!({"sort": [{"field": "creationDate", "order": "DESC"}]}),
            "/sort",
        ),
    ] {
        let r = w
            .send(
                Method::POST,
                "/v2/user-tasks/search",
                Some(READER),
                Some(body.clone()),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text);
        assert_eq!(
            r.body["errors"][0]["pointer"], pointer,
            "{body}: {}",
            r.text
        );
    }
    for body in [json!({"filter": {"nonsense": 1}}), json!([null, null])] {
        let r = w
            .send(
                Method::POST,
                "/v2/user-tasks/search",
                Some(READER),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    }
    // Cursors of the right form that this search did not answer: 422 (hex that is no
    // text; text the task list cannot read as a position).
    for after in ["b7c57d1d64e0", "0000"] {
        let r = w
            .send(
                Method::POST,
                "/v2/user-tasks/search",
                Some(READER),
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

    // Pages of one, by cursor.
    let first = search(json!({"page": {"limit": 1}})).await;
    assert_eq!(first["items"].as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first["page"]["hasMoreTotalItems"], true, "{first}");
    let cursor = first["page"]["endCursor"]
        .as_str()
        .expect("a cursor")
        .to_owned();
    let second = search(json!({"page": {"limit": 1, "after": cursor}})).await;
    assert_eq!(second["items"].as_array().unwrap().len(), 1, "{second}");
    assert_ne!(
        first["items"][0]["userTaskKey"],
        second["items"][0]["userTaskKey"]
    );

    // Read, assign, unassign, complete by key.
    let uri = format!("/v2/user-tasks/{task_key}");
    let r = w.get(&uri).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body, task_a);
    let before = w.state_of(&a).await;
    let assign = |body: Value| {
        let uri = format!("{uri}/assignment");
        async move { w.send(Method::POST, &uri, Some(ADMIN), Some(body)).await }
    };
    let r = assign(json!({"assignee": "carol", "allowOverride": false})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(
        w.state_of(&a).await,
        before,
        "a refusal changed the instance"
    );
    let r = w
        .send(
            Method::POST,
            &format!("{uri}/assignment"),
            Some(READER),
            Some(json!({"assignee": "carol"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = assign(json!({"assignee": "carol", "action": "reassign"})).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.get(&uri).await.body["assignee"], "carol");
    let r = w
        .send(
            Method::DELETE,
            &format!("{uri}/assignee"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(w.get(&uri).await.body["assignee"], Value::Null);
    let r = w
        .post(
            &format!("{uri}/completion"),
            json!({"variables": {"approved": true}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let view = w.get(&format!("/v1/instances/{a}")).await;
    assert_eq!(
        view.body["snapshot"]["frontier"],
        json!(["signed"]),
        "{}",
        view.text
    );
    assert_eq!(view.body["snapshot"]["variables"]["approved"], true);
    let r = w.get(&uri).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = w.post(&format!("{uri}/completion"), json!({})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    // b's task is untouched; keys that name no task: 400 for a malformed one, 404 else.
    assert_eq!(only(json!({})).await, ["bob"]);
    let r = w.get("/v2/user-tasks/review").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = w.get(&format!("/v2/user-tasks/{instance_key}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let _ = b;
}
