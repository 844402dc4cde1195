//! Retention (SPEC O7): the task that purges ended instances once their retention has
//! passed, so the store's size follows live plus retained work.
//!
//! Every `interval_ms` of the runtime's clock it asks the store to purge, per deployment
//! (or for all at once when no override is configured), batch after batch of at most
//! `batch_max` instances until a batch comes back short. Each batch is one short store
//! transaction ([`qflow_store::Store::purge_finished`]); between batches the task pauses
//! so that its batches take at most `busy_percent_max` of the wall time, which is what
//! keeps a backlog of a million instances from crowding the lanes out of the store
//! (SQLite has one writer). On PostgreSQL the purge skips rows a lane holds, so it never
//! waits on a lane, nor a lane on it beyond one batch.
//!
//! It is not a lane and may wait, on the runtime's clock only. It never touches running or
//! FAILED instances: the store's purge does not choose them, whatever the settings here.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use qflow_store::{DeploymentId, DeploymentRecord, PurgeOutcome, PurgeRequest, StoreResult};

use super::Shared;

/// A day, in ms.
pub const DAY_MS: i64 = 86_400_000;

/// When ended instances are purged. Every field states its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// How long an ended (completed or cancelled) instance is kept after its end, unless an
    /// override below names its deployment or process. Default 7 days. `i64::MAX` keeps
    /// them for ever; a negative value counts as 0.
    pub default_ms: i64,
    /// Overrides by process id: they apply to every deployment (version) of the process,
    /// so a redeploy keeps its retention. Default: none.
    pub per_process: BTreeMap<String, i64>,
    /// Overrides by deployment; they win over `per_process`. Default: none.
    pub per_deployment: BTreeMap<DeploymentId, i64>,
    /// Most instances one purge transaction deletes. Default 1,000 (the store caps it at
    /// 10,000).
    pub batch_max: u32,
    /// Time between the starts of two purge rounds. Default 60,000 ms.
    pub interval_ms: u64,
    /// Largest share of wall time, in percent (1–100), that purge transactions may take
    /// while a backlog drains: after a batch that took `t` ms the task pauses
    /// `t × (100 − p) / p` ms. Default 10.
    pub busy_percent_max: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            default_ms: 7 * DAY_MS,
            per_process: BTreeMap::new(),
            per_deployment: BTreeMap::new(),
            batch_max: 1_000,
            interval_ms: 60_000,
            busy_percent_max: 10,
        }
    }
}

impl RetentionConfig {
    /// The retention of `deployment`: its override, else its process's, else the
    /// default; never negative.
    pub fn retention_ms(&self, deployment: &DeploymentRecord) -> i64 {
        self.per_deployment
            .get(&deployment.id)
            .or_else(|| self.per_process.get(&deployment.process_id))
            .copied()
            .unwrap_or(self.default_ms)
            .max(0)
    }

    fn has_overrides(&self) -> bool {
        !self.per_process.is_empty() || !self.per_deployment.is_empty()
    }

    /// The purges of one round at `now_ms`: `(deployment, ended before)`. Without
    /// overrides one purge of every deployment; with them one per deployment, each with
    /// its own cutoff. Pure.
    pub fn cutoffs(
        &self,
        deployments: &[DeploymentRecord],
        now_ms: i64,
    ) -> Vec<(Option<DeploymentId>, i64)> {
        if !self.has_overrides() {
            return vec![(None, now_ms.saturating_sub(self.default_ms.max(0)))];
        }
        deployments
            .iter()
            .map(|d| (Some(d.id), now_ms.saturating_sub(self.retention_ms(d))))
            .collect()
    }

    /// How long to pause after a batch that took `spent_ms`, to stay within
    /// `busy_percent_max`.
    pub fn pause_after_ms(&self, spent_ms: i64) -> i64 {
        let busy = i64::from(self.busy_percent_max.clamp(1, 100));
        spent_ms.max(0).saturating_mul(100 - busy) / busy
    }
}

pub(crate) async fn run(shared: Arc<Shared>, config: RetentionConfig) {
    let interval_ms = i64::try_from(config.interval_ms.max(1)).unwrap_or(i64::MAX);
    let mut stop = shared.stop.subscribe();
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let started = shared.clock.now_ms();
        match round(&shared, &config, &mut stop, started).await {
            Ok(out) if out.instances > 0 => tracing::info!(
                instances = out.instances,
                attempts = out.attempts,
                incidents = out.incidents,
                audit = out.audit,
                timers = out.timers,
                outbox = out.outbox,
                "retention purged ended instances"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention purge failed; trying again next round"),
        }
        tokio::select! {
            _ = shared.clock.sleep_until(started.saturating_add(interval_ms)) => {}
            // `wait_for`, not `changed`: a stop already seen inside `round` must end the
            // wait at once, not after a whole interval.
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
    }
}

/// One round: every cutoff, batch after batch until a batch comes back short (or the
/// runtime stops). Returns what went.
async fn round(
    shared: &Shared,
    config: &RetentionConfig,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    now_ms: i64,
) -> StoreResult<PurgeOutcome> {
    let deployments = if config.has_overrides() {
        shared.store.deployments().await?
    } else {
        Vec::new()
    };
    let batch = config.batch_max.max(1);
    let mut total = PurgeOutcome::default();
    for (deployment, ended_before_ms) in config.cutoffs(&deployments, now_ms) {
        loop {
            if shared.stopping.load(Ordering::SeqCst) {
                return Ok(total);
            }
            let began = shared.clock.now_ms();
            let out = shared
                .store
                .purge_finished(PurgeRequest {
                    ended_before_ms,
                    deployment,
                    limit: batch,
                })
                .await?;
            total.add(out);
            shared
                .stats
                .purged
                .fetch_add(out.instances, Ordering::Relaxed);
            if out.instances < u64::from(batch) {
                break;
            }
            let pause_ms = config.pause_after_ms(shared.clock.now_ms() - began);
            if pause_ms > 0 {
                let until = shared.clock.now_ms().saturating_add(pause_ms);
                tokio::select! {
                    _ = shared.clock.sleep_until(until) => {}
                    _ = stop.wait_for(|stopped| *stopped) => return Ok(total),
                }
            } else {
                tokio::task::yield_now().await;
            }
        }
    }
    shared.progress.notify_waiters();
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(id: i64, process: &str) -> DeploymentRecord {
        DeploymentRecord {
            id: DeploymentId(id),
            process_id: process.to_owned(),
            content_hash: format!("h{id}"),
            source: String::new(),
            deployed_at_ms: 0,
            retired: false,
        }
    }

    #[test]
    fn overrides_pick_the_cutoff_per_deployment_then_process_then_default() {
        let plain = RetentionConfig::default();
        assert_eq!(
            plain.cutoffs(&[deployment(1, "order")], 10 * DAY_MS),
            vec![(None, 3 * DAY_MS)],
            "no overrides: one purge of every deployment"
        );
        let config = RetentionConfig {
            default_ms: 100,
            per_process: BTreeMap::from([("order".to_owned(), 50), ("audit".to_owned(), -5)]),
            per_deployment: BTreeMap::from([(DeploymentId(2), 10)]),
            ..RetentionConfig::default()
        };
        let deployments = [
            deployment(1, "order"),
            deployment(2, "order"),
            deployment(3, "other"),
            deployment(4, "audit"),
        ];
        assert_eq!(
            config.cutoffs(&deployments, 1_000),
            vec![
                (Some(DeploymentId(1)), 950),
                (Some(DeploymentId(2)), 990),
                (Some(DeploymentId(3)), 900),
                (Some(DeploymentId(4)), 1_000),
            ]
        );
        let forever = RetentionConfig {
            default_ms: i64::MAX,
            ..RetentionConfig::default()
        };
        assert_eq!(forever.cutoffs(&[], 5), vec![(None, 5 - i64::MAX)]);
    }

    #[test]
    fn the_pause_keeps_batches_within_their_share() {
        let config = RetentionConfig::default();
        assert_eq!(config.pause_after_ms(30), 270);
        assert_eq!(config.pause_after_ms(0), 0);
        assert_eq!(config.pause_after_ms(-3), 0, "a clock that moved back");
        let all = RetentionConfig {
            busy_percent_max: 100,
            ..RetentionConfig::default()
        };
        assert_eq!(all.pause_after_ms(30), 0);
        let none = RetentionConfig {
            busy_percent_max: 0,
            ..RetentionConfig::default()
        };
        assert_eq!(none.pause_after_ms(3), 297, "0 counts as 1 %");
    }
}
