//! Re-adoption of in-flight attempts (SPEC C7a).
//!
//! When the shell loses track of a running attempt — its replica crashed, or died
//! mid-handler — the durable state still says which attempts are in flight: a token on a
//! registered task that is not in a backoff window. Re-adoption asks for exactly those
//! attempts again, with the same attempt number, the same inputs and the same timeout
//! window: no budget is spent and no state changes. Running a handler twice is the
//! at-least-once contract; the fence makes sure only one outcome is ever committed.

use qflow_loader::model::{Definition, NodeKind, TaskKind};

use crate::snapshot::Snapshot;
use crate::Effect;

/// The `RunTask` effects of every attempt in flight, in token order.
pub(super) fn in_flight_attempts(def: &Definition, snap: &Snapshot) -> Vec<Effect> {
    let p = &def.process;
    let mut effects = Vec::new();
    for node in snap.tokens() {
        let Some(idx) = p.find(node) else { continue };
        let NodeKind::Task(task) = &p.node(idx).kind else {
            continue;
        };
        let TaskKind::Registered { name } = &task.kind else {
            continue;
        };
        if snap.marker(node).is_some() {
            continue;
        }
        // Inputs are derived exactly as the first emission derived them; an input
        // mapping that cannot evaluate now could not have evaluated then either, so such
        // a task is left to its timeout rather than guessed at.
        let Ok(inputs) = super::flow::task_inputs(task, snap.variables()) else {
            continue;
        };
        effects.push(Effect::RunTask {
            node: node.clone(),
            handler: name.clone(),
            attempt: snap.attempt(node).max(1),
            inputs,
        });
    }
    effects
}
