//! qflow's pure core (SPEC E1): the deterministic step `(definition, instance id,
//! snapshot, input, now) -> (snapshot', effects)`, the byte-stable snapshot codec and its
//! inspection, the retry decisions, the virtual-clock driver [`sim`], and the one mapping
//! from a handler's [`TaskOutcome`] to an [`Input`] ([`handler`]).
//!
//! Invariant: nothing in this crate does I/O, reads the clock, draws OS randomness or
//! iterates in hash order; it depends on no async runtime, database, network or file
//! system crate (`tests/purity.rs` checks the dependency graph).
//!
//! The step itself: `(definition, instance id, snapshot, input, now) -> (snapshot',
//! effects)`.
//!
//! [`step`] applies one [`Input`] to one instance and returns the next [`Snapshot`] plus
//! the [`Effect`]s the shell must carry out (run a handler, arm or resolve a timer row,
//! record an attempt, open an incident, report completion or failure). It never performs
//! an effect itself, never reads the clock (time is `now_ms`), never uses OS randomness
//! (jitter is a pure function of instance, node and attempt), and never iterates a hash
//! map, so the same inputs give the same bytes on every machine.
//!
//! A stale input — a task result for an attempt that is no longer in progress, a timer
//! whose incarnation is not the live one, a completion for a node without a token —
//! changes nothing: the snapshot comes back byte-identical with a single
//! [`Effect::Stale`] explaining why. [`crate::Error`] is reserved for misuse (a second
//! `Start`, a missing start event).
//!
//! Module map: `lib.rs` holds the vocabulary and the entry point; `flow.rs` applies
//! inputs and moves tokens; `gateway.rs` routes and joins; `scope.rs` handles
//! sub-processes, BPMN errors, interruption and the instance's endings; `retry.rs`
//! decides what a failed attempt means (E4–E8); `timers.rs` names, arms and resolves
//! timers; `redrive.rs` re-emits in-flight attempts after a crash (C7a); `delivery.rs`
//! is a channel's delivery curve, the one arithmetic the dispatcher and the simulator share;
//! `path.rs` records, when asked ([`step_traced`]), the path a step took;
//! `event_sub.rs` arms and starts event sub-processes; `compensation.rs` records the
//! completions of compensable activities and runs their handlers for a compensation
//! throw.

pub mod delivery;
pub mod error;
pub mod handler;
pub mod journal;
pub mod limits;
pub mod path;
pub mod schedule;
pub mod sim;
pub mod snapshot;

mod ad_hoc;
mod call;
mod channel;
mod compensation;
mod conditional;
mod event_sub;
mod flow;
mod gateway;
mod instances;
mod locals;
mod mapping;
mod migrate;
mod multi;
mod pull;
mod redrive;
mod repair;
mod retry;
mod run;
mod scope;
mod stall;
mod subscriptions;
mod support;
mod timers;
mod user_tasks;
mod vendor_io;

use std::num::NonZeroU32;

/// The definition the step runs on, re-exported for the shell.
pub use qflow_loader::model::Definition;
pub use qflow_loader::model::Variables;
use serde::{Deserialize, Serialize};

pub use crate::error::Error;
pub use crate::handler::{run_handler, Handlers, TaskContext, TaskHandler, TaskOutcome};
pub use crate::path::PathEvent;
pub use crate::snapshot::{Snapshot, Status};
pub use call::child_waits;
pub use channel::{verdict, CallKey, Verdict};
pub use compensation::COMPENSABLE_MAX;
pub use instances::ACTIVITY_INSTANCES_MAX;
pub use multi::MULTI_INSTANCES_MAX;
pub use pull::{pull_inputs, pull_task, PullTask, PULL_RETRIES_DEFAULT};
pub use qflow_loader::model::{ASSIGNMENT_NAME_CHARS_MAX, CANDIDATES_MAX};
pub use redrive::{any_attempt_in_flight, attempts_in_flight, InFlight, READOPTIONS_MAX};
pub use repair::Budget;
pub use subscriptions::CORRELATION_KEY_CHARS_MAX;
pub use support::unsupported_elements;
pub use timers::{TimerKind, TimerName};
pub use user_tasks::{offered_user_tasks, user_task_inputs};

/// Structured failure codes the core itself writes into a FAILED snapshot, beside the
/// handler codes (`HANDLER_FAILED`, a host's own codes) and `TIMEOUT`.
pub mod codes {
    /// A route-less `q:timeout` fired (E5).
    pub const TIMEOUT: &str = "TIMEOUT";
    /// A BPMN error reached the process level without a boundary catching it.
    pub const UNCAUGHT_BPMN_ERROR: &str = "UNCAUGHT_BPMN_ERROR";
    /// An exclusive or inclusive gateway had no true condition and no default flow, or
    /// an activity had only conditional outgoing flows and none was true.
    pub const NO_FLOW_TAKEN: &str = "NO_FLOW_TAKEN";
    /// A condition or mapping failed to evaluate.
    pub const EXPRESSION_FAILED: &str = "EXPRESSION_FAILED";
    /// No token is left but a join still holds arrivals: the join can never fire.
    pub const STUCK_AT_JOIN: &str = "STUCK_AT_JOIN";
    /// The instance reached an element this engine version cannot execute yet.
    pub const UNSUPPORTED_ELEMENT: &str = "UNSUPPORTED_ELEMENT";
    /// One step made more node arrivals than `flow::ARRIVALS_PER_STEP_MAX`: the model
    /// loops without ever waiting.
    pub const STEP_LIMIT: &str = "STEP_LIMIT";
    /// A handler's outputs are over a bound of `crate::limits` (too deep, too large):
    /// a failed attempt, so it spends budget and ends FAILED rather than be written.
    pub const OUTPUTS_REFUSED: &str = "OUTPUTS_REFUSED";
    /// The attempt in flight was re-adopted more than `READOPTIONS_MAX` times without an
    /// outcome ever being committed (a poison attempt that takes its replica down): a
    /// failed attempt, so it spends budget and ends FAILED instead of crash-looping.
    pub const READOPTION_LIMIT: &str = "READOPTION_LIMIT";
    /// A pull task's lock expired before its worker reported an outcome (P1): a failed
    /// attempt that spends the pull budget — a vanished worker is not a free retry.
    pub const LOCK_EXPIRED: &str = "LOCK_EXPIRED";
    /// A worker reported a pull task's attempt failed.
    pub const PULL_TASK_FAILED: &str = "PULL_TASK_FAILED";
    /// The outbox gave up delivering a channel call's request (its channel's attempt
    /// ceiling): a failed attempt of the call (C4), and the code of the incident the
    /// dispatcher opens on the node.
    pub const POISONED: &str = "POISONED";
    /// A compensable activity was entered with `COMPENSABLE_MAX` completions of
    /// compensable activities already recorded and not taken by a throw (a loop around a
    /// compensable activity): the instance fails rather than let its snapshot grow
    /// without bound.
    pub const COMPENSATION_LIMIT: &str = "COMPENSATION_LIMIT";
    /// The child instance a call activity's attempt started ended FAILED or was
    /// cancelled: a failed attempt of the call activity (`docs/call-activities.md`).
    pub const CALLED_INSTANCE_FAILED: &str = "CALLED_INSTANCE_FAILED";
    /// A call activity's attempt found no deployment of the called process to start (none
    /// live, or not the version its binding names): a failed attempt of the call activity.
    pub const CALLED_PROCESS_NOT_FOUND: &str = "CALLED_PROCESS_NOT_FOUND";
    /// A token arrived at a node that already runs `instances::ACTIVITY_INSTANCES_MAX`
    /// activity instances at once (E9): the instance fails rather than grow without bound.
    pub const ACTIVITY_INSTANCE_LIMIT: &str = "ACTIVITY_INSTANCE_LIMIT";
    /// The step left a running instance with nothing that could ever move it — no task
    /// in flight, no timer, no wait, no subscription, no outbox row, no child (E10). An
    /// engine defect, made loud: the instance fails with an incident naming the step's
    /// last node instead of waiting for ever.
    pub const STALLED: &str = "STALLED";
    /// Every token left is an ad-hoc sub-process with nothing active inside — it
    /// activated nothing, or its completion condition did not hold when its last path
    /// ended — and no boundary or event sub-process could end one: Zeebe would wait for
    /// an activation through its API, which qflow does not have
    /// (`docs/ad-hoc-sub-processes.md`). A model or data outcome, not a defect.
    pub const AD_HOC_IDLE: &str = "AD_HOC_IDLE";
    /// Every token left waits for a condition (a conditional catch, an event-based
    /// gateway before conditional catches only) and nothing left in the instance could
    /// change a variable: Camunda would wait for a variable set through its API, which
    /// qflow does not have (`docs/conditional-events.md`). A model or data outcome, not
    /// a defect.
    pub const CONDITION_IDLE: &str = "CONDITION_IDLE";
}

/// One attempt of a task: 1-based, so "no attempt" is not a number but `None`. Serialized
/// as the bare number; a 0 is refused where it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct Attempt(NonZeroU32);

impl Attempt {
    pub const FIRST: Attempt = Attempt(NonZeroU32::MIN);

    /// `None` for 0.
    pub fn new(n: u32) -> Option<Attempt> {
        NonZeroU32::new(n).map(Attempt)
    }

    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// The attempt after this one; saturates at `u32::MAX` (no policy allows that many).
    pub fn next(self) -> Attempt {
        Attempt(self.0.saturating_add(1))
    }
}

impl TryFrom<u32> for Attempt {
    type Error = &'static str;

    fn try_from(n: u32) -> Result<Attempt, Self::Error> {
        Attempt::new(n).ok_or("attempt numbers are 1-based; 0 is not an attempt")
    }
}

impl From<Attempt> for u32 {
    fn from(a: Attempt) -> u32 {
        a.get()
    }
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How a task attempt failed, as the shell observed it. Typed on the input, so the core
/// never reads a code string to decide what a failure was: the kind picks the class the
/// backoff marker records and the outcome of the attempt-history row, the code is the
/// host's and only carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The handler reported a failure (or none is registered).
    #[default]
    Failed,
    /// The handler panicked.
    Panicked,
    /// The attempt ran out of time: the shell's handler time limit, or the route-less
    /// `q:timeout` window the core itself watches.
    TimedOut,
    /// A channel call's request could not be delivered: the outbox reached the
    /// channel's attempt ceiling (C4).
    Poisoned,
}

impl FailureKind {
    pub fn is_failed(&self) -> bool {
        *self == FailureKind::Failed
    }

    /// The class a backoff-window marker `m/<node>` records (persisted: never rename).
    pub fn class(self) -> &'static str {
        match self {
            FailureKind::Failed => "failed",
            FailureKind::Panicked => "panicked",
            FailureKind::TimedOut => "timeout",
            FailureKind::Poisoned => "poisoned",
        }
    }

    /// The attempt-history outcome of an attempt that failed this way.
    pub fn outcome(self) -> AttemptOutcome {
        match self {
            FailureKind::Failed => AttemptOutcome::Failed,
            FailureKind::Panicked => AttemptOutcome::Panicked,
            FailureKind::TimedOut => AttemptOutcome::TimedOut,
            FailureKind::Poisoned => AttemptOutcome::Poisoned,
        }
    }
}

/// One thing that happened to an instance. A closed set: later features (channel
/// responses, poison wakes, pull-task results, migration) add variants here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Input {
    /// Starts the instance with these variables.
    Start {
        #[serde(default)]
        variables: Variables,
        /// The start event with a trigger the instance starts at (a message correlated
        /// to the deployment, a signal, a timer of its schedule); `None`: the none start
        /// events, as a plain start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start: Option<String>,
    },
    /// Starts the instance as the child of a call activity: the none start events, with
    /// these variables (the call activity's inputs), and the link back to the waiting
    /// call (`parent`), kept in the snapshot so that the child's end is reported there
    /// ([`Effect::NotifyParent`]).
    StartCalled {
        #[serde(default)]
        variables: Variables,
        parent: ParentLink,
    },
    /// The child instance started for call `call` of the call activity `node` ended, or
    /// raised an escalation it did not catch (`outcome`). Stale unless the token still
    /// waits there on that very call.
    ChildEnded {
        node: String,
        call: u32,
        outcome: ChildOutcome,
    },
    /// A registered task's handler returned a result for `attempt`.
    TaskCompleted {
        node: String,
        attempt: Attempt,
        #[serde(default)]
        outputs: Variables,
    },
    /// A registered task's attempt failed; `kind` says how (a plain failure is the
    /// default and is not written out).
    TaskFailed {
        node: String,
        attempt: Attempt,
        #[serde(default, skip_serializing_if = "FailureKind::is_failed")]
        kind: FailureKind,
        code: String,
        #[serde(default)]
        message: String,
    },
    /// A registered task's handler threw a BPMN error.
    TaskBpmnError {
        node: String,
        attempt: Attempt,
        code: String,
        #[serde(default)]
        message: String,
    },
    /// A timer row came due. Stale unless `incarnation` is the live one (E8).
    TimerFired { name: TimerName, incarnation: u32 },
    /// A user task was completed through the API with these variables. With an
    /// `assignee` (the person completing it), refused while somebody else holds the task.
    UserTaskCompleted {
        node: String,
        #[serde(default)]
        variables: Variables,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assignee: Option<String>,
    },
    /// The waiting user task `node` ends with a BPMN error (Camunda 7's
    /// `TaskService#handleBpmnError`): `variables` are merged into the instance, then the
    /// error routes like a handler's — to the task's error boundary, outwards, or it
    /// fails the instance with `UNCAUGHT_BPMN_ERROR`.
    UserTaskBpmnError {
        node: String,
        code: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        variables: Variables,
    },
    /// The waiting user task `node` raises an escalation (Camunda 7's
    /// `TaskService#handleEscalation`): `variables` are merged into the instance, then
    /// the task's own escalation boundary catches it, or the nearest enclosing
    /// sub-process's. Refused (stale) when nothing would catch it: the task list learns
    /// its escalation went nowhere, and nothing changes.
    UserTaskEscalated {
        node: String,
        code: String,
        #[serde(default)]
        variables: Variables,
    },
    /// `assignee` claims the waiting user task `node`: it becomes the task's assignee.
    /// Refused while somebody else holds it, unless `force` (a supervisor's reassignment).
    UserTaskClaimed {
        node: String,
        assignee: String,
        #[serde(default, skip_serializing_if = "is_false")]
        force: bool,
    },
    /// The waiting user task `node` is given back: nobody holds it. With an `assignee`,
    /// refused unless that person holds it; without, whoever holds it (an operator's).
    UserTaskUnclaimed {
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assignee: Option<String>,
    },
    /// A message arrived for a receive task or message catch event waiting on `name`.
    /// With a `correlation_key`, only a wait whose open subscription has that key takes
    /// it; without one, the first token (in frontier order) waiting for `name` does.
    MessageReceived {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        correlation_key: Option<String>,
        /// Only the wait at this node takes it (a correlation found its subscription
        /// there); `None`: any wait for `name`, first in frontier order.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        #[serde(default)]
        variables: Variables,
    },
    /// A signal named `name` was broadcast (an instance threw it, or the API). The wait
    /// at `node` catches it — the broadcast found its subscription there — or, with
    /// `node` `None`, every wait of the instance for `name` does.
    SignalReceived {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        #[serde(default)]
        variables: Variables,
    },
    /// An operator or host cancelled the instance.
    Cancel,
    /// An operator resumes a FAILED instance, keeping or resetting the retry budget its
    /// failed task burned (O3). Refused (stale) on an instance that is not FAILED.
    Resume {
        #[serde(default)]
        budget: Budget,
    },
    /// An operator runs the next attempt of a task in a backoff window now, without
    /// touching its attempt counter (O4a): `node`, or every parked task when `None`.
    /// Stale when no such backoff is pending.
    RetryNow {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// An operator moves the instance onto another deployment (O2); the step runs with the
    /// target definition. `mapping` renames nodes (old id → new id; unnamed ids keep
    /// theirs); `timers` gives the due instant of every live timer row by name. Stale,
    /// with every reason, when the plan does not fit the instance and the target.
    Migrate {
        #[serde(default)]
        mapping: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        timers: std::collections::BTreeMap<String, i64>,
        /// The nodes whose user-task row the store holds for the instance (the task
        /// list), by their old ids: the step withdraws each that it does not offer
        /// again. The shell fills it in, as it fills in `timers`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        user_tasks: Vec<String>,
    },
    /// An operator resolves the open incidents on `node` by hand (O4): the incident is
    /// understood and dealt with. Changes nothing of the instance but its fence; taken by
    /// a terminal instance too (a FAILED instance's incident is what an operator
    /// resolves). The shell checks an incident is open there before stepping.
    ResolveIncident { node: String },
    /// A worker locked the pull task `node`'s attempt `attempt` for `lock_ms` (P1): a
    /// fetch-and-lock. Stale unless the task is offered (a token, no backoff, no lock).
    PullLocked {
        node: String,
        attempt: Attempt,
        worker: String,
        lock_ms: u64,
    },
    /// The worker holding the lock completed the attempt with these variables.
    PullCompleted {
        node: String,
        attempt: Attempt,
        worker: String,
        #[serde(default)]
        variables: Variables,
    },
    /// The worker holding the lock reports the attempt failed, with the attempts the task
    /// has left (`retries`, Camunda's meaning: 0 ends it FAILED) and how long to wait
    /// before it is offered again.
    PullFailed {
        node: String,
        attempt: Attempt,
        worker: String,
        retries: u32,
        #[serde(default)]
        retry_timeout_ms: u64,
        #[serde(default)]
        message: String,
    },
    /// The worker holding the lock answers with a BPMN error: it routes to its boundary
    /// and spends no budget.
    PullBpmnError {
        node: String,
        attempt: Attempt,
        worker: String,
        code: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        variables: Variables,
    },
    /// The worker holding the lock moves its expiry to `lock_ms` from now.
    PullLockExtended {
        node: String,
        attempt: Attempt,
        worker: String,
        lock_ms: u64,
    },
    /// The attempts the pull task `node` has left, counting attempt `attempt`, become
    /// `retries` (at least 1): Camunda 8's job retries update (`PATCH /v2/jobs/{key}`),
    /// by anyone with the job's key. Taken while the attempt is the live one, by a
    /// running instance or by one FAILED at `node` — where a resume that keeps the
    /// budget then offers the task with these attempts (Camunda's "update the retries,
    /// then resolve the incident"). Moves nothing else.
    PullRetriesSet {
        node: String,
        attempt: Attempt,
        retries: u32,
    },
    /// The lock is given up (by its worker, or by an operator when `worker` is `None`):
    /// the attempt is offered again, no budget spent.
    PullUnlocked {
        node: String,
        attempt: Attempt,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
    },
    /// A counterpart answered attempt `attempt` of the channel call `call` (the numbers
    /// its idempotency key carries, [`CallKey`]). Whatever the answer says, it is not a
    /// failure (E5). Stale unless [`verdict`] says `resumed`.
    ChannelAnswered {
        call: u32,
        attempt: Attempt,
        #[serde(default)]
        variables: Variables,
    },
    /// A counterpart answered the call with a BPMN error: it routes to its boundary and
    /// spends no budget.
    ChannelBpmnError {
        call: u32,
        attempt: Attempt,
        code: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        variables: Variables,
    },
    /// The outbox poisoned the request of attempt `attempt` of call `call`: the shell
    /// found the poisoned row for exactly this instance, call and attempt, re-read under
    /// the claim (C3). A failed attempt (C4) unless the attempt is already dead.
    ChannelPoisoned {
        call: u32,
        attempt: Attempt,
        #[serde(default)]
        message: String,
    },
    /// The shell found waiting user tasks without their row in the task list (an instance
    /// that waits since before the task list existed, a row lost by hand): every user
    /// task a token waits at is offered again, whoever holds it kept. Bookkeeping: no
    /// token moves. Stale when no user task waits.
    OfferUserTasks,
    /// The shell lost track of in-flight attempts (a crash, a replica's death, a
    /// hand-over) and asks for them again: every registered task whose attempt is in
    /// flight gets its `RunTask` re-emitted with the same attempt — re-adoption, no
    /// budget spent (C7a). Each re-adoption is counted (`o/<node>`); past
    /// [`READOPTIONS_MAX`] the attempt is failed with `READOPTION_LIMIT` instead.
    Redrive,
}

impl Input {
    /// The input's kind, as its `type` tag spells it (`task_completed`, …).
    /// The variables this input brings in from outside, which the step bounds where they
    /// enter (`limits`): over a bound the input is refused and nothing changes. A task's
    /// and a called instance's results are not among them; over the bounds they fail the
    /// attempt instead (`OUTPUTS_REFUSED`). The scenario reader checks the same list.
    pub(crate) fn bounded_variables(&self) -> Option<&Variables> {
        match self {
            Input::Start { variables, .. }
            | Input::StartCalled { variables, .. }
            | Input::UserTaskCompleted { variables, .. }
            | Input::UserTaskBpmnError { variables, .. }
            | Input::UserTaskEscalated { variables, .. }
            | Input::MessageReceived { variables, .. }
            | Input::SignalReceived { variables, .. }
            | Input::PullCompleted { variables, .. }
            | Input::PullBpmnError { variables, .. }
            | Input::ChannelAnswered { variables, .. }
            | Input::ChannelBpmnError { variables, .. } => Some(variables),
            _ => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Input::Start { .. } => "start",
            Input::StartCalled { .. } => "start_called",
            Input::ChildEnded { .. } => "child_ended",
            Input::TaskCompleted { .. } => "task_completed",
            Input::TaskFailed { .. } => "task_failed",
            Input::TaskBpmnError { .. } => "task_bpmn_error",
            Input::TimerFired { .. } => "timer_fired",
            Input::UserTaskCompleted { .. } => "user_task_completed",
            Input::UserTaskBpmnError { .. } => "user_task_bpmn_error",
            Input::UserTaskEscalated { .. } => "user_task_escalated",
            Input::UserTaskClaimed { .. } => "user_task_claimed",
            Input::UserTaskUnclaimed { .. } => "user_task_unclaimed",
            Input::MessageReceived { .. } => "message_received",
            Input::SignalReceived { .. } => "signal_received",
            Input::Cancel => "cancel",
            Input::Resume { .. } => "resume",
            Input::RetryNow { .. } => "retry_now",
            Input::Migrate { .. } => "migrate",
            Input::ResolveIncident { .. } => "resolve_incident",
            Input::PullLocked { .. } => "pull_locked",
            Input::PullCompleted { .. } => "pull_completed",
            Input::PullFailed { .. } => "pull_failed",
            Input::PullBpmnError { .. } => "pull_bpmn_error",
            Input::PullLockExtended { .. } => "pull_lock_extended",
            Input::PullUnlocked { .. } => "pull_unlocked",
            Input::PullRetriesSet { .. } => "pull_retries_set",
            Input::ChannelAnswered { .. } => "channel_answered",
            Input::ChannelBpmnError { .. } => "channel_bpmn_error",
            Input::ChannelPoisoned { .. } => "channel_poisoned",
            Input::OfferUserTasks => "offer_user_tasks",
            Input::Redrive => "redrive",
        }
    }

    /// The node the input names, when it names one.
    pub fn node(&self) -> Option<&str> {
        match self {
            Input::TaskCompleted { node, .. }
            | Input::TaskFailed { node, .. }
            | Input::TaskBpmnError { node, .. }
            | Input::UserTaskCompleted { node, .. }
            | Input::UserTaskBpmnError { node, .. }
            | Input::UserTaskEscalated { node, .. }
            | Input::UserTaskClaimed { node, .. }
            | Input::UserTaskUnclaimed { node, .. }
            | Input::PullLocked { node, .. }
            | Input::PullCompleted { node, .. }
            | Input::PullFailed { node, .. }
            | Input::PullBpmnError { node, .. }
            | Input::PullLockExtended { node, .. }
            | Input::PullUnlocked { node, .. }
            | Input::PullRetriesSet { node, .. }
            | Input::ChildEnded { node, .. } => Some(node),
            Input::TimerFired { name, .. } => name.node(),
            Input::RetryNow { node } => node.as_deref(),
            Input::ResolveIncident { node } => Some(node),
            Input::Start { .. }
            | Input::StartCalled { .. }
            | Input::MessageReceived { .. }
            | Input::SignalReceived { .. }
            | Input::Cancel
            | Input::Resume { .. }
            | Input::Migrate { .. }
            | Input::ChannelAnswered { .. }
            | Input::ChannelBpmnError { .. }
            | Input::ChannelPoisoned { .. }
            | Input::OfferUserTasks
            | Input::Redrive => None,
        }
    }

    /// The attempt the input reports on, when it reports on one.
    pub fn attempt(&self) -> Option<Attempt> {
        match self {
            Input::TaskCompleted { attempt, .. }
            | Input::TaskFailed { attempt, .. }
            | Input::TaskBpmnError { attempt, .. }
            | Input::PullLocked { attempt, .. }
            | Input::PullCompleted { attempt, .. }
            | Input::PullFailed { attempt, .. }
            | Input::PullBpmnError { attempt, .. }
            | Input::PullLockExtended { attempt, .. }
            | Input::PullUnlocked { attempt, .. }
            | Input::PullRetriesSet { attempt, .. }
            | Input::ChannelAnswered { attempt, .. }
            | Input::ChannelBpmnError { attempt, .. }
            | Input::ChannelPoisoned { attempt, .. } => Some(*attempt),
            _ => None,
        }
    }
}

/// How one attempt of a task ended (the history row of O1a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Ok,
    Failed,
    Panicked,
    BpmnError,
    /// The route-less `q:timeout` fired while the attempt was in flight.
    TimedOut,
    /// An interrupting boundary or an enclosing scope ended the task mid-attempt.
    Interrupted,
    /// A channel call's request could not be delivered (C4).
    Poisoned,
}

impl AttemptOutcome {
    pub const ALL: [AttemptOutcome; 7] = [
        AttemptOutcome::Ok,
        AttemptOutcome::Failed,
        AttemptOutcome::Panicked,
        AttemptOutcome::BpmnError,
        AttemptOutcome::TimedOut,
        AttemptOutcome::Interrupted,
        AttemptOutcome::Poisoned,
    ];

    /// The stored text of the outcome (attempt-history rows; never rename).
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Ok => "ok",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Panicked => "panicked",
            AttemptOutcome::BpmnError => "bpmn_error",
            AttemptOutcome::TimedOut => "timeout",
            AttemptOutcome::Interrupted => "interrupted",
            AttemptOutcome::Poisoned => "poisoned",
        }
    }

    /// The outcome whose [`AttemptOutcome::as_str`] is `s`.
    pub fn parse(s: &str) -> Option<AttemptOutcome> {
        AttemptOutcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// Something the shell must do. Never a call: the shell carries effects out in order,
/// in the same transaction as the snapshot (SPEC R4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Effect {
    /// Run the handler registered as `handler` for `node`; feed its outcome back as
    /// `TaskCompleted`/`TaskFailed`/`TaskBpmnError` with this `attempt`.
    RunTask {
        node: String,
        handler: String,
        attempt: Attempt,
        inputs: Variables,
    },
    /// Upsert the timer row `name`; when due, feed `TimerFired { name, incarnation }`.
    ArmTimer {
        name: TimerName,
        due_at_ms: i64,
        incarnation: u32,
    },
    /// Delete the timer row `name` if it still has this incarnation.
    ResolveTimer { name: TimerName, incarnation: u32 },
    /// Record how an attempt ended (history, O1a). The shell adds the timing.
    AttemptFinished {
        node: String,
        attempt: Attempt,
        outcome: AttemptOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// The external worker that held the attempt (pull tasks only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
    },
    /// Upsert the pull-task row of `node`: attempt `attempt` is offered on `topic` to
    /// any worker (`lock: None`) or locked by a worker until an instant (P1).
    OfferPullTask {
        node: String,
        topic: String,
        attempt: Attempt,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock: Option<PullLock>,
    },
    /// Delete the pull-task row of `node`: no worker may fetch it any more.
    WithdrawPullTask { node: String },
    /// Write a request of the channel call at `node` into the outbox (C1), in this
    /// step's transaction: attempt `attempt`, sent to `channel` with the idempotency key
    /// `key` (fresh per attempt) and the call id `call_id` (stable across the attempts
    /// of the call, C9). The body is the task's inputs.
    SendRequest {
        node: String,
        channel: String,
        attempt: Attempt,
        key: String,
        call_id: String,
        body: Variables,
    },
    /// Delete the outbox rows of `node`'s dead attempt, pending and poisoned (C6): the
    /// one exception to "an undelivered row is never deleted". Delivered rows stay.
    WithdrawRequests { node: String },
    /// Broadcast the signal `name`, thrown at `node`, durably: the shell writes it to
    /// the outbox under `key` (`<instance>/<n>`, `n` drawn from the instance's
    /// sequence, so each throw has its own) in this step's transaction, and the outbox
    /// delivers it to every wait for the signal and every signal start of a live
    /// deployment.
    ThrowSignal {
        node: String,
        name: String,
        key: String,
    },
    /// Publish the message `name`, thrown at `node` (an intermediate throw, an end
    /// event, a send task), durably: the shell writes it to the outbox under `key`
    /// (`<instance>/<n>`, as a signal throw's) in this step's transaction, and the outbox
    /// publishes it inside the engine — to the oldest wait subscribed under
    /// `correlation_key` (the message's key, evaluated over the sender's variables at the
    /// throw), else to a message start event.
    PublishMessage {
        node: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        correlation_key: Option<String>,
        key: String,
        #[serde(default, skip_serializing_if = "Variables::is_empty")]
        variables: Variables,
    },
    /// Upsert the user-task row of `node` (the task list): a token waits there, offered
    /// with its assignment evaluated — entered, entered again, resumed or migrated.
    OfferUserTask {
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assignee: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        candidate_groups: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        candidate_users: Vec<String>,
    },
    /// Set the assignee of the user-task row of `node`: a claim, or `None` (an unclaim).
    AssignUserTask {
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assignee: Option<String>,
    },
    /// Delete the user-task row of `node`: the wait there ended (completed, interrupted,
    /// terminated, cancelled), or the instance is FAILED.
    WithdrawUserTask { node: String },
    OpenIncident {
        node: String,
        code: String,
        message: String,
    },
    /// Resolve the open incidents on `node`. Emitted by repair inputs of later issues.
    ResolveIncident { node: String },
    /// Move the open incidents on `from` to `to`: a migration renamed the node.
    MoveIncidents { from: String, to: String },
    /// Open the message subscription of `node`: a message `message` published with
    /// `key` reaches this instance (SPEC O1, correlation). Upserted by `node`.
    Subscribe {
        node: String,
        message: String,
        key: String,
    },
    /// Close the message subscription of `node` (the wait ended: the message came, the
    /// task was interrupted, the instance ended or failed).
    Unsubscribe { node: String },
    /// Start a child instance for attempt `attempt` of the call activity `node`: the
    /// process `process` (its newest live deployment, or its `version`-th), with
    /// `variables`, linked back to this instance's call `call`. The shell writes it to
    /// the outbox under `key` (`<instance>/<call>`) in this step's transaction; the child's
    /// id is derived from the key, so a redelivery starts nothing twice. When no such
    /// deployment exists the shell answers [`Input::ChildEnded`] with
    /// `CALLED_PROCESS_NOT_FOUND` instead.
    StartChild {
        node: String,
        call: u32,
        attempt: Attempt,
        key: String,
        process: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<u32>,
        variables: Variables,
    },
    /// Cancel the child instance started under `key` (a call activity's wait ended
    /// without it: interrupted, terminated, cancelled, or this instance FAILED).
    CancelChild { node: String, key: String },
    /// This instance, the child of a call activity, ended: report `outcome` to the
    /// waiting call. The shell writes it to the outbox under `key` (`<instance>/<n>`, a
    /// number of this instance's sequence: an instance resumed and ended again reports
    /// again) in this step's transaction.
    NotifyParent {
        parent: ParentLink,
        key: String,
        outcome: ChildOutcome,
    },
    /// The instance reached its end.
    Completed,
    /// The instance is FAILED with this structured code (E6).
    Failed {
        code: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// The instance was cancelled.
    Cancelled,
    /// The input was stale residue and changed nothing; `reason` says why.
    Stale { reason: String },
}

/// Where a called instance reports its end: the parent instance, its call activity and
/// the call (the number that names the attempt's child).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentLink {
    pub instance: String,
    pub node: String,
    pub call: u32,
}

/// How a called instance ended, as its parent's call activity takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum ChildOutcome {
    /// Completed: its variables go back through the call activity's output mappings.
    Completed {
        #[serde(default)]
        variables: Variables,
    },
    /// A BPMN error escaped it: thrown at the call activity, where a boundary may catch
    /// it (the child itself ended cancelled, handing its error over).
    BpmnError {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        #[serde(default)]
        message: String,
    },
    /// It ended FAILED (`code`) or was cancelled (`code` `CANCELLED`): a failed attempt
    /// of the call activity (`CALLED_INSTANCE_FAILED`).
    Failed {
        code: String,
        #[serde(default)]
        message: String,
    },
    /// It could not be started (no deployment of the called process to start, `message`
    /// says why): a failed attempt of the call activity (`CALLED_PROCESS_NOT_FOUND`).
    NotStarted {
        #[serde(default)]
        message: String,
    },
    /// An escalation nothing inside it caught (`code`: its escalation code), while it
    /// goes on running: raised at the call activity, where an escalation boundary may
    /// catch it (BPMN §10.5.5). Not an end: the call still waits.
    Escalated {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A worker's lock on a pull task's attempt, as an effect carries it to the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullLock {
    pub worker: String,
    pub until_ms: i64,
}

/// The result of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub snapshot: Snapshot,
    pub effects: Vec<Effect>,
}

/// Applies `input` to the instance `instance_id` of `def` whose state is `snapshot`, at
/// the instant `now_ms`. Pure: see the module documentation.
pub fn step(
    def: &Definition,
    instance_id: &str,
    snapshot: Snapshot,
    input: Input,
    now_ms: i64,
) -> Result<Step, Error> {
    step_recording(def, instance_id, snapshot, input, now_ms, None)
}

/// [`step`], also returning the path the step took: the flows taken, each gateway's
/// decision, the events thrown and caught, the end events reached ([`PathEvent`], in the
/// order they happened; empty for a stale input). The snapshot and the effects are those
/// [`step`] returns, byte for byte: the path is derived, never persisted. What `qflow
/// simulate` prints; the runtime calls [`step`], which records nothing.
pub fn step_traced(
    def: &Definition,
    instance_id: &str,
    snapshot: Snapshot,
    input: Input,
    now_ms: i64,
) -> Result<(Step, Vec<PathEvent>), Error> {
    let mut path = Vec::new();
    let step = step_recording(def, instance_id, snapshot, input, now_ms, Some(&mut path))?;
    Ok((step, path))
}

fn step_recording(
    def: &Definition,
    instance_id: &str,
    snapshot: Snapshot,
    input: Input,
    now_ms: i64,
    path: Option<&mut Vec<PathEvent>>,
) -> Result<Step, Error> {
    match (&input, snapshot.status()) {
        (Input::Start { .. } | Input::StartCalled { .. }, Status::New) => {}
        (Input::Start { .. } | Input::StartCalled { .. }, _) => return Err(Error::AlreadyStarted),
        (_, Status::New) => return Err(Error::NotStarted),
        // The inputs a terminal instance takes: `staleness` checks their preconditions
        // (FAILED) and says why otherwise.
        (Input::Resume { .. }, _)
        | (Input::Migrate { .. }, _)
        | (Input::ResolveIncident { .. }, _)
        | (Input::PullRetriesSet { .. }, Status::Failed)
        | (Input::Cancel, Status::Failed) => {}
        (_, s) if s.is_terminal() => {
            let reason = format!("instance is {}", s.as_str());
            return Ok(stale(snapshot, reason));
        }
        _ => {}
    }
    // Values from outside are bounded where they enter (limits): over a bound, the
    // input is refused and nothing changes.
    if let Some(variables) = input.bounded_variables() {
        limits::check_variables(variables).map_err(Error::VariablesRefused)?;
    }
    if let Some(reason) = flow::staleness(def, &snapshot, &input, now_ms) {
        return Ok(stale(snapshot, reason));
    }
    let offered = user_tasks::offered_user_tasks(def, &snapshot);
    let mut run = run::Run::new(def, instance_id, snapshot, now_ms, path.is_some(), offered);
    run.apply(input)?;
    if let Some(path) = path {
        *path = run.take_path();
    }
    Ok(run.finish())
}

fn stale(snapshot: Snapshot, reason: String) -> Step {
    Step {
        snapshot,
        effects: vec![Effect::Stale { reason }],
    }
}
