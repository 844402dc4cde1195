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
//!
//! A sub-process waits on its inside, and its inside can stop moving without any token
//! standing anywhere a defect would put it ([`idle_scope`]): an ad-hoc sub-process may
//! wait with nothing inside (Zeebe's rule: it activated nothing, or its completion
//! condition did not hold), and any sub-process instance — an embedded one, a
//! multi-instance inner instance, an event sub-process run — may be left holding only
//! join arrivals that no token inside can complete (an exclusive split into a parallel
//! join). When every token is such a scope and no event could end one, the instance
//! fails `AD_HOC_IDLE` or `STUCK_AT_JOIN` rather than `STALLED`: that is the model's
//! outcome, not a defect. (`STUCK_AT_JOIN` at the process level, where no token at all
//! is left, is `flow::settle`'s.)

use qflow_loader::model::{
    BoundaryTrigger, CatchTrigger, EndKind, NodeIdx, NodeKind, Process, StartTrigger, TaskKind,
    ThrowTrigger,
};

use super::codes;
use super::event_sub::armed_starts;
use super::instances;
use super::run::Run;
use super::timers::{TimerKind, TimerName};
use crate::snapshot::{Snapshot, Status};

/// The first token of a running instance that nothing can move, why, and the failure
/// code: `CONDITION_IDLE` for a wait for a condition nothing can change any more (the
/// model's outcome), else `STALLED` (a defect); `None` when every token can move (or
/// the instance is not running).
pub(crate) fn stalled(
    p: &Process,
    snap: &Snapshot,
) -> Option<(String, &'static str, &'static str)> {
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
                codes::STALLED,
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
            NodeKind::IntermediateCatch(CatchTrigger::Conditional(_)) => {
                (!can_change_variables(p, snap)).then_some(CONDITION_WAIT)
            }
            NodeKind::EventBasedGateway
                if only_conditions_after(p, idx) && !can_change_variables(p, snap) =>
            {
                Some(CONDITION_WAIT)
            }
            NodeKind::IntermediateCatch(_)
            | NodeKind::EventBasedGateway
            | NodeKind::SubProcess
            | NodeKind::EndEvent(EndKind::Compensation { .. })
            | NodeKind::IntermediateThrow(ThrowTrigger::Compensation { .. }) => None,
            _ => Some("a token stands at an element that never waits"),
        };
        if let Some(why) = why {
            let code = if why == CONDITION_WAIT {
                codes::CONDITION_IDLE
            } else {
                codes::STALLED
            };
            return Some((t.clone(), why, code));
        }
    }
    None
}

/// Why a token waiting for a condition is stalled (`CONDITION_IDLE`, not `STALLED`).
const CONDITION_WAIT: &str = "it waits for a condition, and nothing left in the instance can \
                              change a variable";

/// Whether every event racing after the event-based gateway at `gw` is conditional.
fn only_conditions_after(p: &Process, gw: NodeIdx) -> bool {
    p.node(gw).outgoing.iter().all(|f| {
        matches!(
            p.node(p.flow(*f).target).kind,
            NodeKind::IntermediateCatch(CatchTrigger::Conditional(_))
        )
    })
}

/// Whether anything in the running instance could still change a variable, and so
/// make a conditional catch's condition true: a token anywhere but at a conditional
/// wait (a task, a timer, a message wait...), a sub-process with a boundary event that
/// waits for a timer, a message or a signal, or an armed event sub-process start of
/// those kinds. Only variable changes made by the instance's own steps reach a
/// condition: qflow has no operation that sets an instance's variables.
fn can_change_variables(p: &Process, snap: &Snapshot) -> bool {
    let mover = snap.tokens.iter().any(|t| {
        let Some(idx) = p.find(t) else {
            // Unknown: the benefit of the doubt.
            return true;
        };
        match &p.node(idx).kind {
            NodeKind::IntermediateCatch(CatchTrigger::Conditional(_)) => false,
            NodeKind::EventBasedGateway => !only_conditions_after(p, idx),
            NodeKind::SubProcess => boundary_could_fire(p, snap, idx),
            _ => true,
        }
    });
    mover || start_could_fire(p, snap)
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

/// A scope instance that nothing inside can move any more, and what is left in it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Idle {
    /// An ad-hoc sub-process instance with no token inside: it activated nothing, its
    /// completion condition did not hold when its last path ended, or what is left inside
    /// are join arrivals (`AD_HOC_IDLE`).
    AdHoc { scope: String },
    /// A sub-process instance (embedded, a multi-instance inner instance, an event
    /// sub-process run) with no token inside and the arrivals of `join` (the first in
    /// key order) left inside it (`STUCK_AT_JOIN`).
    Join { scope: String, join: String },
}

/// The scope instance nothing can move any more, if the instance is stuck in one:
/// running; every token is a sub-process instance, and every one of them that has no
/// other token inside it either is an ad-hoc instance or holds join arrivals inside; and
/// nothing could fire on any of them ([`could_fire`]). The first such scope in frontier
/// order is named.
///
/// After a step's arrivals are drained, join arrivals in a scope instance with no token
/// inside can never complete: only a token of that instance reaches its joins (flows do
/// not cross a scope's edge), and an inclusive join that could fire has fired
/// (`flow::settle`). Anything else — a token at a task, a catch, a gateway; a scope with
/// nothing inside that is not ad-hoc; an id the definition lacks — might still move or
/// end the instance (a terminate end, an error or signal reaching a boundary), so the
/// judgement errs on the side of waiting, and fails the instance on a later step, once
/// that token has gone and nothing else could move it.
pub(crate) fn idle_scope(p: &Process, snap: &Snapshot) -> Option<Idle> {
    if snap.status != Status::Running || (snap.joins.is_empty() && p.ad_hocs.is_empty()) {
        return None;
    }
    let scope = |t: &String| {
        p.find(t)
            .filter(|idx| matches!(p.node(*idx).kind, NodeKind::SubProcess))
    };
    // One linear pass first: a token at anything but a sub-process may still move.
    if !snap.tokens.iter().all(|t| scope(t).is_some()) {
        return None;
    }
    let mut idle: Option<Idle> = None;
    for t in &snap.tokens {
        let idx = scope(t)?;
        // A scope with a token inside waits on it; that token is judged on its own.
        if instances::first_inside(p, &snap.tokens, idx).is_some() {
            continue;
        }
        let join = match p.ad_hoc(idx) {
            Some(_) => None,
            // A plain scope with nothing inside completes in `settle`; one is here only
            // from a snapshot this judgement does not understand.
            None => Some(instances::first_inside(p, snap.joins.keys(), idx)?),
        };
        if idle.is_none() {
            let scope = t.clone();
            idle = Some(match join {
                None => Idle::AdHoc { scope },
                Some(join) => Idle::Join {
                    scope,
                    join: p.key(join).into_owned(),
                },
            });
        }
    }
    let idle = idle?;
    (!could_fire(p, snap)).then_some(idle)
}

/// Whether an event could still fire with no work going on: a boundary of a token that
/// fires from outside (its timer armed, a message, a signal — interrupting or not), or
/// an armed event sub-process with such a start (in a scope that holds a token, or the
/// process). Error, escalation and compensation triggers need work to throw them.
fn could_fire(p: &Process, snap: &Snapshot) -> bool {
    snap.tokens
        .iter()
        .filter_map(|t| p.find(t))
        .any(|host| boundary_could_fire(p, snap, host))
        || start_could_fire(p, snap)
}

/// Whether a boundary event of the activity instance `host` fires from outside: its
/// timer armed (a cycle that ran out is spent), a message, a signal.
fn boundary_could_fire(p: &Process, snap: &Snapshot, host: NodeIdx) -> bool {
    p.boundaries_of(host.plain()).any(|b| {
        let NodeKind::Boundary(bd) = &p.node(b).kind else {
            return false;
        };
        match &bd.trigger {
            BoundaryTrigger::Timer(_) => timer_armed(p, snap, p.attached(host, b)),
            BoundaryTrigger::Message { .. } | BoundaryTrigger::Signal { .. } => true,
            _ => false,
        }
    })
}

/// Whether an armed event sub-process start fires from outside, as a boundary does.
fn start_could_fire(p: &Process, snap: &Snapshot) -> bool {
    armed_starts(p, snap)
        .into_iter()
        .any(|start| match p.start_trigger(start) {
            Some(StartTrigger::Timer(_)) => timer_armed(p, snap, start),
            Some(StartTrigger::Message { .. } | StartTrigger::Signal { .. }) => true,
            _ => false,
        })
}

/// Whether the boundary timer (`b:`) of `at` — a boundary event, an event sub-process
/// start — is armed.
fn timer_armed(p: &Process, snap: &Snapshot, at: NodeIdx) -> bool {
    snap.timers
        .contains_key(TimerName::new(TimerKind::Boundary, &p.key(at)).as_str())
}

impl Run<'_> {
    /// Fails the instance when the step left it running with nothing that could move
    /// it: `AD_HOC_IDLE` or `STUCK_AT_JOIN` when a scope's inside stopped moving
    /// ([`idle_scope`], the model's outcome), `STALLED` when a token stands where
    /// nothing can move it (E10, a defect). `input` names the step's input for the
    /// incident.
    pub(super) fn fail_if_stalled(&mut self, input: &str) {
        if let Some(idle) = idle_scope(self.p, &self.snap) {
            return self.fail_idle(idle);
        }
        let Some((token, why, code)) = stalled(self.p, &self.snap) else {
            return;
        };
        let idx = self.p.find(&token);
        if code == codes::CONDITION_IDLE {
            let message = format!(
                "the token at `{token}` waits for a condition, and nothing left in the \
                 instance can change a variable. Camunda would wait for a variable set \
                 through its API, which qflow does not have; migrate or cancel the instance"
            );
            return self.fail(codes::CONDITION_IDLE, idx, None, message);
        }
        let message = format!(
            "the step ({input}) left the instance running with nothing that could move \
             the token at `{token}`: {why}. This is an engine defect; the instance is kept \
             for inspection"
        );
        self.fail(codes::STALLED, idx, None, message);
    }

    /// Fails the instance stuck in the scope instance `idle` names.
    fn fail_idle(&mut self, idle: Idle) {
        match idle {
            // Stuck in an ad-hoc sub-process: a model or data outcome, said as such.
            Idle::AdHoc { scope } => {
                let idx = self.p.find(&scope);
                let message = format!(
                    "ad-hoc sub-process `{scope}` has no active element (it activated none, or \
                     its completion condition did not hold when its last path ended), and no \
                     boundary or event sub-process can end it: nothing can move the instance. \
                     Zeebe would wait for an activation through its API, which qflow does not \
                     have; migrate or cancel the instance"
                );
                self.fail(codes::AD_HOC_IDLE, idx, None, message);
            }
            // The process level's deadlock (`settle`), one scope down: the join is the
            // failed node, as it is there, so a resume arrives at it again.
            Idle::Join { scope, join } => {
                let idx = self.p.find(&join);
                let message = format!(
                    "no token is left in sub-process `{scope}` that could complete join \
                     `{join}`, and no boundary or event sub-process can end it: nothing can \
                     move the instance. Zeebe and Camunda 7 would leave it active for ever; \
                     migrate or cancel the instance"
                );
                self.fail(codes::STUCK_AT_JOIN, idx, None, message);
            }
        }
    }
}
