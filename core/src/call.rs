//! Call activities (BPMN §10.3.5, `docs/call-activities.md`): each attempt of a call
//! activity is one child instance of the called process.
//!
//! - **Starting.** An attempt draws a call number from the incarnation sequence, writes
//!   it as `q/<node>` and emits [`Effect::StartChild`] with the task's inputs, keyed
//!   `<instance>/<call>`; the shell writes it to the outbox in the step's transaction and
//!   starts the child under an id derived from the key, with a link back
//!   ([`Input::StartCalled`], snapshot key `pa`).
//! - **Ending.** The child's ending step emits [`Effect::NotifyParent`]; its outcome comes
//!   back as [`Input::ChildEnded`] naming the call, stale unless the token still waits on
//!   exactly that call. Completed: the child's variables go through the output mappings
//!   and the token leaves. A BPMN error that escaped the child is thrown at the call
//!   activity (boundaries, enclosing scopes, event sub-processes), spending no budget.
//!   FAILED or cancelled: a failed attempt with `CALLED_INSTANCE_FAILED` — `q:retry`
//!   parks and a later attempt starts a new child, else the parent is FAILED and a resume
//!   starts a new child.
//! - **Cancelling.** One sync after every input ([`Run::sync_children`]) cancels the child
//!   of every `q/` entry whose wait is over without it: the token left (an interrupting
//!   boundary, a terminate end, a cancel), the node is in a backoff window (a `q:timeout`
//!   failed the attempt), or the instance is no longer running (a FAILED parent does no
//!   work; its resume starts new children). A child asked for in the same step is not
//!   started at all instead.

use qflow_loader::model::{NodeIdx, NodeKind, Process, Task, TaskKind};

use super::run::Run;
use crate::snapshot::{Snapshot, Status};
use crate::{codes, Attempt, AttemptOutcome, ChildOutcome, Definition, Effect, FailureKind};

/// The call activity at `idx`, if it is one.
pub(super) fn call_at(p: &Process, idx: NodeIdx) -> Option<&Task> {
    match &p.node(idx).kind {
        NodeKind::Task(t) if matches!(t.kind, TaskKind::Call(_)) => Some(t),
        _ => None,
    }
}

/// Whether the call activity `node` of a running instance still waits for the child of
/// call `call`. The shell asks it after starting a child, so that a child whose parent
/// stopped waiting while it was being started is cancelled at once.
pub fn child_waits(def: &Definition, snap: &Snapshot, node: &str, call: u32) -> bool {
    snap.status() == Status::Running && staleness(&def.process, snap, node, call).is_none()
}

/// Why `ChildEnded { node, call }` would change nothing, if it would.
pub(super) fn staleness(p: &Process, snap: &Snapshot, node: &str, call: u32) -> Option<String> {
    if p.find(node).and_then(|i| call_at(p, i)).is_none() {
        return Some(format!(
            "`{node}` is not a call activity of this definition"
        ));
    }
    if !snap.tokens.iter().any(|t| t == node) {
        return Some(format!("call activity `{node}` is not pending"));
    }
    if let Some(class) = snap.marker(node) {
        return Some(format!(
            "call activity `{node}` is in a backoff window ({class}); call {call} is over"
        ));
    }
    match snap.children.get(node) {
        Some(live) if *live == call => None,
        Some(live) => Some(format!(
            "call {call} of `{node}` is not the live call {live}"
        )),
        None => Some(format!("call activity `{node}` waits for no child")),
    }
}

impl Run<'_> {
    /// Starts attempt `attempt` of the call activity at `idx`: a new call, a new child.
    pub(super) fn start_child(&mut self, idx: NodeIdx, task: &Task, attempt: Attempt) {
        let TaskKind::Call(spec) = &task.kind else {
            return;
        };
        let variables = match self.map_inputs(idx, task) {
            Ok(v) => v,
            Err(e) => return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e),
        };
        if let Err(why) = crate::limits::check_variables(&variables) {
            let message = format!("the inputs of call activity `{}`: {why}", self.id(idx));
            return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
        }
        let node = self.id(idx).into_owned();
        // A wait begun again in one step (a loop back to it): the old child goes first.
        // A second token arriving while a child runs is another activity instance
        // (`<node>@<c>`, E9), with a call and a child of its own.
        if let Some(old) = self.snap.children.remove(&node) {
            self.cancel_child(&node, old);
        }
        let call = self.snap.incarnation.saturating_add(1);
        self.snap.incarnation = call;
        self.snap.children.insert(node.clone(), call);
        self.effects.push(Effect::StartChild {
            key: format!("{}/{call}", self.instance),
            node,
            call,
            attempt,
            process: spec.process.clone(),
            version: spec.version,
            variables,
        });
        self.arm_timeout(idx, task);
    }

    /// The attempt of the call activity at `idx` whose child is running, if one is.
    pub(super) fn child_in_flight(&self, idx: NodeIdx) -> Option<Attempt> {
        call_at(self.p, idx)?;
        let node_key = self.id(idx);
        let node: &str = &node_key;
        (self.snap.children.contains_key(node)
            && self.snap.marker(node).is_none()
            && self.snap.tokens.iter().any(|t| t == node))
        .then(|| self.snap.attempt_in_progress(node))
    }

    /// The child of call `call` at `node` ended with `outcome`, or raised an escalation
    /// (checked by `staleness`).
    pub(super) fn child_ended(&mut self, node: &str, outcome: ChildOutcome) {
        let idx = self.idx(node);
        if let ChildOutcome::Escalated { code } = outcome {
            // The child goes on; an interrupting boundary ends the wait, and the sync
            // then cancels it.
            return self.escalate_from_activity(idx, code.as_deref());
        }
        self.snap.children.remove(node);
        let attempt = self.snap.attempt_in_progress(node);
        match outcome {
            ChildOutcome::Completed { variables } => {
                // Zeebe's `propagateAllChildVariables="false"`: without output mappings
                // nothing of the child's comes back.
                let task = call_at(self.p, idx);
                let mapped = task.is_some_and(|t| !t.outputs.is_empty());
                let kept = mapped
                    || task.is_none_or(
                        |t| matches!(&t.kind, TaskKind::Call(c) if c.merge_child_variables),
                    );
                let variables = if kept { variables } else { Default::default() };
                // A child's variables grow over its steps: merged whole, they are held to
                // the bounds any result is (the mappings check what they write).
                if let (false, Err(why)) = (mapped, crate::limits::check_variables(&variables)) {
                    let code = codes::OUTPUTS_REFUSED;
                    let message = format!("the called instance's variables are refused: {why}");
                    let outcome = AttemptOutcome::Failed;
                    self.attempt_ended(idx, attempt, outcome, Some((code, &message)));
                    return self.attempt_failed(idx, FailureKind::Failed, code.to_owned(), message);
                }
                self.attempt_ended(idx, attempt, AttemptOutcome::Ok, None);
                self.complete_activity(idx, variables);
            }
            ChildOutcome::BpmnError { code, message } => {
                let reported = (code.as_deref().unwrap_or_default(), message.as_str());
                self.attempt_ended(idx, attempt, AttemptOutcome::BpmnError, Some(reported));
                let message = format!("call activity `{node}`: the called instance threw");
                self.throw_from_activity(idx, code, message, codes::UNCAUGHT_BPMN_ERROR);
            }
            ChildOutcome::Failed { code, message } => {
                let message = if message.is_empty() {
                    format!("the called instance ended with `{code}`")
                } else {
                    format!("the called instance ended with `{code}`: {message}")
                };
                self.call_failed(idx, attempt, codes::CALLED_INSTANCE_FAILED, message);
            }
            ChildOutcome::NotStarted { message } => {
                self.call_failed(idx, attempt, codes::CALLED_PROCESS_NOT_FOUND, message);
            }
            ChildOutcome::Escalated { .. } => {}
        }
    }

    /// The attempt of the call activity at `idx` failed with `code`.
    fn call_failed(&mut self, idx: NodeIdx, attempt: Attempt, code: &str, message: String) {
        let outcome = FailureKind::Failed.outcome();
        self.attempt_ended(idx, attempt, outcome, Some((code, &message)));
        self.attempt_failed(idx, FailureKind::Failed, code.to_owned(), message);
    }

    /// An escalation nothing in this instance caught: a called instance raises it at its
    /// call activity in the parent, and goes on.
    pub(super) fn escalate_to_parent(&mut self, code: Option<&str>) {
        let Some(parent) = self.snap.parent.as_deref().cloned() else {
            return;
        };
        let n = self.snap.incarnation.saturating_add(1);
        self.snap.incarnation = n;
        self.effects.push(Effect::NotifyParent {
            parent,
            key: format!("{}/{n}", self.instance),
            outcome: ChildOutcome::Escalated {
                code: code.map(str::to_owned),
            },
        });
    }

    /// Cancels the child of every call whose wait is over without it (the module
    /// documentation). Runs after every input, beside the subscription sync.
    pub(super) fn sync_children(&mut self) {
        if self.snap.children.is_empty() {
            return;
        }
        let running = self.running();
        let over: Vec<(String, u32)> = self
            .snap
            .children
            .iter()
            .filter(|(node, _)| {
                !running
                    || self.snap.marker(node).is_some()
                    || !self.snap.tokens.iter().any(|t| t == *node)
            })
            .map(|(node, call)| (node.clone(), *call))
            .collect();
        for (node, call) in over {
            self.snap.children.remove(&node);
            self.cancel_child(&node, call);
        }
    }

    /// Stops the child of `call` at `node`: not asked for at all when this step asked
    /// for it, else cancelled.
    fn cancel_child(&mut self, node: &str, call: u32) {
        let asked = self.effects.iter().position(
            |e| matches!(e, Effect::StartChild { node: n, call: c, .. } if n == node && *c == call),
        );
        match asked {
            Some(at) => {
                self.effects.remove(at);
            }
            None => self.effects.push(Effect::CancelChild {
                node: node.to_owned(),
                key: format!("{}/{call}", self.instance),
            }),
        }
    }

    /// A called instance that ended in this step reports how to its parent: one that
    /// began the step running (or not yet started), or was resumed by it.
    pub(super) fn notify_parent(&mut self, ended_before: bool) {
        let Some(parent) = self.snap.parent.as_deref().cloned() else {
            return;
        };
        if ended_before || !self.snap.status.is_terminal() {
            return;
        }
        let outcome = match self.snap.status {
            Status::Cancelled if self.escaped.is_some() => {
                let (code, message) = self.escaped.take().unwrap_or_default();
                ChildOutcome::BpmnError { code, message }
            }
            Status::Completed => ChildOutcome::Completed {
                variables: self.snap.vars.clone(),
            },
            Status::Cancelled => ChildOutcome::Failed {
                code: "CANCELLED".to_owned(),
                message: "the called instance was cancelled".to_owned(),
            },
            _ => {
                let failure = self.snap.failure();
                let code = failure.as_ref().map(|f| f.code.clone()).unwrap_or_default();
                let message = self
                    .effects
                    .iter()
                    .rev()
                    .find_map(|e| match e {
                        Effect::OpenIncident { message, .. } => Some(message.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                ChildOutcome::Failed { code, message }
            }
        };
        let n = self.snap.incarnation.saturating_add(1);
        self.snap.incarnation = n;
        let key = format!("{}/{n}", self.instance);
        self.effects.push(Effect::NotifyParent {
            parent,
            key,
            outcome,
        });
    }
}
