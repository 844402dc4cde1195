//! Channel calls through the real `qflow serve` (SPEC C1–C9, C8's webhook adapter): the
//! binary runs with a `qflow.toml` naming a webhook channel `payments` whose URL is a
//! counterpart this test serves on loopback, with the signing secret in an environment
//! variable set on the child only. The counterpart (`qflow_tests::counterpart`) verifies
//! every request's Standard Webhooks signature, checks its `Idempotency-Key` and
//! `Qflow-Call-Id` headers against the body, and logs every delivery by key.
//!
//! Cases: a synchronous answer completes the instance; an accepted request is answered
//! through `POST /v1/channel-answers` (and a repeat, an unknown key, an unknown field
//! and a token without the `worker` scope are refused as documented); failed deliveries
//! are retried along the channel's curve under one key; an attempt that is never
//! answered times out and the retry goes out under a fresh key, while the late answer
//! to the dead attempt is `superseded`. And the two refusals: `serve` does not start
//! when the secret's variable is unset, and a model naming an unconfigured channel is
//! not deployed.
//!
//! No timing assertions: waits are bounded polls for a condition. The one comparison
//! of instants is the delivery curve's lower bound, which the dispatcher guarantees:
//! a try is never made before it is due.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use qflow_persistence::SqliteStore;
use qflow_store::{OutboxState, Store};
use qflow_tests::channel_model;
use qflow_tests::counterpart::{call, Counterpart, Delivery, Engine, Relayed, Reply, TEST_SECRET};
use serde_json::{json, Value};

const QFLOW: &str = env!("CARGO_BIN_EXE_qflow");
const SECRET_VAR: &str = "QFLOW_TEST_PAYMENTS_SECRET";
/// A bound on hangs, never a timing assertion.
const LIMIT: Duration = Duration::from_secs(60);

/// A token from `qflow token new`: the secret, and its `sha256 = "…"` line.
fn new_token() -> (String, String) {
    let out = Command::new(QFLOW)
        .args(["token", "new"])
        .output()
        .expect("runs qflow token new");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("text");
    let mut lines = text.lines();
    let secret = lines.next().expect("the token").to_owned();
    let sha = lines.next().expect("its sha256 line").to_owned();
    (secret, sha)
}

/// A running `qflow serve` with two configured tokens: `worker` (every scope) and
/// `operator` (every scope but `worker`).
struct Server {
    child: Child,
    db: PathBuf,
    worker: Engine,
    operator: Engine,
    http: reqwest::Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `qflow.toml` for a server whose channel `payments` posts to `url` with the secret
/// from `secret_var`, and whose delivery curve is 100 ms doubling to 1 s.
fn config(url: &str, secret_var: &str, worker_sha: &str, operator_sha: &str) -> String {
    format!(
        r#"listen = "127.0.0.1:0"

[[tokens]]
name = "counterpart"
{worker_sha}
scopes = ["read", "deploy", "operate", "worker"]

[[tokens]]
name = "operator"
{operator_sha}
scopes = ["read", "deploy", "operate"]

[channels.payments]
url = "{url}"
secret_env = "{secret_var}"
response_timeout_ms = 5000

[channels.payments.delivery]
initial_ms = 100
multiplier_milli = 2000
max_ms = 1000
"#
    )
}

/// Spawns `qflow serve` on `config_text` (in `dir`); the lines it wrote to stderr come
/// through the receiver.
fn spawn(dir: &Path, config_text: &str, secret: Option<&str>) -> (Child, mpsc::Receiver<String>) {
    let path = dir.join("qflow.toml");
    std::fs::write(&path, config_text).expect("writes qflow.toml");
    let mut cmd = Command::new(QFLOW);
    cmd.arg("serve")
        .arg("--config")
        .arg(&path)
        .arg("--db")
        .arg(dir.join("qflow.sqlite"))
        .env_remove("QFLOW_DATABASE_URL")
        .env_remove(SECRET_VAR)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(secret) = secret {
        cmd.env(SECRET_VAR, secret);
    }
    let mut child = cmd.spawn().expect("spawns qflow serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// `qflow serve` with the channel `payments` posting to `cp`, its secret set.
async fn serve(dir: &Path, cp: &Counterpart) -> Server {
    let (worker, worker_sha) = new_token();
    let (operator, operator_sha) = new_token();
    let text = config(&cp.url(), SECRET_VAR, &worker_sha, &operator_sha);
    let (child, lines) = spawn(dir, &text, Some(TEST_SECRET));
    let addr = tokio::task::spawn_blocking(move || {
        let mut said = Vec::new();
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no banner from qflow serve; it said: {said:#?}"));
            if let Some(rest) = line.strip_prefix("qflow: serving http://") {
                let addr = rest
                    .split_whitespace()
                    .next()
                    .expect("an address")
                    .to_owned();
                // Keep draining stderr so the server never blocks on a full pipe.
                std::thread::spawn(move || while lines.recv().is_ok() {});
                return addr;
            }
            said.push(line);
        }
    })
    .await
    .expect("the banner reader");
    let worker = Engine {
        addr: addr.clone(),
        token: worker,
    };
    cp.set_engine(Some(worker.clone()));
    Server {
        child,
        db: dir.join("qflow.sqlite"),
        worker,
        operator: Engine {
            addr,
            token: operator,
        },
        http: reqwest::Client::new(),
    }
}

impl Server {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        call(&self.http, &self.worker, method, path, body)
            .await
            .expect("the server answers")
    }

    /// Deploys `model` and starts one instance with `variables`.
    async fn start(&self, model: &str, variables: Value) -> String {
        let (status, dep) = self
            .call(
                reqwest::Method::POST,
                "/v1/deployments",
                Some(json!({ "source": model })),
            )
            .await;
        assert_eq!(status, 200, "{dep}");
        let body = json!({ "deployment": dep["id"], "variables": variables });
        let (status, started) = self
            .call(reqwest::Method::POST, "/v1/instances", Some(body))
            .await;
        assert_eq!(status, 201, "{started}");
        started["instance"]
            .as_str()
            .expect("an instance id")
            .to_owned()
    }

    async fn instance(&self, id: &str) -> Value {
        let (status, view) = self
            .call(reqwest::Method::GET, &format!("/v1/instances/{id}"), None)
            .await;
        assert_eq!(status, 200, "{view}");
        view
    }

    /// Waits (bounded) until the instance has `status`; its view.
    async fn until_status(&self, id: &str, status: &str) -> Value {
        let began = Instant::now();
        loop {
            let view = self.instance(id).await;
            if view["instance"]["status"] == status {
                return view;
            }
            assert!(began.elapsed() < LIMIT, "never {status}: {view}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `(node, attempt, outcome, code)` of every attempt, in order.
    async fn history(&self, id: &str) -> Vec<(String, u64, String, Option<String>)> {
        let (status, h) = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/instances/{id}/history"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{h}");
        h.as_array()
            .expect("a list")
            .iter()
            .map(|a| {
                (
                    a["node"].as_str().unwrap().to_owned(),
                    a["attempt"].as_u64().unwrap(),
                    a["outcome"].as_str().unwrap().to_owned(),
                    a["code"].as_str().map(str::to_owned),
                )
            })
            .collect()
    }
}

fn script(
    f: impl Fn(Delivery, Counterpart) -> BoxFuture<'static, Reply> + Send + Sync + 'static,
) -> qflow_tests::counterpart::Script {
    Arc::new(f)
}

/// Waits (bounded) until the counterpart has received `n` deliveries.
async fn until_delivered(cp: &Counterpart, n: usize) {
    let began = Instant::now();
    while cp.delivered() < n {
        assert!(
            began.elapsed() < LIMIT,
            "{} of {n} deliveries: {:?}",
            cp.delivered(),
            cp.violations()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn assert_no_violations(cp: &Counterpart) {
    let v = cp.violations();
    assert!(v.is_empty(), "the delivery contract was broken: {v:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_answer_completes_the_instance() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let cp = Counterpart::start(
        TEST_SECRET,
        script(|d, _| {
            let receipt = format!("r-{}", d.attempt());
            async move { Reply::Answer(json!({ "receipt": receipt })) }.boxed()
        }),
    )
    .await;
    let server = serve(dir.path(), &cp).await;
    let model = channel_model("pay_sync", &["charge"], "PT30S", None);
    let id = server.start(&model, json!({ "amount": 42 })).await;
    let view = server.until_status(&id, "completed").await;
    assert_eq!(view["snapshot"]["variables"]["receipt"], "r-1", "{view}");
    assert_eq!(view["snapshot"]["variables"]["amount"], 42, "{view}");
    assert_eq!(
        server.history(&id).await,
        [("charge".to_owned(), 1, "ok".to_owned(), None)]
    );

    let seen = cp.deliveries();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let d = &seen[0];
    assert!(d.call_id.starts_with(&format!("{id}/")), "{d:?}");
    assert_eq!(d.key, format!("{}/1", d.call_id));
    assert_eq!(d.request.channel, "payments");
    assert_eq!((d.request.node.as_str(), d.attempt()), ("charge", 1));
    assert_eq!(
        d.variable("amount"),
        Some(&json!(42)),
        "the request is the variables"
    );
    assert_no_violations(&cp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_request_is_answered_through_the_relay_endpoint() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let cp = Counterpart::start(
        TEST_SECRET,
        script(|_, _| async { Reply::Accepted }.boxed()),
    )
    .await;
    let server = serve(dir.path(), &cp).await;
    let model = channel_model("pay_async", &["charge"], "PT30S", None);
    let id = server.start(&model, json!({ "amount": 7 })).await;
    until_delivered(&cp, 1).await;
    let key = cp.deliveries()[0].key.clone();
    assert_eq!(
        server.instance(&id).await["instance"]["status"],
        "running",
        "accepted is not answered"
    );

    // Without the worker scope: refused, and nothing changes.
    let answer = json!({ "idempotency_key": key, "variables": { "receipt": "async" } });
    let (status, body) = call(
        &server.http,
        &server.operator,
        reqwest::Method::POST,
        "/v1/channel-answers",
        Some(answer.clone()),
    )
    .await
    .expect("answers");
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "forbidden", "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("worker"),
        "{body}"
    );

    // A field the answer does not have: 400, with a pointer to it.
    let odd = json!({
        "idempotency_key": key,
        "bpmn_error": { "code": "DECLINED", "reason": "limit" },
    });
    let r = cp.post_relay(odd).await.expect("answers");
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["code"], "invalid", "{}", r.body);
    assert_eq!(
        r.body["errors"][0]["pointer"], "/bpmn_error/reason",
        "{}",
        r.body
    );
    assert_eq!(server.instance(&id).await["instance"]["status"], "running");

    // The answer: resumed, and the instance completed with it.
    let r = cp
        .relay(&key, json!({ "receipt": "async" }))
        .await
        .expect("answers");
    assert_relayed(&r, 200, "resumed");
    let view = server.instance(&id).await;
    assert_eq!(view["instance"]["status"], "completed", "{view}");
    assert_eq!(view["snapshot"]["variables"]["receipt"], "async", "{view}");

    // Again: the call is over.
    let r = cp
        .relay(&key, json!({ "receipt": "twice" }))
        .await
        .expect("answers");
    assert_relayed(&r, 409, "already_completed");
    let view = server.instance(&id).await;
    assert_eq!(view["snapshot"]["variables"]["receipt"], "async", "{view}");

    // Keys that name no call of this engine.
    let stranger = format!("{}/1/1", "0190f5c4-0000-7000-8000-000000000000");
    for unknown in [stranger.as_str(), "nonsense"] {
        let r = cp.relay(unknown, json!({})).await.expect("answers");
        assert_eq!(r.status, 404, "{unknown}: {}", r.body);
        assert_eq!(r.body["code"], "not_found", "{}", r.body);
    }
    assert_eq!(cp.delivered(), 1, "one delivery: {:?}", cp.deliveries());
    assert_no_violations(&cp);
}

fn assert_relayed(r: &Relayed, status: u16, verdict: &str) {
    assert_eq!((r.status, r.verdict()), (status, verdict), "{}", r.body);
    assert!(
        r.body["reason"].as_str().is_some_and(|s| !s.is_empty()),
        "{}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deliveries_are_retried_along_the_curve_under_one_key() {
    const FAILURES: u32 = 3;
    let dir = tempfile::tempdir().expect("a temp dir");
    let cp = Counterpart::start(
        TEST_SECRET,
        script(|d, _| {
            async move {
                if d.nth_of_key <= FAILURES {
                    Reply::Fail(500)
                } else {
                    Reply::Answer(json!({ "receipt": "after-retries" }))
                }
            }
            .boxed()
        }),
    )
    .await;
    let server = serve(dir.path(), &cp).await;
    let model = channel_model("pay_flaky", &["charge"], "PT30S", None);
    let id = server.start(&model, json!({})).await;
    let view = server.until_status(&id, "completed").await;
    assert_eq!(view["snapshot"]["variables"]["receipt"], "after-retries");
    // Delivery tries are not task attempts: one attempt, answered.
    assert_eq!(
        server.history(&id).await,
        [("charge".to_owned(), 1, "ok".to_owned(), None)]
    );

    let seen = cp.deliveries();
    assert_eq!(seen.len(), FAILURES as usize + 1, "{seen:?}");
    assert!(seen
        .iter()
        .all(|d| d.key == seen[0].key && d.request == seen[0].request));
    // The curve: 100 ms after the first failure, doubling. A try is never made before it
    // is due (the millisecond the dispatcher's clock truncates is allowed for).
    for (n, pair) in seen.windows(2).enumerate() {
        let due = Duration::from_millis((100 << n) - 1);
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= due,
            "try {} came {gap:?} after try {}; due after {due:?}",
            n + 2,
            n + 1
        );
    }
    assert_no_violations(&cp);

    // The row: delivered, after four tries, the last failure's status kept.
    let db = server.child_killed();
    let store = SqliteStore::open(&db).await.expect("opens the store");
    let rows = store.outbox(id.parse().unwrap()).await.expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].state, OutboxState::Delivered, "{rows:?}");
    assert_eq!(rows[0].deliveries, FAILURES + 1, "{rows:?}");
    assert!(
        rows[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("500")),
        "{rows:?}"
    );
    store.close().await;
}

impl Server {
    /// Stops the server (SIGKILL: everything it acknowledged is durable), leaving its
    /// store to read.
    fn child_killed(mut self) -> PathBuf {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.db.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_attempt_is_retried_under_a_fresh_key_and_its_late_answer_is_superseded() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let late: Arc<Mutex<Option<Relayed>>> = Arc::default();
    let late_seen = late.clone();
    // Attempt 1 is accepted and never answered. When attempt 2 arrives — so attempt 1 is
    // dead and attempt 2 live — the counterpart first relays its late answer to attempt
    // 1, then answers attempt 2 at once.
    let cp = Counterpart::start(
        TEST_SECRET,
        script(move |d, cp| {
            let late = late_seen.clone();
            async move {
                if d.attempt() == 1 {
                    return Reply::Accepted;
                }
                let first = format!("{}/1", d.call_id);
                let r = cp
                    .relay(&first, json!({ "answered": 1 }))
                    .await
                    .expect("the late relay is answered");
                *late.lock().unwrap() = Some(r);
                Reply::Answer(json!({ "answered": d.attempt() }))
            }
            .boxed()
        }),
    )
    .await;
    let server = serve(dir.path(), &cp).await;
    // Short windows keep the test quick; the one thing they ask is that attempt 2 is
    // delivered and answered (a loopback round trip) within its 1 s.
    let model = channel_model("pay_retry", &["charge"], "PT1S", Some((2, "PT1S")));
    let id = server.start(&model, json!({})).await;
    let view = server.until_status(&id, "completed").await;
    assert_eq!(view["snapshot"]["variables"]["answered"], 2, "{view}");
    assert_eq!(
        server.history(&id).await,
        [
            (
                "charge".to_owned(),
                1,
                "timeout".to_owned(),
                Some("TIMEOUT".to_owned())
            ),
            ("charge".to_owned(), 2, "ok".to_owned(), None),
        ]
    );

    let seen = cp.deliveries();
    assert_eq!(seen.len(), 2, "one delivery per attempt: {seen:?}");
    let (first, second) = (&seen[0], &seen[1]);
    assert_eq!((first.attempt(), second.attempt()), (1, 2));
    assert_eq!(first.call_id, second.call_id, "one logical call");
    assert_ne!(first.key, second.key, "a fresh key for the retry");
    assert_eq!(second.key, format!("{}/2", second.call_id));
    assert_eq!(cp.reply_of(first.seq), Some(202));
    assert_eq!(cp.reply_of(second.seq), Some(200));
    let late = late
        .lock()
        .unwrap()
        .clone()
        .expect("the late answer was relayed");
    assert_relayed(&late, 409, "superseded");
    assert!(
        late.body["reason"]
            .as_str()
            .unwrap()
            .contains("attempt 2 is in flight"),
        "{}",
        late.body
    );
    // After the call is over, the dead attempt's answer is judged on that.
    let r = cp.relay(&first.key, json!({})).await.expect("answers");
    assert_relayed(&r, 409, "already_completed");
    assert_no_violations(&cp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_when_the_secret_variable_is_unset() {
    let dir = tempfile::tempdir().expect("a temp dir");
    // No tokens: a server that started would make its first-contact admin token.
    let text = format!(
        "listen = \"127.0.0.1:0\"\n\n[channels.payments]\nurl = \"http://127.0.0.1:9/hook\"\n\
         secret_env = \"{SECRET_VAR}\"\n"
    );
    let (mut child, lines) = spawn(dir.path(), &text, None);
    let status = tokio::task::spawn_blocking(move || {
        let began = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("polls the child") {
                return status;
            }
            if began.elapsed() > LIMIT {
                let _ = child.kill();
                panic!("qflow serve started without its channel's secret");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("the waiter");
    assert!(!status.success(), "{status:?}");
    let said: Vec<String> = lines.try_iter().collect();
    let said = said.join("\n");
    assert!(said.contains("channels.payments.secret_env"), "{said}");
    assert!(
        said.contains(&format!("`{SECRET_VAR}` is not set")),
        "{said}"
    );
    assert!(!said.contains("qflow: serving"), "{said}");
    // Refused before anything was written: no store, and no admin token kept whose
    // secret was never shown.
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("lists the dir")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(left, ["qflow.toml"], "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_naming_an_unconfigured_channel_is_refused_over_http() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let cp = Counterpart::start(
        TEST_SECRET,
        script(|_, _| async { Reply::Accepted }.boxed()),
    )
    .await;
    let server = serve(dir.path(), &cp).await;
    let model = channel_model("pay_refunds", &["refund"], "PT30S", None)
        .replace("q:channel=\"payments\"", "q:channel=\"refunds\"");
    let (status, body) = server
        .call(
            reqwest::Method::POST,
            "/v1/deployments",
            Some(json!({ "source": model })),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "model_refused", "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("q:channel=\"refunds\""), "{detail}");
    assert!(
        detail.contains("`refund` at "),
        "the task and its position: {detail}"
    );
    let (status, list) = server
        .call(reqwest::Method::GET, "/v1/deployments", None)
        .await;
    assert_eq!(status, 200, "{list}");
    assert!(
        !list.to_string().contains("pay_refunds"),
        "nothing was deployed: {list}"
    );
    assert_eq!(cp.delivered(), 0);
}
