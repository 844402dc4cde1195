//! Store benchmark: commit throughput under the durability contract (group commit of 1, 16
//! and 128 step-commits per transaction) and the timer poller's cost with 10k vs 1M parked
//! timers, on the in-memory store, SQLite (a file under the target dir, `synchronous=FULL`)
//! and PostgreSQL (`QFLOW_TEST_PG_URL`, a scratch schema dropped at the end), plus the
//! disk's raw fsync rate as the baseline group commit has to beat.
//!
//! Run: `cargo bench -p qflow-persistence --bench store_bench` (add `-- --quick` for a
//! short smoke run). Prints one line per measurement; no assertions, nothing is timed in
//! tests.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_persistence::{PgConfig, PgStore, SqliteStore};
use qflow_store::memory::MemoryStore;
use qflow_store::{
    Commit, CommitOutcome, DeploymentId, InstanceId, InstanceState, InstanceStatus, NewDeployment,
    Store, TimerClaim, TimerKind, TimerName, TimerRecord, TimerRef,
};
use sqlx::{Connection, PgConnection};

const T0: i64 = 1_700_000_000_000;
/// Far enough in the future that parked timers never become due during a run.
const PARKED_AT_MS: i64 = T0 + 365 * 24 * 3_600_000;
/// Instances the commit benchmark cycles through.
const INSTANCES: usize = 4_096;
/// Timers due in each measured non-empty poll.
const DUE_PER_POLL: usize = 100;

struct Options {
    quick: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = Options {
        quick: std::env::args().any(|a| a == "--quick"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(&options))
}

async fn run(options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;

    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    bench_store("memory", memory, options).await?;

    // The disk is shared with whatever else runs on the machine: measure its fsync rate
    // right before each durable store, so the group-commit factor is read against the
    // rate of that moment.
    fsync_baseline(&scratch.path().join("fsync.bin"), options)?;
    let sqlite = Arc::new(SqliteStore::open(scratch.path().join("bench.db")).await?);
    bench_store("sqlite", sqlite.clone(), options).await?;
    println!("sqlite: claim plan (EXPLAIN QUERY PLAN):");
    for line in sqlite.explain_claim().await? {
        println!("    {line}");
    }

    match std::env::var("QFLOW_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => {
            fsync_baseline(&scratch.path().join("fsync.bin"), options)?;
            let schema = format!("qflow_bench_{}", std::process::id());
            let config = PgConfig {
                schema: Some(schema.clone()),
                max_connections: 4,
            };
            let store = Arc::new(PgStore::connect_with(&url, config).await?);
            let mut result = bench_store("postgres", store.clone(), options).await;
            if result.is_ok() {
                result = explain_postgres(&store).await;
            }
            let mut conn = PgConnection::connect(&url).await?;
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&mut conn)
                .await?;
            result?;
        }
        _ => println!("postgres: skipped: QFLOW_TEST_PG_URL not set"),
    }
    Ok(())
}

async fn explain_postgres(store: &PgStore) -> Result<(), Box<dyn std::error::Error>> {
    sqlx::query("ANALYZE timers").execute(store.pool()).await?;
    println!("postgres: claim plan (generic, EXPLAIN):");
    for line in store
        .explain_claim(T0 + 10_000, DUE_PER_POLL as u32)
        .await?
    {
        println!("    {line}");
    }
    Ok(())
}

/// Writes 4 KiB and fsyncs it, over and over, on the same disk as the SQLite file: once
/// appending (like a growing WAL) and once overwriting the same block (like a recycled
/// WAL).
fn fsync_baseline(path: &std::path::Path, options: &Options) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let block = vec![0x5a_u8; 4096];
    let rounds = if options.quick { 200 } else { 1_000 };
    for append in [true, false] {
        let mut file = std::fs::File::create(path)?;
        file.write_all(&block)?;
        file.sync_all()?;
        let start = Instant::now();
        for _ in 0..rounds {
            if !append {
                file.seek(SeekFrom::Start(0))?;
            }
            file.write_all(&block)?;
            file.sync_data()?;
        }
        let elapsed = start.elapsed();
        println!(
            "fsync baseline ({}): {rounds} x (4 KiB write + fdatasync) in {:.2} s = {:.0} fsyncs/s",
            if append { "append" } else { "overwrite" },
            elapsed.as_secs_f64(),
            f64::from(rounds) / elapsed.as_secs_f64()
        );
    }
    Ok(())
}

fn instance_id(n: usize) -> InstanceId {
    InstanceId::from_u128(0xbe00_0000_0000_4000_8000_0000_0000_0000 | n as u128)
}

fn step_commit(
    instance: InstanceId,
    expected_fence: Option<u64>,
    deployment: DeploymentId,
    now_ms: i64,
) -> Commit {
    // A ~100 byte snapshot that changes every step, and one timer upsert: the shape of a
    // service-task step that parks on a retry or timeout timer.
    let fence = expected_fence.unwrap_or(0);
    let mut snapshot = vec![0x81_u8; 100];
    snapshot[..8].copy_from_slice(&fence.to_le_bytes());
    let state = InstanceState {
        status: InstanceStatus::Running,
        failure_code: None,
        snapshot,
        business_key: None,
    };
    let mut commit = Commit::new(instance, expected_fence, deployment, state, now_ms);
    commit.timers.arm = vec![TimerRecord {
        instance,
        name: TimerName::new(TimerKind::Timeout, "task"),
        due_at_ms: PARKED_AT_MS,
        incarnation: u32::try_from(fence + 1).unwrap_or(u32::MAX),
    }];
    commit
}

async fn bench_store(
    label: &str,
    store: Arc<dyn Store>,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let deployment = store
        .deploy(NewDeployment {
            process_id: "bench",
            content_hash: &format!("bench-{label}"),
            source: "<definitions/>",
            deployed_at_ms: T0,
            schedules: &[],
        })
        .await?
        .id;
    // Create the instances in large batches (not measured).
    let mut fences = vec![0_u64; INSTANCES];
    for chunk in (0..INSTANCES).collect::<Vec<_>>().chunks(512) {
        let batch = chunk
            .iter()
            .map(|&n| step_commit(instance_id(n), None, deployment, T0))
            .collect();
        let outcomes = store.commit(batch).await?;
        for (&n, outcome) in chunk.iter().zip(outcomes) {
            fences[n] = applied(outcome)?;
        }
    }

    for batch_size in [1_usize, 16, 128] {
        let budget = if options.quick {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(4)
        };
        let mut next = 0_usize;
        let mut commits = 0_u64;
        let mut batches = 0_u64;
        let start = Instant::now();
        while start.elapsed() < budget {
            let batch: Vec<Commit> = (0..batch_size)
                .map(|k| {
                    let n = (next + k) % INSTANCES;
                    step_commit(instance_id(n), Some(fences[n]), deployment, T0 + 1)
                })
                .collect();
            let outcomes = store.commit(batch).await?;
            for (k, outcome) in outcomes.into_iter().enumerate() {
                let n = (next + k) % INSTANCES;
                fences[n] = applied(outcome)?;
            }
            next = (next + batch_size) % INSTANCES;
            commits += batch_size as u64;
            batches += 1;
        }
        let elapsed = start.elapsed().as_secs_f64();
        println!(
            "{label}: commit batch {batch_size:>3}: {commits} commits in {batches} transactions, \
             {elapsed:.2} s = {:.0} commits/s, {:.0} transactions/s, {:.3} ms/transaction",
            commits as f64 / elapsed,
            batches as f64 / elapsed,
            elapsed * 1e3 / batches as f64
        );
    }

    let parked_sizes: &[usize] = if options.quick {
        &[10_000, 100_000]
    } else {
        &[10_000, 1_000_000]
    };
    let mut parked = 0_usize;
    for &target in parked_sizes {
        parked = park_timers(&*store, deployment, parked, target).await?;
        bench_claim(label, &*store, deployment, parked, options).await?;
    }
    Ok(())
}

fn applied(outcome: CommitOutcome) -> Result<u64, Box<dyn std::error::Error>> {
    match outcome {
        CommitOutcome::Applied { fence } => Ok(fence),
        other => Err(format!("benchmark commit lost its CAS: {other:?}").into()),
    }
}

/// Adds parked (not due) timers until `target` exist, on fresh instances of 1,000 timers
/// each, through the store's own commit path.
async fn park_timers(
    store: &dyn Store,
    deployment: DeploymentId,
    have: usize,
    target: usize,
) -> Result<usize, Box<dyn std::error::Error>> {
    const PER_INSTANCE: usize = 1_000;
    let start = Instant::now();
    let mut count = have;
    let mut holder = INSTANCES + 1_000 + have / PER_INSTANCE;
    while count < target {
        let mut batch = Vec::new();
        while count < target && batch.len() < 50 {
            let instance = instance_id(holder);
            let mut commit = step_commit(instance, None, deployment, T0);
            commit.timers.arm = (0..PER_INSTANCE)
                .map(|k| TimerRecord {
                    instance,
                    name: TimerName::new(TimerKind::Catch, &format!("parked{k}")),
                    due_at_ms: PARKED_AT_MS + (k as i64) * 1_000,
                    incarnation: 1,
                })
                .collect();
            batch.push(commit);
            holder += 1;
            count += PER_INSTANCE;
        }
        store.commit(batch).await?;
    }
    if count > have {
        eprintln!(
            "  (parked {} more timers in {:.1} s)",
            count - have,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(count)
}

/// Times polls with nothing due and polls that claim `DUE_PER_POLL` due timers.
async fn bench_claim(
    label: &str,
    store: &dyn Store,
    deployment: DeploymentId,
    parked: usize,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let polls = if options.quick { 50 } else { 500 };
    let now_ms = T0 + 10_000;
    let start = Instant::now();
    for _ in 0..polls {
        let claimed = store
            .claim_due_timers(TimerClaim {
                now_ms,
                lease_ms: 30_000,
                owner: "bench",
                limit: DUE_PER_POLL as u32,
            })
            .await?;
        if !claimed.is_empty() {
            return Err("a parked timer was claimed".into());
        }
    }
    let empty_us = start.elapsed().as_secs_f64() * 1e6 / f64::from(polls);

    // Each round arms DUE_PER_POLL due timers (one per instance, not timed), then claims
    // them in one poll (timed).
    let rounds = if options.quick { 10 } else { 50 };
    let mut claim_time = Duration::ZERO;
    let base = 2_000_000 + parked;
    for round in 0..rounds {
        let batch = (0..DUE_PER_POLL)
            .map(|k| {
                let instance = instance_id(base + round * DUE_PER_POLL + k);
                let mut commit = step_commit(instance, None, deployment, T0);
                commit.timers.arm[0].due_at_ms = now_ms - 1;
                commit
            })
            .collect();
        store.commit(batch).await?;
        let start = Instant::now();
        let claimed = store
            .claim_due_timers(TimerClaim {
                now_ms,
                lease_ms: 3_600_000,
                owner: "bench",
                limit: DUE_PER_POLL as u32,
            })
            .await?;
        claim_time += start.elapsed();
        if claimed.len() != DUE_PER_POLL {
            return Err(format!("claimed {} of {DUE_PER_POLL} due timers", claimed.len()).into());
        }
        // Fire them as the runtime would (not timed): resolve each by its incarnation, so
        // the next round starts with only parked timers again.
        let fired = claimed
            .iter()
            .map(|timer| {
                let mut commit = step_commit(timer.instance, Some(1), deployment, now_ms);
                commit.timers.arm.clear();
                commit.timers.resolve = vec![TimerRef {
                    name: timer.name.clone(),
                    incarnation: timer.incarnation,
                }];
                commit
            })
            .collect();
        for outcome in store.commit(fired).await? {
            applied(outcome)?;
        }
    }
    let due_us = claim_time.as_secs_f64() * 1e6 / rounds as f64;
    println!(
        "{label}: claim with {parked:>7} parked timers: empty poll {empty_us:.0} µs, \
         poll claiming {DUE_PER_POLL} due {due_us:.0} µs"
    );
    Ok(())
}
