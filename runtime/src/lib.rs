//! The runtime shell (SPEC R1–R5): lanes, the timer poller, claims and deployments around
//! the pure core.
//!
//! An instance maps to one of K lanes by a stable hash of its id. A lane is one tokio task
//! that steps its instances one request at a time and commits each round of steps as one
//! store batch — many instances share one transaction and one fsync (group commit), and
//! every task outcome is durable before the next handler of that instance runs (R1a).
//! Every commit is a compare-and-swap on the instance fence; a loser drops its cached
//! state, re-reads and re-derives (R4).
//!
//! Nothing in a lane sleeps or blocks on a backoff: a backoff is a timer row, and the
//! [`poller`] hands due rows back to the lanes. Crash recovery uses the same seam: while an
//! instance has a task attempt in flight, the lane keeps a lease timer (`~run`) armed a
//! little beyond the handler time limit; if the replica dies, the row comes due and
//! whichever replica claims it re-adopts the attempt (same attempt, no budget spent, C7a).
//!
//! Retention ([`retention`]) is a task beside the poller: it purges ended instances past
//! their retention in bounded batches, paced so that it never crowds the lanes out of the
//! store.
//!
//! Invariant: the lane never reads the clock except to pass `now` into a step, and never
//! waits on anything but its inbox, its handlers and the store.

pub mod buffer;
pub mod calls;
pub mod claim;
pub mod clock;
pub mod delegates;
pub mod error;
mod handlers;
pub mod histogram;
pub mod journal;
mod lane;
pub mod lifecycle;
mod poller;
pub mod pull;
pub mod retention;
pub mod schedules;
pub mod signals;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use qflow_core::TimerName;
use qflow_loader::model::{Definition, Variables};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;

use qflow_store::{
    DeploymentId, DeploymentRecord, InstanceId, NewDeployment, NewSchedule, RetireOutcome, Store,
};

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::Error;
pub use handlers::{AsyncHandlers, AsyncTaskHandler, TaskCall};
pub use pull::{Fetch, LockedTask, PullBell};
pub use qflow_core::handler::HANDLER_TIMEOUT;
/// The host-facing handler vocabulary, re-exported so a host needs only this crate.
pub use qflow_core::{Input, TaskContext, TaskHandler, TaskOutcome};
pub use retention::RetentionConfig;
pub use watch::{Observed, Watch};

/// Runtime settings. Every field states its default.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Lane executors in this replica. Default 2; a host that knows its store picks
    /// [`default_lanes`] (1 on SQLite).
    pub lanes: usize,
    /// Most steps one lane commits in one store batch. Default 256.
    pub batch_max: usize,
    /// Most requests queued per lane before senders wait. Default 65,536.
    pub lane_queue_max: usize,
    /// Most handler calls one lane keeps running at once; past it the lane stops taking
    /// new work from its inbox until some finish. Default 10,000.
    pub handlers_in_flight_max: usize,
    /// A handler running longer than this is a failed attempt with code
    /// `HANDLER_TIMEOUT`. Default 30,000 ms.
    pub handler_time_limit_ms: u64,
    /// How far beyond "now" the in-flight lease timer is armed. Must exceed the handler
    /// time limit, or a live attempt can be re-adopted while it runs. Default 40,000 ms.
    pub inflight_lease_ms: i64,
    /// Longest wait between two timer polls. Default 50 ms.
    pub poll_interval_ms: u64,
    /// Most timers claimed per poll. Default 1,024.
    pub timer_claim_max: u32,
    /// How long a claimed timer stays leased to this replica before another may claim
    /// it. Default 30,000 ms.
    pub timer_lease_ms: i64,
    /// Names this replica in timer leases. Default: a random UUID.
    pub replica_id: String,
    /// The channels a dispatcher delivers to (`qflow_channels::Channels::names`):
    /// deploying a model whose channel call names any other is refused, with the
    /// channel's name and the task. Default none.
    pub channels: Vec<String>,
    /// The channel that receives every instance's retry lifecycle (C10, `lifecycle`):
    /// attempt failed (with the next attempt's instant when parked), FAILED, resumed,
    /// migrated — one outbox row per event, in the commit of the step that caused it.
    /// Default `None`: no events.
    pub lifecycle_channel: Option<String>,
    /// When ended instances are purged (O7); `None` keeps them for ever. Default:
    /// `Some(RetentionConfig::default())`, 7 days after their end, so a store left
    /// running stays the size of its live and recent work. FAILED and running instances
    /// are never purged, whatever this says.
    pub retention: Option<RetentionConfig>,
    /// `[delegates]`: where Camunda 7 Java bindings run instead of their derived pull
    /// topics ([`delegates`]). Default none.
    pub delegates: delegates::DelegateRoutes,
    /// Which instances' steps write a row of the input journal (SPEC G3,
    /// `docs/replay.md`). Default off.
    pub journal: journal::JournalPolicy,
}

/// The lanes a replica runs on `store` unless told otherwise: 1 on a store whose commits
/// group ([`Store::commits_group`]: SQLite, whose one writer takes every lane's batches
/// in one transaction), 2 on any other.
///
/// One lane keeps such a store's writer busy ("lane time in commit" 98–99 % in the
/// runtime bench), so a second lane adds no commits, only its work beside the writer's
/// thread, which slows the writer: two lanes stepped at 0.65–0.81 of one lane's rate on
/// the project's two-core machine, while pull tasks, channel calls and HTTP starts ran
/// the same with one lane or two (`docs/performance.md`, "One lane by default on
/// SQLite"). A store that commits each lane's batch in a transaction of its own
/// (PostgreSQL) gains from more lanes: its commits run side by side.
pub fn default_lanes(store: &dyn Store) -> usize {
    if store.commits_group() {
        1
    } else {
        2
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            lanes: 2,
            batch_max: 256,
            lane_queue_max: 65_536,
            handlers_in_flight_max: 10_000,
            handler_time_limit_ms: 30_000,
            inflight_lease_ms: 40_000,
            poll_interval_ms: 50,
            timer_claim_max: 1_024,
            timer_lease_ms: 30_000,
            replica_id: uuid::Uuid::new_v4().to_string(),
            channels: Vec::new(),
            lifecycle_channel: None,
            retention: Some(RetentionConfig::default()),
            delegates: delegates::DelegateRoutes::new(),
            journal: journal::JournalPolicy::Off,
        }
    }
}

/// Counters a host can watch (progress lines, benchmarks, tests).
#[derive(Debug, Default)]
pub struct Stats {
    pub started: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub cancelled: AtomicU64,
    /// Handler calls made (every attempt, including re-adopted ones).
    pub handler_calls: AtomicU64,
    /// Backoff parks armed (`r:` timers).
    pub parks: AtomicU64,
    /// Timers handed to lanes by the poller.
    pub timers_fired: AtomicU64,
    /// Steps whose commit lost the compare-and-swap.
    pub conflicts: AtomicU64,
    /// Steps committed.
    pub steps: AtomicU64,
    /// Store batches committed.
    pub batches: AtomicU64,
    /// Ended instances this replica's retention task purged.
    pub purged: AtomicU64,
    /// How long each committed step took, from the start of its lane round (inputs
    /// gathered, steps computed) to its batch being durable.
    pub step_latency: histogram::Histogram,
    /// How late each due timer was when the poller claimed it (claim instant minus due
    /// instant): the scheduling delay a parked backoff or timer sees.
    pub timer_lag: histogram::Histogram,
}

/// A point-in-time copy of [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsView {
    pub started: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub handler_calls: u64,
    pub parks: u64,
    pub timers_fired: u64,
    pub conflicts: u64,
    pub steps: u64,
    pub batches: u64,
    pub purged: u64,
}

impl Stats {
    pub fn view(&self) -> StatsView {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsView {
            started: l(&self.started),
            completed: l(&self.completed),
            failed: l(&self.failed),
            cancelled: l(&self.cancelled),
            handler_calls: l(&self.handler_calls),
            parks: l(&self.parks),
            timers_fired: l(&self.timers_fired),
            conflicts: l(&self.conflicts),
            steps: l(&self.steps),
            batches: l(&self.batches),
            purged: l(&self.purged),
        }
    }
}

/// What a lane is asked to do for one instance.
#[derive(Debug)]
pub(crate) enum Work {
    Start {
        deployment: DeploymentId,
        variables: Variables,
        /// Unique per deployment when given (the store refuses a duplicate).
        business_key: Option<String>,
        /// The start event with a trigger to start at; `None`: the none start events.
        start: Option<String>,
        /// The occurrence of a timer start event's schedule this start is, moved on by
        /// the creation's commit (`schedules`).
        schedule: Option<qflow_store::ScheduleAdvance>,
        /// The call activity a called instance starts for (`calls`): the start is then
        /// `Input::StartCalled`.
        parent: Option<qflow_core::ParentLink>,
    },
    Input(Input),
    /// A claimed timer row came due.
    Timer {
        name: TimerName,
        incarnation: u32,
    },
}

/// How an instance starts: its business key, and the triggered start event it starts
/// at (`None`: the none start events).
struct Start {
    business_key: Option<String>,
    event: Option<String>,
    parent: Option<qflow_core::ParentLink>,
}

pub(crate) struct Request {
    pub instance: InstanceId,
    pub work: Work,
    /// When the handler whose outcome this is started, for the attempt history.
    pub started_ms: Option<i64>,
    /// Answered once the step is durable (or refused).
    pub reply: Option<Replier>,
    /// How many times this request lost a compare-and-swap and was re-derived.
    pub retries: u32,
}

/// Where a request's caller waits for its step: the claim as the step left it when
/// `with_state` (so a caller that needs the state does not read it back from the store),
/// else nothing.
pub(crate) struct Replier {
    pub tx: oneshot::Sender<Result<Option<claim::Claim>, Error>>,
    pub with_state: bool,
}

/// Steps instances of a store from outside any runtime — the operator's side of the
/// claim (`qflow instances resume`, migration): read, step, commit under the fence. It
/// runs no handler: attempts a step asks for are handed over by an in-flight lease due at
/// once, which the runtime serving the store (now, or when one next starts) re-adopts —
/// the same path a replica's shutdown uses (C7a).
pub struct Stepper {
    store: Arc<dyn Store>,
    defs: Definitions,
    lease_ms: i64,
    lifecycle: Option<String>,
    journal: journal::JournalPolicy,
}

impl Stepper {
    pub fn new(store: Arc<dyn Store>) -> Stepper {
        Stepper {
            defs: Definitions::new(store.clone(), delegates::DelegateRoutes::new()),
            store,
            lease_ms: RuntimeConfig::default().inflight_lease_ms,
            lifecycle: None,
            journal: journal::JournalPolicy::Off,
        }
    }

    /// Journals the steps it takes under `policy` (SPEC G3), as the runtime serving the
    /// store does when it is configured so: a journaled instance's history has no gap
    /// where an operator stepped it.
    pub fn with_journal(mut self, policy: journal::JournalPolicy) -> Stepper {
        self.journal = policy;
        self
    }

    /// Which steps this stepper journals.
    pub fn journal(&self) -> &journal::JournalPolicy {
        &self.journal
    }

    /// Writes lifecycle events (C10) for `channel` with every step, as the runtime
    /// serving the store does when it is configured so.
    pub fn with_lifecycle_channel(mut self, channel: Option<String>) -> Stepper {
        self.lifecycle = channel;
        self
    }

    /// The channel lifecycle events go to, if any.
    pub fn lifecycle_channel(&self) -> Option<&str> {
        self.lifecycle.as_deref()
    }

    /// Loads definitions under these `[delegates]` routes (a server's, so that it steps
    /// the instances of a routed deployment as its runtime does).
    pub fn with_delegates(mut self, routes: delegates::DelegateRoutes) -> Stepper {
        self.defs = Definitions::new(self.store.clone(), routes);
        self
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Steps `instance` with `input` at `now_ms` and commits it, with `audit` in the same
    /// transaction; a stale input is refused with the core's reason and writes nothing.
    pub async fn step(
        &self,
        instance: InstanceId,
        input: Input,
        now_ms: i64,
        audit: Option<&qflow_store::AuditEntry>,
    ) -> Result<claim::Stepped, Error> {
        self.step_taking(instance, input, now_ms, audit, None).await
    }

    /// [`Stepper::step`] of a step that delivers buffered message `take`, when given
    /// (see [`Runtime::claim_and_step_taking`]).
    pub async fn step_taking(
        &self,
        instance: InstanceId,
        input: Input,
        now_ms: i64,
        audit: Option<&qflow_store::AuditEntry>,
        take: Option<&qflow_store::BufferedMessage>,
    ) -> Result<claim::Stepped, Error> {
        let op = claim::Op {
            take,
            ..self.op(input, now_ms, audit)
        };
        claim::claim_and_step(&*self.store, &self.defs, instance, op).await
    }

    /// Reads `instance` as it stands: its deployment's definition, decoded snapshot and
    /// fence.
    pub async fn claim(&self, instance: InstanceId) -> Result<claim::Claim, Error> {
        claim::Claim::read(&*self.store, &self.defs, instance).await
    }

    /// Moves `instance` onto `target` (O2): `Input::Migrate` stepped with the target's
    /// definition and committed under the fence with the instance row's new deployment,
    /// `audit` in the same transaction. `dry_run` plans the step and writes nothing: the
    /// returned claim is the instance as it would be.
    pub async fn migrate(
        &self,
        instance: InstanceId,
        target: DeploymentId,
        input: Input,
        now_ms: i64,
        audit: Option<&qflow_store::AuditEntry>,
        dry_run: bool,
    ) -> Result<claim::Stepped, Error> {
        let def = self.defs.get(target).await?;
        let op = claim::Op {
            onto: Some((target, def)),
            dry_run,
            ..self.op(input, now_ms, audit)
        };
        claim::claim_and_step(&*self.store, &self.defs, instance, op).await
    }

    fn op<'a>(
        &'a self,
        input: Input,
        now: i64,
        audit: Option<&'a qflow_store::AuditEntry>,
    ) -> claim::Op<'a> {
        claim::Op {
            input,
            now,
            rules: claim::LeaseRules {
                lease_ms: self.lease_ms,
                refresh_divisor: 2,
                handing_over: true,
            },
            audit,
            onto: None,
            dry_run: false,
            lifecycle: self.lifecycle.as_deref(),
            journal: &self.journal,
            take: None,
        }
    }

    /// Deploys a model on the store (see [`Runtime::deploy`]; the same path).
    pub async fn deploy(
        &self,
        source: &str,
        process_id: Option<&str>,
        now_ms: i64,
    ) -> Result<DeploymentRecord, Error> {
        deploy(
            &self.store,
            &self.defs,
            source,
            process_id,
            now_ms,
            None,
            None,
        )
        .await
    }

    /// The definition of `deployment`, loaded once.
    pub async fn definition(&self, deployment: DeploymentId) -> Result<Arc<Definition>, Error> {
        self.defs.get(deployment).await
    }
}

/// Deployment id → loaded definition, shared by all lanes of a replica.
pub(crate) struct Definitions {
    store: Arc<dyn Store>,
    loaded: Mutex<BTreeMap<DeploymentId, Arc<Definition>>>,
    /// Deployments this replica has seen unretired, so a start does not re-read the
    /// deployment row (and its whole source) every time. A retirement through this
    /// replica removes the entry; one through another replica is seen here only after a
    /// restart (see `docs/ARCHITECTURE.md`).
    live: Mutex<BTreeSet<DeploymentId>>,
    /// The `[delegates]` routes definitions are loaded under.
    routes: delegates::DelegateRoutes,
    /// Deployments refused because they were made under other routes, with the reason:
    /// refused again at once, not re-parsed on every wake of their instances (the routes
    /// of a process do not change while it runs).
    refused: Mutex<BTreeMap<DeploymentId, String>>,
}

impl Definitions {
    pub(crate) fn new(store: Arc<dyn Store>, routes: delegates::DelegateRoutes) -> Definitions {
        Definitions {
            store,
            loaded: Mutex::new(BTreeMap::new()),
            live: Mutex::new(BTreeSet::new()),
            routes,
            refused: Mutex::new(BTreeMap::new()),
        }
    }

    pub(crate) fn known_live(&self, id: DeploymentId) -> bool {
        self.live.lock().expect("definitions lock").contains(&id)
    }

    pub(crate) fn mark_live(&self, id: DeploymentId) {
        self.live.lock().expect("definitions lock").insert(id);
    }

    pub(crate) fn mark_retired(&self, id: DeploymentId) {
        self.live.lock().expect("definitions lock").remove(&id);
    }

    pub(crate) async fn get(&self, id: DeploymentId) -> Result<Arc<Definition>, Error> {
        if let Some(def) = self.loaded.lock().expect("definitions lock").get(&id) {
            return Ok(def.clone());
        }
        if let Some(why) = self.refused.lock().expect("definitions lock").get(&id) {
            return Err(Error::Refused {
                what: "deployment".to_owned(),
                why: why.clone(),
            });
        }
        let record = self
            .store
            .deployment(id)
            .await?
            .ok_or(Error::UnknownDeployment(id.0))?;
        let (def, applied) = load_process(&record.source, Some(&record.process_id), &self.routes)?;
        if !delegates::agrees(&record.content_hash, &applied) {
            let now: Vec<String> = applied
                .iter()
                .map(|(b, r)| format!("`{b}` → {r}"))
                .collect();
            let why = format!(
                "deployment {} of `{}` was made under other [delegates] routes than this \
                 configuration gives its Java bindings (now: {}); its instances keep the \
                 routes they started with: restore those routes, or deploy the model again \
                 and migrate the instances to the new deployment",
                id.0,
                record.process_id,
                if now.is_empty() {
                    "none".to_owned()
                } else {
                    now.join(", ")
                }
            );
            self.refused
                .lock()
                .expect("definitions lock")
                .insert(id, why.clone());
            return Err(Error::Refused {
                what: "deployment".to_owned(),
                why,
            });
        }
        let def = Arc::new(def);
        self.loaded
            .lock()
            .expect("definitions lock")
            .insert(id, def.clone());
        Ok(def)
    }
}

/// Deploys the executable process `process_id` of `source` (or its only process when
/// `None`) on `store` at `now_ms`: loaded and validated, refused when it holds elements
/// this engine cannot run or when it is stateful and the store is not durable (L7), and
/// stored by content hash (same content, same version; R5). The one deploy path of the
/// runtime and of the operator API.
///
/// With `handlers`, a registered task (`q:task`) none of them serves is refused too,
/// naming the task and the alternatives: the instance would only ever fail there. With
/// `channels`, so is a channel call (`q:channel`) naming a channel not among them, with
/// the task's position: its requests could never be delivered.
async fn deploy(
    store: &Arc<dyn Store>,
    defs: &Definitions,
    source: &str,
    process_id: Option<&str>,
    now_ms: i64,
    handlers: Option<&AsyncHandlers>,
    channels: Option<&[String]>,
) -> Result<DeploymentRecord, Error> {
    let (def, applied) = load_process(source, process_id, &defs.routes)?;
    if let Some(handlers) = handlers {
        let missing: Vec<String> = def
            .process
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                qflow_loader::model::NodeKind::Task(t) => match &t.kind {
                    qflow_loader::model::TaskKind::Registered { name }
                        if !handlers.contains(name) =>
                    {
                        Some(format!("`{}` (q:task=\"{name}\")", n.id))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if !missing.is_empty() {
            return Err(Error::Refused {
                what: "deployment".to_owned(),
                why: format!(
                    "process `{}` has tasks no handler of this server runs: {}; a host that \
                     embeds qflow registers handlers by name, and a standalone server runs \
                     work through `q:topic` pull tasks (external workers) or `q:channel` \
                     calls instead",
                    def.id,
                    missing.join(", ")
                ),
            });
        }
    }
    if let Some(channels) = channels {
        let unconfigured: Vec<String> = def
            .process
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                qflow_loader::model::NodeKind::Task(t) => match &t.kind {
                    qflow_loader::model::TaskKind::Channel { name }
                        if !channels.iter().any(|c| c == name) =>
                    {
                        Some(format!("`{}` at {} (q:channel=\"{name}\")", n.id, n.pos))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if !unconfigured.is_empty() {
            return Err(Error::Refused {
                what: "deployment".to_owned(),
                why: format!(
                    "process `{}` calls channels this engine has not configured: {}; name \
                     each in the configuration (`[channels.<name>]`, docs/channels.md) or \
                     register it in the host",
                    def.id,
                    unconfigured.join(", ")
                ),
            });
        }
    }
    let unsupported = qflow_core::unsupported_elements(&def);
    if !unsupported.is_empty() {
        let list: Vec<String> = unsupported
            .iter()
            .map(|(node, what)| format!("`{node}` ({what})"))
            .collect();
        return Err(Error::Refused {
            what: "deployment".to_owned(),
            why: format!(
                "process `{}` uses elements this engine version cannot run yet: {}",
                def.id,
                list.join(", ")
            ),
        });
    }
    if let qflow_loader::model::Classification::Stateful { reasons } = &def.class {
        if !store.is_durable() {
            return Err(Error::Refused {
                what: "deployment".to_owned(),
                why: format!(
                    "process `{}` is stateful ({}) and needs a durable store; this engine \
                     runs on the in-memory store",
                    def.id,
                    reasons.join(", ")
                ),
            });
        }
    }
    let schedules = schedules_of(&def, now_ms)?;
    let hash = delegates::content_hash(&def.id, source, &applied);
    let record = store
        .deploy(NewDeployment {
            process_id: &def.id,
            content_hash: &hash,
            source,
            deployed_at_ms: now_ms,
            schedules: &schedules,
        })
        .await?;
    defs.loaded
        .lock()
        .expect("definitions lock")
        .entry(record.id)
        .or_insert_with(|| Arc::new(def));
    Ok(record)
}

/// The schedules of `def`'s timer start events, deployed at `now_ms`
/// (`qflow_core::schedule`). A timer that gives no time refuses the deployment (the
/// loader already refuses computed start times, Q207).
fn schedules_of(def: &Definition, now_ms: i64) -> Result<Vec<NewSchedule>, Error> {
    let mut schedules = Vec::new();
    for (idx, trigger) in def.process.triggered_starts() {
        let qflow_loader::model::StartTrigger::Timer(timer) = trigger else {
            continue;
        };
        let node = def.process.node(idx);
        let first = qflow_core::schedule::first(timer, now_ms).map_err(|why| Error::Refused {
            what: "deployment".to_owned(),
            why: format!(
                "process `{}`: the timer start event `{}` at {} has no schedule: {why}",
                def.id, node.id, node.pos
            ),
        })?;
        if let Some(first) = first {
            schedules.push(NewSchedule {
                node: node.id.clone(),
                due_at_ms: first.due_at_ms,
                remaining: first.remaining,
            });
        }
    }
    Ok(schedules)
}

/// Loads `source` and picks the executable process `process_id`, or the only one when
/// `None`, with `routes` applied to its Java bindings (and what applied). A refused model
/// becomes `Error::Refused` carrying every diagnostic.
fn load_process(
    source: &str,
    process_id: Option<&str>,
    routes: &delegates::DelegateRoutes,
) -> Result<(Definition, Vec<(String, delegates::DelegateRoute)>), Error> {
    let mut def = load_one(source, process_id)?;
    let applied = delegates::apply(&mut def, routes);
    Ok((def, applied))
}

fn load_one(source: &str, process_id: Option<&str>) -> Result<Definition, Error> {
    let loaded = qflow_loader::load_str(source).map_err(|diags| Error::Refused {
        what: "model".to_owned(),
        why: diags
            .iter()
            .map(|d| format!("{}:{}: {}: {}", d.pos.line, d.pos.col, d.code, d.message))
            .collect::<Vec<_>>()
            .join("; "),
    })?;
    let mut defs = loaded.definitions;
    match process_id {
        Some(id) => defs
            .into_iter()
            .find(|d| d.id == id)
            .ok_or_else(|| Error::Refused {
                what: "model".to_owned(),
                why: format!("it has no executable process `{id}`"),
            }),
        None if defs.len() == 1 => Ok(defs.remove(0)),
        None => Err(Error::Refused {
            what: "deployment".to_owned(),
            why: format!(
                "the model has {} executable processes; name the one to deploy",
                defs.len()
            ),
        }),
    }
}

pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub handlers: AsyncHandlers,
    pub config: RuntimeConfig,
    pub defs: Definitions,
    pub stats: Arc<Stats>,
    pub lanes: Vec<mpsc::Sender<Request>>,
    /// Poked when a lane arms a timer, so the poller can look earlier than planned.
    pub timer_armed: Notify,
    /// Rung after a commit that emitted outbox rows: the dispatcher's lossy prompt.
    pub outbox_emitted: Notify,
    /// Poked after every committed round of any lane, so waiters re-check their condition.
    pub progress: Notify,
    pub stopping: AtomicBool,
    /// Callers waiting for instances to reach a `q:respond` task or their end (R6).
    pub watchers: watch::Watchers,
    /// Flipped to `true` once, at shutdown; lanes exit when idle after seeing it.
    pub stop: tokio::sync::watch::Sender<bool>,
    /// Rung per topic after a commit that offered a pull task: wakes waiting fetches.
    pub pull_bell: pull::PullBell,
    /// Offered rows fetches of this process are locking right now.
    pub locking: pull::Locking,
    /// Message waits opened since the buffer task last looked, and its bell
    /// ([`buffer`]).
    pub opened_waits: std::sync::Mutex<BTreeSet<(String, String)>>,
    pub buffer_bell: Notify,
}

impl Shared {
    pub(crate) fn lane_of(&self, instance: InstanceId) -> usize {
        lane_index(instance, self.lanes.len())
    }
}

/// The lane an instance belongs to: a stable function of its id, the same on every
/// replica and every version.
pub fn lane_index(instance: InstanceId, lanes: usize) -> usize {
    let v = instance.as_u128();
    let folded = (v as u64) ^ ((v >> 64) as u64);
    (folded % lanes.max(1) as u64) as usize
}

/// A fresh instance id in the UUIDv7 layout: the start instant's milliseconds, then 74
/// random bits. Instances started together get neighbouring ids, so the rows a lane's
/// batch writes (instance, attempts index) sit in a few B-tree pages instead of one page
/// per instance — on SQLite this cut the bytes written per instance of the 10-task
/// benchmark model from ~130 KiB to ~18 KiB (docs/performance.md). The random tail keeps
/// ids unique across replicas and keeps [`lane_index`] uniform.
fn new_instance_id(now_ms: i64) -> InstanceId {
    let random = uuid::Uuid::new_v4().into_bytes();
    let mut tail = [0u8; 10];
    tail.copy_from_slice(&random[6..]);
    uuid::Builder::from_unix_timestamp_millis(now_ms.max(0) as u64, &tail).into_uuid()
}

/// A running replica: K lanes, a timer poller and (unless turned off) the retention task
/// over one store.
pub struct Runtime {
    shared: Arc<Shared>,
    lane_tasks: Vec<JoinHandle<()>>,
    poller: Option<JoinHandle<()>>,
    retention: Option<JoinHandle<()>>,
    /// The message buffer's task ([`buffer`]).
    buffer: Option<JoinHandle<()>>,
}

impl Runtime {
    /// Starts the lanes and the poller. Must be called inside a tokio runtime.
    pub fn start(
        store: Arc<dyn Store>,
        handlers: AsyncHandlers,
        clock: Arc<dyn Clock>,
        config: RuntimeConfig,
    ) -> Runtime {
        let lanes = config.lanes.max(1);
        let mut senders = Vec::with_capacity(lanes);
        let mut receivers = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            let (tx, rx) = mpsc::channel(config.lane_queue_max.max(1));
            senders.push(tx);
            receivers.push(rx);
        }
        let shared = Arc::new(Shared {
            defs: Definitions::new(store.clone(), config.delegates.clone()),
            store,
            clock,
            handlers,
            config,
            stats: Arc::new(Stats::default()),
            lanes: senders,
            timer_armed: Notify::new(),
            outbox_emitted: Notify::new(),
            pull_bell: pull::PullBell::default(),
            locking: pull::Locking::default(),
            progress: Notify::new(),
            opened_waits: std::sync::Mutex::new(BTreeSet::new()),
            buffer_bell: Notify::new(),
            stopping: AtomicBool::new(false),
            watchers: watch::Watchers::default(),
            stop: tokio::sync::watch::channel(false).0,
        });
        let lane_tasks = receivers
            .into_iter()
            .map(|rx| tokio::spawn(lane::run(shared.clone(), rx)))
            .collect();
        let poller = Some(tokio::spawn(poller::run(shared.clone())));
        let retention = shared
            .config
            .retention
            .clone()
            .map(|config| tokio::spawn(retention::run(shared.clone(), config)));
        let buffer = Some(tokio::spawn(buffer::run(shared.clone())));
        Runtime {
            shared,
            lane_tasks,
            poller,
            retention,
            buffer,
        }
    }

    /// Resolves when a commit has emitted outbox rows since the last time it resolved
    /// (one stored permit): the dispatcher's prompt. Lossy by design — the dispatcher
    /// also polls — so that the runtime never depends on it.
    pub fn outbox_emitted(&self) -> impl std::future::Future<Output = ()> + '_ {
        self.shared.outbox_emitted.notified()
    }

    /// The lifecycle channel (C10) this runtime writes events for, if any.
    pub fn lifecycle_channel(&self) -> Option<&str> {
        self.shared.config.lifecycle_channel.as_deref()
    }

    /// Which instances' steps this runtime journals (SPEC G3).
    pub fn journal(&self) -> &journal::JournalPolicy {
        &self.shared.config.journal
    }

    /// The `[delegates]` routes this runtime loads definitions under.
    pub fn delegates(&self) -> &delegates::DelegateRoutes {
        &self.shared.config.delegates
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.shared.stats.clone()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    /// The clock the runtime steps by.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.shared.clock.clone()
    }

    /// Whether a handler is registered under `name` (a `q:task` it can run).
    pub fn has_handler(&self, name: &str) -> bool {
        self.shared.handlers.contains(name)
    }

    /// Deploys the executable process `process_id` of `source` (or its only process when
    /// `None`). The same content returns the same version (R5). A stateful definition is
    /// refused on a store that is not durable (L7).
    pub async fn deploy(
        &self,
        source: &str,
        process_id: Option<&str>,
    ) -> Result<DeploymentRecord, Error> {
        let now = self.shared.clock.now_ms();
        deploy(
            &self.shared.store,
            &self.shared.defs,
            source,
            process_id,
            now,
            None,
            Some(&self.shared.config.channels),
        )
        .await
    }

    /// [`Runtime::deploy`], and refused when a registered task (`q:task`) of the process
    /// has no handler in this runtime (a server's deploy endpoint).
    pub async fn deploy_checked(
        &self,
        source: &str,
        process_id: Option<&str>,
    ) -> Result<DeploymentRecord, Error> {
        let now = self.shared.clock.now_ms();
        deploy(
            &self.shared.store,
            &self.shared.defs,
            source,
            process_id,
            now,
            Some(&self.shared.handlers),
            Some(&self.shared.config.channels),
        )
        .await
    }

    /// Retires a deployment; refused while running or FAILED instances reference it.
    pub async fn retire(&self, id: DeploymentId) -> Result<RetireOutcome, Error> {
        let outcome = self.shared.store.retire(id).await?;
        if outcome == RetireOutcome::Retired {
            self.shared.defs.mark_retired(id);
        }
        Ok(outcome)
    }

    /// Starts an instance on `deployment`; returns once its first step is durable.
    pub async fn start_instance(
        &self,
        deployment: DeploymentId,
        variables: Variables,
    ) -> Result<InstanceId, Error> {
        self.start_watched(deployment, variables, None, false)
            .await
            .map(|(id, _)| id)
    }

    /// [`Runtime::start_instance`] with a business key, unique per deployment: a start
    /// with a key another instance of the deployment holds is refused
    /// ([`Error::DuplicateBusinessKey`], naming it) and writes nothing.
    pub async fn start_keyed(
        &self,
        deployment: DeploymentId,
        variables: Variables,
        business_key: Option<String>,
        watched: bool,
    ) -> Result<(InstanceId, Option<Watch>), Error> {
        self.start_watched(deployment, variables, business_key, watched)
            .await
    }

    /// [`Runtime::start_instance`], and a [`Watch`] answered once a token of the instance
    /// stands at a task marked `q:respond="true"` or the instance ends (R6) — possibly by
    /// its first step. The caller may drop the watch at any time; the instance goes on.
    pub async fn start_and_watch(
        &self,
        deployment: DeploymentId,
        variables: Variables,
    ) -> Result<(InstanceId, Watch), Error> {
        let (id, watch) = self
            .start_watched(deployment, variables, None, true)
            .await?;
        Ok((id, watch.expect("asked for a watch")))
    }

    /// Starts an instance on `deployment` under an id the caller chose; returns once its
    /// first step is durable. For a host that owns its ids, and for callers that must
    /// retry a start whose answer they lost (a commit reported failed may still have
    /// been applied): a second start of an existing id is refused with
    /// [`Error::Conflict`] and writes nothing, so "read it, start it if absent" is safe.
    /// Deterministic tests use it so that ids — and with them lanes and store order —
    /// follow a seed.
    pub async fn start_instance_with_id(
        &self,
        id: InstanceId,
        deployment: DeploymentId,
        variables: Variables,
    ) -> Result<(), Error> {
        let start = Start {
            business_key: None,
            event: None,
            parent: None,
        };
        self.start_with(id, deployment, variables, start, false)
            .await
            .map(|_| ())
    }

    /// Starts the called instance `id` of a call activity on `deployment` at its none
    /// start events, linked to `parent` (`calls`). A second start of `id` is refused with
    /// [`Error::Conflict`] and writes nothing. Returns once the first step is durable.
    pub(crate) async fn start_child_instance(
        &self,
        id: InstanceId,
        deployment: DeploymentId,
        variables: Variables,
        parent: qflow_core::ParentLink,
    ) -> Result<(), Error> {
        let start = Start {
            business_key: None,
            event: None,
            parent: Some(parent),
        };
        self.start_with(id, deployment, variables, start, false)
            .await
            .map(|_| ())
    }

    async fn start_watched(
        &self,
        deployment: DeploymentId,
        variables: Variables,
        business_key: Option<String>,
        watched: bool,
    ) -> Result<(InstanceId, Option<Watch>), Error> {
        let id = new_instance_id(self.shared.clock.now_ms());
        let start = Start {
            business_key,
            event: None,
            parent: None,
        };
        self.start_with(id, deployment, variables, start, watched)
            .await
    }

    /// Starts an instance on `deployment` at the start event `event`, which has a
    /// trigger (a message correlated to the deployment, a signal, a timer of its
    /// schedule): under `id` when given (a second start of it is refused with
    /// [`Error::Conflict`] and writes nothing, so a redelivered trigger starts nothing
    /// new), with a business key when given. Returns once the first step is durable.
    pub async fn start_triggered(
        &self,
        id: Option<InstanceId>,
        deployment: DeploymentId,
        event: &str,
        variables: Variables,
        business_key: Option<String>,
    ) -> Result<InstanceId, Error> {
        let id = id.unwrap_or_else(|| new_instance_id(self.shared.clock.now_ms()));
        let start = Start {
            business_key,
            event: Some(event.to_owned()),
            parent: None,
        };
        self.start_with(id, deployment, variables, start, false)
            .await
            .map(|(id, _)| id)
    }

    async fn start_with(
        &self,
        id: InstanceId,
        deployment: DeploymentId,
        variables: Variables,
        start: Start,
        watched: bool,
    ) -> Result<(InstanceId, Option<Watch>), Error> {
        if !self.shared.defs.known_live(deployment) {
            let record = self
                .shared
                .store
                .deployment(deployment)
                .await?
                .ok_or(Error::UnknownDeployment(deployment.0))?;
            if record.retired {
                return Err(Error::Refused {
                    what: "start".to_owned(),
                    why: format!("deployment {} is retired", deployment.0),
                });
            }
            self.shared.defs.mark_live(deployment);
        }
        // Registered before the first step, which may already reach the point.
        let watch = watched.then(|| self.shared.watchers.watch(id));
        let started = self
            .request(
                id,
                Work::Start {
                    deployment,
                    variables,
                    business_key: start.business_key,
                    start: start.event,
                    schedule: None,
                    parent: start.parent,
                },
            )
            .await;
        if let Err(e) = started {
            if watched {
                self.shared.watchers.forget(id);
            }
            return Err(e);
        }
        Ok((id, watch))
    }

    /// Reads `instance` as it stands in the store — its deployment's definition (from
    /// this runtime's cache of loaded definitions), decoded snapshot and fence — without
    /// stepping it.
    pub async fn claim(&self, instance: InstanceId) -> Result<claim::Claim, Error> {
        claim::Claim::read(&*self.shared.store, &self.shared.defs, instance).await
    }

    /// Steps `instance` with `input` outside the lanes — read, step, commit under the
    /// fence, re-derive on a lost compare-and-swap — and returns once the step is
    /// durable. The operation operator repairs are built on. Handler calls the step asks
    /// for are handed to the instance's lane to re-adopt (the lanes run every handler).
    pub async fn claim_and_step(
        &self,
        instance: InstanceId,
        input: Input,
    ) -> Result<claim::Stepped, Error> {
        self.claim_and_step_taking(instance, input, None).await
    }

    /// [`Runtime::claim_and_step`] of a step that delivers buffered message `take`, when
    /// given: the commit records the instance's process as its taker, and is refused
    /// ([`Error::Refused`]) when that process took it before or it expired.
    pub async fn claim_and_step_taking(
        &self,
        instance: InstanceId,
        input: Input,
        take: Option<&qflow_store::BufferedMessage>,
    ) -> Result<claim::Stepped, Error> {
        step_taking(&self.shared, instance, input, take).await
    }

    /// Feeds an input (a user-task completion, a message, a cancel) to an instance;
    /// returns once the step is durable.
    pub async fn send(&self, instance: InstanceId, input: Input) -> Result<(), Error> {
        self.request(instance, Work::Input(input)).await
    }

    /// [`Runtime::send`], returning the instance as the step left it (its fence the one
    /// the step's commit wrote): through the lane's group commit, without reading the
    /// state back from the store.
    pub async fn send_and_read(
        &self,
        instance: InstanceId,
        input: Input,
    ) -> Result<claim::Claim, Error> {
        let state = self
            .request_with(instance, Work::Input(input), true)
            .await?;
        state.ok_or_else(|| Error::UnknownInstance(instance.to_string()))
    }

    async fn request(&self, instance: InstanceId, work: Work) -> Result<(), Error> {
        self.request_with(instance, work, false).await.map(|_| ())
    }

    async fn request_with(
        &self,
        instance: InstanceId,
        work: Work,
        with_state: bool,
    ) -> Result<Option<claim::Claim>, Error> {
        request_in(&self.shared, instance, work, with_state).await
    }

    /// Waits until `done(stats)` holds. Re-checks after every committed round.
    pub async fn wait_until(&self, done: impl Fn(&StatsView) -> bool) {
        loop {
            let notified = self.shared.progress.notified();
            if done(&self.shared.stats.view()) {
                return;
            }
            notified.await;
        }
    }

    /// Graceful shutdown: stops the poller and new requests, lets every lane finish the
    /// handlers it is running and commit their outcomes, then returns.
    pub async fn shutdown(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.timer_armed.notify_one();
        if let Some(p) = self.poller.take() {
            let _ = p.await;
        }
        self.shared.stop.send_replace(true);
        if let Some(r) = self.retention.take() {
            let _ = r.await;
        }
        if let Some(b) = self.buffer.take() {
            let _ = b.await;
        }
        for t in self.lane_tasks.drain(..) {
            let _ = t.await;
        }
    }

    /// Stops everything at once without waiting for handlers: what a crash looks like
    /// from the store's point of view, minus the process exit. For tests of recovery.
    pub fn abort(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.stop.send_replace(true);
        if let Some(p) = self.poller.take() {
            p.abort();
        }
        if let Some(r) = self.retention.take() {
            r.abort();
        }
        if let Some(b) = self.buffer.take() {
            b.abort();
        }
        for t in self.lane_tasks.drain(..) {
            t.abort();
        }
    }
}

/// Sends `work` for `instance` to its lane and waits for the step (see
/// [`Runtime::request_with`]).
async fn request_in(
    shared: &Shared,
    instance: InstanceId,
    work: Work,
    with_state: bool,
) -> Result<Option<claim::Claim>, Error> {
    if shared.stopping.load(Ordering::SeqCst) {
        return Err(Error::ShuttingDown);
    }
    let (tx, rx) = oneshot::channel();
    let lane = shared.lane_of(instance);
    shared.lanes[lane]
        .send(Request {
            instance,
            work,
            started_ms: None,
            reply: Some(Replier { tx, with_state }),
            retries: 0,
        })
        .await
        .map_err(|_| Error::ShuttingDown)?;
    rx.await.map_err(|_| Error::ShuttingDown)?
}

/// [`Runtime::claim_and_step_taking`], for the runtime's own tasks (the buffer's).
pub(crate) async fn step_taking(
    shared: &Shared,
    instance: InstanceId,
    input: Input,
    take: Option<&qflow_store::BufferedMessage>,
) -> Result<claim::Stepped, Error> {
    if shared.stopping.load(Ordering::SeqCst) {
        return Err(Error::ShuttingDown);
    }
    let rules = claim::LeaseRules {
        lease_ms: shared.config.inflight_lease_ms,
        refresh_divisor: 2,
        handing_over: false,
    };
    let now = shared.clock.now_ms();
    let op = claim::Op {
        input,
        now,
        rules,
        audit: None,
        onto: None,
        dry_run: false,
        lifecycle: shared.config.lifecycle_channel.as_deref(),
        journal: &shared.config.journal,
        take,
    };
    let stepped = claim::claim_and_step(&*shared.store, &shared.defs, instance, op).await?;
    for topic in &stepped.pull_topics {
        shared.pull_bell.ring(topic);
    }
    if stepped.outbox {
        shared.outbox_emitted.notify_one();
    }
    buffer::waits_opened(shared, stepped.opened.clone());
    if !stepped.calls.is_empty() {
        request_in(shared, instance, Work::Input(Input::Redrive), false).await?;
    }
    shared.progress.notify_waiters();
    Ok(stepped)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn instance_ids_follow_the_start_instant_and_spread_evenly_over_lanes() {
        let early = new_instance_id(1_700_000_000_000);
        let late = new_instance_id(1_700_000_000_001);
        assert!(early < late, "{early} must sort before {late}");
        assert_eq!(early.get_version_num(), 7);

        // Same millisecond: the random tail keeps ids distinct and lanes balanced.
        let mut seen = BTreeSet::new();
        let mut per_lane = [0u32; 4];
        for _ in 0..4_000 {
            let id = new_instance_id(1_700_000_000_002);
            assert!(seen.insert(id), "duplicate id {id}");
            per_lane[lane_index(id, 4)] += 1;
        }
        assert!(per_lane.iter().all(|&n| n > 800), "{per_lane:?}");
    }
}
