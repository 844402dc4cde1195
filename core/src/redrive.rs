//! Which attempts are in flight, and their re-adoption (SPEC C7a).
//!
//! The rule lives here once: an attempt is in flight at a registered task that holds a
//! token and is not in a backoff window. The core asks it when an interruption ends an
//! attempt mid-flight, when the shell asks for re-adoption, and the runtime asks it (through
//! [`attempts_in_flight`]) to decide whether an instance needs its in-flight lease. A
//! channel call is not in flight in this sense: its request is a durable outbox row that
//! the dispatcher delivers again under the same key, so nothing of it is re-adopted.
//!
//! When the shell loses track of a running attempt — its replica crashed, or died
//! mid-handler — the durable state still says which attempts are in flight. Re-adoption
//! asks for exactly those attempts again, with the same attempt number, the same inputs and
//! the same timeout window: no budget is spent and no state changes. Running a handler
//! twice is the at-least-once contract; the fence makes sure only one outcome is ever
//! committed.

use qflow_loader::model::{Definition, NodeIdx, NodeKind, Process, Task, TaskKind};

use super::run::Run;
use crate::snapshot::Snapshot;
use crate::{codes, Attempt, AttemptOutcome, Effect, FailureKind};

/// An attempt in flight: the task, the handler it runs and which attempt it is.
#[derive(Debug, Clone)]
pub struct InFlight<'d> {
    pub idx: NodeIdx,
    /// Its name: the node id, or `<body>#<k>` for an inner instance.
    pub node: std::borrow::Cow<'d, str>,
    pub task: &'d Task,
    pub handler: &'d str,
    pub attempt: Attempt,
}

/// The attempt in flight at `idx`, if one is (the rule in the module documentation).
pub(crate) fn attempt_in_flight<'d>(
    p: &'d Process,
    snap: &Snapshot,
    idx: NodeIdx,
) -> Option<InFlight<'d>> {
    let n = p.node(idx);
    let NodeKind::Task(task) = &n.kind else {
        return None;
    };
    let TaskKind::Registered { name } = &task.kind else {
        return None;
    };
    let node = p.key(idx);
    if snap.marker(&node).is_some() || !snap.tokens().iter().any(|t| *t == *node) {
        return None;
    }
    Some(InFlight {
        idx,
        attempt: snap.attempt_in_progress(&node),
        node,
        task,
        handler: name,
    })
}

/// Every attempt in flight in `snap`, in token order.
pub fn attempts_in_flight<'d>(def: &'d Definition, snap: &Snapshot) -> Vec<InFlight<'d>> {
    let p = &def.process;
    let mut out: Vec<InFlight<'d>> = Vec::new();
    for node in snap.tokens() {
        let Some(idx) = p.find(node) else { continue };
        // Two tokens on one task are one attempt in flight.
        if out.iter().any(|f| f.idx == idx) {
            continue;
        }
        if let Some(f) = attempt_in_flight(p, snap, idx) {
            out.push(f);
        }
    }
    out
}

/// Whether any attempt is in flight in `snap` (what [`attempts_in_flight`] would list,
/// without building the list).
pub fn any_attempt_in_flight(def: &Definition, snap: &Snapshot) -> bool {
    let p = &def.process;
    snap.tokens().iter().any(|node| {
        p.find(node)
            .is_some_and(|idx| attempt_in_flight(p, snap, idx).is_some())
    })
}

/// How often one attempt may be re-adopted without an outcome being committed. A
/// replica's crash, a graceful shutdown's hand-over and an operator's repair each cost
/// one; a handful is what honest restarts need, and below the limit re-adoption stays
/// free (C7a: a crash is not the task's failure). An attempt re-adopted more often is
/// taking its replicas down with it — a handler that aborts the process, an evaluator
/// bug — and is failed with `READOPTION_LIMIT`, which spends budget like any failure
/// (a dead worker is not a free retry).
pub const READOPTIONS_MAX: u32 = 5;

impl Run<'_> {
    /// Re-adopts every attempt in flight (`Input::Redrive`): its `RunTask` again, same
    /// attempt, counted; past [`READOPTIONS_MAX`] a failed attempt instead.
    pub(super) fn readopt(&mut self) {
        let in_flight: Vec<(NodeIdx, Attempt)> = attempts_in_flight(self.def, &self.snap)
            .into_iter()
            .map(|f| (f.idx, f.attempt))
            .collect();
        for (idx, attempt) in in_flight {
            if !self.running() {
                return;
            }
            let node_key = self.id(idx);
            let node: &str = &node_key;
            let count = self.snap.readoptions(node).saturating_add(1);
            if count > READOPTIONS_MAX {
                let code = codes::READOPTION_LIMIT;
                let message = format!(
                    "attempt {attempt} of `{node}` was re-adopted {READOPTIONS_MAX} times \
                     without an outcome: its replicas keep dying while it runs"
                );
                self.attempt_ended(idx, attempt, AttemptOutcome::Failed, Some((code, &message)));
                self.attempt_failed(idx, FailureKind::Failed, code.to_owned(), message);
                continue;
            }
            // Inputs are derived exactly as the first emission derived them; an input
            // mapping that cannot evaluate now could not have evaluated then either, so
            // such a task is left to its timeout rather than guessed at.
            let NodeKind::Task(task) = &self.p.node(idx).kind else {
                continue;
            };
            let TaskKind::Registered { name } = &task.kind else {
                continue;
            };
            let vars = super::locals::scoped_vars(self.p, &self.snap, idx);
            let Ok(inputs) = super::mapping::task_inputs(task, &vars) else {
                continue;
            };
            self.snap.set_readoptions(node, count);
            self.effects.push(Effect::RunTask {
                node: node.to_string(),
                handler: name.clone(),
                attempt,
                inputs,
            });
        }
    }
}
