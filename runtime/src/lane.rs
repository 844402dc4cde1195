//! One lane: a single tokio task that steps its instances and group-commits each round.
//!
//! A round gathers every ready request (new work from the inbox, outcomes of finished
//! handlers), steps each against its cached snapshot — at most one step per instance per
//! round, so a batch never holds two writes of one instance — and commits all of them in
//! one store call. Only after that commit does the lane start the handlers the steps
//! asked for: a task's outcome is always durable before the next handler of the same
//! instance runs (R1a).
//!
//! The lane never sleeps. It waits on exactly three things: its inbox, its running
//! handlers, and the store.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use qflow_loader::model::{Definition, NodeKind, TaskKind};
use tokio::sync::{mpsc, oneshot};

use super::{Request, Shared, TaskCall, Work, LEASE_TIMER};
use crate::error::Error;
use qflow_core::snapshot::{Snapshot, Status};
use qflow_core::{Effect, Input};
use qflow_store::{
    AttemptRecord, Commit, CommitOutcome, DeploymentId, InstanceId, InstanceStatus, NewIncident,
    TimerRecord, TimerRef,
};

/// How often a request may lose the compare-and-swap and be re-derived before the lane
/// gives up on it (the durable state is untouched either way).
const CONFLICT_RETRIES_MAX: u32 = 16;

/// The lease row is refreshed once less than this fraction of it remains.
const LEASE_REFRESH_DIVISOR: i64 = 2;

#[derive(Clone)]
struct Cached {
    deployment: DeploymentId,
    def: Arc<Definition>,
    fence: u64,
    snapshot: Snapshot,
    /// When the `~run` lease row is due; `Some(i64::MIN)` when it may exist but its due
    /// instant is unknown (state read from the store).
    lease_due: Option<i64>,
}

/// A stepped request waiting for its commit outcome.
struct Prepared {
    request: Request,
    next: Cached,
    /// `None` before the first commit of a new instance.
    expected_fence: Option<u64>,
    /// Taken out when the batch is sent to the store.
    commit: Option<Commit>,
    calls: Vec<TaskCall>,
    /// The step moved the instance into a terminal state (a stale timer on an instance
    /// that was already finished does not).
    finished_now: bool,
    parks: u64,
    earliest_timer_ms: Option<i64>,
}

type HandlerFuture = BoxFuture<'static, Request>;

struct Lane {
    shared: Arc<Shared>,
    /// Looked up by id, never iterated, so hash order cannot reach bytes or output.
    cache: HashMap<InstanceId, Cached>,
    running: FuturesUnordered<HandlerFuture>,
    ready: VecDeque<Request>,
}

pub(crate) async fn run(shared: Arc<Shared>, mut inbox: mpsc::Receiver<Request>) {
    let mut stop = shared.stop.subscribe();
    let batch_max = shared.config.batch_max.max(1);
    let mut lane = Lane {
        shared,
        cache: HashMap::new(),
        running: FuturesUnordered::new(),
        ready: VecDeque::new(),
    };
    loop {
        if lane.ready.is_empty() {
            if *stop.borrow() && lane.running.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                Some(done) = lane.running.next(), if !lane.running.is_empty() => {
                    lane.ready.push_back(done);
                }
                msg = inbox.recv(), if !*stop.borrow() && lane.has_room() => match msg {
                    Some(req) => lane.ready.push_back(req),
                    None if lane.running.is_empty() => break,
                    None => {}
                },
                _ = stop.changed() => {}
            }
        }
        // Finished work before new work: outcomes of running handlers first, so that
        // instances in flight drain ahead of fresh starts and the set of live instances
        // stays bounded under a steady stream of new ones.
        while lane.ready.len() < batch_max {
            match lane.running.next().now_or_never() {
                Some(Some(done)) => lane.ready.push_back(done),
                _ => break,
            }
        }
        while lane.ready.len() < batch_max && !*stop.borrow() && lane.has_room() {
            match inbox.try_recv() {
                Ok(req) => lane.ready.push_back(req),
                Err(_) => break,
            }
        }
        lane.round(batch_max).await;
    }
}

impl Lane {
    /// Backpressure: new work is taken from the inbox only while the lane's running
    /// handlers stay under the configured limit.
    fn has_room(&self) -> bool {
        self.running.len() < self.shared.config.handlers_in_flight_max
    }

    async fn round(&mut self, batch_max: usize) {
        let now = self.shared.clock.now_ms();
        let mut prepared = Vec::new();
        let mut seen = HashSet::new();
        let mut later = VecDeque::new();
        while let Some(req) = self.ready.pop_front() {
            if prepared.len() >= batch_max || !seen.insert(req.instance) {
                later.push_back(req);
                continue;
            }
            if let Some(p) = self.prepare(req, now).await {
                prepared.push(p);
            }
        }
        self.ready = later;
        if prepared.is_empty() {
            return;
        }
        let commits = prepared
            .iter_mut()
            .filter_map(|p| p.commit.take())
            .collect();
        match self.shared.store.commit(commits).await {
            Ok(outcomes) => {
                self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
                for (p, outcome) in prepared.into_iter().zip(outcomes) {
                    match outcome {
                        CommitOutcome::Applied { fence } => self.applied(p, fence, now),
                        CommitOutcome::Conflict { .. } => self.conflicted(p),
                        CommitOutcome::DeploymentRetired => self.refused_retired(p),
                    }
                }
            }
            Err(e) => {
                // Nothing of the batch is durable. Forget the cached states; handler
                // outcomes are recovered by the lease timers, timers by their leases.
                tracing::error!(error = %e, "commit failed; dropping the round");
                let message = e.to_string();
                for p in prepared {
                    self.cache.remove(&p.request.instance);
                    reply(p.request.reply, Err(Error::StoreFailed(message.clone())));
                }
            }
        }
    }

    /// Steps one request against its instance's current state. `None` when there is
    /// nothing to commit (the request was answered already).
    async fn prepare(&mut self, mut req: Request, now: i64) -> Option<Prepared> {
        let (current, expected_fence) = match self.current(&req).await {
            Ok(state) => state,
            Err(e) => {
                reply(req.reply.take(), Err(e));
                return None;
            }
        };
        let fired_timer = match &req.work {
            Work::Timer { name, incarnation } => Some(TimerRef {
                name: name.clone(),
                incarnation: *incarnation,
            }),
            _ => None,
        };
        let input = match &req.work {
            Work::Start { variables, .. } => Input::Start {
                variables: variables.clone(),
            },
            Work::Input(input) => input.clone(),
            Work::Timer { name, .. } if name == LEASE_TIMER => Input::Redrive,
            Work::Timer { name, incarnation } => Input::TimerFired {
                name: name.clone(),
                incarnation: *incarnation,
            },
        };
        let id = req.instance.to_string();
        let step = match qflow_core::step(&current.def, &id, current.snapshot.clone(), input, now) {
            Ok(step) => step,
            Err(e) => {
                reply(req.reply.take(), Err(e.into()));
                return None;
            }
        };
        let stale = step.effects.iter().find_map(|e| match e {
            Effect::Stale { reason } => Some(reason.clone()),
            _ => None,
        });
        if let (Some(reason), None) = (&stale, &fired_timer) {
            // A stale input changes nothing; there is nothing to write.
            reply(
                req.reply.take(),
                Err(Error::Refused {
                    what: "input".to_owned(),
                    why: reason.clone(),
                }),
            );
            return None;
        }
        let finished_now =
            step.snapshot.status().is_terminal() && !current.snapshot.status().is_terminal();
        let mut next = Cached {
            snapshot: step.snapshot,
            ..current
        };
        let mut calls = Vec::new();
        let mut parks = 0;
        let mut earliest_timer_ms = None;
        for effect in &step.effects {
            match effect {
                Effect::RunTask {
                    node,
                    handler,
                    attempt,
                    inputs,
                } => calls.push(TaskCall {
                    instance_id: id.clone(),
                    node: node.clone(),
                    handler: handler.clone(),
                    attempt: *attempt,
                    inputs: inputs.clone(),
                }),
                Effect::ArmTimer {
                    name, due_at_ms, ..
                } => {
                    if name.starts_with("r:") {
                        parks += 1;
                    }
                    earliest_timer_ms =
                        Some(earliest_timer_ms.map_or(*due_at_ms, |t: i64| t.min(*due_at_ms)));
                }
                _ => {}
            }
        }
        let mut commit = Commit {
            instance: req.instance,
            expected_fence,
            deployment: next.deployment,
            status: store_status(next.snapshot.status()),
            failure_code: next.snapshot.failure().map(|f| f.code.clone()),
            snapshot: next.snapshot.encode(),
            now_ms: now,
            arm_timers: Vec::new(),
            resolve_timers: fired_timer.into_iter().collect(),
            open_incidents: Vec::new(),
            resolve_incidents_on: Vec::new(),
            attempts: Vec::new(),
        };
        let started_ms = req.started_ms.unwrap_or(now);
        for effect in step.effects {
            carry_out(&mut commit, effect, started_ms, now);
        }
        // The in-flight lease is decided from the next state alone: armed (or pushed
        // forward) while a task attempt is in flight, resolved once none is.
        //
        // While shutting down, the lane starts no new handlers: attempts this step asks
        // for are handed over instead, by a lease that is due at once, so the next
        // replica to poll (or this one after a restart) re-adopts them without waiting.
        let lease_ms = self.shared.config.inflight_lease_ms;
        let handing_over = !calls.is_empty() && self.shared.stopping.load(Ordering::SeqCst);
        let in_flight = next.snapshot.status() == Status::Running && has_attempt_in_flight(&next);
        if in_flight {
            let refresh_at = now.saturating_add(lease_ms / LEASE_REFRESH_DIVISOR);
            if handing_over
                || next.lease_due.is_none_or(|due| due < refresh_at)
                || is_lease(&commit)
            {
                let due = if handing_over {
                    now
                } else {
                    now.saturating_add(lease_ms)
                };
                // The upsert replaces the row (and drops its claim lease); a resolve of the
                // same name in this commit would delete the fresh row again.
                commit.resolve_timers.retain(|t| t.name != LEASE_TIMER);
                commit.arm_timers.push(TimerRecord {
                    instance: req.instance,
                    name: LEASE_TIMER.to_owned(),
                    due_at_ms: due,
                    incarnation: 0,
                });
                next.lease_due = Some(due);
            }
        } else if next.lease_due.is_some() && !is_lease(&commit) {
            commit.resolve_timers.push(TimerRef {
                name: LEASE_TIMER.to_owned(),
                incarnation: 0,
            });
            next.lease_due = None;
        } else {
            next.lease_due = None;
        }
        if handing_over {
            calls.clear();
        }
        Some(Prepared {
            request: req,
            next,
            expected_fence,
            commit: Some(commit),
            calls,
            finished_now,
            parks,
            earliest_timer_ms,
        })
    }

    /// The state to step from: the lane's cache, else the store. Also the fence the
    /// commit must find (`None` for a new instance).
    async fn current(&mut self, req: &Request) -> Result<(Cached, Option<u64>), Error> {
        if let Work::Start { deployment, .. } = &req.work {
            let def = self.shared.defs.get(*deployment).await?;
            let fresh = Cached {
                deployment: *deployment,
                def,
                fence: 0,
                snapshot: Snapshot::new(),
                lease_due: None,
            };
            return Ok((fresh, None));
        }
        if let Some(c) = self.cache.get(&req.instance) {
            return Ok((c.clone(), Some(c.fence)));
        }
        let record = self
            .shared
            .store
            .instance(req.instance)
            .await?
            .ok_or(Error::UnknownInstance(req.instance.to_string()))?;
        let def = self.shared.defs.get(record.deployment).await?;
        let snapshot = Snapshot::decode(&record.snapshot)?;
        let c = Cached {
            deployment: record.deployment,
            def,
            fence: record.fence,
            snapshot,
            lease_due: Some(i64::MIN),
        };
        Ok((c, Some(record.fence)))
    }

    fn applied(&mut self, p: Prepared, fence: u64, now: i64) {
        let stats = &self.shared.stats;
        stats.steps.fetch_add(1, Ordering::Relaxed);
        stats.parks.fetch_add(p.parks, Ordering::Relaxed);
        if p.expected_fence.is_none() {
            stats.started.fetch_add(1, Ordering::Relaxed);
        }
        let instance = p.request.instance;
        let status = p.next.snapshot.status();
        // Only instances with a handler about to run stay cached: their outcome comes
        // back to this lane within the time limit. A parked or finished instance is read
        // from the store when it next has work, so the cache holds no more entries than
        // there are running handlers.
        if status.is_terminal() || p.calls.is_empty() {
            self.cache.remove(&instance);
        } else {
            self.cache.insert(instance, Cached { fence, ..p.next });
        }
        if p.finished_now {
            let counter = match status {
                Status::Completed => &stats.completed,
                Status::Failed => &stats.failed,
                _ => &stats.cancelled,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            self.shared.terminal.notify_waiters();
        }
        if p.earliest_timer_ms
            .is_some_and(|t| t <= now.saturating_add(self.shared.config.poll_interval_ms as i64))
        {
            self.shared.timer_armed.notify_one();
        }
        reply(p.request.reply, Ok(()));
        let limit = Duration::from_millis(self.shared.config.handler_time_limit_ms);
        for call in p.calls {
            stats.handler_calls.fetch_add(1, Ordering::Relaxed);
            let started_ms = self.shared.clock.now_ms();
            let fut = self.shared.handlers.run(call, limit);
            self.running.push(
                fut.map(move |input| Request {
                    instance,
                    work: Work::Input(input),
                    started_ms: Some(started_ms),
                    reply: None,
                    retries: 0,
                })
                .boxed(),
            );
        }
    }

    /// A start on a deployment whose retirement committed first (perhaps through
    /// another replica): nothing was written; the caller hears why.
    fn refused_retired(&mut self, p: Prepared) {
        self.shared.defs.mark_retired(p.next.deployment);
        let why = format!("deployment {} is retired", p.next.deployment.0);
        reply(
            p.request.reply,
            Err(Error::Refused {
                what: "start".to_owned(),
                why,
            }),
        );
    }

    /// Lost the compare-and-swap: someone else stepped the instance. Forget what we
    /// thought we knew and derive again from the stored state.
    fn conflicted(&mut self, mut p: Prepared) {
        self.shared.stats.conflicts.fetch_add(1, Ordering::Relaxed);
        self.cache.remove(&p.request.instance);
        if p.expected_fence.is_none() || p.request.retries >= CONFLICT_RETRIES_MAX {
            let why = format!(
                "instance {} changed under {} attempts to step it",
                p.request.instance,
                p.request.retries + 1
            );
            reply(p.request.reply.take(), Err(Error::Conflict(why)));
            return;
        }
        p.request.retries += 1;
        self.ready.push_back(p.request);
    }
}

fn is_lease(commit: &Commit) -> bool {
    commit.resolve_timers.iter().any(|t| t.name == LEASE_TIMER)
}

/// Is some registered task of this instance running an attempt right now (its token is
/// there and it is not in a backoff window)?
fn has_attempt_in_flight(c: &Cached) -> bool {
    let p = &c.def.process;
    c.snapshot.tokens().iter().any(|node| {
        p.find(node).is_some_and(|idx| {
            matches!(&p.node(idx).kind, NodeKind::Task(t) if matches!(t.kind, TaskKind::Registered { .. }))
                && c.snapshot.marker(node).is_none()
        })
    })
}

fn store_status(s: Status) -> InstanceStatus {
    match s {
        Status::New | Status::Running => InstanceStatus::Running,
        Status::Completed => InstanceStatus::Completed,
        Status::Failed => InstanceStatus::Failed,
        Status::Cancelled => InstanceStatus::Cancelled,
    }
}

/// Writes one effect into the commit that carries the step.
fn carry_out(commit: &mut Commit, effect: Effect, started_ms: i64, now: i64) {
    match effect {
        Effect::ArmTimer {
            name,
            due_at_ms,
            incarnation,
        } => commit.arm_timers.push(TimerRecord {
            instance: commit.instance,
            name,
            due_at_ms,
            incarnation,
        }),
        Effect::ResolveTimer { name, incarnation } => {
            commit.resolve_timers.push(TimerRef { name, incarnation })
        }
        Effect::AttemptFinished {
            node,
            attempt,
            outcome,
            code,
            message,
        } => commit.attempts.push(AttemptRecord {
            instance: commit.instance,
            node,
            attempt,
            started_at_ms: started_ms,
            finished_at_ms: now,
            outcome: outcome.as_str().to_owned(),
            code,
            message,
        }),
        Effect::OpenIncident {
            node,
            code,
            message,
        } => commit.open_incidents.push(NewIncident {
            node,
            code,
            message,
        }),
        Effect::ResolveIncident { node } => commit.resolve_incidents_on.push(node),
        // Handlers start after the commit; status travels in the snapshot.
        Effect::RunTask { .. }
        | Effect::Completed
        | Effect::Failed { .. }
        | Effect::Cancelled
        | Effect::Stale { .. } => {}
    }
}

/// Answers the caller, if there is one. Work nobody waits for (handler outcomes, timers)
/// is logged instead: a stale outcome at debug level, anything else as a warning, since a
/// timer whose step keeps failing comes back every lease period.
fn reply(to: Option<oneshot::Sender<Result<(), Error>>>, result: Result<(), Error>) {
    match (to, result) {
        (Some(tx), result) => {
            let _ = tx.send(result);
        }
        (None, Ok(())) => {}
        (None, Err(e @ Error::Refused { .. })) => tracing::debug!(error = %e, "input not applied"),
        (None, Err(e)) => tracing::warn!(error = %e, "work for an instance could not be stepped"),
    }
}
