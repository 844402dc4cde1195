//! A lane overlaps a round's commit with its next round on a store that groups commits
//! (`Store::commits_group`, the SQLite store's committer): here a memory store behind a
//! gate that holds each commit until the test lets it through, so the order in which
//! batches reach the store can be read off exactly.

// Only `hang_guard` of the shared helpers: the starts here are spawned by hand.
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use qflow_runtime::{AsyncHandlers, ManualClock, Runtime, RuntimeConfig, Stats, TaskOutcome};
use qflow_store::memory::MemoryStore;
use qflow_store::*;
use support::hang_guard;
use tokio::sync::Semaphore;

const T0: i64 = 1_700_000_000_000;

const LINEAR: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="linear" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="a" q:task="count"/>
    <serviceTask id="b" q:task="count"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="a"/>
    <sequenceFlow id="f1" sourceRef="a" targetRef="b"/>
    <sequenceFlow id="f2" sourceRef="b" targetRef="end"/>
  </process>
</definitions>"#;

/// A memory store that says its commits group, logs each batch's instances in the order
/// the batches arrive, and holds each batch until the gate gives a permit. With the
/// runtime's stats set, it logs beside each batch how many answers the lanes had taken
/// in when it arrived.
struct GatedStore {
    inner: MemoryStore,
    gate: Semaphore,
    batches: Mutex<Vec<Vec<InstanceId>>>,
    stats: OnceLock<Arc<Stats>>,
    answered: Mutex<Vec<u64>>,
}

impl GatedStore {
    fn new() -> GatedStore {
        GatedStore {
            inner: MemoryStore::new(),
            gate: Semaphore::new(0),
            batches: Mutex::new(Vec::new()),
            stats: OnceLock::new(),
            answered: Mutex::new(Vec::new()),
        }
    }

    fn batches(&self) -> Vec<Vec<InstanceId>> {
        self.batches.lock().expect("log").clone()
    }
}

/// Lets the other tasks of the test's single-threaded runtime run until nothing is left
/// for them to do but wait (on the gate, on a handler).
async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

/// One lane over `store`, on the manual clock.
fn one_lane(store: &Arc<GatedStore>, handlers: AsyncHandlers) -> Arc<Runtime> {
    let config = RuntimeConfig {
        lanes: 1,
        ..RuntimeConfig::default()
    };
    let clock = Arc::new(ManualClock::new(T0));
    Arc::new(Runtime::start(store.clone(), handlers, clock, config))
}

/// Starts an instance of `dep` on a task of its own, so that the test goes on while the
/// start's commit is held at the gate.
fn spawn_start(
    rt: &Arc<Runtime>,
    dep: DeploymentId,
) -> tokio::task::JoinHandle<Result<InstanceId, qflow_runtime::Error>> {
    let rt = rt.clone();
    tokio::spawn(async move { rt.start_instance(dep, Default::default()).await })
}

#[tokio::test]
async fn a_lane_steps_other_instances_while_a_commit_runs_and_never_one_in_it() {
    let store = Arc::new(GatedStore::new());
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let handlers =
        AsyncHandlers::new().with_sync("count", move |_: &qflow_runtime::TaskContext<'_>| {
            counted.fetch_add(1, Ordering::SeqCst);
            TaskOutcome::Ok(Default::default())
        });
    let rt = one_lane(&store, handlers);
    // The deployment is not a commit: it passes the gate.
    let dep = rt.deploy(LINEAR, None).await.expect("deploys").id;

    // A's start reaches the store and is held there.
    let start_a = spawn_start(&rt, dep);
    settle().await;
    assert_eq!(store.batches().len(), 1, "A's start is the first batch");

    // B's start arrives while A's commit is held: the lane steps it now, and commits it
    // as soon as A's commit is answered, in a batch of its own.
    let start_b = spawn_start(&rt, dep);
    settle().await;
    assert_eq!(
        store.batches().len(),
        1,
        "a lane has one commit in flight at most"
    );

    store.gate.add_permits(1);
    let a = hang_guard(start_a).await.expect("joins").expect("A starts");
    settle().await;
    let batches = store.batches();
    assert_eq!(
        batches.len(),
        2,
        "B's batch follows A's answer at once: {batches:?}"
    );
    assert_eq!(batches[0], vec![a]);
    assert!(
        !batches[1].contains(&a),
        "A's next step waits for its commit's answer, so it is not in B's batch: {batches:?}"
    );

    // A's task ran once its start was durable; its outcome waits for the lane's next
    // round, which B's held commit does not hold back from being prepared.
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "A's first task ran, B's has not"
    );
    store.gate.add_permits(1);
    let b = hang_guard(start_b).await.expect("joins").expect("B starts");
    settle().await;
    let batches = store.batches();
    assert_eq!(batches[1], vec![b]);
    assert_eq!(
        batches.len(),
        3,
        "A's task outcome is the next batch: {batches:?}"
    );
    assert_eq!(
        batches[2],
        vec![a],
        "B's first step is not in it: its commit was in flight"
    );

    // Let everything through: both finish, each task ran once, and no batch ever held an
    // instance whose previous batch had not been answered before it was stepped — every
    // instance's steps are in batches of their own order, one step a batch.
    store.gate.add_permits(1_000);
    hang_guard(rt.wait_until(|s| s.completed >= 2)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "two tasks an instance, each once"
    );
    for id in [a, b] {
        let steps = store
            .batches()
            .iter()
            .filter(|batch| batch.contains(&id))
            .count();
        assert_eq!(
            steps, 3,
            "start and two task outcomes of {id}, nothing stepped twice"
        );
        let record = store
            .inner
            .instance(id)
            .await
            .expect("reads")
            .expect("exists");
        assert_eq!(record.status, InstanceStatus::Completed);
    }
}

/// A round submits its batch before it takes the previous round's answer in (starts its
/// handlers, answers its callers): the store's writer does not wait for that work. B's
/// start, stepped while A's start is held, reaches the store before the lane has taken
/// A's answer in.
#[tokio::test]
async fn a_lane_submits_its_next_batch_before_it_takes_the_last_answer_in() {
    let store = Arc::new(GatedStore::new());
    let handlers = AsyncHandlers::new().with_sync("count", |_: &qflow_runtime::TaskContext<'_>| {
        TaskOutcome::Ok(Default::default())
    });
    let rt = one_lane(&store, handlers);
    assert!(store.stats.set(rt.stats()).is_ok(), "set once");
    let dep = rt.deploy(LINEAR, None).await.expect("deploys").id;
    let start_a = spawn_start(&rt, dep);
    settle().await;
    let start_b = spawn_start(&rt, dep);
    settle().await;
    store.gate.add_permits(2);
    let a = hang_guard(start_a).await.expect("joins").expect("A starts");
    let b = hang_guard(start_b).await.expect("joins").expect("B starts");
    settle().await;
    let batches = store.batches();
    assert_eq!(batches[..2], [vec![a], vec![b]], "A's start, then B's");
    let answered = store.answered.lock().expect("log").clone();
    assert_eq!(
        answered[..2],
        [0, 0],
        "B's batch reached the store before A's answer was taken in: {answered:?}"
    );
    store.gate.add_permits(1_000);
    hang_guard(rt.wait_until(|s| s.completed >= 2)).await;
}

#[async_trait]
impl Store for GatedStore {
    fn commits_group(&self) -> bool {
        true
    }

    async fn commit(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        self.batches
            .lock()
            .expect("log")
            .push(batch.iter().map(|c| c.instance).collect());
        if let Some(stats) = self.stats.get() {
            let answered = stats.view().batches;
            self.answered.lock().expect("log").push(answered);
        }
        self.gate
            .acquire()
            .await
            .expect("the gate stays open")
            .forget();
        self.inner.commit(batch).await
    }

    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }

    async fn close(&self) {
        self.inner.close().await
    }

    async fn deploy(&self, new: NewDeployment<'_>) -> StoreResult<DeploymentRecord> {
        self.inner.deploy(new).await
    }

    async fn deployment(&self, id: DeploymentId) -> StoreResult<Option<DeploymentRecord>> {
        self.inner.deployment(id).await
    }

    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>> {
        self.inner.deployments().await
    }

    async fn retire(&self, id: DeploymentId) -> StoreResult<RetireOutcome> {
        self.inner.retire(id).await
    }

    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>> {
        self.inner.instance(id).await
    }

    async fn instances_by_id(&self, ids: &[InstanceId]) -> StoreResult<Vec<InstanceRecord>> {
        self.inner.instances_by_id(ids).await
    }

    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        self.inner.instances(filter).await
    }

    async fn claim_due_timers(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<TimerRecord>> {
        self.inner.claim_due_timers(claim).await
    }

    async fn claim_due_schedules(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<ScheduleRecord>> {
        self.inner.claim_due_schedules(claim).await
    }

    async fn advance_schedule(
        &self,
        deployment: DeploymentId,
        advance: &ScheduleAdvance,
    ) -> StoreResult<bool> {
        self.inner.advance_schedule(deployment, advance).await
    }

    async fn schedules(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<ScheduleRecord>> {
        self.inner.schedules(deployment).await
    }

    async fn next_timer_due(&self) -> StoreResult<Option<i64>> {
        self.inner.next_timer_due().await
    }

    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>> {
        self.inner.timers(instance).await
    }

    async fn incidents(&self, instance: Option<InstanceId>) -> StoreResult<Vec<IncidentRecord>> {
        self.inner.incidents(instance).await
    }

    async fn latest_incidents(
        &self,
        limit: u32,
        open_only: bool,
    ) -> StoreResult<Vec<IncidentRecord>> {
        self.inner.latest_incidents(limit, open_only).await
    }

    async fn subscriptions(
        &self,
        message: &str,
        key: &str,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        self.inner.subscriptions(message, key, limit).await
    }

    async fn subscriptions_after(
        &self,
        message: &str,
        key: &str,
        after: &SubscriptionRecord,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        self.inner
            .subscriptions_after(message, key, after, limit)
            .await
    }

    async fn instance_subscriptions(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        self.inner.instance_subscriptions(instance).await
    }

    async fn instance_counts(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<(InstanceStatus, u64)>> {
        self.inner.instance_counts(deployment).await
    }

    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>> {
        self.inner.attempts(instance).await
    }

    async fn journal(
        &self,
        instance: InstanceId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>> {
        self.inner.journal(instance, after, limit).await
    }

    async fn audit(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        self.inner.audit(instance, limit).await
    }

    async fn purge_finished(&self, request: PurgeRequest) -> StoreResult<PurgeOutcome> {
        self.inner.purge_finished(request).await
    }

    async fn offered_pull_tasks(&self, query: PullQuery<'_>) -> StoreResult<Vec<PullTaskRecord>> {
        self.inner.offered_pull_tasks(query).await
    }

    async fn pull_tasks(&self, instance: InstanceId) -> StoreResult<Vec<PullTaskRecord>> {
        self.inner.pull_tasks(instance).await
    }

    async fn claim_due_outbox(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<OutboxRecord>> {
        self.inner.claim_due_outbox(claim).await
    }

    async fn record_delivery(
        &self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: DeliveryRecord,
    ) -> StoreResult<bool> {
        self.inner.record_delivery(key, owner, now_ms, record).await
    }

    async fn next_outbox_due(&self) -> StoreResult<Option<i64>> {
        self.inner.next_outbox_due().await
    }

    async fn outbox_row(&self, key: &str) -> StoreResult<Option<OutboxRecord>> {
        self.inner.outbox_row(key).await
    }

    async fn outbox(&self, instance: InstanceId) -> StoreResult<Vec<OutboxRecord>> {
        self.inner.outbox(instance).await
    }

    async fn user_tasks(&self, query: &UserTaskQuery) -> StoreResult<Vec<UserTaskRecord>> {
        self.inner.user_tasks(query).await
    }

    async fn instance_user_tasks(&self, instance: InstanceId) -> StoreResult<Vec<UserTaskRecord>> {
        self.inner.instance_user_tasks(instance).await
    }

    async fn camunda_keys(&self, names: &[KeyName]) -> StoreResult<Vec<i64>> {
        self.inner.camunda_keys(names).await
    }

    async fn camunda_key(&self, key: i64) -> StoreResult<Option<KeyName>> {
        self.inner.camunda_key(key).await
    }

    async fn buffer_message(&self, message: &NewBufferedMessage) -> StoreResult<BufferOutcome> {
        self.inner.buffer_message(message).await
    }

    async fn buffered_messages(&self, query: BufferQuery<'_>) -> StoreResult<Vec<BufferedMessage>> {
        self.inner.buffered_messages(query).await
    }

    async fn expire_messages(&self, now_ms: i64, limit: u32) -> StoreResult<u64> {
        self.inner.expire_messages(now_ms, limit).await
    }
}

#[test]
fn a_store_whose_commits_group_gets_one_lane_by_default_and_any_other_two() {
    assert_eq!(qflow_runtime::default_lanes(&GatedStore::new()), 1);
    assert_eq!(qflow_runtime::default_lanes(&MemoryStore::new()), 2);
}
