//! The runtime's half of pull tasks (SPEC P1): fetch-and-lock and the bell that wakes
//! waiting fetches.
//!
//! A fetch reads offered rows of its topics from the store (a hint, no claim), then sends
//! `Input::PullLocked` to each instance's lane, all at once, so the locks of one fetch
//! (and of every fetch and answer arriving meanwhile) share the lanes' group commits
//! (R1a): one fsync for many locks. The core refuses a row that is no longer offered
//! (another worker locked it first, the instance moved on), and the fetch simply takes
//! the next. The lock and its expiry timer are written by that step's commit, and the
//! fetch answers only after it, so a lock a worker was told about is durable.
//!
//! Long polling: a fetch that found nothing waits on the [`PullBell`] of its topics until
//! a step offering work on one of them commits (the lane or an outside step rings it), or
//! until its time limit on the runtime's clock. The bell is a lossy hint — a ring nobody
//! waits for is dropped — so a fetch registers before it looks, and never spins: an idle
//! waiting fetch costs a parked future and nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::future::{join_all, select, select_all};
use futures::FutureExt;
use qflow_core::{Attempt, Input, Variables};
use qflow_store::{DeploymentId, InstanceId, PullQuery, PullTaskRecord, PULL_QUERY_LIMIT_MAX};
use tokio::sync::Notify;

use crate::claim::Claim;
use crate::{Error, Runtime};

/// The most topics one fetch may name.
pub const FETCH_TOPICS_MAX: usize = 64;
/// The most tasks one fetch may lock.
pub const FETCH_TASKS_MAX: u32 = 1_000;
/// The longest lock a fetch or an extension may take: one day.
pub const LOCK_MS_MAX: u64 = 86_400_000;
/// The most looks at the store one round of a fetch takes before it answers with what it
/// has (or waits): concurrent fetches may have held the rows of the first look.
const LOOKS_MAX: usize = 4;
/// The longest a fetch may wait for work to arrive (long polling).
pub const FETCH_WAIT_MS_MAX: u64 = 300_000;

/// Per-topic wake-ups for waiting fetches. Entries exist only while a fetch waits on
/// the topic, so the map is bounded by the waiting fetches times their topics.
#[derive(Default)]
pub struct PullBell {
    topics: Mutex<BTreeMap<String, Arc<Notify>>>,
}

impl PullBell {
    /// Wakes every fetch waiting on `topic` now; nobody waiting, nothing happens.
    pub fn ring(&self, topic: &str) {
        let notify = self.lock().get(topic).cloned();
        if let Some(n) = notify {
            n.notify_waiters();
        }
    }

    fn register(&self, topic: &str) -> Arc<Notify> {
        self.lock()
            .entry(topic.to_owned())
            .or_insert_with(|| Arc::new(Notify::new()))
            .clone()
    }

    /// Drops the entries of `topics` that no fetch waits on any more.
    fn release(&self, held: Vec<(String, Arc<Notify>)>) {
        let mut map = self.lock();
        for (topic, notify) in held {
            drop(notify);
            if map.get(&topic).is_some_and(|n| Arc::strong_count(n) == 1) {
                map.remove(&topic);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Notify>>> {
        self.topics.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many topics have a waiting fetch (for tests and metrics).
    pub fn waiting_topics(&self) -> usize {
        self.lock().len()
    }
}

/// Offered rows that fetches of this process are locking right now, so that concurrent
/// fetches skip each other's rows instead of racing for them (a hint: the core still
/// decides, and other processes do not see it). Bounded by the fetches in flight times
/// [`FETCH_TASKS_MAX`]; a row leaves the set when its fetch's locks have answered, or
/// when the fetch is dropped (its HTTP request cancelled).
#[derive(Default)]
pub(crate) struct Locking {
    rows: Mutex<BTreeSet<(InstanceId, String)>>,
}

/// Rows one fetch holds in the [`Locking`] set; released on drop.
struct Held<'a> {
    locking: &'a Locking,
    rows: Vec<PullTaskRecord>,
    /// Rows passed over because another fetch held them.
    skipped: usize,
}

impl Locking {
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Takes up to `n` rows of `rows` that no other fetch holds.
    fn take(&self, rows: &mut impl Iterator<Item = PullTaskRecord>, n: usize) -> Held<'_> {
        let mut set = self.lock();
        let mut skipped = 0;
        let taken = rows
            .filter(|r| {
                let free = set.insert((r.instance, r.node.clone()));
                skipped += usize::from(!free);
                free
            })
            .take(n)
            .collect();
        Held {
            locking: self,
            rows: taken,
            skipped,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<(InstanceId, String)>> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut set = self.locking.lock();
        for r in &self.rows {
            set.remove(&(r.instance, r.node.clone()));
        }
    }
}

/// The input that locks `row` for the fetch's worker, with its topic's lock duration.
fn lock_input(fetch: &Fetch, row: &PullTaskRecord) -> Input {
    let lock_ms = fetch
        .topics
        .iter()
        .find(|(t, _)| *t == row.topic)
        .map_or(1, |(_, ms)| *ms);
    Input::PullLocked {
        node: row.node.clone(),
        attempt: row.attempt,
        worker: fetch.worker.clone(),
        lock_ms: lock_ms.clamp(1, LOCK_MS_MAX),
    }
}

/// A worker's fetch-and-lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    pub worker: String,
    /// The topics, each with how long its locks last from the instant they are taken
    /// (1..=[`LOCK_MS_MAX`]; Camunda gives each topic its own lock duration).
    pub topics: Vec<(String, u64)>,
    /// At most this many tasks, 1..=[`FETCH_TASKS_MAX`].
    pub max_tasks: u32,
    /// Wait up to this long for work when none is offered now (0: answer at once).
    pub wait_ms: u64,
}

/// A task a fetch locked.
#[derive(Debug, Clone, PartialEq)]
pub struct LockedTask {
    pub instance: InstanceId,
    pub node: String,
    pub topic: String,
    pub attempt: Attempt,
    pub lock_until_ms: i64,
    /// The attempts the task has left, counting this one.
    pub retries: u32,
    /// The task's inputs (its input mappings over the instance variables, or all of them).
    pub variables: Variables,
    /// The BPMN process id of the instance's definition.
    pub process_id: String,
    /// The deployment the instance runs on.
    pub deployment: DeploymentId,
    /// The task's static headers (`model::Task::headers`: `zeebe:taskHeaders`,
    /// `camunda:properties`, a Java binding), in document order.
    pub headers: Vec<(String, String)>,
}

impl Runtime {
    /// The bell waiting fetches listen on.
    pub fn pull_bell(&self) -> &PullBell {
        &self.shared.pull_bell
    }

    /// Locks up to `fetch.max_tasks` offered tasks of `fetch.topics` for `fetch.worker`;
    /// when none is offered, waits up to `fetch.wait_ms` (on the runtime's clock) for
    /// one to be. Returns what it locked, maybe nothing.
    pub async fn fetch_and_lock(&self, fetch: &Fetch) -> Result<Vec<LockedTask>, Error> {
        let deadline = self
            .shared
            .clock
            .now_ms()
            .saturating_add(fetch.wait_ms.min(FETCH_WAIT_MS_MAX) as i64);
        loop {
            // Registered before looking, so an offer committed between the look and the
            // wait still wakes this fetch.
            let held: Vec<(String, Arc<Notify>)> = fetch
                .topics
                .iter()
                .map(|(t, _)| (t.clone(), self.shared.pull_bell.register(t)))
                .collect();
            let mut waits: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> =
                held.iter().map(|(_, n)| Box::pin(n.notified())).collect();
            for w in &mut waits {
                w.as_mut().enable();
            }
            let locked = self.lock_offered(fetch).await;
            let now = self.shared.clock.now_ms();
            let done = !matches!(&locked, Ok(l) if l.is_empty()) || now >= deadline;
            if done || waits.is_empty() {
                drop(waits);
                self.shared.pull_bell.release(held);
                return locked;
            }
            let sleep = self.shared.clock.sleep_until(deadline);
            let rung = select_all(waits.iter_mut().map(|w| w.as_mut())).map(|_| ());
            // Biased: a ring and the deadline at once takes the ring (deterministic on a
            // manual clock).
            let _ = select(Box::pin(rung), sleep).await;
            drop(waits);
            self.shared.pull_bell.release(held);
            if self.shared.clock.now_ms() >= deadline {
                // One last look, then answer, empty or not.
                return self.lock_offered(fetch).await;
            }
        }
    }

    /// Locks offered rows through the lanes until `max_tasks` hold or nothing more is
    /// offered, in at most [`LOOKS_MAX`] looks at the store.
    async fn lock_offered(&self, fetch: &Fetch) -> Result<Vec<LockedTask>, Error> {
        let want = fetch.max_tasks.min(FETCH_TASKS_MAX) as usize;
        let mut out = Vec::new();
        for _ in 0..LOOKS_MAX {
            if out.len() >= want {
                break;
            }
            let more = self.look(fetch, want, &mut out).await?;
            if !more {
                break;
            }
        }
        Ok(out)
    }

    /// One look: the offered rows, locked through the lanes until `want` hold in `out`.
    /// The locks of one look are sent at once, so a lane commits them in one round (one
    /// fsync for many, R1a); a row another worker locked first is refused by the core
    /// and the next one is tried. Rows another fetch of this process is locking right
    /// now are skipped rather than raced for (the [`Locking`] set), so concurrent
    /// fetches of one topic take disjoint rows instead of refusing each other's.
    /// Returns whether another look may find more (the query was cut at its limit, or
    /// skipped rows other fetches held).
    async fn look(
        &self,
        fetch: &Fetch,
        want: usize,
        out: &mut Vec<LockedTask>,
    ) -> Result<bool, Error> {
        // A few more than asked for, and as many again as other fetches are locking:
        // those rows are the oldest, so every concurrent fetch's query returns them.
        let busy = u32::try_from(self.shared.locking.len()).unwrap_or(u32::MAX);
        let limit = (want.saturating_sub(out.len()) as u32)
            .saturating_mul(2)
            .saturating_add(busy)
            .min(PULL_QUERY_LIMIT_MAX);
        let topics: Vec<String> = fetch.topics.iter().map(|(t, _)| t.clone()).collect();
        let rows = self
            .shared
            .store
            .offered_pull_tasks(PullQuery {
                topics: &topics,
                limit,
            })
            .await?;
        let mut more = rows.len() >= limit as usize;
        let mut rows = rows.into_iter();
        while out.len() < want {
            let held = self.shared.locking.take(&mut rows, want - out.len());
            more |= held.skipped > 0;
            if held.rows.is_empty() {
                break;
            }
            let sends = held
                .rows
                .iter()
                .map(|row| self.send_and_read(row.instance, lock_input(fetch, row)));
            let sent = join_all(sends).await;
            let mut failed = None;
            for (row, result) in held.rows.iter().zip(sent) {
                match result {
                    Ok(claim) => out.extend(locked_task(row, &claim, &fetch.worker)),
                    // Taken by another worker, moved on, purged: the next row.
                    Err(Error::Refused { .. } | Error::UnknownInstance(_) | Error::Conflict(_)) => {
                    }
                    Err(e) => failed = Some(e),
                }
            }
            drop(held);
            if let Some(e) = failed {
                // Locks that committed are durable: the worker hears of them rather than
                // of the failure, or they would lapse unworked and spend an attempt.
                if out.is_empty() {
                    return Err(e);
                }
                tracing::warn!(error = %e, locked = out.len(), "fetch-and-lock stopped early");
                return Ok(false);
            }
        }
        Ok(more)
    }
}

/// The task `row` names as its lock left it: its lock, budget and inputs. `None` when the
/// lock is not this worker's attempt (the core took the input for something else).
fn locked_task(row: &PullTaskRecord, claim: &Claim, worker: &str) -> Option<LockedTask> {
    let snap = &claim.snapshot;
    let def = &claim.def;
    let (holder, until) = snap.lock(&row.node)?;
    if holder != worker || snap.attempt_in_progress(&row.node) != row.attempt {
        return None;
    }
    let task = qflow_core::pull_task(def, &row.node);
    let retries = snap
        .pull_retries(&row.node)
        .unwrap_or_else(|| task.as_ref().map_or(0, |t| t.retries));
    let headers = task.map(|t| t.task.headers.clone()).unwrap_or_default();
    // An input mapping that cannot evaluate hands the worker no variables rather than
    // failing the fetch; the worker's answer decides what happens next.
    let variables = qflow_core::pull_inputs(def, snap, &row.node).unwrap_or_default();
    Some(LockedTask {
        instance: row.instance,
        attempt: row.attempt,
        topic: row.topic.clone(),
        lock_until_ms: until,
        retries,
        variables,
        process_id: def.id.clone(),
        deployment: claim.deployment,
        node: row.node.clone(),
        headers,
    })
}
