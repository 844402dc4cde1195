//! L7 structural classifier: does a definition need a durable store?
//!
//! A definition is stateful when any instance can wait beyond the call that drives it:
//! timers (catch, boundary, `q:timeout`), retries, channel calls, pull tasks, message
//! waits, user tasks, sends (they go through the outbox) and call activities. The reasons
//! are listed in document order so `qflow check` can say why. Pure function of the model.

use crate::model::*;

pub(crate) fn classify(def: &Definition) -> Classification {
    let mut reasons = Vec::new();
    for n in &def.process.nodes {
        for why in node_reasons(&n.kind, n.scope.is_some()) {
            reasons.push(format!("node `{}`: {why}", n.id));
        }
    }
    if reasons.is_empty() {
        Classification::Stateless
    } else {
        Classification::Stateful { reasons }
    }
}

/// `nested`: the node is inside a sub-process (a triggered start there is an event
/// sub-process's).
fn node_reasons(kind: &NodeKind, nested: bool) -> Vec<&'static str> {
    let mut out = Vec::new();
    match kind {
        NodeKind::Task(t) => {
            match t.kind {
                TaskKind::Channel { .. } => out.push("channel call"),
                TaskKind::Pull { .. } => out.push("pull task"),
                TaskKind::Receive { message: Some(_) } => out.push("receive task (message wait)"),
                TaskKind::Receive { message: None } => {
                    out.push("receive task without a message (waits for the API)")
                }
                TaskKind::User { .. } => out.push("user task (waits for the API)"),
                TaskKind::Send { .. } => out.push("send task (outbox)"),
                TaskKind::Call(_) => out.push("call activity (child instance)"),
                TaskKind::Registered { .. } | TaskKind::PassThrough | TaskKind::Script { .. } => {}
            }
            if t.retry.is_some() {
                out.push("q:retry");
            }
            if t.timeout.is_some() {
                out.push("q:timeout (timer)");
            }
        }
        NodeKind::IntermediateCatch(CatchTrigger::Timer(_)) => out.push("timer"),
        NodeKind::IntermediateCatch(CatchTrigger::Message { .. }) => out.push("message wait"),
        NodeKind::Boundary(Boundary {
            trigger: BoundaryTrigger::Timer(_),
            ..
        }) => out.push("timer boundary"),
        NodeKind::Boundary(Boundary {
            trigger: BoundaryTrigger::Message { .. },
            ..
        }) => out.push("message boundary (waits)"),
        NodeKind::IntermediateCatch(CatchTrigger::Signal { .. }) => out.push("signal wait"),
        NodeKind::Boundary(Boundary {
            trigger: BoundaryTrigger::Signal { .. },
            ..
        }) => out.push("signal boundary (waits)"),
        NodeKind::IntermediateCatch(CatchTrigger::Conditional(_)) => {
            out.push("conditional wait (variables)")
        }
        NodeKind::Boundary(Boundary {
            trigger: BoundaryTrigger::Conditional(_),
            ..
        }) => out.push("conditional boundary (variables)"),
        NodeKind::TriggeredStart(StartTrigger::Conditional(_)) => {
            out.push("event sub-process conditional start (variables)")
        }
        NodeKind::IntermediateThrow(ThrowTrigger::Signal { .. })
        | NodeKind::EndEvent(EndKind::Signal { .. }) => out.push("signal throw (outbox)"),
        NodeKind::IntermediateThrow(ThrowTrigger::Message { .. })
        | NodeKind::EndEvent(EndKind::Message { .. }) => out.push("message throw (outbox)"),
        NodeKind::TriggeredStart(StartTrigger::Message { .. }) if nested => {
            out.push("event sub-process message start (waits)")
        }
        NodeKind::TriggeredStart(StartTrigger::Signal { .. }) if nested => {
            out.push("event sub-process signal start (waits)")
        }
        NodeKind::TriggeredStart(StartTrigger::Timer(_)) if nested => {
            out.push("event sub-process timer start (timer)")
        }
        NodeKind::TriggeredStart(StartTrigger::Message { .. }) => {
            out.push("message start (deployment subscription)")
        }
        NodeKind::TriggeredStart(StartTrigger::Signal { .. }) => {
            out.push("signal start (deployment subscription)")
        }
        NodeKind::TriggeredStart(StartTrigger::Timer(_)) => {
            out.push("timer start (deployment schedule)")
        }
        NodeKind::EventBasedGateway => out.push("event-based gateway (waits)"),
        _ => {}
    }
    out
}
