//! `qflow run`: the main job. Deploys the bundled order model (a flaky payment gateway
//! behind a `q:retry` policy), starts instances on the embedded SQLite store, and shows
//! attempts, backoff parks and completions live, then a final table.
//!
//! The flakiness is scripted from the instance id, so every instance's fate is fixed
//! when it starts and the final table can be checked against the script: how many
//! attempts `charge` needs, or whether it exhausts its budget, is a pure function of the
//! id. Instances left running by an earlier, interrupted run on the same file are resumed
//! by the timer poller like any other park.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{StreamExt, TryStreamExt};
use qflow_persistence::{SqliteStore, StoreFile};
use qflow_runtime::retention::RetentionConfig;
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock};
use qflow_runtime::{TaskContext, TaskOutcome};
use qflow_store::{InstanceFilter, InstanceId, InstanceStatus, Store};

/// The bundled handlers' time limit; they return at once.
const RUN_HANDLER_LIMIT_MS: u64 = 2_000;
/// In-flight and timer-claim leases: how long a crashed run's work waits to be re-adopted.
const RUN_LEASE_MS: i64 = 3_000;

/// Start requests in flight at once.
const START_CONCURRENCY: usize = 64;
/// Exit status after Ctrl-C: 128 + SIGINT, as shells report it.
const EXIT_INTERRUPTED: u8 = 130;

/// The model `qflow run` deploys.
pub const ORDERS_MODEL: &str = include_str!("../examples/orders.bpmn");

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The SQLite file to run on; created when missing. A file that holds anything but a
    /// qflow store (or nothing) is refused.
    #[arg(long, default_value = "qflow-run.sqlite")]
    db: PathBuf,
    /// Instances to start.
    #[arg(long, default_value_t = 300)]
    instances: u32,
    /// Lane executors. Default 1: one lane keeps SQLite's one writer busy, and more only
    /// slow it (`qflow_runtime::default_lanes`).
    #[arg(long)]
    lanes: Option<usize>,
    /// Delete the store first instead of continuing what it holds (refused when the file
    /// is not a qflow store).
    #[arg(long)]
    fresh: bool,
    /// How long ended instances are kept before they are purged: an ISO-8601 duration
    /// (`P7D`, `PT12H`) or `forever`. Default 7 days. FAILED instances are kept until
    /// resolved, whatever this says.
    #[arg(long, value_parser = qflow_server::config::parse_retention)]
    retention: Option<i64>,
    /// Journal every step's input (SPEC G3), so that `qflow replay` can check another
    /// build against this run (docs/replay.md).
    #[arg(long)]
    journal: bool,
}

/// What the scripted gateway does to an instance's `charge` task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Script {
    /// Fails this many times with `GATEWAY_UNAVAILABLE`, then succeeds.
    Flaky(u32),
    /// Fails once with `CARD_DECLINED`: non-retryable, FAILED at once.
    Declined,
    /// Throws the BPMN error `FRAUD_SUSPECTED`: routed, spends no budget.
    Fraud,
}

/// The script for an instance: a pure function of its id.
pub fn script_for(instance: &str) -> Script {
    let h = instance
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    match h % 100 {
        0..=39 => Script::Flaky(0),
        40..=64 => Script::Flaky(1),
        65..=79 => Script::Flaky(2),
        80..=87 => Script::Flaky(3),
        88..=92 => Script::Flaky(4), // one more failure than the budget of 4 attempts allows
        93..=96 => Script::Declined,
        _ => Script::Fraud,
    }
}

pub(crate) fn handlers() -> AsyncHandlers {
    let ok = |_: &TaskContext<'_>| TaskOutcome::Ok(Default::default());
    AsyncHandlers::new()
        .with_sync("reserve", ok)
        .with_sync("ship", ok)
        .with_sync("release", ok)
        .with_sync("charge", |ctx: &TaskContext<'_>| {
            match script_for(ctx.instance_id) {
                Script::Flaky(n) if ctx.attempt.get() <= n => TaskOutcome::Fail {
                    code: "GATEWAY_UNAVAILABLE".into(),
                    message: format!("gateway timed out (attempt {})", ctx.attempt),
                },
                Script::Flaky(_) => TaskOutcome::Ok(Default::default()),
                Script::Declined => TaskOutcome::Fail {
                    code: "CARD_DECLINED".into(),
                    message: "issuer declined the card".into(),
                },
                Script::Fraud => TaskOutcome::BpmnError {
                    code: "FRAUD_SUSPECTED".into(),
                    message: "risk score above threshold".into(),
                },
            }
        })
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    // Logs go to stderr, filtered by RUST_LOG (default: warnings and errors only).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: &Args) -> anyhow::Result<ExitCode> {
    // Ctrl-C is handled from the start, so that an interrupted run always says what it
    // interrupted. Polling the future once installs the handler.
    let mut interrupt = Box::pin(tokio::signal::ctrl_c());
    let _ = futures::poll!(&mut interrupt);
    if args.fresh {
        remove_store(&args.db).await?;
    }
    let store: Arc<dyn Store> = Arc::new(open_store(&args.db).await?);
    let lanes = args
        .lanes
        .unwrap_or_else(|| qflow_runtime::default_lanes(&*store))
        .max(1);
    // The bundled handlers answer at once, so short limits are safe here and make a run
    // after a crash re-adopt the attempts that were in flight within seconds rather
    // than after the default 40 s lease.
    let config = RuntimeConfig {
        lanes,
        handler_time_limit_ms: RUN_HANDLER_LIMIT_MS,
        inflight_lease_ms: RUN_LEASE_MS,
        timer_lease_ms: RUN_LEASE_MS,
        retention: Some(RetentionConfig {
            default_ms: args
                .retention
                .unwrap_or(RetentionConfig::default().default_ms),
            ..RetentionConfig::default()
        }),
        journal: if args.journal {
            qflow_runtime::journal::JournalPolicy::All
        } else {
            qflow_runtime::journal::JournalPolicy::Off
        },
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::start(store.clone(), handlers(), Arc::new(SystemClock), config);
    let deployment = runtime.deploy(ORDERS_MODEL, None).await?;
    let resumed_ids: Vec<InstanceId> = store
        .instances(&InstanceFilter {
            status: Some(InstanceStatus::Running),
            limit: 10_000,
            ..InstanceFilter::default()
        })
        .await?
        .iter()
        .map(|r| r.id)
        .collect();
    let resumed = resumed_ids.len() as u64;
    say_err!(
        "qflow run: orders on {} (deployment {}, {}); resuming {} unfinished instance(s)",
        args.db.display(),
        deployment.id.0,
        crate::text::plural(lanes, "lane"),
        resumed
    );
    if resumed > 0 {
        say_err!(
            "  attempts that were in flight when the earlier run stopped are re-adopted once \
             their lease lapses (at most {} s)",
            RUN_LEASE_MS / 1000
        );
    }

    let began = Instant::now();
    let stats = runtime.stats();
    let progress = tokio::spawn(progress_line(stats.clone()));
    let target = args.instances as u64 + resumed;
    let work = async {
        // Starts go out concurrently: each returns once its instance is durable, and many
        // share one commit.
        let ids: Vec<InstanceId> = futures::stream::iter(0..args.instances)
            .map(|_| runtime.start_instance(deployment.id, Default::default()))
            .buffer_unordered(START_CONCURRENCY)
            .try_collect()
            .await?;
        // This process's own counters are the fast path. Another engine process on the
        // same file (a second `qflow run`, later a server) may step some of these
        // instances instead — the fence lets exactly one of them commit each step — so
        // the store has the last word: done when none of them is running any more.
        let ours: std::collections::HashSet<InstanceId> =
            ids.iter().chain(&resumed_ids).copied().collect();
        // The counters also count instances of the other process this one finished, so
        // reaching the target only says when to look; the store's answer ends the wait.
        let counted = runtime.wait_until(|s| s.completed + s.failed + s.cancelled >= target);
        tokio::pin!(counted);
        let mut reached = false;
        loop {
            tokio::select! {
                _ = &mut counted, if !reached => reached = true,
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
            let running = store
                .instances(&InstanceFilter {
                    status: Some(InstanceStatus::Running),
                    limit: 10_000,
                    ..InstanceFilter::default()
                })
                .await?;
            if !running.iter().any(|r| ours.contains(&r.id)) {
                break;
            }
        }
        anyhow::Ok(ids)
    };
    let finished = tokio::select! {
        ids = work => Some(ids?),
        _ = &mut interrupt => None,
    };
    let elapsed = began.elapsed();
    progress.abort();
    let view = stats.view();
    say_err!();
    let Some(ids) = finished else {
        say_err!("{}", interrupted_message(args, resumed, &view));
        // Lanes finish the handlers they are running and commit their outcomes, so the
        // rerun has as little as possible to re-adopt.
        runtime.shutdown().await;
        store.close().await;
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    };
    runtime.shutdown().await;

    print_table(&*store, &ids, elapsed, &view, &args.db, args.journal).await?;
    if resumed > 0 {
        println!("{resumed} instance(s) resumed from an earlier run on this file finished too");
    }
    // Closed, the file is whole on its own: SQLite folds the WAL into it and removes the
    // `-wal` and `-shm` files beside it.
    store.close().await;
    Ok(ExitCode::SUCCESS)
}

/// What Ctrl-C interrupted, and how to finish it: every instance started is durable, and
/// a rerun on the same file resumes the unfinished ones.
fn interrupted_message(args: &Args, resumed: u64, view: &qflow_runtime::StatsView) -> String {
    let finished = view.completed + view.failed + view.cancelled;
    let unfinished = (view.started + resumed).saturating_sub(finished);
    let db = args.db.display();
    let also = if resumed > 0 {
        format!(" (and resuming {resumed})")
    } else {
        String::new()
    };
    format!(
        "qflow run: interrupted (Ctrl-C) after starting {} of {} instance(s){also}, {finished} \
         finished; the {unfinished} unfinished instance(s) are saved in {db}.\n  \
         A rerun on the same file resumes them: `qflow run --db {db} --instances 0` finishes \
         them without starting new ones (attempts that were in flight are re-adopted within \
         {} s).",
        view.started,
        args.instances,
        RUN_LEASE_MS / 1000,
    )
}

/// `--fresh`: deletes the store at `db` with its WAL and shared-memory files — only when
/// it is a qflow store or an empty file, never another program's data.
async fn remove_store(db: &Path) -> anyhow::Result<()> {
    if let StoreFile::Foreign(found) = SqliteStore::inspect(db).await? {
        bail!(
            "--fresh refused: {} is not a qflow store: it is {found}; --fresh deletes only a \
             qflow store or an empty file (name another file with --db)",
            db.display()
        );
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {p:?}")),
        }
    }
    Ok(())
}

/// Opens the store, saying what to do about a file that is not one.
pub(crate) async fn open_store(db: &Path) -> anyhow::Result<SqliteStore> {
    SqliteStore::open(db).await.map_err(|e| match e {
        qflow_persistence::Error::NotAStore { .. } => anyhow::anyhow!(
            "{e}; qflow creates its store only in a new or empty file (name another file with \
             --db)"
        ),
        e => e.into(),
    })
}

async fn progress_line(stats: Arc<qflow_runtime::Stats>) {
    let mut err = std::io::stderr();
    loop {
        let s = stats.view();
        let _ = write!(
            err,
            "\r  started {:>6} | completed {:>6} | failed {:>4} | attempts {:>6} | backoff parks {:>5} | timers fired {:>5}   ",
            s.started, s.completed, s.failed, s.handler_calls, s.parks, s.timers_fired
        );
        let _ = err.flush();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn print_table(
    store: &dyn Store,
    ids: &[InstanceId],
    elapsed: Duration,
    view: &qflow_runtime::StatsView,
    db: &std::path::Path,
    journal: bool,
) -> anyhow::Result<()> {
    // (outcome, charge attempts) -> instances, in a stable order.
    let mut rows: BTreeMap<(String, u32), u64> = BTreeMap::new();
    let mut mismatches = 0u64;
    let mut example_failed = None;
    for id in ids {
        let rec = store
            .instance(*id)
            .await?
            .with_context(|| format!("instance {id} vanished"))?;
        let attempts = store.attempts(*id).await?;
        let charge = attempts.iter().filter(|a| a.node == "charge").count() as u32;
        let released = attempts.iter().any(|a| a.node == "release");
        let outcome = match (&rec.status, &rec.failure_code) {
            (InstanceStatus::Failed, Some(code)) => format!("failed {code}"),
            // The BPMN error route: modelled, so it spent no retry budget.
            (InstanceStatus::Completed, _) if released => "held (fraud suspected)".to_owned(),
            (s, _) => s.as_str().to_owned(),
        };
        let expected = expected_charge_attempts(script_for(&id.to_string()));
        if charge != expected {
            mismatches += 1;
        }
        if rec.status == InstanceStatus::Failed && example_failed.is_none() {
            example_failed = Some((*id, attempts));
        }
        *rows.entry((outcome, charge)).or_default() += 1;
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<28} {:>16} {:>10}",
        "outcome", "charge attempts", "instances"
    )?;
    for ((outcome, attempts), n) in &rows {
        writeln!(out, "{outcome:<28} {attempts:>16} {n:>10}")?;
    }
    writeln!(
        out,
        "\n{} instances in {:.2}s ({:.0}/s); {} handler calls, {} backoff parks, {} steps in {} commits",
        ids.len(),
        elapsed.as_secs_f64(),
        ids.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        view.handler_calls,
        view.parks,
        view.steps,
        view.batches
    )?;
    writeln!(
        out,
        "attempt counts that differ from the script: {mismatches}"
    )?;
    if let Some((id, attempts)) = example_failed {
        writeln!(out, "\nA FAILED instance is kept for inspection: {id}")?;
        for a in attempts {
            writeln!(
                out,
                "  {:<8} attempt {} {:<10} {}",
                a.node,
                a.attempt,
                a.outcome.as_str(),
                a.code.unwrap_or_default()
            )?;
        }
        // A journaled run's repair is journaled too, or the instance's journal has a gap.
        let journaled = if journal { " --journal" } else { "" };
        writeln!(
            out,
            "Inspect it with `qflow instances show {id} --db {}`; \
             `qflow instances resume {id} --db {}{journaled}` tries it again \
             (docs/operations.md).",
            db.display(),
            db.display()
        )?;
    }
    Ok(())
}

/// How many `charge` attempts the script leads to under the bundled policy (4 attempts).
fn expected_charge_attempts(script: Script) -> u32 {
    match script {
        Script::Flaky(n) => (n + 1).min(4),
        Script::Declined | Script::Fraud => 1,
    }
}
