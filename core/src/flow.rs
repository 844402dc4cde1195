//! Applying inputs and moving tokens: what each input does, entering and leaving nodes,
//! tasks and their attempts, mappings. One [`Run`] (`run`) is one step in progress over
//! a working copy of the snapshot; which instance a token becomes is `instances`';
//! gateways, scopes and timers live in their own modules as further `impl Run` blocks.
//!
//! Work is a FIFO queue of "a token arrives at node N over flow F", drained until the
//! instance waits again; no recursion over the graph, and a hard cap on the number of
//! arrivals per step so that a model with a wait-free cycle fails instead of spinning.
//! Nothing here reads the clock or iterates a hash map.

use qflow_loader::model::{
    BoundaryTrigger, CatchTrigger, Definition, EndKind, FlowIdx, MappingStyle, NodeIdx, NodeKind,
    Process, StartTrigger, Task, TaskKind, ThrowTrigger, TimeKind, TimerDef, Variables,
};
use qflow_loader::Expression;
use serde_json::Value as Json;

use super::instances::{self, Arrival};
use super::mapping::task_inputs;
use super::path::EventKind;
use super::run::Run;
use super::subscriptions::{awaited_message, awaited_signal, message_waits, signal_waits};
use super::timers::{TimerKind, TimerName};
use super::{codes, Attempt, AttemptOutcome, Effect, FailureKind, Input};
use crate::error::Error;
use crate::snapshot::{Snapshot, Status};

/// Most node arrivals one step may process. A real model waits long before this; a
/// model that loops without waiting fails with `STEP_LIMIT` instead of hanging a lane.
pub const ARRIVALS_PER_STEP_MAX: u32 = 10_000;

/// Why `input` would change nothing, or `None` when it applies. Checked before any
/// mutation, so a stale input leaves the snapshot byte-identical.
pub(super) fn staleness(
    def: &Definition,
    snap: &Snapshot,
    input: &Input,
    now_ms: i64,
) -> Option<String> {
    let p = &def.process;
    match input {
        Input::PullLocked { .. }
        | Input::PullCompleted { .. }
        | Input::PullFailed { .. }
        | Input::PullBpmnError { .. }
        | Input::PullLockExtended { .. }
        | Input::PullUnlocked { .. } => super::pull::staleness(def, snap, input, now_ms),
        Input::PullRetriesSet { .. } => super::pull::retries_staleness(def, snap, input),
        Input::ChannelAnswered { .. }
        | Input::ChannelBpmnError { .. }
        | Input::ChannelPoisoned { .. } => super::channel::staleness(def, snap, input),
        Input::Start { .. }
        | Input::StartCalled { .. }
        | Input::Cancel
        | Input::Redrive
        | Input::ResolveIncident { .. } => None,
        Input::ChildEnded { node, call, .. } => super::call::staleness(p, snap, node, *call),
        Input::Migrate {
            mapping, timers, ..
        } => super::migrate::problems(def, snap, mapping, timers),
        Input::UserTaskClaimed { .. } | Input::UserTaskUnclaimed { .. } => {
            super::user_tasks::staleness(def, snap, input)
        }
        Input::OfferUserTasks => super::user_tasks::offered_user_tasks(def, snap)
            .is_empty()
            .then(|| "no user task of the instance waits".to_owned()),
        Input::Resume { .. } => match snap.status() {
            Status::Failed => {
                let node = snap.failure().and_then(|f| f.node);
                (node.is_none() && snap.tokens.is_empty())
                    .then(|| "the failure left no node and no token to resume".to_owned())
            }
            s => Some(format!(
                "instance is {}, not failed: only a FAILED instance can be resumed",
                s.as_str()
            )),
        },
        Input::RetryNow { node } => {
            if let Some(n) = node {
                let retried = p.find(n).is_some_and(|i| {
                    retryable_task(p, i).is_some() || super::pull::pull_at(p, i).is_some()
                });
                if !retried {
                    return Some(format!(
                        "`{n}` is not a registered, channel-call or pull task of this definition"
                    ));
                }
            }
            super::repair::parked(p, snap, node.as_deref())
                .is_empty()
                .then(|| match node {
                    Some(n) => {
                        // Another instance of the same task may be the one parked: name it.
                        let base = p.find(n).map(|i| i.uncopied());
                        let others: Vec<String> = super::repair::parked(p, snap, None)
                            .into_iter()
                            .filter(|i| Some(i.uncopied()) == base)
                            .map(|i| format!("`{}`", p.key(i)))
                            .collect();
                        if others.is_empty() {
                            format!("task `{n}` has no backoff pending")
                        } else {
                            format!(
                                "task `{n}` has no backoff pending; its other activity \
                                 instances {} have: name one",
                                others.join(", ")
                            )
                        }
                    }
                    None => "no task of this instance has a backoff pending".to_owned(),
                })
        }
        Input::TaskCompleted { node, attempt, .. }
        | Input::TaskFailed { node, attempt, .. }
        | Input::TaskBpmnError { node, attempt, .. } => {
            if p.find(node).and_then(|i| registered_task(p, i)).is_none() {
                return Some(format!(
                    "`{node}` is not a registered task of this definition"
                ));
            }
            if !snap.tokens.iter().any(|t| t == node) {
                return Some(format!("task `{node}` is not pending"));
            }
            if let Some(class) = snap.marker(node) {
                return Some(format!(
                    "task `{node}` is in a backoff window ({class}); attempt {attempt} is over"
                ));
            }
            let live = snap.attempt_in_progress(node);
            (*attempt != live)
                .then(|| format!("attempt {attempt} of `{node}` is not the live attempt {live}"))
        }
        Input::TimerFired { name, .. } if name.kind() == TimerKind::Lease => Some(format!(
            "timer `{name}` is the shell's in-flight lease; the shell redrives on it"
        )),
        Input::TimerFired { name, incarnation } => match snap.timers.get(name.as_str()) {
            Some(live) if live == incarnation => None,
            Some(live) => Some(format!(
                "timer `{name}` incarnation {incarnation} is not the live one ({live})"
            )),
            None => Some(format!("timer `{name}` is not armed")),
        },
        Input::UserTaskBpmnError { node, .. } => waiting_user_task(p, snap, node),
        Input::UserTaskEscalated { node, code, .. } => {
            waiting_user_task(p, snap, node).or_else(|| {
                let idx = p.find(node)?;
                super::scope::escalation_catcher(p, idx, Some(code))
                    .is_none()
                    .then(|| {
                        format!(
                            "no escalation boundary catches `{code}` from user task `{node}` \
                         (on the task or an enclosing sub-process)"
                        )
                    })
            })
        }
        Input::UserTaskCompleted { node, assignee, .. } => {
            // A receive task without a message is a plain wait state, completed the same way.
            let is_user = p.find(node).is_some_and(|i| {
                matches!(&p.node(i).kind, NodeKind::Task(t)
                    if matches!(t.kind, TaskKind::User { .. } | TaskKind::Receive { message: None }))
            });
            if !is_user {
                Some(format!(
                    "`{node}` is not a user task (or a receive task without a message) of this \
                     definition"
                ))
            } else if !snap.tokens.iter().any(|t| t == node) {
                Some(format!("user task `{node}` is not pending"))
            } else {
                assignee
                    .as_deref()
                    .and_then(|a| super::user_tasks::completion_staleness(snap, node, a))
            }
        }
        Input::SignalReceived { name, node, .. } => signal_waiters(p, snap, name, node.as_deref())
            .is_empty()
            .then(|| {
                let at = node
                    .as_ref()
                    .map(|n| format!(" at `{n}`"))
                    .unwrap_or_default();
                format!("nothing waits{at} for signal `{name}`")
            }),
        Input::MessageReceived {
            name,
            correlation_key,
            node,
            ..
        } => message_waiter(p, snap, name, correlation_key.as_deref(), node.as_deref())
            .is_none()
            .then(|| {
                let at = node
                    .as_ref()
                    .map(|n| format!(" at `{n}`"))
                    .unwrap_or_default();
                match correlation_key {
                    Some(key) => format!("nothing waits{at} for message `{name}` with key `{key}`"),
                    None => format!("nothing waits{at} for message `{name}`"),
                }
            }),
    }
}

pub(super) fn registered_task(p: &Process, idx: NodeIdx) -> Option<&Task> {
    match &p.node(idx).kind {
        NodeKind::Task(t) if matches!(t.kind, TaskKind::Registered { .. }) => Some(t),
        _ => None,
    }
}

/// A task whose attempts `q:retry` governs: a registered task or a channel call.
pub(super) fn retryable_task(p: &Process, idx: NodeIdx) -> Option<&Task> {
    match &p.node(idx).kind {
        NodeKind::Task(t)
            if matches!(
                t.kind,
                TaskKind::Registered { .. } | TaskKind::Channel { .. } | TaskKind::Call(_)
            ) =>
        {
            Some(t)
        }
        _ => None,
    }
}

/// Why `node` is not a user task of `p` a token waits at, if it is not.
fn waiting_user_task(p: &Process, snap: &Snapshot, node: &str) -> Option<String> {
    let is_user = p.find(node).is_some_and(
        |i| matches!(&p.node(i).kind, NodeKind::Task(t) if matches!(t.kind, TaskKind::User { .. })),
    );
    if !is_user {
        Some(format!("`{node}` is not a user task of this definition"))
    } else if !snap.tokens.iter().any(|t| t == node) {
        Some(format!("user task `{node}` is not pending"))
    } else {
        None
    }
}

/// Every wait for the signal `name` (only the one at `at`, when given), in frontier
/// order: the node that catches it, and the event-based gateway the token sits at when
/// it waits there. Only the first catch racing after one gateway takes part: the race
/// ends at the first.
fn signal_waiters(
    p: &Process,
    snap: &Snapshot,
    name: &str,
    at: Option<&str>,
) -> Vec<(NodeIdx, Option<NodeIdx>)> {
    let mut found = Vec::new();
    for t in &snap.tokens {
        let Some(idx) = p.find(t) else { continue };
        let gateway = matches!(p.node(idx).kind, NodeKind::EventBasedGateway);
        let mut raced = false;
        for w in signal_waits(p, idx) {
            if awaited_signal(p, w) != Some(name) || at.is_some_and(|n| p.key(w) != n) {
                continue;
            }
            let racing = gateway && w != idx;
            if racing && raced {
                continue;
            }
            raced |= racing;
            if !found.iter().any(|(i, _)| *i == w) {
                found.push((w, racing.then_some(idx)));
            }
        }
    }
    // Then the event sub-processes armed for it, after every token's own waits.
    for s in super::event_sub::armed_starts(p, snap) {
        if awaited_signal(p, s) == Some(name) && at.is_none_or(|n| p.key(s) == n) {
            found.push((s, None));
        }
    }
    found
}

/// The first token (in frontier order) waiting for the message `name` — with `key`,
/// only a wait whose open subscription has that correlation key: the node that receives
/// it, and the event-based gateway the token sits at when it waits there.
fn message_waiter(
    p: &Process,
    snap: &Snapshot,
    name: &str,
    key: Option<&str>,
    at: Option<&str>,
) -> Option<(NodeIdx, Option<NodeIdx>)> {
    let receives = |idx: NodeIdx| {
        awaited_message(p, idx) == Some(name)
            && at.is_none_or(|n| p.key(idx) == n)
            && key
                .is_none_or(|k| snap.subscriptions.get(&*p.key(idx)).map(String::as_str) == Some(k))
    };
    let token_wait = snap.tokens.iter().find_map(|t| {
        let idx = p.find(t)?;
        let gateway = matches!(p.node(idx).kind, NodeKind::EventBasedGateway);
        message_waits(p, idx)
            .into_iter()
            .find(|w| receives(*w))
            .map(|w| (w, (gateway && w != idx).then_some(idx)))
    });
    // Then the event sub-processes armed for it, after every token's own waits.
    token_wait.or_else(|| {
        super::event_sub::armed_starts(p, snap)
            .into_iter()
            .find(|s| receives(*s))
            .map(|s| (s, None))
    })
}

impl<'a> Run<'a> {
    /// Applies a non-stale input, then moves tokens until the instance waits again, and
    /// brings its message subscriptions in line with where it waits.
    pub(super) fn apply(&mut self, input: Input) -> Result<(), Error> {
        // A resumed instance that ends again in this step reports its end again.
        let ended_before = self.snap.status.is_terminal() && !matches!(input, Input::Resume { .. });
        let kind = input.kind();
        self.apply_input(input)?;
        self.fail_if_stalled(kind);
        // First: an assignment that does not evaluate fails the instance, and the
        // subscription sync then closes what a FAILED instance must not hold open.
        self.sync_user_tasks();
        self.sync_subscriptions();
        self.sync_children();
        self.notify_parent(ended_before);
        Ok(())
    }

    /// Starts the instance at `starts` with `variables`.
    fn start(&mut self, starts: Vec<NodeIdx>, mut variables: Variables) -> Result<(), Error> {
        if starts.is_empty() {
            return Err(Error::NoStartEvent(self.def.id.clone()));
        }
        if let Some(name) = &self.def.initiator {
            variables.entry(name.clone()).or_insert(Json::Null);
        }
        self.snap.status = Status::Running;
        self.snap.vars = variables;
        // The process's event sub-processes are armed for the instance's life.
        if self.arm_event_starts(None) {
            for s in starts {
                self.queue.push_back((s, None));
            }
        }
        Ok(())
    }

    fn apply_input(&mut self, input: Input) -> Result<(), Error> {
        match input {
            Input::StartCalled { variables, parent } => {
                self.snap.parent = Some(Box::new(parent));
                let starts = self.p.start_events(None).collect();
                self.start(starts, variables)?;
            }
            Input::ChildEnded { node, outcome, .. } => self.child_ended(&node, outcome),
            Input::Start { variables, start } => {
                let starts: Vec<NodeIdx> = match start {
                    // A triggered start begins the instance at that event alone (an event
                    // sub-process's start is not where an instance begins).
                    Some(id) => match self.p.find(&id) {
                        Some(i)
                            if matches!(self.p.node(i).kind, NodeKind::TriggeredStart(_))
                                && self.p.node(i).scope.is_none() =>
                        {
                            vec![i]
                        }
                        _ => {
                            return Err(Error::UnknownStart {
                                process: self.def.id.clone(),
                                start: id,
                            })
                        }
                    },
                    None => self.p.start_events(None).collect(),
                };
                self.start(starts, variables)?;
            }
            Input::TaskCompleted {
                node,
                attempt,
                outputs,
            } => self.task_completed(&node, attempt, outputs),
            Input::TaskFailed {
                node,
                attempt,
                kind,
                code,
                message,
            } => self.task_failed(&node, attempt, kind, code, message),
            Input::TaskBpmnError {
                node,
                attempt,
                code,
                message,
            } => self.task_bpmn_error(&node, attempt, code, message),
            Input::TimerFired { name, incarnation } => self.timer_fired(name, incarnation),
            Input::UserTaskCompleted {
                node, variables, ..
            } => {
                let idx = self.idx(&node);
                self.complete_activity(idx, variables);
            }
            Input::UserTaskBpmnError {
                node,
                code,
                message,
                variables,
            } => {
                let idx = self.idx(&node);
                self.write_vars_from(idx, variables);
                let message = if message.is_empty() {
                    format!("user task `{node}`")
                } else {
                    format!("user task `{node}`: {message}")
                };
                self.throw_from_activity(idx, Some(code), message, codes::UNCAUGHT_BPMN_ERROR);
            }
            Input::UserTaskEscalated {
                node,
                code,
                variables,
            } => {
                let idx = self.idx(&node);
                self.write_vars_from(idx, variables);
                self.escalate_from_activity(idx, Some(&code));
            }
            Input::UserTaskClaimed { node, assignee, .. } => {
                // Bookkeeping only: no token moves, nothing to settle.
                self.assign_user_task(&node, Some(assignee));
                return Ok(());
            }
            Input::UserTaskUnclaimed { node, .. } => {
                self.assign_user_task(&node, None);
                return Ok(());
            }
            Input::OfferUserTasks => {
                // The sync offers every waiting user task again and withdraws nothing.
                self.user_tasks_migrated = Some(self.user_tasks_before.clone());
                return Ok(());
            }
            Input::MessageReceived {
                name,
                correlation_key,
                node,
                variables,
            } => {
                let key = correlation_key.as_deref();
                let found = message_waiter(self.p, &self.snap, &name, key, node.as_deref());
                if let Some((idx, gateway)) = found {
                    // The wait is over: should the token come back here in this step, its
                    // subscription opens again with the key evaluated afresh.
                    self.close_subscription(&self.id(idx));
                    if let Some(esp) = self.p.event_start(idx) {
                        self.record_event_start(EventKind::Message, esp, idx, None, Some(&name));
                        self.start_event_sub_process(esp, idx, variables);
                    } else if let NodeKind::Boundary(b) = &self.p.node(idx).kind {
                        let on = Some((self.p.attached(idx, b.attached_to), b.interrupting));
                        self.record_catch(EventKind::Message, idx, on, None, Some(&name));
                        self.message_boundary(
                            idx,
                            self.p.attached(idx, b.attached_to),
                            b.interrupting,
                            variables,
                        );
                    } else {
                        self.record_catch(EventKind::Message, idx, None, None, Some(&name));
                        if let Some(gw) = gateway {
                            self.end_race(gw, idx);
                        }
                        self.complete_activity(idx, variables);
                    }
                }
            }
            Input::SignalReceived {
                name,
                node,
                variables,
            } => {
                // Every wait for the signal catches it (one broadcast, many catchers):
                // those of one token first, boundaries after the token's own wait.
                let waits = signal_waiters(self.p, &self.snap, &name, node.as_deref());
                for (idx, gateway) in waits {
                    if let Some(esp) = self.p.event_start(idx) {
                        let scope = self
                            .p
                            .scope_instance(idx)
                            .and_then(|e| self.p.scope_instance(e));
                        if !super::event_sub::armed(self.p, &self.snap, scope) {
                            // An earlier catch of this same signal ended or disarmed the
                            // scope.
                            continue;
                        }
                        // A non-interrupting one goes on waiting, its row as it is.
                        if esp.interrupting {
                            self.close_subscription(&self.id(idx));
                        }
                        self.record_event_start(EventKind::Signal, esp, idx, None, Some(&name));
                        self.start_event_sub_process(esp, idx, variables.clone());
                        continue;
                    }
                    let host_gone = match &self.p.node(idx).kind {
                        NodeKind::Boundary(b) => !self
                            .snap
                            .tokens
                            .iter()
                            .any(|t| t == &*self.id(self.p.attached(idx, b.attached_to))),
                        _ => {
                            let at = gateway.unwrap_or(idx);
                            !self.snap.tokens.iter().any(|t| t == &*self.id(at))
                        }
                    };
                    if host_gone {
                        // An earlier catch of this same signal ended this wait.
                        continue;
                    }
                    if let NodeKind::Boundary(b) = &self.p.node(idx).kind {
                        // A non-interrupting boundary goes on waiting: its subscription
                        // row stays as it is (the broadcast walking the rows must not
                        // meet it again as a new one).
                        if b.interrupting {
                            self.close_subscription(&self.id(idx));
                        }
                        let on = Some((self.p.attached(idx, b.attached_to), b.interrupting));
                        self.record_catch(EventKind::Signal, idx, on, None, Some(&name));
                        self.message_boundary(
                            idx,
                            self.p.attached(idx, b.attached_to),
                            b.interrupting,
                            variables.clone(),
                        );
                    } else if let Some(gw) = gateway {
                        self.close_subscription(&self.id(idx));
                        self.record_catch(EventKind::Signal, idx, None, None, Some(&name));
                        self.end_race(gw, idx);
                        self.complete_activity(idx, variables.clone());
                    } else {
                        // Every token standing at the catch takes the one broadcast (two
                        // tokens there share the node's subscription row).
                        self.close_subscription(&self.id(idx));
                        let id_key = self.id(idx);
                        let id: &str = &id_key;
                        let waiting = self.snap.tokens.iter().filter(|t| *t == id).count();
                        for _ in 0..waiting {
                            self.record_catch(EventKind::Signal, idx, None, None, Some(&name));
                            self.complete_activity(idx, variables.clone());
                        }
                    }
                }
            }
            pull @ (Input::PullLocked { .. }
            | Input::PullCompleted { .. }
            | Input::PullFailed { .. }
            | Input::PullBpmnError { .. }
            | Input::PullLockExtended { .. }
            | Input::PullUnlocked { .. }) => self.apply_pull(pull),
            channel @ (Input::ChannelAnswered { .. }
            | Input::ChannelBpmnError { .. }
            | Input::ChannelPoisoned { .. }) => self.apply_channel(channel),
            Input::Redrive => {
                // Re-adoption moves no token: nothing to settle.
                self.readopt();
                return Ok(());
            }
            Input::Cancel => {
                self.cancel();
                return Ok(());
            }
            Input::PullRetriesSet { node, retries, .. } => {
                // Bookkeeping only: no token moves, nothing to settle.
                self.snap.set_pull_retries(&node, retries);
                return Ok(());
            }
            Input::ResolveIncident { node } => {
                // Bookkeeping only: no token moves, nothing to settle.
                self.effects.push(Effect::ResolveIncident { node });
                return Ok(());
            }
            Input::Resume { budget } => self.resume(budget),
            Input::Migrate {
                mapping,
                timers,
                user_tasks,
            } => {
                self.user_tasks_migrated = Some(user_tasks);
                // Moves no token: nothing to settle (a FAILED instance stays FAILED).
                self.migrate(&mapping, &timers);
                return Ok(());
            }
            Input::RetryNow { node } => {
                let targets = super::repair::parked(self.p, &self.snap, node.as_deref());
                self.retry_now(targets);
            }
        }
        self.settle();
        Ok(())
    }

    // ----- inputs ------------------------------------------------------------------

    /// Records how the attempt in flight at `idx` ended (the history row, O1a); the step
    /// then knows the attempt is reported and an interruption does not report it again.
    pub(super) fn attempt_ended(
        &mut self,
        idx: NodeIdx,
        attempt: Attempt,
        outcome: AttemptOutcome,
        code_and_message: Option<(&str, &str)>,
    ) {
        self.effects.push(Effect::AttemptFinished {
            node: self.id(idx).into_owned(),
            attempt,
            outcome,
            code: code_and_message.map(|(c, _)| c.to_owned()),
            message: code_and_message.map(|(_, m)| m.to_owned()),
            worker: None,
        });
        self.attempt_reported = Some(idx);
    }

    pub(super) fn task_completed(&mut self, node: &str, attempt: Attempt, outputs: Variables) {
        let idx = self.idx(node);
        if let Err(why) = crate::limits::check_variables(&outputs) {
            // Written, the outputs would make a snapshot the engine cannot read: the
            // attempt failed (a handler bug a retry may or may not outlive).
            let code = codes::OUTPUTS_REFUSED;
            let message = format!("the handler's outputs are refused: {why}");
            self.attempt_ended(idx, attempt, AttemptOutcome::Failed, Some((code, &message)));
            return self.attempt_failed(idx, FailureKind::Failed, code.to_owned(), message);
        }
        self.attempt_ended(idx, attempt, AttemptOutcome::Ok, None);
        self.complete_activity(idx, outputs);
    }

    pub(super) fn task_failed(
        &mut self,
        node: &str,
        attempt: Attempt,
        kind: FailureKind,
        code: String,
        message: String,
    ) {
        let idx = self.idx(node);
        self.attempt_ended(idx, attempt, kind.outcome(), Some((&code, &message)));
        self.attempt_failed(idx, kind, code, message);
    }

    pub(super) fn task_bpmn_error(
        &mut self,
        node: &str,
        attempt: Attempt,
        code: String,
        message: String,
    ) {
        let idx = self.idx(node);
        self.attempt_ended(
            idx,
            attempt,
            AttemptOutcome::BpmnError,
            Some((&code, &message)),
        );
        // A BPMN error is a modelled outcome: it routes, and never spends budget.
        self.throw_from_activity(idx, Some(code), message, codes::UNCAUGHT_BPMN_ERROR);
    }

    /// A message reached the boundary event `boundary` of the running activity `host`:
    /// an interrupting one ends the activity first (its attempt in flight is reported
    /// interrupted, its timers resolved, its retry state dropped); either way the
    /// message's variables join the instance's and a token leaves the boundary. A
    /// non-interrupting one stays open for the next message while the activity runs.
    pub(super) fn message_boundary(
        &mut self,
        boundary: NodeIdx,
        host: NodeIdx,
        interrupting: bool,
        variables: Variables,
    ) {
        if interrupting {
            self.interrupt(host);
        }
        if let Err(e) = self.catch_outputs(boundary, variables) {
            return self.fail(codes::EXPRESSION_FAILED, Some(boundary), None, e);
        }
        self.leave(boundary);
    }

    /// What a caught event's variables (a message's) write into the instance: all of them,
    /// or — with Zeebe output mappings on the event — only the outputs, evaluated over the
    /// instance variables with the event's variables over them.
    fn catch_outputs(&mut self, idx: NodeIdx, caught: Variables) -> Result<(), String> {
        let writes = match self.p.event_mappings.get(&idx) {
            None => caught,
            Some(m) => {
                let vars = super::locals::output_vars(self.p, &self.snap, idx);
                crate::vendor_io::complete(m.style, &m.inputs, &m.outputs, &vars, Some(caught))
                    .map_err(|e| format!("the mappings of `{}`: {e}", self.p.node(idx).id))?
            }
        };
        self.write_vars_from(idx, writes);
        Ok(())
    }

    /// A signal throw (intermediate or end): one broadcast, through the outbox under a
    /// key of its own (a number drawn from the instance's sequence). Nothing waits for
    /// it here: the token goes on, or ends, in this step.
    fn throw_signal(&mut self, idx: NodeIdx, name: &str) {
        let n = self.snap.incarnation.saturating_add(1);
        self.snap.incarnation = n;
        self.record_throw(EventKind::Signal, idx, None, Some(name));
        self.effects.push(Effect::ThrowSignal {
            node: self.id(idx).into_owned(),
            name: name.to_owned(),
            key: format!("{}/{n}", self.instance),
        });
    }

    /// A message throw (intermediate, end, send task): one publication through the
    /// outbox, under a key of its own. The correlation key, when the message declares
    /// one, is evaluated now over the sender's variables; one that does not evaluate
    /// fails the instance (`EXPRESSION_FAILED`) and nothing is published. Whether the
    /// token may go on.
    fn publish_message(&mut self, idx: NodeIdx, name: &str, variables: Variables) -> bool {
        let correlation_key = if self.def.correlation_keys.contains_key(name) {
            match self.correlation_key(name, idx) {
                Ok(key) => Some(key),
                Err(why) => {
                    let message = format!("the correlation key of message `{name}`: {why}");
                    self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
                    return false;
                }
            }
        } else {
            None
        };
        if let Err(why) = crate::limits::check_variables(&variables) {
            let message = format!("the variables of message `{name}`: {why}");
            self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
            return false;
        }
        let n = self.snap.incarnation.saturating_add(1);
        self.snap.incarnation = n;
        self.record_throw(EventKind::Message, idx, None, Some(name));
        self.effects.push(Effect::PublishMessage {
            node: self.id(idx).into_owned(),
            name: name.to_owned(),
            correlation_key,
            key: format!("{}/{n}", self.instance),
            variables,
        });
        true
    }

    pub(super) fn timer_fired(&mut self, name: TimerName, incarnation: u32) {
        self.snap.timers.remove(name.as_str());
        let Some(idx) = name.node().and_then(|node| self.p.find(node)) else {
            self.effects
                .push(Effect::ResolveTimer { name, incarnation });
            return;
        };
        self.effects.push(Effect::ResolveTimer {
            name: name.clone(),
            incarnation,
        });
        match name.kind() {
            TimerKind::Catch => {
                if self.remove_token(idx) {
                    self.record_catch(EventKind::Timer, idx, None, None, Some(name.as_str()));
                    self.leave(idx);
                } else if let Some(gw) = self.racing_gateway(idx) {
                    self.record_catch(EventKind::Timer, idx, None, None, Some(name.as_str()));
                    self.end_race(gw, idx);
                    self.leave(idx);
                }
            }
            TimerKind::Boundary => self.boundary_timer_fired(idx, name),
            TimerKind::Timeout => self.timeout_fired(idx),
            TimerKind::Retry => self.redrive(idx),
            TimerKind::Lock => self.lock_expired(idx),
            // Refused by `staleness`: the lease is the shell's.
            TimerKind::Lease => {}
        }
    }

    pub(super) fn boundary_timer_fired(&mut self, boundary: NodeIdx, name: TimerName) {
        // `b:` also names the timer start of an event sub-process: a boundary on its
        // enclosing scope in all but name.
        if let Some(esp) = self.p.event_start(boundary) {
            return self.event_timer_fired(esp.clone(), boundary, name);
        }
        let NodeKind::Boundary(b) = &self.p.node(boundary).kind else {
            return;
        };
        let host = self.p.attached(boundary, b.attached_to);
        let on = Some((host, b.interrupting));
        self.record_catch(EventKind::Timer, boundary, on, None, Some(name.as_str()));
        if b.interrupting {
            self.interrupt(host);
        } else if let BoundaryTrigger::Timer(timer) = &b.trigger {
            if !self.rearm_cycle(boundary, timer, name) {
                return;
            }
        }
        self.leave(boundary);
    }

    /// A non-interrupting timer at `node` named `name` fired: a cycle is armed again
    /// while repetitions are left (a computed cycle evaluated again, over the variables
    /// as they are when it fires); any other timer fires once. `false` when a computed
    /// cycle failed the instance.
    pub(super) fn rearm_cycle(&mut self, node: NodeIdx, timer: &TimerDef, name: TimerName) -> bool {
        let cycle = matches!(
            timer,
            TimerDef::Cycle { .. }
                | TimerDef::Cron(_)
                | TimerDef::Computed {
                    kind: TimeKind::Cycle,
                    ..
                }
        );
        if !cycle {
            return true;
        }
        let (repetitions, interval) = match self.resolve_timer(node, timer) {
            Ok(TimerDef::Cycle {
                repetitions,
                interval,
            }) => (repetitions, interval),
            Ok(TimerDef::Cron(cron)) => {
                // Unbounded: the schedule's next instant after now (instants missed while
                // the timer waited to fire are not made up).
                let due = cron.next_after(self.now_ms).unwrap_or(i64::MAX);
                self.arm(name, due);
                return true;
            }
            Ok(_) => return false,
            Err(message) => {
                self.fail(codes::EXPRESSION_FAILED, Some(node), None, message);
                return false;
            }
        };
        let fired = self.snap.cycles.get(name.as_str()).copied().unwrap_or(0) + 1;
        if repetitions.is_none_or(|r| (fired as u64) < r as u64) {
            self.snap.cycles.insert(name.as_str().to_owned(), fired);
            let due = self.after(interval);
            self.arm(name, due);
        } else {
            self.snap.cycles.remove(name.as_str());
        }
        true
    }

    /// A route-less `q:timeout` fired while the task's attempt was in flight.
    pub(super) fn timeout_fired(&mut self, idx: NodeIdx) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        let message = "the route-less q:timeout fired".to_owned();
        let registered = retryable_task(self.p, idx).is_some();
        if registered {
            let attempt = self.snap.attempt_in_progress(node);
            let outcome = FailureKind::TimedOut.outcome();
            self.attempt_ended(idx, attempt, outcome, Some((codes::TIMEOUT, &message)));
        }
        if registered && self.policy(idx).is_some() {
            // With a policy the timeout is a retryable failure first (E5).
            self.attempt_failed(
                idx,
                FailureKind::TimedOut,
                codes::TIMEOUT.to_owned(),
                message,
            );
        } else {
            // Without one it stays a catchable error, exactly as before retries existed.
            self.throw_from_activity(
                idx,
                Some(codes::TIMEOUT.to_owned()),
                message,
                codes::TIMEOUT,
            );
        }
    }

    /// A wait state finished with `result`: map the outputs, leave the node.
    pub(super) fn complete_activity(&mut self, idx: NodeIdx, result: Variables) {
        if let NodeKind::Task(task) = &self.p.node(idx).kind {
            if let Err(e) = self.map_outputs(idx, task, result) {
                return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e);
            }
        } else if let Err(e) = self.catch_outputs(idx, result) {
            return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e);
        }
        self.remove_token(idx);
        self.disarm(idx);
        if !self.snap.owed.is_empty() {
            let attempt = self.snap.attempt_in_progress(&self.id(idx)).get();
            self.finished_run = Some((idx, attempt));
        }
        self.snap.clear_retry_state(&self.id(idx));
        self.leave(idx);
    }

    pub(super) fn cancel(&mut self) {
        // A FAILED instance is cancelled as Zeebe and Camunda 7 cancel one with an
        // incident: the failure's incident is resolved and the failure cleared, so the
        // instance ends as cancelled (and retention takes it in time).
        if let Some(failure) = self.snap.failure() {
            // The failed attempt was reported when it failed: interrupting its token
            // below must not report it again.
            if let Some(idx) = failure.node.as_deref().and_then(|n| self.p.find(n)) {
                self.attempt_reported = Some(idx);
            }
            // A failure at no node (a stall) opened its incident under the empty node.
            self.effects.push(Effect::ResolveIncident {
                node: failure.node.unwrap_or_default(),
            });
            self.snap.clear_failure();
        }
        let tokens: Vec<String> = self.snap.tokens.clone();
        // A token at an id the definition lacks (a damaged snapshot) is simply dropped.
        for idx in tokens.iter().rev().filter_map(|t| self.p.find(t)) {
            self.interrupt(idx);
        }
        self.snap.tokens.clear();
        self.snap.joins.clear();
        self.snap.locals.clear();
        self.snap.compensable.clear();
        self.snap.owed.clear();
        self.snap.conditions.clear();
        self.snap.spent.clear();
        self.resolve_all_timers();
        self.snap.status = Status::Cancelled;
        self.effects.push(Effect::Cancelled);
    }

    // ----- moving tokens -----------------------------------------------------------

    /// Drains the arrival queue, fires inclusive joins and finished sub-processes, and
    /// completes the instance when no token is left.
    pub(super) fn settle(&mut self) {
        loop {
            loop {
                // Conditional events see every variable change before the next token
                // moves (`conditional`).
                if self.conditions_due() {
                    self.evaluate_conditions();
                }
                let Some((node, via)) = self.queue.pop_front() else {
                    break;
                };
                if !self.running() {
                    self.queue.clear();
                    return;
                }
                self.arrivals += 1;
                if self.arrivals > ARRIVALS_PER_STEP_MAX {
                    let message = format!(
                        "more than {ARRIVALS_PER_STEP_MAX} node arrivals in one step: the \
                         model loops without waiting"
                    );
                    return self.fail(codes::STEP_LIMIT, Some(node), None, message);
                }
                self.enter(node, via);
            }
            if !self.running() {
                return;
            }
            if self.fire_ready_inclusive_join()
                || self.complete_finished_subprocess()
                || self.conditions_due()
            {
                continue;
            }
            break;
        }
        self.forget_disarmed_conditions();
        if self.snap.tokens.is_empty() {
            if let Some(gw) = self.snap.joins.keys().next().cloned() {
                let idx = self.p.find(&gw);
                let message = format!("no token is left that could complete join `{gw}`");
                self.fail(codes::STUCK_AT_JOIN, idx, None, message);
            } else {
                self.complete();
            }
        }
    }

    pub(super) fn enter(&mut self, idx: NodeIdx, via: Option<FlowIdx>) {
        if !self.p.compensations.is_empty() && self.compensation_limit_reached(idx) {
            return;
        }
        let Some(idx) = self.arriving_instance(idx) else {
            return;
        };
        if let Some(mi) = self.p.multi_instance(idx) {
            return self.enter_multi(idx, mi);
        }
        let node = self.p.node(idx);
        // Vendor output mappings of an event the token passes through (L8): written as it
        // arrives, before it moves on (or ends the instance). A catch event's are applied
        // when it catches (`complete_activity`, `message_boundary`), not on arrival.
        if !self.p.event_mappings.is_empty()
            && !matches!(
                node.kind,
                NodeKind::IntermediateCatch(_) | NodeKind::Boundary(_)
            )
        {
            if let Some(m) = self.p.event_mappings.get(&idx) {
                let vars = super::locals::output_vars(self.p, &self.snap, idx);
                let writes =
                    crate::vendor_io::complete(m.style, &m.inputs, &m.outputs, &vars, None);
                drop(vars);
                match writes {
                    Ok(writes) => self.write_vars_from(idx, writes),
                    Err(e) => {
                        let message = format!("the mappings of `{}`: {e}", node.id);
                        return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
                    }
                }
            }
        }
        if let NodeKind::EndEvent(kind) = &node.kind {
            self.record_end(idx, kind);
        }
        match &node.kind {
            NodeKind::StartEvent | NodeKind::Boundary(_) => self.leave(idx),
            // An event sub-process's start: its trigger's catch was recorded as it fired.
            NodeKind::TriggeredStart(_) if node.scope.is_some() => self.leave(idx),
            NodeKind::TriggeredStart(trigger) => {
                let (kind, name) = match trigger {
                    StartTrigger::Message { name } => (EventKind::Message, Some(name.as_str())),
                    StartTrigger::Signal { name } => (EventKind::Signal, Some(name.as_str())),
                    StartTrigger::Timer(_) => (EventKind::Timer, None),
                    // Only an event sub-process's start catches these (the arm above).
                    StartTrigger::Error { .. } => (EventKind::Error, None),
                    StartTrigger::Escalation { .. } => (EventKind::Escalation, None),
                    StartTrigger::Conditional(_) => (EventKind::Conditional, None),
                };
                self.record_catch(kind, idx, None, None, name);
                self.leave(idx);
            }
            NodeKind::EndEvent(EndKind::Signal { name }) => self.throw_signal(idx, name),
            NodeKind::IntermediateThrow(ThrowTrigger::Signal { name }) => {
                self.throw_signal(idx, name);
                self.leave(idx);
            }
            NodeKind::IntermediateCatch(CatchTrigger::Signal { .. }) => self.add_token(idx),
            NodeKind::EndEvent(EndKind::Message { name }) => {
                self.publish_message(idx, name, Variables::new());
            }
            NodeKind::IntermediateThrow(ThrowTrigger::Message { name }) => {
                if self.publish_message(idx, name, Variables::new()) {
                    self.leave(idx);
                }
            }
            NodeKind::EndEvent(EndKind::None) => {}
            // The token waits at the end event until the handlers it started have ended.
            NodeKind::EndEvent(EndKind::Compensation { activity }) => {
                self.compensate(idx, *activity);
            }
            NodeKind::IntermediateThrow(ThrowTrigger::Compensation { activity }) => {
                if !self.compensate(idx, *activity) {
                    self.leave(idx);
                }
            }
            NodeKind::EndEvent(EndKind::Terminate) => self.terminate(self.scope_of(idx)),
            NodeKind::EndEvent(EndKind::Error { error }) => {
                let code = error
                    .as_ref()
                    .and_then(|id| self.def.errors.get(id))
                    .and_then(|e| e.code.clone());
                let message = format!("error end event `{}`", node.id);
                self.record_throw(EventKind::Error, idx, code.as_deref(), None);
                self.propagate_error(
                    idx,
                    self.scope_of(idx),
                    code,
                    message,
                    codes::UNCAUGHT_BPMN_ERROR,
                );
            }
            // The token ends here whether or not a boundary caught the escalation.
            NodeKind::EndEvent(EndKind::Escalation { code }) => {
                self.escalate(idx, self.scope_of(idx), code.as_deref());
            }
            NodeKind::IntermediateThrow(ThrowTrigger::Escalation { code }) => {
                if self.escalate(idx, self.scope_of(idx), code.as_deref()) {
                    self.leave(idx);
                }
            }
            // The token moves to the link's catch in this same step: no wait, nothing
            // written but where the token goes next.
            NodeKind::IntermediateThrow(ThrowTrigger::Link { target, name }) => {
                self.record_throw(EventKind::Link, idx, None, Some(name));
                self.queue.push_back((self.p.inherit(idx, *target), None));
            }
            NodeKind::IntermediateCatch(CatchTrigger::Link { name }) => {
                self.record_catch(EventKind::Link, idx, None, None, Some(name));
                self.leave(idx);
            }
            NodeKind::Task(task) => self.enter_task(idx, task),
            NodeKind::ExclusiveGateway { default } => self.route_exclusive(idx, *default),
            NodeKind::InclusiveGateway { default } => {
                if node.incoming.len() > 1 {
                    self.arrive_at_join(idx, via);
                } else {
                    self.route_inclusive(idx, *default);
                }
            }
            NodeKind::ParallelGateway => {
                if node.incoming.len() > 1 {
                    self.arrive_at_join(idx, via);
                    self.try_parallel_join(idx);
                } else {
                    self.take_all(idx);
                }
            }
            NodeKind::IntermediateCatch(CatchTrigger::Timer(timer)) => {
                let Some(due) = self.due_at(idx, timer) else {
                    return;
                };
                self.add_token(idx);
                self.arm(TimerName::new(TimerKind::Catch, &self.id(idx)), due);
            }
            NodeKind::IntermediateCatch(CatchTrigger::Message { .. }) => self.add_token(idx),
            NodeKind::IntermediateCatch(CatchTrigger::Conditional(_)) => {
                self.add_token(idx);
                self.condition_armed(idx);
            }
            NodeKind::SubProcess if self.p.ad_hoc(idx).is_some() => {
                if let Some(ad_hoc) = self.p.ad_hoc(idx) {
                    self.enter_ad_hoc(idx, ad_hoc);
                }
            }
            NodeKind::SubProcess => {
                // Its locals first: its boundaries and its inside see them.
                if !self.enter_locals(idx) {
                    return;
                }
                self.add_token(idx);
                if !self.arm_boundaries(idx) {
                    return;
                }
                let starts: Vec<NodeIdx> = self.p.start_events(Some(idx)).collect();
                for s in starts {
                    self.queue.push_back((self.p.child(idx, s), None));
                }
            }
            NodeKind::EventBasedGateway => {
                // The token waits at the gateway; the events after it race. Their timers
                // are armed now, named after the catch events.
                self.add_token(idx);
                let mut dues = Vec::new();
                for f in &node.outgoing {
                    let target = self.p.attached(idx, self.p.flow(*f).target);
                    if let NodeKind::IntermediateCatch(CatchTrigger::Timer(timer)) =
                        &self.p.node(target).kind
                    {
                        let Some(due) = self.due_at(target, timer) else {
                            return;
                        };
                        dues.push((target, due));
                    }
                }
                for (target, due) in dues {
                    let name = TimerName::new(TimerKind::Catch, &self.id(target));
                    self.arm(name, due);
                }
                if !self.p.conditionals.is_empty() {
                    for f in &node.outgoing {
                        self.condition_armed(self.p.attached(idx, self.p.flow(*f).target));
                    }
                }
            }
        }
    }

    /// The activity instance a token arriving at `idx` becomes (`instances::arriving`):
    /// its attempts, timers, boundaries, rows and keys its own. `None` when no instance
    /// can take the token, and the instance has failed instead.
    pub(super) fn arriving_instance(&mut self, idx: NodeIdx) -> Option<NodeIdx> {
        match instances::arriving(self.p, &self.snap.tokens, idx) {
            Arrival::At(instance) => Some(instance),
            Arrival::Refused { code, message } => {
                self.fail(code, Some(idx), None, message);
                None
            }
        }
    }

    pub(super) fn enter_task(&mut self, idx: NodeIdx, task: &'a Task) {
        match &task.kind {
            TaskKind::PassThrough if task.mapping_style != MappingStyle::Q => {
                // Passed through: the task completes with no result of its own.
                if let Err(e) = self.map_outputs(idx, task, Variables::new()) {
                    let message = format!("the mappings of `{}`: {e}", self.id(idx));
                    return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
                }
                self.leave(idx)
            }
            TaskKind::PassThrough => self.leave(idx),
            TaskKind::Script { expression, result } => {
                self.run_script(idx, task, expression, result)
            }
            TaskKind::Registered { .. } => {
                self.add_token(idx);
                if !self.arm_boundaries(idx) {
                    return;
                }
                self.snap.clear_retry_state(&self.id(idx));
                let first = self.handler_run_attempt(idx);
                self.run_attempt(idx, first);
            }
            TaskKind::User { .. } => {
                self.add_token(idx);
                if !self.arm_boundaries(idx) {
                    return;
                }
                self.arm_timeout(idx, task);
                self.user_tasks_entered.push(idx);
            }
            TaskKind::Receive { .. } => {
                self.add_token(idx);
                if !self.arm_boundaries(idx) {
                    return;
                }
                self.arm_timeout(idx, task);
            }
            TaskKind::Channel { .. } => {
                self.add_token(idx);
                if !self.arm_boundaries(idx) {
                    return;
                }
                self.snap.clear_retry_state(&self.id(idx));
                self.send_request(idx, Attempt::FIRST);
            }
            TaskKind::Pull { .. } => {
                self.add_token(idx);
                if !self.arm_boundaries(idx) {
                    return;
                }
                self.snap.clear_retry_state(&self.id(idx));
                self.offer_pull(idx, Attempt::FIRST);
            }
            TaskKind::Call(_) => {
                self.add_token(idx);
                if !self.arm_boundaries(idx) {
                    return;
                }
                self.snap.clear_retry_state(&self.id(idx));
                self.start_child(idx, task, Attempt::FIRST);
            }
            TaskKind::Send {
                message: Some(name),
            } => {
                // The message's variables are what a handler of the task would be given:
                // the instance variables (with a vendor mapping's locals over them), or
                // only the `q:input` mappings when it has them — as a channel call's
                // request body is.
                let variables = match self.map_inputs(idx, task) {
                    Ok(v) => v,
                    Err(e) => return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e),
                };
                if !self.publish_message(idx, name, variables) {
                    return;
                }
                // Sent: the task completes with no result of its own, through its output
                // mappings as any task does.
                if let Err(e) = self.map_outputs(idx, task, Variables::new()) {
                    let message = format!("the mappings of `{}`: {e}", self.id(idx));
                    return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
                }
                self.leave(idx);
            }
            TaskKind::Send { message: None } => {
                self.unsupported(idx, "send task without a message")
            }
        }
    }

    /// A script task: its expression over the instance variables (with a vendor
    /// mapping's locals over them), the value written to `result` (within the variable
    /// limits) — directly, or through the vendor's output rules (`map_outputs`) — and
    /// on. No token waits here, so nothing of the script is in the snapshot but its
    /// result. An expression that does not evaluate, or a value over the limits, fails
    /// the instance at the task.
    fn run_script(&mut self, idx: NodeIdx, task: &Task, expression: &Expression, result: &str) {
        let vars = super::locals::scoped_vars(self.p, &self.snap, idx);
        let value = if task.mapping_style == MappingStyle::Q {
            expression.eval(&vars).map_err(|e| e.to_string())
        } else {
            crate::vendor_io::visible(task.mapping_style, &task.inputs, &vars)
                .and_then(|scope| expression.eval(&scope).map_err(|e| e.to_string()))
        };
        let value = match value {
            Ok(v) => v,
            Err(e) => {
                let message = format!("the script of `{}`: {e}", self.id(idx));
                return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
            }
        };
        let one = Variables::from([(result.to_owned(), value)]);
        if let Err(why) = crate::limits::check_variables(&one) {
            let message = format!("the script of `{}` gives `{result}`: {why}", self.id(idx));
            return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, message);
        }
        if task.mapping_style == MappingStyle::Q {
            self.write_vars_from(idx, one);
        } else if let Err(e) = self.map_outputs(idx, task, one) {
            return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e);
        }
        self.leave(idx);
    }

    /// Emits the `RunTask` of `attempt` and opens its timeout window.
    pub(super) fn run_attempt(&mut self, idx: NodeIdx, attempt: Attempt) {
        // A new attempt has not been re-adopted yet.
        self.snap.set_readoptions(&self.id(idx), 0);
        let NodeKind::Task(task) = &self.p.node(idx).kind else {
            return;
        };
        match task.kind {
            TaskKind::Pull { .. } => return self.offer_pull(idx, attempt),
            TaskKind::Channel { .. } => return self.send_request(idx, attempt),
            TaskKind::Call(_) => return self.start_child(idx, task, attempt),
            _ => {}
        }
        let TaskKind::Registered { name } = &task.kind else {
            return;
        };
        let inputs = match self.map_inputs(idx, task) {
            Ok(inputs) => inputs,
            Err(e) => return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e),
        };
        self.effects.push(Effect::RunTask {
            node: self.id(idx).into_owned(),
            handler: name.clone(),
            attempt,
            inputs,
        });
        self.arm_timeout(idx, task);
    }

    pub(super) fn arm_timeout(&mut self, idx: NodeIdx, task: &Task) {
        if let Some(timeout) = task.timeout {
            let name = TimerName::new(TimerKind::Timeout, &self.id(idx));
            self.arm(name, self.after(timeout));
        }
    }

    /// A token leaves `idx` over its outgoing flows: every unconditioned flow and every
    /// flow whose condition holds. No outgoing flow consumes the token.
    pub(super) fn leave(&mut self, idx: NodeIdx) {
        // An inner instance has no flows: it goes back to its body.
        if let Some(body) = self.p.body_of(idx) {
            return self.inner_completed(body, idx);
        }
        let outgoing = &self.p.node(idx).outgoing;
        match outgoing.as_slice() {
            [] => {
                // A message end event a worker runs (a pull task inside): its end, once
                // the worker completed it, is a message end's.
                let node = self.p.node(idx);
                if node.element == "endEvent" && matches!(node.kind, NodeKind::Task(_)) {
                    let kind = EndKind::Message {
                        name: String::new(),
                    };
                    self.record_end(idx, &kind);
                }
                if !self.p.compensations.is_empty() {
                    self.compensation_completed(idx);
                }
                // A compensation handler has no flows: its run ended.
                if !self.snap.owed.is_empty() {
                    self.handler_finished(idx);
                }
                // A path of an ad-hoc sub-process ends at an element without flows out.
                if !self.p.ad_hocs.is_empty() {
                    self.path_ended(idx);
                }
                return;
            }
            // The common case, without collecting anything.
            [only] if self.p.flow(*only).condition.is_none() => {
                if !self.p.compensations.is_empty() {
                    self.compensation_completed(idx);
                }
                return self.take(idx, *only);
            }
            _ => {}
        }
        // An activity's default flow (Camunda 7's): taken when no other flow is.
        let default = self.p.activity_defaults.get(&idx.plain()).copied();
        match self.true_flows(idx, outgoing, default) {
            Ok(flows) if flows.is_empty() => match default {
                Some(flow) => {
                    if !self.p.compensations.is_empty() {
                        self.compensation_completed(idx);
                    }
                    self.record_decision(idx, &[flow], true);
                    self.take(idx, flow);
                }
                None => {
                    let message = format!(
                        "no outgoing flow of `{}` has a true condition",
                        self.id(idx)
                    );
                    self.fail(codes::NO_FLOW_TAKEN, Some(idx), None, message);
                }
            },
            Ok(flows) => {
                // Recorded only once the token can leave: a completion that fails here
                // (no flow taken) is made again by the resume, and recorded then.
                if !self.p.compensations.is_empty() {
                    self.compensation_completed(idx);
                }
                if self.tracing() && outgoing.iter().any(|f| self.p.flow(*f).condition.is_some()) {
                    self.record_decision(idx, &flows, false);
                }
                flows.into_iter().for_each(|f| self.take(idx, f));
            }
            Err(e) => self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e),
        }
    }

    /// A token leaves `from` over `flow` (inside an inner sub-process instance, the
    /// target runs in the same instance).
    pub(super) fn take(&mut self, from: NodeIdx, flow: FlowIdx) {
        self.record_flow(from, flow);
        let target = self.p.inherit(from, self.p.flow(flow).target);
        self.queue.push_back((target, Some(flow)));
    }

    pub(super) fn take_all(&mut self, idx: NodeIdx) {
        let outgoing = &self.p.node(idx).outgoing;
        for f in outgoing {
            self.take(idx, *f);
        }
    }

    /// The flows among `flows` (except `skip`) without a condition or with a true one,
    /// in document order, judged from the activity instance `from` that leaves by them.
    pub(super) fn true_flows(
        &self,
        from: NodeIdx,
        flows: &[FlowIdx],
        skip: Option<FlowIdx>,
    ) -> Result<Vec<FlowIdx>, String> {
        let mut taken = Vec::with_capacity(flows.len());
        for f in flows {
            if Some(*f) == skip {
                continue;
            }
            if self.condition_holds(from, *f)? {
                taken.push(*f);
            }
        }
        Ok(taken)
    }

    /// Whether flow `f`'s condition holds for the token leaving the activity instance
    /// `from` by it: over what that instance sees (`locals::scoped_vars`), so inside a
    /// multi-instance body the inner instance's element and loop counter, and the
    /// locals of the sub-process instances around it, are in scope.
    pub(super) fn condition_holds(&self, from: NodeIdx, f: FlowIdx) -> Result<bool, String> {
        match &self.p.flow(f).condition {
            None => Ok(true),
            Some(expr) => {
                let vars = super::locals::scoped_vars(self.p, &self.snap, from);
                expr.eval_bool(&vars).map_err(|e| e.to_string())
            }
        }
    }

    // ----- tokens and mappings ----------------------------------------------------------

    /// Puts a token at the activity instance `idx`.
    pub(super) fn add_token(&mut self, idx: NodeIdx) {
        instances::insert(self.p, &mut self.snap.tokens, idx);
        // A wait begun again (a loop back to it in this step) opens its subscription
        // afresh: the sync after the step evaluates its key over the variables as they
        // are now.
        if !self.snap.subscriptions.is_empty() {
            for w in instances::waits_of(self.p, idx) {
                if awaited_message(self.p, w).is_some() || awaited_signal(self.p, w).is_some() {
                    self.close_subscription(&self.id(w));
                }
            }
        }
    }

    pub(super) fn map_inputs(&self, idx: NodeIdx, task: &Task) -> Result<Variables, String> {
        task_inputs(task, &super::locals::scoped_vars(self.p, &self.snap, idx))
    }

    /// Writes a task's result into the instance variables: through the output mappings
    /// (which see the result as `result`), or merged whole when there are none; with
    /// vendor mappings, by the vendor's rules (`vendor_io::complete`).
    pub(super) fn map_outputs(
        &mut self,
        idx: NodeIdx,
        task: &Task,
        result: Variables,
    ) -> Result<(), String> {
        let writes = self.outputs_of(idx, task, result)?;
        self.write_vars_from(idx, writes);
        Ok(())
    }

    /// What [`Run::map_outputs`] writes, evaluated over what the task's outputs see
    /// (`locals::output_vars`).
    fn outputs_of(
        &self,
        idx: NodeIdx,
        task: &Task,
        result: Variables,
    ) -> Result<Variables, String> {
        if task.mapping_style == MappingStyle::Q && task.outputs.is_empty() {
            return Ok(result);
        }
        let vars = super::locals::output_vars(self.p, &self.snap, idx);
        if task.mapping_style != MappingStyle::Q {
            let (style, inputs, outputs) = (task.mapping_style, &task.inputs, &task.outputs);
            return crate::vendor_io::complete(style, inputs, outputs, &vars, Some(result));
        }
        let mut scope = vars.into_owned();
        scope.insert(
            "result".to_owned(),
            Json::Object(result.into_iter().collect()),
        );
        let mut writes = Variables::new();
        for m in &task.outputs {
            let v = m.source.eval(&scope).map_err(|e| e.to_string())?;
            let one = Variables::from([(m.target.clone(), v)]);
            crate::limits::check_variables(&one)
                .map_err(|why| format!("output mapping `{}`: {why}", m.target))?;
            writes.extend(one);
        }
        Ok(writes)
    }

    pub(super) fn policy(&self, idx: NodeIdx) -> Option<&'a qflow_loader::model::RetryPolicy> {
        retryable_task(self.p, idx).and_then(|t| t.retry.as_ref())
    }
}
