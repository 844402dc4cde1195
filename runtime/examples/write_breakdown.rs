//! Where a durable instance's bytes go on SQLite (issue 26, point 1): runs N instances
//! of the 10-service-task linear model (`cli/benches/linear.bpmn`) through the runtime on
//! a SQLite store whose WAL is never checkpointed automatically, so every page every
//! commit wrote is still in the WAL when the run ends; then copies the database and its
//! WAL aside, for `scripts/write-breakdown` to count the frames by page and name each
//! page's table or index (SQLite's `dbstat`).
//!
//!   cargo run --release -p qflow-runtime --example write_breakdown -- OUT_DIR [N] [LANES]
//!
//! Prints one line, `instances=N frames_before=F page_size=P`: the WAL frames written
//! before the first instance started (schema, deployment), which the count leaves out.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use qflow_persistence::{SqliteSettings, SqliteStore};
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock, TaskContext, TaskOutcome};
use qflow_store::Store;

const MODEL: &str = include_str!("../../cli/benches/linear.bpmn");
/// Instances started and not yet finished, at most (the runtime bench's window).
const WINDOW: usize = 1_000;
/// The WAL header and each frame's header, in bytes (SQLite's file format, §4.1).
const WAL_HEADER: u64 = 32;
const FRAME_HEADER: u64 = 24;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(
        args.next()
            .context("usage: write_breakdown OUT_DIR [N] [LANES]")?,
    );
    let n: usize = args.next().map_or(Ok(2_000), |a| a.parse())?;
    let lanes: usize = args.next().map_or(Ok(1), |a| a.parse())?;
    ensure!(n >= 1 && lanes >= 1, "N and LANES are at least 1");
    std::fs::create_dir_all(&out)?;
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("qflow.db");
    let settings = SqliteSettings {
        wal_autocheckpoint_pages: 0,
        ..SqliteSettings::default()
    };
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_with(&db, &settings).await?);
    let handlers = AsyncHandlers::new().with_sync("svc", |_: &TaskContext<'_>| {
        TaskOutcome::Ok(Default::default())
    });
    let config = RuntimeConfig {
        lanes,
        // Ended instances stay: the breakdown is of the work, not of the purge.
        retention: None,
        ..RuntimeConfig::default()
    };
    let rt = Arc::new(Runtime::start(
        store,
        handlers,
        Arc::new(SystemClock),
        config,
    ));
    let deployment = rt.deploy(MODEL, None).await?.id;
    let wal = dir.path().join("qflow.db-wal");
    let header = std::fs::read(&wal).context("the WAL after the deployment")?;
    ensure!(header.len() >= WAL_HEADER as usize, "the WAL has no header");
    let page_size = u64::from(u32::from_be_bytes([
        header[8], header[9], header[10], header[11],
    ]));
    let frames = |len: u64| len.saturating_sub(WAL_HEADER) / (FRAME_HEADER + page_size);
    let frames_before = frames(header.len() as u64);

    // As the runtime bench drives it (closed loop): up to WINDOW instances in flight, the
    // starts issued together so that a lane batches them, refilled as a quarter of the
    // window finishes.
    let mut started = 0usize;
    let mut pending = futures::stream::FuturesUnordered::new();
    while started < n {
        let done = rt.stats().view().completed as usize;
        let room = (WINDOW - (started - done).min(WINDOW)).min(n - started);
        for _ in 0..room {
            let rt = rt.clone();
            pending.push(tokio::spawn(async move {
                rt.start_instance(deployment, Default::default()).await
            }));
        }
        started += room;
        let target = (done + WINDOW / 4).min(n) as u64;
        tokio::select! {
            _ = rt.wait_until(|s| s.completed >= target || s.failed > 0) => {}
            Some(joined) = futures::StreamExt::next(&mut pending), if !pending.is_empty() => {
                joined??;
            }
        }
    }
    while let Some(joined) = futures::StreamExt::next(&mut pending).await {
        joined??;
    }
    // Bounded: a run that stops making progress is reported, not waited on for ever.
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    loop {
        let v = rt.stats().view();
        if v.failed > 0 {
            bail!("{} instances failed", v.failed);
        }
        if v.completed as usize >= n {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!("only {} of {n} instances completed in 600 s", v.completed);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Nothing writes now: the files are a consistent picture while the store is open (on
    // close SQLite would checkpoint and delete the WAL).
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::copy(&db, out.join("qflow.db"))?;
    std::fs::copy(&wal, out.join("qflow.db-wal"))?;
    println!("instances={n} frames_before={frames_before} page_size={page_size}");
    let rt = Arc::try_unwrap(rt).map_err(|_| anyhow::anyhow!("runtime still shared"))?;
    rt.shutdown().await;
    Ok(())
}
