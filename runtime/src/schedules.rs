//! Timer start events (BPMN §10.5.2; SPEC L2): a deployment's schedule of starts, kept
//! durably in the store and fired by the timer poller, on every replica, never twice.
//!
//! A deployment records the first occurrence of each of its timer start events
//! (`qflow_core::schedule::first`) with the deployment itself; a newer deployment of the
//! process replaces the older one's schedules in the same transaction (hot-deploy), and
//! a retirement deletes them. The poller claims due schedules as it claims timers
//! (`Store::claim_due_schedules`, a lease), and hands each occurrence to the lane of the
//! instance it starts:
//!
//! - the instance's id is derived from the deployment, the event and the occurrence's
//!   due instant ([`occurrence_instance_id`]), so the same occurrence always means the
//!   same instance;
//! - its creation commit carries the schedule's move to the next occurrence
//!   (`Commit::schedule`), applied only if the row is still due at this occurrence: a
//!   replica that claimed the same occurrence after a lease lapsed, or a start racing a
//!   hot-deploy or a retirement, writes nothing.
//!
//! So one occurrence starts one instance whatever the replicas do, and a crash between
//! the claim and the commit only delays the start until the lease lapses. An occurrence
//! the engine can never start — its start event is not in the deployment, the
//! deployment's source no longer loads, the step refuses the start — is skipped with an
//! error in the log (`Store::advance_schedule`, under the same compare-and-swap), not
//! claimed again forever.

use std::sync::Arc;

use tokio::sync::oneshot;

use qflow_core::schedule::{self, Occurrence};
use qflow_loader::model::{NodeKind, StartTrigger};
use qflow_store::{DeploymentId, InstanceId, ScheduleAdvance, ScheduleRecord, TimerClaim};

use super::{Error, Replier, Request, Shared, Work};

/// The most schedules one poll claims.
const CLAIM_MAX: u32 = 64;

/// The instance the occurrence of `node`'s schedule due at `due_at_ms` starts on
/// `deployment`: the same for every replica and every claim of the occurrence.
pub fn occurrence_instance_id(deployment: DeploymentId, node: &str, due_at_ms: i64) -> InstanceId {
    crate::signals::derived_instance_id("timer", node, &due_at_ms.to_string(), deployment)
}

/// Claims the schedules due at `now` and sends each occurrence's start to its lane.
/// Returns `false` when the lanes are gone (shutdown).
pub(crate) async fn fire_due(shared: &Arc<Shared>, now: i64) -> bool {
    let claimed = match shared
        .store
        .claim_due_schedules(TimerClaim {
            now_ms: now,
            lease_ms: shared.config.timer_lease_ms,
            owner: &shared.config.replica_id,
            limit: CLAIM_MAX,
        })
        .await
    {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, "schedule poll failed; trying again next interval");
            return true;
        }
    };
    for row in claimed {
        let Some(advance) = advance_of(shared, &row, now).await else {
            continue;
        };
        let work = Work::Start {
            deployment: row.deployment,
            variables: Default::default(),
            business_key: None,
            start: Some(row.node.clone()),
            schedule: Some(advance.clone()),
            parent: None,
        };
        let instance = occurrence_instance_id(row.deployment, &row.node, row.due_at_ms);
        let (tx, rx) = oneshot::channel();
        let req = Request {
            instance,
            work,
            started_ms: None,
            reply: Some(Replier {
                tx,
                with_state: false,
            }),
            retries: 0,
        };
        let lane = shared.lane_of(instance);
        if shared.lanes[lane].send(req).await.is_err() {
            // Shutting down: the lease lapses and a replica claims it again.
            return false;
        }
        // The poller does not wait for the step; this watches its answer.
        let shared = shared.clone();
        tokio::spawn(async move {
            // Anything else: started; refused by the store (another replica started
            // it, the schedule moved on or was retired); or not stepped at all
            // (shutdown, a store failure), when the lease lapses and it is tried again.
            if let Ok(Err(Error::Core(e))) = rx.await {
                tracing::error!(deployment = row.deployment.0, node = %row.node,
                    due_at_ms = row.due_at_ms, error = %e,
                    "a timer start occurrence cannot start an instance; it is skipped");
                skip(&shared, &row, &advance).await;
            }
        });
    }
    true
}

/// Moves `row`'s schedule past an occurrence that cannot start an instance.
async fn skip(shared: &Arc<Shared>, row: &ScheduleRecord, advance: &ScheduleAdvance) {
    if let Err(e) = shared.store.advance_schedule(row.deployment, advance).await {
        tracing::warn!(deployment = row.deployment.0, node = %row.node, error = %e,
            "skipping a timer start occurrence failed; it is claimed again later");
    }
}

/// Ends `row`'s schedule: none of its occurrences can ever start.
async fn end(shared: &Arc<Shared>, row: &ScheduleRecord) {
    let last = ScheduleAdvance {
        node: row.node.clone(),
        fired_at_ms: row.due_at_ms,
        next: None,
    };
    skip(shared, row, &last).await;
}

/// The move of `row`'s schedule past the occurrence its start fires; `None` (logged)
/// when there is nothing to start: the deployment cannot be read now (the lease lapses
/// and the occurrence is claimed again), or never (the schedule is ended).
async fn advance_of(
    shared: &Arc<Shared>,
    row: &ScheduleRecord,
    now: i64,
) -> Option<ScheduleAdvance> {
    let def = match shared.defs.get(row.deployment).await {
        Ok(def) => def,
        // The source no longer loads: no occurrence of it can ever start.
        Err(e @ (Error::Refused { .. } | Error::Core(_))) => {
            tracing::error!(deployment = row.deployment.0, node = %row.node, error = %e,
                "a timer start's deployment cannot be loaded; its schedule ends");
            end(shared, row).await;
            return None;
        }
        Err(e) => {
            tracing::warn!(deployment = row.deployment.0, node = %row.node, error = %e,
                "a timer start could not read its deployment; trying again later");
            return None;
        }
    };
    let timer = def
        .process
        .find(&row.node)
        .and_then(|idx| match &def.process.node(idx).kind {
            NodeKind::TriggeredStart(StartTrigger::Timer(timer)) => Some(timer.clone()),
            _ => None,
        });
    let fired = Occurrence {
        due_at_ms: row.due_at_ms,
        remaining: row.remaining,
    };
    let next = match timer.as_ref().map(|t| schedule::next(t, fired, now)) {
        Some(Ok(next)) => next,
        Some(Err(why)) => {
            tracing::warn!(deployment = row.deployment.0, node = %row.node, %why,
                "a timer start cycle no longer gives a cycle; this is its last start");
            None
        }
        // The store names an event the deployment does not have: start nothing, and
        // end the schedule.
        None => {
            tracing::error!(deployment = row.deployment.0, node = %row.node,
                "a schedule names no timer start event of its deployment; it ends");
            end(shared, row).await;
            return None;
        }
    };
    Some(ScheduleAdvance {
        node: row.node.clone(),
        fired_at_ms: row.due_at_ms,
        next: next.map(|n| (n.due_at_ms, n.remaining)),
    })
}
