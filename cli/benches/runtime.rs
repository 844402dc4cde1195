//! Runtime throughput benchmark (issue 4, `docs/performance.md` "Runtime throughput").
//!
//! Measures, in release mode, how many instances of the 10-service-task linear process
//! (`cli/benches/linear.bpmn`, the peer benchmark's model with `q:task="svc"` added) the
//! runtime completes per second on the in-memory store, the durable SQLite store (WAL,
//! `synchronous=FULL`) and PostgreSQL (`synchronous_commit=on`), each with 1, 2 and 4
//! lanes; and what one timer poll (`claim_due_timers` with nothing due) costs with 10k
//! and with 1M parked timers on SQLite and PostgreSQL.
//!
//! Run: `cargo bench -p qflow-cli --bench runtime` (all of it), or with options after
//! `--`: `--stores=memory,sqlite,postgres --lanes=1,2,4 --secs=3.5 --window=1000
//! --batch-max=256 --parked=10000,1000000 --polls=2000 --no-timers --no-throughput
//! --open-loop --journal --finished=N --parked-live=N --wal-autocheckpoint=PAGES --group-gather-us=N --pg-connections=N --what-if=ordered-ids,no-attempt-rows,cached-deployments,journal-unstored,journal-tiny,no-lease` (the what-ifs
//! break the contract on purpose to price one cost each; see [`WhatIf`]).
//! `QFLOW_BENCH_RESULTS` names a file that receives one machine-readable line per result.
//! PostgreSQL runs when `QFLOW_TEST_PG_URL` is set (a fresh schema per measurement,
//! dropped afterwards); otherwise it prints a skip line. SQLite files go to
//! `QFLOW_BENCH_DIR`, else Cargo's target tmp dir (on the real disk: fsyncs are real).
//!
//! Load shape: the driver keeps `window` instances live (started, not yet finished),
//! issuing new starts as instances finish (in refills of a quarter window), with every
//! start request awaited concurrently — a closed loop. Awaiting starts one by one would
//! measure commit latency instead of throughput. `--open-loop` instead keeps `window`
//! *start requests* in flight regardless of completions.
//!
//! Every figure is a delta of the runtime's own counters over the timed interval, plus
//! what a pass-through store wrapper times (commit, the deployment read of each start)
//! and `/proc/self/io` write bytes (on SQLite between two passive checkpoints of the whole
//! WAL, so that the bytes include the copying the run's frames owe the file whatever the
//! checkpoint interval). The run checks that every timed instance completed,
//! with ten handler calls each and no failed start. This is a measuring tool: it must
//! never assert on timing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use qflow_core::TimerKind;
use qflow_persistence::{PgConfig, PgStore, SqliteSettings, SqliteStore};
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, StatsView, SystemClock};
use qflow_runtime::{TaskContext, TaskOutcome};
use qflow_store::memory::MemoryStore;
use qflow_store::{
    AttemptRecord, Commit, CommitOutcome, DeploymentId, DeploymentRecord, IncidentRecord,
    InstanceFilter, InstanceId, InstanceRecord, InstanceStatus, NewDeployment, RetireOutcome,
    Store, StoreResult, SubscriptionRecord, TimerClaim, TimerRecord,
};

const MODEL: &str = include_str!("linear.bpmn");
/// Service tasks per instance of the model.
const TASKS_PER_INSTANCE: u64 = 10;
/// How long the untimed warm-up of each measurement drives load before the timed run.
const WARMUP_MS: u64 = 1_500;
/// Untimed polls before the timed ones (caches, prepared statements).
const POLL_WARMUP: u32 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum StoreKind {
    Memory,
    Sqlite,
    Postgres,
}

impl StoreKind {
    fn parse(s: &str) -> Result<StoreKind> {
        Ok(match s {
            "memory" | "mem" => StoreKind::Memory,
            "sqlite" => StoreKind::Sqlite,
            "postgres" | "pg" => StoreKind::Postgres,
            other => bail!("unknown store {other:?} (memory, sqlite, postgres)"),
        })
    }

    fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// Options; every field states its default.
#[derive(Debug, Clone)]
struct Options {
    /// Default: memory, sqlite, postgres.
    stores: Vec<StoreKind>,
    /// Default: 1, 2, 4.
    lanes: Vec<usize>,
    /// Target length of each timed run. Default 3.5 s (the brief asks for at least 3 s).
    secs: f64,
    /// Live instances (closed loop) or start requests in flight (open loop). Default 1000.
    window: u64,
    /// `RuntimeConfig::batch_max`. Default 256 (the runtime's default).
    batch_max: usize,
    /// Parked-timer populations for the poll measurement. Default 10k, 1M.
    parked: Vec<u64>,
    /// Timed polls per population. Default 2000.
    polls: u32,
    throughput: bool,
    timers: bool,
    open_loop: bool,
    /// Experiments that break the contract on purpose, to price one cost. Default none.
    what_if: WhatIf,
    /// `--journal`: every step writes its input-journal row (SPEC G3), as
    /// `[journal] enabled = true` does; the store column then reads `<store>+journal`.
    journal: bool,
    /// `--finished=N`: before the warm-up, run the workload until N instances have
    /// finished (retention keeps them: they ended now), so the timed run measures a
    /// store that already holds them (issue 26, "Growth"). Default 0.
    finished: u64,
    /// `--parked-live=N`: before the warm-up, park N running instances on a timer due a
    /// day later, straight into the tables (as the poll measurement does). Default 0.
    parked_live: u64,
    /// `--wal-autocheckpoint=PAGES`: SQLite's `SqliteSettings::wal_autocheckpoint_pages`
    /// (default: the store's, 1,000).
    wal_autocheckpoint: Option<u32>,
    /// `--group-gather-us=N`: SQLite's `SqliteSettings::group_gather` in microseconds
    /// (default: the store's, 1,500).
    group_gather_us: Option<u64>,
    /// `--pg-connections=N`: PostgreSQL's `PgConfig::max_connections` (default: the
    /// store's, 8).
    pg_connections: Option<u32>,
}

/// Store-side experiments, applied by [`TimedStore`]. None of them is how qflow runs;
/// each removes one cost so the difference shows what that cost is.
#[derive(Debug, Clone, Copy, Default)]
struct WhatIf {
    /// Store instances under increasing ids (as UUIDv7 would give) instead of the random
    /// v4 ids the runtime assigns: live rows cluster in a few B-tree pages.
    ordered_ids: bool,
    /// Drop the attempt-history rows (breaks O1a).
    no_attempt_rows: bool,
    /// Answer `deployment()` from memory after the first read (the read every
    /// `start_instance` makes; hides a concurrent retirement).
    cached_deployments: bool,
    /// With `--journal`: build every step's journal row in the lane, then drop it before
    /// the store (breaks G3): prices the store's half of the journal apart from the
    /// lane's.
    journal_unstored: bool,
    /// With `--journal`: store every row with its input, delta and hashes emptied
    /// (breaks G3): prices the rows' bytes apart from their number.
    journal_tiny: bool,
    /// Drop the in-flight lease's timer rows, their arms and their resolves (breaks
    /// C7a: a crashed replica's attempts would never be re-adopted): prices the `~run`
    /// row each running instance keeps.
    no_lease: bool,
}

impl WhatIf {
    fn parse(list: &str) -> Result<WhatIf> {
        let mut w = WhatIf::default();
        for item in list.split(',').filter(|s| !s.is_empty()) {
            match item {
                "ordered-ids" => w.ordered_ids = true,
                "no-attempt-rows" => w.no_attempt_rows = true,
                "cached-deployments" => w.cached_deployments = true,
                "journal-unstored" => w.journal_unstored = true,
                "journal-tiny" => w.journal_tiny = true,
                "no-lease" => w.no_lease = true,
                other => bail!(
                    "unknown --what-if {other:?} (ordered-ids, no-attempt-rows, cached-deployments, journal-unstored, journal-tiny, no-lease)"
                ),
            }
        }
        Ok(w)
    }

    fn label(self) -> String {
        let mut parts = Vec::new();
        if self.ordered_ids {
            parts.push("ordered-ids");
        }
        if self.no_attempt_rows {
            parts.push("no-attempt-rows");
        }
        if self.cached_deployments {
            parts.push("cached-deployments");
        }
        if self.journal_unstored {
            parts.push("journal-unstored");
        }
        if self.journal_tiny {
            parts.push("journal-tiny");
        }
        if self.no_lease {
            parts.push("no-lease");
        }
        parts.iter().map(|p| format!("+{p}")).collect()
    }
}

impl Options {
    /// What a store's name is suffixed with: the what-ifs, then `+journal`, then
    /// `+wal=PAGES`.
    fn label(&self) -> String {
        let mut label = self.what_if.label();
        if self.journal {
            label.push_str("+journal");
        }
        if let Some(pages) = self.wal_autocheckpoint {
            label.push_str(&format!("+wal={pages}"));
        }
        if let Some(us) = self.group_gather_us {
            label.push_str(&format!("+gather={us}us"));
        }
        if let Some(n) = self.pg_connections {
            label.push_str(&format!("+pgconn={n}"));
        }
        label
    }

    fn parse() -> Result<Options> {
        let mut o = Options {
            stores: vec![StoreKind::Memory, StoreKind::Sqlite, StoreKind::Postgres],
            lanes: vec![1, 2, 4],
            secs: 3.5,
            window: 1_000,
            batch_max: RuntimeConfig::default().batch_max,
            parked: vec![10_000, 1_000_000],
            polls: 2_000,
            throughput: true,
            timers: true,
            open_loop: false,
            what_if: WhatIf::default(),
            journal: false,
            finished: 0,
            parked_live: 0,
            wal_autocheckpoint: None,
            group_gather_us: None,
            pg_connections: None,
        };
        for arg in std::env::args().skip(1) {
            let (key, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
            let list = || value.split(',').filter(|s| !s.is_empty());
            match key {
                // What `cargo bench` passes to a harness=false target.
                "--bench" => {}
                "--stores" => o.stores = list().map(StoreKind::parse).collect::<Result<_>>()?,
                "--lanes" => o.lanes = list().map(str::parse).collect::<Result<_, _>>()?,
                "--secs" => o.secs = value.parse()?,
                "--window" => o.window = value.parse()?,
                "--batch-max" => o.batch_max = value.parse()?,
                "--parked" => o.parked = list().map(str::parse).collect::<Result<_, _>>()?,
                "--polls" => o.polls = value.parse()?,
                "--no-throughput" => o.throughput = false,
                "--no-timers" => o.timers = false,
                "--open-loop" => o.open_loop = true,
                "--what-if" => o.what_if = WhatIf::parse(value)?,
                "--journal" => o.journal = true,
                "--finished" => o.finished = value.parse()?,
                "--parked-live" => o.parked_live = value.parse()?,
                "--wal-autocheckpoint" => o.wal_autocheckpoint = Some(value.parse()?),
                "--group-gather-us" => o.group_gather_us = Some(value.parse()?),
                "--pg-connections" => o.pg_connections = Some(value.parse()?),
                other => {
                    bail!("unknown option {other:?}; see the module doc of benches/runtime.rs")
                }
            }
        }
        ensure!(o.window >= 1, "--window must be at least 1");
        ensure!(o.secs > 0.0, "--secs must be positive");
        ensure!(
            o.lanes.iter().all(|&l| l >= 1),
            "--lanes must be at least 1"
        );
        Ok(o)
    }
}

fn pg_url() -> Option<String> {
    std::env::var("QFLOW_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

fn bench_dir() -> PathBuf {
    std::env::var_os("QFLOW_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
}

/// A store under test plus whatever must be cleaned up after it.
struct Opened {
    store: Arc<dyn Store>,
    cleanup: Cleanup,
}

enum Cleanup {
    None,
    Sqlite(Arc<SqliteStore>, tempfile::TempDir),
    Postgres(Arc<PgStore>, String),
}

impl Opened {
    async fn open(kind: StoreKind, o: &Options) -> Result<Option<Opened>> {
        Ok(Some(match kind {
            StoreKind::Memory => Opened {
                store: Arc::new(MemoryStore::new()),
                cleanup: Cleanup::None,
            },
            StoreKind::Sqlite => {
                let base = bench_dir();
                std::fs::create_dir_all(&base)
                    .with_context(|| format!("create {}", base.display()))?;
                let dir = tempfile::tempdir_in(&base)?;
                let mut settings = SqliteSettings::default();
                if let Some(pages) = o.wal_autocheckpoint {
                    settings.wal_autocheckpoint_pages = pages;
                }
                if let Some(us) = o.group_gather_us {
                    settings.group_gather = std::time::Duration::from_micros(us);
                }
                let store =
                    Arc::new(SqliteStore::open_with(dir.path().join("bench.db"), &settings).await?);
                Opened {
                    store: store.clone(),
                    cleanup: Cleanup::Sqlite(store, dir),
                }
            }
            StoreKind::Postgres => {
                let Some(url) = pg_url() else {
                    return Ok(None);
                };
                let schema = unique_schema();
                let mut config = PgConfig {
                    schema: Some(schema.clone()),
                    ..PgConfig::default()
                };
                if let Some(n) = o.pg_connections {
                    config.max_connections = n;
                }
                let store = Arc::new(PgStore::connect_with(&url, config).await?);
                Opened {
                    store: store.clone(),
                    cleanup: Cleanup::Postgres(store, schema),
                }
            }
        }))
    }

    /// The SQLite committer's transactions and batches so far (`None` for other stores).
    fn commit_counts(&self) -> Option<(u64, u64)> {
        match &self.cleanup {
            Cleanup::Sqlite(s, _) => Some(s.commit_counts()),
            _ => None,
        }
    }

    /// The SQLite file, for the bulk insert of parked timers.
    fn sqlite_path(&self) -> Option<PathBuf> {
        match &self.cleanup {
            Cleanup::Sqlite(s, _) => Some(s.path().to_path_buf()),
            _ => None,
        }
    }

    /// Copies every WAL frame back into the SQLite file (a passive checkpoint from a
    /// connection of its own; nothing else writes when it is called), so that the bytes
    /// written over the timed run include what its checkpoints owe, whatever the
    /// checkpoint interval: without it a longer interval would leave its copying outside
    /// the measured window. Nothing for the other stores.
    async fn fold_wal(&self) -> Result<()> {
        use sqlx::Connection;
        let Some(path) = self.sqlite_path() else {
            return Ok(());
        };
        let mut conn = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
        )
        .await
        .with_context(|| format!("open {} to checkpoint it", path.display()))?;
        let (busy, log, copied): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&mut conn)
            .await?;
        ensure!(
            busy == 0 && log == copied,
            "checkpoint of {} left frames behind (busy {busy}, {copied} of {log} frames)",
            path.display()
        );
        conn.close().await?;
        Ok(())
    }

    async fn close(self) -> Result<()> {
        drop(self.store);
        match self.cleanup {
            Cleanup::None => {}
            Cleanup::Sqlite(store, dir) => {
                store.close().await;
                drop(dir);
            }
            Cleanup::Postgres(store, schema) => {
                sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                    .execute(store.pool())
                    .await
                    .with_context(|| format!("drop schema {schema}"))?;
                store.close().await;
            }
        }
        Ok(())
    }
}

/// Time spent inside the store, by call kind: where a lane's wall time goes when it is
/// not stepping. Nanoseconds and call counts, summed over every lane.
#[derive(Debug, Default)]
struct StoreTime {
    commit_calls: AtomicU64,
    commit_ns: AtomicU64,
    deployment_calls: AtomicU64,
    deployment_ns: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default)]
struct StoreTimeView {
    commit_calls: u64,
    commit_ns: u64,
    deployment_calls: u64,
    deployment_ns: u64,
}

impl StoreTime {
    fn view(&self) -> StoreTimeView {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StoreTimeView {
            commit_calls: l(&self.commit_calls),
            commit_ns: l(&self.commit_ns),
            deployment_calls: l(&self.deployment_calls),
            deployment_ns: l(&self.deployment_ns),
        }
    }
}

impl StoreTimeView {
    fn since(self, before: StoreTimeView) -> StoreTimeView {
        StoreTimeView {
            commit_calls: self.commit_calls - before.commit_calls,
            commit_ns: self.commit_ns - before.commit_ns,
            deployment_calls: self.deployment_calls - before.deployment_calls,
            deployment_ns: self.deployment_ns - before.deployment_ns,
        }
    }
}

/// A pass-through [`Store`] that times `commit` and `deployment` (the read every
/// `start_instance` makes). One `Instant` pair per call: noise next to any store call.
struct TimedStore {
    inner: Arc<dyn Store>,
    time: Arc<StoreTime>,
    what_if: WhatIf,
    ids: std::sync::Mutex<IdMap>,
    deployments: std::sync::Mutex<BTreeMap<DeploymentId, DeploymentRecord>>,
}

/// Runtime id <-> stored id, for [`WhatIf::ordered_ids`].
#[derive(Default)]
struct IdMap {
    next: u64,
    stored: std::collections::HashMap<InstanceId, InstanceId>,
    runtime: std::collections::HashMap<InstanceId, InstanceId>,
}

impl IdMap {
    fn stored_for(&mut self, id: InstanceId) -> InstanceId {
        if let Some(s) = self.stored.get(&id) {
            return *s;
        }
        self.next += 1;
        let s = InstanceId::from_u128((u128::from(self.next) << 64) | 0x4000_8000_0000_0000);
        self.stored.insert(id, s);
        self.runtime.insert(s, id);
        s
    }

    fn runtime_for(&self, id: InstanceId) -> InstanceId {
        self.runtime.get(&id).copied().unwrap_or(id)
    }

    fn forget(&mut self, id: InstanceId) {
        if let Some(s) = self.stored.remove(&id) {
            self.runtime.remove(&s);
        }
    }
}

impl TimedStore {
    fn new(inner: Arc<dyn Store>, time: Arc<StoreTime>, what_if: WhatIf) -> TimedStore {
        TimedStore {
            inner,
            time,
            what_if,
            ids: Default::default(),
            deployments: Default::default(),
        }
    }

    fn rewrite(&self, mut batch: Vec<Commit>) -> Vec<Commit> {
        if self.what_if.no_lease {
            for c in &mut batch {
                c.timers.arm.retain(|t| t.name.kind() != TimerKind::Lease);
                c.timers
                    .resolve
                    .retain(|t| t.name.kind() != TimerKind::Lease);
            }
        }
        if self.what_if.no_attempt_rows {
            for c in &mut batch {
                c.attempts.clear();
            }
        }
        if self.what_if.journal_unstored {
            for c in &mut batch {
                c.journal = None;
            }
        }
        if self.what_if.journal_tiny {
            for entry in batch.iter_mut().filter_map(|c| c.journal.as_mut()) {
                entry.input.clear();
                entry.delta.clear();
                entry.snapshot_hash.clear();
                entry.effects_hash.clear();
                entry.row_hash.clear();
            }
        }
        if self.what_if.ordered_ids {
            let mut ids = self.ids.lock().expect("id map");
            for c in &mut batch {
                let stored = ids.stored_for(c.instance);
                c.instance = stored;
                for t in &mut c.timers.arm {
                    t.instance = stored;
                }
                for a in &mut c.attempts {
                    a.instance = stored;
                }
            }
        }
        batch
    }

    fn stored_id(&self, id: InstanceId) -> InstanceId {
        if self.what_if.ordered_ids {
            self.ids.lock().expect("id map").stored_for(id)
        } else {
            id
        }
    }
}

fn add_elapsed(calls: &AtomicU64, ns: &AtomicU64, since: Instant) {
    calls.fetch_add(1, Ordering::Relaxed);
    ns.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

#[async_trait::async_trait]
impl Store for TimedStore {
    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }

    fn commits_group(&self) -> bool {
        self.inner.commits_group()
    }
    async fn close(&self) {
        self.inner.close().await
    }
    async fn deploy(&self, new: NewDeployment<'_>) -> StoreResult<DeploymentRecord> {
        self.inner.deploy(new).await
    }
    async fn deployment(&self, id: DeploymentId) -> StoreResult<Option<DeploymentRecord>> {
        let t = Instant::now();
        let cached = self.what_if.cached_deployments;
        let hit = cached
            .then(|| {
                self.deployments
                    .lock()
                    .expect("deployments")
                    .get(&id)
                    .cloned()
            })
            .flatten();
        let out = match hit {
            Some(record) => Ok(Some(record)),
            None => self.inner.deployment(id).await,
        };
        if let (true, Ok(Some(record))) = (cached, &out) {
            self.deployments
                .lock()
                .expect("deployments")
                .insert(id, record.clone());
        }
        add_elapsed(&self.time.deployment_calls, &self.time.deployment_ns, t);
        out
    }
    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>> {
        self.inner.deployments().await
    }
    async fn retire(&self, id: DeploymentId) -> StoreResult<RetireOutcome> {
        self.inner.retire(id).await
    }
    async fn commit(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        let finished: Vec<InstanceId> = batch
            .iter()
            .filter(|c| c.state.status != qflow_store::InstanceStatus::Running)
            .map(|c| c.instance)
            .collect();
        let batch = self.rewrite(batch);
        let t = Instant::now();
        let out = self.inner.commit(batch).await;
        add_elapsed(&self.time.commit_calls, &self.time.commit_ns, t);
        if self.what_if.ordered_ids {
            let mut ids = self.ids.lock().expect("id map");
            for id in finished {
                ids.forget(id);
            }
        }
        out
    }
    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>> {
        let record = self.inner.instance(self.stored_id(id)).await?;
        Ok(record.map(|r| InstanceRecord { id, ..r }))
    }
    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
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
        let mut claimed = self.inner.claim_due_timers(claim).await?;
        if self.what_if.ordered_ids {
            let ids = self.ids.lock().expect("id map");
            for t in &mut claimed {
                t.instance = ids.runtime_for(t.instance);
            }
        }
        Ok(claimed)
    }
    async fn next_timer_due(&self) -> StoreResult<Option<i64>> {
        self.inner.next_timer_due().await
    }
    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>> {
        self.inner.timers(self.stored_id(instance)).await
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
    async fn audit(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> StoreResult<Vec<qflow_store::AuditRecord>> {
        self.inner.audit(instance, limit).await
    }
    async fn purge_finished(
        &self,
        request: qflow_store::PurgeRequest,
    ) -> StoreResult<qflow_store::PurgeOutcome> {
        self.inner.purge_finished(request).await
    }
    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>> {
        self.inner.attempts(instance).await
    }
    async fn journal(
        &self,
        instance: InstanceId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<qflow_store::JournalEntry>> {
        self.inner.journal(instance, after, limit).await
    }
    async fn offered_pull_tasks(
        &self,
        query: qflow_store::PullQuery<'_>,
    ) -> StoreResult<Vec<qflow_store::PullTaskRecord>> {
        self.inner.offered_pull_tasks(query).await
    }
    async fn pull_tasks(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<qflow_store::PullTaskRecord>> {
        self.inner.pull_tasks(instance).await
    }
    async fn claim_due_outbox(
        &self,
        claim: TimerClaim<'_>,
    ) -> StoreResult<Vec<qflow_store::OutboxRecord>> {
        let mut claimed = self.inner.claim_due_outbox(claim).await?;
        if self.what_if.ordered_ids {
            let ids = self.ids.lock().expect("id map");
            for row in &mut claimed {
                row.instance = ids.runtime_for(row.instance);
            }
        }
        Ok(claimed)
    }
    async fn record_delivery(
        &self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: qflow_store::DeliveryRecord,
    ) -> StoreResult<bool> {
        self.inner.record_delivery(key, owner, now_ms, record).await
    }
    async fn next_outbox_due(&self) -> StoreResult<Option<i64>> {
        self.inner.next_outbox_due().await
    }
    async fn outbox_row(&self, key: &str) -> StoreResult<Option<qflow_store::OutboxRecord>> {
        self.inner.outbox_row(key).await
    }
    async fn outbox(&self, instance: InstanceId) -> StoreResult<Vec<qflow_store::OutboxRecord>> {
        self.inner.outbox(self.stored_id(instance)).await
    }
    async fn user_tasks(
        &self,
        query: &qflow_store::UserTaskQuery,
    ) -> StoreResult<Vec<qflow_store::UserTaskRecord>> {
        self.inner.user_tasks(query).await
    }
    async fn instance_user_tasks(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<qflow_store::UserTaskRecord>> {
        self.inner.instance_user_tasks(instance).await
    }

    async fn camunda_keys(&self, names: &[qflow_store::KeyName]) -> StoreResult<Vec<i64>> {
        self.inner.camunda_keys(names).await
    }

    async fn camunda_key(&self, key: i64) -> StoreResult<Option<qflow_store::KeyName>> {
        self.inner.camunda_key(key).await
    }

    async fn buffer_message(
        &self,
        message: &qflow_store::NewBufferedMessage,
    ) -> StoreResult<qflow_store::BufferOutcome> {
        self.inner.buffer_message(message).await
    }

    async fn buffered_messages(
        &self,
        query: qflow_store::BufferQuery<'_>,
    ) -> StoreResult<Vec<qflow_store::BufferedMessage>> {
        self.inner.buffered_messages(query).await
    }

    async fn expire_messages(&self, now_ms: i64, limit: u32) -> StoreResult<u64> {
        self.inner.expire_messages(now_ms, limit).await
    }
}

/// Bytes this process has caused to be written to storage so far (`/proc/self/io`),
/// when the kernel reports it.
fn write_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/self/io")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))?
        .trim()
        .parse()
        .ok()
}

fn unique_schema() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "qflow_bench_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn handlers() -> AsyncHandlers {
    AsyncHandlers::new().with_sync("svc", |_: &TaskContext<'_>| {
        TaskOutcome::Ok(Default::default())
    })
}

/// Drives load for `load_for`, then waits for every instance it started to finish.
/// Returns how many instances it started.
async fn drive(
    rt: &Arc<Runtime>,
    deployment: DeploymentId,
    window: u64,
    open_loop: bool,
    load_for: Duration,
) -> Result<u64> {
    let began = Instant::now();
    let base = rt.stats().view().completed;
    let failed = Arc::new(AtomicU64::new(0));
    let mut pending = FuturesUnordered::new();
    let mut issued: u64 = 0;
    while began.elapsed() < load_for {
        let view = rt.stats().view();
        ensure!(
            failed.load(Ordering::Relaxed) == 0 && view.failed == 0,
            "a start request or an instance failed"
        );
        let done = view.completed - base;
        let busy = if open_loop {
            pending.len() as u64
        } else {
            issued - done
        };
        let room = window.saturating_sub(busy);
        for _ in 0..room {
            let rt = rt.clone();
            let failed = failed.clone();
            pending.push(tokio::spawn(async move {
                if let Err(e) = rt.start_instance(deployment, BTreeMap::new()).await {
                    if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("start failed: {e}");
                    }
                }
            }));
        }
        issued += room;
        if open_loop {
            // Refill as soon as any start request is answered.
            if let Some(joined) = pending.next().await {
                joined?;
            }
        } else {
            // Refill once a quarter of the window has finished: one wake-up per batch of
            // completions rather than one per instance.
            let target = done + (window / 4).max(1);
            tokio::select! {
                _ = rt.wait_until(|s| s.completed - base >= target || s.failed > 0) => {}
                Some(joined) = pending.next(), if !pending.is_empty() => joined?,
            }
        }
    }
    while let Some(joined) = pending.next().await {
        joined?;
    }
    let failed = failed.load(Ordering::Relaxed);
    ensure!(failed == 0, "{failed} start requests failed");
    rt.wait_until(|s| s.completed - base >= issued || s.failed > 0)
        .await;
    Ok(issued)
}

/// One row of the throughput table.
#[derive(Debug, Clone)]
struct Throughput {
    store: StoreKind,
    lanes: usize,
    instances: u64,
    secs: f64,
    delta: StatsView,
    store_time: StoreTimeView,
    /// Bytes this process wrote to storage during the timed run, if the kernel says
    /// (`None` for PostgreSQL: the server writes, not us).
    written: Option<u64>,
}

impl Throughput {
    fn per_sec(&self, count: u64) -> f64 {
        count as f64 / self.secs
    }

    fn mean_batch(&self) -> f64 {
        self.delta.steps as f64 / self.delta.batches.max(1) as f64
    }

    /// Mean wall time of one store commit (one batch), in ms.
    fn commit_ms(&self) -> f64 {
        let t = &self.store_time;
        t.commit_ns as f64 / 1e6 / t.commit_calls.max(1) as f64
    }

    /// Share of the lanes' wall time spent waiting on store commits.
    fn commit_share(&self) -> f64 {
        self.store_time.commit_ns as f64 / 1e9 / (self.secs * self.lanes as f64)
    }

    /// Mean wall time of the deployment read inside `start_instance`, in µs.
    fn start_read_us(&self) -> f64 {
        let t = &self.store_time;
        t.deployment_ns as f64 / 1e3 / t.deployment_calls.max(1) as f64
    }

    fn kib_per_instance(&self) -> Option<f64> {
        self.written
            .map(|b| b as f64 / 1024.0 / self.instances.max(1) as f64)
    }
}

fn delta(after: StatsView, before: StatsView) -> StatsView {
    StatsView {
        started: after.started - before.started,
        completed: after.completed - before.completed,
        failed: after.failed - before.failed,
        cancelled: after.cancelled - before.cancelled,
        handler_calls: after.handler_calls - before.handler_calls,
        parks: after.parks - before.parks,
        timers_fired: after.timers_fired - before.timers_fired,
        conflicts: after.conflicts - before.conflicts,
        steps: after.steps - before.steps,
        batches: after.batches - before.batches,
        purged: after.purged - before.purged,
    }
}

async fn measure_throughput(
    kind: StoreKind,
    lanes: usize,
    o: &Options,
) -> Result<Option<Throughput>> {
    let Some(opened) = Opened::open(kind, o).await? else {
        return Ok(None);
    };
    let config = RuntimeConfig {
        lanes,
        batch_max: o.batch_max,
        journal: if o.journal {
            qflow_runtime::journal::JournalPolicy::All
        } else {
            qflow_runtime::journal::JournalPolicy::Off
        },
        ..RuntimeConfig::default()
    };
    let time = Arc::new(StoreTime::default());
    let timed: Arc<dyn Store> = Arc::new(TimedStore::new(
        opened.store.clone(),
        time.clone(),
        o.what_if,
    ));
    let rt = Arc::new(Runtime::start(
        timed,
        handlers(),
        Arc::new(SystemClock),
        config,
    ));
    let deployment = rt.deploy(MODEL, None).await?.id;

    // Growth (issue 26): a store that already holds finished instances and parked ones.
    if o.finished > 0 {
        let size_before = opened.sqlite_path().map(|p| file_bytes(&p));
        let began = Instant::now();
        let base = rt.stats().view().completed;
        while rt.stats().view().completed - base < o.finished {
            drive(
                &rt,
                deployment,
                o.window,
                o.open_loop,
                Duration::from_secs(5),
            )
            .await?;
            eprintln!(
                "# prefill: {} of {} finished ({:.0} s)",
                rt.stats().view().completed - base,
                o.finished,
                began.elapsed().as_secs_f64()
            );
        }
        let done = rt.stats().view().completed - base;
        let grown = opened
            .sqlite_path()
            .map(|p| file_bytes(&p).saturating_sub(size_before.unwrap_or(0)));
        println!(
            "# prefill: {done} instances finished in {:.0} s before the timed run{}",
            began.elapsed().as_secs_f64(),
            grown.map_or(String::new(), |g| format!(
                "; the SQLite file and its WAL grew {:.1} MiB, {} bytes per finished instance",
                g as f64 / 1_048_576.0,
                g / done.max(1)
            ))
        );
    }
    if o.parked_live > 0 {
        let now_ms = qflow_runtime::Clock::now_ms(&SystemClock);
        park_timers(&opened, deployment, 1, o.parked_live + 1, now_ms).await?;
        println!(
            "# parked: {} running instances on a timer due a day later",
            o.parked_live
        );
    }

    // Warm-up: untimed load, so caches, prepared statements and the allocator settle.
    let before = rt.stats().view();
    drive(
        &rt,
        deployment,
        o.window,
        o.open_loop,
        Duration::from_millis(WARMUP_MS),
    )
    .await?;
    let warm = delta(rt.stats().view(), before);
    ensure!(
        warm.failed == 0,
        "{} instances failed in warm-up",
        warm.failed
    );

    // The timed run: load for `secs`, then every started instance runs to its end; the
    // clock stops when the last one completes, so nothing started is left uncounted.
    let before = rt.stats().view();
    let time_before = time.view();
    opened.fold_wal().await?;
    let written_before = write_bytes();
    let groups_before = opened.commit_counts();
    let began = Instant::now();
    let n = drive(
        &rt,
        deployment,
        o.window,
        o.open_loop,
        Duration::from_secs_f64(o.secs),
    )
    .await?;
    let secs = began.elapsed().as_secs_f64();
    let d = delta(rt.stats().view(), before);
    let store_time = time.view().since(time_before);
    opened.fold_wal().await?;
    let written = write_bytes()
        .zip(written_before)
        .map(|(after, before)| after.saturating_sub(before));
    if let (Some((t1, b1)), Some((t0, b0))) = (opened.commit_counts(), groups_before) {
        // The SQLite committer's transactions against the lanes' batches it took.
        println!(
            "# sqlite {lanes} lane(s): {} transactions for {} batches ({:.2} batches a transaction)",
            t1 - t0,
            b1 - b0,
            (b1 - b0) as f64 / (t1 - t0).max(1) as f64
        );
    }

    let rt =
        Arc::try_unwrap(rt).map_err(|_| anyhow::anyhow!("runtime still shared after the run"))?;
    rt.shutdown().await;
    opened.close().await?;

    ensure!(
        d.completed == n && d.failed == 0 && d.cancelled == 0,
        "expected {n} completed, saw {d:?}"
    );
    ensure!(
        d.handler_calls == n * TASKS_PER_INSTANCE,
        "expected {} handler calls, saw {}",
        n * TASKS_PER_INSTANCE,
        d.handler_calls
    );
    Ok(Some(Throughput {
        store: kind,
        lanes,
        instances: n,
        secs,
        delta: d,
        store_time,
        written: written.filter(|_| kind != StoreKind::Postgres),
    }))
}

/// Poll cost with `parked` timers, none due.
#[derive(Debug, Clone)]
struct PollCost {
    store: StoreKind,
    parked: u64,
    polls: u32,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    plan: Vec<String>,
    fill_secs: f64,
}

/// Inserts parked instances and their backoff timers with ids `from..to`, due a day from
/// now and later, straight into the store's tables: one set-based statement per table,
/// so a million rows take seconds rather than a million commits.
async fn park_timers(
    opened: &Opened,
    deployment: DeploymentId,
    from: u64,
    to: u64,
    now_ms: i64,
) -> Result<()> {
    let due_ms = now_ms + 86_400_000;
    let (from, to) = (from as i64, to as i64 - 1);
    if let Some(path) = opened.sqlite_path() {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .busy_timeout(Duration::from_secs(30)),
        )
        .await?;
        let mut tx = conn.begin().await?;
        sqlx::query(
            "WITH RECURSIVE seq(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?2) \
             INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot, \
             created_at_ms, updated_at_ms) \
             SELECT printf('00000000-0000-4000-8000-%012x', i), ?3, 1, 'running', NULL, \
             x'00', ?4, ?4 FROM seq",
        )
        .bind(from)
        .bind(to)
        .bind(deployment.0)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "WITH RECURSIVE seq(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?2) \
             INSERT INTO timers (instance, name, due_at_ms, incarnation) \
             SELECT printf('00000000-0000-4000-8000-%012x', i), 'r:svc1', ?3 + i, 1 FROM seq",
        )
        .bind(from)
        .bind(to)
        .bind(due_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        sqlx::query("ANALYZE").execute(&mut conn).await?;
        conn.close().await?;
        return Ok(());
    }
    let Cleanup::Postgres(pg, _) = &opened.cleanup else {
        bail!("parked timers are inserted on SQLite and PostgreSQL only");
    };
    let mut tx = pg.pool().begin().await?;
    sqlx::query(
        "INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot, \
         created_at_ms, updated_at_ms) \
         SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, $3, 1, \
         'running', NULL, '\\x00'::bytea, $4, $4 FROM generate_series($1::bigint, $2::bigint) i",
    )
    .bind(from)
    .bind(to)
    .bind(deployment.0)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO timers (instance, name, due_at_ms, incarnation) \
         SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 'r:svc1', \
         $3 + i, 1 FROM generate_series($1::bigint, $2::bigint) i",
    )
    .bind(from)
    .bind(to)
    .bind(due_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    sqlx::query("ANALYZE instances").execute(pg.pool()).await?;
    sqlx::query("ANALYZE timers").execute(pg.pool()).await?;
    Ok(())
}

async fn explain(opened: &Opened, now_ms: i64) -> Result<Vec<String>> {
    Ok(match &opened.cleanup {
        Cleanup::Sqlite(s, _) => s.explain_claim().await?,
        Cleanup::Postgres(p, _) => p.explain_claim(now_ms, 1_024).await?,
        Cleanup::None => Vec::new(),
    })
}

async fn measure_polls(kind: StoreKind, o: &Options) -> Result<Vec<PollCost>> {
    let Some(opened) = Opened::open(kind, o).await? else {
        return Ok(Vec::new());
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let deployment = opened
        .store
        .deploy(NewDeployment {
            process_id: "linear",
            content_hash: "bench-parked-timers",
            source: MODEL,
            deployed_at_ms: now_ms,
            schedules: &[],
        })
        .await?
        .id;
    let config = RuntimeConfig::default();
    let mut parked_so_far = 0;
    let mut out = Vec::new();
    let mut populations = o.parked.clone();
    populations.sort_unstable();
    for parked in populations {
        let fill_began = Instant::now();
        if parked > parked_so_far {
            park_timers(&opened, deployment, parked_so_far, parked, now_ms).await?;
            parked_so_far = parked;
        }
        let fill_secs = fill_began.elapsed().as_secs_f64();
        let mut samples_us = Vec::with_capacity(o.polls as usize);
        for i in 0..POLL_WARMUP + o.polls {
            let t = Instant::now();
            let claimed = opened
                .store
                .claim_due_timers(TimerClaim {
                    now_ms,
                    lease_ms: config.timer_lease_ms,
                    owner: &config.replica_id,
                    limit: config.timer_claim_max,
                })
                .await?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            ensure!(claimed.is_empty(), "a parked timer was claimed");
            if i >= POLL_WARMUP {
                samples_us.push(us);
            }
        }
        samples_us.sort_by(f64::total_cmp);
        let pick = |q: f64| samples_us[((samples_us.len() - 1) as f64 * q) as usize];
        out.push(PollCost {
            store: kind,
            parked,
            polls: o.polls,
            mean_us: samples_us.iter().sum::<f64>() / samples_us.len() as f64,
            p50_us: pick(0.5),
            p99_us: pick(0.99),
            max_us: pick(1.0),
            plan: explain(&opened, now_ms).await?,
            fill_secs,
        });
    }
    opened.close().await?;
    Ok(out)
}

/// Appends one machine-readable line to the file named by `QFLOW_BENCH_RESULTS`, if set:
/// how `scripts/bench-runtime.sh` builds its side-by-side table without scraping prose.
fn record(line: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os("QFLOW_BENCH_RESULTS") else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        eprintln!("cannot append to {}: {e}", PathBuf::from(path).display());
    }
}

fn print_machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "# machine: {cores} cores, {cpu}; load average at start {}",
        load.join(" ")
    );
    println!(
        "# SQLite dir: {} (WAL, synchronous=FULL); PostgreSQL: {}",
        bench_dir().display(),
        if pg_url().is_some() {
            "QFLOW_TEST_PG_URL (synchronous_commit=on)"
        } else {
            "skipped: QFLOW_TEST_PG_URL not set"
        }
    );
}

async fn run(o: Options) -> Result<()> {
    print_machine();
    println!(
        "# model: cli/benches/linear.bpmn (start -> 10 service tasks -> end), window={} {}, \
         batch_max={}, target {} s per timed run",
        o.window,
        if o.open_loop {
            "start requests in flight (open loop)"
        } else {
            "live instances (closed loop)"
        },
        o.batch_max,
        o.secs
    );
    if o.stores.contains(&StoreKind::Postgres) && pg_url().is_none() {
        println!("skipped: QFLOW_TEST_PG_URL not set (PostgreSQL measurements)");
    }
    if o.throughput {
        println!();
        println!(
            "| store | lanes | instances | secs | inst/s | steps/s | commits/s | mean batch | \
             commit ms | lane time in commit | start read µs | KiB written/inst | conflicts |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &store in &o.stores {
            for &lanes in &o.lanes {
                let Some(t) = measure_throughput(store, lanes, &o).await? else {
                    continue;
                };
                println!(
                    "| {}{} | {} | {} | {:.2} | {:.0} | {:.0} | {:.0} | {:.1} | {:.2} | {:.0} % | \
                     {:.1} | {} | {} |",
                    t.store.name(),
                    o.label(),
                    t.lanes,
                    t.instances,
                    t.secs,
                    t.per_sec(t.delta.completed),
                    t.per_sec(t.delta.steps),
                    t.per_sec(t.delta.batches),
                    t.mean_batch(),
                    t.commit_ms(),
                    t.commit_share() * 100.0,
                    t.start_read_us(),
                    t.kib_per_instance()
                        .map_or_else(|| "n/a".to_owned(), |k| format!("{k:.1}")),
                    t.delta.conflicts
                );
                record(&format!(
                    "throughput store={}{} lanes={} inst_per_s={:.1} steps_per_s={:.1} \
                     commits_per_s={:.1} mean_batch={:.2}",
                    t.store.name(),
                    o.label(),
                    t.lanes,
                    t.per_sec(t.delta.completed),
                    t.per_sec(t.delta.steps),
                    t.per_sec(t.delta.batches),
                    t.mean_batch()
                ));
            }
        }
    }
    if o.timers {
        println!();
        println!(
            "| store | parked timers | polls | mean µs/poll | p50 µs | p99 µs | max µs | fill s |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        let mut plans = Vec::new();
        for &store in &o.stores {
            if store == StoreKind::Memory {
                continue;
            }
            for c in measure_polls(store, &o).await? {
                println!(
                    "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    c.store.name(),
                    c.parked,
                    c.polls,
                    c.mean_us,
                    c.p50_us,
                    c.p99_us,
                    c.max_us,
                    c.fill_secs
                );
                record(&format!(
                    "poll store={} parked={} mean_us={:.1} p50_us={:.1} p99_us={:.1}",
                    c.store.name(),
                    c.parked,
                    c.mean_us,
                    c.p50_us,
                    c.p99_us
                ));
                plans.push((c.store, c.parked, c.plan));
            }
        }
        for (store, parked, plan) in plans {
            println!("# claim plan, {} with {parked} parked:", store.name());
            for line in plan {
                println!("#   {line}");
            }
        }
    }
    Ok(())
}

/// mimalloc instead of the system allocator: a step allocates and frees many small values
/// (maps of the snapshot, effects, bound statement arguments), and glibc's malloc was a
/// sixth of the process's CPU time (docs/performance.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    let options = Options::parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(options))
}

/// The bytes of a SQLite database: the file and its WAL.
fn file_bytes(path: &std::path::Path) -> u64 {
    let wal = path.with_extension(
        path.extension()
            .map(|e| format!("{}-wal", e.to_string_lossy()))
            .unwrap_or_else(|| "wal".to_owned()),
    );
    [path.to_path_buf(), wal]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}
