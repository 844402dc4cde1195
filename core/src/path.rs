//! The path a step took (issue 13, "the author sees the path"): which sequence flows
//! carried tokens, what each gateway decided and why, which events were thrown and
//! caught, which end events were reached.
//!
//! A path is recorded only when the caller asks for it ([`crate::step_traced`]): the
//! simulator asks, the runtime never does. Unasked, every record point costs one branch on
//! an `Option` and allocates nothing. A path is derived from a step, never part of its
//! state: it is not in the snapshot and not an [`crate::Effect`], so its shape can change
//! without one persisted byte or one effect changing (E3). Nothing here reads the clock or
//! does I/O.

use qflow_loader::model::EndKind;
use serde::Serialize;

/// One thing a step did to the tokens, in the order it happened. Serialized with its kind
/// in `type`, as effects are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PathEvent {
    /// A token went over the sequence flow `flow`, from `from` to `to`.
    Flow {
        flow: String,
        from: String,
        to: String,
    },
    /// `node` (a gateway, or an activity with conditional outgoing flows) chose the flows
    /// in `taken`, each with the reason it was taken.
    Decision { node: String, taken: Vec<Branch> },
    /// The join `node` fired, consuming one token from each flow of `flows`.
    Join { node: String, flows: Vec<String> },
    /// `node` threw an event: an error (a handler's BPMN error, an error end event, the
    /// catchable `TIMEOUT` of a route-less `q:timeout`), an escalation, or a link.
    Throw {
        event: EventKind,
        node: String,
        /// The error or escalation code, when there is one.
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        /// The link's name.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// `node` caught an event: a boundary (attached to `on`), an intermediate catch event,
    /// a receive task, a link's catch, or the start event of an event sub-process (then
    /// `event_sub_process` names it, and `on` its enclosing sub-process, absent at
    /// process level).
    Catch {
        event: EventKind,
        node: String,
        /// The activity a boundary event is attached to; the sub-process an event
        /// sub-process is in.
        #[serde(skip_serializing_if = "Option::is_none")]
        on: Option<String>,
        /// For a boundary event: whether it ended the activity; for an event
        /// sub-process: whether it ended everything else in its scope.
        #[serde(skip_serializing_if = "Option::is_none")]
        interrupting: Option<bool>,
        /// The event sub-process whose start event caught the event.
        #[serde(skip_serializing_if = "Option::is_none")]
        event_sub_process: Option<String>,
        /// The error or escalation code caught (the thrown one, also for a catch-all).
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        /// The message name, the timer's name (`c:…`, `b:…`) or the link's name.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Nothing caught the event `node` threw. An uncaught error fails the instance (the
    /// `failed` effect follows); an uncaught escalation is no failure and the path goes on.
    Uncaught {
        event: EventKind,
        node: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    /// An inner instance of the multi-instance activity `body`: `node` (`<body>#<k>`,
    /// `index` k) started, completed, or was cancelled (by a completion condition that
    /// held, or the body's interruption).
    Inner {
        body: String,
        node: String,
        index: u32,
        state: InnerState,
    },
    /// A token reached the end event `node`; `scope` is the sub-process it ends a path
    /// of (absent at process level).
    End {
        node: String,
        kind: EndEventKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
}

/// What happened to an inner instance ([`PathEvent::Inner`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InnerState {
    Started,
    Completed,
    Cancelled,
}

/// One flow a [`PathEvent::Decision`] took, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Branch {
    pub flow: String,
    /// The condition that held, as written in the model; absent for an unconditioned
    /// flow, the default flow and an event-based gateway's branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// The default flow was taken: no condition held.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// For an event-based gateway: the event that won the race.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
}

/// The kind of an event thrown or caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Error,
    Escalation,
    Message,
    Timer,
    Link,
    Signal,
    Compensation,
    Conditional,
}

/// What kind of end event a token reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndEventKind {
    None,
    Terminate,
    Error,
    Escalation,
    Signal,
    Message,
    Compensation,
}

impl From<&EndKind> for EndEventKind {
    fn from(kind: &EndKind) -> EndEventKind {
        match kind {
            EndKind::None => EndEventKind::None,
            EndKind::Terminate => EndEventKind::Terminate,
            EndKind::Error { .. } => EndEventKind::Error,
            EndKind::Escalation { .. } => EndEventKind::Escalation,
            EndKind::Signal { .. } => EndEventKind::Signal,
            EndKind::Message { .. } => EndEventKind::Message,
            EndKind::Compensation { .. } => EndEventKind::Compensation,
        }
    }
}
