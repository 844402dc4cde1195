//! The runtime's half of pull tasks (SPEC P1): fetch-and-lock and the bell that wakes
//! waiting fetches.
//!
//! A fetch reads offered rows of its topics from the store (a hint, no claim), then steps
//! each instance with `Input::PullLocked` under its claim, outside the lanes, like an
//! operator's step: the core refuses a row that is no longer offered (another worker
//! locked it first, the instance moved on), and the fetch simply takes the next. The lock
//! and its expiry timer are written by that step's commit, so a lock a worker was told
//! about is durable.
//!
//! Long polling: a fetch that found nothing waits on the [`PullBell`] of its topics until
//! a step offering work on one of them commits (the lane or an outside step rings it), or
//! until its time limit on the runtime's clock. The bell is a lossy hint — a ring nobody
//! waits for is dropped — so a fetch registers before it looks, and never spins: an idle
//! waiting fetch costs a parked future and nothing else.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::future::{select, select_all};
use futures::FutureExt;
use qflow_core::{Attempt, Input, Variables};
use qflow_store::{InstanceId, PullQuery, PULL_QUERY_LIMIT_MAX};
use tokio::sync::Notify;

use crate::{Error, Runtime};

/// The most topics one fetch may name.
pub const FETCH_TOPICS_MAX: usize = 64;
/// The most tasks one fetch may lock.
pub const FETCH_TASKS_MAX: u32 = 1_000;
/// The longest lock a fetch or an extension may take: one day.
pub const LOCK_MS_MAX: u64 = 86_400_000;
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

    /// One look: the offered rows, each stepped with a lock until `max_tasks` hold.
    async fn lock_offered(&self, fetch: &Fetch) -> Result<Vec<LockedTask>, Error> {
        let want = fetch.max_tasks.min(FETCH_TASKS_MAX) as usize;
        let mut out = Vec::new();
        if want == 0 {
            return Ok(out);
        }
        // A few more than asked for: some will have been taken by another worker.
        let limit = (want as u32).saturating_mul(2).min(PULL_QUERY_LIMIT_MAX);
        let topics: Vec<String> = fetch.topics.iter().map(|(t, _)| t.clone()).collect();
        let rows = self
            .shared
            .store
            .offered_pull_tasks(PullQuery {
                topics: &topics,
                limit,
            })
            .await?;
        for row in rows {
            if out.len() >= want {
                break;
            }
            let Some(&(_, lock_ms)) = fetch.topics.iter().find(|(t, _)| *t == row.topic) else {
                continue;
            };
            let input = Input::PullLocked {
                node: row.node.clone(),
                attempt: row.attempt,
                worker: fetch.worker.clone(),
                lock_ms: lock_ms.clamp(1, LOCK_MS_MAX),
            };
            let stepped = match self.claim_and_step(row.instance, input).await {
                Ok(s) => s,
                // Taken by another worker, moved on, purged: the next row.
                Err(Error::Refused { .. } | Error::UnknownInstance(_) | Error::Conflict(_)) => {
                    continue
                }
                Err(e) => return Err(e),
            };
            let snap = &stepped.claim.snapshot;
            let def = &stepped.claim.def;
            let Some((_, until)) = snap.lock(&row.node) else {
                continue;
            };
            let retries = snap
                .pull_retries(&row.node)
                .unwrap_or_else(|| qflow_core::pull_task(def, &row.node).map_or(0, |t| t.retries));
            // An input mapping that cannot evaluate hands the worker no variables rather
            // than failing the fetch; the worker's answer decides what happens next.
            let variables = qflow_core::pull_inputs(def, snap, &row.node).unwrap_or_default();
            out.push(LockedTask {
                instance: row.instance,
                attempt: row.attempt,
                topic: row.topic,
                lock_until_ms: until,
                retries,
                variables,
                process_id: def.id.clone(),
                node: row.node,
            });
        }
        Ok(out)
    }
}
