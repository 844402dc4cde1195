//! Activity instances (SPEC E9) across crashes and restarts, on SQLite and on PostgreSQL:
//! two tokens in one activity are two activity instances (`pay` and `pay@2`), each
//! finishing exactly once, under its own key, whatever dies between their commits.
//!
//! - **A registered task, across a SIGKILL**: a real host process (`qflow-activity-host`)
//!   runs a parallel split whose two flows both enter the registered task `pay`. The
//!   handler call of one instance never answers in the first life; the host is killed
//!   once the other instance's outcome is committed — strictly between the two commits.
//!   A second life re-adopts the open attempt (the same attempt number; the instance
//!   whose outcome is committed is not run again) and the instance completes with one
//!   `ok` row for `pay` and one for `pay@2`. Both orders: `pay@2` open at the kill, and
//!   `pay` open at the kill.
//! - **A pull task, across a restart**: a split sends two tokens into the pull task
//!   `charge`; one worker locks both at once (two task ids, two rows: `charge` and
//!   `charge@2`), completes the first, the runtime is aborted (what a crash looks like
//!   to the store) and the store reopened, and the worker — still holding the second
//!   lock — completes the second. Each completes exactly once: a repeated answer of
//!   either is refused and changes nothing.
//!
//! The PostgreSQL halves need `QFLOW_TEST_PG_URL`; without it those halves say they are
//! skipped and pass.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_core::Snapshot;
use qflow_ops::pull::{FetchRequest, FetchTopic};
use qflow_persistence::{PgConfig, PgStore, SqliteStore};
use qflow_store::{DeploymentId, InstanceId, InstanceStatus, Store};
use qflow_tests::engine::{Engine, LIMIT};
use qflow_tests::stores;
use serde_json::json;

const HOST: &str = env!("CARGO_BIN_EXE_qflow-activity-host");
/// A bound on hangs of a host life, never a timing assertion.
const HOST_LIMIT: Duration = Duration::from_secs(60);

fn pg_url() -> Option<String> {
    match std::env::var("QFLOW_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: QFLOW_TEST_PG_URL not set");
            None
        }
    }
}

/// Where a crash story keeps its state: what the host is told, what the test opens.
enum Backend {
    Sqlite(String),
    Postgres { url: String, schema: String },
}

/// The story's store as the test opens it (only while no host runs).
enum Db {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Backend {
    fn host_args(&self) -> Vec<String> {
        match self {
            Backend::Sqlite(path) => vec!["--db".into(), path.clone()],
            Backend::Postgres { url, schema } => vec![
                "--database-url".into(),
                url.clone(),
                "--schema".into(),
                schema.clone(),
            ],
        }
    }

    async fn open(&self) -> Db {
        match self {
            Backend::Sqlite(path) => Db::Sqlite(SqliteStore::open(path).await.expect("opens")),
            Backend::Postgres { url, schema } => Db::Postgres(
                PgStore::connect_with(
                    url,
                    PgConfig {
                        schema: Some(schema.clone()),
                        max_connections: 2,
                    },
                )
                .await
                .expect("connects"),
            ),
        }
    }
}

impl Db {
    fn store(&self) -> &dyn Store {
        match self {
            Db::Sqlite(s) => s,
            Db::Postgres(s) => s,
        }
    }

    async fn close(self) {
        match self {
            Db::Sqlite(s) => s.close().await,
            Db::Postgres(s) => s.close().await,
        }
    }
}

/// A host life: the child and every line it prints.
struct Host {
    child: Child,
    lines: Receiver<String>,
    /// What it printed so far.
    seen: Vec<String>,
}

impl Host {
    fn spawn(backend: &Backend, args: &[&str]) -> Host {
        let mut child = Command::new(HOST)
            .args(backend.host_args())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawns the activity host");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Host {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until every one of `want` has been printed (in any order); fails the
    /// test with what the host said if it ends or takes longer than [`HOST_LIMIT`].
    fn wait_for(&mut self, want: &[&str]) {
        let began = Instant::now();
        while !want.iter().all(|w| self.seen.iter().any(|l| l == w)) {
            let left = HOST_LIMIT.saturating_sub(began.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "the host did not print {want:?} within {HOST_LIMIT:?}: {:?}",
                        self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the host ended before printing {want:?}: {:?}", self.seen)
                }
            }
        }
    }

    fn started(&self) -> InstanceId {
        let line = self
            .seen
            .iter()
            .find_map(|l| l.strip_prefix("started "))
            .expect("the host said what it started");
        line.parse().expect("an instance id")
    }

    /// SIGKILL (std's kill on Unix); returns what the host printed.
    fn kill(mut self) -> Vec<String> {
        self.child.kill().expect("SIGKILL the host");
        self.child.wait().expect("reap the host");
        self.seen.extend(self.lines.try_iter());
        self.seen
    }

    /// Waits for `done` and a clean exit; returns what the host printed.
    fn finish(mut self) -> Vec<String> {
        self.wait_for(&["done"]);
        let status = self.child.wait().expect("reap the host");
        assert!(status.success(), "the host exited with {status}");
        self.seen.extend(self.lines.try_iter());
        self.seen
    }
}

/// `(node, attempt, outcome)` of the instance's attempt history, in commit order.
async fn history(store: &dyn Store, id: InstanceId) -> Vec<(String, u32, String)> {
    store
        .attempts(id)
        .await
        .expect("history")
        .into_iter()
        .map(|a| (a.node, a.attempt.get(), a.outcome.as_str().to_owned()))
        .collect()
}

async fn snapshot(store: &dyn Store, id: InstanceId) -> (qflow_store::InstanceRecord, Snapshot) {
    let record = store.instance(id).await.expect("reads").expect("not lost");
    let snap = Snapshot::decode(&record.snapshot).expect("decodes");
    (record, snap)
}

fn row(node: &str, attempt: u32, outcome: &str) -> (String, u32, String) {
    (node.to_owned(), attempt, outcome.to_owned())
}

/// The host is killed while the handler call of `open` hangs and after the outcome of
/// `done` is committed; a second life finishes the instance.
async fn kill_between_the_two_commits(backend: &Backend, open: &str, done: &str) {
    let committed = format!("committed {done} 1 ok");
    let hanging = format!("ran {open} 1");

    // First life: both calls start; `done`'s outcome is committed, `open`'s never comes.
    let mut first = Host::spawn(backend, &["start", open]);
    first.wait_for(&[&committed, &hanging]);
    let id = first.started();
    let said = first.kill();
    let mut ran: Vec<&str> = said.iter().filter_map(|l| l.strip_prefix("ran ")).collect();
    ran.sort_unstable();
    assert_eq!(ran, ["pay 1", "pay@2 1"], "first life: {said:?}");

    // The kill landed between the two commits: one outcome durable, one token open.
    let db = backend.open().await;
    let (record, snap) = snapshot(db.store(), id).await;
    assert_eq!(record.status, InstanceStatus::Running);
    assert_eq!(history(db.store(), id).await, [row(done, 1, "ok")]);
    assert_eq!(
        snap.tokens(),
        [open.to_owned()],
        "the open instance's token"
    );
    db.close().await;

    // Second life: the open attempt is re-adopted under its own name and attempt; the
    // instance whose outcome is committed is not run again.
    let second = Host::spawn(backend, &["resume"]);
    let said = second.finish();
    let ran: Vec<&str> = said.iter().filter_map(|l| l.strip_prefix("ran ")).collect();
    assert_eq!(ran, [format!("{open} 1")], "second life: {said:?}");

    // Each activity instance's outcome exactly once, under its own key.
    let db = backend.open().await;
    let (record, snap) = snapshot(db.store(), id).await;
    assert_eq!(
        record.status,
        InstanceStatus::Completed,
        "{:?}",
        snap.failure()
    );
    assert_eq!(
        history(db.store(), id).await,
        [row(done, 1, "ok"), row(open, 1, "ok")]
    );
    assert!(snap.tokens().is_empty(), "{:?}", snap.tokens());
    let paid: BTreeMap<&str, &serde_json::Value> = snap
        .variables()
        .iter()
        .filter(|(k, _)| k.starts_with("paid_"))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    assert_eq!(
        paid,
        [("paid_pay", &json!(1)), ("paid_pay_2", &json!(1))].into(),
        "both outcomes reached the instance"
    );
    assert!(
        db.store().timers(id).await.expect("timers").is_empty(),
        "the finished instance left timer rows behind"
    );
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_of_one_task_each_finish_once_across_a_sigkill_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (open, done) in [("pay@2", "pay"), ("pay", "pay@2")] {
        let path = dir.path().join(format!("kill-{open}.sqlite"));
        let backend = Backend::Sqlite(path.display().to_string());
        kill_between_the_two_commits(&backend, open, done).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_of_one_task_each_finish_once_across_a_sigkill_on_postgres() {
    let Some(url) = pg_url() else { return };
    for (open, done) in [("pay@2", "pay"), ("pay", "pay@2")] {
        let schema = format!("qflow_activities_{}", uuid::Uuid::new_v4().simple());
        let backend = Backend::Postgres {
            url: url.clone(),
            schema: schema.clone(),
        };
        kill_between_the_two_commits(&backend, open, done).await;
        let db = backend.open().await;
        if let Db::Postgres(pg) = &db {
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(pg.pool())
                .await
                .expect("drop schema");
        }
        db.close().await;
    }
}

/// A split whose two flows both enter the pull task `charge`, then an end.
const SPLIT_INTO_CHARGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1"
             id="defs" targetNamespace="urn:qflow:tests">
  <process id="split_charge" isExecutable="true">
    <startEvent id="start"/>
    <parallelGateway id="split"/>
    <serviceTask id="charge" q:topic="charge"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="split"/>
    <sequenceFlow id="f1" sourceRef="split" targetRef="charge"/>
    <sequenceFlow id="f2" sourceRef="split" targetRef="charge"/>
    <sequenceFlow id="f3" sourceRef="charge" targetRef="end"/>
  </process>
</definitions>"#;

const WORKER: &str = "billing-1";

fn fetch(worker: &str) -> FetchRequest {
    FetchRequest {
        worker: worker.to_owned(),
        max_tasks: 10,
        topics: vec![FetchTopic {
            name: "charge".to_owned(),
            // Far beyond the story: no lock expires while it runs.
            lock_ms: 600_000,
            variables: None,
        }],
        wait_ms: 0,
    }
}

/// `(node, attempt, worker)` of the instance's pull-task rows, by node.
async fn pull_rows(store: &dyn Store, id: InstanceId) -> Vec<(String, u32, Option<String>)> {
    let mut rows: Vec<_> = store
        .pull_tasks(id)
        .await
        .expect("rows")
        .into_iter()
        .map(|r| {
            assert_eq!(r.topic, "charge");
            (r.node, r.attempt.get(), r.worker)
        })
        .collect();
    rows.sort();
    rows
}

/// `(node, attempt, outcome, worker)` of the instance's attempt history, in commit order.
async fn worker_history(
    store: &dyn Store,
    id: InstanceId,
) -> Vec<(String, u32, String, Option<String>)> {
    store
        .attempts(id)
        .await
        .expect("history")
        .into_iter()
        .map(|a| {
            (
                a.node,
                a.attempt.get(),
                a.outcome.as_str().to_owned(),
                a.worker,
            )
        })
        .collect()
}

fn ok_by_worker(node: &str) -> (String, u32, String, Option<String>) {
    (node.to_owned(), 1, "ok".to_owned(), Some(WORKER.to_owned()))
}

/// A repeated answer to `task` is refused and changes nothing.
/// Another worker's fetch gets nothing: every row is locked (`why` says by whom).
async fn nothing_for_another_worker(engine: &Engine, why: &str) {
    let got = engine
        .ops
        .fetch_and_lock(fetch("other"))
        .await
        .expect("fetches");
    assert!(got.is_empty(), "{why}: {got:?}");
}

async fn refused_without_effect(engine: &Engine, store: &dyn Store, id: InstanceId, task: &str) {
    let (before, _) = snapshot(store, id).await;
    let history_before = worker_history(store, id).await;
    let answer = engine
        .ops
        .complete_pull(task, WORKER, [("again".to_owned(), json!(true))].into())
        .await;
    assert!(
        matches!(answer, Err(qflow_ops::Error::Refused(_))),
        "a second completion of {task} is refused: {answer:?}"
    );
    let (after, snap) = snapshot(store, id).await;
    assert_eq!(
        after.fence, before.fence,
        "a refused answer commits nothing"
    );
    assert_eq!(after.status, before.status);
    assert!(!snap.variables().contains_key("again"));
    assert_eq!(worker_history(store, id).await, history_before);
}

/// Kills the engine the way a crash would: no graceful hand-over, nothing flushed.
fn crash(engine: Engine) {
    let Engine {
        runtime,
        dispatcher,
        ops,
    } = engine;
    assert!(dispatcher.is_none());
    drop(ops);
    match Arc::try_unwrap(runtime) {
        Ok(rt) => rt.abort(),
        Err(_) => panic!("the runtime is still in use"),
    }
}

async fn pull_story<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "activity-instances-test");
    let dep = DeploymentId(
        engine
            .ops
            .deploy(SPLIT_INTO_CHARGE, None)
            .await
            .expect("deploys")
            .id,
    );
    let id = engine
        .runtime
        .start_instance(dep, Default::default())
        .await
        .expect("starts");

    // Two tokens at one pull task: two offered rows, one per activity instance.
    assert_eq!(
        pull_rows(&*store, id).await,
        [
            ("charge".to_owned(), 1, None),
            ("charge@2".to_owned(), 1, None)
        ]
    );

    // One worker locks both at once: two task ids, two locked rows.
    let mut locked = engine
        .ops
        .fetch_and_lock(fetch(WORKER))
        .await
        .expect("fetches");
    locked.sort_by(|a, b| a.node.cmp(&b.node));
    let ids: Vec<&str> = locked.iter().map(|t| t.id.as_str()).collect();
    let first = format!("{id}:1:charge");
    let second = format!("{id}:1:charge@2");
    assert_eq!(ids, [first.as_str(), second.as_str()], "{locked:?}");
    assert!(locked
        .iter()
        .all(|t| t.worker == WORKER && t.instance == id.to_string()));
    let held = |node: &str| (node.to_owned(), 1, Some(WORKER.to_owned()));
    assert_eq!(
        pull_rows(&*store, id).await,
        [held("charge"), held("charge@2")]
    );
    nothing_for_another_worker(&engine, "both are locked").await;

    // The first completion: one instance leaves, the other's lock stays.
    let applied = engine
        .ops
        .complete_pull(
            &first,
            WORKER,
            [("charged_1".to_owned(), json!("r-1"))].into(),
        )
        .await
        .expect("completes the first");
    assert_eq!(applied.status, "running");
    assert_eq!(worker_history(&*store, id).await, [ok_by_worker("charge")]);
    assert_eq!(pull_rows(&*store, id).await, [held("charge@2")]);

    // The runtime dies and the store is reopened, as a restarted process would.
    crash(engine);
    drop(store);
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "activity-instances-test");

    // The second lock survived the restart, the first instance's answer is spent.
    let (record, snap) = snapshot(&*store, id).await;
    assert_eq!(record.status, InstanceStatus::Running);
    assert_eq!(snap.tokens(), ["charge@2".to_owned()]);
    assert_eq!(pull_rows(&*store, id).await, [held("charge@2")]);
    nothing_for_another_worker(&engine, "the second is still locked by its worker").await;
    refused_without_effect(&engine, &*store, id, &first).await;

    // The second completion ends the instance.
    let applied = engine
        .ops
        .complete_pull(
            &second,
            WORKER,
            [("charged_2".to_owned(), json!("r-2"))].into(),
        )
        .await
        .expect("completes the second");
    assert_eq!(applied.status, "completed");
    let (record, snap) = snapshot(&*store, id).await;
    assert_eq!(
        record.status,
        InstanceStatus::Completed,
        "{:?}",
        snap.failure()
    );
    assert_eq!(snap.variables()["charged_1"], json!("r-1"));
    assert_eq!(snap.variables()["charged_2"], json!("r-2"));
    assert_eq!(
        worker_history(&*store, id).await,
        [ok_by_worker("charge"), ok_by_worker("charge@2")]
    );
    assert!(pull_rows(&*store, id).await.is_empty());
    assert!(store.timers(id).await.expect("timers").is_empty());
    for task in [&first, &second] {
        refused_without_effect(&engine, &*store, id, task).await;
    }
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_locks_of_one_pull_task_each_complete_once_across_a_restart_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let open = stores::sqlite(dir.path().join("pull.sqlite"));
    tokio::time::timeout(LIMIT, pull_story(open))
        .await
        .expect("the story ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_locks_of_one_pull_task_each_complete_once_across_a_restart_on_postgres() {
    if let Some(open) = stores::postgres("activities", 6) {
        tokio::time::timeout(LIMIT, pull_story(open))
            .await
            .expect("the story ends");
    }
}
