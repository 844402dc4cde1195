//! The store conformance suite: every case runs against the in-memory store, SQLite (a
//! temp file) and PostgreSQL (`QFLOW_TEST_PG_URL`, one fresh schema per test, dropped at
//! the end). A store that passes here keeps the contract of `qflow_store`.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, ensure, Result};
use qflow_persistence::{PgConfig, PgStore, SqliteStore};
use qflow_store::memory::MemoryStore;
use qflow_store::{
    AttemptRecord, Commit, CommitOutcome, DeploymentId, InstanceFilter, InstanceId, InstanceStatus,
    NewIncident, RetireOutcome, Store, StoreError, TimerRecord, TimerRef,
};
use sqlx::{Connection, PgConnection};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Memory,
    Sqlite,
    Postgres,
}

/// What a case gets: the store under test and a second handle on the same data (the same
/// object for memory, a second `SqliteStore` on the file, a second pool for PostgreSQL).
#[derive(Clone)]
struct Ctx {
    kind: Kind,
    store: Arc<dyn Store>,
    second: Arc<dyn Store>,
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

fn pg_url() -> Option<String> {
    std::env::var("QFLOW_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Runs `case` against one backend, then cleans up even if the case panicked.
async fn run<F, Fut>(kind: Kind, case: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let mut _dir = None;
    let mut schema = None;
    let ctx = match kind {
        Kind::Memory => {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            Ctx {
                kind,
                store: store.clone(),
                second: store,
            }
        }
        Kind::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("qflow.db");
            let store = SqliteStore::open(&path).await.expect("open sqlite");
            let second = SqliteStore::open(&path).await.expect("open sqlite again");
            _dir = Some(dir);
            Ctx {
                kind,
                store: Arc::new(store),
                second: Arc::new(second),
            }
        }
        Kind::Postgres => {
            let Some(url) = pg_url() else {
                println!("skipped: QFLOW_TEST_PG_URL not set");
                return;
            };
            let name = unique_name("qflow_test");
            let config = PgConfig {
                schema: Some(name.clone()),
                max_connections: 4,
            };
            let store = PgStore::connect_with(&url, config.clone())
                .await
                .expect("connect postgres");
            let second = PgStore::connect_with(&url, config)
                .await
                .expect("connect postgres again");
            schema = Some((url, name));
            Ctx {
                kind,
                store: Arc::new(store),
                second: Arc::new(second),
            }
        }
    };
    let outcome = tokio::spawn(case(ctx)).await;
    if let Some((url, name)) = schema {
        let mut conn = PgConnection::connect(&url)
            .await
            .expect("connect for cleanup");
        sqlx::query(&format!("DROP SCHEMA {name} CASCADE"))
            .execute(&mut conn)
            .await
            .expect("drop test schema");
    }
    match outcome {
        Ok(result) => result.unwrap_or_else(|e| panic!("{kind:?}: {e:#}")),
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

/// One test per case and backend: `memory::case`, `sqlite::case`, `postgres::case`.
macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::run(super::Kind::Memory, super::$case).await })*
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::run(super::Kind::Sqlite, super::$case).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::run(super::Kind::Postgres, super::$case).await })*
        }
    };
}

suite!(
    deploy_is_idempotent_by_content_hash_and_versions_increase,
    create_and_cas_commit_advance_the_fence,
    stale_fence_conflicts_and_writes_nothing,
    conflict_in_a_batch_skips_only_the_loser,
    unknown_deployment_fails_the_whole_batch,
    repeated_instance_in_a_batch_applies_in_order,
    timers_upsert_and_resolve_only_with_matching_incarnation,
    claim_respects_due_time_and_leases,
    rearming_a_leased_timer_drops_the_lease,
    concurrent_claimers_never_share_a_timer,
    concurrent_committers_win_each_fence_exactly_once,
    retire_is_refused_while_running_or_failed_instances_remain,
    creation_on_a_retired_deployment_is_refused_and_writes_nothing,
    retirement_and_creation_racing_never_leave_an_instance_on_a_retired_deployment,
    incidents_open_and_resolve,
    attempts_history_keeps_order,
    instances_filter_by_deployment_status_and_code,
    snapshot_bytes_round_trip_exactly,
);

const T0: i64 = 1_700_000_000_000;

fn id(n: u128) -> InstanceId {
    InstanceId::from_u128(0x51f0_0000_0000_4000_8000_0000_0000_0000 | n)
}

/// A commit with no effects; cases add what they test.
fn commit(instance: InstanceId, expected_fence: Option<u64>, deployment: DeploymentId) -> Commit {
    Commit {
        instance,
        expected_fence,
        deployment,
        status: InstanceStatus::Running,
        failure_code: None,
        snapshot: vec![1, 2, 3],
        now_ms: T0,
        arm_timers: Vec::new(),
        resolve_timers: Vec::new(),
        open_incidents: Vec::new(),
        resolve_incidents_on: Vec::new(),
        attempts: Vec::new(),
    }
}

fn timer(instance: InstanceId, name: &str, due_at_ms: i64, incarnation: u32) -> TimerRecord {
    TimerRecord {
        instance,
        name: name.to_string(),
        due_at_ms,
        incarnation,
    }
}

async fn deploy(store: &dyn Store, hash: &str) -> Result<DeploymentId> {
    Ok(store
        .deploy("order", hash, &format!("<definitions id='{hash}'/>"), T0)
        .await?
        .id)
}

async fn commit_one(store: &dyn Store, c: Commit) -> Result<CommitOutcome> {
    let mut outcomes = store.commit(vec![c]).await?;
    ensure!(outcomes.len() == 1, "one outcome per commit");
    Ok(outcomes.remove(0))
}

async fn create(store: &dyn Store, instance: InstanceId, deployment: DeploymentId) -> Result<()> {
    let outcome = commit_one(store, commit(instance, None, deployment)).await?;
    ensure!(
        outcome == CommitOutcome::Applied { fence: 1 },
        "create: {outcome:?}"
    );
    Ok(())
}

async fn deploy_is_idempotent_by_content_hash_and_versions_increase(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let a = s.deploy("order", "aaaa", "<a/>", T0).await?;
    let b = s.deploy("order", "bbbb", "<b/>", T0 + 1).await?;
    let a_again = s.deploy("order", "aaaa", "<a/>", T0 + 2).await?;
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
    let c = ctx.second.deploy("order", "cccc", "<c/>", T0 + 3).await?;
    ensure!(c.id > b.id);
    ensure!(s.deploy("order", "cccc", "<c/>", T0 + 4).await? == c);
    Ok(())
}

async fn create_and_cas_commit_advance_the_fence(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    create(s, id(1), dep).await?;
    let created = s.instance(id(1)).await?.ok_or_else(|| anyhow!("created"))?;
    ensure!(created.fence == 1 && created.created_at_ms == T0 && created.updated_at_ms == T0);
    let mut step = commit(id(1), Some(1), dep);
    step.snapshot = vec![9; 100];
    step.now_ms = T0 + 50;
    step.status = InstanceStatus::Completed;
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

async fn stale_fence_conflicts_and_writes_nothing(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    create(s, id(1), dep).await?;
    ensure!(
        commit_one(s, commit(id(1), Some(1), dep)).await? == CommitOutcome::Applied { fence: 2 }
    );
    let before = s.instance(id(1)).await?;

    let mut stale = commit(id(1), Some(1), dep);
    stale.snapshot = vec![0xde, 0xad];
    stale.status = InstanceStatus::Failed;
    stale.failure_code = Some("LOST".into());
    stale.arm_timers = vec![timer(id(1), "retry:pay", T0 + 10, 1)];
    stale.open_incidents = vec![NewIncident {
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

async fn conflict_in_a_batch_skips_only_the_loser(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    create(s, id(1), dep).await?;
    create(s, id(2), dep).await?;
    let mut a = commit(id(1), Some(1), dep);
    a.arm_timers = vec![timer(id(1), "t", T0 + 5, 1)];
    let mut b = commit(id(2), Some(7), dep);
    b.arm_timers = vec![timer(id(2), "t", T0 + 5, 1)];
    b.attempts = vec![attempt(id(2), "n", 1)];
    let mut c = commit(id(3), None, dep);
    c.arm_timers = vec![timer(id(3), "t", T0 + 6, 1)];
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

async fn unknown_deployment_fails_the_whole_batch(ctx: Ctx) -> Result<()> {
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

async fn repeated_instance_in_a_batch_applies_in_order(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut first = commit(id(1), None, dep);
    first.arm_timers = vec![timer(id(1), "t", T0 + 5, 1)];
    let mut second = commit(id(1), Some(1), dep);
    second.resolve_timers = vec![TimerRef {
        name: "t".into(),
        incarnation: 1,
    }];
    second.snapshot = vec![7];
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

async fn timers_upsert_and_resolve_only_with_matching_incarnation(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.arm_timers = vec![
        timer(id(1), "retry:pay", T0 + 100, 1),
        timer(id(1), "boundary:t1", T0 + 900, 1),
    ];
    commit_one(s, c).await?;
    ensure!(
        s.timers(id(1)).await?
            == vec![
                timer(id(1), "boundary:t1", T0 + 900, 1),
                timer(id(1), "retry:pay", T0 + 100, 1)
            ],
        "timers are listed by name"
    );

    // Arming the same name replaces the row and its incarnation.
    let mut c = commit(id(1), Some(1), dep);
    c.arm_timers = vec![timer(id(1), "retry:pay", T0 + 200, 2)];
    commit_one(s, c).await?;
    // A stale resolve (old incarnation) leaves the live timer alone.
    let mut c = commit(id(1), Some(2), dep);
    c.resolve_timers = vec![TimerRef {
        name: "retry:pay".into(),
        incarnation: 1,
    }];
    commit_one(s, c).await?;
    ensure!(s
        .timers(id(1))
        .await?
        .contains(&timer(id(1), "retry:pay", T0 + 200, 2)));
    // Resolve and re-arm in one step: the new incarnation survives.
    let mut c = commit(id(1), Some(3), dep);
    c.resolve_timers = vec![TimerRef {
        name: "retry:pay".into(),
        incarnation: 2,
    }];
    c.arm_timers = vec![timer(id(1), "retry:pay", T0 + 300, 3)];
    commit_one(s, c).await?;
    ensure!(s
        .timers(id(1))
        .await?
        .contains(&timer(id(1), "retry:pay", T0 + 300, 3)));
    let mut c = commit(id(1), Some(4), dep);
    c.resolve_timers = vec![
        TimerRef {
            name: "retry:pay".into(),
            incarnation: 3,
        },
        TimerRef {
            name: "boundary:t1".into(),
            incarnation: 1,
        },
    ];
    commit_one(s, c).await?;
    ensure!(s.timers(id(1)).await?.is_empty());
    ensure!(s.next_timer_due().await?.is_none());
    Ok(())
}

async fn claim_respects_due_time_and_leases(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.arm_timers = vec![
        timer(id(1), "a", T0 + 100, 1),
        timer(id(1), "b", T0 + 200, 1),
        timer(id(1), "c", T0 + 300, 1),
    ];
    commit_one(s, c).await?;
    ensure!(s.next_timer_due().await? == Some(T0 + 100));
    ensure!(
        s.claim_due_timers(T0 + 99, 1_000, "r1", 10)
            .await?
            .is_empty(),
        "nothing due yet"
    );

    let first = s.claim_due_timers(T0 + 150, 1_000, "r1", 10).await?;
    ensure!(first == vec![timer(id(1), "a", T0 + 100, 1)], "{first:?}");
    // Leased until T0 + 1150, inclusive: not handed out again while the lease holds.
    ensure!(s
        .claim_due_timers(T0 + 150, 1_000, "r2", 10)
        .await?
        .is_empty());
    let second = s.claim_due_timers(T0 + 250, 1_000, "r2", 10).await?;
    ensure!(second == vec![timer(id(1), "b", T0 + 200, 1)], "{second:?}");
    ensure!(
        s.claim_due_timers(T0 + 1_150, 1_000, "r2", 10).await?
            == vec![timer(id(1), "c", T0 + 300, 1)]
    );
    // Leased timers still count for the next due instant.
    ensure!(s.next_timer_due().await? == Some(T0 + 100));

    // After the leases expire, everything due is claimable again, earliest first, and the
    // limit is honoured.
    let limited = s.claim_due_timers(T0 + 5_000, 1_000, "r3", 2).await?;
    ensure!(
        limited
            == vec![
                timer(id(1), "a", T0 + 100, 1),
                timer(id(1), "b", T0 + 200, 1)
            ],
        "{limited:?}"
    );
    let rest = s.claim_due_timers(T0 + 5_000, 1_000, "r3", 2).await?;
    ensure!(rest == vec![timer(id(1), "c", T0 + 300, 1)], "{rest:?}");
    ensure!(s
        .claim_due_timers(T0 + 5_000, 1_000, "r3", 0)
        .await?
        .is_empty());
    // Claiming never deletes: the rows stay until a commit resolves them.
    ensure!(s.timers(id(1)).await?.len() == 3);
    Ok(())
}

async fn rearming_a_leased_timer_drops_the_lease(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.arm_timers = vec![timer(id(1), "t", T0, 1)];
    commit_one(s, c).await?;
    ensure!(s.claim_due_timers(T0, 60_000, "r1", 10).await?.len() == 1);
    let mut c = commit(id(1), Some(1), dep);
    c.arm_timers = vec![timer(id(1), "t", T0 + 10, 2)];
    commit_one(s, c).await?;
    let again = s.claim_due_timers(T0 + 10, 60_000, "r2", 10).await?;
    ensure!(again == vec![timer(id(1), "t", T0 + 10, 2)], "{again:?}");
    Ok(())
}

async fn concurrent_claimers_never_share_a_timer(ctx: Ctx) -> Result<()> {
    const TIMERS: u128 = 300;
    let dep = deploy(&*ctx.store, "h1").await?;
    let batch: Vec<Commit> = (0..TIMERS)
        .map(|n| {
            let mut c = commit(id(n), None, dep);
            c.arm_timers = vec![timer(id(n), "t", T0 + (n as i64 % 17), 1)];
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
                let claimed = store.claim_due_timers(T0 + 100, 600_000, owner, 7).await?;
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
        ctx.kind,
        a.len(),
        b.len()
    );
    Ok(())
}

/// Two replicas step the same instances at once, in opposite orders, with whatever fence
/// they last read. Every fence is won by exactly one of them (no lost update, no double
/// step), and overlapping batches never deadlock.
async fn concurrent_committers_win_each_fence_exactly_once(ctx: Ctx) -> Result<()> {
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
                    c.snapshot = vec![tag; 8];
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
    println!("{:?}: replica a won {a}, replica b won {b}", ctx.kind);
    Ok(())
}

async fn retire_is_refused_while_running_or_failed_instances_remain(ctx: Ctx) -> Result<()> {
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
    done.status = InstanceStatus::Completed;
    let mut failed = commit(id(2), Some(1), v1);
    failed.status = InstanceStatus::Failed;
    failed.failure_code = Some("RETRIES_EXHAUSTED".into());
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
    cancelled.status = InstanceStatus::Cancelled;
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

async fn creation_on_a_retired_deployment_is_refused_and_writes_nothing(ctx: Ctx) -> Result<()> {
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

/// A retirement through one connection pool and a creation through another, started
/// together: whichever order they serialise in, a retired deployment never ends up with
/// a running instance (R5).
async fn retirement_and_creation_racing_never_leave_an_instance_on_a_retired_deployment(
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

async fn incidents_open_and_resolve(ctx: Ctx) -> Result<()> {
    let s = &*ctx.store;
    let dep = deploy(s, "h1").await?;
    let incident = |node: &str, code: &str| NewIncident {
        node: node.into(),
        code: code.into(),
        message: format!("{node} failed with {code}"),
    };
    let mut c = commit(id(1), None, dep);
    c.open_incidents = vec![incident("pay", "E1"), incident("ship", "E2")];
    commit_one(s, c).await?;
    let mut c = commit(id(2), None, dep);
    c.open_incidents = vec![incident("pay", "E3")];
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
    c.resolve_incidents_on = vec!["pay".into()];
    c.open_incidents = vec![incident("pay", "E4")];
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

fn attempt(instance: InstanceId, node: &str, n: u32) -> AttemptRecord {
    AttemptRecord {
        instance,
        node: node.into(),
        attempt: n,
        started_at_ms: T0 + i64::from(n) * 10,
        finished_at_ms: T0 + i64::from(n) * 10 + 3,
        outcome: if n < 3 { "failed" } else { "ok" }.into(),
        code: (n < 3).then(|| "HTTP_503".to_string()),
        message: (n < 3).then(|| format!("attempt {n}: upstream unavailable")),
    }
}

async fn attempts_history_keeps_order(ctx: Ctx) -> Result<()> {
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
    Ok(())
}

async fn instances_filter_by_deployment_status_and_code(ctx: Ctx) -> Result<()> {
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
            c.status = *status;
            c.failure_code = code.map(str::to_string);
            c
        })
        .collect();
    s.commit(batch).await?;

    let ids = |records: Vec<qflow_store::InstanceRecord>| -> Vec<InstanceId> {
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
            limit: 0,
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
    let none = s
        .instances(&InstanceFilter {
            failure_code: Some("NOPE".into()),
            ..Default::default()
        })
        .await?;
    ensure!(none.is_empty());
    Ok(())
}

async fn snapshot_bytes_round_trip_exactly(ctx: Ctx) -> Result<()> {
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
        c.snapshot = bytes.clone();
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

/// Everything written through one `SqliteStore` is there after closing it and opening
/// the file again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reopen_keeps_everything() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("keep.db");
    let store = SqliteStore::open(&path).await?;
    let dep = deploy(&store, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.snapshot = vec![0, 1, 0, 2];
    c.arm_timers = vec![timer(id(1), "retry:pay", T0 + 100, 4)];
    c.open_incidents = vec![NewIncident {
        node: "pay".into(),
        code: "E".into(),
        message: "m".into(),
    }];
    c.attempts = vec![attempt(id(1), "pay", 1)];
    commit_one(&store, c).await?;
    create(&store, id(2), dep).await?;
    let mut done = commit(id(2), Some(1), dep);
    done.status = InstanceStatus::Completed;
    commit_one(&store, done).await?;
    let claimed = store.claim_due_timers(T0 + 100, 60_000, "r1", 10).await?;
    ensure!(claimed.len() == 1);

    let before = (
        store.deployments().await?,
        store.instances(&InstanceFilter::default()).await?,
        store.timers(id(1)).await?,
        store.incidents(None).await?,
        store.attempts(id(1)).await?,
    );
    store.close().await;
    drop(store);

    let reopened = SqliteStore::open(&path).await?;
    let after = (
        reopened.deployments().await?,
        reopened.instances(&InstanceFilter::default()).await?,
        reopened.timers(id(1)).await?,
        reopened.incidents(None).await?,
        reopened.attempts(id(1)).await?,
    );
    ensure!(before == after, "reopened store differs");
    ensure!(after.1.len() == 2 && after.2.len() == 1);
    // The lease survived too: the timer is not handed out again before it expires.
    ensure!(reopened
        .claim_due_timers(T0 + 200, 60_000, "r2", 10)
        .await?
        .is_empty());
    ensure!(
        reopened
            .claim_due_timers(T0 + 60_101, 60_000, "r2", 10)
            .await?
            .len()
            == 1
    );
    // Deploying the same content again after reopening gives the same version.
    ensure!(deploy(&reopened, "h1").await? == dep);
    ensure!(
        commit_one(&reopened, commit(id(1), Some(1), dep)).await?
            == CommitOutcome::Applied { fence: 2 }
    );
    Ok(())
}

/// R1a on SQLite: the writer runs in WAL mode with `synchronous=FULL` (2) and foreign keys.
#[tokio::test]
async fn sqlite_writer_is_durable() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("durable.db")).await?;
    ensure!(store.is_durable());
    let settings = store.writer_settings().await?;
    ensure!(settings == ("wal".to_string(), 2, 1), "{settings:?}");
    // A claim relaxes fsync for its own lease transaction only; the writer is back to
    // FULL afterwards, with or without rows claimed.
    let dep = deploy(&store, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.arm_timers = vec![timer(id(1), "t", T0, 1)];
    commit_one(&store, c).await?;
    ensure!(store.claim_due_timers(T0, 1_000, "r1", 10).await?.len() == 1);
    ensure!(store.writer_settings().await? == settings);
    ensure!(store
        .claim_due_timers(T0, 1_000, "r1", 10)
        .await?
        .is_empty());
    ensure!(store.writer_settings().await? == settings);
    Ok(())
}

/// The claim walks the due index (R3): SQLite's plan searches `timers_due`, never scans.
#[tokio::test]
async fn sqlite_claim_plan_uses_the_due_index() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("plan.db")).await?;
    let plan = store.explain_claim().await?;
    println!("{plan:#?}");
    ensure!(
        plan.iter()
            .any(|line| line.contains("USING INDEX timers_due")),
        "plan does not use timers_due: {plan:?}"
    );
    ensure!(
        !plan.iter().any(|line| line.starts_with("SCAN timers")),
        "plan scans timers: {plan:?}"
    );
    Ok(())
}

/// The same evidence on PostgreSQL, with enough parked rows (and fresh statistics) that
/// the planner's choice is the one production sees.
#[tokio::test]
async fn postgres_claim_plan_uses_the_due_index() -> Result<()> {
    let Some(url) = pg_url() else {
        println!("skipped: QFLOW_TEST_PG_URL not set");
        return Ok(());
    };
    let schema = unique_name("qflow_plan");
    let store = PgStore::connect_with(
        &url,
        PgConfig {
            schema: Some(schema.clone()),
            max_connections: 2,
        },
    )
    .await?;
    let result = async {
        let dep = deploy(&store, "h1").await?;
        create(&store, id(1), dep).await?;
        sqlx::query(
            "INSERT INTO timers (instance, name, due_at_ms, incarnation) \
             SELECT $1, 't' || g, $2 + g, 1 FROM generate_series(1, 50000) AS g",
        )
        .bind(id(1))
        .bind(T0 + 1_000_000)
        .execute(store.pool())
        .await?;
        sqlx::query("ANALYZE timers").execute(store.pool()).await?;
        let plan = store.explain_claim(T0, 100).await?;
        println!("{}", plan.join("\n"));
        ensure!(
            plan.iter().any(|line| line.contains("timers_due")),
            "plan does not use timers_due: {plan:?}"
        );
        ensure!(
            plan.iter().any(|line| line.contains("Tid Scan on timers")),
            "the update does not find claimed rows by ctid: {plan:?}"
        );
        ensure!(
            !plan.iter().any(|line| line.contains("Seq Scan")),
            "plan scans timers: {plan:?}"
        );
        Ok(())
    }
    .await;
    store.close().await;
    let mut conn = PgConnection::connect(&url).await?;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await?;
    result
}

/// Replicas starting at the same moment on a fresh schema all come up: schema creation
/// tolerates the race and migrations serialize on sqlx's advisory lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_can_start_together_on_a_fresh_schema() -> Result<()> {
    let Some(url) = pg_url() else {
        println!("skipped: QFLOW_TEST_PG_URL not set");
        return Ok(());
    };
    let schema = unique_name("qflow_start");
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            let config = PgConfig {
                schema: Some(schema.clone()),
                max_connections: 2,
            };
            tokio::spawn(async move { PgStore::connect_with(&url, config).await })
        })
        .collect();
    let mut stores = Vec::new();
    let mut failures = Vec::new();
    for start in starts {
        match start.await? {
            Ok(store) => stores.push(store),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let deployed = match stores.first() {
        Some(store) => Some(deploy(store, "h1").await?),
        None => None,
    };
    for store in &stores {
        store.close().await;
    }
    let mut conn = PgConnection::connect(&url).await?;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await?;
    ensure!(
        failures.is_empty(),
        "replicas failed to start: {failures:?}"
    );
    ensure!(stores.len() == 4 && deployed.is_some());
    Ok(())
}

/// A schema name that is not a plain identifier is refused before anything is sent.
#[tokio::test]
async fn postgres_schema_name_is_checked() {
    let config = PgConfig {
        schema: Some("x; DROP TABLE t".into()),
        max_connections: 1,
    };
    let result = PgStore::connect_with("postgres://nobody@127.0.0.1:1/none", config).await;
    match result {
        Err(qflow_persistence::Error::Config(message)) => {
            assert!(message.contains("schema"), "{message}")
        }
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
}
