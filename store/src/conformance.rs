//! The store conformance kit: the contract of [`crate::Store`] as executable cases, for
//! every store implementation to run against itself (the memory store, SQLite and
//! PostgreSQL in `qflow-persistence`'s tests).
//!
//! A case gets a [`Ctx`]: the store under test and a second handle on the same data (the
//! same object for an in-process store, a second connection pool for a database), so
//! that cases about replicas and concurrent claimers test what two processes would see.
//! [`conformance_tests!`](crate::conformance_tests) expands to one `#[tokio::test]` per
//! case; the caller supplies an async opener, which returns `None` (with a printed
//! reason) when its backend is not available here.
//!
//! ```text
//! mod sqlite {
//!     qflow_store::conformance_tests!(super::open_sqlite);
//! }
//! ```

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::{anyhow, ensure, Result};
use qflow_core::journal::HashKind;

use crate::{
    poisoned_message, Attempt, AttemptOutcome, AttemptRecord, AuditEntry, BufferOutcome,
    BufferQuery, Commit, CommitOutcome, DeliveryRecord, DeploymentId, InstanceFilter, InstanceId,
    InstanceState, InstanceStatus, JournalEntry, KeyKind, KeyName, MessageTake, NewBufferedMessage,
    NewDeployment, NewIncident, NewOutboxRow, NewSchedule, NewSubscription, OutboxRecord,
    OutboxState, PullQuery, PullTaskRecord, PurgeOutcome, PurgeRequest, RetireOutcome,
    ScheduleAdvance, ScheduleRecord, Store, StoreError, TimerClaim, TimerName, TimerRecord,
    TimerRef, UserTaskQuery, UserTaskRecord, CAMUNDA_KEYS_MAX, CAMUNDA_KEY_FIRST,
    POISONED_INCIDENT_CODE,
};

/// A future that tidies a backend up after a case (drops a schema, removes a file).
pub type Cleanup = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a case gets.
#[derive(Clone)]
pub struct Ctx {
    /// Names the backend in messages (`memory`, `sqlite`, `postgres`).
    pub label: &'static str,
    pub store: Arc<dyn Store>,
    /// A second handle on the same data: another pool or connection where the backend has
    /// them, the same object otherwise.
    pub second: Arc<dyn Store>,
}

/// An opened backend: the context for one case and what to do once it is over.
pub struct Opened {
    pub ctx: Ctx,
    pub cleanup: Option<Cleanup>,
}

/// Opens a fresh backend with `open`, runs `case` on it, cleans up even if the case
/// panicked, then fails the test with the case's error (labelled with the backend).
pub async fn run<O, OFut, F, Fut>(open: O, case: F)
where
    O: FnOnce() -> OFut,
    OFut: Future<Output = Option<Opened>>,
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let Some(opened) = open().await else {
        return;
    };
    let label = opened.ctx.label;
    let outcome = tokio::spawn(case(opened.ctx)).await;
    if let Some(cleanup) = opened.cleanup {
        cleanup.await;
    }
    match outcome {
        Ok(result) => result.unwrap_or_else(|e| panic!("{label}: {e:#}")),
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

/// One `#[tokio::test]` per conformance case, each on a backend `$open` opens afresh.
/// `$open` is a path to `async fn() -> Option<qflow_store::conformance::Opened>`.
#[macro_export]
macro_rules! conformance_tests {
    ($open:path) => {
        $crate::conformance_tests!(@cases $open;
            deploy_is_idempotent_by_content_hash_and_versions_increase,
            create_and_cas_commit_advance_the_fence,
            instances_by_id_reads_many_at_once,
            stale_fence_conflicts_and_writes_nothing,
            conflict_in_a_batch_skips_only_the_loser,
            unknown_deployment_fails_the_whole_batch,
            repeated_instance_in_a_batch_applies_in_order,
            timers_upsert_and_resolve_only_with_matching_incarnation,
            claim_respects_due_time_and_leases,
            rearming_a_leased_timer_drops_the_lease,
            the_in_flight_lease_is_a_timer_like_any_other,
            concurrent_claimers_never_share_a_timer,
            concurrent_committers_win_each_fence_exactly_once,
            retire_is_refused_while_running_or_failed_instances_remain,
            creation_on_a_retired_deployment_is_refused_and_writes_nothing,
            a_migration_onto_a_retired_deployment_is_refused_and_writes_nothing,
            retirement_and_creation_racing_never_leave_an_instance_on_a_retired_deployment,
            incidents_open_and_resolve,
            attempts_history_keeps_order,
            a_long_attempt_history_reads_whole_in_order_and_purges_whole,
            audit_rows_are_written_with_their_commit_only,
            instances_filter_by_deployment_status_and_code,
            duplicate_business_key_is_refused_and_writes_nothing,
            business_key_is_kept_by_updates_and_read_back,
            repeated_business_key_in_a_batch_applies_the_first,
            instances_filter_by_business_key,
            moving_an_instance_onto_a_deployment_holding_its_key_is_refused,
            concurrent_creations_of_one_business_key_never_both_win,
            snapshot_bytes_round_trip_exactly,
            ended_at_is_set_by_the_ending_commit_and_kept,
            purge_takes_only_instances_ended_before_the_cutoff_with_their_rows,
            purge_never_touches_running_or_failed_instances_at_any_age,
            purge_honours_its_limit_oldest_end_first,
            purge_filters_by_deployment,
            concurrent_purges_take_each_instance_once,
            subscriptions_open_close_and_are_found_by_message_and_key,
            subscriptions_follow_the_fence_and_are_purged_with_their_instance,
            subscriptions_are_walked_page_by_page_past_a_cursor,
            instances_filter_by_node_and_end,
            instance_counts_cover_every_status,
            open_incidents_move_with_their_node_resolved_ones_stay,
            latest_incidents_are_the_newest_bounded_and_optionally_open,
            pull_tasks_are_offered_locked_and_withdrawn_with_their_commit,
            offered_pull_tasks_filter_by_topic_oldest_first_and_honour_the_limit,
            pull_rows_go_with_a_purged_instance,
            outbox_rows_are_emitted_with_their_commit_only,
            emitting_an_existing_key_leaves_the_row_as_it_is,
            outbox_claim_takes_due_pending_rows_earliest_first_within_the_limit,
            outbox_leases_are_exclusive_until_they_expire,
            concurrent_outbox_claimers_never_share_a_row,
            record_delivery_moves_the_row_for_each_record,
            a_poisoned_row_opens_its_incident_with_the_delivery_count,
            record_delivery_is_refused_without_the_lease_on_a_pending_row,
            withdrawal_deletes_undelivered_rows_of_its_node_only,
            withdraw_then_emit_in_one_commit_keeps_the_new_row,
            an_answer_in_a_commit_marks_its_pending_row_delivered,
            next_outbox_due_is_the_earliest_pending_row_leased_or_not,
            outbox_lists_an_instances_rows_oldest_first_then_by_key,
            purge_takes_every_outbox_row_of_a_purged_instance_only,
            poisons_racing_withdrawals_never_deadlock,
            user_tasks_are_offered_assigned_and_withdrawn_with_their_commit,
            user_tasks_filter_by_assignee_candidates_and_deployment,
            user_task_listing_pages_by_keyset_without_skips_or_repeats,
            an_offered_again_user_task_replaces_its_candidates,
            user_task_rows_go_with_a_purged_instance,
            schedules_are_recorded_with_a_new_deployment_and_replaced_by_the_next,
            schedule_claims_take_due_rows_earliest_first_and_lease_them,
            a_start_moves_its_schedule_on_and_a_stale_one_writes_nothing,
            the_last_start_deletes_its_schedule_and_retirement_deletes_the_rest,
            replicas_racing_one_occurrence_start_one_instance,
            an_occurrence_can_be_skipped_only_where_its_schedule_stands,
            journal_rows_are_appended_with_their_commit_only,
            journal_rows_go_with_a_purged_instance,
            camunda_keys_are_given_once_per_name_and_read_back,
            camunda_keys_from_two_handles_at_once_agree,
            camunda_keys_go_with_a_purged_instance_and_are_never_reused,
            camunda_keys_of_a_withdrawn_task_go_with_it,
            camunda_keys_are_given_only_to_names_of_stored_instances,
            buffered_messages_are_listed_live_oldest_first_and_expire,
            a_buffered_message_id_is_refused_twice_while_live,
            a_buffered_message_is_taken_once_per_process_with_its_step,
            takes_of_one_message_from_two_handles_at_once_win_once,
        );
    };
    (@cases $open:path; $($case:ident),* $(,)?) => {
        $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            $crate::conformance::run($open, $crate::conformance::$case).await
        })*
    };
}

pub const T0: i64 = 1_700_000_000_000;

pub fn id(n: u128) -> InstanceId {
    InstanceId::from_u128(0x51f0_0000_0000_4000_8000_0000_0000_0000 | n)
}

/// A commit with no effects; cases add what they test.
pub fn commit(
    instance: InstanceId,
    expected_fence: Option<u64>,
    deployment: DeploymentId,
) -> Commit {
    let state = InstanceState {
        status: InstanceStatus::Running,
        failure_code: None,
        snapshot: vec![1, 2, 3],
        business_key: None,
    };
    Commit::new(instance, expected_fence, deployment, state, T0)
}

/// A creation of `instance` on `deployment` with the business key `key`.
pub fn keyed(instance: InstanceId, deployment: DeploymentId, key: &str) -> Commit {
    let mut c = commit(instance, None, deployment);
    c.state.business_key = Some(key.to_owned());
    c
}

/// A timer poll: due at `now_ms`, leased for `lease_ms` to `owner`, at most `limit` rows.
pub fn poll(now_ms: i64, lease_ms: i64, owner: &str, limit: u32) -> TimerClaim<'_> {
    TimerClaim {
        now_ms,
        lease_ms,
        owner,
        limit,
    }
}

/// The timer name `s` (one the engine writes, e.g. `r:pay`).
pub fn name(s: &str) -> TimerName {
    s.parse().expect("a timer name the engine writes")
}

pub fn timer(instance: InstanceId, name: &str, due_at_ms: i64, incarnation: u32) -> TimerRecord {
    TimerRecord {
        instance,
        name: self::name(name),
        due_at_ms,
        incarnation,
    }
}

/// A deployment of process `order` with this content hash and source.
pub fn new_deployment<'a>(hash: &'a str, source: &'a str, at_ms: i64) -> NewDeployment<'a> {
    NewDeployment {
        process_id: "order",
        content_hash: hash,
        source,
        deployed_at_ms: at_ms,
        schedules: &[],
    }
}

pub async fn deploy(store: &dyn Store, hash: &str) -> Result<DeploymentId> {
    Ok(store
        .deploy(new_deployment(
            hash,
            &format!("<definitions id='{hash}'/>"),
            T0,
        ))
        .await?
        .id)
}

pub async fn commit_one(store: &dyn Store, c: Commit) -> Result<CommitOutcome> {
    let mut outcomes = store.commit(vec![c]).await?;
    ensure!(outcomes.len() == 1, "one outcome per commit");
    Ok(outcomes.remove(0))
}

pub async fn create(
    store: &dyn Store,
    instance: InstanceId,
    deployment: DeploymentId,
) -> Result<()> {
    let outcome = commit_one(store, commit(instance, None, deployment)).await?;
    ensure!(
        outcome == CommitOutcome::Applied { fence: 1 },
        "create: {outcome:?}"
    );
    Ok(())
}

pub async fn deploy_is_idempotent_by_content_hash_and_versions_increase(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let a = s.deploy(new_deployment("aaaa", "<a/>", T0)).await?;
    let b = s.deploy(new_deployment("bbbb", "<b/>", T0 + 1)).await?;
    let a_again = s.deploy(new_deployment("aaaa", "<a/>", T0 + 2)).await?;
    ensure!(
        a == a_again,
        "same content, same deployment: {a:?} vs {a_again:?}"
    );
    ensure!(b.id > a.id, "versions increase: {:?} then {:?}", a.id, b.id);
    ensure!(a.source == "<a/>" && a.deployed_at_ms == T0 && !a.retired);
    ensure!(s.deployment(b.id).await? == Some(b.clone()));
    ensure!(s.deployment(DeploymentId(b.id.0 + 1000)).await?.is_none());
    ensure!(
        s.deployments().await? == vec![a.clone(), b.clone()],
        "oldest first"
    );
    let c = ctx
        .second
        .deploy(new_deployment("cccc", "<c/>", T0 + 3))
        .await?;
    // Deploying `aaaa` again used no version number: versions stay dense.
    ensure!(c.id.0 == b.id.0 + 1, "{:?} after {:?}", c.id, b.id);
    ensure!(s.deploy(new_deployment("cccc", "<c/>", T0 + 4)).await? == c);
    Ok(())
}

pub async fn create_and_cas_commit_advance_the_fence(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    create(s, id(1), dep).await?;
    let created = s.instance(id(1)).await?.ok_or_else(|| anyhow!("created"))?;
    ensure!(created.fence == 1 && created.created_at_ms == T0 && created.updated_at_ms == T0);
    let mut step = commit(id(1), Some(1), dep);
    step.state.snapshot = vec![9; 100];
    step.now_ms = T0 + 50;
    step.state.status = InstanceStatus::Completed;
    ensure!(commit_one(s, step).await? == CommitOutcome::Applied { fence: 2 });
    let stepped = s.instance(id(1)).await?.ok_or_else(|| anyhow!("stepped"))?;
    ensure!(stepped.fence == 2 && stepped.snapshot == vec![9; 100]);
    ensure!(stepped.status == InstanceStatus::Completed);
    ensure!(stepped.created_at_ms == T0 && stepped.updated_at_ms == T0 + 50);
    // The second handle sees the committed state and can step on from it.
    let seen = ctx
        .second
        .instance(id(1))
        .await?
        .ok_or_else(|| anyhow!("second"))?;
    ensure!(seen == stepped);
    let outcome = commit_one(&*ctx.second, commit(id(1), Some(2), dep)).await?;
    ensure!(outcome == CommitOutcome::Applied { fence: 3 });
    Ok(())
}

/// [`Store::instances_by_id`] gives what [`Store::instance`] gives for each id, each
/// once, and leaves out ids without an instance; more ids than one statement holds
/// (SQLite's 128) are read too.
pub async fn instances_by_id_reads_many_at_once(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let batch: Vec<Commit> = (1..=300).map(|n| commit(id(n), None, dep)).collect();
    ensure!(s
        .commit(batch)
        .await?
        .iter()
        .all(|o| matches!(o, CommitOutcome::Applied { .. })));
    let mut step = commit(id(7), Some(1), dep);
    step.state.snapshot = vec![7; 40];
    step.state.status = InstanceStatus::Failed;
    step.state.failure_code = Some("X".to_owned());
    ensure!(commit_one(s, step).await? == CommitOutcome::Applied { fence: 2 });
    ensure!(s.instances_by_id(&[]).await?.is_empty());
    let mut asked: Vec<InstanceId> = (1..=300).rev().map(id).collect();
    asked.push(id(7));
    asked.push(id(999));
    let mut got = s.instances_by_id(&asked).await?;
    got.sort_by_key(|r| r.id);
    ensure!(got.len() == 300, "{} records", got.len());
    for record in &got {
        let one = s.instance(record.id).await?;
        ensure!(
            one.as_ref() == Some(record),
            "{} differs from instance()",
            record.id
        );
    }
    let seven = got
        .iter()
        .find(|r| r.id == id(7))
        .ok_or_else(|| anyhow!("id 7"))?;
    ensure!(seven.fence == 2 && seven.status == InstanceStatus::Failed);
    ensure!(ctx.second.instances_by_id(&[id(999), id(3)]).await?.len() == 1);
    Ok(())
}

pub async fn stale_fence_conflicts_and_writes_nothing(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    create(s, id(1), dep).await?;
    ensure!(
        commit_one(s, commit(id(1), Some(1), dep)).await? == CommitOutcome::Applied { fence: 2 }
    );
    let before = s.instance(id(1)).await?;

    let mut stale = commit(id(1), Some(1), dep);
    stale.state.snapshot = vec![0xde, 0xad];
    stale.state.status = InstanceStatus::Failed;
    stale.state.failure_code = Some("LOST".into());
    stale.timers.arm = vec![timer(id(1), "r:pay", T0 + 10, 1)];
    stale.incidents.open = vec![NewIncident {
        node: "pay".into(),
        code: "X".into(),
        message: "m".into(),
    }];
    stale.attempts = vec![attempt(id(1), "pay", 1)];
    let outcome = commit_one(s, stale).await?;
    ensure!(
        outcome
            == CommitOutcome::Conflict {
                current_fence: Some(2)
            },
        "{outcome:?}"
    );
    ensure!(
        s.instance(id(1)).await? == before,
        "the loser changed the instance"
    );
    ensure!(s.timers(id(1)).await?.is_empty(), "the loser armed a timer");
    ensure!(
        s.incidents(Some(id(1))).await?.is_empty(),
        "the loser opened an incident"
    );
    ensure!(
        s.attempts(id(1)).await?.is_empty(),
        "the loser recorded an attempt"
    );

    // Creating an existing instance is a conflict too, and so is stepping a missing one.
    let again = commit_one(s, commit(id(1), None, dep)).await?;
    ensure!(
        again
            == CommitOutcome::Conflict {
                current_fence: Some(2)
            },
        "{again:?}"
    );
    let missing = commit_one(s, commit(id(2), Some(1), dep)).await?;
    ensure!(
        missing
            == CommitOutcome::Conflict {
                current_fence: None
            },
        "{missing:?}"
    );
    ensure!(s.instance(id(2)).await?.is_none());
    Ok(())
}

pub async fn conflict_in_a_batch_skips_only_the_loser(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    create(s, id(1), dep).await?;
    create(s, id(2), dep).await?;
    let mut a = commit(id(1), Some(1), dep);
    a.timers.arm = vec![timer(id(1), "t:a", T0 + 5, 1)];
    let mut b = commit(id(2), Some(7), dep);
    b.timers.arm = vec![timer(id(2), "t:a", T0 + 5, 1)];
    b.attempts = vec![attempt(id(2), "n", 1)];
    let mut c = commit(id(3), None, dep);
    c.timers.arm = vec![timer(id(3), "t:a", T0 + 6, 1)];
    let outcomes = s.commit(vec![a, b, c]).await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::Applied { fence: 2 },
                CommitOutcome::Conflict {
                    current_fence: Some(1)
                },
                CommitOutcome::Applied { fence: 1 },
            ],
        "{outcomes:?}"
    );
    ensure!(s.timers(id(1)).await?.len() == 1);
    ensure!(s.timers(id(2)).await?.is_empty());
    ensure!(s.attempts(id(2)).await?.is_empty());
    ensure!(s.timers(id(3)).await?.len() == 1);
    ensure!(s.instance(id(2)).await?.map(|i| i.fence) == Some(1));
    Ok(())
}

pub async fn unknown_deployment_fails_the_whole_batch(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let bogus = DeploymentId(dep.0 + 1000);
    let result = s
        .commit(vec![commit(id(1), None, dep), commit(id(2), None, bogus)])
        .await;
    match result {
        Err(StoreError::UnknownDeployment(d)) => ensure!(d == bogus),
        other => return Err(anyhow!("expected UnknownDeployment, got {other:?}")),
    }
    ensure!(
        s.instance(id(1)).await?.is_none(),
        "a failed batch wrote a row"
    );
    create(s, id(1), dep).await?;
    Ok(())
}

pub async fn repeated_instance_in_a_batch_applies_in_order(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut first = commit(id(1), None, dep);
    first.timers.arm = vec![timer(id(1), "t:a", T0 + 5, 1)];
    let mut second = commit(id(1), Some(1), dep);
    second.timers.resolve = vec![TimerRef {
        name: name("t:a"),
        incarnation: 1,
    }];
    second.state.snapshot = vec![7];
    let stale = commit(id(1), Some(1), dep);
    let outcomes = s.commit(vec![first, second, stale]).await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::Applied { fence: 1 },
                CommitOutcome::Applied { fence: 2 },
                CommitOutcome::Conflict {
                    current_fence: Some(2)
                },
            ],
        "{outcomes:?}"
    );
    ensure!(s.timers(id(1)).await?.is_empty());
    ensure!(s.instance(id(1)).await?.map(|i| i.snapshot) == Some(vec![7]));
    Ok(())
}

pub async fn timers_upsert_and_resolve_only_with_matching_incarnation(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.timers.arm = vec![
        timer(id(1), "r:pay", T0 + 100, 1),
        timer(id(1), "b:t1", T0 + 900, 1),
    ];
    commit_one(s, c).await?;
    ensure!(
        s.timers(id(1)).await?
            == vec![
                timer(id(1), "b:t1", T0 + 900, 1),
                timer(id(1), "r:pay", T0 + 100, 1)
            ],
        "timers are listed by name"
    );

    // Arming the same name replaces the row and its incarnation.
    let mut c = commit(id(1), Some(1), dep);
    c.timers.arm = vec![timer(id(1), "r:pay", T0 + 200, 2)];
    commit_one(s, c).await?;
    // A stale resolve (old incarnation) leaves the live timer alone.
    let mut c = commit(id(1), Some(2), dep);
    c.timers.resolve = vec![TimerRef {
        name: name("r:pay"),
        incarnation: 1,
    }];
    commit_one(s, c).await?;
    ensure!(s
        .timers(id(1))
        .await?
        .contains(&timer(id(1), "r:pay", T0 + 200, 2)));
    // Resolve and re-arm in one step: the new incarnation survives.
    let mut c = commit(id(1), Some(3), dep);
    c.timers.resolve = vec![TimerRef {
        name: name("r:pay"),
        incarnation: 2,
    }];
    c.timers.arm = vec![timer(id(1), "r:pay", T0 + 300, 3)];
    commit_one(s, c).await?;
    ensure!(s
        .timers(id(1))
        .await?
        .contains(&timer(id(1), "r:pay", T0 + 300, 3)));
    let mut c = commit(id(1), Some(4), dep);
    c.timers.resolve = vec![
        TimerRef {
            name: name("r:pay"),
            incarnation: 3,
        },
        TimerRef {
            name: name("b:t1"),
            incarnation: 1,
        },
    ];
    commit_one(s, c).await?;
    ensure!(s.timers(id(1)).await?.is_empty());
    ensure!(s.next_timer_due().await?.is_none());
    Ok(())
}

pub async fn claim_respects_due_time_and_leases(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.timers.arm = vec![
        timer(id(1), "c:a", T0 + 100, 1),
        timer(id(1), "c:b", T0 + 200, 1),
        timer(id(1), "c:c", T0 + 300, 1),
    ];
    commit_one(s, c).await?;
    ensure!(s.next_timer_due().await? == Some(T0 + 100));
    ensure!(
        s.claim_due_timers(poll(T0 + 99, 1_000, "r1", 10))
            .await?
            .is_empty(),
        "nothing due yet"
    );

    let first = s.claim_due_timers(poll(T0 + 150, 1_000, "r1", 10)).await?;
    ensure!(first == vec![timer(id(1), "c:a", T0 + 100, 1)], "{first:?}");
    // Leased until T0 + 1150, inclusive: not handed out again while the lease holds.
    ensure!(s
        .claim_due_timers(poll(T0 + 150, 1_000, "r2", 10))
        .await?
        .is_empty());
    let second = s.claim_due_timers(poll(T0 + 250, 1_000, "r2", 10)).await?;
    ensure!(
        second == vec![timer(id(1), "c:b", T0 + 200, 1)],
        "{second:?}"
    );
    ensure!(
        s.claim_due_timers(poll(T0 + 1_150, 1_000, "r2", 10))
            .await?
            == vec![timer(id(1), "c:c", T0 + 300, 1)]
    );
    // Leased timers still count for the next due instant.
    ensure!(s.next_timer_due().await? == Some(T0 + 100));

    // After the leases expire, everything due is claimable again, earliest first, and the
    // limit is honoured.
    let limited = s.claim_due_timers(poll(T0 + 5_000, 1_000, "r3", 2)).await?;
    ensure!(
        limited
            == vec![
                timer(id(1), "c:a", T0 + 100, 1),
                timer(id(1), "c:b", T0 + 200, 1)
            ],
        "{limited:?}"
    );
    let rest = s.claim_due_timers(poll(T0 + 5_000, 1_000, "r3", 2)).await?;
    ensure!(rest == vec![timer(id(1), "c:c", T0 + 300, 1)], "{rest:?}");
    ensure!(s
        .claim_due_timers(poll(T0 + 5_000, 1_000, "r3", 0))
        .await?
        .is_empty());
    // Claiming never deletes: the rows stay until a commit resolves them.
    ensure!(s.timers(id(1)).await?.len() == 3);
    Ok(())
}

pub async fn rearming_a_leased_timer_drops_the_lease(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.timers.arm = vec![timer(id(1), "t:a", T0, 1)];
    commit_one(s, c).await?;
    ensure!(s.claim_due_timers(poll(T0, 60_000, "r1", 10)).await?.len() == 1);
    let mut c = commit(id(1), Some(1), dep);
    c.timers.arm = vec![timer(id(1), "t:a", T0 + 10, 2)];
    commit_one(s, c).await?;
    let again = s.claim_due_timers(poll(T0 + 10, 60_000, "r2", 10)).await?;
    ensure!(again == vec![timer(id(1), "t:a", T0 + 10, 2)], "{again:?}");
    Ok(())
}

/// The in-flight lease `~run` (C7a) behaves as every other timer name, whatever a store
/// keeps it in (SQLite keeps it in the instance's row, `0023_lease_in_row.sql`): armed
/// with a creation or a later commit, listed, counted for the next due instant, claimed
/// earliest first together with the other timers within one limit, exclusively while
/// the claim holds, re-armed (dropping the claim), resolved only with its incarnation.
pub async fn the_in_flight_lease_is_a_timer_like_any_other(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    // Armed with the creation of one instance, by a later commit of another.
    let mut c = commit(id(1), None, dep);
    c.timers.arm = vec![timer(id(1), "~run", T0 + 200, 0)];
    commit_one(s, c).await?;
    commit_one(s, commit(id(2), None, dep)).await?;
    let mut c = commit(id(2), Some(1), dep);
    c.timers.arm = vec![
        timer(id(2), "c:a", T0 + 100, 1),
        timer(id(2), "~run", T0 + 300, 4),
    ];
    commit_one(s, c).await?;
    ensure!(s.timers(id(1)).await? == vec![timer(id(1), "~run", T0 + 200, 0)]);
    let listed = s.timers(id(2)).await?;
    ensure!(
        listed
            == vec![
                timer(id(2), "c:a", T0 + 100, 1),
                timer(id(2), "~run", T0 + 300, 4)
            ],
        "by name: {listed:?}"
    );
    ensure!(s.next_timer_due().await? == Some(T0 + 100));

    // One claim takes the earliest of timers and leases together, within its limit.
    let first = s.claim_due_timers(poll(T0 + 1_000, 1_000, "r1", 2)).await?;
    ensure!(
        first
            == vec![
                timer(id(2), "c:a", T0 + 100, 1),
                timer(id(1), "~run", T0 + 200, 0)
            ],
        "{first:?}"
    );
    // Claimed rows are not handed out again while the claim holds; the rest is.
    let second = s
        .claim_due_timers(poll(T0 + 1_000, 1_000, "r2", 10))
        .await?;
    ensure!(
        second == vec![timer(id(2), "~run", T0 + 300, 4)],
        "{second:?}"
    );
    ensure!(s
        .claim_due_timers(poll(T0 + 1_500, 1_000, "r3", 10))
        .await?
        .is_empty());
    // Re-arming drops the claim: due again at once.
    let mut c = commit(id(1), Some(1), dep);
    c.timers.arm = vec![timer(id(1), "~run", T0 + 400, 0)];
    commit_one(s, c).await?;
    let rearmed = s
        .claim_due_timers(poll(T0 + 1_500, 1_000, "r3", 10))
        .await?;
    ensure!(
        rearmed == vec![timer(id(1), "~run", T0 + 400, 0)],
        "{rearmed:?}"
    );
    // Resolved only with its incarnation; a resolve and an arm in one commit keep the arm.
    let mut c = commit(id(2), Some(2), dep);
    c.timers.resolve = vec![TimerRef {
        name: name("~run"),
        incarnation: 3,
    }];
    commit_one(s, c).await?;
    ensure!(s.timers(id(2)).await?.len() == 2, "a stale resolve kept it");
    let mut c = commit(id(2), Some(3), dep);
    c.timers.resolve = vec![TimerRef {
        name: name("~run"),
        incarnation: 4,
    }];
    c.timers.arm = vec![timer(id(2), "~run", T0 + 500, 5)];
    commit_one(s, c).await?;
    ensure!(s
        .timers(id(2))
        .await?
        .contains(&timer(id(2), "~run", T0 + 500, 5)));
    let mut c = commit(id(2), Some(4), dep);
    c.timers.resolve = vec![
        TimerRef {
            name: name("~run"),
            incarnation: 5,
        },
        TimerRef {
            name: name("c:a"),
            incarnation: 1,
        },
    ];
    commit_one(s, c).await?;
    ensure!(s.timers(id(2)).await?.is_empty());
    // Two resolves of it in one commit: the one whose incarnation matches takes it.
    let mut c = commit(id(1), Some(2), dep);
    c.timers.resolve = vec![
        TimerRef {
            name: name("~run"),
            incarnation: 0,
        },
        TimerRef {
            name: name("~run"),
            incarnation: 9,
        },
    ];
    commit_one(s, c).await?;
    ensure!(s.timers(id(1)).await?.is_empty());
    ensure!(s.next_timer_due().await?.is_none());
    ensure!(s
        .claim_due_timers(poll(T0 + 10_000, 1_000, "r4", 10))
        .await?
        .is_empty());
    // An instance that ends with its lease still armed (the runtime resolves it first)
    // takes it along when purged, counted with its timers.
    let mut c = commit(id(3), None, dep);
    c.timers.arm = vec![timer(id(3), "~run", T0 + 600, 0)];
    commit_one(s, c).await?;
    commit_one(
        s,
        with_status(id(3), Some(1), dep, InstanceStatus::Completed, T0 + 700),
    )
    .await?;
    let out = s.purge_finished(purge(T0 + 10_000, 100)).await?;
    ensure!(out.instances == 1 && out.timers == 1, "{out:?}");
    ensure!(s.next_timer_due().await?.is_none());
    Ok(())
}

pub async fn concurrent_claimers_never_share_a_timer(ctx: Ctx) -> Result<()> {
    const TIMERS: u128 = 300;
    let dep = deploy(&*ctx.store, "h1").await?;
    let batch: Vec<Commit> = (0..TIMERS)
        .map(|n| {
            let mut c = commit(id(n), None, dep);
            c.timers.arm = vec![timer(id(n), "t:a", T0 + (n as i64 % 17), 1)];
            c
        })
        .collect();
    ensure!(ctx
        .store
        .commit(batch)
        .await?
        .iter()
        .all(|o| matches!(o, CommitOutcome::Applied { .. })));

    let claimer = |store: Arc<dyn Store>, owner: &'static str| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let claimed = store
                    .claim_due_timers(poll(T0 + 100, 600_000, owner, 7))
                    .await?;
                if claimed.is_empty() {
                    return Ok::<_, StoreError>(got);
                }
                got.extend(claimed.into_iter().map(|t| t.instance));
                tokio::task::yield_now().await;
            }
        })
    };
    let a = claimer(ctx.store.clone(), "replica-a");
    let b = claimer(ctx.second.clone(), "replica-b");
    let (a, b) = (a.await??, b.await??);
    let mut all: Vec<InstanceId> = a.iter().chain(b.iter()).copied().collect();
    let total = all.len();
    all.sort();
    all.dedup();
    ensure!(
        all.len() == total,
        "{} timers were claimed twice",
        total - all.len()
    );
    ensure!(total == TIMERS as usize, "claimed {total} of {TIMERS}");
    println!(
        "{:?}: replica a claimed {}, replica b {}",
        ctx.label,
        a.len(),
        b.len()
    );
    Ok(())
}

/// Two replicas step the same instances at once, in opposite orders, with whatever fence
/// they last read. Every fence is won by exactly one of them (no lost update, no double
/// step), and overlapping batches never deadlock.
pub async fn concurrent_committers_win_each_fence_exactly_once(ctx: Ctx) -> Result<()> {
    const INSTANCES: u128 = 12;
    const ROUNDS: usize = 25;
    let dep = deploy(&*ctx.store, "h1").await?;
    let batch = (0..INSTANCES).map(|n| commit(id(n), None, dep)).collect();
    ctx.store.commit(batch).await?;

    let stepper = |store: Arc<dyn Store>, reversed: bool, tag: u8| {
        tokio::spawn(async move {
            let mut won = 0_u64;
            for _ in 0..ROUNDS {
                let mut order: Vec<u128> = (0..INSTANCES).collect();
                if reversed {
                    order.reverse();
                }
                let mut batch = Vec::new();
                for n in order {
                    let fence = store.instance(id(n)).await?.map(|i| i.fence);
                    let mut c = commit(id(n), fence, dep);
                    c.state.snapshot = vec![tag; 8];
                    c.attempts = vec![attempt(id(n), &format!("step-{tag}"), 1)];
                    batch.push(c);
                }
                for outcome in store.commit(batch).await? {
                    if matches!(outcome, CommitOutcome::Applied { .. }) {
                        won += 1;
                    }
                }
                tokio::task::yield_now().await;
            }
            Ok::<_, StoreError>(won)
        })
    };
    let a = stepper(ctx.store.clone(), false, 0xa);
    let b = stepper(ctx.second.clone(), true, 0xb);
    let (a, b) = (a.await??, b.await??);
    let mut fences = 0_u64;
    let mut history = 0_u64;
    for n in 0..INSTANCES {
        let record = ctx
            .store
            .instance(id(n))
            .await?
            .ok_or_else(|| anyhow!("instance {n}"))?;
        fences += record.fence - 1;
        history += ctx.store.attempts(id(n)).await?.len() as u64;
    }
    ensure!(
        fences == a + b,
        "fences moved {fences} times but {} commits won",
        a + b
    );
    ensure!(
        history == a + b,
        "{history} attempt rows for {} winning commits",
        a + b
    );
    println!("{:?}: replica a won {a}, replica b won {b}", ctx.label);
    Ok(())
}

pub async fn retire_is_refused_while_running_or_failed_instances_remain(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    ensure!(s.retire(DeploymentId(v2.0 + 1000)).await? == RetireOutcome::NotFound);
    create(s, id(1), v1).await?;
    create(s, id(2), v1).await?;
    create(s, id(3), v2).await?;
    ensure!(
        s.retire(v1).await?
            == RetireOutcome::Refused {
                blocking_instances: 2
            }
    );

    let mut done = commit(id(1), Some(1), v1);
    done.state.status = InstanceStatus::Completed;
    let mut failed = commit(id(2), Some(1), v1);
    failed.state.status = InstanceStatus::Failed;
    failed.state.failure_code = Some("RETRIES_EXHAUSTED".into());
    s.commit(vec![done, failed]).await?;
    // FAILED still holds its deployment: it is kept for inspection and repair.
    ensure!(
        s.retire(v1).await?
            == RetireOutcome::Refused {
                blocking_instances: 1
            }
    );
    ensure!(
        !s.deployment(v1)
            .await?
            .ok_or_else(|| anyhow!("v1"))?
            .retired
    );

    let mut cancelled = commit(id(2), Some(2), v1);
    cancelled.state.status = InstanceStatus::Cancelled;
    commit_one(s, cancelled).await?;
    ensure!(s.retire(v1).await? == RetireOutcome::Retired);
    ensure!(
        s.deployment(v1)
            .await?
            .ok_or_else(|| anyhow!("v1"))?
            .retired
    );
    ensure!(
        !s.deployment(v2)
            .await?
            .ok_or_else(|| anyhow!("v2"))?
            .retired
    );
    ensure!(
        s.retire(v2).await?
            == RetireOutcome::Refused {
                blocking_instances: 1
            }
    );
    Ok(())
}

pub async fn creation_on_a_retired_deployment_is_refused_and_writes_nothing(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let old = deploy(s, "old").await?;
    let live = deploy(s, "live").await?;
    ensure!(s.retire(old).await? == RetireOutcome::Retired);
    let outcomes = s
        .commit(vec![commit(id(1), None, old), commit(id(2), None, live)])
        .await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::DeploymentRetired,
                CommitOutcome::Applied { fence: 1 }
            ],
        "{outcomes:?}"
    );
    ensure!(
        s.instance(id(1)).await?.is_none(),
        "nothing of the refused creation"
    );
    ensure!(s.timers(id(1)).await?.is_empty());
    ensure!(
        s.instance(id(2)).await?.is_some(),
        "the rest of the batch applies"
    );
    Ok(())
}

/// A migration (an update that moves the instance to another deployment) onto a retired
/// deployment is refused in the commit itself, whatever the caller checked before.
pub async fn a_migration_onto_a_retired_deployment_is_refused_and_writes_nothing(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    let v3 = deploy(s, "v3").await?;
    commit_one(s, commit(id(1), None, v1)).await?;
    commit_one(s, commit(id(2), None, v1)).await?;
    ensure!(s.retire(v2).await? == RetireOutcome::Retired);
    let before = s.instance(id(1)).await?;
    let mut onto_retired = commit(id(1), Some(1), v2);
    onto_retired.state.snapshot = b"moved".to_vec();
    onto_retired.moves = true;
    let mut onto_live = commit(id(2), Some(1), v3);
    onto_live.moves = true;
    let outcomes = s.commit(vec![onto_retired, onto_live]).await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::DeploymentRetired,
                CommitOutcome::Applied { fence: 2 }
            ],
        "{outcomes:?}"
    );
    ensure!(
        s.instance(id(1)).await? == before,
        "the refused move wrote something"
    );
    ensure!(s.instance(id(2)).await?.map(|r| r.deployment) == Some(v3));
    Ok(())
}

/// A retirement through one connection pool and a creation through another, started
/// together: whichever order they serialise in, a retired deployment never ends up with
/// a running instance (R5).
pub async fn retirement_and_creation_racing_never_leave_an_instance_on_a_retired_deployment(
    ctx: Ctx,
) -> Result<()> {
    for round in 0..24u128 {
        let dep = deploy(&*ctx.store, &format!("race-{round}")).await?;
        let instance = id(100 + round);
        let (retired, created) = tokio::join!(
            ctx.store.retire(dep),
            commit_one(&*ctx.second, commit(instance, None, dep))
        );
        let (retired, created) = (retired?, created?);
        let exists = ctx.store.instance(instance).await?.is_some();
        let is_retired = ctx
            .store
            .deployment(dep)
            .await?
            .ok_or_else(|| anyhow!("deployment"))?
            .retired;
        match (&retired, &created) {
            (RetireOutcome::Retired, CommitOutcome::DeploymentRetired) => {
                ensure!(!exists && is_retired, "round {round}: retired first")
            }
            (RetireOutcome::Refused { .. }, CommitOutcome::Applied { fence: 1 }) => {
                ensure!(exists && !is_retired, "round {round}: created first")
            }
            other => anyhow::bail!("round {round}: impossible interleaving {other:?}"),
        }
    }
    Ok(())
}

pub async fn incidents_open_and_resolve(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let incident = |node: &str, code: &str| NewIncident {
        node: node.into(),
        code: code.into(),
        message: format!("{node} failed with {code}"),
    };
    let mut c = commit(id(1), None, dep);
    c.incidents.open = vec![incident("pay", "E1"), incident("ship", "E2")];
    commit_one(s, c).await?;
    let mut c = commit(id(2), None, dep);
    c.incidents.open = vec![incident("pay", "E3")];
    commit_one(s, c).await?;

    let all = s.incidents(None).await?;
    ensure!(
        all.len() == 3 && all.windows(2).all(|w| w[0].id < w[1].id),
        "{all:?}"
    );
    ensure!(all
        .iter()
        .all(|i| i.opened_at_ms == T0 && i.resolved_at_ms.is_none()));
    ensure!(all[0].message == "pay failed with E1");

    // Resolve on `pay` and open a fresh one there in the same step: the new one stays open.
    let mut c = commit(id(1), Some(1), dep);
    c.now_ms = T0 + 70;
    c.incidents.resolve_on = vec!["pay".into()];
    c.incidents.open = vec![incident("pay", "E4")];
    commit_one(s, c).await?;
    let mine = s.incidents(Some(id(1))).await?;
    let view: Vec<(&str, &str, Option<i64>)> = mine
        .iter()
        .map(|i| (i.node.as_str(), i.code.as_str(), i.resolved_at_ms))
        .collect();
    ensure!(
        view == vec![
            ("pay", "E1", Some(T0 + 70)),
            ("ship", "E2", None),
            ("pay", "E4", None)
        ],
        "{view:?}"
    );
    // The other instance's incident on the same node is untouched.
    let other = s.incidents(Some(id(2))).await?;
    ensure!(other.len() == 1 && other[0].resolved_at_ms.is_none());
    ensure!(s.incidents(Some(id(3))).await?.is_empty());
    Ok(())
}

pub fn attempt(instance: InstanceId, node: &str, n: u32) -> AttemptRecord {
    AttemptRecord {
        instance,
        node: node.into(),
        attempt: Attempt::new(n).expect("attempts are 1-based"),
        started_at_ms: T0 + i64::from(n) * 10,
        finished_at_ms: T0 + i64::from(n) * 10 + 3,
        outcome: if n < 3 {
            AttemptOutcome::Failed
        } else {
            AttemptOutcome::Ok
        },
        code: (n < 3).then(|| "HTTP_503".to_string()),
        message: (n < 3).then(|| format!("attempt {n}: upstream unavailable")),
        worker: (n == 2).then(|| "worker-7".to_string()),
    }
}

/// Audit rows land with the commit that carries them, with the fences it moved between;
/// a commit that loses its compare-and-swap writes none. Oldest first; `limit` keeps the
/// newest.
pub async fn audit_rows_are_written_with_their_commit_only(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    create(s, id(1), dep).await?;
    create(s, id(2), dep).await?;
    let entry = |action: &str| AuditEntry {
        actor: "ops@test".into(),
        action: action.into(),
        detail: format!("{action} detail"),
    };
    let mut c = commit(id(1), Some(1), dep);
    c.audit = vec![entry("resume")];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 2 });
    let mut stale = commit(id(1), Some(1), dep);
    stale.audit = vec![entry("lost")];
    ensure!(matches!(
        commit_one(s, stale).await?,
        CommitOutcome::Conflict { .. }
    ));
    let mut other = commit(id(2), Some(1), dep);
    other.now_ms = T0 + 5;
    other.audit = vec![entry("cancel")];
    commit_one(&*ctx.second, other).await?;

    let all = s.audit(None, 0).await?;
    let seen: Vec<_> = all
        .iter()
        .map(|a| (a.instance, a.action.as_str(), a.fence_before, a.fence_after))
        .collect();
    ensure!(
        seen == vec![(id(1), "resume", Some(1), 2), (id(2), "cancel", Some(1), 2)],
        "{seen:?}"
    );
    ensure!(all[0].actor == "ops@test" && all[0].detail == "resume detail");
    ensure!(all[0].at_ms == T0 && all[1].at_ms == T0 + 5);
    ensure!(all[0].id < all[1].id);
    let one = s.audit(Some(id(2)), 0).await?;
    ensure!(one.len() == 1 && one[0].action == "cancel", "{one:?}");
    let newest = s.audit(None, 1).await?;
    ensure!(
        newest.len() == 1 && newest[0].action == "cancel",
        "{newest:?}"
    );
    ensure!(s.audit(Some(id(3)), 0).await?.is_empty());
    Ok(())
}

pub async fn attempts_history_keeps_order(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.attempts = vec![attempt(id(1), "pay", 1)];
    commit_one(s, c).await?;
    let mut c = commit(id(1), Some(1), dep);
    c.attempts = vec![attempt(id(1), "pay", 2), attempt(id(1), "ship", 1)];
    commit_one(s, c).await?;
    let mut c = commit(id(1), Some(2), dep);
    c.attempts = vec![attempt(id(1), "pay", 3)];
    commit_one(s, c).await?;
    let mut other = commit(id(2), None, dep);
    other.attempts = vec![attempt(id(2), "pay", 1)];
    commit_one(s, other).await?;

    let history = s.attempts(id(1)).await?;
    ensure!(
        history
            == vec![
                attempt(id(1), "pay", 1),
                attempt(id(1), "pay", 2),
                attempt(id(1), "ship", 1),
                attempt(id(1), "pay", 3),
            ],
        "{history:?}"
    );
    ensure!(s.attempts(id(2)).await? == vec![attempt(id(2), "pay", 1)]);
    ensure!(s.attempts(id(3)).await?.is_empty());
    // Every outcome is stored and read back as itself.
    let mut c = commit(id(3), None, dep);
    c.attempts = AttemptOutcome::ALL
        .iter()
        .enumerate()
        .map(|(i, outcome)| AttemptRecord {
            outcome: *outcome,
            ..attempt(id(3), "all", i as u32 + 1)
        })
        .collect();
    let written = c.attempts.clone();
    commit_one(s, c).await?;
    let read = s.attempts(id(3)).await?;
    ensure!(read == written, "{read:?}");
    Ok(())
}

/// An instance that retries many times: its history reads back whole and in order while
/// it grows (a store may move older records elsewhere as it goes — SQLite moves a row's
/// history to `attempts` past 2 KiB), a lost compare-and-swap adds nothing, and a purge
/// counts every record.
pub async fn a_long_attempt_history_reads_whole_in_order_and_purges_whole(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let long = |n: u32| AttemptRecord {
        code: Some("HTTP_503".into()),
        message: Some(format!(
            "attempt {n}: {}",
            "upstream unavailable; ".repeat(4)
        )),
        outcome: AttemptOutcome::Failed,
        ..attempt(id(1), "pay", n)
    };
    let mut written = Vec::new();
    commit_one(s, commit(id(1), None, dep)).await?;
    commit_one(s, commit(id(2), None, dep)).await?;
    for n in 1..=90u32 {
        let mut c = commit(id(1), Some(u64::from(n)), dep);
        c.now_ms = T0 + i64::from(n);
        c.attempts = vec![long(n)];
        written.push(long(n));
        ensure!(
            commit_one(s, c).await?
                == CommitOutcome::Applied {
                    fence: u64::from(n) + 1
                }
        );
        // Another instance's history in between, and a stale commit that must add nothing.
        if n % 10 == 0 {
            let mut other = commit(id(2), Some(u64::from(n / 10)), dep);
            other.attempts = vec![attempt(id(2), "ship", n / 10)];
            commit_one(s, other).await?;
            let mut stale = commit(id(1), Some(1), dep);
            stale.attempts = vec![attempt(id(1), "lost", 1)];
            ensure!(matches!(
                commit_one(s, stale).await?,
                CommitOutcome::Conflict { .. }
            ));
            let read = s.attempts(id(1)).await?;
            ensure!(read == written, "after {n}: {} records read", read.len());
        }
    }
    ensure!(s.attempts(id(2)).await?.len() == 9);
    // Ended, then purged with everything it wrote.
    let mut end = with_status(id(1), Some(91), dep, InstanceStatus::Completed, T0 + 100);
    end.attempts = vec![attempt(id(1), "pay", 91)];
    commit_one(s, end).await?;
    ensure!(s.attempts(id(1)).await?.len() == 91);
    let out = s.purge_finished(purge(T0 + 1_000, 100)).await?;
    ensure!(out.instances == 1 && out.attempts == 91, "{out:?}");
    ensure!(s.attempts(id(1)).await?.is_empty());
    ensure!(s.attempts(id(2)).await?.len() == 9);
    Ok(())
}

pub async fn instances_filter_by_deployment_status_and_code(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    // Created out of id order so ordering by (created, id) is observable.
    let rows = [
        (5, v1, T0 + 2, InstanceStatus::Running, None),
        (4, v1, T0 + 1, InstanceStatus::Failed, Some("E_PAY")),
        (3, v2, T0 + 1, InstanceStatus::Failed, Some("E_SHIP")),
        (2, v2, T0, InstanceStatus::Completed, None),
        (1, v1, T0 + 1, InstanceStatus::Failed, Some("E_PAY")),
    ];
    let batch = rows
        .iter()
        .map(|(n, dep, at, status, code)| {
            let mut c = commit(id(*n), None, *dep);
            c.now_ms = *at;
            c.state.status = *status;
            c.state.failure_code = code.map(str::to_string);
            c
        })
        .collect();
    s.commit(batch).await?;

    let ids = |records: Vec<crate::InstanceRecord>| -> Vec<InstanceId> {
        records.into_iter().map(|r| r.id).collect()
    };
    let all = ids(s.instances(&InstanceFilter::default()).await?);
    ensure!(all == vec![id(2), id(1), id(3), id(4), id(5)], "{all:?}");
    let on_v1 = ids(s
        .instances(&InstanceFilter {
            deployment: Some(v1),
            ..Default::default()
        })
        .await?);
    ensure!(on_v1 == vec![id(1), id(4), id(5)], "{on_v1:?}");
    let failed = ids(s
        .instances(&InstanceFilter {
            status: Some(InstanceStatus::Failed),
            ..Default::default()
        })
        .await?);
    ensure!(failed == vec![id(1), id(3), id(4)], "{failed:?}");
    let pay = ids(s
        .instances(&InstanceFilter {
            failure_code: Some("E_PAY".into()),
            deployment: Some(v1),
            status: Some(InstanceStatus::Failed),
            ..Default::default()
        })
        .await?);
    ensure!(pay == vec![id(1), id(4)], "{pay:?}");
    let first_two = ids(s
        .instances(&InstanceFilter {
            limit: 2,
            ..Default::default()
        })
        .await?);
    ensure!(first_two == vec![id(2), id(1)], "{first_two:?}");
    // Keyset pages: each starts strictly after the previous page's last row, including
    // across rows that share a creation instant, and together they are the listing.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .instances(&InstanceFilter {
                after,
                limit: 2,
                ..Default::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some((last.created_at_ms, last.id));
        paged.extend(page.into_iter().map(|r| r.id));
        ensure!(paged.len() <= all.len(), "pages never end: {paged:?}");
    }
    ensure!(paged == all, "{paged:?}");
    let window = ids(s
        .instances(&InstanceFilter {
            created_from_ms: Some(T0 + 1),
            created_to_ms: Some(T0 + 2),
            ..Default::default()
        })
        .await?);
    ensure!(window == vec![id(1), id(3), id(4)], "{window:?}");
    let none = s
        .instances(&InstanceFilter {
            failure_code: Some("NOPE".into()),
            ..Default::default()
        })
        .await?;
    ensure!(none.is_empty());
    // A failure code on a row that is not FAILED (the store does not forbid it): a filter
    // by the code alone finds it among the failed ones, in order; a filter that also
    // names FAILED does not. A store may read each status apart and merge them.
    let mut kept = commit(id(6), None, v2);
    kept.now_ms = T0 + 1;
    kept.state.status = InstanceStatus::Cancelled;
    kept.state.failure_code = Some("E_PAY".into());
    commit_one(s, kept).await?;
    let pay_any = ids(s
        .instances(&InstanceFilter {
            failure_code: Some("E_PAY".into()),
            ..Default::default()
        })
        .await?);
    ensure!(pay_any == vec![id(1), id(4), id(6)], "{pay_any:?}");
    let pay_failed = ids(s
        .instances(&InstanceFilter {
            failure_code: Some("E_PAY".into()),
            status: Some(InstanceStatus::Failed),
            ..Default::default()
        })
        .await?);
    ensure!(pay_failed == vec![id(1), id(4)], "{pay_failed:?}");
    let on_v2 = ids(s
        .instances(&InstanceFilter {
            deployment: Some(v2),
            ..Default::default()
        })
        .await?);
    ensure!(on_v2 == vec![id(2), id(3), id(6)], "{on_v2:?}");
    let on_v2_after = ids(s
        .instances(&InstanceFilter {
            deployment: Some(v2),
            after: Some((T0 + 1, id(3))),
            ..Default::default()
        })
        .await?);
    ensure!(on_v2_after == vec![id(6)], "{on_v2_after:?}");
    Ok(())
}

pub async fn snapshot_bytes_round_trip_exactly(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let all_bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let mut noise = Vec::with_capacity(1 << 20);
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..(1 << 20) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise.push((x >> 24) as u8);
    }
    let cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0],
        vec![0; 64],
        vec![0xff, 0x00, 0xc1, 0x80, 0x00],
        b"not\0utf8\xff\xfe".to_vec(),
        all_bytes,
        noise,
    ];
    for (n, bytes) in cases.iter().enumerate() {
        let mut c = commit(id(n as u128), None, dep);
        c.state.snapshot = bytes.clone();
        commit_one(s, c).await?;
    }
    for (n, bytes) in cases.iter().enumerate() {
        let stored = s
            .instance(id(n as u128))
            .await?
            .ok_or_else(|| anyhow!("case {n}"))?;
        ensure!(
            &stored.snapshot == bytes,
            "snapshot case {n} changed in the store"
        );
    }
    let listed: BTreeSet<usize> = s
        .instances(&InstanceFilter::default())
        .await?
        .iter()
        .map(|r| r.snapshot.len())
        .collect();
    ensure!(listed == cases.iter().map(Vec::len).collect(), "{listed:?}");
    Ok(())
}

/// A creation whose key its deployment already has is refused, names the holder and
/// writes nothing; the same key on another deployment, and any number of instances
/// without a key, are fine. The key stays taken whatever the holder's status.
pub async fn duplicate_business_key_is_refused_and_writes_nothing(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    ensure!(
        commit_one(s, keyed(id(1), v1, "order-1")).await? == CommitOutcome::Applied { fence: 1 }
    );
    let mut dup = keyed(id(2), v1, "order-1");
    dup.timers.arm = vec![timer(id(2), "r:pay", T0 + 10, 1)];
    dup.incidents.open = vec![NewIncident {
        node: "pay".into(),
        code: "X".into(),
        message: "m".into(),
    }];
    dup.attempts = vec![attempt(id(2), "pay", 1)];
    dup.audit = vec![AuditEntry {
        actor: "ops@test".into(),
        action: "start".into(),
        detail: String::new(),
    }];
    let outcome = commit_one(&*ctx.second, dup).await?;
    ensure!(
        outcome == CommitOutcome::DuplicateBusinessKey { existing: id(1) },
        "{outcome:?}"
    );
    ensure!(
        s.instance(id(2)).await?.is_none(),
        "the refused creation wrote its row"
    );
    ensure!(s.timers(id(2)).await?.is_empty());
    ensure!(s.incidents(Some(id(2))).await?.is_empty());
    ensure!(s.attempts(id(2)).await?.is_empty());
    ensure!(s.audit(Some(id(2)), 0).await?.is_empty());

    ensure!(
        commit_one(s, keyed(id(3), v2, "order-1")).await? == CommitOutcome::Applied { fence: 1 }
    );
    create(s, id(4), v1).await?;
    create(s, id(5), v1).await?;

    let mut done = commit(id(1), Some(1), v1);
    done.state.status = InstanceStatus::Completed;
    ensure!(commit_one(s, done).await? == CommitOutcome::Applied { fence: 2 });
    let again = commit_one(s, keyed(id(6), v1, "order-1")).await?;
    ensure!(
        again == CommitOutcome::DuplicateBusinessKey { existing: id(1) },
        "a completed holder keeps its key: {again:?}"
    );
    // Creating an existing id is a lost CAS, whatever its key says.
    let same_id = commit_one(s, keyed(id(1), v1, "order-1")).await?;
    ensure!(
        same_id
            == CommitOutcome::Conflict {
                current_fence: Some(2)
            },
        "{same_id:?}"
    );
    Ok(())
}

/// The key is written by the creation only: updates that say another key, or none, leave
/// it, and every read (one instance, a listing, the second handle) carries it.
pub async fn business_key_is_kept_by_updates_and_read_back(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    commit_one(s, keyed(id(1), dep, "invoice-7 ü")).await?;
    create(s, id(2), dep).await?;
    let mut other = commit(id(1), Some(1), dep);
    other.state.business_key = Some("something-else".into());
    ensure!(commit_one(s, other).await? == CommitOutcome::Applied { fence: 2 });
    let none = commit(id(1), Some(2), dep);
    ensure!(commit_one(s, none).await? == CommitOutcome::Applied { fence: 3 });
    let mut late = commit(id(2), Some(1), dep);
    late.state.business_key = Some("late".into());
    ensure!(commit_one(s, late).await? == CommitOutcome::Applied { fence: 2 });

    let one = s
        .instance(id(1))
        .await?
        .ok_or_else(|| anyhow!("instance 1"))?;
    ensure!(
        one.business_key.as_deref() == Some("invoice-7 ü"),
        "{one:?}"
    );
    ensure!(ctx.second.instance(id(1)).await?.as_ref() == Some(&one));
    let two = s
        .instance(id(2))
        .await?
        .ok_or_else(|| anyhow!("instance 2"))?;
    ensure!(two.business_key.is_none(), "an update gave a key: {two:?}");
    let listed: Vec<Option<String>> = s
        .instances(&InstanceFilter::default())
        .await?
        .into_iter()
        .map(|r| r.business_key)
        .collect();
    ensure!(
        listed == vec![Some("invoice-7 ü".to_owned()), None],
        "{listed:?}"
    );
    // The key an update named is not taken.
    ensure!(
        commit_one(s, keyed(id(3), dep, "something-else")).await?
            == CommitOutcome::Applied { fence: 1 }
    );
    ensure!(commit_one(s, keyed(id(4), dep, "late")).await? == CommitOutcome::Applied { fence: 1 });
    Ok(())
}

/// Within one batch the first creation to claim a key wins and later ones are refused;
/// the rest of the batch applies. A creation refused for another reason claims nothing.
pub async fn repeated_business_key_in_a_batch_applies_the_first(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    let old = deploy(s, "old").await?;
    ensure!(s.retire(old).await? == RetireOutcome::Retired);
    create(s, id(9), v1).await?;
    let outcomes = s
        .commit(vec![
            keyed(id(1), v1, "k"),
            keyed(id(2), v1, "k"),
            keyed(id(3), v1, "l"),
            keyed(id(4), v2, "k"),
            keyed(id(5), v1, "k"),
            // Loses its CAS (the id exists): "m" stays free for the next one.
            keyed(id(9), v1, "m"),
            keyed(id(6), v1, "m"),
            // Refused as retired: "n" stays free.
            keyed(id(7), old, "n"),
            keyed(id(8), v1, "n"),
        ])
        .await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::Applied { fence: 1 },
                CommitOutcome::DuplicateBusinessKey { existing: id(1) },
                CommitOutcome::Applied { fence: 1 },
                CommitOutcome::Applied { fence: 1 },
                CommitOutcome::DuplicateBusinessKey { existing: id(1) },
                CommitOutcome::Conflict {
                    current_fence: Some(1)
                },
                CommitOutcome::Applied { fence: 1 },
                CommitOutcome::DeploymentRetired,
                CommitOutcome::Applied { fence: 1 },
            ],
        "{outcomes:?}"
    );
    ensure!(s.instance(id(2)).await?.is_none() && s.instance(id(5)).await?.is_none());
    let nine = s
        .instance(id(9))
        .await?
        .ok_or_else(|| anyhow!("instance 9"))?;
    ensure!(
        nine.business_key.is_none(),
        "a lost CAS wrote a key: {nine:?}"
    );
    Ok(())
}

pub async fn instances_filter_by_business_key(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    let mut later = keyed(id(1), v2, "order-1");
    later.now_ms = T0 + 5;
    s.commit(vec![
        later,
        keyed(id(2), v1, "order-1"),
        keyed(id(3), v1, "order-2"),
        commit(id(4), None, v1),
    ])
    .await?;
    let ids = |records: Vec<crate::InstanceRecord>| -> Vec<InstanceId> {
        records.into_iter().map(|r| r.id).collect()
    };
    let by_key = |key: &str, deployment: Option<DeploymentId>| InstanceFilter {
        business_key: Some(key.into()),
        deployment,
        ..Default::default()
    };
    let all = ids(s.instances(&by_key("order-1", None)).await?);
    ensure!(
        all == vec![id(2), id(1)],
        "oldest first across deployments: {all:?}"
    );
    let on_v2 = ids(s.instances(&by_key("order-1", Some(v2))).await?);
    ensure!(on_v2 == vec![id(1)], "{on_v2:?}");
    let two = ids(s.instances(&by_key("order-2", None)).await?);
    ensure!(two == vec![id(3)], "{two:?}");
    ensure!(s.instances(&by_key("order-2", Some(v2))).await?.is_empty());
    ensure!(
        s.instances(&by_key("order", None)).await?.is_empty(),
        "exact match only"
    );
    ensure!(
        s.instances(&by_key("ORDER-1", None)).await?.is_empty(),
        "case matters"
    );
    Ok(())
}

/// An update that moves an instance to another deployment (migration) keeps its key, so
/// it is refused where that deployment has the key already, and writes nothing; a move
/// to where the key is free takes the key along and frees it on the old deployment.
pub async fn moving_an_instance_onto_a_deployment_holding_its_key_is_refused(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    s.commit(vec![
        keyed(id(1), v1, "k"),
        keyed(id(2), v2, "k"),
        keyed(id(3), v1, "l"),
        commit(id(4), None, v1),
    ])
    .await?;
    let before = s.instance(id(1)).await?;
    let mut blocked = commit(id(1), Some(1), v2);
    blocked.state.snapshot = vec![0xee];
    blocked.timers.arm = vec![timer(id(1), "r:pay", T0 + 10, 1)];
    let outcome = commit_one(s, blocked).await?;
    ensure!(
        outcome == CommitOutcome::DuplicateBusinessKey { existing: id(2) },
        "{outcome:?}"
    );
    ensure!(
        s.instance(id(1)).await? == before,
        "the refused move changed the row"
    );
    ensure!(s.timers(id(1)).await?.is_empty());
    // A stale move is a lost CAS first.
    let stale = commit_one(s, commit(id(1), Some(7), v2)).await?;
    ensure!(
        stale
            == CommitOutcome::Conflict {
                current_fence: Some(1)
            },
        "{stale:?}"
    );

    ensure!(
        commit_one(s, commit(id(3), Some(1), v2)).await? == CommitOutcome::Applied { fence: 2 }
    );
    ensure!(
        commit_one(s, commit(id(4), Some(1), v2)).await? == CommitOutcome::Applied { fence: 2 }
    );
    let moved = s
        .instance(id(3))
        .await?
        .ok_or_else(|| anyhow!("instance 3"))?;
    ensure!(moved.deployment == v2 && moved.business_key.as_deref() == Some("l"));
    ensure!(commit_one(s, keyed(id(5), v1, "l")).await? == CommitOutcome::Applied { fence: 1 });
    let taken = commit_one(s, keyed(id(6), v2, "l")).await?;
    ensure!(
        taken == CommitOutcome::DuplicateBusinessKey { existing: id(3) },
        "{taken:?}"
    );
    Ok(())
}

/// Two handles (two pools on a database) create different instances with one key on one
/// deployment at once: exactly one wins, and the other is refused naming it.
pub async fn concurrent_creations_of_one_business_key_never_both_win(ctx: Ctx) -> Result<()> {
    let dep = deploy(&*ctx.store, "h1").await?;
    for round in 0..24u128 {
        let key = format!("race-{round}");
        let (a, b) = (id(100 + 2 * round), id(101 + 2 * round));
        let (first, second) = tokio::join!(
            commit_one(&*ctx.store, keyed(a, dep, &key)),
            commit_one(&*ctx.second, keyed(b, dep, &key))
        );
        let (first, second) = (first?, second?);
        let holders = ctx
            .store
            .instances(&InstanceFilter {
                business_key: Some(key.clone()),
                ..Default::default()
            })
            .await?;
        match (&first, &second) {
            (
                CommitOutcome::Applied { fence: 1 },
                CommitOutcome::DuplicateBusinessKey { existing },
            ) if *existing == a => {}
            (
                CommitOutcome::DuplicateBusinessKey { existing },
                CommitOutcome::Applied { fence: 1 },
            ) if *existing == b => {}
            other => anyhow::bail!("round {round}: impossible outcomes {other:?}"),
        }
        ensure!(
            holders.len() == 1,
            "round {round}: {} holders",
            holders.len()
        );
    }
    Ok(())
}

/// A commit of `instance` (created if `expected_fence` is `None`) leaving it in `status`
/// at `now_ms`.
pub fn with_status(
    instance: InstanceId,
    expected_fence: Option<u64>,
    deployment: DeploymentId,
    status: InstanceStatus,
    now_ms: i64,
) -> Commit {
    let mut c = commit(instance, expected_fence, deployment);
    c.state.status = status;
    c.state.failure_code = (status == InstanceStatus::Failed).then(|| "BOOM".to_owned());
    c.now_ms = now_ms;
    c
}

/// A purge of every deployment: ended before `ended_before_ms`, at most `limit`.
pub fn purge(ended_before_ms: i64, limit: u32) -> PurgeRequest {
    PurgeRequest {
        ended_before_ms,
        deployment: None,
        limit,
    }
}

/// Creates `instance` running at `T0` with two attempt rows, an incident, an audit row
/// and a timer, then (unless `status` is running) commits it into `status` at `at_ms`.
async fn lived(
    s: &dyn Store,
    instance: InstanceId,
    deployment: DeploymentId,
    status: InstanceStatus,
    at_ms: i64,
) -> Result<()> {
    let mut first = commit(instance, None, deployment);
    first.attempts = vec![attempt(instance, "pay", 1), attempt(instance, "pay", 2)];
    first.incidents.open = vec![NewIncident {
        node: "pay".into(),
        code: "HTTP_503".into(),
        message: "upstream unavailable".into(),
    }];
    first.audit = vec![AuditEntry {
        actor: "ops@test".into(),
        action: "resume".into(),
        detail: String::new(),
    }];
    first.timers.arm = vec![timer(instance, "r:pay", T0 + 1_000_000, 1)];
    first.outbox.emit = vec![outbox_request(&format!("lived-{instance}"), "call", 1)];
    ensure!(commit_one(s, first).await? == CommitOutcome::Applied { fence: 1 });
    if status != InstanceStatus::Running {
        let end = with_status(instance, Some(1), deployment, status, at_ms);
        ensure!(commit_one(s, end).await? == CommitOutcome::Applied { fence: 2 });
    }
    Ok(())
}

/// Whether `instance` is still there with all of what `lived` gave it.
async fn intact(s: &dyn Store, instance: InstanceId) -> Result<()> {
    ensure!(
        s.instance(instance).await?.is_some(),
        "{instance} was purged"
    );
    ensure!(
        s.attempts(instance).await?.len() == 2,
        "{instance} lost attempts"
    );
    ensure!(s.incidents(Some(instance)).await?.len() == 1);
    ensure!(s.audit(Some(instance), 0).await?.len() == 1);
    ensure!(s.timers(instance).await?.len() == 1);
    ensure!(
        s.outbox(instance).await?.len() == 1,
        "{instance} lost its outbox row"
    );
    Ok(())
}

/// Whether nothing of `instance` is left.
async fn gone(s: &dyn Store, instance: InstanceId) -> Result<()> {
    ensure!(s.instance(instance).await?.is_none(), "{instance} was kept");
    ensure!(
        s.attempts(instance).await?.is_empty(),
        "attempts of {instance}"
    );
    ensure!(s.incidents(Some(instance)).await?.is_empty());
    ensure!(s.audit(Some(instance), 0).await?.is_empty());
    ensure!(s.timers(instance).await?.is_empty(), "timers of {instance}");
    ensure!(s.outbox(instance).await?.is_empty(), "outbox of {instance}");
    ensure!(s.outbox_row(&format!("lived-{instance}")).await?.is_none());
    Ok(())
}

/// `ended_at_ms` is the instant of the commit that made the instance completed or
/// cancelled; a later commit (a stale timer's residue deleted after the end) moves
/// `updated_at_ms` but not the end. Running and FAILED instances have none.
pub async fn ended_at_is_set_by_the_ending_commit_and_kept(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let ended = |r: Option<crate::InstanceRecord>| r.map(|r| (r.ended_at_ms, r.updated_at_ms));
    create(s, id(1), dep).await?;
    ensure!(ended(s.instance(id(1)).await?) == Some((None, T0)));
    commit_one(
        s,
        with_status(id(1), Some(1), dep, InstanceStatus::Failed, T0 + 10),
    )
    .await?;
    ensure!(
        ended(s.instance(id(1)).await?) == Some((None, T0 + 10)),
        "FAILED has not ended"
    );
    commit_one(
        s,
        with_status(id(1), Some(2), dep, InstanceStatus::Running, T0 + 20),
    )
    .await?;
    commit_one(
        s,
        with_status(id(1), Some(3), dep, InstanceStatus::Completed, T0 + 30),
    )
    .await?;
    ensure!(ended(s.instance(id(1)).await?) == Some((Some(T0 + 30), T0 + 30)));
    commit_one(
        s,
        with_status(id(1), Some(4), dep, InstanceStatus::Completed, T0 + 90),
    )
    .await?;
    let after = ended(s.instance(id(1)).await?);
    ensure!(
        after == Some((Some(T0 + 30), T0 + 90)),
        "the end moved: {after:?}"
    );
    // Ended in its creation; cancelled from FAILED ends at the cancel.
    commit_one(
        s,
        with_status(id(2), None, dep, InstanceStatus::Completed, T0 + 5),
    )
    .await?;
    ensure!(ended(s.instance(id(2)).await?) == Some((Some(T0 + 5), T0 + 5)));
    commit_one(s, with_status(id(3), None, dep, InstanceStatus::Failed, T0)).await?;
    commit_one(
        s,
        with_status(id(3), Some(1), dep, InstanceStatus::Cancelled, T0 + 7),
    )
    .await?;
    ensure!(ended(s.instance(id(3)).await?) == Some((Some(T0 + 7), T0 + 7)));
    Ok(())
}

/// Only completed and cancelled instances that ended strictly before the cutoff go, and
/// everything of theirs with them (attempts, incidents, audit rows, timer residue); the
/// rest keeps every row. A purged instance's business key is free again.
pub async fn purge_takes_only_instances_ended_before_the_cutoff_with_their_rows(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let cutoff = T0 + 500;
    lived(s, id(1), dep, InstanceStatus::Completed, T0 + 10).await?;
    lived(s, id(2), dep, InstanceStatus::Cancelled, T0 + 20).await?;
    lived(s, id(3), dep, InstanceStatus::Completed, cutoff).await?;
    lived(s, id(4), dep, InstanceStatus::Completed, cutoff + 1_000).await?;
    lived(s, id(5), dep, InstanceStatus::Failed, T0 + 1).await?;
    lived(s, id(6), dep, InstanceStatus::Running, T0).await?;
    commit_one(s, keyed(id(7), dep, "order-7")).await?;
    commit_one(
        s,
        with_status(id(7), Some(1), dep, InstanceStatus::Completed, T0 + 30),
    )
    .await?;

    let out = s.purge_finished(purge(cutoff, 100)).await?;
    let expected = PurgeOutcome {
        instances: 3,
        attempts: 4,
        incidents: 2,
        audit: 2,
        timers: 2,
        subscriptions: 0,
        outbox: 2,
        journal: 0,
        keys: 0,
    };
    ensure!(out == expected, "{out:?}");
    gone(s, id(1)).await?;
    gone(s, id(2)).await?;
    ensure!(s.instance(id(7)).await?.is_none());
    for kept in [3, 4, 5, 6] {
        intact(s, id(kept)).await?;
    }
    // The second handle sees the same; a second purge finds nothing more.
    ensure!(ctx.second.instance(id(1)).await?.is_none());
    ensure!(s.purge_finished(purge(cutoff, 100)).await? == PurgeOutcome::default());
    ensure!(
        commit_one(s, keyed(id(8), dep, "order-7")).await? == CommitOutcome::Applied { fence: 1 }
    );
    Ok(())
}

/// Running and FAILED instances stay whatever the cutoff, even one past every instant.
pub async fn purge_never_touches_running_or_failed_instances_at_any_age(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    lived(s, id(1), dep, InstanceStatus::Failed, T0 - 1_000_000_000).await?;
    lived(s, id(2), dep, InstanceStatus::Running, T0).await?;
    lived(s, id(3), dep, InstanceStatus::Completed, T0 + 5).await?;
    // FAILED, then resumed: running again, still not ended.
    lived(s, id(4), dep, InstanceStatus::Failed, T0 + 1).await?;
    commit_one(
        s,
        with_status(id(4), Some(2), dep, InstanceStatus::Running, T0 + 2),
    )
    .await?;
    let out = s.purge_finished(purge(i64::MAX, 100)).await?;
    ensure!(out.instances == 1, "{out:?}");
    gone(s, id(3)).await?;
    for kept in [1, 2, 4] {
        intact(s, id(kept)).await?;
    }
    let failed = s
        .instance(id(1))
        .await?
        .ok_or_else(|| anyhow!("instance 1"))?;
    ensure!(
        failed.status == InstanceStatus::Failed && failed.failure_code.as_deref() == Some("BOOM")
    );
    Ok(())
}

/// At most `limit` instances per call, oldest end first; a short batch means done; a
/// limit of 0 purges nothing.
pub async fn purge_honours_its_limit_oldest_end_first(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    // Ended in the reverse order of their ids, so "oldest first" is not "lowest id".
    for n in 1..=5u128 {
        let end = T0 + 100 - n as i64;
        s.commit(vec![with_status(
            id(n),
            None,
            dep,
            InstanceStatus::Completed,
            end,
        )])
        .await?;
    }
    ensure!(s.purge_finished(purge(T0 + 1_000, 0)).await? == PurgeOutcome::default());
    let first = s.purge_finished(purge(T0 + 1_000, 2)).await?;
    ensure!(first.instances == 2, "{first:?}");
    ensure!(s.instance(id(5)).await?.is_none() && s.instance(id(4)).await?.is_none());
    ensure!(s.instance(id(3)).await?.is_some());
    ensure!(s.purge_finished(purge(T0 + 1_000, 2)).await?.instances == 2);
    ensure!(
        s.purge_finished(purge(T0 + 1_000, 2)).await?.instances == 1,
        "the short batch"
    );
    ensure!(s.purge_finished(purge(T0 + 1_000, 2)).await?.instances == 0);
    Ok(())
}

/// A deployment filter purges that deployment's instances only.
pub async fn purge_filters_by_deployment(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy(s, "v1").await?;
    let v2 = deploy(s, "v2").await?;
    lived(s, id(1), v1, InstanceStatus::Completed, T0 + 1).await?;
    lived(s, id(2), v2, InstanceStatus::Completed, T0 + 1).await?;
    lived(s, id(3), v1, InstanceStatus::Cancelled, T0 + 2).await?;
    let only_v1 = PurgeRequest {
        deployment: Some(v1),
        ..purge(T0 + 100, 100)
    };
    ensure!(s.purge_finished(only_v1).await?.instances == 2);
    gone(s, id(1)).await?;
    gone(s, id(3)).await?;
    intact(s, id(2)).await?;
    let unknown = PurgeRequest {
        deployment: Some(DeploymentId(v2.0 + 1_000)),
        ..purge(T0 + 100, 100)
    };
    ensure!(s.purge_finished(unknown).await? == PurgeOutcome::default());
    Ok(())
}

/// Two handles (two replicas' pools) purging one backlog at once: every instance goes
/// exactly once, and nobody fails.
pub async fn concurrent_purges_take_each_instance_once(ctx: Ctx) -> Result<()> {
    let dep = deploy(&*ctx.store, "h1").await?;
    let batch: Vec<Commit> = (1..=60u128)
        .map(|n| with_status(id(n), None, dep, InstanceStatus::Completed, T0 + n as i64))
        .collect();
    ctx.store.commit(batch).await?;
    lived(&*ctx.store, id(100), dep, InstanceStatus::Running, T0).await?;
    let drain = |store: Arc<dyn Store>| async move {
        let mut total = 0;
        loop {
            let out = store.purge_finished(purge(T0 + 1_000, 7)).await?;
            total += out.instances;
            if out.instances == 0 {
                return Ok::<u64, StoreError>(total);
            }
        }
    };
    let (a, b) = tokio::join!(drain(ctx.store.clone()), drain(ctx.second.clone()));
    let (a, b) = (a?, b?);
    ensure!(a + b == 60, "purged {a} + {b}");
    intact(&*ctx.store, id(100)).await?;
    Ok(())
}

fn subscribe(node: &str, message: &str, key: &str) -> NewSubscription {
    NewSubscription {
        node: node.to_owned(),
        message: message.to_owned(),
        key: key.to_owned(),
    }
}

/// `(instance, node)` of each subscription found.
async fn subscribers(s: &dyn Store, message: &str, key: &str) -> Result<Vec<(InstanceId, String)>> {
    Ok(s.subscriptions(message, key, 0)
        .await?
        .into_iter()
        .map(|r| (r.instance, r.node))
        .collect())
}

pub async fn subscriptions_open_close_and_are_found_by_message_and_key(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "sub").await?;
    // Two instances wait for `paid` under the same key, one under another key, one for
    // another message under the same key; opened at different instants.
    for (n, at, node, message, key) in [
        (1, T0 + 5, "wait", "paid", "order-1"),
        (2, T0 + 1, "wait", "paid", "order-1"),
        (3, T0, "wait", "paid", "order-2"),
        (4, T0, "wait", "shipped", "order-1"),
    ] {
        let mut c = commit(id(n), None, dep);
        c.now_ms = at;
        c.subscriptions.open.push(subscribe(node, message, key));
        ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 1 });
    }
    let found = s.subscriptions("paid", "order-1", 0).await?;
    ensure!(
        found.iter().map(|r| r.instance).collect::<Vec<_>>() == vec![id(2), id(1)],
        "oldest first: {found:?}"
    );
    ensure!(found[0].message == "paid" && found[0].key == "order-1");
    ensure!(found[0].node == "wait" && found[0].opened_at_ms == T0 + 1);
    ensure!(subscribers(s, "paid", "order-2").await? == vec![(id(3), "wait".into())]);
    ensure!(subscribers(s, "paid", "order-3").await?.is_empty());
    ensure!(
        subscribers(s, "PAID", "order-1").await?.is_empty(),
        "names are exact"
    );
    let one = s.subscriptions("paid", "order-1", 1).await?;
    ensure!(
        one.len() == 1 && one[0].instance == id(2),
        "the limit: {one:?}"
    );

    // A step that closes one node and opens another; one that re-opens a node under a
    // new key (close and open of the same node in one commit keeps the open).
    let mut step = commit(id(2), Some(1), dep);
    step.now_ms = T0 + 10;
    step.subscriptions.close.push("wait".into());
    step.subscriptions
        .open
        .push(subscribe("again", "paid", "order-1"));
    ensure!(commit_one(s, step).await? == CommitOutcome::Applied { fence: 2 });
    let mut step = commit(id(3), Some(1), dep);
    step.now_ms = T0 + 11;
    step.subscriptions.close.push("wait".into());
    step.subscriptions
        .open
        .push(subscribe("wait", "paid", "order-9"));
    ensure!(commit_one(s, step).await? == CommitOutcome::Applied { fence: 2 });
    ensure!(
        subscribers(s, "paid", "order-1").await?
            == vec![(id(1), "wait".into()), (id(2), "again".into())],
        "re-opened later, so after instance 1"
    );
    ensure!(subscribers(s, "paid", "order-2").await?.is_empty());
    ensure!(subscribers(s, "paid", "order-9").await? == vec![(id(3), "wait".into())]);
    // Closing a node without a subscription is a no-op.
    let mut step = commit(id(4), Some(1), dep);
    step.subscriptions.close.push("elsewhere".into());
    ensure!(commit_one(s, step).await? == CommitOutcome::Applied { fence: 2 });
    ensure!(subscribers(s, "shipped", "order-1").await? == vec![(id(4), "wait".into())]);
    let of_two = ctx.second.instance_subscriptions(id(2)).await?;
    ensure!(
        of_two.len() == 1 && of_two[0].node == "again" && of_two[0].opened_at_ms == T0 + 10,
        "the second handle sees them: {of_two:?}"
    );
    ensure!(s.instance_subscriptions(id(9)).await?.is_empty());
    Ok(())
}

/// A signal's broadcast walks every subscription of a name under the empty key, page by
/// page: each row once, in `(opened_at_ms, instance, node)` order, the rows that stay
/// open behind the cursor not read again, and nothing of other names or keys.
pub async fn subscriptions_are_walked_page_by_page_past_a_cursor(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "walk").await?;
    // Seven waits for `halt` (two instants tie; instance 3 waits at two nodes), one for
    // another signal, one message under a key.
    for (n, at, nodes, name, key) in [
        (1, T0 + 2, vec!["a"], "halt", ""),
        (2, T0 + 1, vec!["a"], "halt", ""),
        (3, T0 + 1, vec!["b", "a"], "halt", ""),
        (4, T0 + 3, vec!["a"], "halt", ""),
        (5, T0, vec!["a"], "halt", ""),
        (6, T0 + 4, vec!["a"], "halt", ""),
        (7, T0, vec!["a"], "resume", ""),
        (8, T0, vec!["a"], "halt", "k-1"),
    ] {
        let mut c = commit(id(n), None, dep);
        c.now_ms = at;
        for node in nodes {
            c.subscriptions.open.push(subscribe(node, name, key));
        }
        ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 1 });
    }
    let mut walked = Vec::new();
    let mut page = s.subscriptions("halt", "", 2).await?;
    while let Some(last) = page.last().cloned() {
        ensure!(page.len() <= 2, "a page holds at most its limit: {page:?}");
        walked.extend(page.iter().map(|r| (r.instance, r.node.clone())));
        page = ctx.second.subscriptions_after("halt", "", &last, 2).await?;
    }
    let want: Vec<(InstanceId, String)> = [
        (5, "a"),
        (2, "a"),
        (3, "a"),
        (3, "b"),
        (1, "a"),
        (4, "a"),
        (6, "a"),
    ]
    .into_iter()
    .map(|(n, node)| (id(n), node.to_owned()))
    .collect();
    ensure!(walked == want, "walked {walked:?}");
    // Past the last row there is nothing; a cursor of another name finds this name's
    // rows after it by the same order.
    let last = s.subscriptions("halt", "", 0).await?.pop().expect("rows");
    ensure!(s
        .subscriptions_after("halt", "", &last, 0)
        .await?
        .is_empty());
    Ok(())
}

pub async fn subscriptions_follow_the_fence_and_are_purged_with_their_instance(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "sub-fence").await?;
    let mut c = commit(id(1), None, dep);
    c.subscriptions.open.push(subscribe("wait", "paid", "k"));
    commit_one(s, c).await?;
    // A commit that loses its compare-and-swap writes none of its subscription rows.
    let mut lost = commit(id(1), Some(7), dep);
    lost.subscriptions.close.push("wait".into());
    lost.subscriptions
        .open
        .push(subscribe("other", "paid", "k2"));
    ensure!(matches!(
        commit_one(s, lost).await?,
        CommitOutcome::Conflict { .. }
    ));
    ensure!(subscribers(s, "paid", "k").await? == vec![(id(1), "wait".into())]);
    ensure!(subscribers(s, "paid", "k2").await?.is_empty());
    // An instance that ends with a row left (residue) has it purged with it.
    let mut end = commit(id(1), Some(1), dep);
    end.state.status = InstanceStatus::Completed;
    ensure!(commit_one(s, end).await? == CommitOutcome::Applied { fence: 2 });
    let out = s.purge_finished(purge(T0 + 1, 10)).await?;
    ensure!(out.instances == 1 && out.subscriptions == 1, "{out:?}");
    ensure!(subscribers(s, "paid", "k").await?.is_empty());
    ensure!(s.instance_subscriptions(id(1)).await?.is_empty());
    Ok(())
}

pub async fn instances_filter_by_node_and_end(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "node-end").await?;
    // 1: an open incident at `pay`; 2: a resolved incident at `pay` and a retry park at
    // `ship`; 3: a `q:timeout` window of `pay`; 4: a subscription at `pay`; 5: a timer
    // of another kind named after `pay` (a boundary), which does not count; 6, 7: ended.
    let mut c1 = commit(id(1), None, dep);
    c1.state.status = InstanceStatus::Failed;
    c1.incidents.open.push(NewIncident {
        node: "pay".into(),
        code: "E".into(),
        message: "m".into(),
    });
    let mut c2 = commit(id(2), None, dep);
    c2.incidents.open.push(NewIncident {
        node: "pay".into(),
        code: "E".into(),
        message: "m".into(),
    });
    c2.timers.arm.push(timer(id(2), "r:ship", T0 + 100, 1));
    let mut c3 = commit(id(3), None, dep);
    c3.timers.arm.push(timer(id(3), "t:pay", T0 + 100, 1));
    let mut c4 = commit(id(4), None, dep);
    c4.subscriptions.open.push(subscribe("pay", "paid", "k"));
    let mut c5 = commit(id(5), None, dep);
    c5.timers.arm.push(timer(id(5), "b:pay", T0 + 100, 1));
    s.commit(vec![c1, c2, c3, c4, c5]).await?;
    let mut resolve = commit(id(2), Some(1), dep);
    resolve.incidents.resolve_on.push("pay".into());
    ensure!(commit_one(s, resolve).await? == CommitOutcome::Applied { fence: 2 });
    for (n, status, at) in [
        (6, InstanceStatus::Completed, T0 + 10),
        (7, InstanceStatus::Cancelled, T0 + 20),
    ] {
        create(s, id(n), dep).await?;
        let end = with_status(id(n), Some(1), dep, status, at);
        ensure!(commit_one(s, end).await? == CommitOutcome::Applied { fence: 2 });
    }

    let ids = |records: Vec<crate::InstanceRecord>| -> Vec<InstanceId> {
        records.into_iter().map(|r| r.id).collect()
    };
    let at = |node: &str| InstanceFilter {
        node: Some(node.to_owned()),
        ..Default::default()
    };
    let at_pay = ids(s.instances(&at("pay")).await?);
    ensure!(at_pay == vec![id(1), id(3), id(4)], "{at_pay:?}");
    ensure!(ids(s.instances(&at("ship")).await?) == vec![id(2)]);
    ensure!(ids(s.instances(&at("nowhere")).await?).is_empty());
    let failed_at_pay = ids(s
        .instances(&InstanceFilter {
            status: Some(InstanceStatus::Failed),
            ..at("pay")
        })
        .await?);
    ensure!(failed_at_pay == vec![id(1)], "{failed_at_pay:?}");

    let ended = |from: Option<i64>, to: Option<i64>| InstanceFilter {
        ended_from_ms: from,
        ended_to_ms: to,
        ..Default::default()
    };
    let any_end = ids(s.instances(&ended(Some(i64::MIN), None)).await?);
    ensure!(
        any_end == vec![id(6), id(7)],
        "only ended ones: {any_end:?}"
    );
    let early = ids(s.instances(&ended(None, Some(T0 + 20))).await?);
    ensure!(
        early == vec![id(6)],
        "the upper bound is exclusive: {early:?}"
    );
    let late = ids(s.instances(&ended(Some(T0 + 20), None)).await?);
    ensure!(
        late == vec![id(7)],
        "the lower bound is inclusive: {late:?}"
    );
    ensure!(ids(s.instances(&ended(Some(T0 + 21), Some(T0 + 30))).await?).is_empty());
    Ok(())
}

pub async fn instance_counts_cover_every_status(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let zero: Vec<(InstanceStatus, u64)> = InstanceStatus::ALL.iter().map(|s| (*s, 0)).collect();
    ensure!(
        s.instance_counts(None).await? == zero,
        "an empty store lists zeros"
    );
    let dep = deploy(s, "counts").await?;
    for (n, status) in [
        (1, InstanceStatus::Running),
        (2, InstanceStatus::Running),
        (3, InstanceStatus::Failed),
        (4, InstanceStatus::Completed),
        (5, InstanceStatus::Running),
    ] {
        lived(s, id(n), dep, status, T0 + n as i64).await?;
    }
    let other = deploy(s, "counts-other").await?;
    lived(s, id(9), other, InstanceStatus::Cancelled, T0 + 9).await?;
    let of_other = s.instance_counts(Some(other)).await?;
    ensure!(
        of_other
            == vec![
                (InstanceStatus::Running, 0),
                (InstanceStatus::Completed, 0),
                (InstanceStatus::Failed, 0),
                (InstanceStatus::Cancelled, 1),
            ],
        "{of_other:?}"
    );
    let counts = ctx.second.instance_counts(Some(dep)).await?;
    let expected = vec![
        (InstanceStatus::Running, 3),
        (InstanceStatus::Completed, 1),
        (InstanceStatus::Failed, 1),
        (InstanceStatus::Cancelled, 0),
    ];
    ensure!(counts == expected, "{counts:?}");
    let all = s.instance_counts(None).await?;
    ensure!(
        all[3] == (InstanceStatus::Cancelled, 1) && all[0].1 == 3,
        "{all:?}"
    );
    Ok(())
}

pub async fn open_incidents_move_with_their_node_resolved_ones_stay(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "moves").await?;
    let incident = |node: &str| NewIncident {
        node: node.to_owned(),
        code: format!("E_{node}"),
        message: "m".into(),
    };
    let mut c = commit(id(1), None, dep);
    c.incidents.open = vec![incident("a"), incident("b"), incident("old")];
    commit_one(s, c).await?;
    let mut resolve = commit(id(1), Some(1), dep);
    resolve.incidents.resolve_on.push("old".into());
    commit_one(s, resolve).await?;
    let mut other = commit(id(2), None, dep);
    other.incidents.open = vec![incident("a")];
    commit_one(s, other).await?;
    // A migration renaming a → b and b → c at once, and `old` (resolved) → `new`.
    let mut moved = commit(id(1), Some(2), dep);
    moved.now_ms = T0 + 7;
    moved.incidents.moved = vec![
        ("a".into(), "b".into()),
        ("b".into(), "c".into()),
        ("old".into(), "new".into()),
    ];
    ensure!(commit_one(s, moved).await? == CommitOutcome::Applied { fence: 3 });
    let mine = ctx.second.incidents(Some(id(1))).await?;
    let by_code: Vec<(&str, &str, bool)> = mine
        .iter()
        .map(|i| (i.code.as_str(), i.node.as_str(), i.resolved_at_ms.is_some()))
        .collect();
    ensure!(
        by_code
            == vec![
                ("E_a", "b", false),
                ("E_b", "c", false),
                ("E_old", "old", true)
            ],
        "each row by the node it had, the resolved one left: {by_code:?}"
    );
    ensure!(
        mine.iter().all(|i| i.opened_at_ms == T0),
        "the instants stay"
    );
    let theirs = s.incidents(Some(id(2))).await?;
    ensure!(
        theirs.len() == 1 && theirs[0].node == "a",
        "other instances untouched"
    );
    Ok(())
}

pub async fn latest_incidents_are_the_newest_bounded_and_optionally_open(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "latest").await?;
    for n in 1..=5u128 {
        let mut c = commit(id(n), None, dep);
        c.incidents.open = vec![NewIncident {
            node: format!("n{n}"),
            code: "E".into(),
            message: "m".into(),
        }];
        commit_one(s, c).await?;
    }
    // The newest one (instance 5) and instance 3's are resolved.
    for n in [3u128, 5] {
        let mut r = commit(id(n), Some(1), dep);
        r.incidents.resolve_on.push(format!("n{n}"));
        commit_one(s, r).await?;
    }
    let nodes = |rows: Vec<crate::IncidentRecord>| -> Vec<String> {
        rows.into_iter().map(|i| i.node).collect()
    };
    ensure!(nodes(s.latest_incidents(2, false).await?) == ["n5", "n4"]);
    ensure!(nodes(ctx.second.latest_incidents(2, true).await?) == ["n4", "n2"]);
    ensure!(nodes(s.latest_incidents(0, true).await?) == ["n4", "n2", "n1"]);
    ensure!(s.latest_incidents(0, false).await?.len() == 5);
    Ok(())
}

// ----- pull tasks (P1) -------------------------------------------------------------------

/// A pull-task row of `instance` at `node` on `topic`, offered (no lock) at `at_ms`.
pub fn pull_row(instance: InstanceId, node: &str, topic: &str, at_ms: i64) -> PullTaskRecord {
    PullTaskRecord {
        instance,
        node: node.into(),
        topic: topic.into(),
        attempt: Attempt::FIRST,
        worker: None,
        lock_until_ms: None,
        offered_at_ms: at_ms,
    }
}

fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Offered rows are found by topic; a lock (an upsert with a worker) hides a row from
/// fetches and keeps it listed; a withdrawal deletes it; a commit that loses its
/// compare-and-swap writes no row.
pub async fn pull_tasks_are_offered_locked_and_withdrawn_with_their_commit(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.pull.offer = vec![pull_row(id(1), "work", "t", T0)];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 1 });
    let query = topics(&["t"]);
    let q = PullQuery {
        topics: &query,
        limit: 10,
    };
    let found = ctx.second.offered_pull_tasks(q).await?;
    ensure!(found == vec![pull_row(id(1), "work", "t", T0)], "{found:?}");
    // A loser writes nothing.
    let mut lost = commit(id(1), Some(7), dep);
    lost.pull.withdraw = vec!["work".into()];
    ensure!(matches!(
        commit_one(s, lost).await?,
        CommitOutcome::Conflict { .. }
    ));
    ensure!(s.offered_pull_tasks(q).await?.len() == 1);
    // Locked: gone from fetches, still listed with its lock.
    let locked = PullTaskRecord {
        worker: Some("w1".into()),
        lock_until_ms: Some(T0 + 1_000),
        offered_at_ms: T0 + 1,
        attempt: Attempt::new(2).expect("1-based"),
        ..pull_row(id(1), "work", "t", T0)
    };
    let mut c = commit(id(1), Some(1), dep);
    c.pull.offer = vec![locked.clone()];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 2 });
    ensure!(s.offered_pull_tasks(q).await?.is_empty());
    let listed = s.pull_tasks(id(1)).await?;
    ensure!(listed == vec![locked], "{listed:?}");
    // Unlocked again, then withdrawn and offered in one commit: offered.
    let mut c = commit(id(1), Some(2), dep);
    c.pull.withdraw = vec!["work".into()];
    c.pull.offer = vec![pull_row(id(1), "work", "t", T0 + 2)];
    commit_one(s, c).await?;
    ensure!(s.offered_pull_tasks(q).await? == vec![pull_row(id(1), "work", "t", T0 + 2)]);
    // Withdrawn: gone everywhere; withdrawing a missing row is no error.
    let mut c = commit(id(1), Some(3), dep);
    c.pull.withdraw = vec!["work".into(), "never".into()];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 4 });
    ensure!(s.offered_pull_tasks(q).await?.is_empty());
    ensure!(s.pull_tasks(id(1)).await?.is_empty());
    Ok(())
}

/// A fetch sees only its topics, oldest offer first, never more than its limit, and
/// nothing locked.
pub async fn offered_pull_tasks_filter_by_topic_oldest_first_and_honour_the_limit(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    for (n, topic, at) in [(1, "a", 30), (2, "b", 10), (3, "a", 20), (4, "c", 5)] {
        let mut c = commit(id(n), None, dep);
        c.now_ms = T0 + at;
        c.pull.offer = vec![pull_row(id(n), "work", topic, T0 + at)];
        commit_one(s, c).await?;
    }
    // Two rows of one instance.
    let mut c = commit(id(5), None, dep);
    c.pull.offer = vec![
        pull_row(id(5), "x", "a", T0 + 25),
        PullTaskRecord {
            worker: Some("w".into()),
            lock_until_ms: Some(T0 + 99),
            ..pull_row(id(5), "y", "a", T0 + 1)
        },
    ];
    commit_one(s, c).await?;
    let seen = |rows: Vec<PullTaskRecord>| -> Vec<(InstanceId, String)> {
        rows.into_iter().map(|r| (r.instance, r.node)).collect()
    };
    let ab = topics(&["a", "b"]);
    let all = s
        .offered_pull_tasks(PullQuery {
            topics: &ab,
            limit: 10,
        })
        .await?;
    let expected = vec![
        (id(2), "work".to_string()),
        (id(3), "work".to_string()),
        (id(5), "x".to_string()),
        (id(1), "work".to_string()),
    ];
    ensure!(seen(all) == expected, "oldest first, topics a and b");
    let two = s
        .offered_pull_tasks(PullQuery {
            topics: &ab,
            limit: 2,
        })
        .await?;
    ensure!(seen(two) == expected[..2].to_vec(), "the limit");
    let none = topics(&["zzz"]);
    ensure!(s
        .offered_pull_tasks(PullQuery {
            topics: &none,
            limit: 10,
        })
        .await?
        .is_empty());
    ensure!(s
        .offered_pull_tasks(PullQuery {
            topics: &ab,
            limit: 0,
        })
        .await?
        .is_empty());
    Ok(())
}

/// Pull rows left on an ended instance are residue; the purge takes them along.
pub async fn pull_rows_go_with_a_purged_instance(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.pull.offer = vec![pull_row(id(1), "work", "t", T0)];
    commit_one(s, c).await?;
    let mut end = commit(id(1), Some(1), dep);
    end.state.status = InstanceStatus::Completed;
    commit_one(s, end).await?;
    let out = s.purge_finished(purge(T0 + 1, 10)).await?;
    ensure!(out.instances == 1, "{out:?}");
    ensure!(s.pull_tasks(id(1)).await?.is_empty());
    let t = topics(&["t"]);
    ensure!(s
        .offered_pull_tasks(PullQuery {
            topics: &t,
            limit: 10,
        })
        .await?
        .is_empty());
    Ok(())
}

/// A request of `node`'s attempt `attempt` to channel `crm`, keyed `key`.
pub fn outbox_request(key: &str, node: &str, attempt: u32) -> NewOutboxRow {
    NewOutboxRow {
        key: key.into(),
        node: node.into(),
        channel: "crm".into(),
        attempt: Attempt::new(attempt).expect("1-based"),
        call_id: format!("call-{node}"),
        body: format!(r#"{{"key":"{key}"}}"#),
    }
}

/// The row `outbox_request(key, node, attempt)` is once `instance` commits it at `at_ms`:
/// pending, due at once, never tried.
pub fn pending_row(
    instance: InstanceId,
    key: &str,
    node: &str,
    attempt: u32,
    at_ms: i64,
) -> OutboxRecord {
    let request = outbox_request(key, node, attempt);
    OutboxRecord {
        key: request.key,
        instance,
        node: request.node,
        channel: request.channel,
        attempt: request.attempt,
        call_id: request.call_id,
        body: request.body,
        created_at_ms: at_ms,
        state: OutboxState::Pending,
        deliveries: 0,
        due_at_ms: at_ms,
        last_error: None,
    }
}

/// Commits a step of `instance` at `at_ms` (its creation when `fence` is `None`) that
/// emits `rows`; it must apply.
async fn emit_at(
    s: &dyn Store,
    instance: InstanceId,
    fence: Option<u64>,
    deployment: DeploymentId,
    at_ms: i64,
    rows: Vec<NewOutboxRow>,
) -> Result<()> {
    let mut c = commit(instance, fence, deployment);
    c.now_ms = at_ms;
    c.outbox.emit = rows;
    let outcome = commit_one(s, c).await?;
    ensure!(
        matches!(outcome, CommitOutcome::Applied { .. }),
        "emit: {outcome:?}"
    );
    Ok(())
}

/// Commits a step of `instance` that withdraws the rows of `nodes`; it must apply.
async fn withdraw(
    s: &dyn Store,
    instance: InstanceId,
    fence: u64,
    deployment: DeploymentId,
    nodes: &[&str],
) -> Result<()> {
    let mut c = commit(instance, Some(fence), deployment);
    c.outbox.withdraw = nodes.iter().map(|n| n.to_string()).collect();
    let outcome = commit_one(s, c).await?;
    ensure!(
        outcome == CommitOutcome::Applied { fence: fence + 1 },
        "withdraw: {outcome:?}"
    );
    Ok(())
}

fn keys(rows: &[OutboxRecord]) -> Vec<String> {
    rows.iter().map(|r| r.key.clone()).collect()
}

/// The keys of the rows one outbox claim leased.
async fn claim_keys(
    s: &dyn Store,
    now_ms: i64,
    lease_ms: i64,
    owner: &str,
    limit: u32,
) -> Result<Vec<String>> {
    Ok(keys(
        &s.claim_due_outbox(poll(now_ms, lease_ms, owner, limit))
            .await?,
    ))
}

async fn row(s: &dyn Store, key: &str) -> Result<OutboxRecord> {
    s.outbox_row(key)
        .await?
        .ok_or_else(|| anyhow!("no outbox row {key:?}"))
}

fn failed(error: &str, retry_at_ms: i64) -> DeliveryRecord {
    DeliveryRecord::Failed {
        error: error.into(),
        retry_at_ms,
    }
}

fn poisoned(error: &str) -> DeliveryRecord {
    DeliveryRecord::Poisoned {
        error: error.into(),
    }
}

/// C1: a commit writes its requests as pending rows due at its instant, in its own
/// transaction; a commit that is not applied (lost compare-and-swap, an existing id, a
/// retired deployment, the loser of a batch) writes and withdraws none.
pub async fn outbox_rows_are_emitted_with_their_commit_only(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    emit_at(
        s,
        id(1),
        None,
        dep,
        T0 + 5,
        vec![outbox_request("k1", "call", 1)],
    )
    .await?;
    let expected = pending_row(id(1), "k1", "call", 1, T0 + 5);
    let seen = ctx.second.outbox_row("k1").await?;
    ensure!(seen.as_ref() == Some(&expected), "{seen:?}");
    ensure!(s.outbox(id(1)).await? == vec![expected.clone()]);

    let mut lost = commit(id(1), Some(7), dep);
    lost.outbox.emit = vec![outbox_request("k2", "call", 2)];
    lost.outbox.withdraw = vec!["call".into()];
    ensure!(matches!(
        commit_one(s, lost).await?,
        CommitOutcome::Conflict { .. }
    ));
    let mut exists = commit(id(1), None, dep);
    exists.outbox.emit = vec![outbox_request("k3", "call", 1)];
    ensure!(matches!(
        commit_one(s, exists).await?,
        CommitOutcome::Conflict { .. }
    ));
    let old = deploy(s, "h-retired").await?;
    ensure!(s.retire(old).await? == RetireOutcome::Retired);
    let mut on_retired = commit(id(9), None, old);
    on_retired.outbox.emit = vec![outbox_request("k4", "call", 1)];
    ensure!(commit_one(s, on_retired).await? == CommitOutcome::DeploymentRetired);
    for key in ["k2", "k3", "k4"] {
        ensure!(
            s.outbox_row(key).await?.is_none(),
            "a refused commit wrote {key}"
        );
    }
    ensure!(
        s.outbox(id(1)).await? == vec![expected.clone()],
        "a refused commit withdrew"
    );

    // An update emits too; in a batch only the winners' rows are written.
    let mut win = commit(id(1), Some(1), dep);
    win.now_ms = T0 + 10;
    win.outbox.emit = vec![outbox_request("k5", "call", 2)];
    let mut lose = commit(id(2), Some(1), dep);
    lose.outbox.emit = vec![outbox_request("k6", "call", 1)];
    let outcomes = s.commit(vec![win, lose]).await?;
    ensure!(
        outcomes[0] == CommitOutcome::Applied { fence: 2 }
            && matches!(outcomes[1], CommitOutcome::Conflict { .. }),
        "{outcomes:?}"
    );
    ensure!(s.outbox_row("k5").await? == Some(pending_row(id(1), "k5", "call", 2, T0 + 10)));
    ensure!(s.outbox_row("k6").await?.is_none());
    ensure!(s.outbox(id(2)).await?.is_empty());
    Ok(())
}

/// A re-emission of a key that exists (a commit re-derived after a lost acknowledgement)
/// leaves the row and its delivery record as they are; of two emissions of one key in a
/// commit, the first is written.
pub async fn emitting_an_existing_key_leaves_the_row_as_it_is(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    emit_at(
        s,
        id(1),
        None,
        dep,
        T0,
        vec![outbox_request("k1", "call", 1)],
    )
    .await?;
    ensure!(claim_keys(s, T0, 1_000, "d1", 10).await? == ["k1"]);
    ensure!(
        s.record_delivery("k1", "d1", T0 + 1, failed("HTTP 503", T0 + 500))
            .await?
    );
    let tried = row(s, "k1").await?;
    ensure!(tried.deliveries == 1 && tried.due_at_ms == T0 + 500);

    let again = NewOutboxRow {
        body: "{}".into(),
        channel: "elsewhere".into(),
        ..outbox_request("k1", "call", 1)
    };
    emit_at(s, id(1), Some(1), dep, T0 + 50, vec![again]).await?;
    ensure!(row(s, "k1").await? == tried, "a re-emission reset the row");

    let twice = vec![
        outbox_request("k2", "call", 2),
        NewOutboxRow {
            channel: "other".into(),
            ..outbox_request("k2", "other", 3)
        },
    ];
    emit_at(s, id(1), Some(2), dep, T0 + 60, twice).await?;
    ensure!(row(s, "k2").await? == pending_row(id(1), "k2", "call", 2, T0 + 60));
    ensure!(keys(&s.outbox(id(1)).await?) == ["k1", "k2"]);
    Ok(())
}

/// A claim leases pending rows due by its instant, earliest due first (then by key, as
/// bytes), at most its limit; delivered and poisoned rows are never claimed; claiming
/// deletes nothing.
pub async fn outbox_claim_takes_due_pending_rows_earliest_first_within_the_limit(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let requests = |ks: &[&str]| -> Vec<NewOutboxRow> {
        ks.iter().map(|k| outbox_request(k, "call", 1)).collect()
    };
    emit_at(s, id(1), None, dep, T0 + 10, requests(&["kb", "ka", "kC"])).await?;
    emit_at(s, id(2), None, dep, T0 + 20, requests(&["kd"])).await?;
    emit_at(s, id(3), None, dep, T0 + 30, requests(&["kc"])).await?;
    emit_at(s, id(4), None, dep, T0 + 1_000, requests(&["klate"])).await?;

    ensure!(
        claim_keys(s, T0 + 9, 10_000, "d1", 10).await?.is_empty(),
        "nothing due yet"
    );
    let first = s.claim_due_outbox(poll(T0 + 100, 10_000, "d1", 3)).await?;
    ensure!(keys(&first) == ["kC", "ka", "kb"], "{:?}", keys(&first));
    ensure!(first[1] == pending_row(id(1), "ka", "call", 1, T0 + 10));
    ensure!(claim_keys(s, T0 + 100, 10_000, "d1", 10).await? == ["kd", "kc"]);
    ensure!(claim_keys(s, T0 + 20_000, 10_000, "d1", 0)
        .await?
        .is_empty());

    ensure!(
        s.record_delivery("ka", "d1", T0 + 101, DeliveryRecord::Delivered)
            .await?
    );
    ensure!(
        s.record_delivery("kb", "d1", T0 + 101, poisoned("HTTP 410"))
            .await?
    );
    ensure!(
        s.record_delivery("kd", "d1", T0 + 101, failed("timeout", T0 + 2_000))
            .await?
    );
    // Every lease has run out by now: what is pending is claimable (`kC` was never
    // recorded), the rest never.
    let later = s
        .claim_due_outbox(poll(T0 + 20_000, 10_000, "d2", 10))
        .await?;
    ensure!(
        keys(&later) == ["kC", "kc", "klate", "kd"],
        "{:?}",
        keys(&later)
    );
    let kd = &later[3];
    ensure!(kd.deliveries == 1 && kd.due_at_ms == T0 + 2_000);
    ensure!(kd.last_error.as_deref() == Some("timeout"));
    let mut total = 0;
    for n in 1..=4 {
        total += s.outbox(id(n)).await?.len();
    }
    ensure!(total == 6, "claiming deleted rows: {total} left");
    Ok(())
}

/// A lease holds up to and including its instant; only its holder may record a try
/// while it holds, and once another dispatcher has claimed the row after it ran out,
/// the old holder's record is refused. A lease that ran out unclaimed still counts.
pub async fn outbox_leases_are_exclusive_until_they_expire(ctx: Ctx) -> Result<()> {
    let (s, other) = (&*ctx.store, &*ctx.second);
    let dep = deploy(s, "h1").await?;
    emit_at(
        s,
        id(1),
        None,
        dep,
        T0,
        vec![outbox_request("k1", "call", 1)],
    )
    .await?;
    ensure!(claim_keys(s, T0, 1_000, "d1", 10).await? == ["k1"]);
    ensure!(claim_keys(other, T0, 1_000, "d2", 10).await?.is_empty());
    ensure!(
        claim_keys(other, T0 + 1_000, 1_000, "d2", 10)
            .await?
            .is_empty(),
        "the lease holds at its instant"
    );
    ensure!(
        !other
            .record_delivery("k1", "d2", T0 + 1_000, DeliveryRecord::Delivered)
            .await?
    );
    ensure!(claim_keys(other, T0 + 1_001, 1_000, "d2", 10).await? == ["k1"]);
    ensure!(
        !s.record_delivery("k1", "d1", T0 + 1_002, DeliveryRecord::Delivered)
            .await?,
        "the old holder recorded a try"
    );
    ensure!(row(s, "k1").await? == pending_row(id(1), "k1", "call", 1, T0));
    ensure!(
        other
            .record_delivery("k1", "d2", T0 + 1_002, failed("HTTP 503", T0 + 5_000))
            .await?
    );
    ensure!(claim_keys(s, T0 + 5_000, 100, "d1", 10).await? == ["k1"]);
    ensure!(
        s.record_delivery("k1", "d1", T0 + 6_000, DeliveryRecord::Delivered)
            .await?,
        "a lease that ran out unclaimed still counts"
    );
    let done = row(other, "k1").await?;
    ensure!(done.state == OutboxState::Delivered && done.deliveries == 2);
    ensure!(done.last_error.as_deref() == Some("HTTP 503"));
    Ok(())
}

/// Two dispatchers (two replicas' pools) draining one outbox at once never receive the
/// same row while its lease holds.
pub async fn concurrent_outbox_claimers_never_share_a_row(ctx: Ctx) -> Result<()> {
    const ROWS: u128 = 300;
    let dep = deploy(&*ctx.store, "h1").await?;
    let batch: Vec<Commit> = (0..ROWS)
        .map(|n| {
            let mut c = commit(id(n), None, dep);
            c.now_ms = T0 + (n as i64 % 17);
            c.outbox.emit = vec![outbox_request(&format!("k{n}"), "call", 1)];
            c
        })
        .collect();
    ensure!(ctx
        .store
        .commit(batch)
        .await?
        .iter()
        .all(|o| matches!(o, CommitOutcome::Applied { .. })));

    let claimer = |store: Arc<dyn Store>, owner: &'static str| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let claimed = store
                    .claim_due_outbox(poll(T0 + 100, 600_000, owner, 7))
                    .await?;
                if claimed.is_empty() {
                    return Ok::<_, StoreError>(got);
                }
                got.extend(claimed.into_iter().map(|r| r.key));
                tokio::task::yield_now().await;
            }
        })
    };
    let a = claimer(ctx.store.clone(), "dispatcher-a");
    let b = claimer(ctx.second.clone(), "dispatcher-b");
    let (a, b) = (a.await??, b.await??);
    let mut all: Vec<&String> = a.iter().chain(b.iter()).collect();
    let total = all.len();
    all.sort();
    all.dedup();
    ensure!(
        all.len() == total,
        "{} rows were claimed twice",
        total - all.len()
    );
    ensure!(total == ROWS as usize, "claimed {total} of {ROWS}");
    println!(
        "{:?}: dispatcher a claimed {}, dispatcher b {}",
        ctx.label,
        a.len(),
        b.len()
    );
    Ok(())
}

/// Each record counts the try and drops the lease: delivered is final, a failed try is
/// pending again at its retry instant (claimable by anyone then, not before), poisoned
/// is final. The instance is not stepped.
pub async fn record_delivery_moves_the_row_for_each_record(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let requests = vec![
        outbox_request("k-ok", "a", 1),
        outbox_request("k-retry", "b", 1),
        outbox_request("k-dead", "c", 1),
    ];
    emit_at(s, id(1), None, dep, T0, requests).await?;
    ensure!(claim_keys(s, T0, 60_000, "d1", 10).await?.len() == 3);

    ensure!(
        s.record_delivery("k-ok", "d1", T0 + 10, DeliveryRecord::Delivered)
            .await?
    );
    let ok = OutboxRecord {
        state: OutboxState::Delivered,
        deliveries: 1,
        ..pending_row(id(1), "k-ok", "a", 1, T0)
    };
    ensure!(row(&*ctx.second, "k-ok").await? == ok);

    ensure!(
        s.record_delivery("k-retry", "d1", T0 + 10, failed("HTTP 503", T0 + 100))
            .await?
    );
    let retry = OutboxRecord {
        deliveries: 1,
        due_at_ms: T0 + 100,
        last_error: Some("HTTP 503".into()),
        ..pending_row(id(1), "k-retry", "b", 1, T0)
    };
    ensure!(row(s, "k-retry").await? == retry);
    ensure!(claim_keys(s, T0 + 99, 60_000, "d2", 10).await?.is_empty());
    let again = s.claim_due_outbox(poll(T0 + 100, 60_000, "d2", 10)).await?;
    ensure!(again == vec![retry], "{again:?}");
    ensure!(
        s.record_delivery("k-retry", "d2", T0 + 110, failed("HTTP 502", T0 + 300))
            .await?
    );
    ensure!(claim_keys(s, T0 + 300, 60_000, "d2", 10).await? == ["k-retry"]);
    ensure!(
        s.record_delivery("k-retry", "d2", T0 + 310, DeliveryRecord::Delivered)
            .await?
    );
    let delivered = row(s, "k-retry").await?;
    let expected = OutboxRecord {
        state: OutboxState::Delivered,
        deliveries: 3,
        due_at_ms: T0 + 300,
        last_error: Some("HTTP 502".into()),
        ..pending_row(id(1), "k-retry", "b", 1, T0)
    };
    ensure!(delivered == expected, "{delivered:?}");

    ensure!(
        s.record_delivery("k-dead", "d1", T0 + 20, poisoned("HTTP 410"))
            .await?
    );
    let dead = OutboxRecord {
        state: OutboxState::Poisoned,
        deliveries: 1,
        last_error: Some("HTTP 410".into()),
        ..pending_row(id(1), "k-dead", "c", 1, T0)
    };
    ensure!(row(s, "k-dead").await? == dead);

    let instance = s.instance(id(1)).await?.ok_or_else(|| anyhow!("id 1"))?;
    ensure!(instance.fence == 1 && instance.updated_at_ms == T0);
    ensure!(s.next_outbox_due().await?.is_none());
    ensure!(claim_keys(s, T0 + 1_000_000, 60_000, "d3", 10)
        .await?
        .is_empty());
    Ok(())
}

/// A poisoned row opens a `POISONED` incident on its node at the record's instant, in
/// the same transaction, saying the error and how many tries were made; nothing on
/// other instances. Withdrawing the node deletes the row and leaves the incident.
pub async fn a_poisoned_row_opens_its_incident_with_the_delivery_count(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    emit_at(
        s,
        id(1),
        None,
        dep,
        T0,
        vec![outbox_request("k1", "notify", 1)],
    )
    .await?;
    let k2 = vec![outbox_request("k2", "notify", 1)];
    emit_at(s, id(2), None, dep, T0 + 10_000, k2).await?;
    for n in 0..2 {
        let now = T0 + n * 100;
        ensure!(claim_keys(s, now, 10, "d1", 1).await? == ["k1"]);
        ensure!(
            s.record_delivery("k1", "d1", now + 1, failed("connection refused", now + 100))
                .await?
        );
    }
    ensure!(claim_keys(s, T0 + 200, 10, "d1", 10).await? == ["k1"]);
    ensure!(
        s.record_delivery("k1", "d1", T0 + 250, poisoned("connection refused"))
            .await?
    );
    let incidents = ctx.second.incidents(Some(id(1))).await?;
    ensure!(incidents.len() == 1, "{incidents:?}");
    let incident = &incidents[0];
    let message = poisoned_message("connection refused", 3);
    ensure!(
        incident.instance == id(1)
            && incident.node == "notify"
            && incident.code == POISONED_INCIDENT_CODE
            && incident.message == message
            && incident.opened_at_ms == T0 + 250
            && incident.resolved_at_ms.is_none(),
        "{incident:?}"
    );
    ensure!(message.contains('3') && message.contains("connection refused"));
    ensure!(s.incidents(Some(id(2))).await?.is_empty());
    ensure!(row(s, "k1").await?.state == OutboxState::Poisoned);
    ensure!(
        s.next_outbox_due().await? == Some(T0 + 10_000),
        "only k2 is still due"
    );

    withdraw(s, id(1), 1, dep, &["notify"]).await?;
    ensure!(s.outbox_row("k1").await?.is_none());
    let after = s.incidents(Some(id(1))).await?;
    ensure!(after.len() == 1 && after[0].resolved_at_ms.is_none());
    Ok(())
}

/// `record_delivery` applies only to a pending row leased to the caller: a row never
/// claimed, leased to another owner, already recorded for this lease, delivered,
/// withdrawn, or unknown is left alone, and a refused poison opens no incident.
pub async fn record_delivery_is_refused_without_the_lease_on_a_pending_row(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let requests = vec![outbox_request("k1", "a", 1), outbox_request("k2", "b", 1)];
    emit_at(s, id(1), None, dep, T0, requests).await?;
    ensure!(
        !s.record_delivery("k1", "d1", T0, DeliveryRecord::Delivered)
            .await?,
        "recorded a try on a row nobody claimed"
    );
    ensure!(row(s, "k1").await? == pending_row(id(1), "k1", "a", 1, T0));
    ensure!(claim_keys(s, T0, 60_000, "d1", 10).await? == ["k1", "k2"]);
    ensure!(!s.record_delivery("k1", "d2", T0 + 1, poisoned("x")).await?);
    ensure!(row(s, "k1").await? == pending_row(id(1), "k1", "a", 1, T0));
    ensure!(
        !s.record_delivery("nope", "d1", T0 + 1, DeliveryRecord::Delivered)
            .await?
    );

    ensure!(
        s.record_delivery("k1", "d1", T0 + 2, DeliveryRecord::Delivered)
            .await?
    );
    ensure!(
        !s.record_delivery("k1", "d1", T0 + 3, DeliveryRecord::Delivered)
            .await?
    );
    ensure!(
        !s.record_delivery("k1", "d1", T0 + 3, failed("x", T0 + 9))
            .await?
    );
    let k1 = row(s, "k1").await?;
    ensure!(k1.state == OutboxState::Delivered && k1.deliveries == 1 && k1.last_error.is_none());

    withdraw(s, id(1), 1, dep, &["b"]).await?;
    ensure!(
        !s.record_delivery("k2", "d1", T0 + 4, poisoned("late"))
            .await?,
        "recorded a try on a withdrawn row"
    );
    ensure!(s.outbox_row("k2").await?.is_none());
    ensure!(
        s.incidents(Some(id(1))).await?.is_empty(),
        "a refused record opened an incident"
    );
    Ok(())
}

/// C6: withdrawing a node deletes its pending and poisoned rows (even leased ones) and
/// keeps its delivered ones; other nodes' rows (one whose name starts with the node's)
/// and other instances' rows stay. A losing commit withdraws nothing.
pub async fn withdrawal_deletes_undelivered_rows_of_its_node_only(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let requests = vec![
        outbox_request("ka1", "a", 1),
        outbox_request("ka2", "a", 2),
        outbox_request("ka3", "a", 3),
        outbox_request("kab", "ab", 1),
        outbox_request("kb1", "b", 1),
    ];
    emit_at(s, id(1), None, dep, T0, requests).await?;
    emit_at(s, id(2), None, dep, T0, vec![outbox_request("k2a", "a", 1)]).await?;
    ensure!(claim_keys(s, T0, 60_000, "d1", 10).await?.len() == 6);
    ensure!(
        s.record_delivery("ka1", "d1", T0 + 1, DeliveryRecord::Delivered)
            .await?
    );
    ensure!(
        s.record_delivery("ka2", "d1", T0 + 1, poisoned("HTTP 410"))
            .await?
    );
    let delivered = row(s, "ka1").await?;

    withdraw(s, id(1), 1, dep, &["a", "missing"]).await?;
    let left = s.outbox(id(1)).await?;
    ensure!(keys(&left) == ["ka1", "kab", "kb1"], "{:?}", keys(&left));
    ensure!(left[0] == delivered, "the delivered row changed");
    ensure!(keys(&s.outbox(id(2)).await?) == ["k2a"]);
    ensure!(
        !s.record_delivery("ka3", "d1", T0 + 2, DeliveryRecord::Delivered)
            .await?
    );

    let mut lost = commit(id(2), Some(9), dep);
    lost.outbox.withdraw = vec!["a".into()];
    ensure!(matches!(
        commit_one(s, lost).await?,
        CommitOutcome::Conflict { .. }
    ));
    ensure!(keys(&s.outbox(id(2)).await?) == ["k2a"]);
    Ok(())
}

/// An answer a commit takes marks its row delivered in that commit (one delivery try, the
/// lease gone, never claimed again); a row already delivered or poisoned, a missing key
/// and a commit that loses its compare-and-swap change nothing.
pub async fn an_answer_in_a_commit_marks_its_pending_row_delivered(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let requests = vec![
        outbox_request("k1", "a", 1),
        outbox_request("k2", "b", 1),
        outbox_request("k3", "c", 1),
    ];
    emit_at(s, id(1), None, dep, T0, requests).await?;
    ensure!(claim_keys(s, T0, 60_000, "d1", 10).await?.len() == 3);
    ensure!(
        s.record_delivery("k2", "d1", T0 + 1, poisoned("HTTP 410"))
            .await?
    );
    let poisoned_row = row(s, "k2").await?;
    let mut lost = commit(id(1), Some(7), dep);
    lost.outbox.answered = vec!["k1".into()];
    ensure!(matches!(
        commit_one(s, lost).await?,
        CommitOutcome::Conflict { .. }
    ));
    ensure!(
        row(s, "k1").await?.state == OutboxState::Pending,
        "a lost commit marked k1"
    );
    let mut c = commit(id(1), Some(1), dep);
    c.outbox.answered = vec!["k1".into(), "k2".into(), "missing".into()];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 2 });
    let k1 = row(s, "k1").await?;
    ensure!(
        k1.state == OutboxState::Delivered && k1.deliveries == 1,
        "{k1:?}"
    );
    ensure!(
        row(s, "k2").await? == poisoned_row,
        "the poisoned row changed"
    );
    ensure!(
        !s.record_delivery("k1", "d1", T0 + 2, DeliveryRecord::Delivered)
            .await?,
        "the holder's record is refused: the row is no longer pending"
    );
    // k1 is not pending: once the first leases lapse, a claim takes k3 alone.
    ensure!(row(s, "k3").await?.state == OutboxState::Pending);
    ensure!(claim_keys(s, T0 + 120_000, 60_000, "d2", 10).await? == ["k3"]);
    Ok(())
}

/// An immediate re-drive: one commit withdraws the dead attempt's row and emits the next
/// attempt's for the same node; the new row is there, pending and claimable.
pub async fn withdraw_then_emit_in_one_commit_keeps_the_new_row(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    emit_at(s, id(1), None, dep, T0, vec![outbox_request("k1", "a", 1)]).await?;
    ensure!(claim_keys(s, T0, 60_000, "d1", 10).await? == ["k1"]);
    ensure!(
        s.record_delivery("k1", "d1", T0 + 1, poisoned("HTTP 500"))
            .await?
    );

    let mut redrive = commit(id(1), Some(1), dep);
    redrive.now_ms = T0 + 100;
    redrive.outbox.withdraw = vec!["a".into()];
    redrive.outbox.emit = vec![outbox_request("k2", "a", 2)];
    ensure!(commit_one(s, redrive).await? == CommitOutcome::Applied { fence: 2 });
    let new = pending_row(id(1), "k2", "a", 2, T0 + 100);
    ensure!(s.outbox(id(1)).await? == vec![new.clone()]);
    let claimed = s.claim_due_outbox(poll(T0 + 100, 60_000, "d1", 10)).await?;
    ensure!(claimed == vec![new], "{claimed:?}");
    Ok(())
}

/// The earliest due instant of any pending row, leased or not; delivered and poisoned
/// rows do not count.
pub async fn next_outbox_due_is_the_earliest_pending_row_leased_or_not(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    ensure!(s.next_outbox_due().await?.is_none());
    emit_at(
        s,
        id(1),
        None,
        dep,
        T0 + 50,
        vec![outbox_request("k1", "a", 1)],
    )
    .await?;
    emit_at(
        s,
        id(2),
        None,
        dep,
        T0 + 20,
        vec![outbox_request("k2", "a", 1)],
    )
    .await?;
    ensure!(s.next_outbox_due().await? == Some(T0 + 20));
    ensure!(claim_keys(s, T0 + 20, 60_000, "d1", 1).await? == ["k2"]);
    ensure!(
        ctx.second.next_outbox_due().await? == Some(T0 + 20),
        "a leased row counts"
    );
    ensure!(
        s.record_delivery("k2", "d1", T0 + 21, failed("503", T0 + 80))
            .await?
    );
    ensure!(s.next_outbox_due().await? == Some(T0 + 50));
    ensure!(claim_keys(s, T0 + 50, 60_000, "d1", 10).await? == ["k1"]);
    ensure!(
        s.record_delivery("k1", "d1", T0 + 51, DeliveryRecord::Delivered)
            .await?
    );
    ensure!(s.next_outbox_due().await? == Some(T0 + 80));
    ensure!(claim_keys(s, T0 + 80, 60_000, "d1", 10).await? == ["k2"]);
    ensure!(
        s.record_delivery("k2", "d1", T0 + 81, poisoned("503"))
            .await?
    );
    ensure!(s.next_outbox_due().await?.is_none());
    Ok(())
}

/// `outbox(instance)` lists that instance's rows only, oldest first, then by key
/// compared as bytes (`B` before `b`); unknown keys and instances read as nothing.
pub async fn outbox_lists_an_instances_rows_oldest_first_then_by_key(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let requests = vec![
        outbox_request("m", "a", 1),
        outbox_request("b", "b", 1),
        outbox_request("B", "c", 1),
    ];
    emit_at(s, id(1), None, dep, T0 + 10, requests).await?;
    emit_at(
        s,
        id(1),
        Some(1),
        dep,
        T0 + 20,
        vec![outbox_request("a", "a", 2)],
    )
    .await?;
    emit_at(
        s,
        id(2),
        None,
        dep,
        T0 + 5,
        vec![outbox_request("z", "a", 1)],
    )
    .await?;
    let listed = ctx.second.outbox(id(1)).await?;
    ensure!(keys(&listed) == ["B", "b", "m", "a"], "{:?}", keys(&listed));
    ensure!(listed[3] == pending_row(id(1), "a", "a", 2, T0 + 20));
    ensure!(keys(&s.outbox(id(2)).await?) == ["z"]);
    ensure!(s.outbox(id(3)).await?.is_empty());
    ensure!(s.outbox_row("nope").await?.is_none());
    Ok(())
}

/// The purge takes every outbox row of the instances it deletes, whatever their state
/// (counted in `PurgeOutcome::outbox`), and no other instance's rows.
pub async fn purge_takes_every_outbox_row_of_a_purged_instance_only(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let requests = vec![
        outbox_request("ka", "a", 1),
        outbox_request("kb", "b", 1),
        outbox_request("kc", "c", 1),
    ];
    emit_at(s, id(1), None, dep, T0, requests).await?;
    emit_at(
        s,
        id(2),
        None,
        dep,
        T0 + 5,
        vec![outbox_request("k2", "a", 1)],
    )
    .await?;
    ensure!(claim_keys(s, T0, 10, "d1", 2).await? == ["ka", "kb"]);
    ensure!(
        s.record_delivery("ka", "d1", T0 + 1, DeliveryRecord::Delivered)
            .await?
    );
    ensure!(
        s.record_delivery("kb", "d1", T0 + 1, poisoned("HTTP 410"))
            .await?
    );
    commit_one(
        s,
        with_status(id(1), Some(1), dep, InstanceStatus::Completed, T0 + 10),
    )
    .await?;

    let out = s.purge_finished(purge(T0 + 100, 10)).await?;
    let expected = PurgeOutcome {
        instances: 1,
        incidents: 1,
        outbox: 3,
        ..PurgeOutcome::default()
    };
    ensure!(out == expected, "{out:?}");
    ensure!(s.outbox(id(1)).await?.is_empty());
    for key in ["ka", "kb", "kc"] {
        ensure!(s.outbox_row(key).await?.is_none(), "{key} was kept");
    }
    ensure!(s.outbox(id(2)).await? == vec![pending_row(id(2), "k2", "a", 1, T0 + 5)]);
    ensure!(s.next_outbox_due().await? == Some(T0 + 5));
    ensure!(claim_keys(s, T0 + 100, 10, "d2", 10).await? == ["k2"]);
    Ok(())
}

/// A dispatcher poisoning rows (one handle) while the instances' commits withdraw them
/// (the other), each pair at the same moment: neither side fails, every row is gone
/// afterwards, and a poison left its incident exactly when it applied (before the
/// withdrawal). On PostgreSQL both take the instance's lock before the row's, so they
/// queue instead of deadlocking.
pub async fn poisons_racing_withdrawals_never_deadlock(ctx: Ctx) -> Result<()> {
    const ROWS: u128 = 40;
    let dep = deploy(&*ctx.store, "h1").await?;
    let batch: Vec<Commit> = (0..ROWS)
        .map(|n| {
            let mut c = commit(id(n), None, dep);
            c.outbox.emit = vec![outbox_request(&format!("k{n}"), "call", 1)];
            c
        })
        .collect();
    ctx.store.commit(batch).await?;
    let claimed = claim_keys(&*ctx.store, T0, 600_000, "d1", 1_000).await?;
    ensure!(claimed.len() == ROWS as usize);
    for n in 0..ROWS {
        let (a, b) = (ctx.store.clone(), ctx.second.clone());
        let withdrawal = tokio::spawn(async move {
            let mut c = commit(id(n), Some(1), dep);
            c.outbox.withdraw = vec!["call".into()];
            a.commit(vec![c]).await
        });
        let poison = tokio::spawn(async move {
            b.record_delivery(&format!("k{n}"), "d1", T0 + 1, poisoned("HTTP 410"))
                .await
        });
        let outcome = withdrawal.await??;
        let applied = poison.await??;
        ensure!(
            outcome == vec![CommitOutcome::Applied { fence: 2 }],
            "{outcome:?}"
        );
        ensure!(ctx.store.outbox_row(&format!("k{n}")).await?.is_none());
        let incidents = ctx.store.incidents(Some(id(n))).await?.len();
        ensure!(
            incidents == usize::from(applied),
            "row {n}: poison applied {applied}, {incidents} incidents"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- user tasks (the task list)

/// A user-task row of `instance` at `node` on `deployment`, offered at `at_ms`.
pub fn user_task(
    instance: InstanceId,
    node: &str,
    deployment: DeploymentId,
    at_ms: i64,
    assignee: Option<&str>,
    groups: &[&str],
    users: &[&str],
) -> UserTaskRecord {
    UserTaskRecord {
        instance,
        node: node.into(),
        deployment,
        assignee: assignee.map(str::to_owned),
        candidate_groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        candidate_users: users.iter().map(|u| (*u).to_owned()).collect(),
        created_at_ms: at_ms,
    }
}

fn tasks_seen(rows: &[UserTaskRecord]) -> Vec<(InstanceId, String)> {
    rows.iter().map(|r| (r.instance, r.node.clone())).collect()
}

/// Offers `rows` (all of one instance, created by this commit at `at_ms`).
async fn offer_tasks(
    s: &dyn Store,
    instance: InstanceId,
    fence: Option<u64>,
    deployment: DeploymentId,
    at_ms: i64,
    rows: Vec<UserTaskRecord>,
) -> Result<CommitOutcome> {
    let mut c = commit(instance, fence, deployment);
    c.now_ms = at_ms;
    c.user_tasks.offer = rows;
    commit_one(s, c).await
}

/// An offered row is read back whole, by instance and through the task list; an
/// assignment changes its assignee and nothing else; withdrawn and offered again in one
/// commit it is offered; withdrawn it is gone; a commit that loses its compare-and-swap
/// writes no row; withdrawing or assigning a missing row is no error.
pub async fn user_tasks_are_offered_assigned_and_withdrawn_with_their_commit(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let row = user_task(
        id(1),
        "approve",
        dep,
        T0,
        Some("ann"),
        &["sales", "emea"],
        &["bo"],
    );
    let out = offer_tasks(s, id(1), None, dep, T0, vec![row.clone()]).await?;
    ensure!(out == CommitOutcome::Applied { fence: 1 }, "{out:?}");
    ensure!(ctx.second.instance_user_tasks(id(1)).await? == vec![row.clone()]);
    let all = ctx.second.user_tasks(&UserTaskQuery::default()).await?;
    ensure!(all == vec![row.clone()], "{all:?}");
    // A loser writes nothing.
    let mut lost = commit(id(1), Some(7), dep);
    lost.user_tasks.withdraw = vec!["approve".into()];
    lost.user_tasks.assign = vec![("approve".into(), Some("zed".into()))];
    ensure!(matches!(
        commit_one(s, lost).await?,
        CommitOutcome::Conflict { .. }
    ));
    ensure!(s.instance_user_tasks(id(1)).await? == vec![row.clone()]);
    // Claimed by bo: only the assignee moves; the offer's instant stays.
    let mut c = commit(id(1), Some(1), dep);
    c.now_ms = T0 + 50;
    c.user_tasks.assign = vec![
        ("approve".into(), Some("bo".into())),
        ("never".into(), Some("x".into())),
    ];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 2 });
    let claimed = UserTaskRecord {
        assignee: Some("bo".into()),
        ..row.clone()
    };
    ensure!(s.instance_user_tasks(id(1)).await? == vec![claimed]);
    // Unclaimed.
    let mut c = commit(id(1), Some(2), dep);
    c.user_tasks.assign = vec![("approve".into(), None)];
    commit_one(s, c).await?;
    let free = s.instance_user_tasks(id(1)).await?;
    ensure!(free[0].assignee.is_none(), "{free:?}");
    // Withdrawn and offered again in one commit (a loop back to the task): offered anew.
    let again = user_task(id(1), "approve", dep, T0 + 100, None, &["legal"], &[]);
    let mut c = commit(id(1), Some(3), dep);
    c.now_ms = T0 + 100;
    c.user_tasks.withdraw = vec!["approve".into()];
    c.user_tasks.offer = vec![again.clone()];
    commit_one(s, c).await?;
    ensure!(s.instance_user_tasks(id(1)).await? == vec![again]);
    // Withdrawn: gone everywhere; a missing row is no error.
    let mut c = commit(id(1), Some(4), dep);
    c.user_tasks.withdraw = vec!["approve".into(), "never".into()];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 5 });
    ensure!(s.instance_user_tasks(id(1)).await?.is_empty());
    ensure!(s.user_tasks(&UserTaskQuery::default()).await?.is_empty());
    let by_group = UserTaskQuery {
        candidate_groups: vec!["legal".into()],
        ..UserTaskQuery::default()
    };
    ensure!(s.user_tasks(&by_group).await?.is_empty());
    Ok(())
}

/// Every filter of the task list, alone and together, in the listing order
/// `(created_at_ms, instance, node)`.
pub async fn user_tasks_filter_by_assignee_candidates_and_deployment(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let d1 = deploy(s, "h1").await?;
    let d2 = deploy(s, "h2").await?;
    let rows = [
        user_task(id(1), "a", d1, T0 + 30, Some("ann"), &["sales"], &["bo"]),
        user_task(id(2), "a", d1, T0 + 10, None, &["sales", "emea"], &[]),
        user_task(
            id(3),
            "a",
            d2,
            T0 + 20,
            Some("bo"),
            &["emea"],
            &["ann", "bo"],
        ),
        user_task(id(4), "a", d2, T0 + 20, None, &[], &["cy"]),
    ];
    for row in &rows {
        let out = offer_tasks(
            s,
            row.instance,
            None,
            row.deployment,
            row.created_at_ms,
            vec![row.clone()],
        )
        .await?;
        ensure!(out == CommitOutcome::Applied { fence: 1 }, "{out:?}");
    }
    // Two tasks of one instance, one offered before the other.
    let five = vec![
        user_task(id(5), "y", d1, T0 + 5, None, &["sales"], &[]),
        user_task(id(5), "x", d1, T0 + 5, Some("ann"), &["legal"], &[]),
    ];
    offer_tasks(s, id(5), None, d1, T0 + 5, five).await?;
    let n = |i: u128, node: &str| (id(i), node.to_owned());
    let check = |label: &'static str, q: UserTaskQuery, want: Vec<(InstanceId, String)>| {
        let store = ctx.second.clone();
        async move {
            let got = tasks_seen(&store.user_tasks(&q).await?);
            ensure!(got == want, "{label}: {got:?}, wanted {want:?}");
            Ok::<(), anyhow::Error>(())
        }
    };
    let q = UserTaskQuery::default;
    check(
        "everything, oldest first (then instance, then node)",
        q(),
        vec![
            n(5, "x"),
            n(5, "y"),
            n(2, "a"),
            n(3, "a"),
            n(4, "a"),
            n(1, "a"),
        ],
    )
    .await?;
    check(
        "assignee",
        UserTaskQuery {
            assignee: Some("ann".into()),
            ..q()
        },
        vec![n(5, "x"), n(1, "a")],
    )
    .await?;
    check(
        "one candidate group",
        UserTaskQuery {
            candidate_groups: vec!["sales".into()],
            ..q()
        },
        vec![n(5, "y"), n(2, "a"), n(1, "a")],
    )
    .await?;
    check(
        "any of two groups, each task once",
        UserTaskQuery {
            candidate_groups: vec!["emea".into(), "sales".into()],
            ..q()
        },
        vec![n(5, "y"), n(2, "a"), n(3, "a"), n(1, "a")],
    )
    .await?;
    check(
        "candidate user",
        UserTaskQuery {
            candidate_user: Some("bo".into()),
            ..q()
        },
        vec![n(3, "a"), n(1, "a")],
    )
    .await?;
    check(
        "deployment",
        UserTaskQuery {
            deployment: Some(d2),
            ..q()
        },
        vec![n(3, "a"), n(4, "a")],
    )
    .await?;
    check(
        "nobody holds it",
        UserTaskQuery {
            assigned: Some(false),
            ..q()
        },
        vec![n(5, "y"), n(2, "a"), n(4, "a")],
    )
    .await?;
    check(
        "somebody holds it",
        UserTaskQuery {
            assigned: Some(true),
            ..q()
        },
        vec![n(5, "x"), n(3, "a"), n(1, "a")],
    )
    .await?;
    check(
        "a group's tasks nobody holds (a group inbox)",
        UserTaskQuery {
            candidate_groups: vec!["sales".into(), "emea".into()],
            assigned: Some(false),
            ..q()
        },
        vec![n(5, "y"), n(2, "a")],
    )
    .await?;
    check(
        "assignee and candidate user together",
        UserTaskQuery {
            assignee: Some("bo".into()),
            candidate_user: Some("ann".into()),
            ..q()
        },
        vec![n(3, "a")],
    )
    .await?;
    check(
        "candidate user and group together",
        UserTaskQuery {
            candidate_user: Some("bo".into()),
            candidate_groups: vec!["sales".into()],
            ..q()
        },
        vec![n(1, "a")],
    )
    .await?;
    check(
        "group and deployment together",
        UserTaskQuery {
            candidate_groups: vec!["emea".into()],
            deployment: Some(d1),
            ..q()
        },
        vec![n(2, "a")],
    )
    .await?;
    check(
        "nobody matches",
        UserTaskQuery {
            assignee: Some("nobody".into()),
            ..q()
        },
        vec![],
    )
    .await?;
    check(
        "the limit",
        UserTaskQuery { limit: 2, ..q() },
        vec![n(5, "x"), n(5, "y")],
    )
    .await?;
    Ok(())
}

/// Paging with the last row of each page as the cursor visits every row once, whatever
/// the filter; rows with equal instants are ordered by instance, then node; a row
/// offered behind the cursor is not seen, one ahead of it is.
pub async fn user_task_listing_pages_by_keyset_without_skips_or_repeats(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut expected = Vec::new();
    for i in 1..=7u128 {
        // Three instants, several rows each, two nodes per instance.
        let at = T0 + (i as i64 % 3);
        let rows = vec![
            user_task(id(i), "b", dep, at, None, &["g"], &[]),
            user_task(id(i), "a", dep, at, None, &["g"], &[]),
        ];
        offer_tasks(s, id(i), None, dep, at, rows).await?;
        expected.push((at, id(i), "a".to_owned()));
        expected.push((at, id(i), "b".to_owned()));
    }
    expected.sort();
    for groups in [vec![], vec!["g".to_owned()]] {
        let mut seen = Vec::new();
        let mut after = None;
        for _ in 0..20 {
            let page = s
                .user_tasks(&UserTaskQuery {
                    candidate_groups: groups.clone(),
                    after: after.clone(),
                    limit: 3,
                    ..UserTaskQuery::default()
                })
                .await?;
            ensure!(page.len() <= 3);
            let Some(last) = page.last() else { break };
            after = Some((last.created_at_ms, last.instance, last.node.clone()));
            seen.extend(
                page.iter()
                    .map(|r| (r.created_at_ms, r.instance, r.node.clone())),
            );
        }
        ensure!(seen == expected, "groups {groups:?}: {seen:?}");
    }
    // A cursor in the middle: a row offered later (ahead of it) is seen, the rows
    // before it are not.
    let cursor = expected[5].clone();
    offer_tasks(
        s,
        id(99),
        None,
        dep,
        T0 + 10,
        vec![user_task(id(99), "a", dep, T0 + 10, None, &["g"], &[])],
    )
    .await?;
    let rest = s
        .user_tasks(&UserTaskQuery {
            after: Some(cursor),
            ..UserTaskQuery::default()
        })
        .await?;
    let mut want: Vec<(InstanceId, String)> = expected[6..]
        .iter()
        .map(|(_, i, n)| (*i, n.clone()))
        .collect();
    want.push((id(99), "a".to_owned()));
    ensure!(tasks_seen(&rest) == want, "{:?}", tasks_seen(&rest));
    Ok(())
}

/// A task offered again (a migration onto another deployment, a resume) is one row:
/// its deployment, instant and candidates are the new offer's, and the old candidates
/// no longer find it.
pub async fn an_offered_again_user_task_replaces_its_candidates(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let d1 = deploy(s, "h1").await?;
    let d2 = deploy(s, "h2").await?;
    let first = user_task(id(1), "approve", d1, T0, None, &["sales"], &["ann"]);
    offer_tasks(s, id(1), None, d1, T0, vec![first]).await?;
    let mut moved = commit(id(1), Some(1), d2);
    moved.now_ms = T0 + 9;
    moved.moves = true;
    let second = user_task(
        id(1),
        "approve",
        d2,
        T0 + 9,
        Some("bo"),
        &["legal"],
        &["cy"],
    );
    moved.user_tasks.offer = vec![second.clone()];
    ensure!(commit_one(s, moved).await? == CommitOutcome::Applied { fence: 2 });
    ensure!(s.instance_user_tasks(id(1)).await? == vec![second.clone()]);
    let by = |groups: &[&str], user: Option<&str>| UserTaskQuery {
        candidate_groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        candidate_user: user.map(str::to_owned),
        ..UserTaskQuery::default()
    };
    ensure!(s.user_tasks(&by(&["sales"], None)).await?.is_empty());
    ensure!(s.user_tasks(&by(&[], Some("ann"))).await?.is_empty());
    ensure!(s.user_tasks(&by(&["legal"], Some("cy"))).await? == vec![second]);
    ensure!(s
        .user_tasks(&UserTaskQuery {
            deployment: Some(d1),
            ..UserTaskQuery::default()
        })
        .await?
        .is_empty());
    Ok(())
}

/// User-task rows left on an ended instance are residue; the purge takes them along
/// (counted with the timer residue) and no query finds them again.
pub async fn user_task_rows_go_with_a_purged_instance(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let row = user_task(id(1), "approve", dep, T0, Some("ann"), &["sales"], &["bo"]);
    offer_tasks(s, id(1), None, dep, T0, vec![row]).await?;
    let kept = user_task(id(2), "approve", dep, T0, None, &["sales"], &[]);
    offer_tasks(s, id(2), None, dep, T0, vec![kept.clone()]).await?;
    let mut end = commit(id(1), Some(1), dep);
    end.state.status = InstanceStatus::Completed;
    commit_one(s, end).await?;
    let out = s.purge_finished(purge(T0 + 1, 10)).await?;
    ensure!(out.instances == 1 && out.timers == 1, "{out:?}");
    ensure!(s.instance_user_tasks(id(1)).await?.is_empty());
    let sales = UserTaskQuery {
        candidate_groups: vec!["sales".into()],
        ..UserTaskQuery::default()
    };
    ensure!(s.user_tasks(&sales).await? == vec![kept]);
    let ann = UserTaskQuery {
        assignee: Some("ann".into()),
        ..UserTaskQuery::default()
    };
    ensure!(s.user_tasks(&ann).await?.is_empty());
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Timer start schedules

fn schedule(node: &str, due_at_ms: i64, remaining: Option<u32>) -> NewSchedule {
    NewSchedule {
        node: node.to_owned(),
        due_at_ms,
        remaining,
    }
}

/// Deploys process `process` with content `hash` and these schedules.
async fn deploy_scheduled(
    store: &dyn Store,
    process: &str,
    hash: &str,
    schedules: &[NewSchedule],
) -> Result<DeploymentId> {
    let source = format!("<definitions id='{hash}'/>");
    Ok(store
        .deploy(NewDeployment {
            process_id: process,
            content_hash: hash,
            source: &source,
            deployed_at_ms: T0,
            schedules,
        })
        .await?
        .id)
}

/// `(deployment, node, due, remaining)` of every schedule.
async fn schedule_rows(s: &dyn Store) -> Result<Vec<(i64, String, i64, Option<u32>)>> {
    Ok(s.schedules(None)
        .await?
        .into_iter()
        .map(|r| (r.deployment.0, r.node, r.due_at_ms, r.remaining))
        .collect())
}

/// The creation of `instance` that starts the occurrence of `node` due at `fired`.
fn scheduled_start(
    instance: InstanceId,
    deployment: DeploymentId,
    node: &str,
    fired: i64,
    next: Option<(i64, Option<u32>)>,
) -> Commit {
    let mut c = commit(instance, None, deployment);
    c.schedule = Some(Box::new(ScheduleAdvance {
        node: node.to_owned(),
        fired_at_ms: fired,
        next,
    }));
    c
}

/// A new deployment records its schedules; a newer deployment of the same process
/// replaces them (even with none of its own), the same content again changes nothing,
/// and another process's schedules are left alone.
pub async fn schedules_are_recorded_with_a_new_deployment_and_replaced_by_the_next(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let v1 = deploy_scheduled(
        s,
        "report",
        "r1",
        &[
            schedule("nightly", T0 + 100, None),
            schedule("once", T0 + 50, Some(1)),
        ],
    )
    .await?;
    let other = deploy_scheduled(s, "billing", "b1", &[schedule("tick", T0 + 10, Some(3))]).await?;
    ensure!(
        schedule_rows(s).await?
            == vec![
                (v1.0, "nightly".to_owned(), T0 + 100, None),
                (v1.0, "once".to_owned(), T0 + 50, Some(1)),
                (other.0, "tick".to_owned(), T0 + 10, Some(3)),
            ],
        "rows as deployed, by deployment then node: {:?}",
        schedule_rows(s).await?
    );
    let only_v1 = s.schedules(Some(v1)).await?;
    ensure!(only_v1.len() == 2 && only_v1.iter().all(|r| r.deployment == v1));

    // The same content again: the same deployment, and its rows as they were (the
    // schedules given this time are not looked at).
    let again = deploy_scheduled(s, "report", "r1", &[schedule("nightly", T0 + 999, None)]).await?;
    ensure!(again == v1);
    ensure!(s.schedules(Some(v1)).await?.len() == 2);

    let v2 = deploy_scheduled(s, "report", "r2", &[schedule("nightly", T0 + 200, None)]).await?;
    ensure!(
        schedule_rows(ctx.second.as_ref()).await?
            == vec![
                (other.0, "tick".to_owned(), T0 + 10, Some(3)),
                (v2.0, "nightly".to_owned(), T0 + 200, None),
            ],
        "v2 replaced v1's rows: {:?}",
        schedule_rows(s).await?
    );
    deploy_scheduled(s, "report", "r3", &[]).await?;
    ensure!(
        schedule_rows(s).await? == vec![(other.0, "tick".to_owned(), T0 + 10, Some(3))],
        "a newer deployment without timer starts leaves the process none"
    );
    Ok(())
}

/// A claim takes the rows due at its instant, earliest first, up to its limit, and
/// leases them: no other claim gets them until the lease lapses.
pub async fn schedule_claims_take_due_rows_earliest_first_and_lease_them(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let a = deploy_scheduled(
        s,
        "a",
        "a1",
        &[
            schedule("late", T0 + 300, None),
            schedule("early", T0 + 100, None),
        ],
    )
    .await?;
    let b = deploy_scheduled(s, "b", "b1", &[schedule("mid", T0 + 200, Some(2))]).await?;
    ensure!(s
        .claim_due_schedules(poll(T0 + 99, 1_000, "r1", 10))
        .await?
        .is_empty());
    let first = s
        .claim_due_schedules(poll(T0 + 250, 1_000, "r1", 1))
        .await?;
    ensure!(
        first
            == vec![ScheduleRecord {
                deployment: a,
                node: "early".to_owned(),
                due_at_ms: T0 + 100,
                remaining: None,
            }],
        "the earliest due row, within the limit: {first:?}"
    );
    let rest = ctx
        .second
        .claim_due_schedules(poll(T0 + 250, 1_000, "r2", 10))
        .await?;
    ensure!(
        rest.iter()
            .map(|r| (r.deployment, r.node.as_str()))
            .collect::<Vec<_>>()
            == vec![(b, "mid")],
        "the leased row is not claimed again; the not-yet-due one is not claimed: {rest:?}"
    );
    ensure!(rest[0].remaining == Some(2));
    // A lease holds up to and including its end, then lapses.
    let now_due = s
        .claim_due_schedules(poll(T0 + 1_250, 1_000, "r2", 10))
        .await?;
    ensure!(
        now_due.iter().map(|r| r.node.as_str()).collect::<Vec<_>>() == vec!["late"],
        "only the row due since the first claims, the others leased up to now: {now_due:?}"
    );
    let lapsed = s
        .claim_due_schedules(poll(T0 + 1_251, 1_000, "r2", 10))
        .await?;
    ensure!(
        lapsed.iter().map(|r| r.node.as_str()).collect::<Vec<_>>() == vec!["early", "mid"],
        "lapsed leases are claimable again, earliest first: {lapsed:?}"
    );
    ensure!(s
        .claim_due_schedules(poll(T0, 1_000, "r1", 0))
        .await?
        .is_empty());
    Ok(())
}

/// A creation carrying a schedule advance moves the row on (and frees its lease) with
/// the instance; one naming an occurrence the row is no longer at is a conflict that
/// writes nothing at all, in a batch whose other commits still apply.
pub async fn a_start_moves_its_schedule_on_and_a_stale_one_writes_nothing(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy_scheduled(s, "report", "r1", &[schedule("tick", T0 + 100, Some(3))]).await?;
    ensure!(
        s.claim_due_schedules(poll(T0 + 100, 60_000, "r1", 10))
            .await?
            .len()
            == 1
    );
    let start = scheduled_start(id(1), dep, "tick", T0 + 100, Some((T0 + 200, Some(2))));
    ensure!(matches!(
        commit_one(s, start).await?,
        CommitOutcome::Applied { fence: 1 }
    ));
    ensure!(
        schedule_rows(s).await? == vec![(dep.0, "tick".to_owned(), T0 + 200, Some(2))],
        "moved on"
    );
    // The lease went with the move: the next occurrence is claimable when due.
    ensure!(
        s.claim_due_schedules(poll(T0 + 200, 60_000, "r2", 10))
            .await?
            .len()
            == 1
    );

    // A replica that claimed the first occurrence late starts it again: refused.
    let mut timer_row = scheduled_start(id(2), dep, "tick", T0 + 100, Some((T0 + 200, Some(2))));
    timer_row.timers.arm = vec![timer(id(2), "t:a", T0 + 5_000, 1)];
    let plain = commit(id(3), None, dep);
    let outcomes = s.commit(vec![timer_row, plain]).await?;
    ensure!(
        matches!(
            outcomes[0],
            CommitOutcome::Conflict {
                current_fence: None
            }
        ) && matches!(outcomes[1], CommitOutcome::Applied { .. }),
        "the stale start conflicts, the other commit applies: {outcomes:?}"
    );
    ensure!(
        s.instance(id(2)).await?.is_none(),
        "no instance of the stale start"
    );
    ensure!(
        s.timers(id(2)).await?.is_empty(),
        "no rows of the stale start"
    );
    ensure!(
        schedule_rows(s).await? == vec![(dep.0, "tick".to_owned(), T0 + 200, Some(2))],
        "the schedule is where the first start left it"
    );
    // A start naming a node with no schedule is refused the same way.
    let unknown = scheduled_start(id(4), dep, "nope", T0 + 100, None);
    ensure!(matches!(
        commit_one(s, unknown).await?,
        CommitOutcome::Conflict { .. }
    ));
    ensure!(s.instance(id(4)).await?.is_none());
    Ok(())
}

/// The start of a schedule's last occurrence deletes its row; a retirement deletes the
/// deployment's rows, and a start racing it afterwards is refused.
pub async fn the_last_start_deletes_its_schedule_and_retirement_deletes_the_rest(
    ctx: Ctx,
) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy_scheduled(
        s,
        "report",
        "r1",
        &[
            schedule("once", T0 + 10, Some(1)),
            schedule("tick", T0 + 20, None),
        ],
    )
    .await?;
    let last = scheduled_start(id(1), dep, "once", T0 + 10, None);
    ensure!(matches!(
        commit_one(s, last).await?,
        CommitOutcome::Applied { .. }
    ));
    ensure!(schedule_rows(s).await? == vec![(dep.0, "tick".to_owned(), T0 + 20, None)]);
    // Retirement waits for no schedule, only for instances: end the one started.
    let mut done = commit(id(1), Some(1), dep);
    done.state.status = InstanceStatus::Completed;
    ensure!(matches!(
        commit_one(s, done).await?,
        CommitOutcome::Applied { .. }
    ));
    ensure!(s.retire(dep).await? == RetireOutcome::Retired);
    ensure!(
        schedule_rows(ctx.second.as_ref()).await?.is_empty(),
        "retired with its rows"
    );
    let late = scheduled_start(id(2), dep, "tick", T0 + 20, Some((T0 + 40, None)));
    ensure!(!matches!(
        commit_one(s, late).await?,
        CommitOutcome::Applied { .. }
    ));
    ensure!(s.instance(id(2)).await?.is_none());
    Ok(())
}

/// Two replicas claim and start the occurrences of one schedule as fast as they can:
/// every occurrence starts exactly one instance, each instance id derived from its
/// occurrence as the runtime derives it, and the schedule ends after its last start.
pub async fn replicas_racing_one_occurrence_start_one_instance(ctx: Ctx) -> Result<()> {
    const STARTS: u32 = 40;
    let dep = deploy_scheduled(
        &*ctx.store,
        "report",
        "r1",
        &[schedule("tick", T0 + 1, Some(STARTS))],
    )
    .await?;
    let replica = |store: Arc<dyn Store>, owner: &'static str| {
        tokio::spawn(async move {
            let mut started = Vec::new();
            // Each claim's lease is shorter than the clock's step, so the replicas
            // keep claiming the same occurrences: only the commit keeps them apart.
            for round in 0..(STARTS as i64 * 8) {
                let now = T0 + 1 + round;
                for row in store.claim_due_schedules(poll(now, 0, owner, 4)).await? {
                    let remaining = row.remaining.expect("bounded");
                    let next = (remaining > 1).then(|| (row.due_at_ms + 1, Some(remaining - 1)));
                    let instance = id(row.due_at_ms as u128);
                    let start = scheduled_start(instance, dep, &row.node, row.due_at_ms, next);
                    let outcome = store.commit(vec![start]).await?;
                    if matches!(outcome[0], CommitOutcome::Applied { .. }) {
                        started.push(row.due_at_ms);
                    }
                }
                tokio::task::yield_now().await;
            }
            Ok::<_, StoreError>(started)
        })
    };
    let a = replica(ctx.store.clone(), "replica-a");
    let b = replica(ctx.second.clone(), "replica-b");
    let (a, b) = (a.await??, b.await??);
    let mut all: Vec<i64> = a.iter().chain(b.iter()).copied().collect();
    all.sort();
    let expected: Vec<i64> = (0..STARTS as i64).map(|n| T0 + 1 + n).collect();
    ensure!(
        all == expected,
        "each occurrence started once: {} starts for {STARTS} occurrences",
        all.len()
    );
    ensure!(
        schedule_rows(&*ctx.store).await?.is_empty(),
        "ended after its last start"
    );
    println!(
        "{:?}: replica a started {}, replica b {}",
        ctx.label,
        a.len(),
        b.len()
    );
    Ok(())
}

/// An occurrence the engine cannot start is skipped (moved on, or the schedule deleted
/// after its last) under the same compare-and-swap on the due instant as a start.
pub async fn an_occurrence_can_be_skipped_only_where_its_schedule_stands(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy_scheduled(s, "report", "r1", &[schedule("tick", T0 + 10, Some(2))]).await?;
    let skip = |fired: i64, next: Option<(i64, Option<u32>)>| ScheduleAdvance {
        node: "tick".to_owned(),
        fired_at_ms: fired,
        next,
    };
    ensure!(
        s.claim_due_schedules(poll(T0 + 10, 60_000, "r1", 10))
            .await?
            .len()
            == 1
    );
    ensure!(
        !s.advance_schedule(dep, &skip(T0 + 9, None)).await?,
        "not where it stands"
    );
    ensure!(schedule_rows(s).await? == vec![(dep.0, "tick".to_owned(), T0 + 10, Some(2))]);
    ensure!(
        s.advance_schedule(dep, &skip(T0 + 10, Some((T0 + 20, Some(1)))))
            .await?
    );
    ensure!(schedule_rows(s).await? == vec![(dep.0, "tick".to_owned(), T0 + 20, Some(1))]);
    // The lease went with the move.
    ensure!(
        s.claim_due_schedules(poll(T0 + 20, 60_000, "r2", 10))
            .await?
            .len()
            == 1
    );
    ensure!(
        !ctx.second
            .advance_schedule(dep, &skip(T0 + 10, Some((T0 + 20, Some(1)))))
            .await?,
        "a second skip of the same occurrence does nothing"
    );
    ensure!(s.advance_schedule(dep, &skip(T0 + 20, None)).await?);
    ensure!(
        schedule_rows(s).await?.is_empty(),
        "the last one deletes the row"
    );
    ensure!(!s.advance_schedule(dep, &skip(T0 + 20, None)).await?);
    ensure!(
        s.instances(&InstanceFilter::default()).await?.is_empty(),
        "nothing started"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The input journal (SPEC G3)

/// The journal row of step `seq` of an instance on `deployment` at `at_ms`, with a
/// distinct input, delta and hashes per `(seq, tag)` and its own `row_hash`. The bytes
/// include a zero byte and bytes above 0x7f, so a store that kept them as text would
/// fail the comparison.
pub fn journal_entry(seq: u64, deployment: DeploymentId, at_ms: i64, tag: u8) -> JournalEntry {
    let mut entry = JournalEntry {
        seq,
        deployment,
        at_ms,
        input: format!("{{\"message\":\"paid\",\"seq\":{seq},\"tag\":{tag},\"name\":\"Zoë\"}}"),
        delta: vec![0x00, tag, 0xff, seq as u8, 0x80],
        snapshot_hash: vec![tag ^ seq as u8; HashKind::CURRENT.hash_len()],
        effects_hash: [0xe0 | tag, 0x00, 0x7f, 0xff]
            .into_iter()
            .cycle()
            .take(HashKind::CURRENT.hash_len())
            .collect(),
        row_hash: Vec::new(),
    };
    entry.row_hash = entry.row_hash_of();
    entry
}

/// `c` carrying `entry` as its journal row.
fn journaled(mut c: Commit, entry: &JournalEntry) -> Commit {
    c.journal = Some(Box::new(entry.clone()));
    c
}

/// The whole journal of `instance`, read one page of `page` rows at a time after the
/// last `seq` seen.
async fn journal_pages(
    s: &dyn Store,
    instance: InstanceId,
    page: u32,
) -> Result<Vec<JournalEntry>> {
    let mut out: Vec<JournalEntry> = Vec::new();
    loop {
        let after = out.last().map_or(0, |e| e.seq);
        let rows = s.journal(instance, after, page).await?;
        ensure!(rows.len() <= page as usize, "a page of {} rows", rows.len());
        if rows.is_empty() {
            return Ok(out);
        }
        out.extend(rows);
    }
}

/// A commit with a journal row appends it in its transaction, and only when it applies:
/// rows read back field for field in `seq` order, `after` and `limit` page them, a commit
/// that loses its compare-and-swap (an update or a creation), repeats a business key or
/// creates on a retired deployment appends nothing, nor does a commit without one.
pub async fn journal_rows_are_appended_with_their_commit_only(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let e1 = journal_entry(1, dep, T0, 1);
    let e2 = journal_entry(2, dep, T0 + 10, 1);
    let mut e3 = journal_entry(3, dep, T0 + 20, 1);
    // An empty delta and input are still rows (a step that changed nothing).
    e3.delta = Vec::new();
    e3.input = String::new();
    e3.row_hash = e3.row_hash_of();

    ensure!(
        commit_one(s, journaled(commit(id(1), None, dep), &e1)).await?
            == CommitOutcome::Applied { fence: 1 }
    );
    ensure!(
        commit_one(s, journaled(commit(id(1), Some(1), dep), &e2)).await?
            == CommitOutcome::Applied { fence: 2 }
    );
    // A stale update and a second creation lose their CAS and append nothing.
    let stale = commit_one(
        s,
        journaled(
            commit(id(1), Some(1), dep),
            &journal_entry(2, dep, T0 + 11, 9),
        ),
    )
    .await?;
    ensure!(
        stale
            == CommitOutcome::Conflict {
                current_fence: Some(2)
            },
        "{stale:?}"
    );
    let again = commit_one(
        s,
        journaled(commit(id(1), None, dep), &journal_entry(1, dep, T0 + 12, 9)),
    )
    .await?;
    ensure!(
        again
            == CommitOutcome::Conflict {
                current_fence: Some(2)
            },
        "{again:?}"
    );
    ensure!(
        s.journal(id(1), 0, 0).await? == vec![e1.clone(), e2.clone()],
        "a loser changed the journal"
    );
    ensure!(
        commit_one(s, journaled(commit(id(1), Some(2), dep), &e3)).await?
            == CommitOutcome::Applied { fence: 3 }
    );
    // Without a journal row (the journal off), the commit writes none.
    ensure!(
        commit_one(s, commit(id(1), Some(3), dep)).await? == CommitOutcome::Applied { fence: 4 }
    );

    let all = vec![e1.clone(), e2.clone(), e3.clone()];
    let read = s.journal(id(1), 0, 0).await?;
    ensure!(read == all, "{read:?}");
    ensure!(read.iter().all(JournalEntry::is_intact));
    ensure!(
        ctx.second.journal(id(1), 0, 0).await? == all,
        "the second handle"
    );
    ensure!(
        s.journal(id(1), 0, u32::MAX).await? == all,
        "a limit past the cap"
    );
    ensure!(s.journal(id(1), 1, 0).await? == vec![e2.clone(), e3.clone()]);
    ensure!(s.journal(id(1), 0, 2).await? == vec![e1.clone(), e2.clone()]);
    ensure!(s.journal(id(1), 1, 1).await? == vec![e2.clone()]);
    ensure!(
        s.journal(id(1), 3, 0).await?.is_empty(),
        "nothing after the last"
    );
    ensure!(
        s.journal(id(1), 4, 0).await?.is_empty(),
        "no row for fence 4"
    );
    ensure!(s.journal(id(1), u64::MAX, 0).await?.is_empty());
    ensure!(journal_pages(s, id(1), 1).await? == all, "page by page");
    ensure!(journal_pages(s, id(1), 2).await? == all, "two at a time");
    ensure!(
        s.journal(id(9), 0, 0).await?.is_empty(),
        "an unknown instance"
    );

    // In one batch: a creation and a stale update, each with its row, then two steps
    // of one instance (two rounds). Only the winners' rows are appended.
    let f1 = journal_entry(1, dep, T0 + 30, 2);
    let outcomes = s
        .commit(vec![
            journaled(commit(id(2), None, dep), &f1),
            journaled(
                commit(id(1), Some(1), dep),
                &journal_entry(2, dep, T0 + 30, 9),
            ),
        ])
        .await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::Applied { fence: 1 },
                CommitOutcome::Conflict {
                    current_fence: Some(4)
                },
            ],
        "{outcomes:?}"
    );
    let (f2, f3) = (
        journal_entry(2, dep, T0 + 40, 2),
        journal_entry(3, dep, T0 + 41, 2),
    );
    let outcomes = s
        .commit(vec![
            journaled(commit(id(2), Some(1), dep), &f2),
            journaled(commit(id(2), Some(2), dep), &f3),
        ])
        .await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::Applied { fence: 2 },
                CommitOutcome::Applied { fence: 3 },
            ],
        "{outcomes:?}"
    );
    ensure!(s.journal(id(2), 0, 0).await? == vec![f1, f2, f3]);
    ensure!(
        s.journal(id(1), 0, 0).await? == all,
        "the loser in the batch"
    );

    // A repeated business key and a retired deployment are refused with nothing written.
    ensure!(
        commit_one(
            s,
            journaled(keyed(id(3), dep, "k"), &journal_entry(1, dep, T0, 3))
        )
        .await?
            == CommitOutcome::Applied { fence: 1 }
    );
    let duplicate = commit_one(
        s,
        journaled(keyed(id(4), dep, "k"), &journal_entry(1, dep, T0, 4)),
    )
    .await?;
    ensure!(
        duplicate == CommitOutcome::DuplicateBusinessKey { existing: id(3) },
        "{duplicate:?}"
    );
    ensure!(
        s.journal(id(4), 0, 0).await?.is_empty(),
        "a refused key's row"
    );
    let old = deploy(s, "h2").await?;
    ensure!(s.retire(old).await? == RetireOutcome::Retired);
    let retired = commit_one(
        s,
        journaled(commit(id(5), None, old), &journal_entry(1, old, T0, 5)),
    )
    .await?;
    ensure!(retired == CommitOutcome::DeploymentRetired, "{retired:?}");
    ensure!(
        s.journal(id(5), 0, 0).await?.is_empty(),
        "a retired deployment's row"
    );
    Ok(())
}

/// The purge takes the journal rows of the instances it deletes (counted in
/// `PurgeOutcome::journal`) and no other instance's; the purged instance's `seq`s are free
/// again for a new instance of the same id.
pub async fn journal_rows_go_with_a_purged_instance(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    commit_one(
        s,
        journaled(commit(id(1), None, dep), &journal_entry(1, dep, T0, 1)),
    )
    .await?;
    let end = with_status(id(1), Some(1), dep, InstanceStatus::Completed, T0 + 10);
    commit_one(s, journaled(end, &journal_entry(2, dep, T0 + 10, 1))).await?;
    let end = with_status(id(3), None, dep, InstanceStatus::Cancelled, T0 + 5);
    commit_one(s, journaled(end, &journal_entry(1, dep, T0 + 5, 3))).await?;
    let kept = vec![
        journal_entry(1, dep, T0, 2),
        journal_entry(2, dep, T0 + 10, 2),
    ];
    commit_one(s, journaled(commit(id(2), None, dep), &kept[0])).await?;
    commit_one(s, journaled(commit(id(2), Some(1), dep), &kept[1])).await?;

    let out = s.purge_finished(purge(T0 + 100, 10)).await?;
    let expected = PurgeOutcome {
        instances: 2,
        journal: 3,
        keys: 0,
        ..PurgeOutcome::default()
    };
    ensure!(out == expected, "{out:?}");
    ensure!(s.journal(id(1), 0, 0).await?.is_empty(), "journal of id(1)");
    ensure!(s.journal(id(3), 0, 0).await?.is_empty(), "journal of id(3)");
    ensure!(ctx.second.journal(id(1), 0, 0).await?.is_empty());
    ensure!(
        s.journal(id(2), 0, 0).await? == kept,
        "the running instance's rows"
    );
    ensure!(s.purge_finished(purge(T0 + 100, 10)).await? == PurgeOutcome::default());
    let reborn = journal_entry(1, dep, T0 + 200, 7);
    ensure!(
        commit_one(s, journaled(commit(id(1), None, dep), &reborn)).await?
            == CommitOutcome::Applied { fence: 1 }
    );
    ensure!(s.journal(id(1), 0, 0).await? == vec![reborn]);
    Ok(())
}

fn key_name(instance: InstanceId, kind: KeyKind, node: &str, attempt: u32) -> KeyName {
    KeyName {
        instance,
        kind,
        node: node.to_owned(),
        attempt,
    }
}

/// Camunda 8 keys (issue 28): a name gets a key from the Zeebe-like sequence the first
/// time it is asked for, the same key every time after, in the order asked; a key reads
/// back to its name; names differing in any part (kind, node, attempt, instance) get
/// different keys; an unknown key reads as nothing; too many names at once are refused.
pub async fn camunda_keys_are_given_once_per_name_and_read_back(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    ensure!(s.camunda_keys(&[]).await?.is_empty());
    let dep = deploy(s, "h1").await?;
    for n in 1..=5 {
        lived(s, id(n), dep, InstanceStatus::Running, T0).await?;
    }
    let names = vec![
        KeyName::instance(id(1)),
        key_name(id(1), KeyKind::Job, "pay", 1),
        key_name(id(1), KeyKind::Job, "pay", 2),
        key_name(id(1), KeyKind::Job, "pay@2", 1),
        key_name(id(1), KeyKind::Element, "pay", 0),
        key_name(id(1), KeyKind::UserTask, "pay", 0),
        key_name(id(1), KeyKind::Incident, "17", 0),
        key_name(id(1), KeyKind::Variable, "pay", 0),
        KeyName::instance(id(2)),
    ];
    let keys = s.camunda_keys(&names).await?;
    ensure!(keys.len() == names.len(), "{keys:?}");
    let distinct: BTreeSet<i64> = keys.iter().copied().collect();
    ensure!(distinct.len() == keys.len(), "one key per name: {keys:?}");
    ensure!(
        keys.iter().all(|k| *k >= CAMUNDA_KEY_FIRST && k >> 51 == 1),
        "keys start at Zeebe's first key of partition 1: {keys:?}"
    );
    let newest = *keys.iter().max().unwrap_or(&0);
    // Asked again through the other handle, in another order and with a new name among
    // them: the same keys, and a newer one for the new name.
    let mut again_names = names.clone();
    again_names.reverse();
    let fresh_name = key_name(id(3), KeyKind::Job, "ship", 1);
    again_names.insert(3, fresh_name.clone());
    let again = ctx.second.camunda_keys(&again_names).await?;
    ensure!(again.len() == again_names.len(), "{again:?}");
    for (name, key) in again_names.iter().zip(&again) {
        match names.iter().position(|n| n == name) {
            Some(pos) => ensure!(*key == keys[pos], "{name:?}: {} then {key}", keys[pos]),
            None => ensure!(*key > newest, "a new name gets a newer key: {key}"),
        }
    }
    for (name, key) in names.iter().zip(&keys) {
        let read = ctx.second.camunda_key(*key).await?;
        ensure!(read.as_ref() == Some(name), "{key} reads back as {read:?}");
    }
    for unknown in [0, -5, i64::MAX] {
        ensure!(s.camunda_key(unknown).await?.is_none(), "{unknown}");
    }
    let too_many: Vec<KeyName> = (0..=CAMUNDA_KEYS_MAX as u32)
        .map(|n| key_name(id(4), KeyKind::Job, "pay", n + 1))
        .collect();
    ensure!(
        matches!(s.camunda_keys(&too_many).await, Err(StoreError::Corrupt(_))),
        "more than CAMUNDA_KEYS_MAX names are refused"
    );
    // Many at once (a store may read and write them in several statements): one key
    // per name, each newer than every key before, and the same again.
    let many: Vec<KeyName> = (1..=300u32)
        .map(|n| key_name(id(5), KeyKind::Job, "pay", n))
        .collect();
    let first = s.camunda_keys(&many).await?;
    let distinct_many: BTreeSet<i64> = first.iter().copied().collect();
    ensure!(distinct_many.len() == many.len(), "one key per name");
    ensure!(
        first.iter().all(|k| *k > newest),
        "newer than every key before"
    );
    ensure!(
        ctx.second.camunda_keys(&many).await? == first,
        "the same keys again"
    );
    let after = s.camunda_keys(&too_many[..1]).await?[0];
    let fresh = s.camunda_keys(&[fresh_name]).await?[0];
    ensure!(
        after > fresh,
        "a refused call gave nothing a key: {after} after {fresh}"
    );
    Ok(())
}

/// Two handles asking for the same new names at once end with one key per name.
pub async fn camunda_keys_from_two_handles_at_once_agree(ctx: Ctx) -> Result<()> {
    let dep = deploy(&*ctx.store, "h1").await?;
    lived(&*ctx.store, id(9), dep, InstanceStatus::Running, T0).await?;
    let names: Vec<KeyName> = (1..=20u32)
        .map(|n| key_name(id(9), KeyKind::Job, "pay", n))
        .collect();
    let (a, b) = (ctx.store.clone(), ctx.second.clone());
    let (na, nb) = (names.clone(), names.clone());
    let one = tokio::spawn(async move { a.camunda_keys(&na).await });
    let two = tokio::spawn(async move { b.camunda_keys(&nb).await });
    let one = one.await??;
    let two = two.await??;
    ensure!(one == two, "{one:?} vs {two:?}");
    for (name, key) in names.iter().zip(&one) {
        ensure!(ctx.store.camunda_key(*key).await?.as_ref() == Some(name));
    }
    Ok(())
}

/// Retention takes an ended instance's keys with it (counted as `keys`) and leaves a
/// kept instance's; a key is never handed out again after its row went.
pub async fn camunda_keys_go_with_a_purged_instance_and_are_never_reused(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    lived(s, id(1), dep, InstanceStatus::Completed, T0 + 10).await?;
    lived(s, id(2), dep, InstanceStatus::Running, T0).await?;
    let kept_name = KeyName::instance(id(2));
    let kept = s.camunda_keys(std::slice::from_ref(&kept_name)).await?[0];
    // The purged instance's keys are the newest, so a reuse would show.
    let gone = s
        .camunda_keys(&[
            KeyName::instance(id(1)),
            key_name(id(1), KeyKind::Job, "pay", 1),
            key_name(id(1), KeyKind::Job, "pay", 2),
        ])
        .await?;
    let out = s.purge_finished(purge(T0 + 500, 100)).await?;
    ensure!(out.instances == 1 && out.keys == 3, "{out:?}");
    for key in &gone {
        ensure!(
            s.camunda_key(*key).await?.is_none(),
            "{key} went with its instance"
        );
    }
    ensure!(s.camunda_key(kept).await?.as_ref() == Some(&kept_name));
    // The purged instance's names get no key again: none outlives its instance.
    ensure!(
        matches!(
            s.camunda_keys(&[KeyName::instance(id(1))]).await,
            Err(StoreError::UnknownInstance(i)) if i == id(1)
        ),
        "a purged instance's name is given no key"
    );
    lived(s, id(3), dep, InstanceStatus::Running, T0).await?;
    let fresh = s.camunda_keys(&[KeyName::instance(id(3))]).await?[0];
    let newest = gone.iter().copied().max().unwrap_or(0);
    ensure!(
        fresh > newest,
        "a purged key is never handed out again: {fresh} after {newest}"
    );
    Ok(())
}

/// A commit that withdraws a pull task drops its job keys, and one that withdraws a user
/// task drops that task's key: what is offered there next (a pass after a loop, the
/// attempt after a park) gets keys of its own, never the old ones. Other kinds stay, and
/// so do other nodes' and other instances' keys.
pub async fn camunda_keys_of_a_withdrawn_task_go_with_it(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    lived(s, id(2), dep, InstanceStatus::Running, T0).await?;
    let mut c = commit(id(1), None, dep);
    c.pull.offer = vec![
        pull_row(id(1), "work", "t", T0),
        pull_row(id(1), "ship", "t", T0),
    ];
    c.user_tasks.offer = vec![user_task(id(1), "review", dep, T0, None, &["g"], &[])];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 1 });
    let names = [
        key_name(id(1), KeyKind::Job, "work", 1),
        key_name(id(1), KeyKind::Job, "work", 2),
        key_name(id(1), KeyKind::Element, "work", 0),
        key_name(id(1), KeyKind::UserTask, "review", 0),
        key_name(id(1), KeyKind::Job, "other", 1),
        key_name(id(2), KeyKind::Job, "work", 1),
        key_name(id(1), KeyKind::Job, "ship", 1),
        key_name(id(1), KeyKind::Element, "ship", 0),
    ];
    let before = s.camunda_keys(&names).await?;
    // Two tasks withdrawn in one commit: each takes only its own job keys.
    let mut c = commit(id(1), Some(1), dep);
    c.pull.withdraw = vec!["work".into(), "ship".into()];
    c.user_tasks.withdraw = vec!["review".into()];
    ensure!(commit_one(s, c).await? == CommitOutcome::Applied { fence: 2 });
    for (i, gone) in [
        (0, true),
        (1, true),
        (2, false),
        (3, true),
        (4, false),
        (5, false),
        (6, true),
        (7, false),
    ] {
        let read = ctx.second.camunda_key(before[i]).await?;
        ensure!(
            read.is_none() == gone,
            "{:?}: {}",
            names[i],
            if gone { "still named" } else { "gone" }
        );
    }
    let newest = *before.iter().max().unwrap_or(&0);
    let again = s.camunda_keys(&names[..2]).await?;
    ensure!(
        again.iter().all(|k| *k > newest),
        "the next offer's job keys are new: {again:?} after {before:?}"
    );
    Ok(())
}

/// A message buffered at `at` for `ttl` ms under `name` and `key`, with an optional id.
fn buffered(name: &str, key: &str, id: Option<&str>, at: i64, ttl: i64) -> NewBufferedMessage {
    NewBufferedMessage {
        key: CAMUNDA_KEY_FIRST + at - T0,
        name: name.to_owned(),
        correlation_key: key.to_owned(),
        message_id: id.map(str::to_owned),
        variables: r#"{"paid":true}"#.to_owned(),
        published_at_ms: at,
        expires_at_ms: at + ttl,
    }
}

async fn buffer(s: &dyn Store, message: NewBufferedMessage) -> Result<i64> {
    match s.buffer_message(&message).await? {
        BufferOutcome::Buffered { id } => Ok(id),
        other => Err(anyhow!("not buffered: {other:?}")),
    }
}

fn live<'a>(name_and_key: Option<(&'a str, &'a str)>, now_ms: i64) -> BufferQuery<'a> {
    BufferQuery {
        name_and_key,
        after: 0,
        now_ms,
        limit: 0,
    }
}

/// The message buffer (issue 28): messages read back whole, by name and key or all,
/// oldest first, only while live (an expiry is the first instant a message is gone),
/// past a cursor and up to a limit; expiry deletes the expired ones, earliest first, up
/// to its limit.
pub async fn buffered_messages_are_listed_live_oldest_first_and_expire(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    ensure!(s.buffered_messages(live(None, T0)).await?.is_empty());
    let a = buffer(s, buffered("paid", "order-1", None, T0, 1_000)).await?;
    let b = buffer(s, buffered("paid", "order-2", Some("m-2"), T0 + 1, 100)).await?;
    let c = buffer(s, buffered("paid", "order-1", None, T0 + 2, 50)).await?;
    ensure!(a < b && b < c, "ids increase: {a} {b} {c}");
    let order1 = s
        .buffered_messages(live(Some(("paid", "order-1")), T0 + 3))
        .await?;
    ensure!(
        order1.iter().map(|m| m.id).collect::<Vec<_>>() == vec![a, c],
        "by name and key, oldest first: {order1:?}"
    );
    let first = &order1[0];
    ensure!(first.name == "paid" && first.correlation_key == "order-1");
    ensure!(first.key == CAMUNDA_KEY_FIRST && first.message_id.is_none());
    ensure!(first.variables == r#"{"paid":true}"# && first.takers.is_empty());
    ensure!(first.published_at_ms == T0 && first.expires_at_ms == T0 + 1_000);
    let all = s.buffered_messages(live(None, T0 + 3)).await?;
    ensure!(all.iter().map(|m| m.id).collect::<Vec<_>>() == vec![a, b, c]);
    ensure!(all[1].message_id.as_deref() == Some("m-2"));
    let past_a = s
        .buffered_messages(BufferQuery {
            after: a,
            limit: 1,
            ..live(None, T0 + 3)
        })
        .await?;
    ensure!(
        past_a.iter().map(|m| m.id).collect::<Vec<_>>() == vec![b],
        "{past_a:?}"
    );
    // `c` expires at T0 + 52: gone at that instant, not before.
    let at_51 = s
        .buffered_messages(live(Some(("paid", "order-1")), T0 + 51))
        .await?;
    ensure!(at_51.len() == 2);
    let at_52 = s
        .buffered_messages(live(Some(("paid", "order-1")), T0 + 52))
        .await?;
    ensure!(
        at_52.iter().map(|m| m.id).collect::<Vec<_>>() == vec![a],
        "{at_52:?}"
    );
    ensure!(s
        .buffered_messages(live(Some(("PAID", "order-1")), T0))
        .await?
        .is_empty());
    // Expiry: nothing at T0 + 51; at T0 + 101 `c` (T0 + 52) and `b` (T0 + 101) are due,
    // one at a time with a limit of 1.
    ensure!(s.expire_messages(T0 + 51, 10).await? == 0);
    ensure!(s.expire_messages(T0 + 101, 1).await? == 1);
    ensure!(
        s.buffered_messages(live(None, T0)).await?.len() == 2,
        "c went first"
    );
    ensure!(s.expire_messages(T0 + 101, 10).await? == 1);
    let left = s.buffered_messages(live(None, T0)).await?;
    ensure!(left.iter().map(|m| m.id).collect::<Vec<_>>() == vec![a]);
    let d = buffer(s, buffered("paid", "order-1", None, T0 + 200, 10)).await?;
    ensure!(d > c, "ids are never reused");
    Ok(())
}

/// A message id is unique among the live messages of its name and correlation key: a
/// second publication with it is refused (the first's key reported) and writes nothing;
/// once the first expired, or under another key or name, the id is free.
pub async fn a_buffered_message_id_is_refused_twice_while_live(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let first = buffer(s, buffered("paid", "order-1", Some("m-1"), T0, 100)).await?;
    let again = s
        .buffer_message(&buffered("paid", "order-1", Some("m-1"), T0 + 10, 100))
        .await?;
    ensure!(
        again
            == BufferOutcome::Duplicate {
                key: CAMUNDA_KEY_FIRST
            },
        "{again:?}"
    );
    ensure!(
        ctx.second
            .buffer_message(&buffered("paid", "order-1", Some("m-1"), T0 + 99, 5))
            .await?
            == BufferOutcome::Duplicate {
                key: CAMUNDA_KEY_FIRST
            }
    );
    ensure!(s.buffered_messages(live(None, T0)).await?.len() == 1);
    // Without an id, or under another key or name: no duplicate.
    buffer(s, buffered("paid", "order-1", None, T0 + 11, 100)).await?;
    buffer(s, buffered("paid", "order-1", None, T0 + 12, 100)).await?;
    buffer(s, buffered("paid", "order-2", Some("m-1"), T0 + 13, 100)).await?;
    buffer(s, buffered("shipped", "order-1", Some("m-1"), T0 + 14, 100)).await?;
    // At T0 + 100 the first has expired: the id is free, and the expired row is gone.
    let later = buffer(s, buffered("paid", "order-1", Some("m-1"), T0 + 100, 100)).await?;
    let now = s
        .buffered_messages(live(Some(("paid", "order-1")), T0 + 50))
        .await?;
    ensure!(
        !now.iter().any(|m| m.id == first) && now.iter().any(|m| m.id == later),
        "{now:?}"
    );
    Ok(())
}

/// A step that delivers a buffered message records its process as a taker in the same
/// transaction; the same process taking it again, a take of an expired or unknown
/// message, and a second take of it later in one batch are refused as `MessageTaken`
/// and write nothing (fence unchanged); another process takes it too.
pub async fn a_buffered_message_is_taken_once_per_process_with_its_step(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "takes").await?;
    for n in 1..=4 {
        ensure!(
            commit_one(s, commit(id(n), None, dep)).await? == CommitOutcome::Applied { fence: 1 }
        );
    }
    let m = buffer(s, buffered("paid", "order-1", None, T0, 100)).await?;
    let take = |n: u128, fence: u64, process: &str, message: i64, at: i64| {
        let mut c = commit(id(n), Some(fence), dep);
        c.now_ms = at;
        c.state.snapshot = vec![9];
        c.message_take = Some(Box::new(MessageTake {
            message,
            process: process.to_owned(),
        }));
        c
    };
    ensure!(
        commit_one(s, take(1, 1, "billing", m, T0 + 1)).await?
            == CommitOutcome::Applied { fence: 2 }
    );
    let read = s.buffered_messages(live(None, T0 + 1)).await?;
    ensure!(read[0].takers == vec!["billing".to_owned()], "{read:?}");
    // The same process again (another instance of it): refused, nothing written.
    ensure!(commit_one(s, take(2, 1, "billing", m, T0 + 2)).await? == CommitOutcome::MessageTaken);
    let two = s
        .instance(id(2))
        .await?
        .ok_or_else(|| anyhow!("instance 2"))?;
    ensure!(
        two.fence == 1 && two.snapshot == vec![1, 2, 3],
        "nothing written: {two:?}"
    );
    // Two processes in one batch, then the first of them again later in it.
    let outcomes = s
        .commit(vec![
            take(2, 1, "audit", m, T0 + 3),
            take(3, 1, "shipping", m, T0 + 3),
            take(4, 1, "audit", m, T0 + 3),
        ])
        .await?;
    ensure!(
        outcomes
            == vec![
                CommitOutcome::Applied { fence: 2 },
                CommitOutcome::Applied { fence: 2 },
                CommitOutcome::MessageTaken,
            ],
        "{outcomes:?}"
    );
    let read = s.buffered_messages(live(None, T0 + 3)).await?;
    ensure!(
        read[0].takers
            == vec![
                "audit".to_owned(),
                "billing".to_owned(),
                "shipping".to_owned()
            ],
        "sorted: {read:?}"
    );
    // Expired (at T0 + 100) or unknown: refused.
    ensure!(commit_one(s, take(4, 1, "other", m, T0 + 100)).await? == CommitOutcome::MessageTaken);
    ensure!(
        commit_one(s, take(4, 1, "other", m + 1_000, T0 + 5)).await? == CommitOutcome::MessageTaken
    );
    ensure!(s.instance(id(4)).await?.map(|i| i.fence) == Some(1));
    // A stale fence is a conflict and records no taker.
    ensure!(matches!(
        commit_one(s, take(4, 7, "other", m, T0 + 5)).await?,
        CommitOutcome::Conflict { .. }
    ));
    ensure!(
        s.buffered_messages(live(None, T0 + 5)).await?[0]
            .takers
            .len()
            == 3
    );
    // Expiry takes the taker rows with the message.
    ensure!(s.expire_messages(T0 + 100, 10).await? == 1);
    ensure!(commit_one(s, take(4, 1, "other", m, T0 + 5)).await? == CommitOutcome::MessageTaken);
    Ok(())
}

/// Two handles (two replicas) delivering one buffered message to instances of one
/// process at the same moment: exactly one commit takes it.
pub async fn takes_of_one_message_from_two_handles_at_once_win_once(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "race").await?;
    for round in 0..8u128 {
        let (a, b) = (id(100 + 2 * round), id(101 + 2 * round));
        for n in [a, b] {
            ensure!(
                commit_one(s, commit(n, None, dep)).await? == CommitOutcome::Applied { fence: 1 }
            );
        }
        let m = buffer(
            s,
            buffered("paid", "order-1", None, T0 + round as i64, 1_000),
        )
        .await?;
        let take = |n: InstanceId| {
            let mut c = commit(n, Some(1), dep);
            c.message_take = Some(Box::new(MessageTake {
                message: m,
                process: "billing".to_owned(),
            }));
            c
        };
        let (one, two) = tokio::join!(s.commit(vec![take(a)]), ctx.second.commit(vec![take(b)]));
        let outcomes = [one?[0], two?[0]];
        let applied = outcomes
            .iter()
            .filter(|o| matches!(o, CommitOutcome::Applied { .. }))
            .count();
        ensure!(applied == 1, "round {round}: {outcomes:?}");
        ensure!(outcomes.contains(&CommitOutcome::MessageTaken));
    }
    Ok(())
}

/// A name of an instance the store does not hold — never created, or purged by
/// retention — is given no key, and a call that holds one records nothing for the others
/// either on a store that applies the call as one transaction; once the instance exists
/// its names get keys as any.
pub async fn camunda_keys_are_given_only_to_names_of_stored_instances(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    lived(s, id(1), dep, InstanceStatus::Running, T0).await?;
    let names = [
        key_name(id(1), KeyKind::Job, "pay", 1),
        key_name(id(2), KeyKind::Job, "pay", 1),
    ];
    ensure!(
        matches!(s.camunda_keys(&names).await, Err(StoreError::UnknownInstance(i)) if i == id(2)),
        "a name of a missing instance is refused, naming it"
    );
    lived(s, id(2), dep, InstanceStatus::Running, T0).await?;
    let keys = s.camunda_keys(&names).await?;
    ensure!(keys.len() == 2 && keys[0] != keys[1], "{keys:?}");
    for (name, key) in names.iter().zip(&keys) {
        ensure!(s.camunda_key(*key).await?.as_ref() == Some(name));
    }
    Ok(())
}
