//! Channel calls across SIGKILLs (SPEC C1, C2, C7a; issue 9): a real host process
//! (`qflow-server-host --channel-url`, the HTTP API and the outbox dispatcher over a
//! SQLite file, with a webhook channel) runs instances of two channel calls in sequence
//! against a loopback counterpart in this test, and is SIGKILLed 20 times, each time at
//! a point the test forces:
//!
//! - **between commit and delivery** (even lives): the counterpart's gate is closed for
//!   the whole life, so every request the host commits — the fresh instances' first
//!   calls, the second calls the relayed answers start — and sends is held unlogged;
//!   the host is killed once the starts were acknowledged (committed), with their
//!   requests undelivered;
//! - **between delivery and relay** (odd lives): the counterpart holds the first
//!   delivery of some key it receives and the host is killed while it waits for the
//!   answer: the counterpart has the request, the engine has no answer. The answers the
//!   counterpart accepted (`202`) are relayed only in the next life, so every
//!   asynchronous answer crosses a kill too.
//!
//! After each kill the test reads the store (the host is dead) and checks the kill
//! landed where it should. After the loop a last life runs everything to the end.
//! Checked: every instance completes with exactly one attempt per call (the timeouts
//! are 10 minutes: only a retry may mint a key, and none is due), every outbox row is
//! delivered, every key the counterpart ever saw is attempt 1 of a call of a started
//! instance, and every repeated delivery carries the same key and the same request
//! (the counterpart's log proves it; each held key was delivered again).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use qflow_core::Snapshot;
use qflow_persistence::SqliteStore;
use qflow_store::{InstanceId, InstanceStatus, OutboxState, Store};
use qflow_tests::channel_model;
use qflow_tests::counterpart::{call, Counterpart, Delivery, Engine, Reply, TEST_SECRET};
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};

const HOST: &str = env!("CARGO_BIN_EXE_qflow-server-host");
const TOKEN: &str = "qf_channel-crash-test-token";
const KILLS: u32 = 20;
const FIRST_STARTS: usize = 30;
const STARTS_PER_LIFE: usize = 6;
const CALLS: [&str; 2] = ["charge", "ship"];
/// A bound on hangs, never a timing assertion.
const LIMIT: Duration = Duration::from_secs(120);

/// What the counterpart does with an instance's calls (`mode`, from the variables).
fn mode(i: usize) -> &'static str {
    ["sync", "async", "flaky"][i % 3]
}

/// The counterpart's script and what the test needs of it across lives.
struct Crash {
    /// Armed by the test: the next first delivery of a key is held, its key sent here.
    hold: Mutex<Option<oneshot::Sender<String>>>,
    /// Bumped after each kill: held deliveries are let go (their sender is dead).
    kills: watch::Sender<u32>,
    /// Keys the counterpart accepted (`202`) and owes an answer, with their node.
    owed: Mutex<BTreeMap<String, String>>,
    /// Keys whose answer was relayed, with the verdict.
    relayed: Mutex<BTreeMap<String, String>>,
}

fn answer_of(d: &Delivery) -> Value {
    json!({ format!("{}_by", d.request.node): d.key })
}

impl Crash {
    async fn reply(self: Arc<Self>, d: Delivery) -> Reply {
        if d.nth_of_key == 1 {
            let hold = self.hold.lock().unwrap().take();
            if let Some(held) = hold {
                let mut kills = self.kills.subscribe();
                let before = *kills.borrow_and_update();
                let _ = held.send(d.key.clone());
                let _ = kills.wait_for(|k| *k > before).await;
                return Reply::Fail(503);
            }
        }
        match d.variable("mode").and_then(Value::as_str) {
            Some("sync") => Reply::Answer(answer_of(&d)),
            Some("flaky") if d.nth_of_key == 1 => Reply::Fail(500),
            Some("flaky") => Reply::Answer(answer_of(&d)),
            _ => {
                if !self.relayed.lock().unwrap().contains_key(&d.key) {
                    let node = d.request.node.clone();
                    self.owed.lock().unwrap().insert(d.key.clone(), node);
                }
                Reply::Accepted
            }
        }
    }

    /// Relays every owed answer to the live host; what could not be relayed stays owed.
    async fn pay_debts(&self, cp: &Counterpart) {
        let owed: Vec<(String, String)> = self
            .owed
            .lock()
            .unwrap()
            .iter()
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        for (key, node) in owed {
            let Ok(r) = cp.relay(&key, json!({ format!("{node}_by"): key })).await else {
                continue;
            };
            // No call has a retry: an answer is taken, or the call was already answered
            // (a repeated delivery of an accepted key, relayed before).
            assert!(
                (r.status == 200 && r.verdict() == "resumed")
                    || (r.status == 409 && r.verdict() == "already_completed"),
                "relaying {key}: {} {}",
                r.status,
                r.body
            );
            self.owed.lock().unwrap().remove(&key);
            self.relayed
                .lock()
                .unwrap()
                .insert(key, r.verdict().to_owned());
        }
    }
}

struct Host {
    child: Child,
    engine: Engine,
}

fn spawn_host(db: &str, url: &str) -> Host {
    let mut child = Command::new(HOST)
        .args(["--db", db, "--listen", "127.0.0.1:0", "--fast-recovery"])
        .args(["--channel-url", url])
        .env("QFLOW_HOST_TOKEN", TOKEN)
        .env("QFLOW_HOST_CHANNEL_SECRET", TEST_SECRET)
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
    Host {
        child,
        engine: Engine {
            addr,
            token: TOKEN.to_owned(),
        },
    }
}

fn kill(mut host: Host) {
    host.child.kill().expect("SIGKILL the host"); // std's kill is SIGKILL on Unix
    host.child.wait().expect("reap the host");
}

/// What the kills hit, read from the store after each one.
#[derive(Debug, Default)]
struct Evidence {
    kills_before_delivery: u32,
    kills_before_relay: u32,
    /// Rows found at a kill committed (and sent) with their request never received by
    /// the counterpart, summed over the kills, and how many distinct keys they were.
    committed_undelivered: usize,
    committed_undelivered_keys: usize,
    /// Held deliveries: received by the counterpart, no answer in the engine.
    held_unanswered: usize,
    /// Accepted requests whose answer was still owed at a kill.
    accepted_unrelayed: usize,
    /// Deliveries of a key again after a try that a kill cut short (held, or answered
    /// but not recorded), rather than after a scripted `500`.
    redelivered_after_kill: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_hosts_lose_no_channel_call_and_redeliver_under_the_same_key() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir
        .path()
        .join("channels.sqlite")
        .to_string_lossy()
        .into_owned();
    let (kills, _) = watch::channel(0u32);
    let crash = Arc::new(Crash {
        hold: Mutex::new(None),
        kills,
        owed: Mutex::new(BTreeMap::new()),
        relayed: Mutex::new(BTreeMap::new()),
    });
    let script = crash.clone();
    let cp = Counterpart::start(
        TEST_SECRET,
        Arc::new(move |d, _| script.clone().reply(d).boxed()),
    )
    .await;
    let http = reqwest::Client::new();
    let mut deployment = None;
    let mut started: Vec<InstanceId> = Vec::new();
    let mut held_keys = Vec::new();
    let mut evidence = Evidence::default();
    let mut undelivered_keys = BTreeSet::new();

    for life in 1..=KILLS {
        let before_delivery = life % 2 == 0;
        if before_delivery {
            cp.close_gate();
        }
        let host = spawn_host(&db, &cp.url());
        cp.set_engine(Some(host.engine.clone()));
        crash.pay_debts(&cp).await;
        let dep = match deployment {
            Some(dep) => dep,
            None => {
                let model = channel_model("crash", &CALLS, "PT10M", None);
                let (status, body) = call(
                    &http,
                    &host.engine,
                    reqwest::Method::POST,
                    "/v1/deployments",
                    Some(json!({ "source": model })),
                )
                .await
                .expect("deploys");
                assert_eq!(status, 200, "{body}");
                *deployment.insert(body["id"].as_i64().expect("a deployment id"))
            }
        };
        let (armed, held) = oneshot::channel();
        if !before_delivery {
            *crash.hold.lock().unwrap() = Some(armed);
        }
        let n = if life == 1 {
            FIRST_STARTS
        } else {
            STARTS_PER_LIFE
        };
        let fresh = start(&http, &host.engine, dep, started.len(), n).await;
        started.extend(&fresh);
        let held_key = if before_delivery {
            None
        } else {
            let key = tokio::time::timeout(LIMIT, held)
                .await
                .expect("a first delivery to hold")
                .expect("the hold fired");
            // And an accepted request whose answer is owed: this life's fresh
            // asynchronous calls are delivered beside the held one.
            let began = Instant::now();
            while crash.owed.lock().unwrap().is_empty() {
                assert!(began.elapsed() < LIMIT, "life {life}: nothing was accepted");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Some(key)
        };
        kill(host);
        cp.set_engine(None);
        crash.kills.send_modify(|k| *k += 1);
        if before_delivery {
            cp.open_gate();
        }

        // Where the kill landed, from the store the dead host left.
        let store = SqliteStore::open(&db).await.expect("opens the store");
        let seen = cp.by_key();
        let mut undelivered = BTreeSet::new();
        for id in &started {
            for row in store.outbox(*id).await.expect("outbox rows") {
                if row.state == OutboxState::Pending && !seen.contains_key(&row.key) {
                    undelivered.insert(row.key);
                }
            }
        }
        evidence.committed_undelivered += undelivered.len();
        undelivered_keys.extend(undelivered.iter().cloned());
        evidence.accepted_unrelayed += crash.owed.lock().unwrap().len();
        match held_key {
            None => {
                evidence.kills_before_delivery += 1;
                for id in &fresh {
                    let first = format!("{id}/");
                    assert!(
                        undelivered.iter().any(|k| k.starts_with(&first)),
                        "life {life}: the first call of {id} was committed and never delivered"
                    );
                }
            }
            Some(key) => {
                evidence.kills_before_relay += 1;
                let id: InstanceId = key.split('/').next().unwrap().parse().unwrap();
                let row = store
                    .outbox(id)
                    .await
                    .expect("outbox rows")
                    .into_iter()
                    .find(|r| r.key == key)
                    .expect("the held request's row");
                assert_eq!(row.state, OutboxState::Pending, "life {life}: {row:?}");
                let answered = store.attempts(id).await.expect("history");
                assert!(
                    answered.iter().all(|a| a.node != row.node),
                    "life {life}: the held call of {id} has an answer: {answered:?}"
                );
                evidence.held_unanswered += 1;
                held_keys.push(key);
            }
        }
        store.close().await;
    }

    // The last life runs everything to the end.
    let host = spawn_host(&db, &cp.url());
    cp.set_engine(Some(host.engine.clone()));
    let began = Instant::now();
    loop {
        crash.pay_debts(&cp).await;
        let (status, counts) = call(
            &http,
            &host.engine,
            reqwest::Method::GET,
            "/v1/instance-counts",
            None,
        )
        .await
        .expect("counts");
        assert_eq!(status, 200, "{counts}");
        if counts["running"] == 0 && undelivered_rows(&db).await == 0 {
            break;
        }
        assert!(
            began.elapsed() < LIMIT,
            "the last life did not finish: {counts}, {} rows undelivered",
            undelivered_rows(&db).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill(host);

    let violations = cp.violations();
    assert!(violations.is_empty(), "{violations:#?}");
    let store = SqliteStore::open(&db).await.expect("opens the store");
    let seen = cp.by_key();
    let mut keys = BTreeSet::new();
    for id in &started {
        let rec = store.instance(*id).await.unwrap().expect("not lost");
        assert_eq!(rec.status, InstanceStatus::Completed, "{id}");
        let history: Vec<(String, u32, String)> = store
            .attempts(*id)
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.node, a.attempt.get(), a.outcome.as_str().to_owned()))
            .collect();
        let want: Vec<(String, u32, String)> = CALLS
            .iter()
            .map(|c| ((*c).to_owned(), 1, "ok".to_owned()))
            .collect();
        assert_eq!(history, want, "{id}: one attempt per call");
        let vars = Snapshot::decode(&rec.snapshot).unwrap().variables().clone();
        let rows = store.outbox(*id).await.unwrap();
        assert_eq!(rows.len(), CALLS.len(), "{id}: {rows:?}");
        for row in rows {
            assert_eq!(row.state, OutboxState::Delivered, "{row:?}");
            assert_eq!(row.key, format!("{}/1", row.call_id), "{row:?}");
            assert!(
                seen.contains_key(&row.key),
                "{row:?} never reached the counterpart"
            );
            assert_eq!(
                vars.get(&format!("{}_by", row.node)),
                Some(&json!(row.key)),
                "{id}: the answer taken is the one to {}",
                row.key
            );
            keys.insert(row.key);
        }
    }
    let strangers: Vec<&String> = seen.keys().filter(|k| !keys.contains(*k)).collect();
    assert!(strangers.is_empty(), "keys no row has: {strangers:?}");
    for key in &held_keys {
        assert!(
            seen[key].len() >= 2,
            "{key} was held at a kill and never delivered again"
        );
    }
    evidence.committed_undelivered_keys = undelivered_keys.len();
    for ds in seen.values() {
        evidence.redelivered_after_kill += ds
            .windows(2)
            .filter(|pair| cp.reply_of(pair[0].seq) != Some(500))
            .count();
    }
    assert!(evidence.redelivered_after_kill >= held_keys.len());
    let repeated = seen.values().filter(|ds| ds.len() > 1).count();
    let deliveries: usize = seen.values().map(Vec::len).sum();
    let verdicts = crash.relayed.lock().unwrap().clone();
    let resumed = verdicts.values().filter(|v| *v == "resumed").count();
    eprintln!(
        "{KILLS} kills, {} instances, {} keys, {deliveries} deliveries, {repeated} keys \
         delivered more than once (always the same request), {} relays ({resumed} \
         resumed), gated {}: {evidence:#?}",
        started.len(),
        keys.len(),
        verdicts.len(),
        cp.gated(),
    );
    assert_eq!(
        evidence.kills_before_delivery + evidence.kills_before_relay,
        KILLS
    );
    assert!(evidence.accepted_unrelayed >= evidence.kills_before_relay as usize);
    store.close().await;
}

/// Starts `n` instances over the API, numbered from `from` (their mode follows the
/// number); each is committed when its `201` comes back.
async fn start(
    http: &reqwest::Client,
    engine: &Engine,
    dep: i64,
    from: usize,
    n: usize,
) -> Vec<InstanceId> {
    let mut ids = Vec::with_capacity(n);
    for i in from..from + n {
        let body = json!({ "deployment": dep, "variables": { "mode": mode(i), "i": i } });
        let (status, started) = call(
            http,
            engine,
            reqwest::Method::POST,
            "/v1/instances",
            Some(body),
        )
        .await
        .expect("starts");
        assert_eq!(status, 201, "{started}");
        ids.push(started["instance"].as_str().unwrap().parse().unwrap());
    }
    ids
}

/// Outbox rows not delivered yet, read beside the running host (read-only).
async fn undelivered_rows(db: &str) -> i64 {
    use sqlx::ConnectOptions;
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true)
        .connect()
        .await
        .expect("a read-only connection");
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE state <> 'delivered'")
        .fetch_one(&mut conn)
        .await
        .expect("counts rows")
}
