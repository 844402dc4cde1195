//! No silent stall (SPEC E10): after every step the core asks whether a running instance
//! can still move, and fails it with `STALLED` when it cannot, instead of leaving it
//! RUNNING for ever with nothing pending.
//!
//! What can move a token is read off the snapshot alone: a task attempt in flight (its
//! handler call, request, offer or child is outstanding) or parked with its retry timer
//! armed; a wait state (user task, receive task, message or signal catch, event-based
//! gateway, a timer catch with its timer armed); a sub-process with its inside; a
//! compensation throw waiting for its handlers. Two tokens under one name at a node
//! that keeps state per activity instance (E9) cannot both move: they share one attempt
//! counter, one timer, one row, and only one of them is ever answered. Anything this
//! judgement does not know (a node the definition lacks) is given the benefit of the
//! doubt: the check must never fail an instance that could move.

use qflow_loader::model::{CatchTrigger, EndKind, NodeKind, Process, TaskKind, ThrowTrigger};

use super::codes;
use super::run::Run;
use super::timers::{TimerKind, TimerName};
use crate::snapshot::{Snapshot, Status};

/// The first token of a running instance that nothing can move, and why; `None` when
/// every token can move (or the instance is not running).
pub(crate) fn stalled(p: &Process, snap: &Snapshot) -> Option<(String, &'static str)> {
    if snap.status != Status::Running {
        return None;
    }
    let mut previous: Option<&str> = None;
    for t in &snap.tokens {
        let Some(idx) = p.find(t) else {
            previous = Some(t);
            continue;
        };
        let node = p.node(idx);
        // The frontier is sorted: a repeated name is a neighbour. This engine never
        // writes one at a node that takes activity instances; a snapshot from before
        // them may hold one, and goes on where one answer can serve each token.
        if previous == Some(t.as_str()) && !shareable(node, snap.marker(t).is_some()) {
            return Some((
                t.clone(),
                "two tokens stand under one name, sharing one activity instance's state",
            ));
        }
        previous = Some(t);
        let timer = |kind| snap.timers.contains_key(TimerName::new(kind, t).as_str());
        let why = match &node.kind {
            NodeKind::Task(task) => match task.kind {
                TaskKind::Registered { .. }
                | TaskKind::Channel { .. }
                | TaskKind::Pull { .. }
                | TaskKind::Call(_) => (snap.marker(t).is_some() && !timer(TimerKind::Retry))
                    .then_some("the task is in a backoff window with no retry timer armed"),
                TaskKind::User { .. } | TaskKind::Receive { .. } => None,
                TaskKind::PassThrough | TaskKind::Script { .. } | TaskKind::Send { .. } => {
                    Some("a token stands at a task that never waits")
                }
            },
            NodeKind::IntermediateCatch(CatchTrigger::Timer(_)) => {
                // A catch racing after an event-based gateway has its token there.
                (!timer(TimerKind::Catch)).then_some("the timer catch has no timer armed")
            }
            NodeKind::IntermediateCatch(CatchTrigger::Link { .. }) => {
                Some("a token stands at a link catch, which never waits")
            }
            NodeKind::IntermediateCatch(_)
            | NodeKind::EventBasedGateway
            | NodeKind::SubProcess
            | NodeKind::EndEvent(EndKind::Compensation { .. })
            | NodeKind::IntermediateThrow(ThrowTrigger::Compensation { .. }) => None,
            _ => Some("a token stands at an element that never waits"),
        };
        if let Some(why) = why {
            return Some((t.clone(), why));
        }
    }
    None
}

/// Whether two tokens under one name at `node` can both still move: each gets an answer
/// of its own — two handler calls of one attempt in flight, two completions of one user
/// or receive task, two messages or one broadcast at a catch, a compensation throw's
/// shared wait, a sub-process's shared inside. A call, a request, an offer or a timer serves one token only, and so
/// does an attempt counter in a backoff window.
fn shareable(node: &qflow_loader::model::Node, parked: bool) -> bool {
    match &node.kind {
        NodeKind::Task(task) => match task.kind {
            TaskKind::Registered { .. } => !parked,
            TaskKind::User { .. } | TaskKind::Receive { .. } => true,
            _ => false,
        },
        NodeKind::IntermediateCatch(CatchTrigger::Message { .. } | CatchTrigger::Signal { .. }) => {
            true
        }
        // A sub-process holding two tokens (written before this engine refused a second
        // run) completes both once its inside is empty.
        NodeKind::SubProcess
        | NodeKind::EndEvent(EndKind::Compensation { .. })
        | NodeKind::IntermediateThrow(ThrowTrigger::Compensation { .. }) => true,
        _ => false,
    }
}

impl Run<'_> {
    /// Fails the instance with `STALLED` when the step left it running with a token
    /// nothing can move (E10). `input` names the step's input for the incident.
    pub(super) fn fail_if_stalled(&mut self, input: &str) {
        let Some((token, why)) = stalled(self.p, &self.snap) else {
            return;
        };
        let idx = self.p.find(&token);
        let message = format!(
            "the step ({input}) left the instance running with nothing that could move \
             the token at `{token}`: {why}. This is an engine defect; the instance is kept \
             for inspection"
        );
        self.fail(codes::STALLED, idx, None, message);
    }
}
