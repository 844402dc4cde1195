//! Operator repairs (SPEC O3, O4a): resuming a FAILED instance and running a parked
//! task's next attempt now. Both are inputs stepped under the claim like any other, so
//! the core re-checks their precondition (`flow::staleness`): a resume of an instance
//! that is no longer FAILED, or a retry-now with no backoff pending, changes nothing.
//!
//! Resume gives every waiting token back what FAILED took from it (its timers, its
//! in-flight attempt) and tries the failed node again:
//! - a registered task runs a **new** attempt — the attempt number always moves on, so
//!   the idempotency key of the attempt after a resume is never one a counterpart has
//!   seen. With [`Budget::Keep`] the attempts burned still count against the policy (a
//!   task that exhausted it gets one attempt, then FAILED again); with
//!   [`Budget::Reset`] the budget base `b/<node>` records the attempts burned, and the
//!   policy's budget, backoff curve and `maxElapsed` start over from there.
//! - any other node (a gateway with no flow to take, a mapping that failed) is arrived
//!   at again, so a model fixed by migration decides afresh.
//!
//! Timers that FAILED resolved are armed again from the resume instant (a timer catch
//! event, boundaries, `q:timeout` windows): the wait restarts, it does not resume.

use qflow_loader::model::{CatchTrigger, NodeIdx, NodeKind, TaskKind};
use serde::{Deserialize, Serialize};

use super::run::Run;
use super::timers::{TimerKind, TimerName};
use super::Effect;
use crate::snapshot::Status;

/// What a resume does with the retry budget a FAILED task burned (O3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// The attempts burned still count.
    #[default]
    Keep,
    /// The policy's budget starts over; attempt numbers keep increasing.
    Reset,
}

impl Run<'_> {
    /// Resumes a FAILED instance (the precondition was checked by `staleness`).
    pub(super) fn resume(&mut self, budget: Budget) {
        let failure = self.snap.failure();
        let failed = failure
            .as_ref()
            .and_then(|f| f.node.as_deref())
            .and_then(|n| self.p.find(n));
        self.snap.status = Status::Running;
        self.snap.clear_failure();
        // The process's event sub-processes wait again, their timers from now.
        if !self.arm_event_starts(None) {
            return;
        }
        self.effects.push(Effect::ResolveIncident {
            node: failure.and_then(|f| f.node).unwrap_or_default(),
        });
        let mut waiting: Vec<NodeIdx> = Vec::new();
        for node in &self.snap.tokens {
            if let Some(idx) = self.p.find(node) {
                if Some(idx) != failed && !waiting.contains(&idx) {
                    waiting.push(idx);
                }
            }
        }
        for idx in waiting {
            self.wait_again(idx);
        }
        self.restart_owed_handlers(failed);
        let Some(idx) = failed else {
            self.snap.spent.clear();
            return;
        };
        let registered = matches!(
            &self.p.node(idx).kind,
            NodeKind::Task(t) if matches!(
                t.kind,
                TaskKind::Registered { .. }
                    | TaskKind::Pull { .. }
                    | TaskKind::Channel { .. }
                    | TaskKind::Call(_)
            )
        );
        if registered {
            self.try_again(idx, budget);
        } else if self.snap.tokens.iter().any(|t| t == &*self.id(idx)) {
            self.wait_again(idx);
            // An ad-hoc sub-process that failed with nothing inside (its completion
            // condition or output mappings failed, or it was idle) is judged again as if
            // its last path had just ended.
            if let Some(ad_hoc) = self.p.ad_hoc(idx) {
                let keys = self.snap.tokens.iter().chain(self.snap.joins.keys());
                if super::instances::first_inside(self.p, keys, idx).is_none() {
                    self.ad_hoc_path_completed(idx, ad_hoc);
                }
            }
        } else {
            self.queue.push_back((idx, None));
        }
        // The waits are armed again; what moves on from here is entered afresh.
        self.snap.spent.clear();
    }

    /// A FAILED registered task's next attempt.
    fn try_again(&mut self, idx: NodeIdx, budget: Budget) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        if !self.snap.tokens.iter().any(|t| t == node) {
            self.add_token(idx);
        }
        if !self.arm_boundaries(idx) {
            return;
        }
        let next = self.snap.attempt_in_progress(node).next();
        self.snap.markers.remove(node);
        if budget == Budget::Reset {
            self.snap.first_failure_ms.remove(node);
            self.snap.set_budget_base(node, next.get() - 1);
        }
        if super::pull::pull_at(self.p, idx).is_some() {
            // A pull task's budget is the attempts left: a reset gives the model's back,
            // keeping it gives the one attempt a resume is for.
            match budget {
                Budget::Reset => {
                    self.snap.pull_retries.remove(node);
                }
                Budget::Keep => {
                    let left = self.snap.pull_retries(node).unwrap_or(0).max(1);
                    self.snap.set_pull_retries(node, left);
                }
            }
        }
        self.snap.set_attempt(node, next);
        self.run_attempt(idx, next);
    }

    /// A token FAILED froze waits again: its timers are armed from now, a registered
    /// task's attempt runs (the one in flight again, the parked one at once).
    fn wait_again(&mut self, idx: NodeIdx) {
        match &self.p.node(idx).kind {
            NodeKind::Task(task) => {
                if !self.arm_boundaries(idx) {
                    return;
                }
                match &task.kind {
                    TaskKind::Registered { .. } | TaskKind::Pull { .. } | TaskKind::Call(_) => {
                        let node_key = self.id(idx);
                        let node: &str = &node_key;
                        self.snap.markers.remove(node);
                        let attempt = self.snap.attempt_in_progress(node);
                        self.run_attempt(idx, attempt);
                    }
                    TaskKind::Channel { .. } => self.resend_request(idx),
                    _ => self.arm_timeout(idx, task),
                }
            }
            NodeKind::SubProcess => {
                let _armed = self.arm_boundaries(idx);
            }
            NodeKind::IntermediateCatch(CatchTrigger::Timer(timer)) => {
                if let Some(due) = self.due_at(idx, timer) {
                    self.arm(TimerName::new(TimerKind::Catch, &self.id(idx)), due);
                }
            }
            NodeKind::EventBasedGateway => {
                for f in &self.p.node(idx).outgoing {
                    let target = self.p.attached(idx, self.p.flow(*f).target);
                    if let NodeKind::IntermediateCatch(CatchTrigger::Timer(timer)) =
                        &self.p.node(target).kind
                    {
                        let Some(due) = self.due_at(target, timer) else {
                            return;
                        };
                        self.arm(TimerName::new(TimerKind::Catch, &self.id(target)), due);
                    }
                    self.condition_armed(target);
                }
            }
            NodeKind::IntermediateCatch(CatchTrigger::Conditional(_)) => self.condition_armed(idx),
            _ => {}
        }
    }

    /// Runs the next attempt of the parked tasks `targets` now: their park timers go, the
    /// attempt counter stays (O4a).
    pub(super) fn retry_now(&mut self, targets: Vec<NodeIdx>) {
        for idx in targets {
            self.resolve(&TimerName::new(TimerKind::Retry, &self.id(idx)));
            self.redrive(idx);
        }
    }
}

/// The tasks a retry-now of `node` (every parked task when `None`) would run now: those
/// holding a token in a backoff window, in token order.
pub(super) fn parked(
    p: &qflow_loader::model::Process,
    snap: &crate::snapshot::Snapshot,
    node: Option<&str>,
) -> Vec<NodeIdx> {
    let mut out = Vec::new();
    for t in snap.tokens() {
        if node.is_some_and(|n| n != t) || snap.marker(t).is_none() {
            continue;
        }
        if let Some(idx) = p.find(t) {
            if !out.contains(&idx) {
                out.push(idx);
            }
        }
    }
    out
}
