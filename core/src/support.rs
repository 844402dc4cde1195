//! Which elements this engine version can execute.
//!
//! The loader accepts the whole L2 dialect; the core runs most of it. What the engine
//! cannot run yet is listed here, so that a host refuses such a definition at deploy time
//! with a clear message instead of failing instances with `UNSUPPORTED_ELEMENT` at run
//! time. (A channel call runs; whether its channel is configured is the deploying
//! runtime's question.)

use qflow_loader::model::{Definition, NodeKind, TaskKind};

/// The nodes of `def` this engine cannot execute, as `(node id, what it is)`, in
/// document order. Empty when the whole definition runs.
pub fn unsupported_elements(def: &Definition) -> Vec<(String, &'static str)> {
    def.process
        .nodes
        .iter()
        .filter_map(|n| {
            let what = match &n.kind {
                NodeKind::Task(t) => match t.kind {
                    TaskKind::Send { message: None } => "send task without a message",
                    _ => return None,
                },
                _ => return None,
            };
            Some((n.id.clone(), what))
        })
        .collect()
}
