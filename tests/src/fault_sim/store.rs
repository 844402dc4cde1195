//! A fault-injecting [`Store`] over the in-memory store, and the ledger of what it saw.
//!
//! Every call may fail by the seed's rates: a commit batch that fails before anything is
//! applied, an *ambiguous* commit (applied, then reported failed — the lost answer of a
//! real database), reads that fail, a timer claim whose answer is lost. Around each commit
//! the wrapper yields to the scheduler, so a replica's abort can land just before a commit
//! or just after it was applied and before the lane heard of it.
//!
//! The ledger checks, as commits are applied, what is cheap to check at once: fences move
//! by one, every snapshot decodes and re-encodes to the same bytes, no attempt of a task is
//! committed twice, an attempt failed with `READOPTION_LIMIT` was re-adopted the stated
//! number of times first, and an instance that ends leaves no timer row behind.
//!
//! It reports itself durable. In the simulation a crash is `Runtime::abort`: the store
//! outlives the replica, which is exactly what a durable store promises. The memory store
//! keeps the durable stores' semantics (it passes the same conformance kit).
//!
//! [`Breakage`] deliberately breaks the fence, to prove the harness catches a broken
//! build. It exists only here, in the test harness; no production path can disable a
//! fence.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use qflow_core::{codes, Snapshot, READOPTIONS_MAX};
use qflow_runtime::claim::store_status;
use qflow_store::memory::MemoryStore;
use qflow_store::{
    AttemptRecord, AuditRecord, Commit, CommitOutcome, DeploymentId, DeploymentRecord,
    IncidentRecord, InstanceFilter, InstanceId, InstanceRecord, InstanceStatus, NewDeployment,
    PurgeOutcome, PurgeRequest, RetireOutcome, Store, StoreError, StoreResult, SubscriptionRecord,
    TimerClaim, TimerRecord,
};

use super::rng::Rng;

/// A deliberately broken build, for the proof that the harness notices one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Breakage {
    /// The real thing.
    #[default]
    None,
    /// The fence does not hold: a commit whose expected fence is stale is applied anyway
    /// (its expected fence is rewritten to the current one before the store sees it).
    StaleCommitsPass,
    /// An ambiguous commit (applied, reported failed) is applied a second time with the
    /// next batch, fence rewritten: the "retry the write that may have failed" mistake.
    AmbiguousReapplied,
}

impl Breakage {
    pub fn parse(s: &str) -> Option<Breakage> {
        Some(match s {
            "none" => Breakage::None,
            "fence" => Breakage::StaleCommitsPass,
            "ambiguous" => Breakage::AmbiguousReapplied,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Breakage::None => "none",
            Breakage::StaleCommitsPass => "fence",
            Breakage::AmbiguousReapplied => "ambiguous",
        }
    }
}

/// Fault rates of one seed, in per mille of calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    pub commit_fails_per_mille: u64,
    pub commit_ambiguous_per_mille: u64,
    pub read_fails_per_mille: u64,
}

/// Faults injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub commits_failed: u64,
    pub commits_ambiguous: u64,
    pub reads_failed: u64,
    pub claims_lost: u64,
    /// Broken builds only: stale commits let through, ambiguous commits applied again.
    pub broken_applies: u64,
}

impl FaultCounts {
    pub fn add(&mut self, o: &FaultCounts) {
        self.commits_failed += o.commits_failed;
        self.commits_ambiguous += o.commits_ambiguous;
        self.reads_failed += o.reads_failed;
        self.claims_lost += o.claims_lost;
        self.broken_applies += o.broken_applies;
    }

    pub fn store_faults(&self) -> u64 {
        self.commits_failed + self.commits_ambiguous + self.reads_failed + self.claims_lost
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommitFault {
    None,
    FailBefore,
    Ambiguous,
}

/// What the wrapper checks as commits are applied.
#[derive(Default)]
struct Ledger {
    fences: BTreeMap<InstanceId, u64>,
    committed_attempts: BTreeSet<(InstanceId, String, u32)>,
    last_snapshot: BTreeMap<InstanceId, Snapshot>,
    violations: Vec<String>,
}

struct Faults {
    rng: Rng,
    rates: FaultRates,
    enabled: bool,
    counts: FaultCounts,
    /// Broken builds only: the ambiguous batch to apply again.
    stashed: Vec<Commit>,
}

pub struct FaultyStore {
    inner: MemoryStore,
    faults: Mutex<Faults>,
    ledger: Mutex<Ledger>,
    calls: AtomicU64,
    breakage: Breakage,
}

/// Caps the violations kept, so a badly broken build cannot fill the memory.
const VIOLATIONS_MAX: usize = 64;

fn injected(what: &str) -> StoreError {
    StoreError::Backend(Box::new(std::io::Error::other(format!(
        "fault-sim: injected {what}"
    ))))
}

impl FaultyStore {
    pub fn new(rng: Rng, rates: FaultRates, breakage: Breakage) -> FaultyStore {
        FaultyStore {
            inner: MemoryStore::new(),
            faults: Mutex::new(Faults {
                rng,
                rates,
                enabled: false,
                counts: FaultCounts::default(),
                stashed: Vec::new(),
            }),
            ledger: Mutex::new(Ledger::default()),
            calls: AtomicU64::new(0),
            breakage,
        }
    }

    /// The store without faults, for the harness's own reads.
    pub fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    pub fn set_faults(&self, enabled: bool) {
        self.faults().enabled = enabled;
    }

    pub fn counts(&self) -> FaultCounts {
        self.faults().counts
    }

    /// Store calls made so far: the harness's measure of "something is still happening".
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn violations(&self) -> Vec<String> {
        self.ledger().violations.clone()
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tick(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether this read fails (and counts it).
    fn read_fails(&self) -> bool {
        let mut f = self.faults();
        let rate = f.rates.read_fails_per_mille;
        if f.enabled && f.rng.chance(rate) {
            f.counts.reads_failed += 1;
            return true;
        }
        false
    }

    fn commit_fault(&self) -> CommitFault {
        let mut f = self.faults();
        if !f.enabled {
            return CommitFault::None;
        }
        let (fail, ambiguous) = (
            f.rates.commit_fails_per_mille,
            f.rates.commit_ambiguous_per_mille,
        );
        let roll = f.rng.below(1000);
        if roll < fail {
            f.counts.commits_failed += 1;
            CommitFault::FailBefore
        } else if roll < fail + ambiguous {
            f.counts.commits_ambiguous += 1;
            CommitFault::Ambiguous
        } else {
            CommitFault::None
        }
    }

    /// Broken builds only: rewrites the expected fences of `batch` to the stored ones.
    async fn let_stale_through(&self, batch: &mut [Commit]) -> StoreResult<()> {
        for c in batch.iter_mut() {
            let Some(expected) = c.expected_fence else {
                continue;
            };
            if let Some(current) = self.inner.instance(c.instance).await?.map(|r| r.fence) {
                if current != expected {
                    c.expected_fence = Some(current);
                    self.faults().counts.broken_applies += 1;
                }
            }
        }
        Ok(())
    }

    /// Applies `batch` to the memory store and records it in the ledger.
    async fn apply(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        let sent = batch.clone();
        let outcomes = self.inner.commit(batch).await?;
        for (commit, outcome) in sent.iter().zip(&outcomes) {
            if let CommitOutcome::Applied { fence } = outcome {
                let timers_left = if store_status_is_terminal(commit) {
                    self.inner.timers(commit.instance).await?.len()
                } else {
                    0
                };
                self.ledger().record(commit, *fence, timers_left);
            }
        }
        Ok(outcomes)
    }
}

fn store_status_is_terminal(c: &Commit) -> bool {
    c.state.status != qflow_store::InstanceStatus::Running
}

impl Ledger {
    fn violation(&mut self, v: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(v);
        }
    }

    fn record(&mut self, c: &Commit, fence: u64, timers_left: usize) {
        let id = c.instance;
        let before = self.fences.get(&id).copied();
        if c.expected_fence != before {
            self.violation(format!(
                "instance {id}: the store applied a commit expecting fence {:?} over fence {before:?}",
                c.expected_fence
            ));
        }
        if fence != before.map_or(1, |f| f + 1) {
            self.violation(format!(
                "instance {id}: fence moved from {before:?} to {fence}"
            ));
        }
        self.fences.insert(id, fence);
        let snapshot = match Snapshot::decode(&c.state.snapshot) {
            Ok(s) => s,
            Err(e) => {
                self.violation(format!(
                    "instance {id} fence {fence}: the engine wrote a snapshot it cannot read: {e}"
                ));
                return;
            }
        };
        if snapshot.encode() != c.state.snapshot {
            self.violation(format!(
                "instance {id} fence {fence}: the snapshot does not re-encode to its own bytes"
            ));
        }
        if store_status(snapshot.status()) != c.state.status {
            self.violation(format!(
                "instance {id} fence {fence}: row status {:?}, snapshot status {:?}",
                c.state.status,
                snapshot.status()
            ));
        }
        for a in &c.attempts {
            self.attempt(id, fence, a);
        }
        if timers_left > 0 {
            self.violation(format!(
                "instance {id} fence {fence}: ended ({:?}) with {timers_left} timer rows left",
                c.state.status
            ));
        }
        self.last_snapshot.insert(id, snapshot);
    }

    fn attempt(&mut self, id: InstanceId, fence: u64, a: &AttemptRecord) {
        let key = (id, a.node.clone(), a.attempt.get());
        if !self.committed_attempts.insert(key) {
            self.violation(format!(
                "instance {id} fence {fence}: attempt {} of `{}` committed twice ({})",
                a.attempt,
                a.node,
                a.outcome.as_str()
            ));
        }
        if a.code.as_deref() == Some(codes::READOPTION_LIMIT) {
            let count = self
                .last_snapshot
                .get(&id)
                .map_or(0, |s| s.readoptions(&a.node));
            if count < READOPTIONS_MAX {
                self.violation(format!(
                    "instance {id} fence {fence}: attempt {} of `{}` failed with \
                     READOPTION_LIMIT after {count} re-adoptions",
                    a.attempt, a.node
                ));
            }
        }
    }
}

#[async_trait]
impl Store for FaultyStore {
    fn is_durable(&self) -> bool {
        // See the module documentation: in the simulation the store outlives every crash.
        true
    }

    /// As the SQLite store says: the simulated replicas' lanes then overlap a round's
    /// commit with the next round, the path the embedded default takes, and crashes land
    /// inside it too.
    fn commits_group(&self) -> bool {
        true
    }

    async fn deploy(&self, new: NewDeployment<'_>) -> StoreResult<DeploymentRecord> {
        self.tick();
        self.inner.deploy(new).await
    }

    async fn deployment(&self, id: DeploymentId) -> StoreResult<Option<DeploymentRecord>> {
        self.tick();
        if self.read_fails() {
            return Err(injected("deployment read failure"));
        }
        self.inner.deployment(id).await
    }

    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>> {
        self.tick();
        self.inner.deployments().await
    }

    async fn retire(&self, id: DeploymentId) -> StoreResult<RetireOutcome> {
        self.tick();
        self.inner.retire(id).await
    }

    async fn commit(&self, mut batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        self.tick();
        // A crash may land here: before the commit reached the store.
        tokio::task::yield_now().await;
        let fault = self.commit_fault();
        if fault == CommitFault::FailBefore {
            return Err(injected("commit failure (nothing applied)"));
        }
        match self.breakage {
            Breakage::None => {}
            Breakage::StaleCommitsPass => self.let_stale_through(&mut batch).await?,
            Breakage::AmbiguousReapplied => {
                let mut again = std::mem::take(&mut self.faults().stashed);
                if !again.is_empty() {
                    self.let_stale_through(&mut again).await?;
                    self.apply(again).await?;
                }
            }
        }
        let stash = (fault == CommitFault::Ambiguous
            && self.breakage == Breakage::AmbiguousReapplied)
            .then(|| batch.clone());
        let outcomes = self.apply(batch).await?;
        if fault == CommitFault::Ambiguous {
            if let Some(stash) = stash {
                self.faults().stashed = stash;
            }
            return Err(injected("ambiguous commit (applied, reported failed)"));
        }
        // Or here: applied, and the replica dies before it hears so.
        tokio::task::yield_now().await;
        Ok(outcomes)
    }

    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>> {
        self.tick();
        if self.read_fails() {
            return Err(injected("instance read failure"));
        }
        self.inner.instance(id).await
    }

    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        self.tick();
        self.inner.instances(filter).await
    }

    async fn claim_due_schedules(
        &self,
        claim: TimerClaim<'_>,
    ) -> StoreResult<Vec<qflow_store::ScheduleRecord>> {
        self.inner.claim_due_schedules(claim).await
    }
    async fn advance_schedule(
        &self,
        deployment: DeploymentId,
        advance: &qflow_store::ScheduleAdvance,
    ) -> StoreResult<bool> {
        self.inner.advance_schedule(deployment, advance).await
    }
    async fn schedules(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<qflow_store::ScheduleRecord>> {
        self.inner.schedules(deployment).await
    }
    async fn claim_due_timers(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<TimerRecord>> {
        self.tick();
        if self.read_fails() {
            return Err(injected("timer claim failure"));
        }
        let claimed = self.inner.claim_due_timers(claim).await?;
        if !claimed.is_empty() && self.read_fails() {
            // The rows are leased now, and the poller never hears of them: they lapse.
            let mut f = self.faults();
            f.counts.reads_failed -= 1;
            f.counts.claims_lost += 1;
            return Err(injected("lost timer claim (leased, reported failed)"));
        }
        Ok(claimed)
    }

    async fn next_timer_due(&self) -> StoreResult<Option<i64>> {
        self.tick();
        self.inner.next_timer_due().await
    }

    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>> {
        self.tick();
        self.inner.timers(instance).await
    }

    async fn incidents(&self, instance: Option<InstanceId>) -> StoreResult<Vec<IncidentRecord>> {
        self.tick();
        self.inner.incidents(instance).await
    }

    async fn latest_incidents(
        &self,
        limit: u32,
        open_only: bool,
    ) -> StoreResult<Vec<IncidentRecord>> {
        self.tick();
        self.inner.latest_incidents(limit, open_only).await
    }

    async fn subscriptions(
        &self,
        message: &str,
        key: &str,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        self.tick();
        self.inner.subscriptions(message, key, limit).await
    }

    async fn subscriptions_after(
        &self,
        message: &str,
        key: &str,
        after: &SubscriptionRecord,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        self.tick();
        self.inner
            .subscriptions_after(message, key, after, limit)
            .await
    }

    async fn instance_subscriptions(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        self.tick();
        self.inner.instance_subscriptions(instance).await
    }

    async fn instance_counts(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<(InstanceStatus, u64)>> {
        self.tick();
        self.inner.instance_counts(deployment).await
    }

    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>> {
        self.tick();
        self.inner.attempts(instance).await
    }

    async fn journal(
        &self,
        instance: InstanceId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<qflow_store::JournalEntry>> {
        self.tick();
        self.inner.journal(instance, after, limit).await
    }

    async fn audit(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        self.tick();
        self.inner.audit(instance, limit).await
    }

    async fn purge_finished(&self, request: PurgeRequest) -> StoreResult<PurgeOutcome> {
        self.tick();
        self.inner.purge_finished(request).await
    }

    async fn offered_pull_tasks(
        &self,
        query: qflow_store::PullQuery<'_>,
    ) -> StoreResult<Vec<qflow_store::PullTaskRecord>> {
        self.tick();
        self.inner.offered_pull_tasks(query).await
    }

    async fn pull_tasks(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<qflow_store::PullTaskRecord>> {
        self.tick();
        self.inner.pull_tasks(instance).await
    }

    // The outbox is not driven by the simulation yet (no dispatcher runs in it): plain
    // delegation, each call a tick like every other.
    async fn claim_due_outbox(
        &self,
        claim: TimerClaim<'_>,
    ) -> StoreResult<Vec<qflow_store::OutboxRecord>> {
        self.tick();
        self.inner.claim_due_outbox(claim).await
    }

    async fn record_delivery(
        &self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: qflow_store::DeliveryRecord,
    ) -> StoreResult<bool> {
        self.tick();
        self.inner.record_delivery(key, owner, now_ms, record).await
    }

    async fn next_outbox_due(&self) -> StoreResult<Option<i64>> {
        self.tick();
        self.inner.next_outbox_due().await
    }

    async fn outbox_row(&self, key: &str) -> StoreResult<Option<qflow_store::OutboxRecord>> {
        self.tick();
        self.inner.outbox_row(key).await
    }

    async fn outbox(&self, instance: InstanceId) -> StoreResult<Vec<qflow_store::OutboxRecord>> {
        self.tick();
        self.inner.outbox(instance).await
    }

    async fn user_tasks(
        &self,
        query: &qflow_store::UserTaskQuery,
    ) -> StoreResult<Vec<qflow_store::UserTaskRecord>> {
        self.tick();
        self.inner.user_tasks(query).await
    }

    async fn instance_user_tasks(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<qflow_store::UserTaskRecord>> {
        self.tick();
        self.inner.instance_user_tasks(instance).await
    }

    async fn camunda_keys(&self, names: &[qflow_store::KeyName]) -> StoreResult<Vec<i64>> {
        self.tick();
        self.inner.camunda_keys(names).await
    }

    async fn camunda_key(&self, key: i64) -> StoreResult<Option<qflow_store::KeyName>> {
        self.tick();
        self.inner.camunda_key(key).await
    }

    async fn buffer_message(
        &self,
        message: &qflow_store::NewBufferedMessage,
    ) -> StoreResult<qflow_store::BufferOutcome> {
        self.tick();
        self.inner.buffer_message(message).await
    }

    async fn buffered_messages(
        &self,
        query: qflow_store::BufferQuery<'_>,
    ) -> StoreResult<Vec<qflow_store::BufferedMessage>> {
        self.tick();
        self.inner.buffered_messages(query).await
    }

    async fn expire_messages(&self, now_ms: i64, limit: u32) -> StoreResult<u64> {
        self.tick();
        self.inner.expire_messages(now_ms, limit).await
    }
}
