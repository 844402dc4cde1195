//! The repair loop holds for every kind of task (SPEC O2, O3, E6): an instance FAILED at a
//! task of any kind — by exhausting its budget, or by a failure nothing retries — is
//! migrated onto a fixed version that renames the task and changes its policy, resumed
//! with either budget choice, and ends as the fixed version says. Each cell of the matrix
//! goes through one operator surface: the HTTP API of an embedded server on a loopback
//! socket, or the `qflow` binary on the same store while no runtime runs (its resumed
//! attempt is handed to the next runtime, as `docs/operations.md` says). Every dry run's
//! diff must equal what the real migration reports and what the store then holds. Both
//! stores: SQLite, and PostgreSQL when `QFLOW_TEST_PG_URL` is set (otherwise that half
//! says it is skipped).
//!
//! A channel call's counterpart is a loopback webhook (`qflow_tests::counterpart`) that
//! leaves every request unanswered until the model is fixed, so each attempt times out.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_channels::{Channels, Dispatcher, DispatcherConfig};
use qflow_core::{Snapshot, TaskOutcome};
use qflow_ops::pull::{FetchRequest, FetchTopic};
use qflow_ops::{parse_instance_id, Ops, StartRequest};
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock, TaskContext};
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use qflow_store::{InstanceStatus, Store};
use qflow_tests::counterpart::{Counterpart, Reply, Script, TEST_SECRET};
use qflow_tests::stores::{postgres, sqlite, Opener};
use serde_json::{json, Value};

const QFLOW: &str = env!("CARGO_BIN_EXE_qflow");
const SECRET: &str = "repair-matrix-operator-secret";
/// The bound on every wait for the engine (a hang guard, not a timing check).
const PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Registered,
    Channel,
    PullTopic,
    PullCamunda,
    PullZeebe,
    User,
    Script,
    Call,
    MultiInstance,
    InsideSubProcess,
}

const KINDS: [Kind; 10] = [
    Kind::Registered,
    Kind::Channel,
    Kind::PullTopic,
    Kind::PullCamunda,
    Kind::PullZeebe,
    Kind::User,
    Kind::Script,
    Kind::Call,
    Kind::MultiInstance,
    Kind::InsideSubProcess,
];

/// How the instance failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Every attempt of its budget failed.
    Exhausted,
    /// A failure nothing retries: a non-retryable code, an uncaught BPMN error, an
    /// expression that does not evaluate.
    Final,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    Http,
    Cli,
}

const OLD: &str = "charge";
const NEW: &str = "collect";

impl Kind {
    fn process(self) -> String {
        format!("{self:?}").to_lowercase()
    }

    fn failures(self) -> &'static [Failure] {
        match self {
            Kind::Registered | Kind::PullTopic | Kind::PullCamunda | Kind::PullZeebe => {
                &[Failure::Exhausted, Failure::Final]
            }
            Kind::User | Kind::Script => &[Failure::Final],
            Kind::Channel | Kind::Call | Kind::MultiInstance | Kind::InsideSubProcess => {
                &[Failure::Exhausted]
            }
        }
    }

    /// Whether the task counts attempts (so the history has rows under both names).
    fn counts_attempts(self) -> bool {
        !matches!(self, Kind::User | Kind::Script)
    }

    /// The task `id` in the broken version (`fixed` false) or the fixed one: the fixed
    /// one has a larger budget (or, for a Zeebe job, more `retries`), or a fixed script.
    fn task(self, id: &str, fixed: bool) -> String {
        let max = if fixed { 4 } else { 2 };
        // A handler's code is a declared error's (`definitions`); a call activity fails
        // only with the engine's own codes.
        let non_retryable = match self {
            Kind::Call | Kind::Channel => "",
            _ => r#" nonRetryableCodes="DECLINED""#,
        };
        let retry = format!(
            r#"<q:retry maxAttempts="{max}" initialInterval="PT0.2S" maxInterval="PT0.2S"
                 jitter="none"{non_retryable}/>"#
        );
        let registered = |extra: &str| {
            format!(
                r#"<serviceTask id="{id}" q:task="work"><extensionElements>{retry}</extensionElements>{extra}</serviceTask>"#
            )
        };
        match self {
            Kind::Registered | Kind::InsideSubProcess => registered(""),
            Kind::MultiInstance => registered(
                r#"<multiInstanceLoopCharacteristics isSequential="false">
                     <loopCardinality>2</loopCardinality></multiInstanceLoopCharacteristics>"#,
            ),
            Kind::PullTopic => format!(r#"<serviceTask id="{id}" q:topic="charge-q"/>"#),
            Kind::PullCamunda => format!(
                r#"<serviceTask id="{id}" camunda:type="external" camunda:topic="charge-c"/>"#
            ),
            Kind::PullZeebe => {
                let retries = if fixed { 5 } else { 2 };
                format!(
                    r#"<serviceTask id="{id}"><extensionElements>
                         <zeebe:taskDefinition type="charge-z" retries="{retries}"/>
                       </extensionElements></serviceTask>"#
                )
            }
            Kind::Channel => format!(
                r#"<serviceTask id="{id}" q:channel="payments"><extensionElements>{retry}
                     <q:timeout duration="PT1S"/></extensionElements></serviceTask>"#
            ),
            Kind::User => format!(r#"<userTask id="{id}"/>"#),
            Kind::Script => {
                let expr = if fixed { "price * 2" } else { "price * qty" };
                format!(
                    r#"<scriptTask id="{id}"><extensionElements>
                         <q:script expression="{expr}" resultVariable="total"/>
                       </extensionElements></scriptTask>"#
                )
            }
            Kind::Call => format!(
                r#"<callActivity id="{id}" calledElement="child"><extensionElements>{retry}
                   </extensionElements></callActivity>"#
            ),
        }
    }

    /// The model of this kind's process with the task named `id`.
    fn model(self, id: &str, fixed: bool) -> String {
        let task = self.task(id, fixed);
        let body = if self == Kind::InsideSubProcess {
            format!(
                r#"<sequenceFlow id="f0" sourceRef="s" targetRef="order"/>
                <subProcess id="order"><startEvent id="os"/>
                  <sequenceFlow id="o1" sourceRef="os" targetRef="{id}"/>{task}
                  <sequenceFlow id="o2" sourceRef="{id}" targetRef="oe"/><endEvent id="oe"/>
                </subProcess>
                <sequenceFlow id="f1" sourceRef="order" targetRef="e"/>"#
            )
        } else {
            format!(
                r#"<sequenceFlow id="f0" sourceRef="s" targetRef="{id}"/>{task}
                <sequenceFlow id="f1" sourceRef="{id}" targetRef="e"/>"#
            )
        };
        definitions(
            &self.process(),
            &format!(r#"<startEvent id="s"/>{body}<endEvent id="e"/>"#),
        )
    }
}

fn definitions(process: &str, body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1"
             xmlns:camunda="http://camunda.org/schema/1.0/bpmn"
             xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
             id="defs-{process}" targetNamespace="urn:qflow:matrix">
  <error id="declined" errorCode="DECLINED"/>
  <process id="{process}" isExecutable="true">{body}</process>
</definitions>"#
    )
}

/// The process a call activity calls: one registered task that fails as its variables say.
fn child_model() -> String {
    definitions(
        "child",
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
        <serviceTask id="work" q:task="work"/>
        <sequenceFlow id="f1" sourceRef="work" targetRef="e"/><endEvent id="e"/>"#,
    )
}

/// One instance of the matrix.
#[derive(Debug, Clone)]
struct Cell {
    kind: Kind,
    failure: Failure,
    surface: Surface,
    reset: bool,
    id: String,
    source: i64,
    target: i64,
}

impl Cell {
    fn code(&self) -> &'static str {
        match (self.kind, self.failure) {
            (Kind::PullTopic | Kind::PullCamunda | Kind::PullZeebe, Failure::Exhausted) => {
                "PULL_TASK_FAILED"
            }
            (Kind::PullTopic | Kind::PullCamunda | Kind::PullZeebe | Kind::User, _) => {
                "UNCAUGHT_BPMN_ERROR"
            }
            (Kind::Script, _) => "EXPRESSION_FAILED",
            (Kind::Call, _) => "CALLED_INSTANCE_FAILED",
            (Kind::Channel, _) => "TIMEOUT",
            (_, Failure::Exhausted) => "DOWN",
            (_, Failure::Final) => "DECLINED",
        }
    }

    fn plan(&self) -> Value {
        json!({"source": self.source, "target": self.target, "mapping": {OLD: NEW},
               "instances": [self.id]})
    }
}

/// An embedded server: a runtime with the `work` handler, the HTTP API on a loopback
/// socket, and the library API for the workers' and the task list's actions.
struct Host {
    runtime: Arc<Runtime>,
    /// Delivers the channel calls' requests, and carries out the engine's own outbox
    /// rows: a call activity's child starts and the child's report of its end.
    dispatcher: Dispatcher,
    ops: Ops,
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    stop_serving: tokio::sync::oneshot::Sender<()>,
}

impl Host {
    async fn start(store: Arc<dyn Store>, fixed: Arc<AtomicBool>, counterpart: &str) -> Host {
        // `work` fails with the code the instance's `fail` variable names until the model
        // is fixed; then it succeeds.
        let handlers = AsyncHandlers::new().with_sync("work", move |ctx: &TaskContext<'_>| {
            if fixed.load(Ordering::SeqCst) {
                return TaskOutcome::Ok(Default::default());
            }
            let code = ctx
                .inputs
                .get("fail")
                .and_then(Value::as_str)
                .unwrap_or("DOWN");
            TaskOutcome::Fail {
                code: code.to_owned(),
                message: "the gateway said no".to_owned(),
            }
        });
        let channels = payments(counterpart);
        let config = RuntimeConfig {
            lanes: 2,
            poll_interval_ms: 10,
            channels: channels.names(),
            ..RuntimeConfig::default()
        };
        let runtime = Arc::new(Runtime::start(
            store,
            handlers,
            Arc::new(SystemClock),
            config,
        ));
        let dispatcher_config = DispatcherConfig {
            poll_interval_ms: 20,
            ..DispatcherConfig::default()
        };
        let dispatcher = Dispatcher::start(runtime.clone(), Arc::new(channels), dispatcher_config);
        let ops = Ops::with_runtime(runtime.clone(), "matrix");
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(hash_token(SECRET), &mut sha256).expect("a sha256");
        let tokens = Tokens::new(vec![Token {
            name: "operator".to_owned(),
            sha256,
            scopes: Scope::ALL.into_iter().collect(),
        }]);
        let app = qflow_server::router(
            ops.clone(),
            tokens,
            Some(runtime.stats()),
            &Limits::default(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (stop_serving, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .expect("serves");
        });
        Host {
            runtime,
            dispatcher,
            ops,
            addr,
            server,
            stop_serving,
        }
    }

    async fn stop(self) {
        // Graceful: the server's connections close, and with them its share of the runtime.
        let _ = self.stop_serving.send(());
        self.server.await.expect("the server stops");
        self.dispatcher.shutdown().await;
        drop(self.ops);
        match Arc::try_unwrap(self.runtime) {
            Ok(runtime) => runtime.shutdown().await,
            Err(_) => panic!("the runtime is still shared"),
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(format!("http://{}{path}", self.addr))
            .header("authorization", format!("Bearer {SECRET}"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("json"))
            .send()
            .await
            .expect("the server answers");
        let status = r.status().as_u16();
        let text = r.text().await.expect("a body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// The webhook channel `payments` to the counterpart at `url`, built from the settings a
/// `[channels.payments]` table gives `qflow serve`.
fn payments(url: &str) -> Channels {
    qflow_tests::test_webhook("payments", url, 1_000, 50, 500)
}

/// The counterpart of `payments`: it takes every request and never answers while the
/// model is broken (so the call's timeout fails the attempt), and answers at once once it
/// is fixed.
async fn counterpart(fixed: Arc<AtomicBool>) -> Counterpart {
    let script: Script = Arc::new(move |_delivery, _counterpart| {
        let fixed = fixed.load(Ordering::SeqCst);
        Box::pin(async move {
            if fixed {
                Reply::Answer(json!({"receipt": "r-1"}))
            } else {
                Reply::Accepted
            }
        })
    });
    Counterpart::start(TEST_SECRET, script).await
}

async fn status_of(store: &dyn Store, id: &str) -> (InstanceStatus, Option<String>) {
    let rec = store
        .instance(parse_instance_id(id).expect("an id"))
        .await
        .expect("reads")
        .expect("exists");
    (rec.status, rec.failure_code)
}

/// The decoded view of the instance's stored snapshot, and its fence.
async fn view_of(store: &dyn Store, id: &str) -> (Value, u64) {
    let rec = store
        .instance(parse_instance_id(id).expect("an id"))
        .await
        .expect("reads")
        .expect("exists");
    let snap = Snapshot::decode(&rec.snapshot).expect("decodes");
    (snap.inspect(), rec.fence)
}

/// The lines a migration reports for what changed between two decoded views (the same
/// rendering as `qflow migrate`'s `changes`).
fn diff(before: &Value, after: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let b = before.as_object().unwrap_or(&empty);
    let a = after.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    let show = |v: Option<&Value>| v.map_or("(none)".to_owned(), |v| v.to_string());
    keys.into_iter()
        .filter(|k| b.get(*k) != a.get(*k))
        .map(|k| format!("{k}: {} -> {}", show(b.get(k)), show(a.get(k))))
        .collect()
}

/// The store arguments of the `qflow` binary for this store.
#[derive(Clone)]
enum CliStore {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl CliStore {
    fn qflow(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(QFLOW);
        cmd.args(args);
        match self {
            CliStore::Sqlite(db) => cmd.arg("--db").arg(db),
            CliStore::Postgres(url) => cmd.arg("--database-url").arg(url),
        };
        cmd.output().expect("runs qflow")
    }
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The bound on a loop that waits for the engine: `tick` sleeps a little, and fails the
/// test once the engine has made no progress for too long (a hang guard).
struct Deadline {
    what: &'static str,
    start: Instant,
}

impl Deadline {
    fn new(what: &'static str) -> Deadline {
        Deadline {
            what,
            start: Instant::now(),
        }
    }

    async fn tick(&self, pending: &[String]) {
        assert!(
            self.start.elapsed() < PATIENCE,
            "{}: the engine stopped making progress (hang guard); still pending: {pending:#?}",
            self.what
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A worker's fetch over every topic of the matrix; answers with `answer` per task.
async fn fetch(ops: &Ops) -> Vec<qflow_ops::pull::LockedTaskView> {
    let topics = ["charge-q", "charge-c", "charge-z"]
        .iter()
        .map(|t| FetchTopic {
            name: (*t).to_owned(),
            lock_ms: 60_000,
            variables: None,
        })
        .collect();
    ops.fetch_and_lock(FetchRequest {
        worker: "matrix-worker".to_owned(),
        max_tasks: 100,
        topics,
        wait_ms: 0,
    })
    .await
    .expect("fetch and lock")
}

async fn repair_loop_for_every_kind(open: Opener, cli: CliStore) {
    let fixed = Arc::new(AtomicBool::new(false));
    let counterpart = counterpart(fixed.clone()).await;
    let host = Host::start(open().await, fixed.clone(), &counterpart.url()).await;
    let store: Arc<dyn Store> = open().await;

    // Versions: the child, then each kind's broken and fixed models.
    host.ops.deploy(&child_model(), None).await.expect("child");
    let mut versions = BTreeMap::new();
    for kind in KINDS {
        let v1 = host.ops.deploy(&kind.model(OLD, false), None).await;
        let v2 = host.ops.deploy(&kind.model(NEW, true), None).await;
        versions.insert(
            format!("{kind:?}"),
            (v1.expect("v1 deploys").id, v2.expect("v2 deploys").id),
        );
    }
    let mut cells = Vec::new();
    for kind in KINDS {
        let (source, target) = versions[&format!("{kind:?}")];
        for &failure in kind.failures() {
            for surface in [Surface::Http, Surface::Cli] {
                for reset in [false, true] {
                    let fail = if failure == Failure::Final {
                        "DECLINED"
                    } else {
                        "DOWN"
                    };
                    let variables = json!({"fail": fail, "price": 5});
                    let started = host
                        .ops
                        .start(StartRequest {
                            deployment: Some(source),
                            process_id: None,
                            variables: variables
                                .as_object()
                                .expect("an object")
                                .iter()
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect(),
                            business_key: None,
                        })
                        .await
                        .expect("starts");
                    cells.push(Cell {
                        kind,
                        failure,
                        surface,
                        reset,
                        id: started.instance,
                        source,
                        target,
                    });
                }
            }
        }
    }

    // Every instance fails: by itself, or by what its worker or the task list says.
    let by_id: BTreeMap<String, Cell> = cells.iter().map(|c| (c.id.clone(), c.clone())).collect();
    let mut errored = std::collections::BTreeSet::new();
    let deadline = Deadline::new("every instance fails");
    loop {
        for t in fetch(&host.ops).await {
            let cell = &by_id[&t.instance];
            let answered = match cell.failure {
                Failure::Exhausted => {
                    let left = i64::from(t.retries) - 1;
                    host.ops
                        .fail_pull(&t.id, &t.worker, left, 0, "card gateway down")
                        .await
                        .map(|_| ())
                }
                Failure::Final => host
                    .ops
                    .bpmn_error_pull(&t.id, &t.worker, "REFUSED", "", Default::default())
                    .await
                    .map(|_| ()),
            };
            answered.expect("the worker's answer is taken");
        }
        let mut pending = Vec::new();
        for c in &cells {
            let (status, _) = status_of(store.as_ref(), &c.id).await;
            if c.kind == Kind::User
                && status == InstanceStatus::Running
                && errored.insert(c.id.clone())
            {
                let id = parse_instance_id(&c.id).expect("id");
                host.ops
                    .bpmn_error_user_task(id, OLD, "REFUSED", "", Default::default())
                    .await
                    .expect("the task list's error is taken");
            }
            if status != InstanceStatus::Failed {
                let (v, _) = view_of(store.as_ref(), &c.id).await;
                pending.push(format!("{:?} {:?} {}: {v}", c.kind, c.failure, c.id));
            }
        }
        if pending.is_empty() {
            break;
        }
        deadline.tick(&pending).await;
    }
    for c in &cells {
        let (_, code) = status_of(store.as_ref(), &c.id).await;
        assert_eq!(code.as_deref(), Some(c.code()), "{c:?}");
    }

    // A refusal is counted and changes nothing: a task with attempts onto a user task.
    let victim = cells
        .iter()
        .find(|c| c.kind == Kind::Registered && c.surface == Surface::Cli)
        .expect("a registered CLI cell");
    let onto_user = versions["User"].1;
    let refusal = json!({"source": victim.source, "target": onto_user,
                         "mapping": {OLD: NEW}, "instances": [victim.id]});
    let before = view_of(store.as_ref(), &victim.id).await;
    let (status, answer) = host
        .post("/v1/migrations", json!({"plan": refusal.clone()}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["summary"]["refused"], 1, "{answer}");
    let reason = answer["results"][0]["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("task `charge` has attempts and maps to `collect`, a user task"),
        "{reason}"
    );
    assert_eq!(view_of(store.as_ref(), &victim.id).await, before);

    // The HTTP cells: dry run, migration, resume, all over the API.
    fixed.store(true, Ordering::SeqCst);
    for c in cells.iter().filter(|c| c.surface == Surface::Http) {
        let (before, _) = view_of(store.as_ref(), &c.id).await;
        let (status, dry) = host
            .post("/v1/migrations", json!({"plan": c.plan(), "dry_run": true}))
            .await;
        assert_eq!(status, 200, "{c:?}: {dry}");
        assert_eq!(dry["summary"]["would_migrate"], 1, "{c:?}: {dry}");
        assert_eq!(
            view_of(store.as_ref(), &c.id).await.0,
            before,
            "a dry run writes nothing"
        );
        let (status, real) = host.post("/v1/migrations", json!({"plan": c.plan()})).await;
        assert_eq!(status, 200, "{c:?}: {real}");
        assert_eq!(real["summary"]["migrated"], 1, "{c:?}: {real}");
        assert_migrated(
            store.as_ref(),
            c,
            &before,
            &dry["results"][0],
            &real["results"][0],
        )
        .await;
        let budget = if c.reset { "reset" } else { "keep" };
        let (status, resumed) = host
            .post(
                &format!("/v1/instances/{}/resume", c.id),
                json!({ "budget": budget }),
            )
            .await;
        assert_eq!(status, 200, "{c:?}: {resumed}");
    }
    host.stop().await;

    // The CLI cells, with no runtime on the store; then a runtime takes over.
    let dir = tempfile::tempdir().expect("a temp dir");
    let plan_file = dir.path().join("refusal.json");
    std::fs::write(&plan_file, refusal.to_string()).expect("writes");
    let out = cli.qflow(&["migrate", path(&plan_file), "--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "a refusal exits 1: {out:?}");
    assert_eq!(json_of(&out)["summary"]["refused"], 1);
    assert_eq!(view_of(store.as_ref(), &victim.id).await, before);
    for c in cells.iter().filter(|c| c.surface == Surface::Cli) {
        let (before, _) = view_of(store.as_ref(), &c.id).await;
        let plan_file = dir.path().join(format!("{}.json", c.id));
        std::fs::write(&plan_file, c.plan().to_string()).expect("writes");
        let dry = cli.qflow(&["migrate", path(&plan_file), "--dry-run", "--format", "json"]);
        assert!(dry.status.success(), "{c:?}: {dry:?}");
        let dry = json_of(&dry);
        assert_eq!(dry["summary"]["would_migrate"], 1, "{c:?}: {dry}");
        let real = cli.qflow(&["migrate", path(&plan_file), "--format", "json"]);
        assert!(real.status.success(), "{c:?}: {real:?}");
        let real = json_of(&real);
        assert_eq!(real["summary"]["migrated"], 1, "{c:?}: {real}");
        assert_migrated(
            store.as_ref(),
            c,
            &before,
            &dry["results"][0],
            &real["results"][0],
        )
        .await;
        let mut args = vec!["instances", "resume", &c.id];
        if c.reset {
            args.push("--reset-budget");
        }
        let out = cli.qflow(&args);
        assert!(out.status.success(), "{c:?}: {out:?}");
    }
    let host = Host::start(open().await, fixed.clone(), &counterpart.url()).await;

    // Every instance ends as the fixed model says: its worker and task list answer under
    // the new name.
    let mut completed = std::collections::BTreeSet::new();
    let deadline = Deadline::new("every instance completes");
    loop {
        for t in fetch(&host.ops).await {
            assert_eq!(t.node, NEW, "offered under its new name: {t:?}");
            // The budget choice shows in what the worker is told is left: a kept budget
            // gives the one attempt a resume is for, a reset one the target's.
            let cell = &by_id[&t.instance];
            let expected = match (cell.reset, cell.kind) {
                (false, _) => 1,
                (true, Kind::PullZeebe) => 5,
                (true, _) => 3,
            };
            assert_eq!(t.retries, expected, "{cell:?}: {t:?}");
            host.ops
                .complete_pull(&t.id, &t.worker, Default::default())
                .await
                .expect("the worker's completion is taken");
        }
        let mut pending = Vec::new();
        for c in &cells {
            let (status, _) = status_of(store.as_ref(), &c.id).await;
            if c.kind == Kind::User
                && status == InstanceStatus::Running
                && completed.insert(c.id.clone())
            {
                let id = parse_instance_id(&c.id).expect("id");
                host.ops
                    .complete_user_task(id, NEW, Default::default(), None)
                    .await
                    .expect("the task list's completion is taken");
            }
            if status != InstanceStatus::Completed {
                let (v, _) = view_of(store.as_ref(), &c.id).await;
                pending.push(format!("{:?} {:?} {}: {v}", c.kind, c.failure, c.id));
            }
        }
        if pending.is_empty() {
            break;
        }
        deadline.tick(&pending).await;
    }

    // No incident is left open: the failure's incident moved with its node (an inner
    // instance's too: `charge#2` → `collect#2`) and the resume resolved it there.
    for c in &cells {
        let incidents = host
            .ops
            .incidents(Some(parse_instance_id(&c.id).expect("id")), 0)
            .await
            .expect("incidents");
        assert!(
            !incidents.is_empty(),
            "{c:?}: the failure opened an incident"
        );
        let open: Vec<_> = incidents
            .iter()
            .filter(|i| i.resolved_at_ms.is_none())
            .collect();
        assert!(
            open.is_empty(),
            "{c:?}: open incidents after completion: {open:?}"
        );
    }

    // The history keeps every earlier attempt under the name it had then; the attempts
    // after the migration run under the new name, numbered on.
    for c in cells.iter().filter(|c| c.kind.counts_attempts()) {
        let rows = host
            .ops
            .history(parse_instance_id(&c.id).expect("id"))
            .await
            .expect("history");
        let named = |n: &str, base: &str| n == base || n.starts_with(&format!("{base}#"));
        let nodes: Vec<(&str, u32)> = rows.iter().map(|r| (r.node.as_str(), r.attempt)).collect();
        // Per activity instance (`charge#2` → `collect#2`): its attempts before the
        // migration, then after it, numbered on.
        let mut per_instance: BTreeMap<&str, (Option<u32>, Option<u32>)> = BTreeMap::new();
        for r in &rows {
            let (base, late) = if named(&r.node, OLD) {
                (OLD, false)
            } else {
                (NEW, true)
            };
            let e = per_instance.entry(&r.node[base.len()..]).or_default();
            if late {
                e.1 = Some(e.1.map_or(r.attempt, |a| a.min(r.attempt)));
            } else {
                e.0 = Some(e.0.map_or(r.attempt, |a| a.max(r.attempt)));
            }
        }
        assert!(
            per_instance
                .values()
                .any(|(old, new)| old.is_some() && new.is_some()),
            "{c:?}: attempts under both names: {nodes:?}"
        );
        for (old, new) in per_instance.values() {
            if let (Some(old), Some(new)) = (old, new) {
                assert!(new > old, "{c:?}: {nodes:?}");
            }
        }
        assert!(
            rows.iter()
                .all(|r| named(&r.node, OLD) || named(&r.node, NEW)),
            "{c:?}: {nodes:?}"
        );
    }
    host.stop().await;
    assert!(
        counterpart.violations().is_empty(),
        "{:?}",
        counterpart.violations()
    );
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// The dry run's diff is the real migration's, and the real migration's is what the store
/// holds now; the instance is on the target, still FAILED, and names the new node only.
async fn assert_migrated(store: &dyn Store, c: &Cell, before: &Value, dry: &Value, real: &Value) {
    assert_eq!(dry["outcome"], "would_migrate", "{c:?}: {dry}");
    assert_eq!(real["outcome"], "migrated", "{c:?}: {real}");
    assert_eq!(dry["changes"], real["changes"], "{c:?}");
    let (after, _) = view_of(store, &c.id).await;
    let written: Vec<Value> = diff(before, &after)
        .into_iter()
        .map(Value::String)
        .collect();
    assert_eq!(real["changes"], Value::Array(written), "{c:?}");
    let rec = store
        .instance(parse_instance_id(&c.id).expect("id"))
        .await
        .expect("reads")
        .expect("exists");
    assert_eq!(rec.deployment.0, c.target, "{c:?}");
    assert_eq!(rec.status, InstanceStatus::Failed, "{c:?}");
    let text = after.to_string();
    assert!(
        !text.contains(&format!("\"{OLD}")),
        "{c:?}: the old node is named after the migration: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_loop_holds_for_every_task_kind_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir.path().join("qflow.db");
    repair_loop_for_every_kind(sqlite(db.clone()), CliStore::Sqlite(db)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_loop_holds_for_every_task_kind_on_postgres() {
    let Some(url) = std::env::var("QFLOW_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("skipped: QFLOW_TEST_PG_URL not set");
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    let schema = format!("matrix_{}_{nanos}", std::process::id());
    let open = postgres_schema(&url, &schema);
    // The binary reaches the same schema through the connection's search path.
    let sep = if url.contains('?') { '&' } else { '?' };
    let cli_url = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    repair_loop_for_every_kind(open, CliStore::Postgres(cli_url)).await;
}

/// An opener of `schema` at `url` (created on first open).
fn postgres_schema(url: &str, schema: &str) -> Opener {
    let _ = postgres;
    let (url, schema) = (url.to_owned(), schema.to_owned());
    Box::new(move || {
        let (url, schema) = (url.clone(), schema.clone());
        Box::pin(async move {
            let config = qflow_persistence::PgConfig {
                schema: Some(schema),
                max_connections: 8,
            };
            let store: Arc<dyn Store> = Arc::new(
                qflow_persistence::PgStore::connect_with(&url, config)
                    .await
                    .expect("connect"),
            );
            store
        })
    })
}
