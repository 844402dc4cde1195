//! The one library API for operator and application operations (SPEC O1–O5): the CLI
//! calls it today, the HTTP server will; neither front end holds logic of its own.
//!
//! Reads come from the store; every change is an [`Input`] stepped under the claim
//! ([`qflow_runtime::Stepper`]), so the core re-checks each precondition against the
//! instance's durable state — a resume of an instance that is no longer FAILED, or a
//! retry-now with no backoff pending, is refused by the core and writes nothing. Attempts
//! an operation starts are handed to whichever runtime serves the store (a due lease it
//! re-adopts), so `qflow instances resume` works beside a running `qflow run` or server
//! and before one starts.
//!
//! Every change is audited: the actor, the action, its arguments and the fences it moved
//! between are written in the same transaction as the step (a refused operation changes
//! nothing, so it leaves no row either).
//!
//! Starting instances needs a runtime to run their handlers: an `Ops` built with
//! [`Ops::with_runtime`] (the server's) starts them; one on a bare store (the CLI's)
//! refuses, saying so.
//!
//! User tasks (the task list: list, claim, unclaim, complete) are in [`user_tasks`];
//! external workers' pull tasks in [`pull`].

pub mod keys;
mod messages;
mod migration;
pub mod pull;
pub mod replay;
pub mod user_tasks;

use std::sync::Arc;

use qflow_core::{Budget, Input, Snapshot, TimerKind};
use qflow_runtime::claim::Stepped;
use qflow_runtime::{Runtime, Stepper};
use qflow_store::{
    AttemptRecord, AuditEntry, AuditRecord, DeploymentId, DeploymentRecord, IncidentRecord,
    InstanceFilter, InstanceId, InstanceRecord, InstanceStatus, RetireOutcome, Store, StoreError,
    TimerRecord,
};
use serde::Serialize;

mod models;

pub use messages::{
    BufferedView, ChannelAnswerRequest, ChannelBpmnError, Correlated, Delivery, MessageRequest,
    RelayVerdict, SignalBroadcast, SignalCatch, SignalRequest, SignalStart, BPMN_MESSAGE_CHARS_MAX,
    IDEMPOTENCY_KEY_CHARS_MAX, MESSAGE_ID_CHARS_MAX, MESSAGE_NAME_CHARS_MAX, SIGNAL_ID_CHARS_MAX,
    TIME_TO_LIVE_MS_MAX,
};
pub use migration::{
    MigrationOutcome, MigrationPlan, MigrationReport, MigrationResult, MigrationSummary,
};
pub use models::{ActiveElement, InstanceElements, NodeInfo};
pub use qflow_loader::explain::{self, Timeline};
pub use user_tasks::{Backfilled, UserTaskDetail, UserTaskListQuery, UserTaskView};

pub mod json;

/// Why an operation did not happen. Nothing was written in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such instance or deployment.
    #[error("{what} {id} does not exist")]
    NotFound { what: &'static str, id: String },
    /// The request is not one this operation accepts (a malformed id, a bad filter).
    #[error("{field}: {why}")]
    Invalid { field: &'static str, why: String },
    /// The core or the runtime refused the operation on the instance's current state.
    #[error("{0}")]
    Refused(String),
    /// The instance kept changing under the operation.
    #[error("{0}")]
    Conflict(String),
    /// The store failed.
    #[error("store: {0}")]
    Store(String),
}

impl Error {
    /// A stable code for front ends (CLI exit statuses, HTTP problem types).
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::Invalid { .. } => "invalid",
            Error::Refused(_) => "refused",
            Error::Conflict(_) => "conflict",
            Error::Store(_) => "store",
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            // Asked a key of an instance retention purged meanwhile (or never held).
            StoreError::UnknownInstance(id) => Error::NotFound {
                what: "instance",
                id: id.to_string(),
            },
            e => Error::Store(e.to_string()),
        }
    }
}

impl From<qflow_runtime::Error> for Error {
    fn from(e: qflow_runtime::Error) -> Self {
        use qflow_runtime::Error as R;
        match e {
            R::Refused { why, .. } => Error::Refused(why),
            R::UnknownInstance(id) => Error::NotFound {
                what: "instance",
                id,
            },
            R::UnknownDeployment(id) => Error::NotFound {
                what: "deployment",
                id: id.to_string(),
            },
            R::Conflict(why) => Error::Conflict(why),
            R::DuplicateBusinessKey { .. } => Error::Refused(e.to_string()),
            // A plain start of a process that starts only on its triggers, or a start
            // naming no triggered start event: the request's fault, not the store's.
            R::Core(
                qflow_core::Error::NoStartEvent(_) | qflow_core::Error::UnknownStart { .. },
            ) => Error::Refused(e.to_string()),
            other => Error::Store(other.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Parses an instance id as given by a person or a URL.
pub fn parse_instance_id(s: &str) -> Result<InstanceId> {
    InstanceId::parse_str(s.trim()).map_err(|e| Error::Invalid {
        field: "instance",
        why: format!("`{s}` is not an instance id (a UUID): {e}"),
    })
}

/// One deployment, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DeploymentSummary {
    pub id: i64,
    pub process_id: String,
    pub content_hash: String,
    pub deployed_at_ms: i64,
    pub retired: bool,
    /// The schedules of its timer start events that will still start instances: only
    /// the newest deployment of a process has them (absent when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleSummary>,
    /// In a deploy's answer: the pull topics its tasks are offered on, each with the
    /// tasks and what binds them — the workers to run (absent when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<TopicNeed>,
}

/// A pull topic a deployment needs a worker for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TopicNeed {
    pub topic: String,
    /// The BPMN ids of the tasks offered on it, in document order.
    pub tasks: Vec<String>,
    /// The Camunda 7 Java bindings it serves (`camunda:class com.acme.ChargeCard`), in
    /// document order, when it was derived from or routed for one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<String>,
}

/// The pull topics of `def`, in order of first use.
fn topic_needs(def: &qflow_core::Definition) -> Vec<TopicNeed> {
    use qflow_loader::model::{NodeKind, TaskKind};
    use std::collections::{BTreeMap, BTreeSet};
    let mut needs: Vec<TopicNeed> = Vec::new();
    // By name, so that a model of many pull tasks costs its size, not its square.
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen: BTreeSet<(usize, bool, String)> = BTreeSet::new();
    for n in &def.process.nodes {
        let NodeKind::Task(t) = &n.kind else { continue };
        let TaskKind::Pull { topic, .. } = &t.kind else {
            continue;
        };
        let i = *at.entry(topic.clone()).or_insert_with(|| {
            needs.push(TopicNeed {
                topic: topic.clone(),
                tasks: Vec::new(),
                bindings: Vec::new(),
            });
            needs.len() - 1
        });
        // Inner instances of a multi-instance task are the task's own: named once.
        let id = n.id.split(['#', '@']).next().unwrap_or(&n.id).to_owned();
        if seen.insert((i, false, id.clone())) {
            needs[i].tasks.push(id);
        }
        if let Some(d) = &t.delegate {
            let b = format!("camunda:{} {}", d.kind.attribute(), d.text);
            if seen.insert((i, true, b.clone())) {
                needs[i].bindings.push(b);
            }
        }
    }
    needs
}

/// When a deployment's timer start event next starts an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ScheduleSummary {
    /// The timer start event's BPMN id.
    pub start_event: String,
    /// The next occurrence, in milliseconds since the Unix epoch.
    pub next_start_at_ms: i64,
    /// Starts left, the next one included; absent for an unbounded cycle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u32>,
}

impl From<&DeploymentRecord> for DeploymentSummary {
    fn from(d: &DeploymentRecord) -> Self {
        DeploymentSummary {
            id: d.id.0,
            process_id: d.process_id.clone(),
            content_hash: d.content_hash.clone(),
            deployed_at_ms: d.deployed_at_ms,
            retired: d.retired,
            schedules: Vec::new(),
            topics: Vec::new(),
        }
    }
}

impl DeploymentSummary {
    /// The summary with the schedules among `all` that are this deployment's.
    fn with_schedules(mut self, all: &[qflow_store::ScheduleRecord]) -> DeploymentSummary {
        self.schedules = all
            .iter()
            .filter(|s| s.deployment.0 == self.id)
            .map(|s| ScheduleSummary {
                start_event: s.node.clone(),
                next_start_at_ms: s.due_at_ms,
                remaining: s.remaining,
            })
            .collect();
        self
    }
}

/// One instance, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct InstanceSummary {
    pub id: String,
    pub deployment: i64,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub business_key: Option<String>,
    pub fence: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// When it completed or was cancelled (absent while it runs or is FAILED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
    /// A called instance's parent: the instance and the call activity that started it
    /// (absent for an instance started any other way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentView>,
}

/// Where a called instance was called from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ParentView {
    pub instance: String,
    /// The call activity's activity-instance name in the parent.
    pub node: String,
}

impl From<&InstanceRecord> for InstanceSummary {
    fn from(r: &InstanceRecord) -> Self {
        // Only a called instance has a parent link; a snapshot that does not decode shows
        // none here (inspecting it says why).
        let parent = qflow_core::Snapshot::decode(&r.snapshot)
            .ok()
            .and_then(|s| {
                s.parent().map(|p| ParentView {
                    instance: p.instance.clone(),
                    node: p.node.clone(),
                })
            });
        InstanceSummary {
            parent,
            ended_at_ms: r.ended_at_ms,
            id: r.id.to_string(),
            deployment: r.deployment.0,
            status: r.status.as_str(),
            failure_code: r.failure_code.clone(),
            business_key: r.business_key.clone(),
            fence: r.fence,
            created_at_ms: r.created_at_ms,
            updated_at_ms: r.updated_at_ms,
        }
    }
}

/// Which instances to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceQuery {
    pub deployment: Option<i64>,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: Option<String>,
    pub failure_code: Option<String>,
    /// Only the instance with this business key.
    pub business_key: Option<String>,
    /// Only instances created at or after this instant (ms since the epoch).
    pub created_from_ms: Option<i64>,
    /// Only instances created before this instant.
    pub created_to_ms: Option<i64>,
    /// Only instances that ended (completed or cancelled) at or after this instant.
    pub ended_from_ms: Option<i64>,
    /// Only instances that ended before this instant.
    pub ended_to_ms: Option<i64>,
    /// Only instances that stand at this node: an open incident on it (where a FAILED
    /// instance failed), a retry park, a `q:timeout` window or a timer catch of it, or an
    /// open message subscription at it.
    pub node: Option<String>,
    /// The `next` cursor of the previous page: the listing continues after it.
    pub cursor: Option<String>,
    /// At most this many (the store caps it at 10,000); 0 means the cap.
    pub limit: u32,
}

/// One page of a listing, in a stable order (creation instant, then id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A listing cursor: the position of a page's last row, `<created_at_ms>.<id>`. Opaque to
/// callers; it stays valid while rows are added (keyset pagination never skips or repeats
/// a row that was there before the first page).
/// The cursor of a listing page that ends at `instance`: passed as `cursor`, the listing
/// continues after it (for front ends that filter a page further and stop within it).
pub fn instance_cursor(instance: &InstanceSummary) -> Result<String> {
    let id = parse_instance_id(&instance.id)?;
    Ok(encode_cursor(instance.created_at_ms, id))
}

fn encode_cursor(created_at_ms: i64, id: InstanceId) -> String {
    format!("{created_at_ms}.{id}")
}

fn decode_cursor(cursor: &str) -> Result<(i64, InstanceId)> {
    let bad = || Error::Invalid {
        field: "cursor",
        why: format!("`{cursor}` is not a cursor this listing returned"),
    };
    let (at, id) = cursor.split_once('.').ok_or_else(bad)?;
    let at = at.parse::<i64>().map_err(|_| bad())?;
    let id = InstanceId::parse_str(id).map_err(|_| bad())?;
    Ok((at, id))
}

/// A request to start an instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartRequest {
    /// The deployment version to start on.
    pub deployment: Option<i64>,
    /// Or the process id: its newest live deployment.
    pub process_id: Option<String>,
    /// The instance's variables (a JSON object).
    pub variables: qflow_core::Variables,
    /// Unique per deployment when given: 1 to [`BUSINESS_KEY_CHARS_MAX`] characters, no
    /// control characters.
    pub business_key: Option<String>,
}

/// A started instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Started {
    pub instance: String,
    pub deployment: i64,
}

/// Longest a start may wait for its instance (R6).
pub const START_WAIT_MS_MAX: u64 = 25_000;

/// A started instance, and where it stood when the caller was answered (R6).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct StartedAndWaited {
    pub instance: String,
    pub deployment: i64,
    /// `respond` (a token stood at a `q:respond` task), `ended`, or `time_limit` (the
    /// wait ran out first; the instance goes on).
    pub reached: &'static str,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: &'static str,
    /// The `q:respond` task, when `reached` is `respond`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The failure code of a FAILED instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    /// The instance's variables at that point.
    #[schema(value_type = Object)]
    pub variables: qflow_core::Variables,
}

/// A live timer row, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TimerView {
    pub name: String,
    /// `retry` (a backoff park), `timeout`, `boundary`, `catch` or `lease`.
    #[schema(value_type = String)]
    pub kind: TimerKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub due_at_ms: i64,
    pub incarnation: u32,
}

impl From<&TimerRecord> for TimerView {
    fn from(t: &TimerRecord) -> Self {
        TimerView {
            name: t.name.to_string(),
            kind: t.name.kind(),
            node: t.name.node().map(str::to_owned),
            due_at_ms: t.due_at_ms,
            incarnation: t.incarnation,
        }
    }
}

/// One attempt of one task (O1a).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub node: String,
    pub attempt: u32,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The external worker that held a pull task's attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

impl From<&AttemptRecord> for AttemptView {
    fn from(a: &AttemptRecord) -> Self {
        AttemptView {
            node: a.node.clone(),
            attempt: a.attempt.get(),
            started_at_ms: a.started_at_ms,
            finished_at_ms: a.finished_at_ms,
            outcome: a.outcome.as_str(),
            code: a.code.clone(),
            message: a.message.clone(),
            worker: a.worker.clone(),
        }
    }
}

/// An incident (O4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct IncidentView {
    pub id: i64,
    pub instance: String,
    pub node: String,
    pub code: String,
    pub message: String,
    pub opened_at_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at_ms: Option<i64>,
}

impl From<&IncidentRecord> for IncidentView {
    fn from(i: &IncidentRecord) -> Self {
        IncidentView {
            id: i.id,
            instance: i.instance.to_string(),
            node: i.node.clone(),
            code: i.code.clone(),
            message: i.message.clone(),
            opened_at_ms: i.opened_at_ms,
            resolved_at_ms: i.resolved_at_ms,
        }
    }
}

/// Everything an operator needs to understand one instance (O1).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct InstanceView {
    pub instance: InstanceSummary,
    pub deployment: DeploymentSummary,
    /// The decoded snapshot: status, failure, wait frontier, variables, attempt
    /// counters, backoff markers, budget bases (`Snapshot::inspect`).
    #[schema(value_type = Object)]
    pub snapshot: serde_json::Value,
    pub timers: Vec<TimerView>,
    pub incidents: Vec<IncidentView>,
    /// Open message subscriptions (correlation keys), by node.
    pub subscriptions: Vec<SubscriptionView>,
}

/// An open message subscription of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SubscriptionView {
    pub node: String,
    pub message: String,
    pub correlation_key: String,
    pub opened_at_ms: i64,
}

/// How many instances are in each state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
pub struct InstanceCounts {
    pub running: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// A row of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    pub id: i64,
    pub instance: String,
    pub at_ms: i64,
    pub actor: String,
    pub action: String,
    pub detail: String,
    pub fence_before: Option<u64>,
    pub fence_after: u64,
}

impl From<&AuditRecord> for AuditView {
    fn from(a: &AuditRecord) -> Self {
        AuditView {
            id: a.id,
            instance: a.instance.to_string(),
            at_ms: a.at_ms,
            actor: a.actor.clone(),
            action: a.action.clone(),
            detail: a.detail.clone(),
            fence_before: a.fence_before,
            fence_after: a.fence_after,
        }
    }
}

/// What an operation that steps an instance did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Applied {
    pub instance: String,
    pub fence_before: u64,
    pub fence_after: u64,
    pub status: &'static str,
    /// Attempts the step started, handed to the runtime serving the store.
    pub attempts_started: Vec<String>,
}

/// The operator API over one store, acting as one actor. Cheap to clone; clones share
/// the definition cache and the runtime.
#[derive(Clone)]
pub struct Ops {
    shared: Arc<Shared>,
    actor: Arc<str>,
}

struct Shared {
    stepper: Stepper,
    /// The `[delegates]` routes the stepper loads definitions under.
    routes: qflow_runtime::delegates::DelegateRoutes,
    now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    runtime: Option<Arc<Runtime>>,
}

impl Ops {
    /// Operations on `store` by `actor` (who the audit log names), with `now_ms` as the
    /// clock for the steps they take.
    pub fn new(
        store: Arc<dyn Store>,
        now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
        actor: impl Into<String>,
    ) -> Ops {
        Ops {
            shared: Arc::new(Shared {
                stepper: Stepper::new(store),
                routes: qflow_runtime::delegates::DelegateRoutes::new(),
                now_ms,
                runtime: None,
            }),
            actor: Arc::from(actor.into()),
        }
    }

    /// The same operations, loading deployments under these `[delegates]` routes (an
    /// offline tool working on a server's store gives the server's): a deployment made
    /// under other routes is refused rather than stepped as another model.
    pub fn with_delegates(self, routes: qflow_runtime::delegates::DelegateRoutes) -> Ops {
        let journal = self.shared.stepper.journal().clone();
        self.rebuilt(routes, journal)
    }

    /// The same operations, journaling the steps they take under `policy` (SPEC G3), as
    /// the runtime serving the store does: an operator's resume of a journaled instance
    /// leaves no gap in its journal. An offline tool gives the server's `[journal]`.
    pub fn with_journal(self, policy: qflow_runtime::journal::JournalPolicy) -> Ops {
        let routes = self.shared.routes.clone();
        self.rebuilt(routes, policy)
    }

    fn rebuilt(
        self,
        routes: qflow_runtime::delegates::DelegateRoutes,
        journal: qflow_runtime::journal::JournalPolicy,
    ) -> Ops {
        let stepper = Stepper::new(self.shared.stepper.store().clone())
            .with_lifecycle_channel(self.shared.stepper.lifecycle_channel().map(str::to_owned))
            .with_delegates(routes.clone())
            .with_journal(journal);
        Ops {
            shared: Arc::new(Shared {
                stepper,
                routes,
                now_ms: self.shared.now_ms.clone(),
                runtime: self.shared.runtime.clone(),
            }),
            actor: self.actor,
        }
    }

    /// Operations served by `runtime` (its store and clock), which runs the handlers of
    /// the instances they start; they journal and route as it does.
    pub fn with_runtime(runtime: Arc<Runtime>, actor: impl Into<String>) -> Ops {
        let clock = runtime.clock();
        Ops {
            shared: Arc::new(Shared {
                stepper: Stepper::new(runtime.store().clone())
                    .with_lifecycle_channel(runtime.lifecycle_channel().map(str::to_owned))
                    .with_delegates(runtime.delegates().clone())
                    .with_journal(runtime.journal().clone()),
                routes: runtime.delegates().clone(),
                now_ms: Arc::new(move || clock.now_ms()),
                runtime: Some(runtime),
            }),
            actor: Arc::from(actor.into()),
        }
    }

    /// The same operations, acting as `actor` (a server's per-request caller).
    pub fn as_actor(&self, actor: &str) -> Ops {
        Ops {
            shared: self.shared.clone(),
            actor: Arc::from(actor),
        }
    }

    /// Who the audit log names for this handle's changes.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Whether the store answers (a readiness probe).
    pub async fn ready(&self) -> Result<()> {
        self.store().next_timer_due().await?;
        Ok(())
    }

    /// Starts an instance and returns once its first step is durable. Needs the runtime
    /// of [`Ops::with_runtime`].
    pub async fn start(&self, request: StartRequest) -> Result<Started> {
        let Some(runtime) = &self.shared.runtime else {
            return Err(no_runtime());
        };
        let deployment = self.deployment_of(&request).await?;
        check_variables(&request.variables)?;
        check_business_key(request.business_key.as_deref())?;
        let (id, _) = runtime
            .start_keyed(
                DeploymentId(deployment),
                request.variables,
                request.business_key,
                false,
            )
            .await?;
        Ok(Started {
            instance: id.to_string(),
            deployment,
        })
    }

    /// Starts an instance and waits up to `wait_ms` (at most [`START_WAIT_MS_MAX`]) until
    /// a token of it stands at a task marked `q:respond="true"` or it ends, then answers
    /// with its variables so far (R6). The instance never waits for the caller: when the
    /// time runs out it goes on, and the answer says `time_limit` with the state read
    /// back from the store.
    pub async fn start_and_wait(
        &self,
        request: StartRequest,
        wait_ms: u64,
    ) -> Result<StartedAndWaited> {
        let Some(runtime) = &self.shared.runtime else {
            return Err(no_runtime());
        };
        if wait_ms == 0 || wait_ms > START_WAIT_MS_MAX {
            return Err(Error::Invalid {
                field: "wait_ms",
                why: format!("{wait_ms} is outside 1..={START_WAIT_MS_MAX}"),
            });
        }
        let deployment = self.deployment_of(&request).await?;
        check_variables(&request.variables)?;
        check_business_key(request.business_key.as_deref())?;
        let (id, watch) = runtime
            .start_keyed(
                DeploymentId(deployment),
                request.variables,
                request.business_key,
                true,
            )
            .await?;
        let watch = watch.expect("asked for a watch");
        let clock = runtime.clock();
        let deadline = clock.now_ms().saturating_add(wait_ms as i64);
        let answered = tokio::select! {
            observed = watch.answered() => observed,
            () = clock.sleep_until(deadline) => None,
        };
        let (reached, status, node, variables) = match answered {
            Some(o) => (
                if o.status.is_terminal() {
                    "ended"
                } else {
                    "respond"
                },
                o.status,
                o.responded_at,
                o.variables,
            ),
            None => {
                let record = self.record(id).await?;
                let snap = Snapshot::decode(&record.snapshot).map_err(|e| {
                    Error::Store(format!("instance {id} has an undecodable snapshot: {e}"))
                })?;
                ("time_limit", snap.status(), None, snap.variables().clone())
            }
        };
        let failure_code = if status == qflow_core::Status::Failed {
            self.record(id).await?.failure_code
        } else {
            None
        };
        Ok(StartedAndWaited {
            instance: id.to_string(),
            deployment,
            reached,
            status: qflow_runtime::claim::store_status(status).as_str(),
            node,
            failure_code,
            variables,
        })
    }

    async fn deployment_of(&self, request: &StartRequest) -> Result<i64> {
        match (&request.deployment, &request.process_id) {
            (Some(d), None) => Ok(*d),
            (None, Some(p)) => self.latest_live(p).await,
            _ => Err(Error::Invalid {
                field: "deployment",
                why: "give exactly one of `deployment` and `process_id`".to_owned(),
            }),
        }
    }

    async fn latest_live(&self, process_id: &str) -> Result<i64> {
        let all = self.store().deployments().await?;
        all.iter()
            .filter(|d| d.process_id == process_id && !d.retired)
            .map(|d| d.id.0)
            .max()
            .ok_or_else(|| Error::NotFound {
                what: "live deployment of process",
                id: process_id.to_owned(),
            })
    }

    /// The audit log, of one instance or of all, oldest first (the newest `limit` rows;
    /// 0 for the cap).
    pub async fn audit(&self, instance: Option<InstanceId>, limit: u32) -> Result<Vec<AuditView>> {
        if let Some(id) = instance {
            self.record(id).await?;
        }
        let rows = self.store().audit(instance, limit).await?;
        Ok(rows.iter().map(AuditView::from).collect())
    }

    fn store(&self) -> &dyn Store {
        &**self.shared.stepper.store()
    }

    /// Deploys the executable process `process_id` of `source` (its only one when `None`):
    /// the same content gets the same version; a model the loader refuses is refused
    /// with every diagnostic, and nothing is stored.
    pub async fn deploy(
        &self,
        source: &str,
        process_id: Option<&str>,
    ) -> Result<DeploymentSummary> {
        let record = match &self.shared.runtime {
            // A server: refused when a task has no handler here.
            Some(runtime) => runtime.deploy_checked(source, process_id).await?,
            None => {
                self.shared
                    .stepper
                    .deploy(source, process_id, (self.shared.now_ms)())
                    .await?
            }
        };
        let schedules = self.store().schedules(Some(record.id)).await?;
        let def = self.shared.stepper.definition(record.id).await?;
        let mut summary = DeploymentSummary::from(&record).with_schedules(&schedules);
        summary.topics = topic_needs(&def);
        Ok(summary)
    }

    /// Retires a deployment: no new instance starts on it. Refused while running or
    /// FAILED instances reference it, saying how many.
    pub async fn retire(&self, id: i64) -> Result<DeploymentSummary> {
        // Through the runtime when one serves here, so its start path forgets the
        // deployment at once.
        let outcome = match &self.shared.runtime {
            Some(runtime) => runtime.retire(DeploymentId(id)).await?,
            None => self.store().retire(DeploymentId(id)).await?,
        };
        match outcome {
            RetireOutcome::Retired => {}
            RetireOutcome::Refused { blocking_instances } => {
                return Err(Error::Refused(format!(
                    "deployment {id} is referenced by {blocking_instances} running or FAILED \
                     instance(s); finish, cancel or migrate them first \
                     (`qflow instances list --deployment {id}`)"
                )))
            }
            RetireOutcome::NotFound => {
                return Err(Error::NotFound {
                    what: "deployment",
                    id: id.to_string(),
                })
            }
        }
        let record = self.store().deployment(DeploymentId(id)).await?;
        let record = record.ok_or_else(|| Error::NotFound {
            what: "deployment",
            id: id.to_string(),
        })?;
        Ok(DeploymentSummary::from(&record))
    }

    async fn deployment_record(&self, id: i64) -> Result<DeploymentRecord> {
        self.store()
            .deployment(DeploymentId(id))
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "deployment",
                id: id.to_string(),
            })
    }

    /// All deployments, oldest first.
    pub async fn deployments(&self) -> Result<Vec<DeploymentSummary>> {
        let all = self.store().deployments().await?;
        let schedules = self.store().schedules(None).await?;
        Ok(all
            .iter()
            .map(|d| DeploymentSummary::from(d).with_schedules(&schedules))
            .collect())
    }

    /// Instances matching `query`, in creation order, one page.
    pub async fn instances(&self, query: &InstanceQuery) -> Result<Page<InstanceSummary>> {
        let status = match &query.status {
            None => None,
            Some(s) => Some(InstanceStatus::parse(s).ok_or_else(|| Error::Invalid {
                field: "status",
                why: format!("`{s}` is not one of running, completed, failed, cancelled"),
            })?),
        };
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let filter = InstanceFilter {
            deployment: query.deployment.map(DeploymentId),
            status,
            failure_code: query.failure_code.clone(),
            business_key: query.business_key.clone(),
            created_from_ms: query.created_from_ms,
            created_to_ms: query.created_to_ms,
            ended_from_ms: query.ended_from_ms,
            ended_to_ms: query.ended_to_ms,
            node: query.node.clone(),
            after,
            limit: query.limit,
        };
        let rows = self.store().instances(&filter).await?;
        let full =
            rows.len() == qflow_store::memory::effective_instances_limit(query.limit) as usize;
        let next = rows
            .last()
            .filter(|_| full)
            .map(|r| encode_cursor(r.created_at_ms, r.id));
        Ok(Page {
            items: rows.iter().map(InstanceSummary::from).collect(),
            next,
        })
    }

    async fn record(&self, id: InstanceId) -> Result<InstanceRecord> {
        self.store()
            .instance(id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "instance",
                id: id.to_string(),
            })
    }

    /// One instance's row, without its snapshot decoded.
    pub async fn instance(&self, id: InstanceId) -> Result<InstanceSummary> {
        Ok(InstanceSummary::from(&self.record(id).await?))
    }

    /// One instance's variables, as its snapshot holds them.
    pub async fn variables(&self, id: InstanceId) -> Result<qflow_core::Variables> {
        let record = self.record(id).await?;
        let snap = Snapshot::decode(&record.snapshot)
            .map_err(|e| Error::Store(format!("instance {id} has an undecodable snapshot: {e}")))?;
        Ok(snap.variables().clone())
    }

    /// One instance, decoded (O1).
    pub async fn inspect(&self, id: InstanceId) -> Result<InstanceView> {
        let record = self.record(id).await?;
        let deployment = self
            .store()
            .deployment(record.deployment)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "deployment",
                id: record.deployment.0.to_string(),
            })?;
        let snapshot = match Snapshot::decode(&record.snapshot) {
            Ok(s) => s.inspect(),
            // Shown, not hidden: an undecodable snapshot is exactly what an operator must
            // see.
            Err(e) => serde_json::json!({ "undecodable": e.to_string() }),
        };
        let timers = self.store().timers(id).await?;
        let incidents = self.store().incidents(Some(id)).await?;
        let subscriptions = self.store().instance_subscriptions(id).await?;
        Ok(InstanceView {
            instance: InstanceSummary::from(&record),
            deployment: DeploymentSummary::from(&deployment),
            snapshot,
            timers: timers.iter().map(TimerView::from).collect(),
            incidents: incidents.iter().map(IncidentView::from).collect(),
            subscriptions: subscriptions
                .into_iter()
                .map(|s| SubscriptionView {
                    node: s.node,
                    message: s.message,
                    correlation_key: s.key,
                    opened_at_ms: s.opened_at_ms,
                })
                .collect(),
        })
    }

    /// How many instances are in each state, of one deployment or of all (one indexed
    /// count per state).
    pub async fn instance_counts(&self, deployment: Option<i64>) -> Result<InstanceCounts> {
        let mut counts = InstanceCounts::default();
        let deployment = deployment.map(DeploymentId);
        for (status, n) in self.store().instance_counts(deployment).await? {
            *match status {
                InstanceStatus::Running => &mut counts.running,
                InstanceStatus::Completed => &mut counts.completed,
                InstanceStatus::Failed => &mut counts.failed,
                InstanceStatus::Cancelled => &mut counts.cancelled,
            } = n;
        }
        Ok(counts)
    }

    /// Every attempt of every task of the instance, in order (O1a).
    pub async fn history(&self, id: InstanceId) -> Result<Vec<AttemptView>> {
        self.record(id).await?;
        let rows = self.store().attempts(id).await?;
        Ok(rows.iter().map(AttemptView::from).collect())
    }

    /// Every incident of one instance, oldest first; or, across instances, the newest
    /// `limit` (0: the 10,000 cap), also oldest first — bounded however many there are.
    pub async fn incidents(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> Result<Vec<IncidentView>> {
        let rows = match instance {
            Some(id) => {
                self.record(id).await?;
                self.store().incidents(Some(id)).await?
            }
            None => {
                let mut newest = self.store().latest_incidents(limit, false).await?;
                newest.reverse();
                newest
            }
        };
        Ok(rows.iter().map(IncidentView::from).collect())
    }

    /// The newest `limit` incidents across instances, newest first; only the open ones
    /// with `open_only` (what an operator's incident list shows).
    pub async fn latest_incidents(&self, limit: u32, open_only: bool) -> Result<Vec<IncidentView>> {
        let rows = self.store().latest_incidents(limit, open_only).await?;
        Ok(rows.iter().map(IncidentView::from).collect())
    }

    /// Resumes a FAILED instance (O3), keeping or resetting the budget its failed task
    /// burned. Refused for an instance that is not FAILED.
    pub async fn resume(&self, id: InstanceId, budget: Budget) -> Result<Applied> {
        let detail = match budget {
            Budget::Keep => "budget=keep",
            Budget::Reset => "budget=reset",
        };
        self.apply(id, Input::Resume { budget }, "resume", detail.to_owned())
            .await
    }

    /// Runs the next attempt of a task in a backoff window now (O4a): `node`, or every
    /// parked task. The attempt counter is untouched. Refused when no backoff is pending.
    pub async fn retry_now(&self, id: InstanceId, node: Option<String>) -> Result<Applied> {
        let detail = match &node {
            Some(n) => format!("node={n}"),
            None => "node=*".to_owned(),
        };
        self.apply(id, Input::RetryNow { node }, "retry_now", detail)
            .await
    }

    /// Resolves the open incidents of an instance on `node` by hand (O4), audited.
    /// Refused when none is open there. The instance itself is unchanged (its fence
    /// moves): a FAILED instance stays FAILED until resumed, migrated or cancelled.
    pub async fn resolve_incident(&self, id: InstanceId, node: &str) -> Result<Applied> {
        self.record(id).await?;
        let open = self.store().incidents(Some(id)).await?;
        if !open
            .iter()
            .any(|i| i.node == node && i.resolved_at_ms.is_none())
        {
            return Err(Error::Refused(format!(
                "instance {id} has no open incident on `{node}`"
            )));
        }
        let input = Input::ResolveIncident {
            node: node.to_owned(),
        };
        self.apply(id, input, "resolve_incident", format!("node={node}"))
            .await
    }

    /// Cancels a running or FAILED instance (a FAILED one has its failure cleared and
    /// its incident resolved, as Zeebe and Camunda 7 cancel one with an incident).
    pub async fn cancel(&self, id: InstanceId) -> Result<Applied> {
        self.apply(id, Input::Cancel, "cancel", String::new()).await
    }

    async fn apply(
        &self,
        id: InstanceId,
        input: Input,
        action: &str,
        detail: String,
    ) -> Result<Applied> {
        let audit = self.audit_entry(action, detail);
        let stepped = self
            .step_taking(id, input, &audit, None)
            .await
            .map_err(Error::from)?;
        Ok(applied_of(id, &stepped))
    }

    /// The audit row of an operation this caller carries out.
    pub(crate) fn audit_entry(&self, action: &str, detail: String) -> AuditEntry {
        AuditEntry {
            actor: self.actor.to_string(),
            action: action.to_owned(),
            detail,
        }
    }

    /// Steps instance `id` with `input` through the stepper, `audit` in the commit, and
    /// delivering buffered message `take` when given; tells the runtime (when there is
    /// one) of the message waits the step opened, where a kept message may be due.
    pub(crate) async fn step_taking(
        &self,
        id: InstanceId,
        input: Input,
        audit: &AuditEntry,
        take: Option<&qflow_store::BufferedMessage>,
    ) -> std::result::Result<Stepped, qflow_runtime::Error> {
        let stepped = self
            .shared
            .stepper
            .step_taking(id, input, (self.shared.now_ms)(), Some(audit), take)
            .await?;
        if let Some(runtime) = &self.shared.runtime {
            runtime.waits_opened(&stepped.opened);
        }
        Ok(stepped)
    }
}

/// What a step of instance `id` applied, as the API reports it.
pub(crate) fn applied_of(id: InstanceId, stepped: &Stepped) -> Applied {
    let status = qflow_runtime::claim::store_status(stepped.claim.snapshot.status());
    Applied {
        instance: id.to_string(),
        fence_before: stepped.fence - 1,
        fence_after: stepped.fence,
        status: status.as_str(),
        attempts_started: stepped
            .calls
            .iter()
            .chain(&stepped.handed_over)
            .map(|c| format!("{}#{}", c.node, c.attempt))
            .collect(),
    }
}

/// A name the API takes (a message name, a correlation key, a worker id, a topic, an
/// error code): 1 to `max` characters, no control characters.
pub(crate) fn check_text(field: &'static str, text: &str, max: usize) -> Result<()> {
    let chars = text.chars().count();
    let why = if chars == 0 || chars > max {
        format!("is 1 to {max} characters, this one is {chars}")
    } else if text.chars().any(char::is_control) {
        "may not hold control characters".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::Invalid { field, why })
}

/// Longest business key, in characters: 64 characters of UTF-8 are at most 256 bytes,
/// the store contract's bound.
pub const BUSINESS_KEY_CHARS_MAX: usize = 64;
const _: () = assert!(BUSINESS_KEY_CHARS_MAX * 4 <= qflow_store::BUSINESS_KEY_BYTES_MAX);

/// A business key as the API bounds it.
fn check_business_key(key: Option<&str>) -> Result<()> {
    let Some(key) = key else { return Ok(()) };
    let chars = key.chars().count();
    let why = if chars == 0 || chars > BUSINESS_KEY_CHARS_MAX {
        format!("a business key is 1 to {BUSINESS_KEY_CHARS_MAX} characters, this one is {chars}")
    } else if key.chars().any(char::is_control) {
        "a business key may not hold control characters".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::Invalid {
        field: "business_key",
        why,
    })
}

fn runtime_of(ops: &Ops) -> Result<&Arc<Runtime>> {
    ops.shared.runtime.as_ref().ok_or_else(no_runtime)
}

fn no_runtime() -> Error {
    Error::Refused(
        "no runtime serves this store here, so nothing would run the instance's tasks; \
         start instances through `qflow serve` (POST /v1/instances)"
            .to_owned(),
    )
}

/// Values entering an instance stay within the engine's bounds (nesting, size), or the
/// request is refused naming the variable.
fn check_variables(variables: &qflow_core::Variables) -> Result<()> {
    qflow_core::limits::check_variables(variables).map_err(|why| Error::Invalid {
        field: "variables",
        why,
    })
}
