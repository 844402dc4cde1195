//! Claiming and stepping one instance, in parts: read the claim, step it and plan the
//! commit (pure), decide the in-flight lease (pure), commit under the fence.
//!
//! The lane uses the parts with its cache and its group commit; [`claim_and_step`] puts
//! the same parts together for one instance outside a lane (an operator's repair of a
//! FAILED instance, a test), so there is one way an instance is stepped.
//!
//! Invariant: [`plan`] and [`lease_decision`] read no clock and do no I/O — `now` is an
//! argument — so what a step writes is a function of the claim, the input and `now`.

use std::sync::Arc;

use qflow_core::{any_attempt_in_flight, Effect, Input, Snapshot, Status, TimerKind, TimerName};
use qflow_loader::model::Definition;
use qflow_store::{
    AttemptRecord, AuditEntry, Commit, CommitOutcome, DeploymentId, InstanceId, InstanceRecord,
    InstanceState, InstanceStatus, NewIncident, NewOutboxRow, NewSubscription, PullTaskRecord,
    Store, TimerRecord, TimerRef, UserTaskRecord,
};

use crate::handlers::TaskCall;
use crate::journal::{Before, JournalPolicy};
use crate::{Definitions, Error};

/// How often [`claim_and_step`] re-reads and re-derives after losing the
/// compare-and-swap before it gives up (the durable state is untouched either way).
pub const CONFLICT_RETRIES_MAX: u32 = 16;

/// An instance as read for stepping: its definition, its decoded state and the fence its
/// next commit must find.
#[derive(Clone)]
pub struct Claim {
    pub instance: InstanceId,
    pub deployment: DeploymentId,
    pub def: Arc<Definition>,
    /// `None` for an instance not created yet; its commit creates it.
    pub fence: Option<u64>,
    /// Boxed: a claim moves through the lane, the step and the cache several times a
    /// step, and the snapshot is most of its size (664 bytes inline).
    pub snapshot: Box<Snapshot>,
    /// When the `~run` lease row is due, as far as this claim knows: `None` when there is
    /// none, `Some(i64::MIN)` when there may be one whose due instant is unknown (the
    /// state was read from the store).
    pub lease_due: Option<i64>,
    /// The snapshot's bytes as the store holds them (what the commit of `fence` wrote),
    /// when this claim knows them: read from the store, or kept from a journaled step.
    /// A journaled step takes its delta against exactly these bytes (SPEC G3), so a
    /// replay by a build that encodes differently rebuilds what was recorded.
    pub stored: Option<Vec<u8>>,
}

impl Claim {
    /// A claim on a new instance of `deployment`.
    pub fn fresh(instance: InstanceId, deployment: DeploymentId, def: Arc<Definition>) -> Claim {
        Claim {
            instance,
            deployment,
            def,
            fence: None,
            snapshot: Box::new(Snapshot::new()),
            lease_due: None,
            stored: None,
        }
    }

    /// Reads the stored instance `id`.
    pub(crate) async fn read(
        store: &dyn Store,
        defs: &Definitions,
        id: InstanceId,
    ) -> Result<Claim, Error> {
        let record = store
            .instance(id)
            .await?
            .ok_or_else(|| Error::UnknownInstance(id.to_string()))?;
        Claim::of_record(defs, record).await
    }

    /// The claim a stored instance row gives.
    pub(crate) async fn of_record(
        defs: &Definitions,
        record: InstanceRecord,
    ) -> Result<Claim, Error> {
        let def = defs.get(record.deployment).await?;
        Ok(Claim {
            instance: record.id,
            deployment: record.deployment,
            def,
            fence: Some(record.fence),
            snapshot: Box::new(Snapshot::decode(&record.snapshot)?),
            lease_due: Some(i64::MIN),
            stored: Some(record.snapshot),
        })
    }
}

/// The in-flight lease rules (C7a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRules {
    /// How far ahead of `now` the lease is armed.
    pub lease_ms: i64,
    /// The lease is pushed forward once less than `lease_ms / refresh_divisor` remains.
    pub refresh_divisor: i64,
    /// The replica is shutting down: attempts a step asks for are handed over (a lease
    /// due at once) instead of started.
    pub handing_over: bool,
}

/// What to do with the `~run` lease row in a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAction {
    /// Arm (upsert) it due at this instant.
    Arm(i64),
    /// Delete it.
    Resolve,
    /// Leave it as it is.
    Keep,
}

/// Decides the lease from the next state alone: armed (or pushed forward) while a task
/// attempt is in flight, resolved once none is. `fired` says the step was caused by the
/// lease row itself coming due (its claim must be replaced or the row deleted); `calls`
/// that the step asks for handler calls (only those can be handed over).
pub fn lease_decision(
    rules: LeaseRules,
    in_flight: bool,
    lease_due: Option<i64>,
    fired: bool,
    calls: bool,
    now: i64,
) -> LeaseAction {
    let handing_over = rules.handing_over && calls;
    if in_flight {
        let refresh_at = now.saturating_add(rules.lease_ms / rules.refresh_divisor.max(1));
        if handing_over || fired || lease_due.is_none_or(|due| due < refresh_at) {
            let due = if handing_over {
                now
            } else {
                now.saturating_add(rules.lease_ms)
            };
            return LeaseAction::Arm(due);
        }
        LeaseAction::Keep
    } else if lease_due.is_some() && !fired {
        LeaseAction::Resolve
    } else {
        // Fired and not in flight: the step's own resolve of the fired row deletes it.
        LeaseAction::Keep
    }
}

/// A stepped claim: the commit it needs and what follows once that commit is applied.
pub struct Planned {
    pub commit: Commit,
    pub then: Then,
}

/// What follows a planned commit once it is applied.
pub struct Then {
    /// The claim as it stands after the commit (its fence is still the old one).
    pub next: Claim,
    /// Handler calls to start once the commit is durable.
    pub calls: Vec<TaskCall>,
    /// Handler calls the step asked for but handed over (the replica is shutting down, or
    /// the step was taken outside a runtime): the lease armed due at once re-adopts them.
    pub handed_over: Vec<TaskCall>,
    /// Backoff parks armed (`r:` timers).
    pub parks: u64,
    /// The earliest due instant of a timer armed, so the poller can be woken early.
    pub earliest_timer_ms: Option<i64>,
    /// The step moved the instance into a terminal state.
    pub finished_now: bool,
    /// Topics of pull tasks the step offered or locked: once the commit is durable, the
    /// runtime wakes fetches waiting on them (a lossy hint).
    pub pull_topics: Vec<String>,
    /// The step emitted outbox rows: once the commit is durable, the runtime prompts the
    /// dispatcher (a lossy hint; it polls anyway).
    pub outbox: bool,
}

/// Steps `claim` with `input` at `now` and plans the commit: pure. `fired` is the timer
/// row that caused the step (deleted by the commit); `started_ms` is when the handler
/// whose outcome this is started (for the attempt history). A stale input without a
/// fired row to delete is refused: there is nothing to write.
pub fn plan(
    claim: Claim,
    input: Input,
    fired: Option<TimerRef>,
    started_ms: i64,
    now: i64,
    rules: LeaseRules,
    journal: &JournalPolicy,
) -> Result<Planned, Error> {
    let mut commits = Vec::with_capacity(1);
    let then = plan_into(
        &mut commits,
        claim,
        input,
        fired,
        started_ms,
        now,
        rules,
        journal,
    )?;
    match commits.pop() {
        Some(commit) => Ok(Planned { commit, then }),
        None => unreachable!("plan_into pushes the commit of every step it plans"),
    }
}

/// [`plan`] for a lane's round: the commit is built where the round keeps it, at the end
/// of `commits`, instead of being moved there (a commit is over half a kilobyte; moves of
/// commits and plans were about 7 % of a memory-store lane's profile, and this took a
/// lane +2.5 %, docs/performance.md); what follows it is returned. Nothing is pushed
/// when the step is refused or fails.
#[allow(clippy::too_many_arguments)] // `plan`'s arguments and the vector it fills
pub fn plan_into(
    commits: &mut Vec<Commit>,
    claim: Claim,
    input: Input,
    fired: Option<TimerRef>,
    started_ms: i64,
    now: i64,
    rules: LeaseRules,
    journal: &JournalPolicy,
) -> Result<Then, Error> {
    // The id as text (what the core and the handler calls take), formatted into a buffer
    // on the stack: a `String` a step was an allocation and the formatting machinery.
    let mut id_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id: &str = claim.instance.hyphenated().encode_lower(&mut id_text);
    let was_terminal = claim.snapshot.status().is_terminal();
    let Claim {
        instance,
        deployment,
        def,
        fence,
        snapshot,
        lease_due,
        stored,
    } = claim;
    let before = journal
        .covers(&def)
        .then(|| Before::take(&input, &snapshot, stored, fence.is_none()));
    // An answer the step takes proves its request was delivered (see below).
    let answered = match &input {
        Input::ChannelAnswered { call, attempt, .. }
        | Input::ChannelBpmnError { call, attempt, .. } => Some(
            qflow_core::CallKey {
                instance: id.to_owned(),
                call: *call,
                attempt: *attempt,
            }
            .key(),
        ),
        _ => None,
    };
    // The claim's box takes the next snapshot back (below): one allocation fewer a step.
    let mut snapshot = snapshot;
    let step = qflow_core::step(&def, id, *snapshot, input, now)?;
    if fired.is_none() {
        if let Some(Effect::Stale { reason }) = step
            .effects
            .iter()
            .find(|e| matches!(e, Effect::Stale { .. }))
        {
            return Err(Error::Refused {
                what: "input".to_owned(),
                why: reason.clone(),
            });
        }
    }
    let status = step.snapshot.status();
    let state = InstanceState {
        status: store_status(status),
        failure_code: step.snapshot.failure().map(|f| f.code.clone()),
        snapshot: step.snapshot.encode(),
        // A start's key is set by the caller (the lane, from the start request); for
        // every other step the store keeps the stored key whatever this says.
        business_key: None,
    };
    let fired_lease = fired
        .as_ref()
        .is_some_and(|t| t.name.kind() == TimerKind::Lease);
    // Nothing below refuses or fails: from here the commit is built in the round's vector.
    commits.push(Commit::new(instance, fence, deployment, state, now));
    let Some(commit) = commits.last_mut() else {
        unreachable!("a commit was just pushed")
    };
    let journaled = before.is_some();
    if let Some(before) = before {
        let seq = fence.map_or(1, |f| f + 1);
        commit.journal = Some(Box::new(before.entry(
            seq,
            deployment,
            now,
            &commit.state.snapshot,
            &step.effects,
        )));
    }
    commit.timers.resolve.extend(fired);
    let mut then = Then {
        next: Claim {
            instance,
            deployment,
            def,
            fence,
            snapshot: {
                *snapshot = step.snapshot;
                snapshot
            },
            lease_due,
            stored: None,
        },
        calls: Vec::new(),
        handed_over: Vec::new(),
        parks: 0,
        earliest_timer_ms: None,
        finished_now: status.is_terminal() && !was_terminal,
        pull_topics: Vec::new(),
        outbox: false,
    };
    if journaled {
        // The next journaled step of this claim takes its delta against these bytes.
        then.next.stored = Some(commit.state.snapshot.clone());
    }
    let stale = step
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Stale { .. }));
    for effect in step.effects {
        carry_out(commit, &mut then, id, effect, started_ms, now);
    }
    if let (Some(key), false) = (answered, stale) {
        commit.outbox.answered.push(key);
    }
    let in_flight =
        status == Status::Running && any_attempt_in_flight(&then.next.def, &then.next.snapshot);
    let action = lease_decision(
        rules,
        in_flight,
        then.next.lease_due,
        fired_lease,
        !then.calls.is_empty(),
        now,
    );
    match action {
        LeaseAction::Arm(due) => {
            // The upsert replaces the row (and drops its claim lease); a resolve of the
            // same name in this commit would delete the fresh row again.
            commit
                .timers
                .resolve
                .retain(|t| t.name.kind() != TimerKind::Lease);
            commit.timers.arm.push(TimerRecord {
                instance,
                name: TimerName::lease(),
                due_at_ms: due,
                incarnation: 0,
            });
            then.next.lease_due = Some(due);
        }
        LeaseAction::Resolve => {
            commit.timers.resolve.push(TimerRef {
                name: TimerName::lease(),
                incarnation: 0,
            });
            then.next.lease_due = None;
        }
        LeaseAction::Keep if !in_flight => then.next.lease_due = None,
        LeaseAction::Keep => {}
    }
    if rules.handing_over {
        // Handed over by the lease armed above: the next replica re-adopts them.
        then.handed_over = std::mem::take(&mut then.calls);
    }
    Ok(then)
}

/// Writes one effect into the plan that carries the step. Exhaustive on purpose: a new
/// effect must be given its place here.
fn carry_out(
    commit: &mut Commit,
    then: &mut Then,
    id: &str,
    effect: Effect,
    started_ms: i64,
    now: i64,
) {
    match effect {
        Effect::RunTask {
            node,
            handler,
            attempt,
            inputs,
        } => then.calls.push(TaskCall {
            instance_id: id.to_owned(),
            node,
            handler,
            attempt,
            inputs,
        }),
        Effect::ArmTimer {
            name,
            due_at_ms,
            incarnation,
        } => {
            if name.kind() == TimerKind::Retry {
                then.parks += 1;
            }
            then.earliest_timer_ms = Some(
                then.earliest_timer_ms
                    .map_or(due_at_ms, |t| t.min(due_at_ms)),
            );
            commit.timers.arm.push(TimerRecord {
                instance: commit.instance,
                name,
                due_at_ms,
                incarnation,
            });
        }
        Effect::ResolveTimer { name, incarnation } => {
            commit.timers.resolve.push(TimerRef { name, incarnation })
        }
        Effect::Subscribe { node, message, key } => commit
            .subscriptions
            .open
            .push(NewSubscription { node, message, key }),
        Effect::Unsubscribe { node } => commit.subscriptions.close.push(node),
        Effect::MoveIncidents { from, to } => commit.incidents.moved.push((from, to)),
        Effect::AttemptFinished {
            node,
            attempt,
            outcome,
            code,
            message,
            worker,
        } => commit.attempts.push(AttemptRecord {
            instance: commit.instance,
            node,
            attempt,
            // A pull task's attempt is not started by this shell; its history row spans
            // the step that ended it (the lock instant is in the snapshot until then).
            started_at_ms: started_ms,
            finished_at_ms: now,
            outcome,
            code,
            message,
            worker,
        }),
        Effect::OfferPullTask {
            node,
            topic,
            attempt,
            lock,
        } => {
            // One row per node per commit, whatever order the step offered and withdrew
            // in: the last effect on a node is what the row must say.
            commit.pull.withdraw.retain(|n| *n != node);
            commit.pull.offer.retain(|r| r.node != node);
            if lock.is_none() {
                then.pull_topics.push(topic.clone());
            }
            commit.pull.offer.push(PullTaskRecord {
                instance: commit.instance,
                node,
                topic,
                attempt,
                worker: lock.as_ref().map(|l| l.worker.clone()),
                lock_until_ms: lock.map(|l| l.until_ms),
                offered_at_ms: now,
            });
        }
        Effect::WithdrawPullTask { node } => {
            commit.pull.offer.retain(|r| r.node != node);
            commit.pull.withdraw.push(node);
        }
        // One row write per node per commit here too: the last effect on a node wins (an
        // assignment after an offer of the same commit goes into the offered row).
        Effect::OfferUserTask {
            node,
            assignee,
            candidate_groups,
            candidate_users,
        } => {
            let tasks = &mut commit.user_tasks;
            tasks.offer.retain(|r| r.node != node);
            tasks.assign.retain(|(n, _)| *n != node);
            tasks.offer.push(UserTaskRecord {
                instance: commit.instance,
                node,
                deployment: commit.deployment,
                assignee,
                candidate_groups,
                candidate_users,
                created_at_ms: now,
            });
        }
        Effect::AssignUserTask { node, assignee } => {
            let tasks = &mut commit.user_tasks;
            match tasks.offer.iter_mut().find(|r| r.node == node) {
                Some(row) => row.assignee = assignee,
                None => {
                    tasks.assign.retain(|(n, _)| *n != node);
                    tasks.assign.push((node, assignee));
                }
            }
        }
        Effect::WithdrawUserTask { node } => {
            let tasks = &mut commit.user_tasks;
            tasks.offer.retain(|r| r.node != node);
            tasks.assign.retain(|(n, _)| *n != node);
            tasks.withdraw.push(node);
        }
        Effect::OpenIncident {
            node,
            code,
            message,
        } => commit.incidents.open.push(NewIncident {
            node,
            code,
            message,
        }),
        Effect::ResolveIncident { node } => commit.incidents.resolve_on.push(node),
        Effect::SendRequest {
            node,
            channel,
            attempt,
            key,
            call_id,
            body,
        } => {
            then.outbox = true;
            commit.outbox.emit.push(NewOutboxRow {
                key,
                node,
                channel,
                attempt,
                call_id,
                // Variables are a JSON object; writing one cannot fail.
                body: serde_json::to_string(&body).unwrap_or_else(|_| "{}".to_owned()),
            });
        }
        Effect::PublishMessage {
            node,
            name,
            correlation_key,
            key,
            variables,
        } => {
            then.outbox = true;
            let row = crate::signals::message_row(node, &name, correlation_key, key, &variables);
            commit.outbox.emit.push(row);
        }
        Effect::ThrowSignal { node, name, key } => {
            then.outbox = true;
            commit
                .outbox
                .emit
                .push(crate::signals::signal_row(node, &name, key));
        }
        Effect::StartChild {
            node,
            call,
            key,
            process,
            version,
            variables,
            ..
        } => {
            then.outbox = true;
            let row = crate::calls::start_row(node, key, call, process, version, variables);
            commit.outbox.emit.push(row);
        }
        Effect::CancelChild { node, key } => {
            then.outbox = true;
            commit.outbox.emit.push(crate::calls::cancel_row(node, key));
        }
        Effect::NotifyParent {
            parent,
            key,
            outcome,
        } => {
            then.outbox = true;
            commit
                .outbox
                .emit
                .push(crate::calls::ended_row(parent, key, outcome));
        }
        // Applied before the commit's emissions: a node whose dead attempt is withdrawn
        // keeps the request of the attempt emitted after it.
        Effect::WithdrawRequests { node } => commit.outbox.withdraw.push(node),
        // The ending travels in the snapshot (and the instance row's status); a stale
        // input writes nothing but the fired row's delete.
        Effect::Completed | Effect::Failed { .. } | Effect::Cancelled | Effect::Stale { .. } => {}
    }
}

/// The instance-row status of a snapshot status.
pub fn store_status(s: Status) -> InstanceStatus {
    match s {
        Status::New | Status::Running => InstanceStatus::Running,
        Status::Completed => InstanceStatus::Completed,
        Status::Failed => InstanceStatus::Failed,
        Status::Cancelled => InstanceStatus::Cancelled,
    }
}

/// An instance stepped by [`claim_and_step`].
pub struct Stepped {
    /// The fence after the commit; the step was taken from `fence - 1`.
    pub fence: u64,
    /// The claim after the commit.
    pub claim: Claim,
    /// Handler calls the step asked for; the caller starts them (or hands them to a lane).
    pub calls: Vec<TaskCall>,
    /// Handler calls handed over to a runtime by a lease due at once (see [`Then`]).
    pub handed_over: Vec<TaskCall>,
    /// Topics of pull tasks the step offered (see [`Then::pull_topics`]).
    pub pull_topics: Vec<String>,
    /// The step emitted outbox rows (see [`Then::outbox`]).
    pub outbox: bool,
    /// `(message, correlation key)` of every message wait the step opened (signal waits,
    /// under the empty key, left out): where a buffered message may now be due.
    pub opened: Vec<(String, String)>,
}

/// One step taken outside a lane, as [`claim_and_step`] takes it.
pub(crate) struct Op<'a> {
    pub input: Input,
    pub now: i64,
    pub rules: LeaseRules,
    /// Written in the same commit: an operator action is logged exactly when it took
    /// effect.
    pub audit: Option<&'a AuditEntry>,
    /// Step with this deployment's definition and move the instance onto it (migration).
    pub onto: Option<(DeploymentId, Arc<Definition>)>,
    /// Plan the step and write nothing; the result is the instance as it would be.
    pub dry_run: bool,
    /// The lifecycle channel (C10), when events are on.
    pub lifecycle: Option<&'a str>,
    /// Which steps write a journal row (SPEC G3).
    pub journal: &'a JournalPolicy,
    /// The step delivers this buffered message: the commit records the instance's
    /// process as its taker, and is refused when that process took it before or it has
    /// expired ([`qflow_store::Commit::message_take`]). A process among the message's
    /// known takers is refused before the step, without a write.
    pub take: Option<&'a qflow_store::BufferedMessage>,
}

/// The refusal of a buffered message's delivery to `process`, which took it already
/// (or the message expired).
fn message_taken(process: &str) -> Error {
    Error::Refused {
        what: "message".to_owned(),
        why: format!(
            "the buffered message was taken by process `{process}` already, or it expired"
        ),
    }
}

/// `(message, correlation key)` of the message waits `commit` opens; signal waits (the
/// empty key) are left out.
pub(crate) fn opened_waits(commit: &qflow_store::Commit) -> Vec<(String, String)> {
    commit
        .subscriptions
        .open
        .iter()
        .filter(|s| !s.key.is_empty())
        .map(|s| (s.message.clone(), s.key.clone()))
        .collect()
}

/// Reads instance `id`, steps it and commits the step alone under its fence; on a lost
/// compare-and-swap it re-reads and re-derives, up to [`CONFLICT_RETRIES_MAX`] times.
/// Nothing is written unless the commit is applied (and nothing at all on a dry run).
pub(crate) async fn claim_and_step(
    store: &dyn Store,
    defs: &Definitions,
    id: InstanceId,
    op: Op<'_>,
) -> Result<Stepped, Error> {
    for _ in 0..=CONFLICT_RETRIES_MAX {
        let mut claim = Claim::read(store, defs, id).await?;
        if let Some((deployment, def)) = &op.onto {
            claim.deployment = *deployment;
            claim.def = def.clone();
        }
        if let Some(message) = op.take {
            if message.takers.contains(&claim.def.id) {
                return Err(message_taken(&claim.def.id));
            }
        }
        let take = op.take.map(|message| qflow_store::MessageTake {
            message: message.id,
            process: claim.def.id.clone(),
        });
        let mut planned = plan(
            claim,
            op.input.clone(),
            None,
            op.now,
            op.now,
            op.rules,
            op.journal,
        )?;
        if let Some(channel) = op.lifecycle {
            let cause = crate::lifecycle::Cause::of(&op.input);
            let finished = planned.then.finished_now;
            crate::lifecycle::add_events(&mut planned.commit, channel, &cause, finished);
            planned.then.outbox |= !planned.commit.outbox.emit.is_empty();
        }
        if op.dry_run {
            return Ok(Stepped {
                fence: planned.then.next.fence.map_or(1, |f| f + 1),
                claim: planned.then.next,
                calls: Vec::new(),
                handed_over: planned.then.handed_over,
                pull_topics: Vec::new(),
                outbox: false,
                opened: Vec::new(),
            });
        }
        planned.commit.audit.extend(op.audit.cloned());
        planned.commit.moves = op.onto.is_some();
        let taker = take.as_ref().map(|t| t.process.clone()).unwrap_or_default();
        planned.commit.message_take = take.map(Box::new);
        let opened = opened_waits(&planned.commit);
        let planned_deployment = planned.commit.deployment;
        let outcome = store.commit(vec![planned.commit]).await?;
        match outcome.first() {
            Some(CommitOutcome::Applied { fence }) => {
                return Ok(Stepped {
                    fence: *fence,
                    claim: Claim {
                        fence: Some(*fence),
                        ..planned.then.next
                    },
                    calls: planned.then.calls,
                    handed_over: planned.then.handed_over,
                    pull_topics: planned.then.pull_topics,
                    outbox: planned.then.outbox,
                    opened,
                })
            }
            Some(CommitOutcome::MessageTaken) => return Err(message_taken(&taker)),
            Some(CommitOutcome::Conflict { .. }) => continue,
            Some(CommitOutcome::DuplicateBusinessKey { existing }) => {
                return Err(Error::DuplicateBusinessKey {
                    existing: *existing,
                })
            }
            Some(CommitOutcome::DeploymentRetired) => {
                return Err(Error::Refused {
                    what: "step".to_owned(),
                    why: format!(
                        "deployment {} was retired, so instance {id} cannot move onto it",
                        planned_deployment.0
                    ),
                })
            }
            None => {
                return Err(Error::Conflict(format!(
                    "the store did not apply the step of instance {id}"
                )))
            }
        }
    }
    Err(Error::Conflict(format!(
        "instance {id} changed under {} attempts to step it",
        CONFLICT_RETRIES_MAX + 1
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: LeaseRules = LeaseRules {
        lease_ms: 40_000,
        refresh_divisor: 2,
        handing_over: false,
    };

    #[test]
    fn the_lease_follows_the_attempts_in_flight() {
        let now = 1_000;
        // An attempt starts: armed a lease ahead.
        assert_eq!(
            lease_decision(RULES, true, None, false, true, now),
            LeaseAction::Arm(41_000)
        );
        // More than half left: kept; less than half: pushed forward.
        assert_eq!(
            lease_decision(RULES, true, Some(21_001), false, true, now),
            LeaseAction::Keep
        );
        assert_eq!(
            lease_decision(RULES, true, Some(20_999), false, true, now),
            LeaseAction::Arm(41_000)
        );
        // Unknown due instant (read from the store): re-armed to be sure.
        assert_eq!(
            lease_decision(RULES, true, Some(i64::MIN), false, false, now),
            LeaseAction::Arm(41_000)
        );
        // The lease itself fired while still in flight: re-armed (its claim replaced).
        assert_eq!(
            lease_decision(RULES, true, Some(41_000), true, true, now),
            LeaseAction::Arm(41_000)
        );
        // Nothing in flight any more: resolved, unless the fired row is deleted anyway.
        assert_eq!(
            lease_decision(RULES, false, Some(41_000), false, false, now),
            LeaseAction::Resolve
        );
        assert_eq!(
            lease_decision(RULES, false, Some(41_000), true, false, now),
            LeaseAction::Keep
        );
        assert_eq!(
            lease_decision(RULES, false, None, false, false, now),
            LeaseAction::Keep
        );
    }

    #[test]
    fn a_shutting_down_replica_hands_new_attempts_over_at_once() {
        let rules = LeaseRules {
            handing_over: true,
            ..RULES
        };
        assert_eq!(
            lease_decision(rules, true, Some(41_000), false, true, 5),
            LeaseAction::Arm(5)
        );
        // No new attempt asked for: nothing to hand over, the lease keeps its instant.
        assert_eq!(
            lease_decision(rules, true, Some(41_000), false, false, 5),
            LeaseAction::Keep
        );
    }
}
