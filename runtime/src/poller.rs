//! The timer poller (SPEC R3): claims due timer rows and hands them to their lanes, and
//! the due occurrences of timer start events' schedules (`schedules`).
//!
//! It asks the store for due rows only (an index on the due instant), so its cost grows
//! with due timers, not with parked ones. A claim leases the rows to this replica; a row
//! whose step never commits (the replica died) is claimed again once the lease lapses.
//! The poller may wait between polls — it is not a lane — but it never waits longer than
//! the poll interval, and a lane that arms a timer due soon wakes it early.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use qflow_store::TimerClaim;

use super::{Request, Shared, Work};

pub(crate) async fn run(shared: Arc<Shared>) {
    let interval_ms = i64::try_from(shared.config.poll_interval_ms.max(1)).unwrap_or(i64::MAX);
    let mut stop = shared.stop.subscribe();
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let now = shared.clock.now_ms();
        let claimed = match shared
            .store
            .claim_due_timers(TimerClaim {
                now_ms: now,
                lease_ms: shared.config.timer_lease_ms,
                owner: &shared.config.replica_id,
                limit: shared.config.timer_claim_max,
            })
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "timer poll failed; trying again next interval");
                Vec::new()
            }
        };
        let full = claimed.len() as u32 >= shared.config.timer_claim_max;
        for t in claimed {
            shared.stats.timers_fired.fetch_add(1, Ordering::Relaxed);
            shared.stats.timer_lag.observe_ms(now - t.due_at_ms);
            let lane = shared.lane_of(t.instance);
            let req = Request {
                instance: t.instance,
                work: Work::Timer {
                    name: t.name,
                    incarnation: t.incarnation,
                },
                started_ms: None,
                reply: None,
                retries: 0,
            };
            if shared.lanes[lane].send(req).await.is_err() {
                // The lane is gone (shutdown); the lease lapses and someone claims it again.
                return;
            }
        }
        if !crate::schedules::fire_due(&shared, now).await {
            return;
        }
        if full {
            continue;
        }
        // The poller, not a lane: it may wait, on the runtime's clock. `biased`, so that
        // which ready branch wins (and so whether a pending wake-up is consumed now or
        // causes one more poll later) is not drawn from tokio's random source: on a
        // manual clock and a current-thread scheduler a run then replays exactly (the
        // fault simulation relies on it). Every branch only ends the wait, so the order
        // changes no outcome.
        tokio::select! {
            biased;
            _ = stop.changed() => {}
            _ = shared.timer_armed.notified() => {}
            _ = shared.clock.sleep_until(now.saturating_add(interval_ms)) => {}
        }
    }
}
