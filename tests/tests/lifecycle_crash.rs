//! Lifecycle events across SIGKILLs (SPEC C10; issue 9): a real host process
//! (`qflow-server-host --lifecycle-url`) runs instances of the flaky model — a task with
//! `q:retry` (5 attempts, 100 ms doubling) whose handler fails the first `fail` attempts —
//! and sends every instance's retry lifecycle to a loopback receiver in this test. The
//! host is SIGKILLed 8 times at arbitrary points while attempts fail, park and re-drive;
//! a last life runs everything to the end.
//!
//! Checked against the store, where the attempt history of the same commits is kept:
//! every committed failed attempt has exactly one `attempt_failed` event (its attempt and
//! outcome, with a next-attempt instant unless the budget was spent), every FAILED
//! instance one `failed` event, nothing else exists — so no event exists for a step that
//! did not commit —, the events of one instance are in commit (fence) order, and every
//! event row was delivered, each delivery of a key carrying the same body.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qflow_persistence::SqliteStore;
use qflow_store::{AttemptOutcome, InstanceId, InstanceStatus, OutboxState, Store};
use serde_json::{json, Value};

const HOST: &str = env!("CARGO_BIN_EXE_qflow-server-host");
const TOKEN: &str = "qf_lifecycle-crash-test-token";
const KILLS: u32 = 8;
const STARTS_PER_LIFE: usize = 12;
/// A bound on hangs, never a timing assertion.
const LIMIT: Duration = Duration::from_secs(120);

/// Every delivery the receiver saw: key → bodies, in arrival order.
type Seen = Arc<Mutex<BTreeMap<String, Vec<Value>>>>;

async fn receiver(seen: Seen) -> String {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/events",
        post(move |body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let request: Value = serde_json::from_slice(&body).expect("a JSON request");
                let key = request["idempotency_key"].as_str().unwrap().to_owned();
                seen.lock()
                    .unwrap()
                    .entry(key)
                    .or_default()
                    .push(request["variables"].clone());
                axum::http::StatusCode::ACCEPTED
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/events")
}

struct Host {
    child: Child,
    addr: String,
}

fn spawn_host(db: &str, url: &str) -> Host {
    let mut child = Command::new(HOST)
        .args(["--db", db, "--listen", "127.0.0.1:0", "--fast-recovery"])
        .args(["--lifecycle-url", url])
        .env("QFLOW_HOST_TOKEN", TOKEN)
        .env(
            "QFLOW_HOST_CHANNEL_SECRET",
            qflow_tests::counterpart::TEST_SECRET,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawns the host");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening ") {
                let _ = tx.send(addr.to_owned());
            }
        }
    });
    let addr = rx
        .recv_timeout(LIMIT)
        .expect("the host says where it listens");
    Host { child, addr }
}

fn kill(mut host: Host) {
    host.child.kill().expect("SIGKILL the host");
    host.child.wait().expect("reap the host");
}

/// Starts `n` flaky instances failing 0..=5 times (5: the budget is spent, FAILED).
async fn start(http: &reqwest::Client, host: &Host, from: usize, n: usize) -> Vec<InstanceId> {
    let mut ids = Vec::new();
    for i in from..from + n {
        let body = json!({ "variables": { "fail": i % 6 } });
        let r = http
            .post(format!("http://{}/v1/processes/flaky/instances", host.addr))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("starts");
        assert_eq!(r.status(), 201);
        let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        ids.push(v["instance"].as_str().unwrap().parse().unwrap());
    }
    ids
}

async fn open(db: &str) -> SqliteStore {
    SqliteStore::open(db).await.expect("opens the store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_retry_transition_has_exactly_one_event_across_kills() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db").display().to_string();
    let seen: Seen = Arc::default();
    let url = receiver(seen.clone()).await;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for life in 0..KILLS {
        let host = spawn_host(&db, &url);
        ids.extend(start(&http, &host, ids.len(), STARTS_PER_LIFE).await);
        // Let attempts fail and park for a while: the kill lands wherever they are.
        tokio::time::sleep(Duration::from_millis(150 + 97 * u64::from(life % 5))).await;
        kill(host);
    }
    // The last life: everything ends (5 attempts, 100 ms doubling: well within the bound).
    let host = spawn_host(&db, &url);
    let done = async {
        loop {
            let (running, undelivered) = counts(&db).await;
            if running == 0 && undelivered == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(LIMIT, done)
        .await
        .expect("every instance ends, every event is delivered");
    kill(host);

    let store = open(&db).await;
    let seen = seen.lock().unwrap().clone();
    let mut transitions = 0;
    for id in &ids {
        let inst = store.instance(*id).await.unwrap().unwrap();
        // What the committed attempt history says happened.
        let mut expected: Vec<Value> = Vec::new();
        for a in store.attempts(*id).await.unwrap() {
            if a.outcome == AttemptOutcome::Failed {
                expected.push(
                    json!({"event": "attempt_failed", "attempt": a.attempt.get(),
                                     "outcome": "failed", "node": a.node}),
                );
            }
        }
        if inst.status == InstanceStatus::Failed {
            expected.push(json!({"event": "failed"}));
        }
        // The events the commits wrote, in fence order.
        let mut rows: Vec<(u64, String, Value)> = store
            .outbox(*id)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.channel == "events")
            .map(|r| {
                assert_eq!(r.state, OutboxState::Delivered, "{} undelivered", r.key);
                let body: Value = serde_json::from_str(&r.body).unwrap();
                (body["fence"].as_u64().unwrap(), r.key, body)
            })
            .collect();
        rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let got: Vec<Value> = rows
            .iter()
            .map(|(_, _, b)| match b["event"].as_str().unwrap() {
                "attempt_failed" => json!({"event": "attempt_failed", "attempt": b["attempt"],
                                           "outcome": b["outcome"], "node": b["node"]}),
                other => json!({ "event": other }),
            })
            .collect();
        assert_eq!(
            got,
            expected,
            "instance {id} (status {})",
            inst.status.as_str()
        );
        for (_, key, body) in &rows {
            transitions += 1;
            let deliveries = seen
                .get(key)
                .unwrap_or_else(|| panic!("{key} never delivered"));
            assert!(
                deliveries.iter().all(|d| d == body),
                "{key}: a delivery differs"
            );
            // A parked attempt names the instant of the next one; the last, none.
            if body["event"] == "attempt_failed" {
                let last = body["attempt"] == 5;
                assert_eq!(body["next_attempt_at_ms"].is_null(), last, "{body}");
            }
        }
    }
    assert!(
        transitions > ids.len(),
        "the run made retry transitions: {transitions}"
    );
    // Nothing the receiver saw is an event no commit wrote.
    let mut stored = 0;
    for id in &ids {
        stored += store
            .outbox(*id)
            .await
            .unwrap()
            .iter()
            .filter(|r| r.channel == "events")
            .count();
    }
    assert_eq!(seen.len(), stored, "the receiver saw keys no commit wrote");
    eprintln!(
        "lifecycle across {KILLS} kills: {} instances, {transitions} events, {} deliveries",
        ids.len(),
        seen.values().map(Vec::len).sum::<usize>()
    );
}

/// Running instances and undelivered outbox rows, read beside the running host
/// (read-only).
async fn counts(db: &str) -> (i64, i64) {
    use sqlx::ConnectOptions;
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true)
        .connect()
        .await
        .expect("a read-only connection");
    let running = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE status = 'running'")
        .fetch_one(&mut conn)
        .await
        .expect("counts instances");
    let undelivered = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE state <> 'delivered'")
        .fetch_one(&mut conn)
        .await
        .expect("counts rows");
    (running, undelivered)
}
