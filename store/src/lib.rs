//! The store contract: what the runtime shell needs from durable storage (SPEC R1, R4, R5).
//!
//! The pure core never sees this module. The runtime reads an instance (snapshot bytes +
//! fence), runs one step, and hands the resulting [`Commit`] back; the store applies the
//! snapshot and every effect row of that step in one transaction, guarded by a
//! compare-and-swap on the fence. Implementations live in `qflow-persistence` (SQLite,
//! PostgreSQL) and in [`crate::memory`] (in-memory, non-durable).
//!
//! Invariant: a store never interprets snapshot bytes; it stores what it is given.
//!
//! Business keys: an instance may carry one, given at creation and never changed. The
//! pair `(deployment, business key)` is unique over every instance of the store, whatever
//! its status; a commit that would break that is refused as a whole with
//! [`CommitOutcome::DuplicateBusinessKey`], checked in the commit's own transaction. A key
//! is 1..=[`BUSINESS_KEY_BYTES_MAX`] bytes of UTF-8 without control characters: the
//! caller (`qflow-ops`) validates it, and stores assume it.

use async_trait::async_trait;
use qflow_core::journal::HashKind;
pub use qflow_core::{Attempt, AttemptOutcome, TimerKind, TimerName};
use uuid::Uuid;

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod history;
pub mod memory;
pub mod varint;

pub use memory::MemoryStore;

pub type InstanceId = Uuid;

/// The longest business key, in bytes of UTF-8. Callers refuse longer keys, empty ones
/// and keys with control characters before they reach a store; stores do not re-check.
pub const BUSINESS_KEY_BYTES_MAX: usize = 256;

/// A deployment version. Assigned by the store, increasing; the same content deployed
/// twice returns the same version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeploymentId(pub i64);

/// A poll for due timers: what [`Store::claim_due_timers`] is given. Named fields, so the
/// two instants cannot be swapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerClaim<'a> {
    /// Rows due at or before this instant are claimed.
    pub now_ms: i64,
    /// The claim lease lasts until `now_ms + lease_ms`.
    pub lease_ms: i64,
    /// Names the claimer (a replica id) in the lease.
    pub owner: &'a str,
    /// At most this many rows.
    pub limit: u32,
}

/// A deployment to record: what [`Store::deploy`] is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewDeployment<'a> {
    pub process_id: &'a str,
    /// SHA-256 of the source, lowercase hex: the identity of the content.
    pub content_hash: &'a str,
    /// The BPMN XML as deployed.
    pub source: &'a str,
    pub deployed_at_ms: i64,
    /// The schedules of the process's timer start events (one per event; empty for a
    /// process without one). A deployment the store records anew replaces, in the same
    /// transaction, every schedule of the process's other deployments with these: the
    /// newest deployment of a process is the one its timers start (hot-deploy), and an
    /// older one never starts again, even if the newer one is retired later. The same
    /// content deployed again returns the existing deployment and changes no schedule.
    pub schedules: &'a [NewSchedule],
}

/// A timer start event's schedule to record with a deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSchedule {
    /// The timer start event's BPMN id.
    pub node: String,
    /// When it first starts an instance.
    pub due_at_ms: i64,
    /// How many starts are left, this one included (`None`: unbounded, a cycle without
    /// a repetition count). A row whose last start commits is deleted by that commit.
    pub remaining: Option<u32>,
}

/// A timer start event's schedule as stored: the deployment's start event `node` next
/// starts an instance at `due_at_ms`. Claimed like a timer
/// ([`Store::claim_due_schedules`]) and moved on only by the commit that creates the
/// instance of its occurrence ([`Commit::schedule`]), so one occurrence starts one
/// instance, whichever replicas claim it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRecord {
    pub deployment: DeploymentId,
    pub node: String,
    pub due_at_ms: i64,
    /// Starts left, the due one included; `None`: unbounded.
    pub remaining: Option<u32>,
}

/// What a creation commit does to the schedule whose occurrence it starts: applied only
/// if the schedule of `(commit.deployment, node)` is still due at `fired_at_ms`
/// (compare-and-swap, checked in the commit's transaction); otherwise the whole commit
/// is refused as a [`CommitOutcome::Conflict`] and writes nothing — another replica
/// started this occurrence, or the schedule was replaced or retired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleAdvance {
    pub node: String,
    /// The due instant of the occurrence this commit starts.
    pub fired_at_ms: i64,
    /// The next occurrence and the starts left from it; `None`: this was the last one,
    /// and the row is deleted.
    pub next: Option<(i64, Option<u32>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentRecord {
    pub id: DeploymentId,
    pub process_id: String,
    /// SHA-256 of the source, lowercase hex: the identity of the content.
    pub content_hash: String,
    /// The BPMN XML as deployed.
    pub source: String,
    pub deployed_at_ms: i64,
    pub retired: bool,
}

/// Where an instance stands. Stored as lowercase text (`running`, `completed`, `failed`,
/// `cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InstanceStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl InstanceStatus {
    pub const ALL: [InstanceStatus; 4] = [
        InstanceStatus::Running,
        InstanceStatus::Completed,
        InstanceStatus::Failed,
        InstanceStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InstanceStatus::Running => "running",
            InstanceStatus::Completed => "completed",
            InstanceStatus::Failed => "failed",
            InstanceStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<InstanceStatus> {
        Some(match s {
            "running" => InstanceStatus::Running,
            "completed" => InstanceStatus::Completed,
            "failed" => InstanceStatus::Failed,
            "cancelled" => InstanceStatus::Cancelled,
            _ => return None,
        })
    }

    /// Completed and cancelled instances no longer hold their deployment. FAILED does:
    /// it is retained for inspection and repair (E6).
    pub fn releases_deployment(self) -> bool {
        self.has_ended()
    }

    /// Completed and cancelled: nothing will ever step the instance again, so retention
    /// may purge it. FAILED has not ended — it is kept until an operator resolves it
    /// (resume, then completion, or cancel), whatever the retention setting.
    pub fn has_ended(self) -> bool {
        matches!(self, InstanceStatus::Completed | InstanceStatus::Cancelled)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRecord {
    pub id: InstanceId,
    pub deployment: DeploymentId,
    /// The fencing token: incremented by every applied commit, starting at 1 on creation.
    pub fence: u64,
    pub status: InstanceStatus,
    pub failure_code: Option<String>,
    pub snapshot: Vec<u8>,
    /// The key the instance was created with, if any; unique per deployment.
    pub business_key: Option<String>,
    pub created_at_ms: i64,
    /// The instant of the last commit applied to the instance.
    pub updated_at_ms: i64,
    /// When the instance ended: the instant of the commit that made it completed or
    /// cancelled, kept by every later commit (a stale timer row fired and deleted after
    /// the end moves `updated_at_ms`, never this). `None` while running or FAILED: a
    /// FAILED instance has not ended, it waits for an operator. Retention
    /// ([`Store::purge_finished`]) counts from here.
    pub ended_at_ms: Option<i64>,
}

/// A durable timer row. `(instance, name)` is unique: arming a timer with the same name
/// replaces the row (and its incarnation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRecord {
    pub instance: InstanceId,
    /// The engine's name for the timer (`r:pay`, `b:t1`, `~run`), typed; stored as its
    /// rendering.
    pub name: TimerName,
    pub due_at_ms: i64,
    pub incarnation: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRef {
    pub name: TimerName,
    pub incarnation: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncidentRecord {
    pub id: i64,
    pub instance: InstanceId,
    pub node: String,
    pub code: String,
    pub message: String,
    pub opened_at_ms: i64,
    pub resolved_at_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewIncident {
    pub node: String,
    pub code: String,
    pub message: String,
}

/// One attempt of one task (O1a): kept beside the instance, never in the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub instance: InstanceId,
    pub node: String,
    pub attempt: Attempt,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    /// Stored as [`AttemptOutcome::as_str`] (`ok`, `failed`, `bpmn_error`, `timeout`, ...).
    pub outcome: AttemptOutcome,
    pub code: Option<String>,
    pub message: Option<String>,
    /// The external worker that held a pull task's attempt (P1); `None` for every other
    /// task.
    pub worker: Option<String>,
}

/// A pull task offered to external workers (P1): one row per `(instance, node)` while a
/// token waits there outside a backoff window. Written by the step that offers, locks or
/// withdraws it, in the step's transaction; the snapshot has the last word on the lock
/// (the row mirrors it so that a fetch finds offered work by topic without reading
/// snapshots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullTaskRecord {
    pub instance: InstanceId,
    pub node: String,
    pub topic: String,
    pub attempt: Attempt,
    /// The worker holding the lock, and until when; `None`: offered to any worker.
    pub worker: Option<String>,
    pub lock_until_ms: Option<i64>,
    /// The instant of the commit that wrote the row: fetches take the oldest first.
    pub offered_at_ms: i64,
}

/// Pull-task rows a commit writes. Withdrawals apply before offers, so a node withdrawn
/// and offered again in one commit ends up offered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullWrites {
    /// Upserted by `(instance, node)`.
    pub offer: Vec<PullTaskRecord>,
    /// Deleted by `(instance, node)`; a missing row is no error.
    pub withdraw: Vec<String>,
}

impl PullWrites {
    pub fn is_empty(&self) -> bool {
        self.offer.is_empty() && self.withdraw.is_empty()
    }
}

/// What [`Store::offered_pull_tasks`] is given: a worker's fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullQuery<'a> {
    /// Rows of any of these topics.
    pub topics: &'a [String],
    /// At most this many rows; stores cap it at [`PULL_QUERY_LIMIT_MAX`].
    pub limit: u32,
}

/// The most rows one [`Store::offered_pull_tasks`] call returns.
pub const PULL_QUERY_LIMIT_MAX: u32 = 1_000;

/// A user task in the task list: one row per `(instance, node)` while a token waits at
/// a user task of a running instance (issue 11, item 5). Written by the step that offers,
/// assigns or withdraws it, in the step's transaction. The snapshot has the last word on
/// the assignee (`h/<node>`); the row mirrors it, and holds the candidates the offer
/// evaluated, so that a task list finds work by assignee or candidate without reading
/// snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserTaskRecord {
    pub instance: InstanceId,
    pub node: String,
    /// The deployment the instance was on when the task was offered (a migration offers
    /// it again on the target).
    pub deployment: DeploymentId,
    pub assignee: Option<String>,
    /// In the order the model gives them, each once.
    pub candidate_groups: Vec<String>,
    pub candidate_users: Vec<String>,
    /// The instant of the commit that offered it: when the token entered, or when a
    /// resume or a migration offered it again. An assignment never moves it.
    pub created_at_ms: i64,
}

/// User-task rows a commit writes: withdrawals first, then offers, then assignee
/// changes, so a task withdrawn and offered again in one commit ends up offered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserTaskWrites {
    /// Deleted by `(instance, node)`, candidates and all; a missing row is no error.
    pub withdraw: Vec<String>,
    /// Upserted by `(instance, node)`: the whole row, candidates replaced.
    pub offer: Vec<UserTaskRecord>,
    /// `(node, assignee)`: only the assignee of an existing row changes (a claim, or an
    /// unclaim with `None`); a missing row is no error.
    pub assign: Vec<(String, Option<String>)>,
}

impl UserTaskWrites {
    pub fn is_empty(&self) -> bool {
        self.withdraw.is_empty() && self.offer.is_empty() && self.assign.is_empty()
    }
}

/// What [`Store::user_tasks`] is given: a task list's query. Every filter given must
/// hold (`candidate_groups` holds when the task has any of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserTaskQuery {
    /// Only tasks this person holds.
    pub assignee: Option<String>,
    /// Only tasks offered to any of these groups (at most [`CANDIDATE_GROUPS_QUERY_MAX`]).
    pub candidate_groups: Vec<String>,
    /// Only tasks offered to this person by name.
    pub candidate_user: Option<String>,
    pub deployment: Option<DeploymentId>,
    /// `Some(false)`: only tasks nobody holds; `Some(true)`: only held ones.
    pub assigned: Option<bool>,
    /// Keyset pagination: only rows strictly after this `(created_at_ms, instance, node)`
    /// position in the listing order — the last row of the previous page.
    pub after: Option<(i64, InstanceId, String)>,
    /// At most this many rows, ordered by `(created_at_ms, instance, node)`; stores cap
    /// it at [`USER_TASKS_LIMIT_MAX`], and 0 means the cap.
    pub limit: u32,
}

/// The most rows one [`Store::user_tasks`] call returns.
pub const USER_TASKS_LIMIT_MAX: u32 = 1_000;
/// The most candidate groups one [`UserTaskQuery`] names: each is one index walk.
pub const CANDIDATE_GROUPS_QUERY_MAX: usize = 32;

impl UserTaskQuery {
    /// The effective row limit: 0 and anything over the cap are the cap.
    pub fn effective_limit(&self) -> u32 {
        match self.limit {
            0 => USER_TASKS_LIMIT_MAX,
            n => n.min(USER_TASKS_LIMIT_MAX),
        }
    }

    /// Whether `row` passes every filter but the cursor.
    pub fn matches(&self, row: &UserTaskRecord) -> bool {
        self.assignee
            .as_ref()
            .is_none_or(|a| row.assignee.as_ref() == Some(a))
            && (self.candidate_groups.is_empty()
                || self
                    .candidate_groups
                    .iter()
                    .any(|g| row.candidate_groups.contains(g)))
            && self
                .candidate_user
                .as_ref()
                .is_none_or(|u| row.candidate_users.contains(u))
            && self.deployment.is_none_or(|d| row.deployment == d)
            && self
                .assigned
                .is_none_or(|held| row.assignee.is_some() == held)
    }
}

/// Rows of several index walks (one per candidate group) as one page: in the listing
/// order, each task once, at most `limit`.
pub fn merge_user_tasks(mut rows: Vec<UserTaskRecord>, limit: u32) -> Vec<UserTaskRecord> {
    rows.sort_by(|a, b| {
        (a.created_at_ms, a.instance, &a.node).cmp(&(b.created_at_ms, b.instance, &b.node))
    });
    rows.dedup_by(|a, b| a.instance == b.instance && a.node == b.node);
    rows.truncate(limit as usize);
    rows
}
/// A message subscription (correlation by name and key): the instance waits at `node`
/// for a message `message` published with `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRecord {
    pub instance: InstanceId,
    pub node: String,
    pub message: String,
    pub key: String,
    /// The instant of the commit that opened it.
    pub opened_at_ms: i64,
}

/// A subscription a commit opens at `node` (upserted by `(instance, node)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSubscription {
    pub node: String,
    pub message: String,
    pub key: String,
}

/// Subscription rows a commit writes. Closes apply before opens, so a node whose wait
/// ended and began again in one step keeps the new subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionWrites {
    /// Deletes the subscription of each of these nodes, if there is one.
    pub close: Vec<String>,
    pub open: Vec<NewSubscription>,
}

impl SubscriptionWrites {
    pub fn is_empty(&self) -> bool {
        self.close.is_empty() && self.open.is_empty()
    }
}

/// The most rows [`Store::subscriptions`] returns, whatever it asks for.
pub const SUBSCRIPTIONS_LIMIT_MAX: u32 = 1_000;

/// A channel call's request in the outbox (SPEC C1–C3): one row per attempt, keyed by
/// the attempt's idempotency key. Written by the step that emits it, in the step's
/// transaction; delivered by the dispatcher (`qflow-channels`), which records every
/// delivery try on the row. Outside the withdrawal of a dead attempt's rows (C6,
/// [`OutboxWrites::withdraw`]) a row that was not delivered is never deleted: purge
/// takes the rows of the instances it deletes, nothing else does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRecord {
    /// The attempt's `Idempotency-Key`: unique over the store, never reused.
    pub key: String,
    pub instance: InstanceId,
    pub node: String,
    /// The configured channel the request goes to.
    pub channel: String,
    pub attempt: Attempt,
    /// Stable across the attempts of one logical call (C9).
    pub call_id: String,
    /// The request body: a JSON object, as text.
    pub body: String,
    /// The instant of the commit that emitted it.
    pub created_at_ms: i64,
    pub state: OutboxState,
    /// Delivery tries made so far (each one recorded by [`Store::record_delivery`]).
    pub deliveries: u32,
    /// While pending: when the next delivery try is due.
    pub due_at_ms: i64,
    /// What the last failed delivery try said (a status, a connection error).
    pub last_error: Option<String>,
}

/// Where an outbox row stands. Stored as lowercase text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OutboxState {
    /// Not delivered yet; the dispatcher tries it when it is due.
    Pending,
    /// Delivered: the counterpart accepted it (it may have answered already).
    Delivered,
    /// The channel's attempt ceiling was reached without a delivery (C2): an incident is
    /// open on the node, and the engine is prompted to treat the attempt as failed.
    Poisoned,
}

impl OutboxState {
    pub const ALL: [OutboxState; 3] = [
        OutboxState::Pending,
        OutboxState::Delivered,
        OutboxState::Poisoned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Delivered => "delivered",
            OutboxState::Poisoned => "poisoned",
        }
    }

    pub fn parse(s: &str) -> Option<OutboxState> {
        OutboxState::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// A request a commit emits (C1): a new pending row, due at the commit's instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxRow {
    pub key: String,
    pub node: String,
    pub channel: String,
    pub attempt: Attempt,
    pub call_id: String,
    pub body: String,
}

/// Outbox rows a commit writes. Withdrawals apply before emissions, so a node whose
/// dead attempt is withdrawn and whose next attempt is emitted in one commit (an
/// immediate re-drive) keeps the new row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxWrites {
    /// Inserted; a key that already exists is left as it is (a re-emission after a lost
    /// commit acknowledgement must not reset a row's delivery record), and of two
    /// emissions of one key in a commit the first wins.
    pub emit: Vec<NewOutboxRow>,
    /// The dead attempt's rows of each of these nodes of the instance, pending and
    /// poisoned alike, are deleted (C6: the one exception to "an undelivered row is
    /// never deleted"); delivered rows stay as the record of what was sent.
    pub withdraw: Vec<String>,
    /// The rows with these keys, if still pending, are delivered: the step took the
    /// counterpart's answer to them, which proves the request reached it. Counts as one
    /// delivery try and drops any lease, so no dispatcher delivers them again; the
    /// dispatcher that delivered one needs no record of its own (one transaction less
    /// per call).
    pub answered: Vec<String>,
}

impl OutboxWrites {
    pub fn is_empty(&self) -> bool {
        self.emit.is_empty() && self.withdraw.is_empty() && self.answered.is_empty()
    }
}

/// What one delivery try of an outbox row came to, as the dispatcher records it with
/// [`Store::record_delivery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryRecord {
    /// The counterpart accepted the request.
    Delivered,
    /// The try failed; the next one is due at `retry_at_ms`.
    Failed { error: String, retry_at_ms: i64 },
    /// The try failed and the channel's ceiling is reached: the row is poisoned and an
    /// incident (`POISONED`) opens on the node in the same transaction.
    Poisoned { error: String },
}

impl DeliveryRecord {
    /// The row's state once this try is recorded.
    pub fn state(&self) -> OutboxState {
        match self {
            DeliveryRecord::Delivered => OutboxState::Delivered,
            DeliveryRecord::Failed { .. } => OutboxState::Pending,
            DeliveryRecord::Poisoned { .. } => OutboxState::Poisoned,
        }
    }

    /// The row's next due instant, if this try moves it (a failed try that will be
    /// tried again).
    pub fn retry_at_ms(&self) -> Option<i64> {
        match self {
            DeliveryRecord::Failed { retry_at_ms, .. } => Some(*retry_at_ms),
            DeliveryRecord::Delivered | DeliveryRecord::Poisoned { .. } => None,
        }
    }

    /// What the try said, if it failed: the row's new `last_error`. A delivered try
    /// keeps the last failure's text as the record of what came before.
    pub fn error(&self) -> Option<&str> {
        match self {
            DeliveryRecord::Failed { error, .. } | DeliveryRecord::Poisoned { error } => {
                Some(error)
            }
            DeliveryRecord::Delivered => None,
        }
    }
}

/// The code of the incident a poisoned outbox row opens on its node (C2).
pub const POISONED_INCIDENT_CODE: &str = "POISONED";

/// The message of the incident a poisoned outbox row opens: the last try's error and
/// how many tries were made, counting the last one. One text for every store.
pub fn poisoned_message(error: &str, deliveries: u32) -> String {
    let tries = if deliveries == 1 { "try" } else { "tries" };
    format!("not delivered after {deliveries} {tries}: {error}")
}

/// The most rows one [`Store::claim_due_outbox`] call returns, whatever it asks for.
pub const OUTBOX_CLAIM_LIMIT_MAX: u32 = 1_000;

/// A claim's row limit as stores apply it: at most [`OUTBOX_CLAIM_LIMIT_MAX`]; 0 claims
/// nothing.
pub fn effective_outbox_claim_limit(limit: u32) -> u32 {
    limit.min(OUTBOX_CLAIM_LIMIT_MAX)
}

/// Everything one step wrote, applied atomically: the instance row, then the effect
/// rows by family. A new family (correlations next) is one more field here and one
/// more `apply` per store — each store writes each family in exactly one place.
///
/// The parts few steps carry (a schedule's advance, a journal row, a buffered message's
/// take) are boxed: a commit moves through the lane several times a step, and inline they
/// were 224 of its 768 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub instance: InstanceId,
    /// `None`: create the instance; it must not exist. `Some(f)`: apply only if the stored
    /// fence is still `f` (compare-and-swap); the new fence is `f + 1`.
    pub expected_fence: Option<u64>,
    pub deployment: DeploymentId,
    pub now_ms: i64,
    /// The instance row after the step.
    pub state: InstanceState,
    pub timers: TimerWrites,
    pub incidents: IncidentWrites,
    /// Message subscriptions opened and closed.
    pub subscriptions: SubscriptionWrites,
    /// Attempt-history rows (O1a), appended.
    pub attempts: Vec<AttemptRecord>,
    /// Audit rows of the operator action this step carries out, appended with the
    /// fences the commit moved between.
    pub audit: Vec<AuditEntry>,
    /// Pull-task rows (P1): offered, locked, withdrawn.
    pub pull: PullWrites,
    /// Channel-call requests emitted and withdrawn (C1, C6).
    pub outbox: OutboxWrites,
    /// User-task rows (the task list): offered, assigned, withdrawn.
    pub user_tasks: UserTaskWrites,
    /// A creation that starts an occurrence of a timer start event's schedule moves the
    /// schedule on, atomically with the creation (see [`ScheduleAdvance`]). `None` for
    /// every other commit.
    pub schedule: Option<Box<ScheduleAdvance>>,
    /// The update may move the instance onto another deployment (a migration): the
    /// store checks, atomically with `retire`, that `deployment` is not retired, as it
    /// does for a creation. Ordinary steps leave it `false` and take no such lock.
    pub moves: bool,
    /// The step's row of the input journal (SPEC G3), when the journal is on for the
    /// instance's deployment: appended exactly when the commit is applied.
    pub journal: Option<Box<JournalEntry>>,
    /// The step delivers a buffered message ([`Store::buffer_message`]): the store
    /// records that the instance's process took it, atomically with the step, and
    /// refuses the commit ([`CommitOutcome::MessageTaken`]) when that process took it
    /// before or the message has expired (at the commit's `now_ms`) or is gone.
    pub message_take: Option<Box<MessageTake>>,
}

/// A buffered message taken by a step (see [`Commit::message_take`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageTake {
    /// The message's row id ([`BufferedMessage::id`]).
    pub message: i64,
    /// The BPMN process id of the instance that takes it: a buffered message reaches
    /// each process at most once, across its versions (Zeebe's rule).
    pub process: String,
}

/// A message published with a time to live (Camunda 8's message buffer, `docs/messages.md`):
/// kept until it expires, so that a wait that opens later under its name and
/// correlation key still receives it, oldest message first, each process at most once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBufferedMessage {
    /// The Camunda 8 key the publication answered with.
    pub key: i64,
    pub name: String,
    pub correlation_key: String,
    /// The publisher's id for it: a second message with the same name, correlation key
    /// and id is refused while the first is buffered ([`BufferOutcome::Duplicate`]).
    pub message_id: Option<String>,
    /// Its variables, as a JSON object.
    pub variables: String,
    pub published_at_ms: i64,
    /// The first instant at which it is no longer delivered.
    pub expires_at_ms: i64,
}

/// A buffered message as stored, with the processes that took it so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferedMessage {
    /// The row's id: increasing in publication order, never reused.
    pub id: i64,
    pub key: i64,
    pub name: String,
    pub correlation_key: String,
    pub message_id: Option<String>,
    pub variables: String,
    pub published_at_ms: i64,
    pub expires_at_ms: i64,
    /// The BPMN process ids that took it, sorted.
    pub takers: Vec<String>,
}

/// What [`Store::buffer_message`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferOutcome {
    Buffered {
        id: i64,
    },
    /// A live message with the same name, correlation key and message id is buffered
    /// already (its key): nothing was written.
    Duplicate {
        key: i64,
    },
}

/// Which buffered messages [`Store::buffered_messages`] lists: the live ones (expiring
/// after `now_ms`) with an id above `after`, of one name and correlation key or of all,
/// oldest first, at most `limit` ([`BUFFERED_LIMIT_MAX`]; 0: that cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferQuery<'a> {
    pub name_and_key: Option<(&'a str, &'a str)>,
    pub after: i64,
    pub now_ms: i64,
    pub limit: u32,
}

/// The most rows [`Store::buffered_messages`] returns, whatever it asks for.
pub const BUFFERED_LIMIT_MAX: u32 = 1_000;

/// The limit a buffer query means: 0 and anything above the cap are the cap.
pub fn effective_buffered_limit(limit: u32) -> u32 {
    if limit == 0 {
        BUFFERED_LIMIT_MAX
    } else {
        limit.min(BUFFERED_LIMIT_MAX)
    }
}

/// One step's row of the input journal (SPEC G3, `docs/replay.md`): what the step was
/// given and a record of what it wrote, enough to run it again through another build of
/// the step function and compare bytes. Rows of an instance are keyed by `seq`, the
/// fence its commit wrote (1: the creation), so a journal that was switched on while the
/// instance ran, or off for a while, shows as a gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The fence the step's commit wrote: the step's number in the instance's history.
    pub seq: u64,
    /// The deployment whose definition the step ran on (a migration's step: the target).
    pub deployment: DeploymentId,
    /// The step's `now`.
    pub at_ms: i64,
    /// The input, as the engine's `Input` type serializes it to JSON.
    pub input: String,
    /// The snapshot the step wrote, as a delta against the one before it
    /// (`qflow_core::journal::delta`).
    pub delta: Vec<u8>,
    /// The hash of the snapshot bytes the step wrote (`HashKind::hash`).
    pub snapshot_hash: Vec<u8>,
    /// The hash of the step's effects (`HashKind::effects_hash`).
    pub effects_hash: Vec<u8>,
    /// The hash of every other field ([`JournalEntry::row_hash_of`]): a row that does not
    /// match its own hash is reported as damaged, never trusted. Its length tells the
    /// row's [`HashKind`] (all three hashes are of that kind).
    pub row_hash: Vec<u8>,
}

impl JournalEntry {
    /// The kind of the row's hashes, told by the length of its row hash; none when that
    /// length is no kind's (a damaged row). A row being built (no row hash yet) is of
    /// the kind this build writes.
    pub fn hash_kind(&self) -> Option<HashKind> {
        if self.row_hash.is_empty() {
            return Some(HashKind::CURRENT);
        }
        HashKind::of_len(self.row_hash.len())
    }

    /// The hash [`JournalEntry::row_hash`] must be, of the row's [`HashKind`] (this
    /// build's when the row has none): over `seq`, the deployment, `at_ms`, the input,
    /// the delta and the two hashes, each length-prefixed.
    pub fn row_hash_of(&self) -> Vec<u8> {
        self.row_hash_as(self.hash_kind().unwrap_or(HashKind::CURRENT))
    }

    fn row_hash_as(&self, kind: HashKind) -> Vec<u8> {
        let parts = [
            self.input.as_bytes(),
            &self.delta,
            &self.snapshot_hash,
            &self.effects_hash,
        ];
        let mut h = kind.hasher_for(24 + parts.iter().map(|p| 8 + p.len()).sum::<usize>());
        h.update(&self.seq.to_be_bytes());
        h.update(&self.deployment.0.to_be_bytes());
        h.update(&self.at_ms.to_be_bytes());
        for part in parts {
            h.update(&(part.len() as u64).to_be_bytes());
            h.update(part);
        }
        h.finish()
    }

    /// Whether the row matches its own hash, and its three hashes are of one kind.
    pub fn is_intact(&self) -> bool {
        self.hash_kind().is_some_and(|kind| {
            self.snapshot_hash.len() == kind.hash_len()
                && self.effects_hash.len() == kind.hash_len()
                && self.row_hash == self.row_hash_as(kind)
        })
    }

    /// The bytes the row takes, as stores count them for `docs/replay.md`'s size per
    /// step (the fields, not the store's own overhead).
    pub fn size_bytes(&self) -> usize {
        24 + self.input.len()
            + self.delta.len()
            + self.snapshot_hash.len()
            + self.effects_hash.len()
            + self.row_hash.len()
    }
}

/// The most journal rows one [`Store::journal`] call returns.
pub const JOURNAL_PAGE_MAX: u32 = 10_000;

/// An operator action, as a commit carries it into the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Who: the token's or the user's name.
    pub actor: String,
    /// What: `resume`, `retry_now`, `cancel`, ...
    pub action: String,
    /// The action's arguments, as text (`budget=reset`).
    pub detail: String,
}

/// A row of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub id: i64,
    pub instance: InstanceId,
    /// When: the commit's instant.
    pub at_ms: i64,
    pub actor: String,
    pub action: String,
    pub detail: String,
    /// The fence the commit expected (`None` for a creation) and the one it wrote.
    pub fence_before: Option<u64>,
    pub fence_after: u64,
}

impl Commit {
    /// A commit of `state` with no effect rows yet.
    pub fn new(
        instance: InstanceId,
        expected_fence: Option<u64>,
        deployment: DeploymentId,
        state: InstanceState,
        now_ms: i64,
    ) -> Commit {
        Commit {
            instance,
            expected_fence,
            deployment,
            now_ms,
            state,
            timers: TimerWrites::default(),
            incidents: IncidentWrites::default(),
            subscriptions: SubscriptionWrites::default(),
            attempts: Vec::new(),
            audit: Vec::new(),
            pull: PullWrites::default(),
            outbox: OutboxWrites::default(),
            user_tasks: UserTaskWrites::default(),
            schedule: None,
            moves: false,
            journal: None,
            message_take: None,
        }
    }
}

/// The instance row a commit writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceState {
    pub status: InstanceStatus,
    pub failure_code: Option<String>,
    pub snapshot: Vec<u8>,
    /// Read only by a creation (`expected_fence: None`): the instance's business key,
    /// unique per deployment (see the crate docs for its bounds). An update never changes
    /// the stored key, whatever this field says; callers stepping an existing instance
    /// pass `None`.
    pub business_key: Option<String>,
}

/// Timer rows a commit writes. Resolves apply before arms, so a name resolved and
/// re-armed in one commit ends up armed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerWrites {
    /// Upserted by `(instance, name)`; any lease on the old row is dropped.
    pub arm: Vec<TimerRecord>,
    /// Deleted only where `(instance, name, incarnation)` matches.
    pub resolve: Vec<TimerRef>,
}

/// Incident rows a commit writes: moves first, then resolves, then opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncidentWrites {
    /// `(from, to)`: every open incident of this instance on node `from` is put on node
    /// `to` (a migration renamed the node); its id, code, message and instant stay.
    pub moved: Vec<(String, String)>,
    pub open: Vec<NewIncident>,
    /// Resolves every open incident of this instance on these nodes.
    pub resolve_on: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    Applied {
        fence: u64,
    },
    /// The CAS lost: someone else stepped the instance (or it already exists / vanished).
    /// The caller re-reads and re-derives. Nothing of this commit was written.
    Conflict {
        current_fence: Option<u64>,
    },
    /// A creation (`expected_fence: None`) on a retired deployment, or an update that
    /// moves an instance onto one (a migration). Checked in the same transaction,
    /// atomically with `retire`, so no instance can start on or move onto a deployment
    /// once its retirement has committed (R5). Nothing of this commit was written.
    DeploymentRetired,
    /// The commit would give two instances of one deployment the same business key: a
    /// creation with a key `existing` already holds there, or an update moving an
    /// instance (migration) onto a deployment where `existing` holds its key. Checked in
    /// the same transaction; nothing of this commit was written. In a batch, the first
    /// commit to claim a key wins and later ones are refused.
    DuplicateBusinessKey {
        existing: InstanceId,
    },
    /// The commit's [`Commit::message_take`] cannot be: the message expired or is gone,
    /// or the instance's process took it before (in an earlier commit or earlier in the
    /// batch). Nothing of this commit was written.
    MessageTaken,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetireOutcome {
    Retired,
    /// Non-terminal or FAILED instances still reference the deployment.
    Refused {
        blocking_instances: u64,
    },
    NotFound,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceFilter {
    pub deployment: Option<DeploymentId>,
    pub status: Option<InstanceStatus>,
    pub failure_code: Option<String>,
    /// Only the instance(s) with exactly this business key (one per deployment at most).
    pub business_key: Option<String>,
    /// Only instances created at or after this instant (ms since the epoch).
    pub created_from_ms: Option<i64>,
    /// Only instances created before this instant.
    pub created_to_ms: Option<i64>,
    /// Only instances that ended (completed or cancelled) at or after this instant. Any
    /// end bound leaves out the instances that have not ended.
    pub ended_from_ms: Option<i64>,
    /// Only instances that ended before this instant.
    pub ended_to_ms: Option<i64>,
    /// Only instances that stand at this node: an open incident on it (which is where a
    /// FAILED instance failed), a timer row of it (a retry park `r:`, a `q:timeout`
    /// window `t:`, a timer catch `c:`), or an open message subscription at it.
    pub node: Option<String>,
    /// Keyset pagination: only rows strictly after this `(created_at_ms, id)` position in
    /// the listing order — the last row of the previous page.
    pub after: Option<(i64, InstanceId)>,
    /// At most this many rows, ordered by creation then id. Stores cap it at 10,000.
    pub limit: u32,
}

/// The most instances one [`Store::purge_finished`] call deletes, whatever it asks for:
/// it keeps each purge transaction short (and SQLite's bound parameters far below its
/// limit).
pub const PURGE_LIMIT_MAX: u32 = 10_000;

/// What [`Store::purge_finished`] is given: one bounded batch of retention (O7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Only instances that ended (`ended_at_ms`) strictly before this instant.
    pub ended_before_ms: i64,
    /// Only instances of this deployment; `None`: of every deployment.
    pub deployment: Option<DeploymentId>,
    /// At most this many instances, oldest end first; 0 purges nothing, and stores cap
    /// it at [`PURGE_LIMIT_MAX`].
    pub limit: u32,
}

/// What one [`Store::purge_finished`] call deleted, row counts by table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeOutcome {
    pub instances: u64,
    pub attempts: u64,
    pub incidents: u64,
    pub audit: u64,
    /// Timer, pull-task and user-task rows of ended instances: there should be none (an
    /// ended instance arms nothing and its last commit resolves and withdraws what it
    /// held), so anything here is residue.
    pub timers: u64,
    /// Subscription rows of ended instances: residue too, for the same reason.
    pub subscriptions: u64,
    /// Outbox rows of the purged instances, whatever their state: the instance they
    /// belong to is gone, and a delivery for it could only be answered `unknown`.
    pub outbox: u64,
    /// Input-journal rows of the purged instances (SPEC G3): the journal follows
    /// retention.
    pub journal: u64,
    /// Camunda 8 keys of the purged instances ([`Store::camunda_keys`]).
    pub keys: u64,
}

impl PurgeOutcome {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: PurgeOutcome) {
        self.instances += other.instances;
        self.attempts += other.attempts;
        self.incidents += other.incidents;
        self.audit += other.audit;
        self.timers += other.timers;
        self.subscriptions += other.subscriptions;
        self.outbox += other.outbox;
        self.journal += other.journal;
        self.keys += other.keys;
    }
}

/// What a Camunda 8 key names (issue 28; `docs/workers.md`, "Keys"): one thing of one
/// instance. Camunda's APIs name everything by a 64-bit integer; qflow names instances by
/// UUID and an instance's parts by BPMN id, so the store keeps a registry that gives each
/// such name a key the first time the Camunda surface hands it out
/// ([`Store::camunda_keys`]) and reads a key back to its name ([`Store::camunda_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// The process instance itself (`node` empty, `attempt` 0).
    Instance,
    /// An activity instance (`node` its key, `pay@2`, `sub#3`; `attempt` 0): the same
    /// key for every attempt, as a Zeebe element instance keeps its key across its
    /// job's retries.
    Element,
    /// One attempt of a pull task (`node`, `attempt`): a failed job's next attempt is a
    /// new job with a new key; the keys go when the task is withdrawn.
    Job,
    /// A user task waiting at `node` (`attempt` 0).
    UserTask,
    /// One incident row (`node`: the row's id in decimal).
    Incident,
    /// One variable of the instance (`node`: its name).
    Variable,
}

impl KeyKind {
    pub const ALL: [KeyKind; 6] = [
        KeyKind::Instance,
        KeyKind::Element,
        KeyKind::Job,
        KeyKind::UserTask,
        KeyKind::Incident,
        KeyKind::Variable,
    ];

    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Instance => "instance",
            KeyKind::Element => "element",
            KeyKind::Job => "job",
            KeyKind::UserTask => "user_task",
            KeyKind::Incident => "incident",
            KeyKind::Variable => "variable",
        }
    }

    pub fn parse(s: &str) -> Option<KeyKind> {
        KeyKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The name a Camunda 8 key stands for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyName {
    pub instance: InstanceId,
    pub kind: KeyKind,
    /// The activity instance's key; empty for [`KeyKind::Instance`]; the incident row's
    /// id for [`KeyKind::Incident`], the variable's name for [`KeyKind::Variable`].
    pub node: String,
    /// The attempt for [`KeyKind::Job`], else 0.
    pub attempt: u32,
}

impl KeyName {
    /// The process instance's own name.
    pub fn instance(instance: InstanceId) -> KeyName {
        KeyName {
            instance,
            kind: KeyKind::Instance,
            node: String::new(),
            attempt: 0,
        }
    }
}

/// The first key a store hands out: Zeebe's first key of partition 1 (`1 << 51 | 1`).
/// Zeebe keys carry their partition in the bits above 51, and some clients and tools
/// read it off (`key >> 51`); qflow answers as the one partition its topology shows.
/// Keys then increase by one and are never reused, not even after retention purged the
/// thing they named.
pub const CAMUNDA_KEY_FIRST: i64 = (1 << 51) | 1;

/// The most names one [`Store::camunda_keys`] call takes.
pub const CAMUNDA_KEYS_MAX: usize = 1_024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store backend error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("no deployment {0:?}")]
    UnknownDeployment(DeploymentId),
    /// A Camunda key was asked for a name of an instance the store does not hold (never
    /// created, or purged by retention meanwhile): no key is given to it.
    #[error("no instance {0}")]
    UnknownInstance(InstanceId),
}

pub type StoreResult<T> = Result<T, StoreError>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `false` for the in-memory store: stateful definitions are refused on it (L7).
    fn is_durable(&self) -> bool;

    /// Whether commits that arrive while one runs are joined into the store's next
    /// transaction (the SQLite store's committer). A runtime lane then hands a round's
    /// commit over and prepares its next round while it runs (`runtime/src/lane.rs`):
    /// whatever the lanes send meanwhile costs one transaction. The default, `false`, is
    /// for a store whose commits are transactions of their own (PostgreSQL: a lane that
    /// overlapped them committed twice as often, half as much each time, and four lanes
    /// ran slower, `docs/performance.md` "A lane prepares while its commit runs") or work
    /// on the caller's thread alone (the memory store). Hosts run one lane on a store that
    /// says `true` unless told otherwise (`qflow_runtime::default_lanes`).
    fn commits_group(&self) -> bool {
        false
    }

    /// Releases what the store holds open, once its owner is done with it (the runtime and
    /// everything else that writes through it have stopped): a SQLite store folds its WAL
    /// into the file and removes the `-wal` and `-shm` files, PostgreSQL closes its pool.
    /// Calls after it may be refused. The default has nothing to release.
    async fn close(&self) {}

    /// Records a deployment, or returns the existing one with the same `content_hash`.
    async fn deploy(&self, new: NewDeployment<'_>) -> StoreResult<DeploymentRecord>;
    async fn deployment(&self, id: DeploymentId) -> StoreResult<Option<DeploymentRecord>>;
    /// All deployments, oldest first.
    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>>;
    /// Refused while a running or FAILED instance references the deployment (R5). A
    /// retirement deletes the deployment's schedules in the same transaction.
    async fn retire(&self, id: DeploymentId) -> StoreResult<RetireOutcome>;

    /// Applies a batch of commits for distinct instances in one transaction (one fsync:
    /// group commit). Each commit is CAS-checked on its own; a loser is skipped and
    /// reported, the others still apply. A creation on a retired deployment is refused
    /// ([`CommitOutcome::DeploymentRetired`]), and so is a commit that would repeat a
    /// business key on a deployment ([`CommitOutcome::DuplicateBusinessKey`]); the rest
    /// of the batch still applies. Outcomes are in batch order.
    async fn commit(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>>;

    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>>;

    /// The stored instances among `ids`, each once, in no particular order; an id with
    /// no instance is left out. One read for many (a lane reads the claims of a round's
    /// instances so); the default reads them one by one.
    async fn instances_by_id(&self, ids: &[InstanceId]) -> StoreResult<Vec<InstanceRecord>> {
        let mut out = Vec::with_capacity(ids.len());
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        for &id in ids {
            if seen.insert(id) {
                if let Some(record) = self.instance(id).await? {
                    out.push(record);
                }
            }
        }
        Ok(out)
    }
    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>>;

    /// Leases up to `limit` timers with `due_at_ms <= now_ms` whose lease is free or has
    /// expired, to `owner` until `now_ms + lease_ms`, earliest due first. Replicas calling
    /// this concurrently never receive the same row while its lease holds. Cost grows with
    /// due timers, not with parked ones (an index on `due_at_ms`).
    async fn claim_due_timers(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<TimerRecord>>;
    /// Leases up to `limit` timer start schedules due at or before `now_ms` whose lease
    /// is free or has expired, earliest due first, as [`Store::claim_due_timers`] does
    /// timers. A lease only keeps other replicas from starting the same occurrence at
    /// the same time; what makes one occurrence start one instance is the commit's
    /// [`ScheduleAdvance`]. A claimed row stays claimed until its lease lapses or a
    /// commit advances it (which drops the lease).
    async fn claim_due_schedules(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<ScheduleRecord>>;
    /// Moves the schedule of `(deployment, advance.node)` on without starting anything —
    /// an occurrence the engine cannot start (its start event is gone from the
    /// deployment, or the step refuses the start) is skipped rather than claimed again
    /// forever — under the same compare-and-swap on the due instant as
    /// [`Commit::schedule`]. Returns whether the row was still at `advance.fired_at_ms`.
    async fn advance_schedule(
        &self,
        deployment: DeploymentId,
        advance: &ScheduleAdvance,
    ) -> StoreResult<bool>;
    /// The schedules of `deployment`, or of every deployment, by deployment and node.
    async fn schedules(&self, deployment: Option<DeploymentId>)
        -> StoreResult<Vec<ScheduleRecord>>;
    /// The earliest due instant of any timer, leased or not.
    async fn next_timer_due(&self) -> StoreResult<Option<i64>>;
    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>>;

    async fn incidents(&self, instance: Option<InstanceId>) -> StoreResult<Vec<IncidentRecord>>;
    /// The newest `limit` incidents of every instance (0: the 10,000 cap) — only the open
    /// ones with `open_only` — newest first: what an operator's incident list shows,
    /// bounded however many there are. A walk of the primary key from its end.
    async fn latest_incidents(
        &self,
        limit: u32,
        open_only: bool,
    ) -> StoreResult<Vec<IncidentRecord>>;

    /// The open subscriptions for message `message` under `key`, oldest first (by the
    /// instant they opened, then instance and node), at most `limit` (0: the cap,
    /// [`SUBSCRIPTIONS_LIMIT_MAX`]). A lookup by the `(message, key)` index.
    async fn subscriptions(
        &self,
        message: &str,
        key: &str,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>>;

    /// [`Store::subscriptions`] past `after` — the subscription a previous page ended
    /// with, compared by `(opened_at_ms, instance, node)` — so that a walk over every
    /// subscription of a name and key (a signal's broadcast: the empty key) reads each
    /// row once, however many there are and whichever stay open behind it.
    async fn subscriptions_after(
        &self,
        message: &str,
        key: &str,
        after: &SubscriptionRecord,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>>;

    /// The open subscriptions of one instance, by node.
    async fn instance_subscriptions(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<SubscriptionRecord>>;

    /// How many instances there are in each status — of one deployment, or of all — in
    /// [`InstanceStatus`] order, every status listed (0 when none). One indexed count per
    /// status (`(deployment, status, …)` or `(status, …)`).
    async fn instance_counts(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<(InstanceStatus, u64)>>;

    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>>;

    /// The input journal of one instance (SPEC G3): its rows with `seq` after `after`, in
    /// `seq` order, at most `limit` ([`JOURNAL_PAGE_MAX`]; 0: that cap). Read without a
    /// claim: a replay runs beside the lanes and takes nothing from them.
    async fn journal(
        &self,
        instance: InstanceId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>>;

    /// The audit log, of one instance or of all, oldest first, at most `limit` rows (0:
    /// the 10,000 cap), the newest ones when there are more.
    async fn audit(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>>;

    /// Retention (O7): deletes at most `limit` instances that have ended (completed or
    /// cancelled) before `ended_before_ms`, oldest end first, with every row that hangs
    /// off them — attempt history, incidents, audit rows, journal rows, and any timer residue — in one
    /// short transaction. Running and FAILED instances are never touched, at any age.
    /// Returns what went; fewer instances than `limit` means nothing more is due.
    ///
    /// Audit rows go with their instance. They are the operator's record of what was
    /// done to an instance, and an instance that is kept keeps all of them; but an audit
    /// row names an instance, and a log that outlived the instances would grow without
    /// bound, which retention exists to prevent (the store's size follows live plus
    /// retained work). An installation that must keep operator actions longer than the
    /// instances gives those processes a longer retention, or ships the log elsewhere
    /// (`qflow audit --format json`) before it lapses.
    ///
    /// Replicas may purge at once: on PostgreSQL each skips the rows another is deleting
    /// or a lane is committing (`FOR UPDATE SKIP LOCKED`), so nobody waits on anybody.
    async fn purge_finished(&self, request: PurgeRequest) -> StoreResult<PurgeOutcome>;

    /// Pull tasks offered to any worker (no lock) on one of `query.topics`, oldest offer
    /// first (then instance, node), at most `query.limit` ([`PULL_QUERY_LIMIT_MAX`]).
    /// A hint, read without a claim: the fetch that follows steps each instance under its
    /// claim, and the core refuses a row that is no longer offered. Cost grows with the
    /// offered rows of those topics (an index on `(topic, offered_at_ms)` of unlocked
    /// rows), never with locked ones or other topics.
    async fn offered_pull_tasks(&self, query: PullQuery<'_>) -> StoreResult<Vec<PullTaskRecord>>;

    /// The pull-task rows of one instance, by node.
    async fn pull_tasks(&self, instance: InstanceId) -> StoreResult<Vec<PullTaskRecord>>;

    /// Leases up to `claim.limit` (at most [`OUTBOX_CLAIM_LIMIT_MAX`]) pending outbox
    /// rows due at or before `claim.now_ms` whose lease is free or has expired (a lease
    /// holds up to and including its instant), to `claim.owner` until
    /// `now_ms + lease_ms`, earliest due first, then by key compared as bytes — the
    /// timer poller's pattern (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so replicas share
    /// the work and never receive the same row while its lease holds). Cost grows with
    /// due rows (an index on the due instant of pending rows), not with delivered or
    /// parked ones.
    async fn claim_due_outbox(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<OutboxRecord>>;

    /// Records one delivery try of the row `key` made under `owner`'s lease at `now_ms`:
    /// counts the try, drops the lease, and moves the row to delivered, to its next due
    /// instant (`retry_at_ms`, with the error as `last_error`), or to poisoned (with the
    /// error, opening the [`POISONED_INCIDENT_CODE`] incident on the row's node at
    /// `now_ms`, message [`poisoned_message`], in the same transaction). Applies only
    /// while the row is pending and `owner` holds the last lease taken on it; returns
    /// whether it applied (a row withdrawn meanwhile, claimed by another dispatcher
    /// after the lease ran out, never claimed, or already recorded for this lease, is
    /// left alone). A lease that ran out without another claim still counts: the try
    /// was made, and recording it is better than trying again. The instance's fence
    /// does not move; the engine learns of a poisoned row by reading it under the
    /// claim (C3).
    async fn record_delivery(
        &self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: DeliveryRecord,
    ) -> StoreResult<bool>;

    /// The earliest due instant of any pending outbox row, leased or not.
    async fn next_outbox_due(&self) -> StoreResult<Option<i64>>;

    /// The outbox row with this key.
    async fn outbox_row(&self, key: &str) -> StoreResult<Option<OutboxRecord>>;

    /// The outbox rows of one instance, oldest first (then by key, compared as bytes).
    async fn outbox(&self, instance: InstanceId) -> StoreResult<Vec<OutboxRecord>>;
    /// The task list: user tasks matching `query`, in `(created_at_ms, instance, node)`
    /// order after its cursor, at most its limit ([`USER_TASKS_LIMIT_MAX`]). A hint, read
    /// without a claim (a claim or a completion steps the instance, and the core judges
    /// it). Cost grows with the rows of the most selective index the query names — the
    /// assignee's tasks, a candidate's tasks (one walk per group, merged), a deployment's
    /// tasks — never with instances that wait elsewhere or not at all.
    async fn user_tasks(&self, query: &UserTaskQuery) -> StoreResult<Vec<UserTaskRecord>>;

    /// The user-task rows of one instance, by node.
    async fn instance_user_tasks(&self, instance: InstanceId) -> StoreResult<Vec<UserTaskRecord>>;

    /// The Camunda 8 key of each name, in order: the key it was given before, or a new
    /// one (the next of an increasing sequence from [`CAMUNDA_KEY_FIRST`], never reused)
    /// recorded now. A name is given one key however many replicas ask at once. At most
    /// [`CAMUNDA_KEYS_MAX`] names (more is a caller's bug: refused as corrupt input). A
    /// read when every name has its key already; one short write transaction otherwise.
    /// A name of an instance the store does not hold is given no key
    /// ([`StoreError::UnknownInstance`]): a key is never recorded for an instance that a
    /// purge has taken, even one racing the call, so no key outlives its instance.
    /// Keys go with their instance when retention purges it; a commit that withdraws a
    /// pull task drops its [`KeyKind::Job`] keys, and one that withdraws a user task its
    /// [`KeyKind::UserTask`] key, so what is offered there next gets keys of its own.
    async fn camunda_keys(&self, names: &[KeyName]) -> StoreResult<Vec<i64>>;

    /// The name a Camunda 8 key was given to, if any: one read of the key's index.
    async fn camunda_key(&self, key: i64) -> StoreResult<Option<KeyName>>;

    /// Buffers a message published with a time to live, in one short transaction:
    /// refused as [`BufferOutcome::Duplicate`] while a live message (one expiring after
    /// `message.published_at_ms`) has the same name, correlation key and message id; an
    /// expired one with them is deleted first. A message without an id is never a
    /// duplicate.
    async fn buffer_message(&self, message: &NewBufferedMessage) -> StoreResult<BufferOutcome>;

    /// The buffered messages `query` selects, with their takers, by id (publication
    /// order). A lookup by the `(name, correlation_key, id)` index, or a walk of the
    /// primary key from `after`.
    async fn buffered_messages(&self, query: BufferQuery<'_>) -> StoreResult<Vec<BufferedMessage>>;

    /// Deletes at most `limit` messages expired at `now_ms` (expiring at or before it),
    /// earliest expiry first, with their taker rows; returns how many went. A walk of the
    /// expiry index.
    async fn expire_messages(&self, now_ms: i64, limit: u32) -> StoreResult<u64>;
}
