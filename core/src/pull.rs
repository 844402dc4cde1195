//! Pull tasks (SPEC P1): a task external workers fetch, lock and answer over the API.
//!
//! A token at a pull task **offers** its attempt: the step emits
//! [`Effect::OfferPullTask`], which the shell writes as a row of the store's pull-task
//! family in the step's own transaction; workers find offered rows by topic. A
//! fetch-and-lock is an input ([`Input::PullLocked`](crate::Input::PullLocked)) stepped
//! under the claim like any other: the lock and its worker are snapshot keys (`w/<node>`,
//! `u/<node>`), and the lock's expiry is an ordinary timer row `l:<node>` — one
//! scheduling path for everything that waits.
//!
//! The budget is the pull surface's own (never `q:retry`, L6): `p/<node>` holds the
//! attempts left, counting the one in progress, once a failure set it; before that the
//! model's `retries` (Zeebe, Camunda) or [`PULL_RETRIES_DEFAULT`]. A worker's failure
//! reports the attempts left (Camunda's `retries`); 0 ends the instance FAILED. An
//! expired lock is a failed attempt with `LOCK_EXPIRED` that spends one attempt: a
//! vanished worker is not a free retry. A BPMN error routes and spends nothing. A
//! failure with a retry timeout parks the task (`m/<node>` marker, `r:<node>` timer) and
//! the park's firing offers the next attempt, exactly as a registered task's backoff.
//!
//! Every answer names its worker and attempt; one from a worker that does not hold the
//! live lock (it expired, another worker took the task over, the attempt is over) is
//! stale, and the reason says which, so the API can refuse it honestly.

use qflow_loader::model::{Definition, NodeIdx, NodeKind, Process, Task, TaskKind, Variables};

use super::run::Run;
use super::timers::{TimerKind, TimerName};
use crate::snapshot::Snapshot;
use crate::{codes, Attempt, AttemptOutcome, Effect, FailureKind, Input, PullLock};

/// The attempts a pull task has when its model names no `retries`.
pub const PULL_RETRIES_DEFAULT: u32 = 3;

/// The marker class of a pull task parked after a worker's failure.
const CLASS_FAILED: &str = "failed";

/// A pull task of a definition: its node, topic and model budget.
#[derive(Debug, Clone)]
pub struct PullTask<'d> {
    pub idx: NodeIdx,
    /// Its name: the node id, or `<body>#<k>` for an inner instance.
    pub node: std::borrow::Cow<'d, str>,
    pub topic: &'d str,
    pub task: &'d Task,
    /// The attempts the model gives it (`retries`, or [`PULL_RETRIES_DEFAULT`]).
    pub retries: u32,
}

/// The pull task `node` of `def`, if it is one.
pub fn pull_task<'d>(def: &'d Definition, node: &str) -> Option<PullTask<'d>> {
    let p = &def.process;
    p.find(node).and_then(|idx| pull_at(p, idx))
}

pub(crate) fn pull_at(p: &Process, idx: NodeIdx) -> Option<PullTask<'_>> {
    let n = p.node(idx);
    let NodeKind::Task(task) = &n.kind else {
        return None;
    };
    let TaskKind::Pull { topic, retries } = &task.kind else {
        return None;
    };
    Some(PullTask {
        idx,
        node: p.key(idx),
        topic,
        task,
        retries: retries.unwrap_or(PULL_RETRIES_DEFAULT),
    })
}

/// The variables a worker fetching the pull task `node` receives: its input mappings
/// over the instance variables, or every instance variable when it has none.
pub fn pull_inputs(def: &Definition, snap: &Snapshot, node: &str) -> Result<Variables, String> {
    let task = pull_task(def, node).ok_or_else(|| format!("`{node}` is not a pull task"))?;
    let vars = super::locals::scoped_vars(&def.process, snap, task.idx);
    super::mapping::task_inputs(task.task, &vars)
}

/// Why a pull input does not apply to `snap`, or `None`. The reasons are meant for the
/// worker that sent it: they say whether its lock expired, another worker holds the
/// task, or the attempt is over.
pub(super) fn staleness(
    def: &Definition,
    snap: &Snapshot,
    input: &Input,
    now_ms: i64,
) -> Option<String> {
    let (node, attempt) = (input.node()?, input.attempt()?);
    if pull_task(def, node).is_none() {
        return Some(format!("`{node}` is not a pull task of this definition"));
    }
    if matches!(input, Input::PullBpmnError { .. }) {
        if let Some((element, _)) = qflow_loader::model::listener_of(node) {
            return Some(format!(
                "`{node}` is an execution listener of `{element}`, whose job cannot throw a \
                 BPMN error (as in Zeebe): complete it, or fail it to retry or raise an \
                 incident"
            ));
        }
    }
    if !snap.tokens().iter().any(|t| t == node) {
        return Some(format!("pull task `{node}` is not pending"));
    }
    if let Some(class) = snap.marker(node) {
        return Some(format!(
            "pull task `{node}` is waiting to be offered again after a failure ({class}); \
             attempt {attempt} is over"
        ));
    }
    let live = snap.attempt_in_progress(node);
    if attempt != live {
        return Some(format!(
            "attempt {attempt} of `{node}` is over: the live attempt is {live}"
        ));
    }
    let lock = snap.lock(node);
    let worker = match input {
        Input::PullLocked { .. } => {
            return lock.map(|(holder, until)| {
                format!(
                    "attempt {attempt} of `{node}` is locked by worker `{holder}` until {until}"
                )
            });
        }
        Input::PullUnlocked { worker: None, .. } => None,
        Input::PullUnlocked {
            worker: Some(w), ..
        }
        | Input::PullCompleted { worker: w, .. }
        | Input::PullFailed { worker: w, .. }
        | Input::PullBpmnError { worker: w, .. }
        | Input::PullLockExtended { worker: w, .. } => Some(w.as_str()),
        _ => return None,
    };
    let Some((holder, until)) = lock else {
        return Some(format!(
            "attempt {attempt} of `{node}` is not locked by any worker"
        ));
    };
    if let Some(w) = worker {
        if w != holder {
            return Some(format!(
                "attempt {attempt} of `{node}` is locked by worker `{holder}`, not `{w}`"
            ));
        }
    }
    (now_ms >= until).then(|| {
        format!(
            "the lock of worker `{holder}` on attempt {attempt} of `{node}` expired at {until}; \
             the attempt counts as failed"
        )
    })
}

/// Why a [`Input::PullRetriesSet`] does not apply, or `None`: it needs a pull task with
/// a token, its live attempt, at least one retry, and a running instance or one FAILED
/// at that task (`step` has already refused it for any other terminal status).
pub(super) fn retries_staleness(
    def: &Definition,
    snap: &Snapshot,
    input: &Input,
) -> Option<String> {
    let Input::PullRetriesSet {
        node,
        attempt,
        retries,
    } = input
    else {
        return None;
    };
    if pull_task(def, node).is_none() {
        return Some(format!("`{node}` is not a pull task of this definition"));
    }
    if *retries == 0 {
        return Some("retries must be at least 1 (a job with none left fails)".to_owned());
    }
    if snap.status() == crate::Status::Failed
        && snap.failure().and_then(|f| f.node).as_deref() != Some(node.as_str())
    {
        return Some(format!(
            "the instance is FAILED, and not at pull task `{node}`"
        ));
    }
    if !snap.tokens().iter().any(|t| t == node) {
        return Some(format!("pull task `{node}` is not pending"));
    }
    let live = snap.attempt_in_progress(node);
    (*attempt != live)
        .then(|| format!("attempt {attempt} of `{node}` is over: the live attempt is {live}"))
}

impl Run<'_> {
    /// Offers `attempt` of the pull task at `idx` to workers: a fresh row, no lock.
    pub(super) fn offer_pull(&mut self, idx: NodeIdx, attempt: Attempt) {
        let Some(pull) = pull_at(self.p, idx) else {
            return;
        };
        self.snap.clear_lock(&pull.node);
        self.effects.push(Effect::OfferPullTask {
            node: pull.node.to_string(),
            topic: pull.topic.to_owned(),
            attempt,
            lock: None,
        });
        self.arm_timeout(idx, pull.task);
    }

    /// Withdraws the pull task at `idx` from workers: its row goes and any lock with it.
    pub(super) fn withdraw_pull(&mut self, idx: NodeIdx) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        self.snap.clear_lock(node);
        self.resolve(&TimerName::new(TimerKind::Lock, node));
        self.effects.push(Effect::WithdrawPullTask {
            node: node.to_string(),
        });
    }

    /// Withdraws every pull task holding a token (the instance is FAILED: nothing of it
    /// may be fetched until an operator resumes it).
    pub(super) fn withdraw_all_pulls(&mut self) {
        let pulls: Vec<NodeIdx> = self
            .snap
            .tokens
            .iter()
            .filter_map(|t| self.p.find(t))
            .filter(|idx| pull_at(self.p, *idx).is_some())
            .collect();
        for idx in pulls {
            self.withdraw_pull(idx);
        }
    }

    /// Applies a pull input that passed [`staleness`].
    pub(super) fn apply_pull(&mut self, input: Input) {
        let Some(idx) = input.node().and_then(|n| self.p.find(n)) else {
            return;
        };
        let attempt = self.snap.attempt_in_progress(&self.id(idx));
        match input {
            Input::PullLocked {
                worker, lock_ms, ..
            }
            | Input::PullLockExtended {
                worker, lock_ms, ..
            } => self.lock_pull(idx, attempt, &worker, lock_ms),
            Input::PullUnlocked { .. } => {
                self.resolve(&TimerName::new(TimerKind::Lock, &self.id(idx)));
                self.offer_pull(idx, attempt);
            }
            Input::PullCompleted {
                worker, variables, ..
            } => {
                self.pull_attempt_ended(idx, attempt, AttemptOutcome::Ok, None, worker);
                self.withdraw_pull(idx);
                self.complete_activity(idx, variables);
            }
            Input::PullFailed {
                worker,
                retries,
                retry_timeout_ms,
                message,
                ..
            } => {
                let code = codes::PULL_TASK_FAILED;
                let outcome = AttemptOutcome::Failed;
                self.pull_attempt_ended(idx, attempt, outcome, Some((code, &message)), worker);
                self.pull_failed(idx, retries, retry_timeout_ms, code, message);
            }
            Input::PullBpmnError {
                worker,
                code,
                message,
                variables,
                ..
            } => {
                let outcome = AttemptOutcome::BpmnError;
                self.pull_attempt_ended(idx, attempt, outcome, Some((&code, &message)), worker);
                self.withdraw_pull(idx);
                // Camunda lets the error carry variables; they are set before routing.
                self.write_vars_from(idx, variables);
                self.throw_from_activity(idx, Some(code), message, codes::UNCAUGHT_BPMN_ERROR);
            }
            _ => {}
        }
    }

    fn lock_pull(&mut self, idx: NodeIdx, attempt: Attempt, worker: &str, lock_ms: u64) {
        let Some(pull) = pull_at(self.p, idx) else {
            return;
        };
        let until_ms = self.after(qflow_loader::model::DurationMs(lock_ms));
        self.snap.set_lock(&pull.node, worker, until_ms);
        self.arm(TimerName::new(TimerKind::Lock, &pull.node), until_ms);
        self.effects.push(Effect::OfferPullTask {
            node: pull.node.to_string(),
            topic: pull.topic.to_owned(),
            attempt,
            lock: Some(PullLock {
                worker: worker.to_owned(),
                until_ms,
            }),
        });
    }

    fn pull_attempt_ended(
        &mut self,
        idx: NodeIdx,
        attempt: Attempt,
        outcome: AttemptOutcome,
        code_and_message: Option<(&str, &str)>,
        worker: String,
    ) {
        self.attempt_ended(idx, attempt, outcome, code_and_message);
        if let Some(Effect::AttemptFinished { worker: w, .. }) = self.effects.last_mut() {
            *w = Some(worker);
        }
    }

    /// The lock timer `l:<node>` fired: the worker vanished, the attempt failed with
    /// `LOCK_EXPIRED` and one attempt of the budget is spent.
    pub(super) fn lock_expired(&mut self, idx: NodeIdx) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        let attempt = self.snap.attempt_in_progress(node);
        let worker = self.snap.lock(node).map(|(w, _)| w.to_owned());
        let message = match &worker {
            Some(w) => format!("the lock of worker `{w}` expired before it reported an outcome"),
            None => "the lock expired before its worker reported an outcome".to_owned(),
        };
        let code = codes::LOCK_EXPIRED;
        let outcome = FailureKind::TimedOut.outcome();
        let worker = worker.unwrap_or_default();
        self.pull_attempt_ended(idx, attempt, outcome, Some((code, &message)), worker);
        let left = self.pull_retries_left(idx).saturating_sub(1);
        self.pull_failed(idx, left, 0, code, message);
    }

    /// The attempts the pull task at `idx` has left, counting the one in progress.
    fn pull_retries_left(&self, idx: NodeIdx) -> u32 {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        self.snap
            .pull_retries(node)
            .or_else(|| pull_at(self.p, idx).map(|t| t.retries))
            .unwrap_or(PULL_RETRIES_DEFAULT)
    }

    /// The attempt in progress failed and `left` attempts remain: FAILED at 0; otherwise
    /// the next attempt is offered now, or after a durable park of `retry_timeout_ms`.
    fn pull_failed(
        &mut self,
        idx: NodeIdx,
        left: u32,
        retry_timeout_ms: u64,
        code: &str,
        message: String,
    ) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        self.snap.clear_lock(node);
        self.resolve(&TimerName::new(TimerKind::Lock, node));
        self.snap.set_pull_retries(node, left);
        if left == 0 {
            let detail = Some(super::retry::details::EXHAUSTED.to_owned());
            return self.fail(code, Some(idx), detail, message);
        }
        let next = self.snap.attempt_in_progress(node).next();
        self.snap.set_attempt(node, next);
        if retry_timeout_ms == 0 {
            return self.offer_pull(idx, next);
        }
        // A park, never a sleep (E4): the row goes, the marker says why, the park timer
        // offers the next attempt when it fires (`retry::redrive`).
        self.snap
            .markers
            .insert(node.to_string(), CLASS_FAILED.to_owned());
        self.resolve(&TimerName::new(TimerKind::Timeout, node));
        self.effects.push(Effect::WithdrawPullTask {
            node: node.to_string(),
        });
        let due = self.after(qflow_loader::model::DurationMs(retry_timeout_ms));
        self.arm(TimerName::new(TimerKind::Retry, node), due);
    }
}
