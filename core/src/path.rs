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

use qflow_loader::model::{EndKind, FlowIdx, NodeIdx};
use serde::Serialize;

use super::flow::Run;

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

impl Run<'_> {
    /// Records what `event` builds, when a path is being recorded; otherwise builds
    /// nothing (the closure is not called, so no id is cloned).
    #[inline]
    pub(super) fn record(&mut self, event: impl FnOnce(&Self) -> PathEvent) {
        if self.path.is_none() {
            return;
        }
        let e = event(self);
        if let Some(path) = self.path.as_mut() {
            path.push(e);
        }
    }

    pub(super) fn tracing(&self) -> bool {
        self.path.is_some()
    }

    /// The inner instance `inner` of `body` started, completed or was cancelled.
    pub(super) fn record_inner(&mut self, body: NodeIdx, inner: NodeIdx, state: InnerState) {
        self.record(|r| PathEvent::Inner {
            body: r.id(body).into_owned(),
            node: r.id(inner).into_owned(),
            index: inner.instance(),
            state,
        });
    }

    pub(super) fn record_flow(&mut self, from: NodeIdx, flow: FlowIdx) {
        self.record(|r| {
            let f = r.p.flow(flow);
            PathEvent::Flow {
                flow: f.id.clone(),
                from: r.id(from).into_owned(),
                to: r.id(r.p.inherit(from, f.target)).into_owned(),
            }
        });
    }

    /// A decision of `node` for `flows`, each taken because its condition held (or it has
    /// none), or the default `flows` when `default`. A node with one unconditioned
    /// outgoing flow (a merging gateway) decides nothing, and records no decision.
    pub(super) fn record_decision(&mut self, node: NodeIdx, flows: &[FlowIdx], default: bool) {
        if !self.tracing() {
            return;
        }
        if let [only] = self.p.node(node).outgoing.as_slice() {
            if self.p.flow(*only).condition.is_none() {
                return;
            }
        }
        self.record(|r| PathEvent::Decision {
            node: r.id(node).into_owned(),
            taken: flows
                .iter()
                .map(|f| {
                    let flow = r.p.flow(*f);
                    Branch {
                        flow: flow.id.clone(),
                        condition: flow.condition.as_ref().map(|c| c.source().to_owned()),
                        default,
                        event: None,
                    }
                })
                .collect(),
        });
    }

    /// The event-based gateway `gw`'s race was won by the event `winner`.
    pub(super) fn record_race(&mut self, gw: NodeIdx, winner: NodeIdx) {
        self.record(|r| {
            let flow =
                r.p.node(winner)
                    .incoming
                    .iter()
                    .find(|f| r.p.flow(**f).source == gw)
                    .map(|f| r.p.flow(*f).id.clone())
                    .unwrap_or_default();
            PathEvent::Decision {
                node: r.id(gw).into_owned(),
                taken: vec![Branch {
                    flow,
                    condition: None,
                    default: false,
                    event: Some(r.id(winner).into_owned()),
                }],
            }
        });
    }

    pub(super) fn record_throw(
        &mut self,
        event: EventKind,
        node: NodeIdx,
        code: Option<&str>,
        name: Option<&str>,
    ) {
        self.record(|r| PathEvent::Throw {
            event,
            node: r.id(node).into_owned(),
            code: code.map(str::to_owned),
            name: name.map(str::to_owned),
        });
    }

    /// `node` caught `event`; `boundary` is `(host, interrupting)` for a boundary event.
    pub(super) fn record_catch(
        &mut self,
        event: EventKind,
        node: NodeIdx,
        boundary: Option<(NodeIdx, bool)>,
        code: Option<&str>,
        name: Option<&str>,
    ) {
        self.record(|r| PathEvent::Catch {
            event,
            node: r.id(node).into_owned(),
            on: boundary.map(|(host, _)| r.id(host).into_owned()),
            interrupting: boundary.map(|(_, i)| i),
            event_sub_process: None,
            code: code.map(str::to_owned),
            name: name.map(str::to_owned),
        });
    }

    /// The start event `start` of an event sub-process in `scope` caught `event`.
    pub(super) fn record_catch_in(
        &mut self,
        event: EventKind,
        start: NodeIdx,
        scope: Option<NodeIdx>,
        interrupting: bool,
        code: Option<&str>,
        name: Option<&str>,
    ) {
        self.record(|r| PathEvent::Catch {
            event,
            node: r.id(start).into_owned(),
            on: scope.map(|s| r.id(s).into_owned()),
            interrupting: Some(interrupting),
            event_sub_process: r.p.node(start).scope.map(|e| r.id(e).into_owned()),
            code: code.map(str::to_owned),
            name: name.map(str::to_owned),
        });
    }

    pub(super) fn record_uncaught(&mut self, event: EventKind, node: NodeIdx, code: Option<&str>) {
        self.record(|r| PathEvent::Uncaught {
            event,
            node: r.id(node).into_owned(),
            code: code.map(str::to_owned),
        });
    }

    pub(super) fn record_end(&mut self, node: NodeIdx, kind: &EndKind) {
        self.record(|r| PathEvent::End {
            node: r.id(node).into_owned(),
            kind: kind.into(),
            scope: r.scope_of(node).map(|s| r.id(s).into_owned()),
        });
    }
}
