//! The virtual-clock driver (SPEC S1): the production [`step`] run against scripted
//! handler outcomes, scripted external events and an in-memory timer table, with time
//! jumping from one event to the next instead of passing.
//!
//! Every step goes through the same persistence round trip a durable shell performs:
//! the snapshot is encoded to bytes after each step and decoded from those bytes before
//! the next, and the trace records those exact bytes. The driver never reads the clock,
//! never sleeps, and orders simultaneous events by a fixed rule (see [`run`]), so a
//! scenario always produces the same trace. Each step is taken with
//! [`crate::step_traced`], so the trace also says the path it took (flows, decisions,
//! events, ends); the snapshot and effects are those [`crate::step`] gives.
//!
//! A scenario may instead play recorded inputs ([`Scenario::inputs`], SPEC G3: what `qflow
//! replay --export-scenario` writes from an instance's input journal): then the driver
//! delivers exactly those inputs at their instants and carries out none of the effects,
//! since in production every result, timer firing and delivery came back as an input of
//! its own, recorded in the list.
//!
//! The scenario types are the file format of `qflow simulate`, read by the strict
//! deserializers in `sim/de.rs` (objects only, no duplicate keys, no field a kind does not
//! take, no variables the step would refuse as over the bounds of [`crate::limits`],
//! errors naming the innermost field); keep them backward compatible.

use std::collections::BTreeMap;

use qflow_loader::model::{Definition, NodeIdx, NodeKind, TaskKind, Variables};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::delivery::{AfterFailure, DeliveryCurve};
use crate::error::Error;
use crate::handler::{call_input, run_handler, CallEnded, TaskContext, TaskOutcome};
use crate::snapshot::{Snapshot, Status};
use crate::{step_traced, Attempt, Budget, Effect, Input, PathEvent, TimerName};

mod de;

/// Most steps a scenario may take unless it says otherwise.
pub const STEPS_DEFAULT_MAX: u32 = 10_000;
/// A scenario may never ask for more steps than this.
pub const STEPS_LIMIT: u32 = 1_000_000;
/// The horizon when a scenario gives none: one day of virtual time after the start.
pub const HORIZON_DEFAULT_MS: i64 = 86_400_000;
/// Most failed delivery tries one scripted answer may ask for (`delivery_fails`): each is
/// a line of the trace, and the curve's arithmetic is walked once per try.
pub const DELIVERY_FAILS_MAX: u32 = 1_000;

/// A scripted run of one instance.
///
/// ```json
/// {
///   "instance": "order-42",
///   "variables": {"amount": 10},
///   "tasks": {
///     "pay": [
///       {"outcome": "fail", "code": "HANDLER_FAILED"},
///       {"outcome": "ok", "outputs": {"receipt": "r-1"}, "after_ms": 250}
///     ]
///   },
///   "events": [{"event": "complete_user_task", "at_ms": 5000, "node": "approve"}],
///   "horizon_ms": 3600000
/// }
/// ```
///
/// Or a recorded one: with [`Scenario::inputs`], the run delivers those inputs — the
/// journal of a production instance — and nothing else (`qflow replay
/// --export-scenario` writes such a file):
///
/// ```json
/// {
///   "instance": "order-42",
///   "inputs": [
///     {"at_ms": 0, "input": {"type": "start", "variables": {"amount": 10}}},
///     {"at_ms": 250, "input": {"type": "task_completed", "node": "pay", "attempt": 1, "outputs": {}}}
///   ]
/// }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The instance id; it feeds the jitter of retry backoffs. Default `sim-1`.
    pub instance: String,
    /// The virtual instant of `Start`, in ms. Default 0.
    pub start_at_ms: i64,
    /// Start variables. Default none.
    pub variables: Variables,
    /// The start event with a trigger (message, signal, timer) the instance starts at, as
    /// when its trigger fires; `None` (the default): the none start events.
    pub start_event: Option<String>,
    /// Outcomes of registered tasks, by task node id, one entry per attempt (the first
    /// entry is attempt 1). The last entry repeats for later attempts; a task without
    /// an entry completes at once with no outputs.
    pub tasks: BTreeMap<String, Vec<Scripted>>,
    /// What the counterpart of each channel-call task does, by node id, one entry per
    /// attempt (the last repeats); a call without an entry is answered at once with no
    /// variables. A request's first delivery try is the instant it is emitted; an
    /// answer's `delivery_fails` makes that many tries fail first, along the channel's
    /// curve in `delivery_curves`.
    pub channels: BTreeMap<String, Vec<ScriptedAnswer>>,
    /// The outbox's delivery curve of each channel, by the name `q:channel` gives it — the
    /// `[channels.<name>.delivery]` table of `qflow.toml`, with its defaults and checks. A
    /// channel without one has the default curve (try for ever, from 500 ms doubling to a
    /// minute).
    pub delivery_curves: BTreeMap<String, DeliveryCurve>,
    /// External events at fixed virtual instants, in any order.
    pub events: Vec<ScriptedEvent>,
    /// No event after this instant is processed. Default `start_at_ms` + one day (none
    /// for recorded `inputs`).
    pub horizon_ms: Option<i64>,
    /// The run stops after this many steps. Default [`STEPS_DEFAULT_MAX`] ([`STEPS_LIMIT`]
    /// for recorded `inputs`), at most [`STEPS_LIMIT`].
    pub max_steps: Option<u32>,
    /// Recorded inputs (SPEC G3): when `Some`, the run delivers exactly these, in order,
    /// each at its instant, and nothing else — no scripted outcome, no timer firing, no
    /// channel delivery, no broadcast of a signal the instance throws: in production each
    /// of those arrived as an input of its own, and each is in the list. The first is the
    /// start (`start` or `start_called`, carrying the variables and the start event), the
    /// instants never go backwards, and the scenario's `tasks`, `channels`,
    /// `delivery_curves`, `events`, `variables`, `start_event` and `start_at_ms` are left
    /// at their defaults ([`validate`] refuses the rest). `None`: a scripted run.
    pub inputs: Option<Vec<RecordedInput>>,
}

/// One recorded step of an instance: the input it took and the instant (`now`) it was
/// taken at, as the input journal keeps them.
///
/// ```json
/// {"at_ms": 1280, "input": {"type": "timer_fired", "name": "r:pay", "incarnation": 2}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedInput {
    /// The instant the step was taken at, in ms since the Unix epoch; never before the
    /// previous input's.
    pub at_ms: i64,
    /// The input, as [`Input`] serializes (`{"type": "task_completed", ...}`). A
    /// `migrate` input is delivered as recorded: its `timers` and `user_tasks` are those
    /// the store gave the step.
    pub input: Input,
    /// For a `migrate` input, and only for one: the name of the target definition the
    /// instance moved onto, one of the run's [`Targets`] (`qflow simulate --target
    /// NAME=FILE`, a golden case's `target-NAME.bpmn`). From that step on the run goes on
    /// with it, unless the step refused the migration (a `stale` effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl RecordedInput {
    /// `input` taken at `at_ms` (no migration target).
    pub fn new(at_ms: i64, input: Input) -> RecordedInput {
        RecordedInput {
            at_ms,
            input,
            target: None,
        }
    }
}

/// The fields a scenario of recorded inputs leaves out: what those inputs already say.
pub const RECORDED_EXCLUDES: &[&str] = &[
    "tasks",
    "channels",
    "delivery_curves",
    "events",
    "variables",
    "start_event",
    "start_at_ms",
];

impl Default for Scenario {
    /// The scenario of an empty file: instance `sim-1`, started at 0 with no variables,
    /// nothing scripted.
    fn default() -> Scenario {
        Scenario {
            instance: default_instance(),
            start_at_ms: 0,
            variables: Variables::new(),
            start_event: None,
            tasks: BTreeMap::new(),
            channels: BTreeMap::new(),
            delivery_curves: BTreeMap::new(),
            events: Vec::new(),
            horizon_ms: None,
            max_steps: None,
            inputs: None,
        }
    }
}

impl Scenario {
    /// The scenario that plays `inputs` (the journal of instance `instance`) and nothing
    /// else, with no horizon and no step budget but the list's.
    pub fn recorded(instance: impl Into<String>, inputs: Vec<RecordedInput>) -> Scenario {
        Scenario {
            instance: instance.into(),
            inputs: Some(inputs),
            ..Scenario::default()
        }
    }

    /// The fields of [`RECORDED_EXCLUDES`] this scenario gives a value other than the
    /// default, in that order.
    fn scripted_fields(&self) -> Vec<&'static str> {
        let given = [
            !self.tasks.is_empty(),
            !self.channels.is_empty(),
            !self.delivery_curves.is_empty(),
            !self.events.is_empty(),
            !self.variables.is_empty(),
            self.start_event.is_some(),
            self.start_at_ms != 0,
        ];
        RECORDED_EXCLUDES
            .iter()
            .zip(given)
            .filter_map(|(f, given)| given.then_some(*f))
            .collect()
    }
}

/// The serialized form is the file format, and reads back: a scripted scenario writes
/// every field as it always did; one of recorded inputs writes `instance`, `inputs`,
/// `horizon_ms` and `max_steps`, and of the fields it leaves out only those given a value
/// other than the default (which the reader then refuses, as [`validate`] does).
impl Serialize for Scenario {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let recorded = self.inputs.is_some();
        let scripted = self.scripted_fields();
        let write = |field: &str| !recorded || scripted.contains(&field);
        let written = [
            write("start_at_ms"),
            write("variables"),
            self.start_event.is_some(),
            write("tasks"),
            write("channels"),
            !self.delivery_curves.is_empty(),
            write("events"),
            recorded,
        ];
        // `instance`, `horizon_ms` and `max_steps` are always written.
        let len = 3 + written.iter().filter(|w| **w).count();
        let mut out = s.serialize_struct("Scenario", len)?;
        out.serialize_field("instance", &self.instance)?;
        if write("start_at_ms") {
            out.serialize_field("start_at_ms", &self.start_at_ms)?;
        }
        if write("variables") {
            out.serialize_field("variables", &self.variables)?;
        }
        if let Some(start) = &self.start_event {
            out.serialize_field("start_event", start)?;
        }
        if write("tasks") {
            out.serialize_field("tasks", &self.tasks)?;
        }
        if write("channels") {
            out.serialize_field("channels", &self.channels)?;
        }
        if !self.delivery_curves.is_empty() {
            out.serialize_field("delivery_curves", &self.delivery_curves)?;
        }
        if write("events") {
            out.serialize_field("events", &self.events)?;
        }
        if let Some(inputs) = &self.inputs {
            out.serialize_field("inputs", inputs)?;
        }
        out.serialize_field("horizon_ms", &self.horizon_ms)?;
        out.serialize_field("max_steps", &self.max_steps)?;
        out.end()
    }
}

fn default_instance() -> String {
    "sim-1".to_owned()
}

/// What a handler does on one attempt. `after_ms` is how long it takes (virtual time);
/// default 0.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Scripted {
    Ok {
        outputs: Variables,
        after_ms: u64,
    },
    Fail {
        code: String,
        message: String,
        after_ms: u64,
    },
    /// The handler panics; the shell reports `HANDLER_PANICKED`.
    Panic {
        message: String,
        after_ms: u64,
    },
    BpmnError {
        code: String,
        message: String,
        after_ms: u64,
    },
    /// The shell's handler time limit runs out after `after_ms`: the attempt fails with
    /// kind `timed_out` and code `HANDLER_TIMEOUT`, as the runtime reports an overrun.
    TimeLimit {
        after_ms: u64,
    },
    /// The handler never answers (so that a timeout can fire).
    Hang,
}

/// What a channel call's counterpart (and the outbox) does with one attempt's request.
///
/// `delivery_fails` (default 0) is how many delivery tries of the request fail before one
/// reaches the counterpart: the tries follow the channel's [`DeliveryCurve`], the first
/// at the request's emission, and `after_ms` counts from the try that delivers it. When
/// the failures reach the curve's ceiling the row is poisoned at the last failed try
/// (with a wake) and no answer follows. Without failures, `after_ms` counts from the
/// emission, as it always did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum ScriptedAnswer {
    /// The counterpart answers with these variables (a late answer, after the attempt
    /// timed out, is judged `superseded` or `already_completed`).
    Ok {
        outputs: Variables,
        after_ms: u64,
        #[serde(skip_serializing_if = "is_zero")]
        delivery_fails: u32,
    },
    /// The counterpart answers with a BPMN error.
    BpmnError {
        code: String,
        message: String,
        after_ms: u64,
        #[serde(skip_serializing_if = "is_zero")]
        delivery_fails: u32,
    },
    /// The outbox gives up delivering after `after_ms`: the row is poisoned. With `wake`
    /// (the default) the engine is told at once; without, the wake is lost and only the
    /// call's timeout finds out (C3).
    Poison {
        message: String,
        after_ms: u64,
        wake: bool,
    },
    /// The counterpart never answers (once the request reaches it).
    Never {
        #[serde(skip_serializing_if = "is_zero")]
        delivery_fails: u32,
    },
}

impl ScriptedAnswer {
    /// The delivery tries that fail before the request reaches the counterpart.
    pub fn delivery_fails(&self) -> u32 {
        match self {
            ScriptedAnswer::Ok { delivery_fails, .. }
            | ScriptedAnswer::BpmnError { delivery_fails, .. }
            | ScriptedAnswer::Never { delivery_fails } => *delivery_fails,
            ScriptedAnswer::Poison { .. } => 0,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Something from outside the engine at a fixed virtual instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ScriptedEvent {
    CompleteUserTask {
        at_ms: i64,
        node: String,
        variables: Variables,
        /// The person completing it: refused while somebody else holds the task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assignee: Option<String>,
    },
    /// `assignee` claims a waiting user task (`force`: even from somebody else).
    ClaimUserTask {
        at_ms: i64,
        node: String,
        assignee: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    /// A waiting user task is given back (by `assignee`, or by whoever holds it).
    UnclaimUserTask {
        at_ms: i64,
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assignee: Option<String>,
    },
    Message {
        at_ms: i64,
        name: String,
        /// Only the subscription open under this key takes the message; `None`: the first
        /// token waiting for `name`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        correlation_key: Option<String>,
        variables: Variables,
    },
    /// The task list ends the waiting user task `node` with a BPMN error.
    UserTaskBpmnError {
        at_ms: i64,
        node: String,
        code: String,
        message: String,
        variables: Variables,
    },
    /// The task list raises an escalation from the waiting user task `node`.
    EscalateUserTask {
        at_ms: i64,
        node: String,
        code: String,
        variables: Variables,
    },
    /// A signal broadcast from outside (the API): every wait of the instance for `name`
    /// catches it.
    Signal {
        at_ms: i64,
        name: String,
        variables: Variables,
    },
    Cancel {
        at_ms: i64,
    },
    /// Delivers `TimerFired { name, incarnation }` whether or not such a row is armed:
    /// how a scenario replays the late delivery of a stale timer row (E8).
    FireTimer {
        at_ms: i64,
        name: TimerName,
        incarnation: u32,
    },
    /// An operator resumes the instance (O3): the one event a FAILED instance takes.
    Resume {
        at_ms: i64,
        budget: Budget,
    },
    /// An operator runs a parked task's next attempt now (O4a).
    RetryNow {
        at_ms: i64,
        node: Option<String>,
    },
    /// An operator migrates the instance onto the definition the run was given as
    /// `target` ([`steps_with`]), renaming nodes by `mapping` (O2). The simulator fills
    /// in the due instants of the live timers from its timer table, as a store would;
    /// from then on the run goes on with the target definition. A migration the core
    /// refuses (stale) leaves the run on the definition it had.
    Migrate {
        at_ms: i64,
        target: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        mapping: BTreeMap<String, String>,
    },
    /// An external worker's action on a pull task (P1): `input` is one of the `pull_*`
    /// inputs (`pull_locked`, `pull_completed`, `pull_failed`, ...), as JSON.
    Pull {
        at_ms: i64,
        input: Input,
    },
    /// A relay or a poison wake for a channel call (`channel_answered`,
    /// `channel_bpmn_error`, `channel_poisoned`), as JSON: how a scenario replays a late
    /// relay or a stale wake.
    Channel {
        at_ms: i64,
        input: Input,
    },
    /// A called instance's end reported to a call activity (`child_ended`), as JSON: how
    /// a scenario replays a late or repeated report, after the call it names is over.
    Child {
        at_ms: i64,
        input: Input,
    },
}

impl ScriptedEvent {
    fn at_ms(&self) -> i64 {
        match self {
            ScriptedEvent::CompleteUserTask { at_ms, .. }
            | ScriptedEvent::ClaimUserTask { at_ms, .. }
            | ScriptedEvent::UnclaimUserTask { at_ms, .. }
            | ScriptedEvent::Message { at_ms, .. }
            | ScriptedEvent::Signal { at_ms, .. }
            | ScriptedEvent::UserTaskBpmnError { at_ms, .. }
            | ScriptedEvent::EscalateUserTask { at_ms, .. }
            | ScriptedEvent::Cancel { at_ms }
            | ScriptedEvent::FireTimer { at_ms, .. }
            | ScriptedEvent::Resume { at_ms, .. }
            | ScriptedEvent::RetryNow { at_ms, .. }
            | ScriptedEvent::Migrate { at_ms, .. }
            | ScriptedEvent::Pull { at_ms, .. }
            | ScriptedEvent::Channel { at_ms, .. }
            | ScriptedEvent::Child { at_ms, .. } => *at_ms,
        }
    }

    fn input(&self) -> Input {
        match self {
            ScriptedEvent::CompleteUserTask {
                node,
                variables,
                assignee,
                ..
            } => Input::UserTaskCompleted {
                node: node.clone(),
                variables: variables.clone(),
                assignee: assignee.clone(),
            },
            ScriptedEvent::ClaimUserTask {
                node,
                assignee,
                force,
                ..
            } => Input::UserTaskClaimed {
                node: node.clone(),
                assignee: assignee.clone(),
                force: *force,
            },
            ScriptedEvent::UnclaimUserTask { node, assignee, .. } => Input::UserTaskUnclaimed {
                node: node.clone(),
                assignee: assignee.clone(),
            },
            ScriptedEvent::Message {
                name,
                correlation_key,
                variables,
                ..
            } => Input::MessageReceived {
                name: name.clone(),
                correlation_key: correlation_key.clone(),
                node: None,
                variables: variables.clone(),
            },
            ScriptedEvent::UserTaskBpmnError {
                node,
                code,
                message,
                variables,
                ..
            } => Input::UserTaskBpmnError {
                node: node.clone(),
                code: code.clone(),
                message: message.clone(),
                variables: variables.clone(),
            },
            ScriptedEvent::EscalateUserTask {
                node,
                code,
                variables,
                ..
            } => Input::UserTaskEscalated {
                node: node.clone(),
                code: code.clone(),
                variables: variables.clone(),
            },
            ScriptedEvent::Signal {
                name, variables, ..
            } => Input::SignalReceived {
                name: name.clone(),
                node: None,
                variables: variables.clone(),
            },
            ScriptedEvent::Cancel { .. } => Input::Cancel,
            ScriptedEvent::FireTimer {
                name, incarnation, ..
            } => Input::TimerFired {
                name: name.clone(),
                incarnation: *incarnation,
            },
            ScriptedEvent::Resume { budget, .. } => Input::Resume { budget: *budget },
            ScriptedEvent::RetryNow { node, .. } => Input::RetryNow { node: node.clone() },
            // The timers' due instants and the task list's rows are filled in when the
            // event is delivered.
            ScriptedEvent::Migrate { mapping, .. } => Input::Migrate {
                mapping: mapping.clone(),
                timers: BTreeMap::new(),
                user_tasks: Vec::new(),
            },
            ScriptedEvent::Pull { input, .. }
            | ScriptedEvent::Channel { input, .. }
            | ScriptedEvent::Child { input, .. } => input.clone(),
        }
    }
}

/// One step of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceStep {
    /// 1-based position in the run.
    pub seq: u32,
    pub at_ms: i64,
    pub input: Input,
    /// The node the input concerns, when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<Attempt>,
    pub effects: Vec<Effect>,
    /// The path the step took: flows, gateway decisions, events thrown and caught, end
    /// events reached ([`crate::step_traced`]). Derived, never persisted; empty for a
    /// stale input.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<PathEvent>,
    /// The failed delivery tries the outbox made since the previous step, at instants up
    /// to this step's, in the order they were made (a try due at the same instant as the
    /// step is made before it). Empty for every request delivered at its first try.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<DeliveryTry>,
    /// The persisted snapshot after the step, as lowercase hex.
    #[serde(serialize_with = "as_hex")]
    pub snapshot: Vec<u8>,
}

/// One failed delivery try of a channel request (a scripted `delivery_fails`): what the
/// dispatcher records as a failed try in production.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryTry {
    /// The virtual instant of the try.
    pub at_ms: i64,
    /// The channel-call node whose request it is.
    pub node: String,
    /// The request's idempotency key (the attempt's).
    pub key: String,
    /// 1-based: the how-manieth try of this request.
    #[serde(rename = "try")]
    pub try_number: u32,
    /// When the next try is due, along the channel's curve; absent when this try reached
    /// the ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_due_ms: Option<i64>,
    /// This try reached the curve's ceiling: the row is poisoned now.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub poisoned: bool,
}

fn as_hex<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(bytes))
}

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The instance completed, failed or was cancelled.
    Finished,
    /// Nothing more was scheduled: the instance waits for something the scenario does
    /// not provide (with recorded `inputs`: the list is played out and the instance is
    /// still running).
    Idle,
    /// The next event lies beyond the horizon.
    Horizon,
    /// The step budget ran out.
    MaxSteps,
}

/// The outcome of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_node: Option<String>,
    /// Attempts started per registered task and channel-call node (counted from
    /// `RunTask` and `SendRequest` effects).
    pub attempts: BTreeMap<String, u32>,
    pub snapshot_bytes: usize,
    /// Lowercase hex SHA-256 of the final snapshot bytes.
    pub snapshot_sha256: String,
    pub steps: u32,
    /// The virtual instant of the last step.
    pub ended_at_ms: i64,
    pub stop: Stop,
}

/// The whole run: every step, then the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    pub steps: Vec<TraceStep>,
    pub summary: Summary,
}

impl Trace {
    /// The decoded final snapshot.
    pub fn final_snapshot(&self) -> Option<Snapshot> {
        self.steps
            .last()
            .and_then(|s| Snapshot::decode(&s.snapshot).ok())
    }
}

/// The definitions a scenario may migrate onto, by the name its `migrate` events give.
pub type Targets = BTreeMap<String, Definition>;

/// Checks that the scenario fits the definition; the message names the field.
pub fn validate(def: &Definition, scenario: &Scenario) -> Result<(), Error> {
    validate_with(def, scenario, &Targets::new())
}

/// [`validate`], for a run that may migrate onto `targets`: a scripted task may be a
/// registered task of the definition or of a target, and every `migrate` event names a
/// target that was given.
pub fn validate_with(
    def: &Definition,
    scenario: &Scenario,
    targets: &Targets,
) -> Result<(), Error> {
    let registered_in = |d: &Definition, node: &str| {
        let p = &d.process;
        scripted_node(p, node).is_some_and(|i| {
            matches!(&p.node(i).kind, NodeKind::Task(t) if matches!(t.kind, TaskKind::Registered { .. } | TaskKind::Call(_)))
        })
    };
    let call_in = |d: &Definition, node: &str| {
        let p = &d.process;
        scripted_node(p, node).is_some_and(
            |i| matches!(&p.node(i).kind, NodeKind::Task(t) if matches!(t.kind, TaskKind::Call(_))),
        )
    };
    for (node, scripted) in &scenario.tasks {
        let registered =
            registered_in(def, node) || targets.values().any(|t| registered_in(t, node));
        if !registered {
            return Err(Error::Scenario(format!(
                "tasks.{node}: process `{}` has no registered task (q:task) or call activity \
                 with this id",
                def.id
            )));
        }
        let call = call_in(def, node) || targets.values().any(|t| call_in(t, node));
        let handler_only = scripted
            .iter()
            .position(|s| matches!(s, Scripted::Panic { .. } | Scripted::TimeLimit { .. }));
        if let (true, Some(i)) = (call, handler_only) {
            return Err(Error::Scenario(format!(
                "tasks.{node}[{i}].outcome: `{node}` is a call activity, whose called \
                 instance runs no handler: script ok, fail, bpmn_error or hang"
            )));
        }
    }
    let channel_in = |d: &Definition, node: &str| {
        let p = &d.process;
        scripted_node(p, node).is_some_and(|i| {
            matches!(&p.node(i).kind, NodeKind::Task(t) if matches!(t.kind, TaskKind::Channel { .. }))
        })
    };
    for node in scenario.channels.keys() {
        if !(channel_in(def, node) || targets.values().any(|t| channel_in(t, node))) {
            return Err(Error::Scenario(format!(
                "channels.{node}: process `{}` has no channel-call task (q:channel) with this id",
                def.id
            )));
        }
    }
    if let Some((path, message)) = delivery_problems(def, scenario, targets).into_iter().next() {
        return Err(Error::Scenario(format!("{path}: {message}")));
    }
    for (i, e) in scenario.events.iter().enumerate() {
        if let ScriptedEvent::Channel { input, .. } = e {
            let channel = matches!(
                input,
                Input::ChannelAnswered { .. }
                    | Input::ChannelBpmnError { .. }
                    | Input::ChannelPoisoned { .. }
            );
            if !channel {
                return Err(Error::Scenario(format!(
                    "events[{i}].input: not a channel input (`channel_answered`, \
                     `channel_bpmn_error` or `channel_poisoned`)"
                )));
            }
        }
        if let ScriptedEvent::Child { input, .. } = e {
            if !matches!(input, Input::ChildEnded { .. }) {
                return Err(Error::Scenario(format!(
                    "events[{i}].input: not a called instance's end (`child_ended`)"
                )));
            }
        }
        if let ScriptedEvent::Migrate { target, .. } = e {
            if !targets.contains_key(target) {
                return Err(Error::Scenario(format!(
                    "events[{i}].target: no target definition `{target}` was given to migrate \
                     onto (qflow simulate --target {target}=FILE)"
                )));
            }
        }
        if let ScriptedEvent::Pull { input, .. } = e {
            // A pull task of the model, or of a target the run may migrate onto.
            let pull = input.node().is_some_and(|n| {
                crate::pull_task(def, n).is_some()
                    || targets.values().any(|t| crate::pull_task(t, n).is_some())
            });
            if !pull || input.attempt().is_none() {
                return Err(Error::Scenario(format!(
                    "events[{i}].input: not a pull input on a pull task of process `{}` or of a \
                     target",
                    def.id
                )));
            }
        }
        if let ScriptedEvent::CompleteUserTask { node, .. }
        | ScriptedEvent::ClaimUserTask { node, .. }
        | ScriptedEvent::UnclaimUserTask { node, .. } = e
        {
            // A wait of the model, or of a target the run may migrate onto; only a user
            // task is claimed.
            let claims = !matches!(e, ScriptedEvent::CompleteUserTask { .. });
            let user_in = |d: &Definition| {
                let p = &d.process;
                p.find(node).is_some_and(|i| {
                    matches!(&p.node(i).kind, NodeKind::Task(t)
                        if matches!(t.kind, TaskKind::User { .. })
                            || (!claims && matches!(t.kind, TaskKind::Receive { message: None })))
                })
            };
            let user = user_in(def) || targets.values().any(user_in);
            if !user {
                return Err(Error::Scenario(format!(
                    "events[{i}].node: process `{}` has no user task `{node}`",
                    def.id
                )));
            }
        }
    }
    if let Some((path, message)) = recorded_problems(def, scenario, targets).into_iter().next() {
        return Err(Error::Scenario(format!("{path}: {message}")));
    }
    match scenario.horizon_ms {
        // Recorded inputs start at the first input's instant (`recorded_problems`).
        Some(horizon) if horizon < scenario.start_at_ms && scenario.inputs.is_none() => {
            return Err(Error::Scenario(format!(
                "horizon_ms: {horizon} is before start_at_ms ({})",
                scenario.start_at_ms
            )));
        }
        _ => {}
    }
    if let Some(max) = scenario.max_steps {
        if max == 0 || max > STEPS_LIMIT {
            return Err(Error::Scenario(format!(
                "max_steps: {max} is outside 1..={STEPS_LIMIT}"
            )));
        }
    }
    Ok(())
}

/// The problems of a scenario's recorded `inputs`, as (JSON path, message), in the order
/// of the list: fields given beside them (`tasks`, `variables`, ... — what the inputs
/// already say), an empty or too long list, a first input that is not a start or a later
/// one that is (the step refuses a start of a started instance), a start event the
/// process does not have, an instant that is negative or before the previous input's, a
/// `migrate` input without a target given to the run, a target on another input, a
/// horizon before the first input. None for a scripted scenario.
/// `qflow_golden::scenario` reports them all; [`validate`] the first.
pub fn recorded_problems(
    def: &Definition,
    scenario: &Scenario,
    targets: &Targets,
) -> Vec<(String, String)> {
    let Some(inputs) = &scenario.inputs else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for field in scenario.scripted_fields() {
        problems.push(("inputs".to_owned(), combined_with(field)));
    }
    if inputs.is_empty() {
        problems.push((
            "inputs".to_owned(),
            "no input; the first input starts the instance (`start` or `start_called`)".to_owned(),
        ));
    }
    if inputs.len() > STEPS_LIMIT as usize {
        problems.push((
            "inputs".to_owned(),
            format!(
                "{} inputs; a run takes at most {STEPS_LIMIT} steps",
                inputs.len()
            ),
        ));
    }
    let mut previous: Option<i64> = None;
    for (i, recorded) in inputs.iter().enumerate() {
        let path = format!("inputs[{i}]");
        let starts = matches!(
            recorded.input,
            Input::Start { .. } | Input::StartCalled { .. }
        );
        match (i, starts) {
            (0, false) => problems.push((
                format!("{path}.input"),
                format!(
                    "a `{}` input; the first input starts the instance (`start` or \
                     `start_called`)",
                    recorded.input.kind()
                ),
            )),
            (0, true) => {}
            (_, true) => problems.push((
                format!("{path}.input"),
                "a second start; only the first input starts the instance (the engine \
                 refuses a start of a started instance)"
                    .to_owned(),
            )),
            (_, false) => {}
        }
        let none_start = matches!(
            recorded.input,
            Input::Start { start: None, .. } | Input::StartCalled { .. }
        );
        if none_start && i == 0 && def.process.start_events(None).next().is_none() {
            problems.push((
                format!("{path}.input"),
                format!(
                    "process `{}` has no none start event; a start without `start` begins \
                     there",
                    def.id
                ),
            ));
        }
        if let Input::Start {
            start: Some(start), ..
        } = &recorded.input
        {
            let p = &def.process;
            let triggered = p.find(start).is_some_and(|n| {
                matches!(p.node(n).kind, NodeKind::TriggeredStart(_)) && p.node(n).scope.is_none()
            });
            if !triggered {
                problems.push((
                    format!("{path}.input.start"),
                    format!(
                        "process `{}` has no start event `{start}` with a trigger (message, \
                         signal, timer)",
                        def.id
                    ),
                ));
            }
        }
        let at_ms = recorded.at_ms;
        if at_ms < 0 {
            problems.push((
                format!("{path}.at_ms"),
                format!("{at_ms} is negative; instants are milliseconds since the Unix epoch"),
            ));
        } else if let Some(before) = previous.filter(|before| at_ms < *before) {
            problems.push((
                format!("{path}.at_ms"),
                format!(
                    "{at_ms} is before the previous input's instant ({before}); recorded \
                     instants never go backwards"
                ),
            ));
        }
        previous = Some(previous.map_or(at_ms, |before| before.max(at_ms)));
        match (&recorded.input, &recorded.target) {
            (Input::Migrate { .. }, None) => problems.push((
                path,
                "a `migrate` input cannot be played without the definition it moved the \
                 instance onto: name it in the entry's `target` (`qflow simulate --target \
                 NAME=FILE`; a golden case keeps it in `target-NAME.bpmn`)"
                    .to_owned(),
            )),
            (Input::Migrate { .. }, Some(target)) if !targets.contains_key(target) => problems
                .push((
                    format!("{path}.target"),
                    format!(
                        "no target definition `{target}` was given to migrate onto (`qflow \
                         simulate --target {target}=FILE`; a golden case keeps it in \
                         `target-{target}.bpmn`)"
                    ),
                )),
            (Input::Migrate { .. }, Some(_)) | (_, None) => {}
            (input, Some(_)) => problems.push((
                format!("{path}.target"),
                format!(
                    "a `{}` input takes no target; only a `migrate` input does",
                    input.kind()
                ),
            )),
        }
    }
    if let (Some(horizon), Some(first)) = (scenario.horizon_ms, inputs.first()) {
        if horizon < first.at_ms {
            problems.push((
                "horizon_ms".to_owned(),
                format!(
                    "{horizon} is before the first input's instant ({})",
                    first.at_ms
                ),
            ));
        }
    }
    problems
}

/// The refusal of `field` given beside recorded inputs, at `inputs` (the reader's, when
/// the field comes first in the file, and [`validate`]'s).
fn combined_with(field: &str) -> String {
    format!(
        "recorded inputs cannot be combined with `{field}`: {}",
        beside_inputs(field)
    )
}

/// Why `field` cannot be given beside recorded inputs: what the inputs say instead.
fn beside_inputs(field: &str) -> &'static str {
    match field {
        "variables" => "the first input, the start, carries the instance's variables",
        "start_event" => "the first input, the start, names the start event (its `start`)",
        "start_at_ms" => "the first input's `at_ms` is the instant of the start",
        _ => {
            "they are played as recorded and nothing is scripted beside them (every handler \
             result, timer, delivery and event of the instance is an input of the list)"
        }
    }
}

/// The problems of a scenario's delivery scripting, as (JSON path, message), the
/// answers' first and then the curves', each by name: a `delivery_fails` over
/// [`DELIVERY_FAILS_MAX`], a curve for a channel no
/// channel-call task of the model (or of a target) names, a curve the configuration file
/// would refuse. `qflow_golden::scenario` reports them all; [`validate`] the first.
pub fn delivery_problems(
    def: &Definition,
    scenario: &Scenario,
    targets: &Targets,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (node, list) in &scenario.channels {
        for (i, answer) in list.iter().enumerate() {
            let n = answer.delivery_fails();
            if n > DELIVERY_FAILS_MAX {
                problems.push((
                    format!("channels.{node}[{i}].delivery_fails"),
                    format!("{n} is over the limit of {DELIVERY_FAILS_MAX} failed tries"),
                ));
            }
        }
    }
    let names_channel = |d: &Definition, name: &str| {
        d.process.nodes.iter().any(|n| {
            matches!(&n.kind, NodeKind::Task(t)
                if matches!(&t.kind, TaskKind::Channel { name: c } if c == name))
        })
    };
    for (name, curve) in &scenario.delivery_curves {
        let path = format!("delivery_curves.{name}");
        if !(names_channel(def, name) || targets.values().any(|t| names_channel(t, name))) {
            problems.push((
                path.clone(),
                format!(
                    "no channel-call task of process `{}` names the channel `{name}` \
                     (q:channel=\"{name}\")",
                    def.id
                ),
            ));
        }
        if let Err(message) = curve.validate() {
            // The message starts with the field it is about: `ceiling: must be …`.
            match message.split_once(": ") {
                Some((field, rest)) => problems.push((format!("{path}.{field}"), rest.into())),
                None => problems.push((path, message)),
            }
        }
    }
    problems
}

/// A scheduled delivery to the instance. Ordering: by instant, then task results (in
/// the order their `RunTask` was emitted), then scripted events (in file order), then
/// timers (by name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at_ms: i64,
    class: u8,
    seq: u64,
    name: String,
}

/// Runs `scenario` against `def` and returns the trace: every step, kept in memory. A run
/// of many steps with a large snapshot is better read one step at a time with [`steps`].
///
/// The loop: deliver `Start` at `start_at_ms`; then repeatedly take the earliest due
/// delivery — a scripted task result, a scripted event, or an armed timer — and step
/// with it at its instant. Simultaneous deliveries go task results first (in emission
/// order), then scripted events (file order), then timers (`(due, name)` order). The
/// run stops when the instance is terminal, nothing is scheduled, the next delivery is
/// beyond the horizon, or the step budget is spent. A scenario of recorded
/// [`Scenario::inputs`] is played instead: each input at its instant, in the list's
/// order, nothing else, until the list is played out.
pub fn run(def: &Definition, scenario: &Scenario) -> Result<Trace, Error> {
    let mut run = steps(def, scenario)?;
    let steps = run.by_ref().collect::<Result<Vec<_>, _>>()?;
    let summary = run.finish()?;
    Ok(Trace { steps, summary })
}

/// The same run as [`run`], one step at a time: each [`TraceStep`] is handed out as it is
/// taken and kept nowhere, so memory does not grow with the number of steps (`qflow
/// simulate` prints each line and drops it). After the last step, [`Steps::finish`] gives
/// the summary; called earlier, it takes the remaining steps first, without keeping them.
pub fn steps<'a>(def: &'a Definition, scenario: &'a Scenario) -> Result<Steps<'a>, Error> {
    static NO_TARGETS: Targets = Targets::new();
    steps_with(def, scenario, &NO_TARGETS)
}

/// [`run`], for a scenario that may migrate onto `targets` (its `migrate` events).
pub fn run_with(def: &Definition, scenario: &Scenario, targets: &Targets) -> Result<Trace, Error> {
    let mut run = steps_with(def, scenario, targets)?;
    let steps = run.by_ref().collect::<Result<Vec<_>, _>>()?;
    let summary = run.finish()?;
    Ok(Trace { steps, summary })
}

/// [`steps`], for a scenario that may migrate onto `targets` (its `migrate` events).
pub fn steps_with<'a>(
    def: &'a Definition,
    scenario: &'a Scenario,
    targets: &'a Targets,
) -> Result<Steps<'a>, Error> {
    validate_with(def, scenario, targets)?;
    // Recorded inputs are played to the end of the list unless the scenario says
    // otherwise: no default horizon, and the list is the step budget.
    let recorded = scenario.inputs.as_deref();
    let horizon_ms = match (scenario.horizon_ms, recorded) {
        (Some(horizon), _) => horizon,
        (None, Some(_)) => i64::MAX,
        (None, None) => scenario.start_at_ms.saturating_add(HORIZON_DEFAULT_MS),
    };
    let steps_default = match recorded {
        Some(_) => STEPS_LIMIT,
        None => STEPS_DEFAULT_MAX,
    };
    let mut sim = Sim {
        def,
        scenario,
        bytes: Snapshot::new().encode(),
        results: BTreeMap::new(),
        child_ends: Vec::new(),
        signal_waits: BTreeMap::new(),
        message_waits: BTreeMap::new(),
        timers: BTreeMap::new(),
        user_tasks: std::collections::BTreeSet::new(),
        seq: 0,
        attempts: BTreeMap::new(),
        taken: 0,
        last_at_ms: 0,
        migrations: BTreeMap::new(),
        target: None,
        poisons: BTreeMap::new(),
        undelivered: BTreeMap::new(),
        tries: BTreeMap::new(),
        tried: Vec::new(),
        rows: BTreeMap::new(),
        recorded: recorded.is_some(),
    };
    for (i, r) in recorded.unwrap_or_default().iter().enumerate() {
        if let Some(t) = r.target.as_ref().and_then(|t| targets.get(t)) {
            sim.migrations.insert(i as u64, t);
        }
    }
    for (i, e) in scenario.events.iter().enumerate() {
        let due = Due {
            at_ms: e.at_ms(),
            class: 1,
            seq: i as u64,
            name: String::new(),
        };
        if let ScriptedEvent::Migrate { target, .. } = e {
            if let Some(t) = targets.get(target) {
                sim.migrations.insert(i as u64, t);
            }
        }
        sim.results.insert(due, e.input());
    }
    Ok(Steps {
        sim,
        horizon_ms,
        max_steps: scenario.max_steps.unwrap_or(steps_default),
        now_ms: recorded
            .and_then(|r| r.first())
            .map_or(scenario.start_at_ms, |r| r.at_ms),
        started: false,
        next_input: 0,
        stop: None,
        failed: false,
    })
}

/// A run in progress, yielding its steps in order (see [`steps`]). After an error it
/// yields nothing more.
pub struct Steps<'a> {
    sim: Sim<'a>,
    horizon_ms: i64,
    max_steps: u32,
    /// The virtual clock: the instant of the last step (it never runs backwards).
    now_ms: i64,
    started: bool,
    /// Of recorded inputs, the position of the next one to deliver.
    next_input: usize,
    /// Why the run stopped, once it has.
    stop: Option<Stop>,
    failed: bool,
}

impl Iterator for Steps<'_> {
    type Item = Result<TraceStep, Error>;

    fn next(&mut self) -> Option<Result<TraceStep, Error>> {
        if self.stop.is_some() || self.failed {
            return None;
        }
        let scenario: &Scenario = self.sim.scenario;
        if let Some(inputs) = &scenario.inputs {
            let step = match self.next_recorded(inputs) {
                Ok(Some((input, now_ms))) => self.sim.deliver(input, now_ms),
                Ok(None) => return None,
                Err(e) => Err(e),
            };
            self.failed = step.is_err();
            return Some(step);
        }
        let step = if self.started {
            match self.next_delivery() {
                Ok(Some((input, now_ms))) => self.sim.deliver(input, now_ms),
                Ok(None) => return None,
                Err(e) => Err(e),
            }
        } else {
            self.started = true;
            let start = Input::Start {
                variables: self.sim.scenario.variables.clone(),
                start: self.sim.scenario.start_event.clone(),
            };
            self.sim.step(start, self.sim.scenario.start_at_ms)
        };
        self.failed = step.is_err();
        Some(step)
    }
}

impl Steps<'_> {
    /// The input of the next step and its instant, or `None` when the run stops here
    /// (recording why).
    fn next_delivery(&mut self) -> Result<Option<(Input, i64)>, Error> {
        let snap = Snapshot::decode(&self.sim.bytes)?;
        // A terminal instance is finished, unless a FAILED one has a resume coming.
        let stop = if snap.status().is_terminal()
            && !(snap.status() == Status::Failed && self.sim.resume_pending())
        {
            Stop::Finished
        } else if self.sim.taken >= self.max_steps {
            Stop::MaxSteps
        } else {
            match self.sim.next() {
                None => Stop::Idle,
                Some((due, _)) if due.at_ms > self.horizon_ms => Stop::Horizon,
                Some((due, input)) => {
                    // A date timer in the past fires now: the clock never runs backwards.
                    self.now_ms = self.now_ms.max(due.at_ms);
                    self.sim.make_tries(self.now_ms);
                    self.sim.take(&due);
                    let input = match (due.class, input) {
                        (1, Input::Migrate { mapping, .. }) => {
                            self.sim.target = self.sim.migrations.get(&due.seq).copied();
                            Input::Migrate {
                                mapping,
                                timers: self.sim.due_instants(),
                                user_tasks: self.sim.user_tasks.iter().cloned().collect(),
                            }
                        }
                        (_, input) => input,
                    };
                    return Ok(Some((input, self.now_ms)));
                }
            }
        };
        self.stop = Some(stop);
        Ok(None)
    }

    /// The next recorded input and its instant, or `None` when the run stops here
    /// (recording why): the list is played out (`finished` if the instance is over by
    /// then, else `idle`), the step budget is spent, or the next input lies beyond the
    /// horizon. A terminal instance still takes the inputs recorded after its end, as it
    /// did in production (each is stale, or a resume, a migration, an incident resolved).
    fn next_recorded(&mut self, inputs: &[RecordedInput]) -> Result<Option<(Input, i64)>, Error> {
        let stop = match inputs.get(self.next_input) {
            None => {
                let snap = Snapshot::decode(&self.sim.bytes)?;
                if snap.status().is_terminal() {
                    Stop::Finished
                } else {
                    Stop::Idle
                }
            }
            Some(_) if self.sim.taken >= self.max_steps => Stop::MaxSteps,
            Some(r) if r.at_ms > self.horizon_ms => Stop::Horizon,
            Some(r) => {
                // A `migrate` steps with the target its entry names.
                self.sim.target = self.sim.migrations.get(&(self.next_input as u64)).copied();
                self.next_input += 1;
                self.now_ms = r.at_ms;
                return Ok(Some((r.input.clone(), r.at_ms)));
            }
        };
        self.stop = Some(stop);
        Ok(None)
    }

    /// Takes whatever steps remain, keeping none, and returns the summary of the run.
    pub fn finish(mut self) -> Result<Summary, Error> {
        for step in self.by_ref() {
            step?;
        }
        Ok(self.sim.summary(self.stop.unwrap_or(Stop::Idle)))
    }
}

struct Sim<'a> {
    def: &'a Definition,
    scenario: &'a Scenario,
    bytes: Vec<u8>,
    /// Scripted task results and events waiting for their instant.
    results: BTreeMap<Due, Input>,
    /// The scripted ends of called instances among `results`, by call activity: what a
    /// cancelled child will never report.
    child_ends: Vec<(String, Due)>,
    /// The timer table, as a store keeps it: name → (due, incarnation).
    timers: BTreeMap<TimerName, (i64, u32)>,
    /// The task list's rows, as a store keeps them: the user tasks offered.
    user_tasks: std::collections::BTreeSet<String>,
    seq: u64,
    attempts: BTreeMap<String, u32>,
    /// Steps taken so far, and the instant of the last one.
    taken: u32,
    last_at_ms: i64,
    /// The target definition of each `migrate` event (or recorded `migrate` input), by
    /// its position in the file.
    migrations: BTreeMap<u64, &'a Definition>,
    /// The target of the migration being delivered now.
    target: Option<&'a Definition>,
    /// Scheduled poison wakes, by the node whose request they poison: a withdrawal
    /// deletes the row, and with it the poison to come.
    poisons: BTreeMap<Due, String>,
    /// Scheduled answers to requests not delivered yet (`delivery_fails`): the node and
    /// the instant of the try that delivers the request. A withdrawal before that instant
    /// deletes the row, so the counterpart never gets the request and never answers.
    undelivered: BTreeMap<Due, (String, i64)>,
    /// Failed delivery tries still to come, by (instant, order made): a withdrawal
    /// cancels those of its node.
    tries: BTreeMap<(i64, u64), DeliveryTry>,
    /// Failed tries already made, waiting for the step they are shown with.
    tried: Vec<DeliveryTry>,
    /// The outbox rows that exist, by key: their node and the instant their request
    /// reaches the counterpart (`None`: never, the row is poisoned). As in a store, the
    /// core emitting a key whose row exists writes nothing and schedules nothing (a
    /// resume emits the call's in-flight request again under its key), and a withdrawal
    /// deletes the pending and poisoned rows of its node while a delivered row stays.
    rows: BTreeMap<String, (String, Option<i64>)>,
    /// The open signal subscriptions, as a store keeps them: node → (signal name, order
    /// opened).
    signal_waits: BTreeMap<String, (String, u64)>,
    /// The open message subscriptions: node → (message, key, order opened).
    message_waits: BTreeMap<String, (String, String, u64)>,
    /// The run plays recorded inputs: the step's effects schedule nothing (every later
    /// input is in the list), they are only counted for the summary.
    recorded: bool,
}

impl<'a> Sim<'a> {
    /// Steps with `input`; a migration steps with its target definition and, unless the
    /// core refused it, the run goes on with that definition.
    fn deliver(&mut self, input: Input, now_ms: i64) -> Result<TraceStep, Error> {
        let Some(target) = self.target.take() else {
            return self.step(input, now_ms);
        };
        let source = std::mem::replace(&mut self.def, target);
        let step = self.step(input, now_ms)?;
        if step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Stale { .. }))
        {
            self.def = source;
        }
        Ok(step)
    }

    /// The due instant of every live timer, by name: what a store tells a migration.
    fn due_instants(&self) -> BTreeMap<String, i64> {
        self.timers
            .iter()
            .map(|(name, (due, _))| (name.as_str().to_owned(), *due))
            .collect()
    }

    /// A scripted resume is still to come.
    fn resume_pending(&self) -> bool {
        self.results
            .values()
            .any(|input| matches!(input, Input::Resume { .. }))
    }

    fn next(&self) -> Option<(Due, Input)> {
        let result = self
            .results
            .iter()
            .next()
            .map(|(d, i)| (d.clone(), i.clone()));
        let timer = self
            .timers
            .iter()
            .map(|(name, (due, inc))| {
                let d = Due {
                    at_ms: *due,
                    class: 2,
                    seq: 0,
                    name: name.as_str().to_owned(),
                };
                (
                    d,
                    Input::TimerFired {
                        name: name.clone(),
                        incarnation: *inc,
                    },
                )
            })
            .min_by(|a, b| a.0.cmp(&b.0));
        match (result, timer) {
            (Some(r), Some(t)) => Some(if r.0 <= t.0 { r } else { t }),
            (r, t) => r.or(t),
        }
    }

    fn take(&mut self, due: &Due) {
        if due.class == 2 {
            // The row is claimed; the step resolves it (or re-arms the name).
            self.timers.remove(due.name.as_str());
        } else {
            self.results.remove(due);
            self.poisons.remove(due);
            self.undelivered.remove(due);
        }
    }

    /// Makes the failed delivery tries due by `at_ms` (inclusive: the outbox tries before
    /// the step of the same instant), to be shown with the next step.
    fn make_tries(&mut self, at_ms: i64) {
        while let Some(entry) = self.tries.first_entry() {
            if entry.key().0 > at_ms {
                break;
            }
            self.tried.push(entry.remove());
        }
    }

    fn step(&mut self, input: Input, now_ms: i64) -> Result<TraceStep, Error> {
        let snap = Snapshot::decode(&self.bytes)?;
        let node = input.node().map(str::to_owned);
        let attempt = input.attempt();
        let (out, path) = step_traced(
            self.def,
            &self.scenario.instance,
            snap,
            input.clone(),
            now_ms,
        )?;
        self.bytes = out.snapshot.encode();
        for effect in &out.effects {
            self.count_attempt(effect);
        }
        if !self.recorded {
            for effect in &out.effects {
                self.carry_out(effect, now_ms);
            }
            self.broadcast(&out.effects, now_ms);
        }
        self.taken += 1;
        self.last_at_ms = now_ms;
        Ok(TraceStep {
            seq: self.taken,
            at_ms: now_ms,
            input,
            node,
            attempt,
            effects: out.effects,
            path,
            deliveries: std::mem::take(&mut self.tried),
            snapshot: self.bytes.clone(),
        })
    }

    /// Counts the attempt an effect starts (`run_task`, `send_request`, `start_child`),
    /// per activity instance, for the summary.
    fn count_attempt(&mut self, effect: &Effect) {
        if let Effect::RunTask { node, attempt, .. }
        | Effect::SendRequest { node, attempt, .. }
        | Effect::StartChild { node, attempt, .. } = effect
        {
            let seen = self.attempts.entry(node.clone()).or_default();
            *seen = (*seen).max(attempt.get());
        }
    }

    /// Schedules what the outbox delivers to this instance itself once the step is
    /// committed: the broadcasts of the signals it threw and the messages it published
    /// under a correlation key its own waits have.
    fn broadcast(&mut self, effects: &[Effect], now_ms: i64) {
        // A signal thrown in the step reaches, as the outbox's broadcast does once the
        // step is committed, every wait for it open then — this instance's own included —
        // one delivery per subscription row, in the order the rows opened.
        for effect in effects {
            if let Effect::ThrowSignal { name, .. } = effect {
                // In the order the waits opened, as the store's walk goes.
                let mut waits: Vec<(u64, String)> = self
                    .signal_waits
                    .iter()
                    .filter(|(_, (n, _))| n == name)
                    .map(|(node, (_, seq))| (*seq, node.clone()))
                    .collect();
                waits.sort();
                let waits = waits.into_iter().map(|(_, node)| node);
                for node in waits {
                    self.seq += 1;
                    let due = Due {
                        at_ms: now_ms,
                        class: 0,
                        seq: self.seq,
                        name: String::new(),
                    };
                    let input = Input::SignalReceived {
                        name: name.clone(),
                        node: Some(node),
                        variables: Variables::new(),
                    };
                    self.results.insert(due, input);
                }
            }
        }
        // A message published in the step with a correlation key reaches, as the
        // outbox's publication does, the oldest wait subscribed under that name and key
        // — here, one of this instance's own. Without a key (or without such a wait) it
        // is for a message start event or another instance: nothing here.
        for effect in effects {
            if let Effect::PublishMessage {
                name,
                correlation_key: Some(key),
                variables,
                ..
            } = effect
            {
                let oldest = self
                    .message_waits
                    .iter()
                    .filter(|(_, (n, k, _))| n == name && k == key)
                    .min_by_key(|(_, (_, _, seq))| *seq)
                    .map(|(node, _)| node.clone());
                if let Some(node) = oldest {
                    self.seq += 1;
                    let due = Due {
                        at_ms: now_ms,
                        class: 0,
                        seq: self.seq,
                        name: String::new(),
                    };
                    let input = Input::MessageReceived {
                        name: name.clone(),
                        correlation_key: Some(key.clone()),
                        node: Some(node),
                        variables: variables.clone(),
                    };
                    self.results.insert(due, input);
                }
            }
        }
    }

    fn carry_out(&mut self, effect: &Effect, now_ms: i64) {
        match effect {
            Effect::RunTask {
                node,
                handler,
                attempt,
                inputs,
            } => {
                let scripted = self.scripted(node, *attempt);
                let ctx = TaskContext {
                    instance_id: &self.scenario.instance,
                    node,
                    handler,
                    attempt: *attempt,
                    inputs,
                };
                if let Some((after_ms, input)) = scripted_input(&scripted, &ctx) {
                    self.schedule(now_ms, after_ms, input);
                }
            }
            Effect::ArmTimer {
                name,
                due_at_ms,
                incarnation,
            } => {
                self.timers.insert(name.clone(), (*due_at_ms, *incarnation));
            }
            Effect::ResolveTimer { name, incarnation } => {
                if self.timers.get(name).is_some_and(|(_, i)| i == incarnation) {
                    self.timers.remove(name);
                }
            }
            Effect::SendRequest {
                node, channel, key, ..
            } => {
                self.send_request(node, channel, key, now_ms);
            }
            Effect::WithdrawRequests { node } => {
                // The rows are deleted: a poison still to come for them cannot happen.
                // Answers stay: the counterpart had the request and may still answer.
                let gone: Vec<Due> = self
                    .poisons
                    .iter()
                    .filter(|(_, n)| *n == node)
                    .map(|(d, _)| d.clone())
                    .collect();
                for d in gone {
                    self.poisons.remove(&d);
                    self.results.remove(&d);
                }
                // A request not delivered yet is never delivered: its remaining tries
                // and the answer it would have had go with the row.
                let undelivered: Vec<Due> = self
                    .undelivered
                    .iter()
                    .filter(|(_, (n, delivered_at))| n == node && *delivered_at > now_ms)
                    .map(|(d, _)| d.clone())
                    .collect();
                for d in undelivered {
                    self.undelivered.remove(&d);
                    self.results.remove(&d);
                }
                self.tries.retain(|_, t| t.node != *node);
                self.rows.retain(|_, (n, delivered)| {
                    n != node || delivered.is_some_and(|at| at <= now_ms)
                });
            }
            Effect::OfferUserTask { node, .. } => {
                self.user_tasks.insert(node.clone());
            }
            // A signal's subscription is the one with the empty key.
            Effect::Subscribe { node, message, key } if key.is_empty() => {
                self.seq += 1;
                self.signal_waits
                    .insert(node.clone(), (message.clone(), self.seq));
            }
            Effect::Subscribe { node, message, key } => {
                self.seq += 1;
                let wait = (message.clone(), key.clone(), self.seq);
                self.message_waits.insert(node.clone(), wait);
            }
            Effect::Unsubscribe { node } => {
                self.signal_waits.remove(node);
                self.message_waits.remove(node);
            }
            // Delivered once the step's effects are all carried out (`step`).
            Effect::ThrowSignal { .. } | Effect::PublishMessage { .. } => {}
            Effect::StartChild {
                node,
                call,
                attempt,
                ..
            } => {
                let scripted = self.scripted(node, *attempt);
                if let Some((after_ms, outcome)) = child_outcome(&scripted) {
                    let input = Input::ChildEnded {
                        node: node.clone(),
                        call: *call,
                        outcome,
                    };
                    let due = self.schedule(now_ms, after_ms, input);
                    self.child_ends.push((node.clone(), due));
                }
            }
            Effect::CancelChild { node, .. } => {
                // A cancelled child ends without reporting to a wait that is over.
                let results = &mut self.results;
                self.child_ends.retain(|(n, due)| {
                    if n == node {
                        results.remove(due);
                    }
                    n != node
                });
            }
            // The run is of one instance: the parent a called instance reports to is
            // not simulated, and the trace keeps the effect.
            Effect::NotifyParent { .. } => {}
            Effect::WithdrawUserTask { node } => {
                self.user_tasks.remove(node);
            }
            // The rest is what a store records beside the snapshot (history, incidents)
            // or what the snapshot already says (the ending, staleness): the trace keeps
            // the effects themselves, so there is nothing more to carry out here. Listed,
            // not wildcarded, so a new effect has to be thought about here.
            Effect::AttemptFinished { .. }
            | Effect::OpenIncident { .. }
            | Effect::ResolveIncident { .. }
            | Effect::MoveIncidents { .. }
            | Effect::OfferPullTask { .. }
            | Effect::WithdrawPullTask { .. }
            | Effect::AssignUserTask { .. }
            | Effect::Completed
            | Effect::Failed { .. }
            | Effect::Cancelled
            | Effect::Stale { .. } => {}
        }
    }

    /// Carries out one `send_request` emitted at `now_ms`: the request's delivery tries
    /// along its channel's curve (the scripted failures first), then what the counterpart
    /// does once it has the request — or the poison, when the failures reach the ceiling.
    fn send_request(&mut self, node: &str, channel: &str, key: &str, now_ms: i64) {
        let Some(id) = crate::CallKey::parse(key) else {
            return;
        };
        let (call, attempt) = (id.call, id.attempt);
        if self.rows.contains_key(key) {
            return;
        }
        self.rows.insert(key.to_owned(), (node.to_owned(), None));
        let answer = self.answer(node, attempt);
        let curve = self
            .scenario
            .delivery_curves
            .get(channel)
            .cloned()
            .unwrap_or_default();
        // Try k fails at `at`; the next is due along the curve, or the row is poisoned.
        let mut at = now_ms;
        for k in 1..=answer.delivery_fails() {
            let next = match curve.after_failure(k) {
                AfterFailure::RetryIn(ms) => {
                    Some(at.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)))
                }
                AfterFailure::Poison => None,
            };
            self.seq += 1;
            let failed = DeliveryTry {
                at_ms: at,
                node: node.to_owned(),
                key: key.to_owned(),
                try_number: k,
                next_due_ms: next,
                poisoned: next.is_none(),
            };
            self.tries.insert((at, self.seq), failed);
            match next {
                Some(next) => at = next,
                None => {
                    let input = Input::ChannelPoisoned {
                        call,
                        attempt,
                        message: format!("a scripted delivery failure (after {k} delivery tries)"),
                    };
                    let due = self.schedule(at, 0, input);
                    self.poisons.insert(due, node.to_owned());
                    return;
                }
            }
        }
        // `at` is now the instant of the try that reaches the counterpart.
        let delivered_at = at;
        let poisoned_on_the_way = matches!(answer, ScriptedAnswer::Poison { .. });
        if !poisoned_on_the_way {
            self.rows
                .insert(key.to_owned(), (node.to_owned(), Some(delivered_at)));
        }
        let (after_ms, input) = match answer {
            ScriptedAnswer::Never { .. } | ScriptedAnswer::Poison { wake: false, .. } => return,
            ScriptedAnswer::Ok {
                outputs, after_ms, ..
            } => (
                after_ms,
                Input::ChannelAnswered {
                    call,
                    attempt,
                    variables: outputs,
                },
            ),
            ScriptedAnswer::BpmnError {
                code,
                message,
                after_ms,
                ..
            } => (
                after_ms,
                Input::ChannelBpmnError {
                    call,
                    attempt,
                    code,
                    message,
                    variables: Variables::new(),
                },
            ),
            ScriptedAnswer::Poison {
                message, after_ms, ..
            } => {
                let input = Input::ChannelPoisoned {
                    call,
                    attempt,
                    message,
                };
                let due = self.schedule(delivered_at, after_ms, input);
                self.poisons.insert(due, node.to_owned());
                return;
            }
        };
        let due = self.schedule(delivered_at, after_ms, input);
        if delivered_at > now_ms {
            self.undelivered
                .insert(due, (node.to_owned(), delivered_at));
        }
    }

    /// Schedules `input` `after_ms` after `from_ms`, after everything scheduled before it
    /// for the same instant.
    fn schedule(&mut self, from_ms: i64, after_ms: u64, input: Input) -> Due {
        self.seq += 1;
        let due = Due {
            at_ms: from_ms.saturating_add(i64::try_from(after_ms).unwrap_or(i64::MAX)),
            class: 0,
            seq: self.seq,
            name: String::new(),
        };
        self.results.insert(due.clone(), input);
        due
    }

    fn scripted(&self, node: &str, attempt: Attempt) -> Scripted {
        let list = scripted_list(&self.scenario.tasks, node);
        let entry = list.and_then(|l| {
            let i = (attempt.get() - 1) as usize;
            l.get(i).or(l.last())
        });
        entry.cloned().unwrap_or(Scripted::Ok {
            outputs: Variables::new(),
            after_ms: 0,
        })
    }

    fn answer(&self, node: &str, attempt: Attempt) -> ScriptedAnswer {
        let list = scripted_list(&self.scenario.channels, node);
        let entry = list.and_then(|l| {
            let i = (attempt.get() - 1) as usize;
            l.get(i).or(l.last())
        });
        entry.cloned().unwrap_or(ScriptedAnswer::Ok {
            outputs: Variables::new(),
            after_ms: 0,
            delivery_fails: 0,
        })
    }

    fn summary(&self, stop: Stop) -> Summary {
        let snap = Snapshot::decode(&self.bytes).unwrap_or_default();
        let failure = snap.failure();
        Summary {
            status: snap.status().as_str().to_owned(),
            failure_code: failure.as_ref().map(|f| f.code.clone()),
            failure_node: failure.and_then(|f| f.node),
            attempts: self.attempts.clone(),
            snapshot_bytes: self.bytes.len(),
            snapshot_sha256: hex::encode(Sha256::digest(&self.bytes)),
            steps: self.taken,
            ended_at_ms: self.last_at_ms,
            stop,
        }
    }
}

/// Turns a scripted outcome into the input the shell would feed back, through the
/// same [`run_handler`] a real shell uses. `None`: the handler never answers.
/// What a called instance does on one attempt of a call activity, as a task's script
/// gives it: `ok` completes with the outputs as its variables, `fail` ends it FAILED with
/// the code (`CANCELLED`: cancelled), `bpmn_error` is an error escaping it, `hang` never
/// ends. (`panic` and `time_limit` are a handler's, refused by [`validate`].)
fn child_outcome(scripted: &Scripted) -> Option<(u64, crate::ChildOutcome)> {
    use crate::ChildOutcome;
    match scripted {
        Scripted::Ok { outputs, after_ms } => Some((
            *after_ms,
            ChildOutcome::Completed {
                variables: outputs.clone(),
            },
        )),
        Scripted::Fail {
            code,
            message,
            after_ms,
        } => Some((
            *after_ms,
            ChildOutcome::Failed {
                code: code.clone(),
                message: message.clone(),
            },
        )),
        Scripted::BpmnError {
            code,
            message,
            after_ms,
        } => Some((
            *after_ms,
            ChildOutcome::BpmnError {
                code: Some(code.clone()),
                message: message.clone(),
            },
        )),
        Scripted::Hang | Scripted::Panic { .. } | Scripted::TimeLimit { .. } => None,
    }
}

fn scripted_input(scripted: &Scripted, ctx: &TaskContext<'_>) -> Option<(u64, Input)> {
    let (after_ms, outcome) = match scripted {
        Scripted::Hang => return None,
        Scripted::Panic { message, after_ms } => {
            // Reported exactly as `run_handler` reports a caught panic, without running
            // the process-wide panic hook in a tool whose output is a trace.
            let input = call_input(ctx, CallEnded::Panicked(Some(message.clone())));
            return Some((*after_ms, input));
        }
        Scripted::TimeLimit { after_ms } => {
            let ended = CallEnded::TimedOut {
                limit_ms: *after_ms,
            };
            return Some((*after_ms, call_input(ctx, ended)));
        }
        Scripted::Ok { outputs, after_ms } => (*after_ms, TaskOutcome::Ok(outputs.clone())),
        Scripted::Fail {
            code,
            message,
            after_ms,
        } => (
            *after_ms,
            TaskOutcome::Fail {
                code: code.clone(),
                message: message.clone(),
            },
        ),
        Scripted::BpmnError {
            code,
            message,
            after_ms,
        } => (
            *after_ms,
            TaskOutcome::BpmnError {
                code: code.clone(),
                message: message.clone(),
            },
        ),
    };
    let handler = move |_: &TaskContext<'_>| outcome.clone();
    Some((after_ms, run_handler(&handler, ctx)))
}

/// The node a scenario's `tasks` or `channels` key names: a node, an inner instance
/// (`quote#2`), or a multi-instance activity's id, which scripts every inner instance
/// that has no key of its own.
pub(crate) fn scripted_node(p: &qflow_loader::model::Process, key: &str) -> Option<NodeIdx> {
    let idx = p.find(key)?;
    Some(p.multi_instance(idx).map_or(idx, |mi| mi.inner))
}

/// The scripted entries for `node`: its own, else those of the instance it is of (an
/// activity instance `<id>@<c>` falls back to `<id>`), else those of the node in any
/// scope instance (`sub@2/pay` falls back to `pay`), else (for an inner instance
/// `<id>#<k>`) those of the activity's id. So `"pay"` scripts every instance of `pay`,
/// and `"pay@2"` or `"sub@2/pay"` only that one.
fn scripted_list<'s, T>(scripts: &'s BTreeMap<String, Vec<T>>, node: &str) -> Option<&'s Vec<T>> {
    fn uncopied(name: &str) -> &str {
        match name.rsplit_once('@') {
            Some((base, c)) if !c.contains('/') => base,
            _ => name,
        }
    }
    let last = node.rsplit_once('/').map_or(node, |(_, l)| l);
    [node, uncopied(node), last, uncopied(last)]
        .into_iter()
        .find_map(|n| scripts.get(n))
        .or_else(|| scripts.get(uncopied(last).split_once('#')?.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A golden case's model (or target), from its XML.
    fn golden_model(xml: &str) -> Definition {
        let mut loaded = qflow_loader::load_str(xml).expect("the golden model loads");
        assert_eq!(loaded.definitions.len(), 1);
        loaded.definitions.remove(0)
    }

    /// `golden/cases/retry_late_result_after_timeout`: `fetch` with a 30 s `q:timeout`
    /// and a retry policy; attempt 1 outlives the timeout, its late result is stale.
    fn retry_and_timer() -> (Definition, Scenario) {
        let def = golden_model(include_str!(
            "../../golden/cases/retry_late_result_after_timeout/model.bpmn"
        ));
        let scenario = serde_json::from_str(include_str!(
            "../../golden/cases/retry_late_result_after_timeout/scenario.json"
        ))
        .expect("the golden scenario reads");
        (def, scenario)
    }

    /// The inputs a run's trace took, each at its instant: what the journal records.
    fn recorded(trace: &Trace) -> Vec<RecordedInput> {
        trace
            .steps
            .iter()
            .map(|s| RecordedInput::new(s.at_ms, s.input.clone()))
            .collect()
    }

    /// The step-by-step record two runs are compared on: instant, input, effects, path
    /// and the snapshot bytes.
    /// What one step did: instant, input, effects, path, snapshot bytes.
    type Taken = (i64, Input, Vec<Effect>, Vec<PathEvent>, Vec<u8>);

    fn taken(trace: &Trace) -> Vec<Taken> {
        trace
            .steps
            .iter()
            .map(|s| {
                let (input, effects) = (s.input.clone(), s.effects.clone());
                (s.at_ms, input, effects, s.path.clone(), s.snapshot.clone())
            })
            .collect()
    }

    /// The replay took the scripted run's steps, byte for byte, and ended the same.
    fn assert_replays(scripted: &Trace, replay: &Trace) {
        assert_eq!(taken(replay), taken(scripted));
        let (a, b) = (&replay.summary, &scripted.summary);
        assert_eq!(a.status, b.status);
        assert_eq!(a.attempts, b.attempts);
        assert_eq!(a.snapshot_sha256, b.snapshot_sha256);
        assert_eq!((a.steps, a.ended_at_ms), (b.steps, b.ended_at_ms));
    }

    #[test]
    fn recorded_inputs_reproduce_every_snapshot_of_the_scripted_run() {
        let (def, scenario) = retry_and_timer();
        let scripted = run(&def, &scenario).unwrap();
        // The case's story: start, attempt 1's timeout, its late (stale) result, the
        // retry park's end, attempt 2's result.
        let kinds: Vec<&str> = scripted.steps.iter().map(|s| s.input.kind()).collect();
        assert_eq!(
            kinds,
            [
                "start",
                "timer_fired",
                "task_completed",
                "timer_fired",
                "task_completed"
            ]
        );
        let replay = run(
            &def,
            &Scenario::recorded(&scenario.instance, recorded(&scripted)),
        )
        .unwrap();
        assert_replays(&scripted, &replay);
        let stale = &replay.steps[2].effects;
        assert!(
            matches!(stale.as_slice(), [Effect::Stale { .. }]),
            "{stale:?}"
        );
        assert_eq!(replay.summary.stop, Stop::Finished);
    }

    #[test]
    fn recorded_inputs_reproduce_broadcasts_deliveries_and_stale_timers() {
        let cases = [
            (
                include_str!("../../golden/cases/retry_stale_timer/model.bpmn"),
                include_str!("../../golden/cases/retry_stale_timer/scenario.json"),
            ),
            (
                include_str!("../../golden/cases/signal_throw_reaches_own_catch/model.bpmn"),
                include_str!("../../golden/cases/signal_throw_reaches_own_catch/scenario.json"),
            ),
            (
                include_str!("../../golden/cases/channel_delivery_fails_then_answers/model.bpmn"),
                include_str!(
                    "../../golden/cases/channel_delivery_fails_then_answers/scenario.json"
                ),
            ),
            (
                include_str!("../../golden/cases/user_task_claims/model.bpmn"),
                include_str!("../../golden/cases/user_task_claims/scenario.json"),
            ),
        ];
        for (model, scenario) in cases {
            let def = golden_model(model);
            let scenario: Scenario = serde_json::from_str(scenario).unwrap();
            let scripted = run(&def, &scenario).unwrap();
            let replay = run(
                &def,
                &Scenario::recorded(&scenario.instance, recorded(&scripted)),
            )
            .unwrap();
            assert_replays(&scripted, &replay);
            // The outbox's failed tries are not inputs: a replay has none to show.
            assert!(replay.steps.iter().all(|s| s.deliveries.is_empty()));
        }
    }

    #[test]
    fn a_recorded_migration_moves_onto_the_target_its_entry_names() {
        let def = golden_model(include_str!(
            "../../golden/cases/migrate_running_renames_timer/model.bpmn"
        ));
        let v2 = golden_model(include_str!(
            "../../golden/cases/migrate_running_renames_timer/target-v2.bpmn"
        ));
        let targets = Targets::from([("v2".to_owned(), v2)]);
        let scenario: Scenario = serde_json::from_str(include_str!(
            "../../golden/cases/migrate_running_renames_timer/scenario.json"
        ))
        .unwrap();
        let scripted = run_with(&def, &scenario, &targets).unwrap();
        let mut inputs = recorded(&scripted);
        let migrate = inputs
            .iter()
            .position(|r| matches!(r.input, Input::Migrate { .. }))
            .expect("the case migrates");
        // Without the target the input cannot be played.
        let without = Scenario::recorded(&scenario.instance, inputs.clone());
        let err = run_with(&def, &without, &targets).unwrap_err();
        assert!(
            matches!(&err, Error::Scenario(m) if m.starts_with(&format!("inputs[{migrate}]: "))),
            "{err}"
        );
        inputs[migrate].target = Some("v2".into());
        let replay = run_with(
            &def,
            &Scenario::recorded(&scenario.instance, inputs.clone()),
            &targets,
        )
        .unwrap();
        assert_replays(&scripted, &replay);
        // A target the run was not given is refused at the entry's `target`.
        inputs[migrate].target = Some("v3".into());
        let err = run_with(&def, &Scenario::recorded("x", inputs), &targets).unwrap_err();
        assert!(
            matches!(&err, Error::Scenario(m) if m.starts_with(&format!("inputs[{migrate}].target: "))),
            "{err}"
        );
    }

    #[test]
    fn nothing_but_the_inputs_is_delivered() {
        let (def, scenario) = retry_and_timer();
        // The start alone: attempt 1 runs and its timeout is armed, but no scripted
        // result, no timer firing follows.
        let start = Input::Start {
            variables: Variables::new(),
            start: None,
        };
        let only_start = Scenario::recorded(&scenario.instance, vec![RecordedInput::new(0, start)]);
        let trace = run(&def, &only_start).unwrap();
        assert_eq!(trace.steps.len(), 1);
        assert!(trace.steps[0]
            .effects
            .iter()
            .any(|e| matches!(e, Effect::ArmTimer { .. })));
        assert_eq!(trace.summary.stop, Stop::Idle);
        assert_eq!(trace.summary.status, "running");
        assert_eq!(
            trace.summary.attempts,
            BTreeMap::from([("fetch".into(), 1)])
        );

        // Inputs recorded after the end are still delivered, each stale, and the run is
        // finished once the list is played out.
        let mut inputs = recorded(&run(&def, &scenario).unwrap());
        let last = inputs.last().unwrap().at_ms;
        inputs.push(RecordedInput::new(
            last + 5,
            Input::TimerFired {
                name: "t:fetch".parse().unwrap(),
                incarnation: 1,
            },
        ));
        inputs.push(RecordedInput::new(last + 9, Input::Redrive));
        let trace = run(&def, &Scenario::recorded(&scenario.instance, inputs)).unwrap();
        let tail: Vec<_> = trace.steps[trace.steps.len() - 2..]
            .iter()
            .map(|s| (s.at_ms, s.effects.clone()))
            .collect();
        assert!(
            tail.iter()
                .all(|(_, e)| matches!(e.as_slice(), [Effect::Stale { .. }])),
            "{tail:?}"
        );
        assert_eq!((tail[0].0, tail[1].0), (last + 5, last + 9));
        assert_eq!(trace.summary.stop, Stop::Finished);
        assert_eq!(trace.summary.status, "completed");
    }

    /// Whatever a recorded input names, the step judges it: an input that fits nothing
    /// in the instance is stale, never an error that would stop the replay. (A
    /// `resolve_incident` is not judged by the step: the shell checks first that an
    /// incident is open there, and the step records the resolution.)
    #[test]
    fn an_input_of_every_kind_that_fits_nothing_is_stale() {
        let (def, _) = retry_and_timer();
        let others = serde_json::json!([
            {"type": "child_ended", "node": "x", "call": 9, "outcome": {"outcome": "completed"}},
            {"type": "task_completed", "node": "x", "attempt": 1},
            {"type": "task_failed", "node": "fetch", "attempt": 7, "code": "C"},
            {"type": "task_bpmn_error", "node": "x", "attempt": 1, "code": "E"},
            {"type": "timer_fired", "name": "b:x", "incarnation": 4},
            {"type": "user_task_completed", "node": "x"},
            {"type": "user_task_bpmn_error", "node": "x", "code": "E"},
            {"type": "user_task_escalated", "node": "x", "code": "E"},
            {"type": "user_task_claimed", "node": "x", "assignee": "a"},
            {"type": "user_task_unclaimed", "node": "x"},
            {"type": "message_received", "name": "m"},
            {"type": "signal_received", "name": "s", "node": "x"},
            {"type": "resume"},
            {"type": "retry_now", "node": "x"},
            {"type": "pull_locked", "node": "x", "attempt": 1, "worker": "w", "lock_ms": 5},
            {"type": "pull_completed", "node": "x", "attempt": 1, "worker": "w"},
            {"type": "pull_failed", "node": "x", "attempt": 1, "worker": "w", "retries": 0},
            {"type": "pull_bpmn_error", "node": "x", "attempt": 1, "worker": "w", "code": "E"},
            {"type": "pull_lock_extended", "node": "x", "attempt": 1, "worker": "w", "lock_ms": 5},
            {"type": "pull_unlocked", "node": "x", "attempt": 1},
            {"type": "channel_answered", "call": 9, "attempt": 1},
            {"type": "channel_bpmn_error", "call": 9, "attempt": 1, "code": "E"},
            {"type": "channel_poisoned", "call": 9, "attempt": 1},
            {"type": "offer_user_tasks"},
        ]);
        let others: Vec<Input> = serde_json::from_value(others).unwrap();
        let start = Input::Start {
            variables: Variables::new(),
            start: None,
        };
        let mut inputs = vec![RecordedInput::new(0, start)];
        inputs.extend(others.iter().map(|i| RecordedInput::new(1, i.clone())));
        let trace = run(&def, &Scenario::recorded("x", inputs)).unwrap();
        assert_eq!(trace.steps.len(), others.len() + 1);
        for step in &trace.steps[1..] {
            let stale = matches!(step.effects.as_slice(), [Effect::Stale { .. }]);
            assert!(stale, "{:?}: {:?}", step.input, step.effects);
            assert_eq!(step.snapshot, trace.steps[0].snapshot, "{:?}", step.input);
        }
    }

    #[test]
    fn horizon_and_max_steps_bound_the_list() {
        let (def, scenario) = retry_and_timer();
        let inputs = recorded(&run(&def, &scenario).unwrap());
        let mut s = Scenario::recorded(&scenario.instance, inputs.clone());
        s.max_steps = Some(2);
        let trace = run(&def, &s).unwrap();
        assert_eq!((trace.steps.len(), trace.summary.stop), (2, Stop::MaxSteps));
        let mut s = Scenario::recorded(&scenario.instance, inputs.clone());
        s.horizon_ms = Some(inputs[2].at_ms - 1);
        let trace = run(&def, &s).unwrap();
        assert_eq!((trace.steps.len(), trace.summary.stop), (2, Stop::Horizon));
        // Without either, the whole list plays, however long after the start it ends.
        let mut late = inputs.clone();
        for r in &mut late[1..] {
            r.at_ms += 10 * HORIZON_DEFAULT_MS;
        }
        let trace = run(&def, &Scenario::recorded(&scenario.instance, late)).unwrap();
        assert_eq!(trace.steps.len(), inputs.len());
    }

    fn refusal(def: &Definition, s: &Scenario) -> String {
        match validate(def, s) {
            Err(Error::Scenario(message)) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_recorded_scenario_that_does_not_fit_is_refused_naming_the_field() {
        let (def, scenario) = retry_and_timer();
        let inputs = recorded(&run(&def, &scenario).unwrap());
        let base = Scenario::recorded(&scenario.instance, inputs.clone());
        assert_eq!(validate(&def, &base), Ok(()));

        let mut s = base.clone();
        s.tasks = scenario.tasks.clone();
        assert!(refusal(&def, &s)
            .starts_with("inputs: recorded inputs cannot be combined with `tasks`"));
        let mut s = base.clone();
        s.start_at_ms = 5;
        assert!(refusal(&def, &s)
            .starts_with("inputs: recorded inputs cannot be combined with `start_at_ms`"));

        let s = Scenario::recorded("x", inputs[1..].to_vec());
        assert!(
            refusal(&def, &s).starts_with("inputs[0].input: a `timer_fired` input; the first"),
            "{}",
            refusal(&def, &s)
        );
        let s = Scenario::recorded("x", Vec::new());
        assert!(refusal(&def, &s).starts_with("inputs: no input"));

        let mut backwards = inputs.clone();
        backwards[3].at_ms = backwards[2].at_ms - 1;
        let s = Scenario::recorded("x", backwards);
        assert!(
            refusal(&def, &s).starts_with("inputs[3].at_ms: "),
            "{}",
            refusal(&def, &s)
        );
        let mut twice = inputs.clone();
        twice.insert(1, inputs[0].clone());
        assert!(refusal(&def, &Scenario::recorded("x", twice))
            .starts_with("inputs[1].input: a second start"));
        let mut negative = inputs.clone();
        negative[0].at_ms = -1;
        assert!(refusal(&def, &Scenario::recorded("x", negative))
            .starts_with("inputs[0].at_ms: -1 is negative"));
        let mut targeted = inputs.clone();
        targeted[1].target = Some("v2".into());
        assert!(refusal(&def, &Scenario::recorded("x", targeted))
            .starts_with("inputs[1].target: a `timer_fired` input takes no target"));
        let mut s = base.clone();
        s.horizon_ms = Some(-1);
        assert!(refusal(&def, &s).starts_with("horizon_ms: -1 is before the first input's"));
        let mut unknown_start = inputs;
        unknown_start[0].input = Input::Start {
            variables: Variables::new(),
            start: Some("nope".into()),
        };
        assert!(refusal(&def, &Scenario::recorded("x", unknown_start))
            .starts_with("inputs[0].input.start: "));
    }

    #[test]
    fn a_recorded_scenario_reads_back_from_its_serialization() {
        let (def, scenario) = retry_and_timer();
        let mut s =
            Scenario::recorded(&scenario.instance, recorded(&run(&def, &scenario).unwrap()));
        s.max_steps = Some(9);
        let json = serde_json::to_value(&s).unwrap();
        let fields: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(fields, ["horizon_ms", "inputs", "instance", "max_steps"]);
        assert_eq!(
            json["inputs"][1],
            serde_json::json!({"at_ms": 30000, "input": {"type": "timer_fired", "name": "t:fetch", "incarnation": 1}})
        );
        let back: Scenario = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        // A scripted scenario writes what it always wrote.
        let json = serde_json::to_value(&scenario).unwrap();
        assert!(json.get("inputs").is_none());
        assert!(json.get("tasks").is_some() && json.get("start_at_ms").is_some());
        assert_eq!(serde_json::from_value::<Scenario>(json).unwrap(), scenario);
        // A value with both writes both, and is refused when read back.
        let mut both = s.clone();
        both.tasks = scenario.tasks.clone();
        let text = serde_json::to_string(&both).unwrap();
        let err = serde_json::from_str::<Scenario>(&text).unwrap_err();
        assert!(err.to_string().contains("cannot be combined with"), "{err}");
    }
}
