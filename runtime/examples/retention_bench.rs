//! Retention benchmark (issue 10, item 7; not a test): lane throughput with the purge
//! draining a backlog of finished instances past their retention, against the same run
//! without it.
//!
//! 1. Fills a SQLite store once (`target/tmp/retention-base.db`, reused while its count
//!    matches) with `--instances` completed instances that ended 30 days ago, each with
//!    ten attempt rows, like an instance of the 10-task model — through
//!    `Store::commit`, 1,000 creations a transaction.
//! 2. For each run of `--runs` (default `off,on,off,on`): copies the base file, starts a
//!    runtime (SystemClock, `--lanes` lanes) with retention off or on (7 days,
//!    `--busy` percent, batch 1,000), and drives the 10-service-task model
//!    `cli/benches/linear.bpmn` in a closed loop of 1,000 live instances: 1.5 s warm-up,
//!    then `--secs` timed. Prints completed instances/s and how many old instances the
//!    purge deleted in the timed window.
//! 3. After an `on` run, drains the rest of the backlog with no load (the store's purge
//!    back to back) and prints the time it took and the store's size before and after
//!    (SQLite pages in use: `page_count - freelist_count`; the file itself keeps its
//!    size until a `VACUUM`).
//!
//! ```text
//! CARGO_TARGET_DIR=target nice -n 10 cargo run --release -p qflow-runtime \
//!     --example retention_bench -- --instances=1000000 --secs=20
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use qflow_persistence::SqliteStore;
use qflow_runtime::{
    AsyncHandlers, Clock, RetentionConfig, Runtime, RuntimeConfig, SystemClock, TaskContext,
    TaskOutcome,
};
use qflow_store::{
    Attempt, AttemptOutcome, AttemptRecord, Commit, DeploymentId, InstanceId, InstanceState,
    InstanceStatus, NewDeployment, PurgeRequest, Store,
};
use sqlx::{Connection, SqliteConnection};

const MODEL: &str = include_str!("../../cli/benches/linear.bpmn");
const DAY_MS: i64 = qflow_runtime::retention::DAY_MS;
const FILL_BATCH: usize = 1_000;
const ATTEMPTS_PER_INSTANCE: u32 = 10;
const WINDOW: u64 = 1_000;
const WARMUP: Duration = Duration::from_millis(1_500);

struct Options {
    instances: u64,
    secs: f64,
    busy_percent: u32,
    lanes: usize,
    runs: Vec<bool>,
    dir: PathBuf,
}

fn options() -> Result<Options> {
    let mut o = Options {
        instances: 1_000_000,
        secs: 20.0,
        busy_percent: 10,
        lanes: 1,
        runs: vec![false, true, false, true],
        dir: PathBuf::from("target/tmp"),
    };
    for arg in std::env::args().skip(1) {
        let (key, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
        match key {
            "--instances" => o.instances = value.parse()?,
            "--secs" => o.secs = value.parse()?,
            "--busy" => o.busy_percent = value.parse()?,
            "--lanes" => o.lanes = value.parse()?,
            "--dir" => o.dir = PathBuf::from(value),
            "--runs" => {
                o.runs = value
                    .split(',')
                    .map(|r| match r {
                        "on" => Ok(true),
                        "off" => Ok(false),
                        other => anyhow::bail!("--runs takes on/off, not {other}"),
                    })
                    .collect::<Result<_>>()?
            }
            other => anyhow::bail!("unknown option {other}"),
        }
    }
    Ok(o)
}

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// SQLite pages in use and in the file, in bytes: `(used, file)`.
async fn store_bytes(path: &Path) -> Result<(u64, u64)> {
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    let page: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&mut conn)
        .await?;
    let count: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&mut conn)
        .await?;
    let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok((((count - free) * page) as u64, (count * page) as u64))
}

/// Folds the WAL into the main file, so that copying the main file copies the store.
async fn checkpoint(path: &Path) -> Result<()> {
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

async fn count_instances(path: &Path) -> Result<i64> {
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    let n = sqlx::query_scalar("SELECT count(*) FROM instances")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok(n)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// Fills `path` with `n` completed instances that ended 30 days ago, ten attempts each.
async fn fill(path: &Path, n: u64) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let store = SqliteStore::open(path).await?;
    let dep = store
        .deploy(NewDeployment {
            process_id: "old",
            content_hash: "retention-bench-old",
            source: "<definitions id='old'/>",
            deployed_at_ms: 0,
            schedules: &[],
        })
        .await?
        .id;
    let began = Instant::now();
    let ended_ms = now_ms() - 30 * DAY_MS;
    // A completed snapshot of about the size the 10-task model leaves.
    let snapshot = vec![0x80 | 3; 40];
    let mut next = 0u64;
    while next < n {
        let batch: Vec<Commit> = (next..(next + FILL_BATCH as u64).min(n))
            .map(|i| old_instance(dep, i, ended_ms + i as i64 / 100, &snapshot))
            .collect();
        next += batch.len() as u64;
        store.commit(batch).await?;
        if next.is_multiple_of(100_000) {
            eprintln!("  filled {next} in {:.1} s", began.elapsed().as_secs_f64());
        }
    }
    store.close().await;
    checkpoint(path).await?;
    println!(
        "fill: {n} finished instances, {} attempt rows, in {:.1} s",
        n * u64::from(ATTEMPTS_PER_INSTANCE),
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

fn old_instance(dep: DeploymentId, i: u64, ended_ms: i64, snapshot: &[u8]) -> Commit {
    // Increasing ids, so the fill appends to the B-trees as the runtime's UUIDv7 ids do.
    let id = InstanceId::from_u128((u128::from(i) << 80) | 0x7000_8000_0000_0000_0000);
    let state = InstanceState {
        status: InstanceStatus::Completed,
        failure_code: None,
        snapshot: snapshot.to_vec(),
        business_key: None,
    };
    let mut c = Commit::new(id, None, dep, state, ended_ms);
    c.attempts = (1..=ATTEMPTS_PER_INSTANCE)
        .map(|t| AttemptRecord {
            instance: id,
            node: format!("t{t}"),
            attempt: Attempt::new(1).expect("1 is an attempt"),
            started_at_ms: ended_ms - 10,
            finished_at_ms: ended_ms - 9,
            outcome: AttemptOutcome::Ok,
            code: None,
            message: None,
            worker: None,
        })
        .collect();
    c
}

fn handlers() -> AsyncHandlers {
    AsyncHandlers::new().with_sync("svc", |_: &TaskContext<'_>| {
        TaskOutcome::Ok(Default::default())
    })
}

/// Closed loop of `WINDOW` live instances for `load_for`, then waits for all to finish.
/// Returns how many it started.
async fn drive(rt: &Arc<Runtime>, deployment: DeploymentId, load_for: Duration) -> Result<u64> {
    let began = Instant::now();
    let base = rt.stats().view().completed;
    let mut issued = 0u64;
    let mut pending = tokio::task::JoinSet::new();
    while began.elapsed() < load_for {
        let done = rt.stats().view().completed - base;
        for _ in 0..WINDOW.saturating_sub(issued - done) {
            let rt = rt.clone();
            pending.spawn(async move { rt.start_instance(deployment, BTreeMap::new()).await });
            issued += 1;
        }
        let target = done + WINDOW / 4;
        tokio::select! {
            _ = rt.wait_until(|s| s.completed - base >= target || s.failed > 0) => {}
            Some(joined) = pending.join_next(), if !pending.is_empty() => { joined??; }
        }
        ensure!(rt.stats().view().failed == 0, "an instance failed");
    }
    while let Some(joined) = pending.join_next().await {
        joined??;
    }
    rt.wait_until(|s| s.completed - base >= issued || s.failed > 0)
        .await;
    Ok(issued)
}

struct RunResult {
    per_sec: f64,
    purged_in_window: u64,
}

async fn measure(o: &Options, base: &Path, purge: bool) -> Result<RunResult> {
    let path = o.dir.join("retention-run.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    std::fs::copy(base, &path).context("copying the base store")?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await?);
    let retention = purge.then(|| RetentionConfig {
        busy_percent_max: o.busy_percent,
        ..RetentionConfig::default()
    });
    let config = RuntimeConfig {
        lanes: o.lanes,
        retention,
        ..RuntimeConfig::default()
    };
    let rt = Arc::new(Runtime::start(
        store.clone(),
        handlers(),
        Arc::new(SystemClock),
        config,
    ));
    let deployment = rt.deploy(MODEL, None).await?.id;
    drive(&rt, deployment, WARMUP).await?;
    let before = rt.stats().view();
    let began = Instant::now();
    let n = drive(&rt, deployment, Duration::from_secs_f64(o.secs)).await?;
    let secs = began.elapsed().as_secs_f64();
    let after = rt.stats().view();
    ensure!(after.completed - before.completed == n && after.failed == 0);
    let rt = Arc::try_unwrap(rt).map_err(|_| anyhow::anyhow!("runtime still shared"))?;
    rt.shutdown().await;
    let result = RunResult {
        per_sec: n as f64 / secs,
        purged_in_window: after.purged - before.purged,
    };
    println!(
        "run retention={}: {n} instances in {secs:.2} s = {:.0} inst/s; purged in the \
         timed window: {} ({:.0}/s); purged in all: {}",
        if purge { "on" } else { "off" },
        result.per_sec,
        result.purged_in_window,
        result.purged_in_window as f64 / secs,
        after.purged,
    );
    if purge {
        drain(&store, &path).await?;
    }
    drop(store);
    Ok(result)
}

/// The rest of the backlog, back to back with no load; then the store's size.
async fn drain(store: &Arc<dyn Store>, path: &Path) -> Result<()> {
    let began = Instant::now();
    let cutoff = now_ms() - 7 * DAY_MS;
    let mut total = 0;
    loop {
        let out = store
            .purge_finished(PurgeRequest {
                ended_before_ms: cutoff,
                deployment: None,
                limit: 1_000,
            })
            .await?;
        total += out.instances;
        if out.instances < 1_000 {
            break;
        }
    }
    let secs = began.elapsed().as_secs_f64();
    checkpoint(path).await?;
    let (used, file) = store_bytes(path).await?;
    let left = count_instances(path).await?;
    println!(
        "drain: the remaining {total} purged with no load in {secs:.1} s ({:.0}/s, {:.1} ms \
         per batch of 1,000); store after: {:.1} MiB in use of a {:.1} MiB file, {left} \
         instances left (the runs' own)",
        total as f64 / secs.max(1e-9),
        secs * 1e3 / (total as f64 / 1_000.0).max(1.0),
        mib(used),
        mib(file)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = options()?;
    std::fs::create_dir_all(&o.dir)?;
    let base = o.dir.join("retention-base.db");
    let fresh = match count_instances(&base).await {
        Ok(n) => n != o.instances as i64,
        Err(_) => true,
    };
    if fresh || !base.exists() {
        fill(&base, o.instances).await?;
    }
    let (used, file) = store_bytes(&base).await?;
    println!(
        "base store: {} finished instances past retention, {:.1} MiB in use, {:.1} MiB file",
        o.instances,
        mib(used),
        mib(file)
    );
    let mut off = Vec::new();
    let mut on = Vec::new();
    for &purge in &o.runs {
        let r = measure(&o, &base, purge).await?;
        if purge { &mut on } else { &mut off }.push(r.per_sec);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    if !off.is_empty() && !on.is_empty() {
        println!(
            "mean inst/s: off {:.0}, on {:.0}; on/off = {:.3}",
            mean(&off),
            mean(&on),
            mean(&on) / mean(&off)
        );
    }
    Ok(())
}
