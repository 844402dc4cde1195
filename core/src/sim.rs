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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// The instance id; it feeds the jitter of retry backoffs. Default `sim-1`.
    pub instance: String,
    /// The virtual instant of `Start`, in ms. Default 0.
    pub start_at_ms: i64,
    /// Start variables. Default none.
    pub variables: Variables,
    /// The start event with a trigger (message, signal, timer) the instance starts at, as
    /// when its trigger fires; `None` (the default): the none start events.
    #[serde(skip_serializing_if = "Option::is_none")]
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
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub delivery_curves: BTreeMap<String, DeliveryCurve>,
    /// External events at fixed virtual instants, in any order.
    pub events: Vec<ScriptedEvent>,
    /// No event after this instant is processed. Default `start_at_ms` + one day.
    pub horizon_ms: Option<i64>,
    /// The run stops after this many steps. Default [`STEPS_DEFAULT_MAX`], at most
    /// [`STEPS_LIMIT`].
    pub max_steps: Option<u32>,
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
    /// not provide.
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
    if let Some(horizon) = scenario.horizon_ms {
        if horizon < scenario.start_at_ms {
            return Err(Error::Scenario(format!(
                "horizon_ms: {horizon} is before start_at_ms ({})",
                scenario.start_at_ms
            )));
        }
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
/// beyond the horizon, or the step budget is spent.
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
    let horizon_ms = scenario
        .horizon_ms
        .unwrap_or(scenario.start_at_ms.saturating_add(HORIZON_DEFAULT_MS));
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
    };
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
        max_steps: scenario.max_steps.unwrap_or(STEPS_DEFAULT_MAX),
        now_ms: scenario.start_at_ms,
        started: false,
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
    /// The target definition of each `migrate` event, by its position in the file.
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
            self.carry_out(effect, now_ms);
        }
        // A signal thrown in the step reaches, as the outbox's broadcast does once the
        // step is committed, every wait for it open then — this instance's own included —
        // one delivery per subscription row, in the order the rows opened.
        for effect in &out.effects {
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
        for effect in &out.effects {
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

    fn carry_out(&mut self, effect: &Effect, now_ms: i64) {
        match effect {
            Effect::RunTask {
                node,
                handler,
                attempt,
                inputs,
            } => {
                let seen = self.attempts.entry(node.clone()).or_default();
                *seen = (*seen).max(attempt.get());
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
                node,
                channel,
                attempt,
                key,
                ..
            } => {
                let seen = self.attempts.entry(node.clone()).or_default();
                *seen = (*seen).max(attempt.get());
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
                let seen = self.attempts.entry(node.clone()).or_default();
                *seen = (*seen).max(attempt.get());
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
