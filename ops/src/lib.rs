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

pub use models::NodeInfo;
pub use qflow_loader::explain::{self, Timeline};
pub use user_tasks::{Backfilled, UserTaskDetail, UserTaskListQuery, UserTaskView};

pub mod json {
    //! JSON input helpers shared by the front ends.

    use serde::de::{Deserializer, Error, Visitor};

    /// An `i64` given as a JSON number with no fractional part: `7` and also `7.0`,
    /// which JSON Schema (2020-12) counts as an integer and some clients send.
    pub fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = i64;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
                Ok(v)
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
                i64::try_from(v).map_err(|_| E::custom(format!("{v} is out of range")))
            }
            fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
                // 2^63 is exactly representable; everything below it in magnitude and
                // integral converts exactly. −2^63 itself is refused as a float: it is
                // also the nearest float to integers just below i64's range
                // (-9223372036854775809 parses to it), which must not be taken as in
                // range; i64::MIN written as an integer is read by `visit_i64`.
                if v.fract() == 0.0
                    && v > -9_223_372_036_854_775_808.0
                    && v < 9_223_372_036_854_775_808.0
                {
                    Ok(v as i64)
                } else {
                    Err(E::custom(format!("{v} is not an integer in range")))
                }
            }
        }
        d.deserialize_any(V)
    }

    /// [`integer`] for an optional field (`null` or absent is `None`).
    pub fn optional_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        #[derive(serde::Deserialize)]
        struct Wrapped(#[serde(deserialize_with = "integer")] i64);
        Option::<Wrapped>::deserialize(d).map(|w| w.map(|Wrapped(n)| n))
    }

    use serde::Deserialize;

    #[cfg(test)]
    mod tests {
        #[derive(serde::Deserialize)]
        struct N {
            #[serde(deserialize_with = "super::integer")]
            n: i64,
        }

        fn n(text: &str) -> Result<i64, String> {
            serde_json::from_str::<N>(text)
                .map(|v| v.n)
                .map_err(|e| e.to_string())
        }

        #[test]
        fn integral_numbers_in_any_spelling_are_integers() {
            assert_eq!(n(r#"{"n": 7}"#), Ok(7));
            assert_eq!(n(r#"{"n": -288.0}"#), Ok(-288));
            assert_eq!(n(r#"{"n": -9223372036854775808}"#), Ok(i64::MIN));
            assert!(n(r#"{"n": 1.5}"#).is_err());
            assert!(n(r#"{"n": 9223372036854775808}"#).is_err());
            assert!(n(r#"{"n": 1e300}"#).is_err());
            assert!(n(r#"{"n": "7"}"#).is_err());
            // Parsed exactly (serde_json's `float_roundtrip`), so a long integral decimal
            // stays integral.
            assert_eq!(n(r#"{"n": 2220513835735369.0}"#), Ok(2_220_513_835_735_369));
            // Just outside i64's range, written as integers: refused, though the nearest
            // float to the first is −2^63; i64::MIN itself as an integer is in range.
            assert!(n(r#"{"n": -9223372036854775809}"#).is_err());
            assert!(n(r#"{"n": 9223372036854775808}"#).is_err());
            assert_eq!(n(r#"{"n": -9223372036854775808}"#), Ok(i64::MIN));
        }
    }
}

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
        Error::Store(e.to_string())
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
}

impl From<&InstanceRecord> for InstanceSummary {
    fn from(r: &InstanceRecord) -> Self {
        InstanceSummary {
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

/// A migration plan (O2): which instances of `source` move onto `target`, and how their
/// nodes are renamed (an id the mapping does not name keeps its id).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrationPlan {
    #[serde(deserialize_with = "json::integer")]
    pub source: i64,
    #[serde(deserialize_with = "json::integer")]
    pub target: i64,
    #[serde(default)]
    pub mapping: std::collections::BTreeMap<String, String>,
    /// Only these instances (default: every FAILED or running instance of `source`).
    #[serde(default)]
    pub instances: Option<Vec<String>>,
}

/// A migration's outcome for one instance: `migrated`, `would_migrate` (a dry run) or
/// `refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MigrationOutcome {
    /// The instance moved onto the target (its fence moved).
    Migrated,
    /// A dry run: the instance would move; nothing was written.
    WouldMigrate,
    /// The instance was left as it was; the result's `reason` says why.
    Refused,
}

impl MigrationOutcome {
    /// The outcome as the JSON spells it (`would_migrate`).
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationOutcome::Migrated => "migrated",
            MigrationOutcome::WouldMigrate => "would_migrate",
            MigrationOutcome::Refused => "refused",
        }
    }

    /// The outcome in words (`would migrate`), for text and pages.
    pub fn words(self) -> &'static str {
        match self {
            MigrationOutcome::Migrated => "migrated",
            MigrationOutcome::WouldMigrate => "would migrate",
            MigrationOutcome::Refused => "refused",
        }
    }
}

/// What a migration did, or would do, to one instance.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct MigrationResult {
    pub instance: String,
    pub outcome: MigrationOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What changes in the decoded snapshot, one line per changed part (`frontier:
    /// ["pay"] -> ["charge"]`); the instance row's deployment changes too.
    pub changes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence_after: Option<u64>,
}

/// How many of a migration's instances ended in each outcome. `total` is their sum; a
/// migration with `refused > 0` left those instances exactly as they were, whatever
/// happened to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
pub struct MigrationSummary {
    pub total: u64,
    pub migrated: u64,
    pub would_migrate: u64,
    pub refused: u64,
}

impl MigrationSummary {
    /// The counts of `results`, one per instance.
    pub fn of(results: &[MigrationResult]) -> Self {
        let mut summary = MigrationSummary::default();
        for r in results {
            summary.total += 1;
            match r.outcome {
                MigrationOutcome::Migrated => summary.migrated += 1,
                MigrationOutcome::WouldMigrate => summary.would_migrate += 1,
                MigrationOutcome::Refused => summary.refused += 1,
            }
        }
        summary
    }
}

/// `2 instances: 1 migrated, 1 refused` (only the outcomes that occurred; `0 instances`
/// for a plan that covered none): the line the CLI ends with and the console shows.
impl std::fmt::Display for MigrationSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = if self.total == 1 {
            "instance"
        } else {
            "instances"
        };
        write!(f, "{} {noun}", self.total)?;
        let counts = [
            (self.migrated, MigrationOutcome::Migrated),
            (self.would_migrate, MigrationOutcome::WouldMigrate),
            (self.refused, MigrationOutcome::Refused),
        ];
        let mut sep = ": ";
        for (n, outcome) in counts.into_iter().filter(|(n, _)| *n > 0) {
            write!(f, "{sep}{n} {}", outcome.words())?;
            sep = ", ";
        }
        Ok(())
    }
}

/// A migration's answer (O2): the counts first, so a refusal cannot hide in a long list,
/// then each instance's result in the order the plan covered them.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct MigrationReport {
    pub summary: MigrationSummary,
    pub results: Vec<MigrationResult>,
}

impl MigrationReport {
    /// The report of `results`, counted once here for every front end.
    pub fn new(results: Vec<MigrationResult>) -> Self {
        MigrationReport {
            summary: MigrationSummary::of(&results),
            results,
        }
    }

    /// Whether any instance was (or, in a dry run, would be) refused.
    pub fn any_refused(&self) -> bool {
        self.summary.refused > 0
    }
}

/// A counterpart's answer to a channel call (SPEC C5), as the relay endpoint takes it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelAnswerRequest {
    /// The `Idempotency-Key` of the request this answers (`<instance>/<call>/<attempt>`).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub idempotency_key: String,
    /// The answer's variables (the task's output mappings see them as `result`).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: qflow_core::Variables,
    /// Answer with a BPMN error instead: it routes to the task's error boundary and
    /// spends no retry budget.
    #[serde(default)]
    pub bpmn_error: Option<ChannelBpmnError>,
}

/// A BPMN error a counterpart answers with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelBpmnError {
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub code: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub message: String,
}

/// What became of a relayed answer: the engine's verdict, decided under the instance's
/// claim from durable facts (`docs/channels.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RelayVerdict {
    /// `resumed` (taken), `superseded` (that attempt is dead; a retry is pending or in
    /// flight, whose answer will be taken), `already_completed`, `instance_failed` or
    /// `unknown`.
    pub verdict: &'static str,
    pub reason: String,
}

/// The longest idempotency key a relay takes (an instance id, two numbers, two `/`).
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 256;
/// The longest BPMN error message a relay takes.
pub const BPMN_MESSAGE_CHARS_MAX: usize = 4096;

/// A message to correlate by name and key (O1).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageRequest {
    /// The message name (the `name` of its `<message>` declaration).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// The value the waiting instance's correlation key evaluated to.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub correlation_key: String,
    /// Merged into the instance's variables (or mapped by the wait's output mappings).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: qflow_core::Variables,
    /// Deliver to every matching subscription instead of requiring exactly one.
    #[serde(default)]
    pub all: bool,
}

/// What a correlation did: one delivery per subscription it reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Correlated {
    pub name: String,
    pub correlation_key: String,
    pub deliveries: Vec<Delivery>,
    /// With `all`: as many subscriptions matched as one request delivers to (1,000), so
    /// there may be more; waits that took the message and ended no longer match.
    pub truncated: bool,
}

/// The message reaching (or failing to reach) one subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    pub instance: String,
    /// The node that waited.
    pub node: String,
    /// `delivered`, `refused` (the wait ended before the message reached it),
    /// `started` (no instance waited: the message started one at its message start
    /// event, `node`, with the correlation key as business key) or `already_started`
    /// (an instance of the deployment holds that business key: a repeated publication
    /// starts nothing new).
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<Applied>,
}

impl Delivery {
    fn of(s: qflow_store::SubscriptionRecord, outcome: Result<Applied>) -> Delivery {
        let (outcome, reason, applied) = match outcome {
            Ok(applied) => ("delivered", None, Some(applied)),
            Err(e) => ("refused", Some(e.to_string()), None),
        };
        Delivery {
            instance: s.instance.to_string(),
            node: s.node,
            outcome,
            reason,
            applied,
        }
    }
}

/// A signal to broadcast (`POST /v1/signals`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// The signal name (the `name` of its `<signal>` declaration).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// Merged into each catching instance's variables; the start variables of each
    /// instance a signal start event starts.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: qflow_core::Variables,
    /// Names the broadcast, so that repeating it (an answer lost) starts no instance
    /// twice. Default: a fresh id, returned.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub id: Option<String>,
}

/// Longest broadcast id the API takes, in characters.
pub const SIGNAL_ID_CHARS_MAX: usize = 128;

/// What a broadcast reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SignalBroadcast {
    pub name: String,
    /// The broadcast's id: the one given, or the one drawn.
    pub id: String,
    /// The waits that caught it, in the order they were reached.
    pub caught: Vec<SignalCatch>,
    /// The instances signal start events started (or had started, for a repeated id).
    pub started: Vec<SignalStart>,
    /// Subscriptions whose wait had ended before the signal reached it.
    pub ended_waits: u32,
    /// Waits the signal did not reach because their instance kept changing under the
    /// step (rare; logged). Broadcasting again would reach them — and every
    /// non-interrupting boundary again.
    pub missed: Vec<SignalCatch>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SignalCatch {
    pub instance: String,
    pub node: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SignalStart {
    pub deployment: i64,
    pub instance: String,
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

    /// Migrates the plan's instances (O2), or with `dry_run` shows what it would do and
    /// writes nothing. The plan is checked against both definitions before any instance
    /// is touched; each instance then moves atomically under its fence (a race with a
    /// running lane is settled by the fence), audited, and its result is reported. An
    /// instance refused is an outcome in the report, not an error: the others still move.
    pub async fn migrate(&self, plan: &MigrationPlan, dry_run: bool) -> Result<MigrationReport> {
        let source = self.deployment_record(plan.source).await?;
        let target = self.deployment_record(plan.target).await?;
        if target.retired {
            return Err(Error::Refused(format!(
                "target deployment {} is retired",
                plan.target
            )));
        }
        if plan.source == plan.target {
            return Err(Error::Invalid {
                field: "target",
                why: "the target is the source deployment".to_owned(),
            });
        }
        let from = self.shared.stepper.definition(source.id).await?;
        let to = self.shared.stepper.definition(target.id).await?;
        let mut wrong = Vec::new();
        // A mapping renames nodes; their instances (`pay@2`, `quote#3`, `sub@2/pay`)
        // follow their node, and are not names a plan may map on their own.
        let node_id =
            |p: &qflow_loader::model::Process, id: &str| p.nodes.iter().any(|n| n.id == id);
        for (old, new) in &plan.mapping {
            if from.process.find(old).is_some() && !node_id(&from.process, old) {
                wrong.push(format!(
                    "mapping.{old}: `{old}` names an instance of a node, not a node; map the \
                     node and its instances follow"
                ));
                continue;
            }
            if to.process.find(new).is_some() && !node_id(&to.process, new) {
                wrong.push(format!(
                    "mapping.{old}: `{new}` names an instance of a node, not a node of \
                     deployment {}",
                    plan.target
                ));
                continue;
            }
            if from.process.find(old).is_none() {
                wrong.push(format!(
                    "mapping.{old}: deployment {} has no node `{old}`",
                    plan.source
                ));
            }
            if to.process.find(new).is_none() {
                wrong.push(format!(
                    "mapping.{old}: deployment {} has no node `{new}`",
                    plan.target
                ));
            }
        }
        if !wrong.is_empty() {
            return Err(Error::Invalid {
                field: "mapping",
                why: wrong.join("; "),
            });
        }
        let ids: Vec<InstanceId> = match &plan.instances {
            Some(list) => list
                .iter()
                .map(|s| parse_instance_id(s))
                .collect::<Result<_>>()?,
            None => {
                let mut ids = Vec::new();
                for status in [InstanceStatus::Failed, InstanceStatus::Running] {
                    let filter = InstanceFilter {
                        deployment: Some(source.id),
                        status: Some(status),
                        ..InstanceFilter::default()
                    };
                    ids.extend(self.store().instances(&filter).await?.iter().map(|r| r.id));
                }
                ids
            }
        };
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            results.push(self.migrate_one(id, plan, &from, dry_run).await?);
        }
        Ok(MigrationReport::new(results))
    }

    async fn migrate_one(
        &self,
        id: InstanceId,
        plan: &MigrationPlan,
        from: &qflow_core::Definition,
        dry_run: bool,
    ) -> Result<MigrationResult> {
        let refused = |reason: String| MigrationResult {
            instance: id.to_string(),
            outcome: MigrationOutcome::Refused,
            reason: Some(reason),
            changes: Vec::new(),
            fence_after: None,
        };
        let before = self.shared.stepper.claim(id).await?;
        if before.deployment.0 != plan.source {
            return Ok(refused(format!(
                "instance is on deployment {}, not {}",
                before.deployment.0, plan.source
            )));
        }
        if before.snapshot.status() == qflow_core::Status::Running
            && qflow_core::any_attempt_in_flight(from, &before.snapshot)
        {
            return Ok(refused(
                "an attempt is in flight; migrate once it has an outcome or is in a backoff \
                 window"
                    .to_owned(),
            ));
        }
        let timers = self.store().timers(id).await?;
        // The task list's rows, which the step withdraws unless it offers them again.
        let user_tasks = self.store().instance_user_tasks(id).await?;
        let input = Input::Migrate {
            mapping: plan.mapping.clone(),
            timers: timers
                .iter()
                .map(|t| (t.name.to_string(), t.due_at_ms))
                .collect(),
            user_tasks: user_tasks.into_iter().map(|r| r.node).collect(),
        };
        let audit = AuditEntry {
            actor: self.actor.to_string(),
            action: "migrate".to_owned(),
            detail: format!(
                "from={} to={} mapping={:?}",
                plan.source, plan.target, plan.mapping
            ),
        };
        let target = DeploymentId(plan.target);
        let now = (self.shared.now_ms)();
        match self
            .shared
            .stepper
            .migrate(id, target, input, now, Some(&audit), dry_run)
            .await
        {
            Ok(stepped) => Ok(MigrationResult {
                instance: id.to_string(),
                outcome: if dry_run {
                    MigrationOutcome::WouldMigrate
                } else {
                    MigrationOutcome::Migrated
                },
                reason: None,
                changes: changes(
                    &before.snapshot.inspect(),
                    &stepped.claim.snapshot.inspect(),
                ),
                fence_after: (!dry_run).then_some(stepped.fence),
            }),
            Err(qflow_runtime::Error::Refused { why, .. }) => Ok(refused(why)),
            Err(e) => Err(e.into()),
        }
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

    /// Incidents of one instance, or of all.
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

    /// Delivers the message `name` to an instance: the first receive task or message
    /// catch event waiting for it there completes with `variables`. Refused when nothing
    /// of the instance waits for it.
    pub async fn deliver_message(
        &self,
        id: InstanceId,
        name: &str,
        variables: qflow_core::Variables,
    ) -> Result<Applied> {
        check_variables(&variables)?;
        let detail = format!("name={name} variables={}", variables.len());
        let input = Input::MessageReceived {
            name: name.to_owned(),
            correlation_key: None,
            node: None,
            variables,
        };
        self.apply(id, input, "message", detail).await
    }

    /// Publishes the message `name` with a correlation key (O1): it reaches the instance
    /// whose open subscription for `name` has this key — a receive task or message catch
    /// whose message declares `q:correlationKey` (or a Zeebe subscription) — and
    /// completes that wait with `variables`. Exactly one waiting subscription must match
    /// unless `all` is set, which delivers to every one (at most
    /// [`qflow_store::SUBSCRIPTIONS_LIMIT_MAX`]). Nothing matching is `NotFound`; a message
    /// is never buffered for a subscription that opens later.
    /// Hands a counterpart's answer to the channel call it answers (C5), and says what
    /// became of it. Every verdict but `resumed` changed nothing.
    pub async fn relay_answer(&self, answer: ChannelAnswerRequest) -> Result<RelayVerdict> {
        let runtime = self.shared.runtime.as_ref().ok_or_else(no_runtime)?;
        check_text(
            "idempotency_key",
            &answer.idempotency_key,
            IDEMPOTENCY_KEY_CHARS_MAX,
        )?;
        check_variables(&answer.variables)?;
        let bpmn_error = match answer.bpmn_error {
            Some(e) => {
                check_text("bpmn_error", &e.code, MESSAGE_NAME_CHARS_MAX)?;
                if e.message.chars().count() > BPMN_MESSAGE_CHARS_MAX {
                    return Err(Error::Invalid {
                        field: "bpmn_error",
                        why: format!("message is longer than {BPMN_MESSAGE_CHARS_MAX} characters"),
                    });
                }
                Some(qflow_channels::BpmnError {
                    code: e.code,
                    message: e.message,
                })
            }
            None => None,
        };
        let relayed = qflow_channels::relay(
            runtime,
            &answer.idempotency_key,
            qflow_channels::Answer {
                variables: answer.variables,
                bpmn_error,
            },
        )
        .await
        .map_err(|e| match e {
            qflow_channels::RelayError::Refused(why) => Error::Invalid {
                field: "variables",
                why,
            },
            qflow_channels::RelayError::Runtime(e) => Error::from(e),
        })?;
        Ok(RelayVerdict {
            verdict: relayed.verdict.as_str(),
            reason: relayed.reason,
        })
    }

    pub async fn correlate(&self, message: MessageRequest) -> Result<Correlated> {
        check_variables(&message.variables)?;
        check_text("name", &message.name, MESSAGE_NAME_CHARS_MAX)?;
        check_text(
            "correlation_key",
            &message.correlation_key,
            qflow_core::CORRELATION_KEY_CHARS_MAX,
        )?;
        let (name, key) = (message.name.as_str(), message.correlation_key.as_str());
        let detail = format!(
            "name={name} key={key} variables={}",
            message.variables.len()
        );
        // Each delivery names the subscription's node, so the wait that takes the message
        // is the one the row named (an instance may wait twice under one key).
        let input = |node: &str| Input::MessageReceived {
            name: name.to_owned(),
            correlation_key: Some(key.to_owned()),
            node: Some(node.to_owned()),
            variables: message.variables.clone(),
        };
        let mut delivered = Vec::new();
        if message.all {
            let subscribers = self.store().subscriptions(name, key, 0).await?;
            if subscribers.is_empty() {
                // Nothing waits: the message starts an instance of every process whose
                // newest live deployment has a message start event for it.
                if self.shared.runtime.is_none() {
                    return Err(no_subscriber(name, key));
                }
                let started = self.message_starts(&message).await?;
                if started.is_empty() {
                    return Err(no_subscriber(name, key));
                }
                return Ok(Correlated {
                    name: message.name,
                    correlation_key: message.correlation_key,
                    deliveries: started,
                    truncated: false,
                });
            }
            let truncated = subscribers.len() as u32 >= qflow_store::SUBSCRIPTIONS_LIMIT_MAX;
            for s in subscribers {
                let outcome = self.apply(s.instance, input(&s.node), "correlate", detail.clone());
                match outcome.await {
                    // Deliveries so far are committed; the rest are not tried. A retry
                    // of the request reaches only the waits still open.
                    Err(e @ Error::Store(_)) => return Err(e),
                    outcome => delivered.push(Delivery::of(s, outcome)),
                }
            }
            return Ok(Correlated {
                name: message.name,
                correlation_key: message.correlation_key,
                deliveries: delivered,
                truncated,
            });
        }
        // One subscriber. A wait that ends between the lookup and the step (its message
        // came, a timer won the race) is looked past: the next lookup no longer lists it.
        for _ in 0..CORRELATE_ROUNDS_MAX {
            // One instance may wait more than once under the key (a receive task and a
            // boundary): the oldest of its waits takes the message.
            let subscribers = self.store().subscriptions(name, key, 16).await?;
            let other = subscribers
                .iter()
                .find(|s| s.instance != subscribers[0].instance);
            match (subscribers.first(), other) {
                (None, _) => {
                    // Nothing waits: a message start event takes it, when exactly one
                    // process has one for it (`all` starts each).
                    // Without a runtime here (the CLI on a store) nothing could run
                    // a started instance: no start, as before message starts.
                    let Some(runtime) = &self.shared.runtime else {
                        return Err(no_subscriber(name, key));
                    };
                    let starts = runtime.message_starts(name).await?;
                    if starts.len() > 1 {
                        return Err(Error::Refused(format!(
                            "no instance waits for message `{name}` with key `{key}`, and \
                             {} processes start on it (deployments {}); set `all` to start \
                             each",
                            starts.len(),
                            starts
                                .iter()
                                .map(|(d, _)| d.0.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                    let started = self.message_starts(&message).await?;
                    if started.is_empty() {
                        return Err(no_subscriber(name, key));
                    }
                    return Ok(Correlated {
                        name: message.name,
                        correlation_key: message.correlation_key,
                        deliveries: started,
                        truncated: false,
                    });
                }
                (Some(one), None) => {
                    let outcome =
                        self.apply(one.instance, input(&one.node), "correlate", detail.clone());
                    match outcome.await {
                        Err(Error::Refused(_)) | Err(Error::Conflict(_)) => continue,
                        other => {
                            delivered.push(Delivery::of(one.clone(), other));
                            return Ok(Correlated {
                                name: message.name,
                                correlation_key: message.correlation_key,
                                deliveries: delivered,
                                truncated: false,
                            });
                        }
                    }
                }
                (Some(a), Some(b)) => {
                    return Err(Error::Refused(format!(
                        "message `{name}` with key `{key}` matches more than one waiting \
                         instance ({} at `{}`, {} at `{}`, ...); set `all` to deliver it to \
                         each, or give the waits distinct keys",
                        a.instance, a.node, b.instance, b.node
                    )))
                }
            }
        }
        Err(Error::Conflict(format!(
            "the waits for message `{name}` with key `{key}` kept ending under the \
             correlation; try again"
        )))
    }

    /// Starts an instance at each message start event `message` reaches (per process,
    /// its newest live deployment's), the correlation key as its business key: a
    /// deployment already holding an instance under that key starts nothing new
    /// (`already_started`), so a publication repeated after a lost answer does not start
    /// a second instance.
    async fn message_starts(&self, message: &MessageRequest) -> Result<Vec<Delivery>> {
        let runtime = runtime_of(self)?;
        let (name, key) = (message.name.as_str(), message.correlation_key.as_str());
        let mut started = Vec::new();
        for (deployment, node) in runtime.message_starts(name).await? {
            let outcome = runtime
                .start_triggered(
                    None,
                    deployment,
                    &node,
                    message.variables.clone(),
                    Some(key.to_owned()),
                )
                .await;
            let (instance, outcome, reason) = match outcome {
                Ok(id) => (id.to_string(), "started", None),
                Err(qflow_runtime::Error::DuplicateBusinessKey { existing }) => (
                    existing.to_string(),
                    "already_started",
                    Some(format!(
                        "deployment {} already has instance {existing} under business key \
                         `{key}`",
                        deployment.0
                    )),
                ),
                // Retired since it was listed.
                Err(qflow_runtime::Error::Refused { why, .. }) => {
                    (String::new(), "refused", Some(why))
                }
                Err(e) => return Err(e.into()),
            };
            started.push(Delivery {
                instance,
                node,
                outcome,
                reason,
                applied: None,
            });
        }
        Ok(started)
    }

    /// Broadcasts a signal (BPMN's "to whom it may concern"): every instance waiting for
    /// it catches it — a signal catch event, a signal boundary event, a catch racing
    /// after an event-based gateway — and every process whose newest live deployment has
    /// a signal start event for it starts an instance. `id` names the broadcast: the
    /// same id again starts no instance twice, so a caller that lost the answer repeats
    /// the request with its id (the waits that caught the first are no longer waiting;
    /// a non-interrupting boundary still open catches the repetition too). Without an id
    /// the engine draws one.
    pub async fn broadcast_signal(&self, signal: SignalRequest) -> Result<SignalBroadcast> {
        let runtime = runtime_of(self)?;
        check_text(
            "name",
            &signal.name,
            qflow_runtime::signals::SIGNAL_NAME_CHARS_MAX,
        )?;
        check_variables(&signal.variables)?;
        let id = match signal.id {
            Some(id) => {
                check_text("id", &id, SIGNAL_ID_CHARS_MAX)?;
                id
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let done = runtime
            .broadcast_signal(&signal.name, &signal.variables, &format!("api/{id}"))
            .await?;
        Ok(SignalBroadcast {
            name: signal.name,
            id,
            caught: done
                .caught
                .into_iter()
                .map(|(instance, node)| SignalCatch {
                    instance: instance.to_string(),
                    node,
                })
                .collect(),
            started: done
                .started
                .into_iter()
                .map(|(deployment, instance)| SignalStart {
                    deployment: deployment.0,
                    instance: instance.to_string(),
                })
                .collect(),
            ended_waits: done.stale,
            missed: done
                .missed
                .into_iter()
                .map(|(instance, node)| SignalCatch {
                    instance: instance.to_string(),
                    node,
                })
                .collect(),
        })
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

    /// Cancels a running instance.
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
        let audit = AuditEntry {
            actor: self.actor.to_string(),
            action: action.to_owned(),
            detail,
        };
        let Stepped {
            fence,
            claim,
            calls,
            handed_over,
            ..
        } = self
            .shared
            .stepper
            .step(id, input, (self.shared.now_ms)(), Some(&audit))
            .await?;
        let status = qflow_runtime::claim::store_status(claim.snapshot.status());
        Ok(Applied {
            instance: id.to_string(),
            fence_before: fence - 1,
            fence_after: fence,
            status: status.as_str(),
            attempts_started: calls
                .iter()
                .chain(&handed_over)
                .map(|c| format!("{}#{}", c.node, c.attempt))
                .collect(),
        })
    }
}

/// How often a single-subscriber correlation looks the subscription up again after the
/// wait it found ended before the message reached it.
const CORRELATE_ROUNDS_MAX: usize = 3;

fn no_subscriber(name: &str, key: &str) -> Error {
    Error::NotFound {
        what: "subscription",
        id: format!("for message `{name}` with key `{key}`"),
    }
}

/// Longest message name the API takes, in characters.
pub const MESSAGE_NAME_CHARS_MAX: usize = 256;

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

/// The parts of a decoded snapshot that differ, one line each: `key: before -> after`.
fn changes(before: &serde_json::Value, after: &serde_json::Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let b = before.as_object().unwrap_or(&empty);
    let a = after.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    let show = |v: Option<&serde_json::Value>| v.map_or("(none)".to_owned(), |v| v.to_string());
    keys.into_iter()
        .filter(|k| b.get(*k) != a.get(*k))
        .map(|k| format!("{k}: {} -> {}", show(b.get(k)), show(a.get(k))))
        .collect()
}
