//! One lane: a single tokio task that steps its instances and group-commits each round.
//!
//! A round gathers every ready request (new work from the inbox, outcomes of finished
//! handlers), steps each against its cached snapshot — at most one step per instance per
//! round, so a batch never holds two writes of one instance — and commits all of them in
//! one store call. Only after that commit does the lane start the handlers the steps
//! asked for: a task's outcome is always durable before the next handler of the same
//! instance runs (R1a).
//!
//! On a store that joins the commits arriving while one runs into its next transaction
//! ([`Store::commits_group`]: SQLite's committer) a round's commit runs on a task of its
//! own while the lane prepares the next round (`docs/performance.md`, "A lane prepares
//! while its commit runs"). That round takes no request of an instance whose commit is
//! in flight: such a request stays ready until the commit is answered, so an instance is
//! never stepped from a state that is not yet durable. The lane awaits the answer of the
//! commit in flight before it submits the next, so a lane has at most one commit in
//! flight and its commits reach the store in order; it takes that answer in (starts the
//! handlers, answers the callers) once the next commit is on its way.
//!
//! [`Store::commits_group`]: qflow_store::Store::commits_group
//!
//! The lane never sleeps. It waits on exactly four things: its inbox, its running
//! handlers, its commit in flight, and the store.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use qflow_core::{Input, Status, TimerKind};
use qflow_store::{Commit, CommitOutcome, InstanceId, StoreError, StoreResult, TimerRef};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::claim::{plan_into, Claim, LeaseRules, Then, CONFLICT_RETRIES_MAX};
use super::{Replier, Request, Shared, Stats, Work};
use crate::error::Error;
use crate::handlers::HandlerRun;

/// The lane's maps and sets keyed by instance id: foldhash (a random seed per map), not
/// the standard SipHash, which took a few per cent of a lane's time hashing ids. None of
/// them is iterated, so nothing depends on the seed.
type IdMap<V> = std::collections::HashMap<InstanceId, V, foldhash::fast::RandomState>;
type IdSet = std::collections::HashSet<InstanceId, foldhash::fast::RandomState>;

/// The lease row is refreshed once less than this fraction of it remains.
const LEASE_REFRESH_DIVISOR: i64 = 2;

/// The most cache entries kept for instances whose pull task is locked (beyond those with
/// a running handler); past it such instances are read from the store when answered.
const LOCKED_CACHED_MAX: usize = 10_000;

/// A stepped request waiting for its commit outcome.
struct Prepared {
    request: Request,
    then: Then,
}

/// What a round's applied steps add to the runtime's counters ([`Stats`]).
#[derive(Default)]
struct Tally {
    steps: u64,
    started: u64,
    parks: u64,
    handler_calls: u64,
    completed: u64,
    failed: u64,
    cancelled: u64,
}

impl Tally {
    fn count(&mut self, then: &Then) {
        self.steps += 1;
        self.parks += then.parks;
        self.started += u64::from(then.next.fence.is_none());
        self.handler_calls += then.calls.len() as u64;
        if then.finished_now {
            match then.next.snapshot.status() {
                Status::Completed => self.completed += 1,
                Status::Failed => self.failed += 1,
                _ => self.cancelled += 1,
            }
        }
    }

    /// Adds the round's counts, and `took_us` as the latency of each of its steps.
    fn add_to(&self, stats: &Stats, took_us: u64) {
        let adds = [
            (&stats.steps, self.steps),
            (&stats.started, self.started),
            (&stats.parks, self.parks),
            (&stats.handler_calls, self.handler_calls),
            (&stats.completed, self.completed),
            (&stats.failed, self.failed),
            (&stats.cancelled, self.cancelled),
        ];
        for (counter, n) in adds {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
        stats.step_latency.observe_us_times(took_us, self.steps);
    }
}

type HandlerFuture = BoxFuture<'static, Request>;

/// A round whose commit the store has not answered yet.
struct InFlight {
    /// The store's commit, on a task of its own so that it goes on while the lane
    /// prepares the next round (a commit's future may need polling to progress).
    /// Aborted if the lane is dropped, as the commit's future would be dropped with a
    /// lane that awaited it.
    commit: AbortOnDrop,
    round: Committed,
}

/// A round's commit, as the lane needs it to take the store's answer.
struct Committed {
    /// The round's stepped requests, in the batch's order.
    prepared: Vec<Prepared>,
    /// Message waits the round opens, by index in the batch.
    opens: Vec<(usize, Vec<(String, String)>)>,
    /// The instances of the batch: the next round leaves their requests ready.
    instances: IdSet,
    /// When the round began, for the step latency.
    began: std::time::Instant,
    /// The round's `now`.
    now: i64,
}

/// A commit's task, aborted when dropped.
struct AbortOnDrop(JoinHandle<StoreResult<Vec<CommitOutcome>>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the store answered a commit (a commit's task that panicked or was aborted
/// counts as a failed commit: nothing of it is known to be durable).
async fn answer(in_flight: &mut InFlight) -> StoreResult<Vec<CommitOutcome>> {
    match (&mut in_flight.commit.0).await {
        Ok(answer) => answer,
        Err(e) => Err(StoreError::Backend(Box::new(e))),
    }
}

/// [`answer`] of the commit in flight; never ready when there is none.
async fn answer_if_any(in_flight: Option<&mut InFlight>) -> StoreResult<Vec<CommitOutcome>> {
    match in_flight {
        Some(in_flight) => answer(in_flight).await,
        None => std::future::pending().await,
    }
}

struct Lane {
    shared: Arc<Shared>,
    /// Looked up by id, never iterated, so hash order cannot reach bytes or output.
    cache: IdMap<Claim>,
    running: FuturesUnordered<HandlerFuture>,
    /// Outcomes of handlers that ended as they were started (synchronous ones), taken
    /// in as a finished future of `running` would be, without a future to box and poll.
    ended: VecDeque<Request>,
    ready: VecDeque<Request>,
    /// Emptied buffers kept from the round before, with their capacity: a round fills
    /// them with whole requests and steps, and growing them afresh every round cost the
    /// lane a fifth of its time in copies and fresh pages (`docs/performance.md`).
    spare_ready: VecDeque<Request>,
    spare_chosen: Vec<Request>,
    /// The last round's commit, if the store has not answered it yet.
    in_flight: Option<InFlight>,
}

pub(crate) async fn run(shared: Arc<Shared>, mut inbox: mpsc::Receiver<Request>) {
    let mut stop = shared.stop.subscribe();
    let batch_max = shared.config.batch_max.max(1);
    let mut lane = Lane {
        shared,
        cache: IdMap::default(),
        running: FuturesUnordered::new(),
        ended: VecDeque::new(),
        ready: VecDeque::new(),
        spare_ready: VecDeque::new(),
        spare_chosen: Vec::new(),
        in_flight: None,
    };
    let mut inbox_open = true;
    loop {
        if lane.ready.is_empty() {
            if *stop.borrow() && lane.handlers_done() && lane.in_flight.is_none() {
                break;
            }
            if let Some(done) = lane.ended.pop_front() {
                // What the select below takes from a handler future that has finished.
                lane.ready.push_back(done);
            } else {
                tokio::select! {
                    biased;
                    answered = answer_if_any(lane.in_flight.as_mut()) => {
                        if let Some(done) = lane.in_flight.take() {
                            lane.answered(done.round, answered);
                        }
                    }
                    Some(done) = lane.running.next(), if !lane.running.is_empty() => {
                        lane.ready.push_back(done);
                    }
                    msg = inbox.recv(), if inbox_open && !*stop.borrow() && lane.has_room() => match msg {
                        Some(req) => lane.ready.push_back(req),
                        None => inbox_open = false,
                    },
                    _ = stop.changed() => {}
                }
            }
            if !inbox_open
                && lane.ready.is_empty()
                && lane.handlers_done()
                && lane.in_flight.is_none()
            {
                break;
            }
            // The lane had nothing ready and took one request (waiting for it if none
            // was there): let the tasks that send requests (the starts a caller issues
            // together, other lanes' answers) run once before the round, so that it
            // takes what they send now as well. Without it, on a store whose commits
            // never wait (the memory store), lanes stepped one request a round and 4
            // lanes did fewer steps than one; yielding only after a real wait kept
            // little of the gain (docs/performance.md, "Lanes that wake for one request").
            tokio::task::yield_now().await;
        }
        // Finished work before new work: outcomes of running handlers first, so that
        // instances in flight drain ahead of fresh starts and the set of live instances
        // stays bounded under a steady stream of new ones.
        while lane.ready.len() < batch_max {
            if let Some(done) = lane.ended.pop_front() {
                lane.ready.push_back(done);
                continue;
            }
            match lane.running.next().now_or_never() {
                Some(Some(done)) => lane.ready.push_back(done),
                _ => break,
            }
        }
        while lane.ready.len() < batch_max && inbox_open && !*stop.borrow() && lane.has_room() {
            match inbox.try_recv() {
                Ok(req) => lane.ready.push_back(req),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    inbox_open = false;
                    break;
                }
            }
        }
        if lane.ready.is_empty() {
            continue;
        }
        lane.round(batch_max).await;
    }
}

impl Lane {
    /// Backpressure: new work is taken from the inbox only while the lane's running
    /// handlers stay under the configured limit.
    fn has_room(&self) -> bool {
        self.running.len() + self.ended.len() < self.shared.config.handlers_in_flight_max
    }

    /// No handler is running and no outcome of one waits to be taken in.
    fn handlers_done(&self) -> bool {
        self.running.is_empty() && self.ended.is_empty()
    }

    async fn round(&mut self, batch_max: usize) {
        let now = self.shared.clock.now_ms();
        let began = std::time::Instant::now();
        let mut seen = IdSet::default();
        let mut later = std::mem::take(&mut self.spare_ready);
        let mut chosen = std::mem::take(&mut self.spare_chosen);
        let committing = self.in_flight.as_ref().map(|f| &f.round.instances);
        while let Some(req) = self.ready.pop_front() {
            if chosen.len() >= batch_max
                || committing.is_some_and(|ids| ids.contains(&req.instance))
                || !seen.insert(req.instance)
            {
                later.push_back(req);
                continue;
            }
            chosen.push(req);
        }
        self.spare_ready = std::mem::replace(&mut self.ready, later);
        // The stored claims of the round's instances the cache does not hold, read all at
        // once rather than one after another: the store's readers run side by side, and a
        // round of pull-task locks or answers is mostly such instances.
        let uncached: Vec<InstanceId> = chosen
            .iter()
            .filter(|r| !matches!(r.work, Work::Start { .. }))
            .map(|r| r.instance)
            .filter(|id| !self.cache.contains_key(id))
            .collect();
        let mut read = read_claims(self.shared.clone(), uncached).await;
        // Sized once: a prepared step holds its instance's whole next state, so growing
        // these by doubling moved every step's state several times a round.
        let mut prepared = Vec::with_capacity(chosen.len());
        let mut commits = Vec::with_capacity(chosen.len());
        for req in chosen.drain(..) {
            let fetched = read.remove(&req.instance);
            self.prepare(req, fetched, now, &mut prepared, &mut commits)
                .await;
        }
        self.spare_chosen = chosen;
        // The previous round's answer before this round's commit: a lane's commits reach
        // the store in order, one at a time. The answer is taken in (handlers started,
        // callers answered) only once this round's commit is on its way, so that the
        // store's writer does not wait for that work (none of it touches this round's
        // instances). A store that does not group never has a commit in flight here.
        let previous = match self.in_flight.take() {
            Some(mut previous) => {
                let answered = answer(&mut previous).await;
                Some((previous.round, answered))
            }
            None => None,
        };
        if !prepared.is_empty() {
            self.submit(prepared, commits, began, now).await;
        }
        if let Some((round, answered)) = previous {
            self.answered(round, answered);
        }
    }

    /// Commits a round: on a store whose commits group, hands the commit to a task of its
    /// own and leaves it in flight; on any other, waits for the answer and takes it in.
    async fn submit(
        &mut self,
        prepared: Vec<Prepared>,
        commits: Vec<Commit>,
        began: std::time::Instant,
        now: i64,
    ) {
        // Message waits the round opens, by commit: a buffered message may be due there
        // once the commit applies (most rounds have none, and allocate nothing here).
        let opens: Vec<(usize, Vec<(String, String)>)> = commits
            .iter()
            .enumerate()
            .filter(|(_, c)| c.subscriptions.open.iter().any(|s| !s.key.is_empty()))
            .map(|(i, c)| (i, crate::claim::opened_waits(c)))
            .collect();
        let store = self.shared.store.clone();
        let overlap = store.commits_group();
        let round = Committed {
            instances: match overlap {
                true => prepared.iter().map(|p| p.request.instance).collect(),
                false => IdSet::default(),
            },
            prepared,
            opens,
            began,
            now,
        };
        if !overlap {
            let answered = store.commit(commits).await;
            self.answered(round, answered);
            return;
        }
        let commit = tokio::spawn(async move { store.commit(commits).await });
        self.in_flight = Some(InFlight {
            commit: AbortOnDrop(commit),
            round,
        });
        // A task spawned from a worker waits in that worker's next-task slot, which no
        // other worker takes, until the spawning task yields: without this the commit
        // would not start (hand its batch to the store's committer) before the lane had
        // taken the previous answer in and prepared its next round.
        tokio::task::yield_now().await;
    }

    /// Takes the store's answer to a round's commit: starts the handlers of the steps it
    /// applied, steps a conflicted request again, answers the callers.
    fn answered(&mut self, round: Committed, answer: StoreResult<Vec<CommitOutcome>>) {
        let Committed {
            prepared,
            opens,
            began,
            now,
            ..
        } = round;
        match answer {
            Ok(outcomes) => {
                for (i, waits) in opens {
                    if matches!(outcomes.get(i), Some(CommitOutcome::Applied { .. })) {
                        crate::buffer::waits_opened(&self.shared, waits);
                    }
                }
                self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
                // The round's counters, moved once a round rather than a handful of atomic
                // adds a step, and before any caller hears that its step was applied.
                let mut tally = Tally::default();
                for (p, outcome) in prepared.iter().zip(&outcomes) {
                    if matches!(outcome, CommitOutcome::Applied { .. }) {
                        tally.count(&p.then);
                    }
                }
                let took_us = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
                tally.add_to(&self.shared.stats, took_us);
                // The handlers of the round's steps start now: one reading of the clock
                // for all of them.
                let handlers_started_ms = self.shared.clock.now_ms();
                for (p, outcome) in prepared.into_iter().zip(outcomes) {
                    match outcome {
                        CommitOutcome::Applied { fence } => {
                            self.applied(p, fence, now, handlers_started_ms)
                        }
                        CommitOutcome::Conflict { .. } => self.conflicted(p),
                        CommitOutcome::DeploymentRetired => self.refused_retired(p),
                        CommitOutcome::DuplicateBusinessKey { existing } => reply(
                            p.request.reply,
                            Err(Error::DuplicateBusinessKey { existing }),
                        ),
                        // A lane's commits take no buffered message.
                        CommitOutcome::MessageTaken => self.conflicted(p),
                    }
                }
                self.shared.progress.notify_waiters();
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

    /// Steps one request against its instance's current state (`fetched`: read for it
    /// already) and adds its commit and what follows it to the round's. Nothing is added
    /// when there is nothing to commit (the request was answered already).
    async fn prepare(
        &mut self,
        mut req: Request,
        fetched: Option<Result<Claim, Error>>,
        now: i64,
        prepared: &mut Vec<Prepared>,
        commits: &mut Vec<Commit>,
    ) {
        let (current, cached) = match fetched {
            Some(claim) => (claim, false),
            None => self.current(&req).await,
        };
        let claim = match current {
            Ok(claim) => claim,
            Err(e) => {
                reply(req.reply.take(), Err(e));
                return;
            }
        };
        let (input, fired) = match &req.work {
            Work::Start {
                variables,
                start,
                parent,
                ..
            } => (
                match parent {
                    Some(parent) => Input::StartCalled {
                        variables: variables.clone(),
                        parent: parent.clone(),
                    },
                    None => Input::Start {
                        variables: variables.clone(),
                        start: start.clone(),
                    },
                },
                None,
            ),
            Work::Input(input) => (input.clone(), None),
            Work::Timer { name, incarnation } => {
                let fired = TimerRef {
                    name: name.clone(),
                    incarnation: *incarnation,
                };
                let input = if name.kind() == TimerKind::Lease {
                    Input::Redrive
                } else {
                    Input::TimerFired {
                        name: name.clone(),
                        incarnation: *incarnation,
                    }
                };
                (input, Some(fired))
            }
        };
        let rules = LeaseRules {
            lease_ms: self.shared.config.inflight_lease_ms,
            refresh_divisor: LEASE_REFRESH_DIVISOR,
            handing_over: self.shared.stopping.load(Ordering::SeqCst),
        };
        let started_ms = req.started_ms.unwrap_or(now);
        let journal = &self.shared.config.journal;
        let cause = self
            .shared
            .config
            .lifecycle_channel
            .as_ref()
            .map(|_| crate::lifecycle::Cause::of(&input));
        let planned = if cached {
            match plan_into(
                commits,
                claim,
                input.clone(),
                fired.clone(),
                started_ms,
                now,
                rules,
                journal,
            ) {
                // A refusal is only ever given from stored state: the cache may be behind
                // a step another replica or an operator took (a lock taken over, an
                // attempt re-offered), which only a commit's fence would have caught.
                Err(Error::Refused { .. }) => {
                    let store = &*self.shared.store;
                    match Claim::read(store, &self.shared.defs, req.instance).await {
                        Ok(fresh) => plan_into(
                            commits, fresh, input, fired, started_ms, now, rules, journal,
                        ),
                        Err(e) => Err(e),
                    }
                }
                other => other,
            }
        } else {
            plan_into(
                commits, claim, input, fired, started_ms, now, rules, journal,
            )
        };
        match planned {
            // `plan_into` pushed the step's commit, so `commits` and `prepared` stay in
            // step: the commit at each index is that of the request at the same index.
            Ok(mut then) => {
                let Some(commit) = commits.last_mut() else {
                    unreachable!("plan_into pushed the step's commit")
                };
                if let (Some(channel), Some(cause)) =
                    (&self.shared.config.lifecycle_channel, &cause)
                {
                    let finished = then.finished_now;
                    crate::lifecycle::add_events(commit, channel, cause, finished);
                    then.outbox |= !commit.outbox.emit.is_empty();
                }
                if let Work::Start {
                    business_key,
                    schedule,
                    ..
                } = &req.work
                {
                    // Written with the creation only; the store keeps it from then on.
                    commit.state.business_key = business_key.clone();
                    commit.schedule = schedule.clone().map(Box::new);
                }
                // Pushed here rather than returned: a step's plan is a few hundred
                // bytes, and each hand-back moved it once more.
                prepared.push(Prepared { request: req, then });
            }
            Err(e) => reply(req.reply.take(), Err(e)),
        }
    }

    /// The claim to step from, and whether it came from the lane's cache (else the
    /// store). A cached claim is taken out, not copied: the step consumes it, and
    /// whatever the commit's outcome the entry would be replaced (`applied`) or dropped
    /// (a conflict, a failed commit, a refusal) — an entry left out after another error
    /// only costs the next step a read. (The round's entries are out of the cache
    /// until their commit is answered, so `LOCKED_CACHED_MAX` may be passed by up to a
    /// batch.)
    async fn current(&mut self, req: &Request) -> (Result<Claim, Error>, bool) {
        if let Work::Start { deployment, .. } = &req.work {
            let claim = match self.shared.defs.get(*deployment).await {
                Ok(def) => Ok(Claim::fresh(req.instance, *deployment, def)),
                Err(e) => Err(e),
            };
            return (claim, false);
        }
        if let Some(c) = self.cache.remove(&req.instance) {
            return (Ok(c), true);
        }
        let read = Claim::read(&*self.shared.store, &self.shared.defs, req.instance).await;
        (read, false)
    }

    /// Takes in one applied step (its counters are in the round's [`Tally`]): updates the
    /// cache, wakes whoever waits on what it did, answers its caller and starts its
    /// handlers, as started at `handlers_started_ms`.
    fn applied(&mut self, p: Prepared, fence: u64, now: i64, handlers_started_ms: i64) {
        let Prepared {
            request,
            then: planned,
        } = p;
        let instance = request.instance;
        let status = planned.next.snapshot.status();
        let state = request
            .reply
            .as_ref()
            .is_some_and(|r| r.with_state)
            .then(|| Claim {
                fence: Some(fence),
                ..planned.next.clone()
            });
        self.shared
            .watchers
            .stepped(instance, &planned.next.def, &planned.next.snapshot, fence);
        // Only instances with a handler about to run stay cached: their outcome comes
        // back to this lane within the time limit. A parked or finished instance is read
        // from the store when it next has work, so the cache holds no more entries than
        // there are running handlers — plus, up to `LOCKED_CACHED_MAX`, instances whose
        // pull task a worker has just locked: its answer (or the lock's expiry) comes
        // back to this lane, and would otherwise read the instance again.
        let locked = planned.next.snapshot.has_pull_lock()
            && self.cache.len() < self.shared.config.handlers_in_flight_max + LOCKED_CACHED_MAX;
        if status.is_terminal() || (planned.calls.is_empty() && !locked) {
            self.cache.remove(&instance);
        } else {
            let next = Claim {
                fence: Some(fence),
                ..planned.next
            };
            self.cache.insert(instance, next);
        }
        if planned
            .earliest_timer_ms
            .is_some_and(|t| t <= now.saturating_add(self.shared.config.poll_interval_ms as i64))
        {
            self.shared.timer_armed.notify_one();
        }
        for topic in &planned.pull_topics {
            self.shared.pull_bell.ring(topic);
        }
        if planned.outbox {
            self.shared.outbox_emitted.notify_one();
        }
        if let Some(r) = request.reply {
            let _ = r.tx.send(Ok(state));
        }
        let limit_ms = self.shared.config.handler_time_limit_ms;
        for call in planned.calls {
            let started_ms = handlers_started_ms;
            let outcome = move |input| Request {
                instance,
                work: Work::Input(input),
                started_ms: Some(started_ms),
                reply: None,
                retries: 0,
            };
            match self
                .shared
                .handlers
                .run(call, &*self.shared.clock, started_ms, limit_ms)
            {
                // A synchronous handler has ended: its outcome is taken in as a finished
                // future's would be.
                HandlerRun::Ended(input) => self.ended.push_back(outcome(input)),
                HandlerRun::Running(fut) => self.running.push(fut.map(outcome).boxed()),
            }
        }
    }

    /// A start on a deployment whose retirement committed first (perhaps through
    /// another replica): nothing was written; the caller hears why.
    fn refused_retired(&mut self, p: Prepared) {
        let deployment = p.then.next.deployment;
        self.shared.defs.mark_retired(deployment);
        let why = format!("deployment {} is retired", deployment.0);
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
        if p.then.next.fence.is_none() || p.request.retries >= CONFLICT_RETRIES_MAX {
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

/// Reads the claims of `ids` in one store read (`Store::instances_by_id`); at most one
/// id per request of a round, so bounded by `batch_max`. One id (or none) is left to the
/// step itself. If the read fails, each id is read on its own, so each gets its own
/// answer.
async fn read_claims(shared: Arc<Shared>, ids: Vec<InstanceId>) -> IdMap<Result<Claim, Error>> {
    if ids.len() < 2 {
        return IdMap::default();
    }
    let mut out = IdMap::with_capacity_and_hasher(ids.len(), Default::default());
    match shared.store.instances_by_id(&ids).await {
        Ok(records) => {
            let mut found: IdMap<_> = records.into_iter().map(|r| (r.id, r)).collect();
            for id in ids {
                let claim = match found.remove(&id) {
                    Some(record) => Claim::of_record(&shared.defs, record).await,
                    None => Err(Error::UnknownInstance(id.to_string())),
                };
                out.insert(id, claim);
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, "a round's claims read one by one");
            let reads = ids
                .iter()
                .map(|id| Claim::read(&*shared.store, &shared.defs, *id));
            let claims = futures::future::join_all(reads).await;
            out.extend(ids.into_iter().zip(claims));
        }
    }
    out
}

/// Answers the caller, if there is one. Work nobody waits for (handler outcomes, timers)
/// is logged instead: a stale outcome at debug level, anything else as a warning, since a
/// timer whose step keeps failing comes back every lease period.
fn reply(to: Option<Replier>, result: Result<(), Error>) {
    match (to, result) {
        (Some(r), result) => {
            let _ = r.tx.send(result.map(|()| None));
        }
        (None, Ok(())) => {}
        (None, Err(e @ Error::Refused { .. })) => tracing::debug!(error = %e, "input not applied"),
        (None, Err(e)) => tracing::warn!(error = %e, "work for an instance could not be stepped"),
    }
}
