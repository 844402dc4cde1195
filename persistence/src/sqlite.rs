//! The embedded SQLite store: one database file in WAL mode, the default for `qflow run`
//! and `qflow serve` (SPEC R1).
//!
//! Durability: `synchronous=FULL`, so a commit returns only after its WAL frames are
//! fsynced; nothing acknowledged is lost on power failure (R1a). Throughput beyond the
//! disk's fsync rate comes from group commit: [`Store::commit`] applies a whole batch of
//! instances' commits in one transaction, one fsync. The one write that does not wait
//! for its fsync is a lease, on a timer or an outbox row (see `claim_due_timers`): leases
//! are advisory.
//!
//! Concurrency: one writer at a time (SQLite has one writer anyway; taking turns in our
//! own queue avoids lock hand-offs and `SQLITE_BUSY` between our own writers): the sqlx
//! writer, a pool of one connection, for the store's own writes, and the committer's
//! connection for [`Store::commit`] (`sqlite_commit`), which writes only while it holds
//! the sqlx writer; and a small read-only pool for reads, which WAL lets run beside the
//! writer. Every write transaction starts with `BEGIN IMMEDIATE`, so another process on
//! the same file waits on the busy timeout instead of failing half-way through an upgrade.
//!
//! Must never: keep a write transaction open across anything but its own statements, or
//! read from the reader pool inside a write (it would not see the transaction's rows).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use async_trait::async_trait;
use qflow_store::memory::{effective_instances_limit, effective_subscriptions_limit};
use qflow_store::{
    effective_buffered_limit, effective_outbox_claim_limit, poisoned_message, AttemptRecord,
    AuditRecord, BufferOutcome, BufferQuery, BufferedMessage, Commit, CommitOutcome,
    DeliveryRecord, DeploymentId, DeploymentRecord, IncidentRecord, InstanceFilter, InstanceId,
    InstanceRecord, InstanceStatus, JournalEntry, KeyName, NewBufferedMessage, NewDeployment,
    NewSchedule, OutboxRecord, PullQuery, PullTaskRecord, PurgeOutcome, PurgeRequest,
    RetireOutcome, ScheduleAdvance, ScheduleRecord, Store, StoreError, StoreResult,
    SubscriptionRecord, TimerClaim, TimerRecord, UserTaskQuery, UserTaskRecord,
    POISONED_INCIDENT_CODE, PULL_QUERY_LIMIT_MAX,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use crate::common::{
    all_counts, attempt_from_row, audit_from_row, backend, buffered_from_rows, check_key_names,
    claimed_outbox, claimed_schedules, claimed_timers, deliveries_from_db, deployment_from_row,
    incident_from_row, instance_from_row, instances_query, journal_from_row, journal_limit,
    key_name_from_row, map_all, map_optional, merge_offered, outbox_from_row, pull_from_row,
    purge_choice, purge_limit, schedule_from_row, status_count_from_row, subscription_from_row,
    timer_from_row, Field, KnownDeployments, StatusArms, StoreRow, ATTEMPT_COLUMNS, AUDIT_COLUMNS,
    BUFFERED_COLUMNS, DEPLOYMENT_COLUMNS, INCIDENT_COLUMNS, INSTANCE_COLUMNS, INSTANCE_COUNTS_SQL,
    JOURNAL_COLUMNS, OUTBOX_COLUMNS, PULL_COLUMNS, SCHEDULE_COLUMNS, SUBSCRIPTION_COLUMNS,
    TIMER_COLUMNS,
};
use crate::common::{task_walks, user_task_from_row, user_tasks_query, USER_TASK_COLUMNS};
use crate::journal_body;
use crate::sqlite_commit::{
    self, id_text, statement_chunks, ChunkTexts, Pending, ROWS_PER_STATEMENT,
};
use crate::Error;
use qflow_store::history;

/// How long a statement waits for another process's lock on the file before failing.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Read-only connections beside the writer.
pub const READERS_MAX: u32 = 4;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The SQLite-backed durable store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    path: PathBuf,
    known_deployments: Arc<KnownDeployments>,
    committer: Committer,
    rounds: RoundCache,
}

/// Round rows' bodies read lately by [`Store::journal`] (`0018_journal_rounds.sql`), by
/// row id, at most [`ROUND_CACHE_BYTES`], the oldest dropped first: a replay reads
/// instances that were created together, whose steps share round rows, and reads each
/// row once instead of once per instance. Sound without asking the file again because a
/// round row's id is never given to another row (a purge empties the newest row instead
/// of deleting it, and the next append deletes it, so `MAX(id)` never goes back; an id
/// freed by an older entry row was never cached) and a round's body only ever loses entries (a purge's, in this process
/// or another), which leaves every other entry as it was; a read whose instance a cached
/// body lacks (a purge its snapshot does not see yet took it from a later read) reads the
/// row itself. A purge here empties the cache. A row changed behind the stores' backs (a
/// hand edit, a damaged disk) after this store cached it is seen by a store opened after,
/// and by this one once [`ROUND_CACHE_AGE`] has passed.
#[derive(Default)]
struct RoundCache {
    inner: std::sync::Mutex<RoundCacheInner>,
}

#[derive(Default)]
struct RoundCacheInner {
    bodies: HashMap<i64, (Arc<Vec<u8>>, std::time::Instant)>,
    order: std::collections::VecDeque<i64>,
    bytes: usize,
}

/// What [`RoundCache`] holds at most: a few hundred rounds of the benchmark's size.
const ROUND_CACHE_BYTES: usize = 8 << 20;
/// How long [`RoundCache`] serves a body it read: a replay reads a round's instances
/// within moments of each other; a row changed behind the store's back is seen again
/// after this long.
const ROUND_CACHE_AGE: Duration = Duration::from_secs(10);

impl std::fmt::Debug for RoundCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("RoundCache")
            .field("rows", &inner.bodies.len())
            .field("bytes", &inner.bytes)
            .finish()
    }
}

impl RoundCache {
    fn get(&self, row: i64) -> Option<Arc<Vec<u8>>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .bodies
            .get(&row)
            .filter(|(_, at)| at.elapsed() < ROUND_CACHE_AGE)
            .map(|(body, _)| body.clone())
    }

    fn put(&self, row: i64, body: Arc<Vec<u8>>) {
        if body.len() > ROUND_CACHE_BYTES / 4 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let len = body.len();
        if let Some((old, _)) = inner.bodies.insert(row, (body, std::time::Instant::now())) {
            inner.bytes -= old.len();
            inner.bytes += len;
            return;
        }
        inner.order.push_back(row);
        inner.bytes += len;
        while inner.bytes > ROUND_CACHE_BYTES {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some((gone, _)) = inner.bodies.remove(&old) {
                inner.bytes -= gone.len();
            }
        }
    }

    fn clear(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *inner = RoundCacheInner::default();
    }
}

type Tx = sqlx::Transaction<'static, Sqlite>;

/// What a file named as a SQLite store holds ([`SqliteStore::inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreFile {
    /// Nothing at the path: opening creates the store.
    Missing,
    /// An empty file or a SQLite database without tables: opening makes it a store.
    Empty,
    /// A qflow store.
    Qflow,
    /// Something else, described ("a directory", "a SQLite database with tables qflow
    /// did not create: …"): opening it would add qflow's tables to another program's
    /// data, and deleting it would lose that data.
    Foreign(String),
}

/// SQLite's result code for a file that is not a database (`SQLITE_NOTADB`).
const SQLITE_NOTADB: &str = "26";
/// sqlx's record of applied migrations.
const MIGRATIONS_TABLE: &str = "_sqlx_migrations";
/// Table names shown when describing another program's database.
const FOREIGN_TABLES_SHOWN: usize = 5;

/// The tables of the database at `path`, read on a read-only connection that never
/// creates the file.
async fn table_names(path: &Path) -> Result<Vec<String>, sqlx::Error> {
    use sqlx::Connection;
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS));
    let mut conn = SqliteConnection::connect_with(&options).await?;
    let names = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await;
    conn.close().await?;
    names
}

fn foreign_tables(tables: &[String]) -> String {
    let theirs: Vec<&str> = tables
        .iter()
        .map(String::as_str)
        .filter(|t| *t != MIGRATIONS_TABLE)
        .collect();
    let mut shown = theirs[..theirs.len().min(FOREIGN_TABLES_SHOWN)].join(", ");
    if theirs.len() > FOREIGN_TABLES_SHOWN {
        shown.push_str(&format!(
            " and {} more",
            theirs.len() - FOREIGN_TABLES_SHOWN
        ));
    }
    format!("a SQLite database with tables qflow did not create: {shown}")
}

/// How a SQLite store writes, beside what it writes (which never changes): the settings a
/// host may tune. [`SqliteStore::open`] uses the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteSettings {
    /// `PRAGMA wal_autocheckpoint` of the writer: after a commit leaves the WAL at least
    /// this many pages long, SQLite copies it back into the database file. Default 1,000
    /// (SQLite's own, about 4 MiB). 0 turns it off: the WAL then grows until something
    /// checkpoints it — a measuring tool's setting (`runtime/examples/write_breakdown.rs`
    /// reads the WAL to see which pages each commit wrote), never a server's.
    pub wal_autocheckpoint_pages: u32,
    /// How long the committer may wait for more batches before it starts a transaction,
    /// when the transaction before joined several callers' batches and fewer have
    /// arrived yet (see `Committer`). Default 1.5 ms: lanes answered by one transaction
    /// step their next batches within about that, and joining them saves a transaction
    /// each (measured with 4 lanes: 8 % fewer bytes written per instance; throughput
    /// +10 % in one sitting and −2 % in the next, within the noise, docs/performance.md).
    /// Zero never waits. A single caller never waits: its last transaction joined only
    /// its own batch.
    pub group_gather: Duration,
}

impl Default for SqliteSettings {
    fn default() -> Self {
        SqliteSettings {
            wal_autocheckpoint_pages: 1_000,
            group_gather: Duration::from_micros(1_500),
        }
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path` and brings its schema up
    /// to date. Refused with [`Error::NotAStore`] when the file holds anything but a
    /// qflow store, an empty file or an empty database ([`SqliteStore::inspect`]): qflow
    /// never adds its tables to another program's database.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        SqliteStore::open_with(path, &SqliteSettings::default()).await
    }

    /// [`SqliteStore::open`] with `settings`.
    pub async fn open_with(
        path: impl AsRef<Path>,
        settings: &SqliteSettings,
    ) -> Result<SqliteStore, Error> {
        let path = path.as_ref().to_path_buf();
        let target = path.display().to_string();
        if let StoreFile::Foreign(found) = SqliteStore::inspect(&path).await? {
            return Err(Error::NotAStore { target, found });
        }
        let connect = |source| Error::Connect {
            target: target.clone(),
            source,
        };
        let base = SqliteConnectOptions::from_str("sqlite:")
            .map_err(connect)?
            .filename(&path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS));
        let writer_options = base.clone().create_if_missing(true).pragma(
            "wal_autocheckpoint",
            settings.wal_autocheckpoint_pages.to_string(),
        );
        let writer = SqlitePoolOptions::new()
            .min_connections(1)
            .max_connections(1)
            // No ping before each use (`test_before_acquire`, on by default): it is a
            // round trip to sqlx's worker thread per commit, and it tests nothing an
            // embedded file's connection can lose between two uses; a connection that
            // did fail reports it on its next statement. (Measured: `BEGIN IMMEDIATE`
            // took 0.13–0.19 ms of a 2.4 ms commit with it, docs/performance.md.)
            .test_before_acquire(false)
            // The writer is the token of the file's write lock (the committer's own
            // connection writes only while it holds it): never let the pool drop and
            // reopen it behind our back.
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(writer_options)
            .await
            .map_err(connect)?;
        MIGRATOR
            .run(&writer)
            .await
            .map_err(|source| Error::Migrate {
                target: target.clone(),
                source,
            })?;
        let readers = SqlitePoolOptions::new()
            .max_connections(READERS_MAX)
            .test_before_acquire(false)
            .connect_with(base.read_only(true))
            .await
            .map_err(connect)?;
        let own = sqlite_commit::open(
            &path,
            Duration::from_millis(BUSY_TIMEOUT_MS),
            settings.wal_autocheckpoint_pages,
        )
        .map_err(|source| Error::Committer {
            target: target.clone(),
            source,
        })?;
        let known_deployments = Arc::new(KnownDeployments::default());
        let committer = Committer::start(
            writer.clone(),
            own,
            known_deployments.clone(),
            settings.group_gather,
        );
        Ok(SqliteStore {
            writer,
            readers,
            path,
            known_deployments,
            committer,
            rounds: RoundCache::default(),
        })
    }

    /// What the file at `path` holds, judged without changing it: the one place that
    /// decides whether a file may be opened as a store ([`SqliteStore::open`]) or deleted
    /// as one (`qflow run --fresh`).
    ///
    /// A qflow store is a SQLite database with sqlx's migrations table and qflow's
    /// `instances` and `deployments` tables. An empty file, and a SQLite database with no
    /// table but (at most) an empty start of the migrations table, count as
    /// [`StoreFile::Empty`]: nothing in them can be lost.
    pub async fn inspect(path: impl AsRef<Path>) -> Result<StoreFile, Error> {
        let path = path.as_ref();
        let target = path.display().to_string();
        let io = |source: std::io::Error| Error::Connect {
            target: target.clone(),
            source: sqlx::Error::Io(source),
        };
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StoreFile::Missing),
            Err(e) => return Err(io(e)),
        };
        if meta.is_dir() {
            return Ok(StoreFile::Foreign("a directory".to_owned()));
        }
        // A store killed before its first checkpoint can have an empty main file and all
        // of its pages in the WAL: only an empty file without a WAL is empty.
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal_len = std::fs::metadata(&wal).map_or(0, |m| m.len());
        if meta.len() == 0 && wal_len == 0 {
            return Ok(StoreFile::Empty);
        }
        // The file is read through SQLite only, never opened by hand: closing a
        // descriptor of the database file drops every POSIX lock this process holds on
        // it, including those of a store already open on the file here. Another process
        // on the file would then take this one for gone, checkpoint and remove the WAL
        // under it, and this process would go on reading (and writing) a WAL nobody else
        // sees (SQLite's "How To Corrupt", 2.2). SQLite's own descriptors are shared
        // per file and closed only when no lock needs them.
        let tables = match table_names(path).await {
            Ok(tables) => tables,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(SQLITE_NOTADB) => {
                // No SQLite header, or a header SQLite cannot read (a damaged file).
                return Ok(StoreFile::Foreign(
                    "not a SQLite database (SQLite cannot read it as one)".to_owned(),
                ));
            }
            Err(source) => {
                return Err(Error::Connect {
                    target: target.clone(),
                    source,
                })
            }
        };
        let has = |name: &str| tables.iter().any(|t| t == name);
        Ok(
            if has(MIGRATIONS_TABLE) && has("instances") && has("deployments") {
                StoreFile::Qflow
            } else if tables.iter().all(|t| t == MIGRATIONS_TABLE) {
                StoreFile::Empty
            } else {
                StoreFile::Foreign(foreign_tables(&tables))
            },
        )
    }

    /// Whether the file at `path` is a qflow store (see [`SqliteStore::inspect`]).
    pub async fn is_qflow_store(path: impl AsRef<Path>) -> Result<bool, Error> {
        Ok(SqliteStore::inspect(path).await? == StoreFile::Qflow)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many write transactions the store's committer has run for commits, and for how
    /// many batches (`Store::commit` calls): more batches than transactions is group
    /// commit at work. A joined transaction that failed and was redone batch by batch
    /// counts every one it ran.
    pub fn commit_counts(&self) -> (u64, u64) {
        let counts = &self.committer.counts;
        (
            counts.transactions.load(Ordering::Relaxed),
            counts.batches.load(Ordering::Relaxed),
        )
    }

    /// Stops the committer (after the group it is applying) and closes its connection,
    /// then both pools, waiting for in-flight statements; the file stays consistent even
    /// without this (WAL), it only makes shutdown tidy. Commits after it are refused.
    pub async fn close(&self) {
        self.committer.stop().await;
        close_pool(&self.readers).await;
        close_pool(&self.writer).await;
    }

    /// The query plan SQLite picks for the timer claim's read of due timers and leases,
    /// one line per plan step: the evidence that polling walks the due indexes rather
    /// than the tables (R3).
    pub async fn explain_claim(&self) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {DUE_SQL}"))
            .bind(0_i64)
            .bind(1_i64)
            .fetch_all(&self.writer)
            .await
            .map_err(backend)?;
        rows.iter().map(|row| row.field("detail")).collect()
    }

    /// The query plan SQLite picks for the next due instant, one line per plan step: the
    /// evidence that a readiness check walks the due indexes (the armed leases' partial
    /// one among them), never the instances.
    pub async fn explain_next_due(&self) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {NEXT_DUE_SQL}"))
            .fetch_all(&self.writer)
            .await
            .map_err(backend)?;
        rows.iter().map(|row| row.field("detail")).collect()
    }

    /// The query plan SQLite picks for the outbox claim, one line per plan step: the
    /// evidence that a dispatcher's claim walks the pending rows' due index.
    pub async fn explain_outbox_claim(&self) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {OUTBOX_CLAIM_SQL}"))
            .bind("owner")
            .bind(0_i64)
            .bind(0_i64)
            .bind(1_i64)
            .fetch_all(&self.writer)
            .await
            .map_err(backend)?;
        rows.iter().map(|row| row.field("detail")).collect()
    }

    /// The query plans SQLite picks for the commit path's keyed deletes of timer and
    /// pull-task rows (`delete_keyed`), with `rows` terms each, one line per plan step:
    /// the evidence that every term is a primary-key search, not a scan.
    pub async fn explain_keyed_deletes(&self, rows: usize) -> StoreResult<Vec<String>> {
        let names: Vec<(String, String)> = (0..rows)
            .map(|i| (format!("i{i}"), format!("n{i}")))
            .collect();
        let mut lines = Vec::new();
        for (statement, timer) in [
            (sqlite_commit::TIMER_DELETE, true),
            (sqlite_commit::PULL_DELETE, false),
        ] {
            let sql = format!(
                "EXPLAIN QUERY PLAN {}",
                sqlite_commit::keyed_delete_text(statement, rows)
            );
            let mut query = sqlx::query(&sql);
            for (id, name) in &names {
                query = query.bind(id).bind(name);
                if timer {
                    query = query.bind(1_i64);
                }
            }
            let plan = query.fetch_all(&self.readers).await.map_err(backend)?;
            for row in &plan {
                lines.push(row.field("detail")?);
            }
        }
        Ok(lines)
    }

    /// The query plans SQLite picks for a purge's choice of instances, of every
    /// deployment and of one, one line per plan step: the evidence that retention walks
    /// the ended-instance indexes rather than the table.
    pub async fn explain_purge(&self) -> StoreResult<Vec<String>> {
        let mut lines = Vec::new();
        for deployment in [None, Some("?3")] {
            let sql = format!(
                "EXPLAIN QUERY PLAN {}",
                purge_choice("+status", "?1", deployment, "?2")
            );
            let mut query = sqlx::query(&sql).bind(0_i64).bind(1_i64);
            if deployment.is_some() {
                query = query.bind(1_i64);
            }
            let rows = query.fetch_all(&self.writer).await.map_err(backend)?;
            for row in &rows {
                lines.push(row.field("detail")?);
            }
        }
        Ok(lines)
    }

    /// The query plan SQLite picks for a listing of instances, one line per plan step:
    /// the evidence that a page, whatever its filter by deployment, status or failure
    /// code, reads an index in the listing's order and stops at its limit.
    pub async fn explain_instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<String>> {
        let mut q =
            instances_query::<Sqlite>(filter, "TEXT", StatusArms::PerStatus, "EXPLAIN QUERY PLAN ");
        let rows = q.build().fetch_all(&self.readers).await.map_err(backend)?;
        rows.iter().map(|row| row.field("detail")).collect()
    }

    /// The work SQLite does for one listing page, in virtual-machine instructions (its
    /// progress handler, called every instruction): the store's own statement for
    /// `filter`, run to the end on a reader. The evidence, without timing, that a page
    /// costs the same however many instances the file holds.
    pub async fn instances_vm_steps(&self, filter: &InstanceFilter) -> StoreResult<u64> {
        let steps = Arc::new(AtomicU64::new(0));
        let mut conn = self.readers.acquire().await.map_err(backend)?;
        let counter = steps.clone();
        conn.lock_handle()
            .await
            .map_err(backend)?
            .set_progress_handler(1, move || {
                counter.fetch_add(1, Ordering::Relaxed);
                true
            });
        let mut q = instances_query::<Sqlite>(filter, "TEXT", StatusArms::PerStatus, "");
        let result = q.build().fetch_all(&mut *conn).await.map_err(backend);
        conn.lock_handle()
            .await
            .map_err(backend)?
            .remove_progress_handler();
        result?;
        Ok(steps.load(Ordering::Relaxed))
    }

    /// The query plans SQLite picks for a task-list query, one line per plan step of
    /// each of its walks: the evidence that a page by assignee, candidate or deployment
    /// walks an index in the listing order rather than the table or the instances.
    pub async fn explain_user_tasks(&self, query: &UserTaskQuery) -> StoreResult<Vec<String>> {
        let mut lines = Vec::new();
        for walk in task_walks(query) {
            let mut q = user_tasks_query::<Sqlite>(
                query,
                walk,
                "CROSS JOIN",
                "TEXT",
                "EXPLAIN QUERY PLAN ",
            );
            let rows = q.build().fetch_all(&self.readers).await.map_err(backend)?;
            for row in &rows {
                lines.push(row.field("detail")?);
            }
        }
        Ok(lines)
    }

    /// The durability settings the writer connection actually runs with, as SQLite
    /// reports them: `(journal_mode, synchronous, foreign_keys)`, e.g. `("wal", 2, 1)`
    /// (2 = FULL).
    pub async fn writer_settings(&self) -> StoreResult<(String, i64, i64)> {
        let mut conn = self.writer.acquire().await.map_err(backend)?;
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .map_err(backend)?;
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .map_err(backend)?;
        let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&mut *conn)
            .await
            .map_err(backend)?;
        Ok((journal, synchronous, foreign_keys))
    }

    async fn begin_write(&self) -> StoreResult<Tx> {
        self.writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(backend)
    }
}

/// How long [`close_pool`] waits for connections still on their way back to a pool.
const POOL_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Closes `pool` once every connection it holds is back in it, bounded by
/// [`POOL_CLOSE_WAIT`]. A connection released by a statement goes back to its sqlx pool
/// through a task of its own; `Pool::close` called before that task has run ended with
/// the connection still open (the pool's size 1, none idle), and it was closed later —
/// after the writer, or not at all before the process exited. SQLite folds the WAL into
/// the file and removes it only when the last connection to close can write, so a
/// read-only reader closing last left the `-wal` and `-shm` files beside the store (the
/// ops test failed so under load, 2026-12-07: about one run in three with three copies
/// side by side). sqlx offers nothing to await for it, so the wait polls the pool.
async fn close_pool(pool: &SqlitePool) {
    let deadline = tokio::time::Instant::now() + POOL_CLOSE_WAIT;
    while pool.num_idle() < pool.size() as usize && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    pool.close().await;
}

/// The store's one committer (group commit across lanes, issue 26 point 2,
/// `docs/performance.md`). Every [`Store::commit`] of this store hands its batch to one
/// task, which takes what is queued when it looks — the batches of every lane that
/// committed while it was busy — and applies them as one batch in one transaction, with
/// one fsync: lanes no longer queue at the file's write lock one transaction each.
///
/// Joining batches keeps each one's meaning: `plan` applies a batch in rounds in batch
/// order, so batch B after batch A is the same as A's transaction then B's (an instance
/// in both gets B's commit in a later round, against the fence A's wrote), and the
/// outcomes are split back in order. What one batch alone would fail (a commit on an
/// unknown deployment, a backend error) must not fail the others: when a joined
/// transaction fails, nothing of it is kept and each batch is applied again alone, so
/// each gets exactly the result it would have had.
///
/// When the transaction before joined several callers' batches and fewer are queued
/// now, the committer waits up to [`SqliteSettings::group_gather`] for as many: the
/// lanes it answered together come back within about a batch's stepping, and one
/// arriving first would otherwise take a transaction alone while the rest queue behind
/// it (measured without the wait: groups alternating one batch and three). A caller
/// alone never waits.
///
/// The transactions run on a connection of the committer's own, one blocking task a group
/// (`sqlite_commit`): with sqlx, each statement was a hand-off to its worker thread and
/// back, and with one lane a third of a commit's time went to them.
///
/// The task outlives a caller that stops waiting (a lane shut down mid-commit): the batch
/// it handed over is applied or not as a whole, as when a commit's future is dropped
/// after its transaction began. It ends when the store is closed or dropped.
/// The most commits one group transaction takes; what is queued beyond it waits for the
/// next one. Bounds a transaction's statements and the time a commit waits behind others.
const GROUP_COMMITS_MAX: usize = 2_048;

#[derive(Debug)]
struct Committer {
    queue: mpsc::UnboundedSender<Pending>,
    counts: Arc<CommitCounts>,
    /// Asks the task to stop after the group it is applying and close its connection.
    stop: Arc<tokio::sync::Notify>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the committer has done since the store opened ([`SqliteStore::commit_counts`]).
#[derive(Debug, Default)]
struct CommitCounts {
    transactions: AtomicU64,
    batches: AtomicU64,
}

impl Committer {
    /// Spawns the committer on the current tokio runtime, with `conn` (its own
    /// connection, `sqlite_commit::open`) for the transactions and `writer` as the token
    /// of the file's one writer.
    fn start(
        writer: SqlitePool,
        conn: rusqlite::Connection,
        known: Arc<KnownDeployments>,
        gather: Duration,
    ) -> Committer {
        let (queue, mut waiting) = mpsc::unbounded_channel::<Pending>();
        let counts = Arc::new(CommitCounts::default());
        let counted = counts.clone();
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopping = stop.clone();
        let task = tokio::spawn(async move {
            let mut conn = Some(conn);
            // How many batches the last transaction joined: the callers likely to send
            // again about now.
            let mut siblings = 1usize;
            loop {
                let first = tokio::select! {
                    biased;
                    () = stopping.notified() => break,
                    first = waiting.recv() => match first {
                        Some(first) => first,
                        None => break,
                    },
                };
                let mut size = first.batch.len();
                let mut group = vec![first];
                while size < GROUP_COMMITS_MAX {
                    match waiting.try_recv() {
                        Ok(next) => {
                            size += next.batch.len();
                            group.push(next);
                        }
                        Err(_) => break,
                    }
                }
                // The callers the last transaction answered together step their next
                // batches at slightly different moments; starting with the first to
                // arrive would leave the rest for a transaction of their own.
                if !gather.is_zero() && group.len() < siblings {
                    let deadline = tokio::time::Instant::now() + gather;
                    while group.len() < siblings && size < GROUP_COMMITS_MAX {
                        match tokio::time::timeout_at(deadline, waiting.recv()).await {
                            Ok(Some(next)) => {
                                size += next.batch.len();
                                group.push(next);
                            }
                            _ => break,
                        }
                    }
                }
                siblings = group.len();
                let batches = group.len() as u64;
                // The file's one writer at a time: the store's other writes wait for the
                // sqlx writer, so the transaction holds it (unused) while it runs.
                let token = match writer.acquire().await {
                    Ok(token) => token,
                    Err(e) => {
                        let message = e.to_string();
                        for pending in group {
                            let _ = pending.reply.send(Err(StoreError::Backend(
                                format!("the store's writer is gone: {message}").into(),
                            )));
                        }
                        continue;
                    }
                };
                let Some(mut own) = conn.take() else { break };
                let known = known.clone();
                let ran = tokio::task::spawn_blocking(move || {
                    let transactions = sqlite_commit::commit_group(&mut own, &known, group);
                    (own, transactions)
                })
                .await;
                drop(token);
                match ran {
                    Ok((own, transactions)) => {
                        conn = Some(own);
                        counted.batches.fetch_add(batches, Ordering::Relaxed);
                        counted
                            .transactions
                            .fetch_add(transactions, Ordering::Relaxed);
                    }
                    // A panic (a bug) took the connection with it, and the group's callers
                    // are answered by their dropped replies: the committer has stopped.
                    Err(e) => {
                        tracing::error!(error = %e, "the SQLite committer failed");
                        break;
                    }
                }
            }
        });
        Committer {
            queue,
            counts,
            stop,
            task: std::sync::Mutex::new(Some(task)),
        }
    }

    /// Stops the task once the group it is applying is answered, and waits until its
    /// connection is closed; commits after it are refused (`the store's committer has
    /// stopped`).
    async fn stop(&self) {
        self.stop.notify_one();
        let task = self.task.lock().ok().and_then(|mut task| task.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    async fn commit(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        let (reply, outcome) = oneshot::channel();
        let gone = || StoreError::Backend("the store's committer has stopped".into());
        self.queue
            .send(Pending { batch, reply })
            .map_err(|_| gone())?;
        outcome.await.map_err(|_| gone())?
    }
}

/// The due timers whose lease is free or expired and the due in-flight leases (`~run`,
/// kept in the instance rows since `0023_lease_in_row.sql`) whose claim is, earliest
/// first, at most `?2` of both: whether a row is a lease (1) or a timer (0), its rowid and
/// its due instant. Each arm walks its due index (`timers_due`, the partial index
/// `instances_lease_due` of the armed leases) in order and SQLite merges the two
/// (`MERGE (UNION ALL)`), stopping at the limit, so a poll's cost grows with due rows,
/// not parked ones. Run inside the claim's `BEGIN IMMEDIATE` transaction, whose write lock
/// makes the read and the leases that follow one atomic step; a poll with nothing due is
/// this one statement.
const DUE_SQL: &str = "SELECT 0 AS lease, rowid AS row, due_at_ms AS due FROM timers \
     WHERE due_at_ms <= ?1 AND (leased_until_ms IS NULL OR leased_until_ms < ?1) \
     UNION ALL SELECT 1, rowid, lease_due_ms FROM instances INDEXED BY instances_lease_due \
     WHERE lease_due_ms <= ?1 AND (lease_until_ms IS NULL OR lease_until_ms < ?1) \
     ORDER BY due LIMIT ?2";

/// Leases the timers [`DUE_SQL`] found (`?3`: a JSON array of rowids) to `?1` until `?2`.
const LEASE_TIMERS_SQL: &str = "UPDATE timers SET lease_owner = ?1, leased_until_ms = ?2 \
     WHERE rowid IN (SELECT value FROM json_each(?3)) \
     RETURNING instance, name, due_at_ms, incarnation";

/// Leases the in-flight leases [`DUE_SQL`] found, as [`LEASE_TIMERS_SQL`] does timers, and
/// names the rows as timers.
const LEASE_LEASES_SQL: &str = "UPDATE instances SET lease_owner = ?1, lease_until_ms = ?2 \
     WHERE rowid IN (SELECT value FROM json_each(?3)) \
     RETURNING id AS instance, '~run' AS name, lease_due_ms AS due_at_ms, \
     lease_incarnation AS incarnation";

/// The earliest due instant of a timer or an in-flight lease, claimed or not.
const NEXT_DUE_SQL: &str = "SELECT min(due) FROM (SELECT min(due_at_ms) AS due FROM timers \
     UNION ALL SELECT min(lease_due_ms) FROM instances WHERE lease_due_ms IS NOT NULL)";

/// Leases due pending outbox rows whose lease is free or expired, earliest due first
/// (then by key, as bytes: SQLite's `BINARY` collation).
/// The literal `state = 'pending'` is what lets SQLite use the partial index
/// `outbox_due` (a bound parameter would not match its `WHERE`); `INDEXED BY` makes the
/// statement fail rather than fall back to a scan if that ever stops being true.
const OUTBOX_CLAIM_SQL: &str = "UPDATE outbox SET lease_owner = ?1, lease_until_ms = ?2 \
     WHERE rowid IN (SELECT rowid FROM outbox INDEXED BY outbox_due \
         WHERE state = 'pending' AND due_at_ms <= ?3 \
         AND (lease_until_ms IS NULL OR lease_until_ms < ?3) \
         ORDER BY due_at_ms, key LIMIT ?4) \
     RETURNING *";

/// One delivery try, recorded only on a pending row leased to the caller: counts it,
/// drops the lease, and sets the state, the next due instant (kept when `?2` is NULL)
/// and the last error (kept when `?3` is NULL).
const RECORD_DELIVERY_SQL: &str = "UPDATE outbox SET state = ?1, \
     due_at_ms = COALESCE(?2, due_at_ms), last_error = COALESCE(?3, last_error), \
     deliveries = deliveries + 1, lease_owner = NULL, lease_until_ms = NULL \
     WHERE key = ?4 AND state = 'pending' AND lease_owner = ?5 \
     RETURNING instance, node, deliveries";

/// The keys of `names` (one of `statement_chunks`' chunks: 1 to 128 names), as
/// `(position in names, key)` rows: the names joined with the `camunda_keys_name`
/// index; a name without a key has no row. One statement text per size, built once.
fn keys_query(
    names: &[KeyName],
) -> sqlx::query::Query<'static, Sqlite, sqlx::sqlite::SqliteArguments<'static>> {
    static SQL: ChunkTexts = ChunkTexts::new();
    let sql = SQL.text(names.len(), 5, |rows| {
        format!(
            "WITH w (n, instance, kind, node, attempt) AS (VALUES {rows}) \
             SELECT w.n AS n, k.key AS key FROM w JOIN camunda_keys AS k \
             ON k.instance = w.instance AND k.kind = w.kind AND k.node = w.node \
             AND k.attempt = w.attempt"
        )
    });
    let mut q = sqlx::query(sql);
    for (i, name) in names.iter().enumerate() {
        q = q
            .bind(i as i64)
            .bind(id_text(name.instance))
            .bind(name.kind.as_str())
            .bind(name.node.clone())
            .bind(i64::from(name.attempt));
    }
    q
}

/// Puts the keys a [`keys_query`] found at their names' places in `out`.
fn fill_keys(out: &mut [i64], rows: Result<Vec<SqliteRow>, sqlx::Error>) -> StoreResult<()> {
    for row in rows.map_err(backend)? {
        let n: i64 = row.field("n")?;
        let key: i64 = row.field("key")?;
        let slot = usize::try_from(n)
            .ok()
            .and_then(|n| out.get_mut(n))
            .ok_or_else(|| StoreError::Corrupt(format!("a key query answered for name {n}")))?;
        *slot = key;
    }
    Ok(())
}

/// Instance ids are stored as hyphenated UUID text (`sqlite_commit::id_text`).
impl StoreRow for SqliteRow {
    fn instance_id(&self, name: &str) -> StoreResult<InstanceId> {
        let text: String = self.field(name)?;
        sqlite_commit::instance_id(&text)
    }
}

/// A new deployment's schedules replace those of the process's other deployments.
async fn replace_schedules(
    tx: &mut SqliteConnection,
    record: &DeploymentRecord,
    schedules: &[NewSchedule],
) -> StoreResult<()> {
    sqlx::query(
        "DELETE FROM schedules WHERE deployment IN \
         (SELECT id FROM deployments WHERE process_id = ? AND id <> ?)",
    )
    .bind(&record.process_id)
    .bind(record.id.0)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    for s in schedules {
        sqlx::query(
            "INSERT INTO schedules (deployment, node, due_at_ms, remaining) VALUES (?, ?, ?, ?)",
        )
        .bind(record.id.0)
        .bind(&s.node)
        .bind(s.due_at_ms)
        .bind(s.remaining.map(i64::from))
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    Ok(())
}

/// Leases due schedules whose lease is free or expired, earliest due first, as
/// [`OUTBOX_CLAIM_SQL`] does outbox rows.
const SCHEDULE_CLAIM_SQL: &str = "UPDATE schedules SET lease_owner = ?1, leased_until_ms = ?2 \
     WHERE rowid IN (SELECT rowid FROM schedules \
         WHERE due_at_ms <= ?3 AND (leased_until_ms IS NULL OR leased_until_ms < ?3) \
         ORDER BY due_at_ms LIMIT ?4) \
     RETURNING deployment, node, due_at_ms, remaining";

/// The newest journal row of `instance` (`instances.journal_last`); none for an instance
/// never journaled, or not there.
async fn journal_last(
    conn: &mut SqliteConnection,
    instance: InstanceId,
) -> StoreResult<Option<i64>> {
    let last: Option<Option<i64>> =
        sqlx::query_scalar("SELECT journal_last FROM instances WHERE id = ?")
            .bind(id_text(instance))
            .fetch_optional(&mut *conn)
            .await
            .map_err(backend)?;
    Ok(last.flatten())
}

/// One step of an instance's journal chain, as [`chain_link`] reads it.
struct ChainLink {
    /// The instance's row before this one.
    prev: Option<i64>,
    /// The step, when its `seq` is after the walk's `after`.
    entry: Option<JournalEntry>,
}

/// The step of `instance` that journal row `row` holds, read in any of the three
/// layouts: the columns of `0012_journal.sql`, an entry body (`0015`) or a round body
/// (`0018`), where the instance's entry is found by its id. A missing row, a round
/// without the instance, a link that does not point to an earlier row or a damaged body
/// is a corrupt journal, named by the row's id. The entry is unpacked only when its
/// `seq` is after `after` (the step a walk stops at is not read).
async fn chain_link(
    conn: &mut SqliteConnection,
    rounds: &RoundCache,
    row: i64,
    instance: InstanceId,
    after: u64,
) -> StoreResult<ChainLink> {
    if let Some(body) = rounds.get(row) {
        // A body cached from a later snapshot may have lost this instance's entry to a
        // purge this transaction does not see yet: only a hit is taken, a miss is read.
        if journal_body::round_step(row, &body, instance).is_ok_and(|step| step.is_some()) {
            return round_link(row, &body, instance, after);
        }
    }
    let found = sqlx::query(&format!(
        "SELECT id, prev, body, {JOURNAL_COLUMNS} FROM journal WHERE id = ?"
    ))
    .bind(row)
    .fetch_optional(&mut *conn)
    .await
    .map_err(backend)?
    .ok_or_else(|| {
        StoreError::Corrupt(format!(
            "journal row {row} of instance {instance} is missing"
        ))
    })?;
    let body: Option<Vec<u8>> = found.field("body")?;
    if let Some(&layout) = body.as_deref().and_then(|b| b.first()) {
        if layout != journal_body::LAYOUT && layout != journal_body::ROUND {
            return Err(StoreError::Corrupt(format!(
                "journal row {row}: body has unknown layout {layout}"
            )));
        }
    }
    match body {
        Some(body) if journal_body::is_round(&body) => {
            let body = Arc::new(body);
            rounds.put(row, body.clone());
            round_link(row, &body, instance, after)
        }
        _ => {
            let seq: i64 = found.field("seq")?;
            let entry = (u64::try_from(seq).map_or(true, |seq| seq > after))
                .then(|| sqlite_journal_from_row(&found))
                .transpose()?;
            checked_link(row, instance, found.field("prev")?, entry)
        }
    }
}

/// [`chain_link`] in round row `row` whose body is `body`.
fn round_link(row: i64, body: &[u8], instance: InstanceId, after: u64) -> StoreResult<ChainLink> {
    let step = journal_body::round_step(row, body, instance)?.ok_or_else(|| {
        StoreError::Corrupt(format!(
            "journal row {row} holds no step of instance {instance}"
        ))
    })?;
    let entry = (step.seq > after).then(|| step.unpack(row)).transpose()?;
    checked_link(row, instance, step.prev, entry)
}

/// A link that points to an earlier row, or a corrupt journal.
fn checked_link(
    row: i64,
    instance: InstanceId,
    prev: Option<i64>,
    entry: Option<JournalEntry>,
) -> StoreResult<ChainLink> {
    if let Some(prev) = prev.filter(|&prev| prev >= row || prev < 1) {
        return Err(StoreError::Corrupt(format!(
            "journal row {row} links instance {instance} to row {prev}, not an earlier one"
        )));
    }
    Ok(ChainLink { prev, entry })
}

/// One journal row of either entry layout (`0015_journal_packed.sql`), selected as `id,
/// body, JOURNAL_COLUMNS`: its body when it has one (a corrupt body's error names the
/// id), else the columns of `0012_journal.sql`, which the rows written before `0015`
/// still hold.
fn sqlite_journal_from_row(row: &SqliteRow) -> StoreResult<JournalEntry> {
    let body: Option<Vec<u8>> = row.field("body")?;
    let Some(body) = body else {
        return journal_from_row(row);
    };
    let (id, seq): (i64, i64) = (row.field("id")?, row.field("seq")?);
    let seq = u64::try_from(seq)
        .map_err(|_| StoreError::Corrupt(format!("stored journal seq {seq} is negative")))?;
    journal_body::unpack(id, seq, &body)
}

/// How many bytes of round bodies a purge holds while it walks its instances' chains;
/// past it, it drops them and reads a row again when it comes back to it.
const PURGE_BODIES_BYTES: usize = 64 << 20;

/// One journal row as a purge reads it.
enum JournalRead {
    Missing,
    /// A row of one step (`0012`'s columns or `0015`'s body), with its link.
    Entry(Option<i64>),
    Round(Vec<u8>),
    /// A body whose layout byte is no layout's.
    Damaged,
}

async fn read_journal_row(tx: &mut SqliteConnection, row: i64) -> StoreResult<JournalRead> {
    let read: Option<(Option<i64>, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT prev, body FROM journal WHERE id = ?")
            .bind(row)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
    Ok(match read {
        None => JournalRead::Missing,
        Some((prev, None)) => JournalRead::Entry(prev),
        Some((prev, Some(body))) => match body.first() {
            Some(&journal_body::ROUND) => JournalRead::Round(body),
            Some(&journal_body::LAYOUT) => JournalRead::Entry(prev),
            _ => JournalRead::Damaged,
        },
    })
}

/// `query` with `args` bound in order: a statement of the commit path
/// (`sqlite_commit`) run through sqlx.
fn bind_args<'q>(
    mut query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    args: &'q [sqlite_commit::Arg<'q>],
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    for arg in args {
        query = match arg {
            sqlite_commit::Arg::Null => query.bind(None::<i64>),
            sqlite_commit::Arg::Int(v) => query.bind(*v),
            sqlite_commit::Arg::Text(v) => query.bind(*v),
            sqlite_commit::Arg::Blob(v) => query.bind(*v),
            sqlite_commit::Arg::Bytes(v) => query.bind(v.as_slice()),
        };
    }
    query
}

/// The instances one purge takes, as stored ids (see `common::purge_choice`).
async fn purge_ids(tx: &mut SqliteConnection, request: &PurgeRequest) -> StoreResult<Vec<String>> {
    let sql = purge_choice("+status", "?1", request.deployment.map(|_| "?3"), "?2");
    let mut query = sqlx::query_scalar(&sql)
        .bind(request.ended_before_ms)
        .bind(purge_limit(request));
    if let Some(deployment) = request.deployment {
        query = query.bind(deployment.0);
    }
    query.fetch_all(&mut *tx).await.map_err(backend)
}

/// Deletes the journal entries of `ids` (their chains), before their instance rows go:
/// an entry row goes whole; a round row loses the purged instances' entries, and goes
/// when none is left. Returns how many entries went. Each round row is read once
/// however many of the purged instances it holds.
async fn delete_journals(tx: &mut SqliteConnection, ids: &[String]) -> StoreResult<u64> {
    let mut entry_rows: Vec<i64> = Vec::new();
    // Round rows by id: the body as read (dropped, to be read again, when the bodies
    // held pass `PURGE_BODIES_BYTES`), and the purged instances it holds.
    let mut rounds: BTreeMap<i64, (Option<Vec<u8>>, HashSet<InstanceId>)> = BTreeMap::new();
    let mut held = 0usize;
    for id in ids {
        let Ok(instance) = InstanceId::parse_str(id) else {
            continue;
        };
        let mut next = journal_last(tx, instance).await?;
        // A damaged chain (a missing row, a round without the instance, a body that does
        // not read, a link that does not point back) ends the walk: retention deletes
        // what it can reach and never stalls on a damaged journal.
        while let Some(row) = next {
            let known = rounds.get(&row).map(|(body, _)| body.is_some());
            if known != Some(true) {
                match read_journal_row(tx, row).await? {
                    JournalRead::Missing | JournalRead::Damaged => break,
                    JournalRead::Entry(prev) if known.is_none() => {
                        entry_rows.push(row);
                        next = prev.filter(|&prev| prev < row);
                        continue;
                    }
                    JournalRead::Entry(_) => break,
                    JournalRead::Round(body) => {
                        held += body.len();
                        rounds.entry(row).or_default().0 = Some(body);
                    }
                }
            }
            let (body, purged) = rounds.get_mut(&row).expect("read above");
            let body = body.as_deref().expect("held");
            let Ok(Some(step)) = journal_body::round_step(row, body, instance) else {
                break;
            };
            purged.insert(instance);
            next = step.prev.filter(|&prev| prev < row);
            if held > PURGE_BODIES_BYTES {
                for (body, _) in rounds.values_mut() {
                    body.take();
                }
                held = 0;
            }
        }
    }
    let mut gone = entry_rows.len() as u64;
    for chunk in entry_rows.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Sqlite> =
            QueryBuilder::new("DELETE FROM journal WHERE id IN (");
        let mut list = query.separated(", ");
        for row in chunk {
            list.push_bind(*row);
        }
        query.push(")");
        query.build().execute(&mut *tx).await.map_err(backend)?;
    }
    // The newest row is emptied, not deleted, so that its id is never given to another
    // row (`RoundCache` relies on it).
    let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM journal")
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
    for (row, (body, purged)) in rounds {
        if purged.is_empty() {
            continue;
        }
        let body = match body {
            Some(body) => body,
            None => match read_journal_row(tx, row).await? {
                JournalRead::Round(body) => body,
                _ => continue,
            },
        };
        // A round that does not read whole keeps all its entries (the purge goes on).
        let Ok(entries) = journal_body::round(row, &body) else {
            continue;
        };
        let kept: Vec<_> = entries
            .iter()
            .filter(|entry| !purged.contains(&entry.instance))
            .copied()
            .collect();
        gone += (entries.len() - kept.len()) as u64;
        if kept.is_empty() && Some(row) != newest {
            sqlx::query("DELETE FROM journal WHERE id = ?")
                .bind(row)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        } else {
            sqlx::query("UPDATE journal SET body = ? WHERE id = ?")
                .bind(journal_body::join_round(&kept))
                .bind(row)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
    }
    Ok(gone)
}

/// What the rows of `ids` hold in themselves, which a purge takes with them: attempt
/// records (`instances.history_n`), and in-flight leases (`~run` timers kept in the
/// row; an ending step resolves it, so nearly always none).
async fn in_row_counts(tx: &mut SqliteConnection, ids: &[String]) -> StoreResult<(u64, u64)> {
    let (attempts, leases): (i64, i64) = in_list(
        "SELECT COALESCE(SUM(history_n), 0), count(lease_due_ms) FROM instances WHERE id IN",
        ids,
    )
    .build_query_as()
    .fetch_one(&mut *tx)
    .await
    .map_err(backend)?;
    Ok((
        u64::try_from(attempts).unwrap_or(0),
        u64::try_from(leases).unwrap_or(0),
    ))
}

/// `DELETE FROM {table} WHERE {column} IN (ids)`, one statement (the ids are at most
/// `PURGE_LIMIT_MAX`, far below SQLite's parameter limit); returns the rows deleted.
async fn delete_where_in(
    tx: &mut SqliteConnection,
    table: &str,
    column: &str,
    ids: &[String],
) -> StoreResult<u64> {
    let done = in_list(format!("DELETE FROM {table} WHERE {column} IN"), ids)
        .build()
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    Ok(done.rows_affected())
}

/// `sql` followed by `(?, ?, …)` with `texts` bound: the `IN` list of a statement over
/// stored ids.
fn in_list<'a>(sql: impl Into<String>, texts: &'a [String]) -> QueryBuilder<'a, Sqlite> {
    let mut query: QueryBuilder<Sqlite> = QueryBuilder::new(sql);
    query.push(" (");
    let mut list = query.separated(", ");
    for text in texts {
        list.push_bind(text.as_str());
    }
    query.push(")");
    query
}

/// What a claim leases: the rows one statement (`OUTBOX_CLAIM_SQL`,
/// `SCHEDULE_CLAIM_SQL`: owner, lease end, now, limit) leases, or the due timers.
#[derive(Clone, Copy)]
enum Claimed {
    Rows(&'static str),
    /// The rows of `timers` and the in-flight leases of `instances`, earliest due first
    /// across both ([`claim_timer_rows`]).
    Timers,
}

/// A lease update (see [`Claimed`]) in its own `BEGIN IMMEDIATE` transaction on the
/// writer connection.
async fn claim_rows(
    conn: &mut SqliteConnection,
    what: Claimed,
    claim: TimerClaim<'_>,
    limit: u32,
) -> StoreResult<Vec<SqliteRow>> {
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE")
        .await
        .map_err(backend)?;
    let rows = match what {
        Claimed::Rows(sql) => sqlx::query(sql)
            .bind(claim.owner)
            .bind(claim.now_ms.saturating_add(claim.lease_ms))
            .bind(claim.now_ms)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?,
        Claimed::Timers => claim_timer_rows(&mut tx, claim, limit).await?,
    };
    tx.commit().await.map_err(backend)?;
    Ok(rows)
}

/// Leases the earliest `limit` due timers, whether rows of `timers` or in-flight leases
/// (`~run`) in instance rows, inside the caller's write transaction: one read of both
/// ([`DUE_SQL`]), then an update of each table that has rows to lease. Rows come back
/// with [`TIMER_COLUMNS`]' names.
async fn claim_timer_rows(
    tx: &mut SqliteConnection,
    claim: TimerClaim<'_>,
    limit: u32,
) -> StoreResult<Vec<SqliteRow>> {
    let due: Vec<(i64, i64, i64)> = sqlx::query_as(DUE_SQL)
        .bind(claim.now_ms)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
    let mut rows = Vec::with_capacity(due.len());
    for (lease, sql) in [(0, LEASE_TIMERS_SQL), (1, LEASE_LEASES_SQL)] {
        let rowids: Vec<String> = due
            .iter()
            .filter(|d| d.0 == lease)
            .map(|d| d.1.to_string())
            .collect();
        if rowids.is_empty() {
            continue;
        }
        rows.extend(
            sqlx::query(sql)
                .bind(claim.owner)
                .bind(claim.now_ms.saturating_add(claim.lease_ms))
                .bind(format!("[{}]", rowids.join(",")))
                .fetch_all(&mut *tx)
                .await
                .map_err(backend)?,
        );
    }
    Ok(rows)
}

impl SqliteStore {
    /// Runs a lease update (`claim_rows`) without waiting for its fsync. A lease is
    /// advisory: losing one in a crash only makes its timer or outbox row claimable
    /// again, and the fence (a timer) or the idempotency key (a delivery) still stops a
    /// double effect. So the claim commits with WAL `synchronous=NORMAL` for this one
    /// transaction; the next FULL commit flushes it along with its own frames. The writer
    /// goes back to FULL before anyone else can use it, or is closed.
    async fn relaxed_claim(
        &self,
        what: Claimed,
        claim: TimerClaim<'_>,
        limit: u32,
    ) -> StoreResult<Vec<SqliteRow>> {
        let mut conn = self.writer.acquire().await.map_err(backend)?;
        sqlx::query("PRAGMA synchronous = NORMAL")
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
        let claimed = claim_rows(&mut conn, what, claim, limit).await;
        if let Err(e) = sqlx::query("PRAGMA synchronous = FULL")
            .execute(&mut *conn)
            .await
        {
            // Never return a connection that might skip fsyncs to the pool.
            let _ = sqlx::Connection::close(conn.detach()).await;
            return Err(backend(e));
        }
        claimed
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn is_durable(&self) -> bool {
        true
    }

    /// The committer joins every commit queued while one runs into its next transaction.
    fn commits_group(&self) -> bool {
        true
    }

    async fn close(&self) {
        SqliteStore::close(self).await;
    }

    async fn deploy(&self, new: NewDeployment<'_>) -> StoreResult<DeploymentRecord> {
        let mut tx = self.begin_write().await?;
        // Looked up first, so that deploying the same content again uses no new version
        // number (an insert that conflicts would still consume one); the insert's
        // conflict clause covers two replicas deploying the same content at once.
        let existing = sqlx::query(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE content_hash = ?"
        ))
        .bind(new.content_hash)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        if let Some(row) = existing {
            let record = deployment_from_row(&row)?;
            tx.commit().await.map_err(backend)?;
            return Ok(record);
        }
        let inserted = sqlx::query(&format!(
            "INSERT INTO deployments (process_id, content_hash, source, deployed_at_ms) \
             VALUES (?, ?, ?, ?) ON CONFLICT (content_hash) DO NOTHING \
             RETURNING {DEPLOYMENT_COLUMNS}"
        ))
        .bind(new.process_id)
        .bind(new.content_hash)
        .bind(new.source)
        .bind(new.deployed_at_ms)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        let fresh = inserted.is_some();
        let row = match inserted {
            Some(row) => row,
            None => sqlx::query(&format!(
                "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE content_hash = ?"
            ))
            .bind(new.content_hash)
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?,
        };
        let record = deployment_from_row(&row)?;
        if fresh {
            replace_schedules(&mut tx, &record, new.schedules).await?;
        }
        tx.commit().await.map_err(backend)?;
        self.known_deployments.insert(record.id);
        Ok(record)
    }

    async fn deployment(&self, id: DeploymentId) -> StoreResult<Option<DeploymentRecord>> {
        let sql = format!("SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = ?");
        let row = sqlx::query(&sql).bind(id.0).fetch_optional(&self.readers);
        map_optional(row.await, deployment_from_row)
    }

    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>> {
        let sql = format!("SELECT {DEPLOYMENT_COLUMNS} FROM deployments ORDER BY id");
        map_all(
            sqlx::query(&sql).fetch_all(&self.readers).await,
            deployment_from_row,
        )
    }

    async fn retire(&self, id: DeploymentId) -> StoreResult<RetireOutcome> {
        let mut tx = self.begin_write().await?;
        let exists = sqlx::query("SELECT 1 FROM deployments WHERE id = ?")
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        if exists.is_none() {
            return Ok(RetireOutcome::NotFound);
        }
        let blocking: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM instances \
             WHERE deployment = ? AND status IN ('running', 'failed')",
        )
        .bind(id.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
        if blocking > 0 {
            return Ok(RetireOutcome::Refused {
                blocking_instances: blocking as u64,
            });
        }
        sqlx::query("UPDATE deployments SET retired = 1 WHERE id = ?")
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        sqlx::query("DELETE FROM schedules WHERE deployment = ?")
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(RetireOutcome::Retired)
    }

    /// Hands the batch to the store's committer, which applies it alone or with the
    /// batches other callers (lanes) handed over meanwhile, in one transaction
    /// ([`Committer`]).
    async fn commit(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.committer.commit(batch).await
    }

    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id_text(id))
            .fetch_optional(&self.readers);
        map_optional(row.await, instance_from_row)
    }

    /// `IN` lists of at most `ROWS_PER_STATEMENT` ids, each a primary-key search.
    async fn instances_by_id(&self, ids: &[InstanceId]) -> StoreResult<Vec<InstanceRecord>> {
        let texts: BTreeSet<String> = ids.iter().map(|&id| id_text(id)).collect();
        let texts: Vec<String> = texts.into_iter().collect();
        let mut out = Vec::with_capacity(texts.len());
        for chunk in statement_chunks(&texts) {
            let rows = in_list(
                format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id IN"),
                chunk,
            )
            .build()
            .fetch_all(&self.readers)
            .await;
            out.extend(map_all(rows, instance_from_row)?);
        }
        Ok(out)
    }

    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        let mut query = instances_query::<Sqlite>(filter, "TEXT", StatusArms::PerStatus, "");
        map_all(
            query.build().fetch_all(&self.readers).await,
            instance_from_row,
        )
    }

    async fn claim_due_timers(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<TimerRecord>> {
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        claimed_timers(
            &self
                .relaxed_claim(Claimed::Timers, claim, claim.limit)
                .await?,
        )
    }

    async fn claim_due_schedules(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<ScheduleRecord>> {
        // Most databases have no schedule due: a read settles that without the write
        // lock the lease would take.
        let due: Option<i64> = sqlx::query_scalar("SELECT min(due_at_ms) FROM schedules")
            .fetch_one(&self.readers)
            .await
            .map_err(backend)?;
        if claim.limit == 0 || due.is_none_or(|due| due > claim.now_ms) {
            return Ok(Vec::new());
        }
        claimed_schedules(
            &self
                .relaxed_claim(Claimed::Rows(SCHEDULE_CLAIM_SQL), claim, claim.limit)
                .await?,
        )
    }

    async fn advance_schedule(
        &self,
        deployment: DeploymentId,
        advance: &ScheduleAdvance,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let (sql, args) = sqlite_commit::move_schedule_args(deployment, advance);
        let moved = bind_args(sqlx::query(sql), &args)
            .execute(&mut *tx)
            .await
            .map_err(backend)?
            .rows_affected()
            == 1;
        tx.commit().await.map_err(backend)?;
        Ok(moved)
    }

    async fn schedules(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<ScheduleRecord>> {
        let sql = format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE ?1 IS NULL OR deployment = ?1 \
             ORDER BY deployment, node"
        );
        let rows = sqlx::query(&sql)
            .bind(deployment.map(|d| d.0))
            .fetch_all(&self.readers);
        map_all(rows.await, schedule_from_row)
    }

    async fn next_timer_due(&self) -> StoreResult<Option<i64>> {
        // Each `min` is one end of an index (`timers_due`, `instances_lease_due`): the
        // partial index serves only a query whose WHERE implies its own (without it,
        // SQLite reads every instance).
        sqlx::query_scalar(NEXT_DUE_SQL)
            .fetch_one(&self.readers)
            .await
            .map_err(backend)
    }

    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>> {
        // The in-flight lease is kept in the instance's row (`0023_lease_in_row.sql`).
        let sql = format!(
            "SELECT {TIMER_COLUMNS} FROM timers WHERE instance = ?1 \
             UNION ALL SELECT id AS instance, '~run' AS name, lease_due_ms AS due_at_ms, \
             lease_incarnation AS incarnation FROM instances \
             WHERE id = ?1 AND lease_due_ms IS NOT NULL ORDER BY name"
        );
        let rows = sqlx::query(&sql)
            .bind(id_text(instance))
            .fetch_all(&self.readers);
        map_all(rows.await, timer_from_row)
    }

    async fn subscriptions(
        &self,
        message: &str,
        key: &str,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions \
             WHERE message = ? AND correlation_key = ? \
             ORDER BY opened_at_ms, instance, node LIMIT ?"
        );
        let rows = sqlx::query(&sql)
            .bind(message)
            .bind(key)
            .bind(i64::from(effective_subscriptions_limit(limit)))
            .fetch_all(&self.readers);
        map_all(rows.await, subscription_from_row)
    }

    async fn subscriptions_after(
        &self,
        message: &str,
        key: &str,
        after: &SubscriptionRecord,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions \
             WHERE message = ? AND correlation_key = ? \
             AND (opened_at_ms, instance, node) > (?, ?, ?) \
             ORDER BY opened_at_ms, instance, node LIMIT ?"
        );
        let rows = sqlx::query(&sql)
            .bind(message)
            .bind(key)
            .bind(after.opened_at_ms)
            .bind(id_text(after.instance))
            .bind(after.node.as_str())
            .bind(i64::from(effective_subscriptions_limit(limit)))
            .fetch_all(&self.readers);
        map_all(rows.await, subscription_from_row)
    }

    async fn instance_subscriptions(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE instance = ? ORDER BY node"
        );
        let rows = sqlx::query(&sql)
            .bind(id_text(instance))
            .fetch_all(&self.readers);
        map_all(rows.await, subscription_from_row)
    }

    async fn instance_counts(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<(InstanceStatus, u64)>> {
        let rows = match deployment {
            None => {
                sqlx::query(INSTANCE_COUNTS_SQL)
                    .fetch_all(&self.readers)
                    .await
            }
            Some(d) => {
                let sql = crate::common::instance_counts_of_deployment_sql("?");
                sqlx::query(&sql).bind(d.0).fetch_all(&self.readers).await
            }
        };
        Ok(all_counts(map_all(rows, status_count_from_row)?))
    }

    async fn incidents(&self, instance: Option<InstanceId>) -> StoreResult<Vec<IncidentRecord>> {
        let rows = match instance {
            Some(id) => {
                let sql = format!(
                    "SELECT {INCIDENT_COLUMNS} FROM incidents WHERE instance = ? ORDER BY id"
                );
                sqlx::query(&sql)
                    .bind(id_text(id))
                    .fetch_all(&self.readers)
                    .await
            }
            None => {
                let sql = format!("SELECT {INCIDENT_COLUMNS} FROM incidents ORDER BY id");
                sqlx::query(&sql).fetch_all(&self.readers).await
            }
        };
        map_all(rows, incident_from_row)
    }

    async fn latest_incidents(
        &self,
        limit: u32,
        open_only: bool,
    ) -> StoreResult<Vec<IncidentRecord>> {
        let only = if open_only {
            "WHERE resolved_at_ms IS NULL "
        } else {
            ""
        };
        let sql =
            format!("SELECT {INCIDENT_COLUMNS} FROM incidents {only}ORDER BY id DESC LIMIT ?");
        let rows = sqlx::query(&sql)
            .bind(i64::from(effective_instances_limit(limit)))
            .fetch_all(&self.readers);
        map_all(rows.await, incident_from_row)
    }

    async fn audit(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        let limit = i64::from(effective_instances_limit(limit));
        // The newest `limit` rows, returned oldest first.
        let rows = match instance {
            Some(i) => {
                let sql = format!(
                    "SELECT * FROM (SELECT {AUDIT_COLUMNS} FROM audit WHERE instance = ? \
                     ORDER BY id DESC LIMIT ?) ORDER BY id"
                );
                sqlx::query(&sql)
                    .bind(id_text(i))
                    .bind(limit)
                    .fetch_all(&self.readers)
                    .await
            }
            None => {
                let sql = format!(
                    "SELECT * FROM (SELECT {AUDIT_COLUMNS} FROM audit ORDER BY id DESC \
                     LIMIT ?) ORDER BY id"
                );
                sqlx::query(&sql).bind(limit).fetch_all(&self.readers).await
            }
        };
        map_all(rows, audit_from_row)
    }

    /// One `BEGIN IMMEDIATE` transaction: choose the instances (`instances_ended` or
    /// `instances_deployment_ended`, oldest end first), then delete their rows table by
    /// table, children first (the foreign keys hold at every statement), by the
    /// `instance` index of each. The single writer makes the choice and the deletes one
    /// atomic step: no lane can commit one of the chosen instances in between.
    async fn purge_finished(&self, request: PurgeRequest) -> StoreResult<PurgeOutcome> {
        if request.limit == 0 {
            return Ok(PurgeOutcome::default());
        }
        let mut tx = self.begin_write().await?;
        let ids = purge_ids(&mut tx, &request).await?;
        if ids.is_empty() {
            tx.commit().await.map_err(backend)?;
            return Ok(PurgeOutcome::default());
        }
        let (in_rows, leases) = in_row_counts(&mut tx, &ids).await?;
        let outcome = PurgeOutcome {
            attempts: delete_where_in(&mut tx, "attempts", "instance", &ids).await? + in_rows,
            journal: {
                self.rounds.clear();
                delete_journals(&mut tx, &ids).await?
            },
            incidents: delete_where_in(&mut tx, "incidents", "instance", &ids).await?,
            audit: delete_where_in(&mut tx, "audit", "instance", &ids).await?,
            timers: delete_where_in(&mut tx, "timers", "instance", &ids).await?
                + leases
                + delete_where_in(&mut tx, "pull_tasks", "instance", &ids).await?
                + {
                    delete_where_in(&mut tx, "user_task_candidates", "instance", &ids).await?;
                    delete_where_in(&mut tx, "user_tasks", "instance", &ids).await?
                },
            subscriptions: delete_where_in(&mut tx, "subscriptions", "instance", &ids).await?,
            outbox: delete_where_in(&mut tx, "outbox", "instance", &ids).await?,
            keys: delete_where_in(&mut tx, "camunda_keys", "instance", &ids).await?,
            instances: delete_where_in(&mut tx, "instances", "id", &ids).await?,
        };
        tx.commit().await.map_err(backend)?;
        Ok(outcome)
    }

    /// One indexed range scan of `pull_tasks_offered` per topic, merged: a topic's scan
    /// stops at the limit.
    async fn offered_pull_tasks(&self, query: PullQuery<'_>) -> StoreResult<Vec<PullTaskRecord>> {
        let limit = query.limit.min(PULL_QUERY_LIMIT_MAX);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let sql = format!(
            "SELECT {PULL_COLUMNS} FROM pull_tasks INDEXED BY pull_tasks_offered \
             WHERE topic = ? AND worker IS NULL \
             ORDER BY offered_at_ms, instance, node LIMIT ?"
        );
        for topic in query.topics {
            let rows = sqlx::query(&sql)
                .bind(topic)
                .bind(i64::from(limit))
                .fetch_all(&self.readers)
                .await;
            out.extend(map_all(rows, pull_from_row)?);
        }
        Ok(merge_offered(out, limit))
    }

    async fn pull_tasks(&self, instance: InstanceId) -> StoreResult<Vec<PullTaskRecord>> {
        let sql = format!("SELECT {PULL_COLUMNS} FROM pull_tasks WHERE instance = ? ORDER BY node");
        let rows = sqlx::query(&sql)
            .bind(id_text(instance))
            .fetch_all(&self.readers);
        map_all(rows.await, pull_from_row)
    }

    /// One indexed range walk per walk of the query (`common::task_walks`), each
    /// stopping at the limit, merged.
    async fn user_tasks(&self, query: &UserTaskQuery) -> StoreResult<Vec<UserTaskRecord>> {
        let walks = task_walks(query);
        let merging = walks.len() > 1;
        let mut out = Vec::new();
        for walk in walks {
            let mut q = user_tasks_query::<Sqlite>(query, walk, "CROSS JOIN", "TEXT", "");
            let rows = q.build().fetch_all(&self.readers).await;
            out.extend(map_all(rows, user_task_from_row)?);
        }
        Ok(if merging {
            qflow_store::merge_user_tasks(out, query.effective_limit())
        } else {
            out
        })
    }

    async fn instance_user_tasks(&self, instance: InstanceId) -> StoreResult<Vec<UserTaskRecord>> {
        let sql = format!(
            "SELECT {USER_TASK_COLUMNS} FROM user_tasks AS t WHERE t.instance = ? ORDER BY t.node"
        );
        let rows = sqlx::query(&sql)
            .bind(id_text(instance))
            .fetch_all(&self.readers);
        map_all(rows.await, user_task_from_row)
    }

    /// The names' keys read in statements of up to 128 names (a join of the names with
    /// `camunda_keys_name`) on the readers, without a lock; only when some are missing,
    /// one `BEGIN IMMEDIATE` transaction inserts those (in the order asked, so keys
    /// ascend with it; a name another writer gave a key meanwhile conflicts and keeps
    /// it) and reads them back.
    async fn camunda_keys(&self, names: &[KeyName]) -> StoreResult<Vec<i64>> {
        check_key_names(names)?;
        let mut out = vec![0; names.len()];
        let mut at = 0;
        for chunk in statement_chunks(names) {
            let found = keys_query(chunk).fetch_all(&self.readers).await;
            fill_keys(&mut out[at..at + chunk.len()], found)?;
            at += chunk.len();
        }
        let missing: Vec<(usize, &KeyName)> = names
            .iter()
            .enumerate()
            .filter(|(i, _)| out[*i] == 0)
            .collect();
        if missing.is_empty() {
            return Ok(out);
        }
        let mut tx = self.begin_write().await?;
        let wanted: Vec<&KeyName> = missing.iter().map(|(_, n)| *n).collect();
        let mut fresh = vec![0; wanted.len()];
        let mut at = 0;
        for chunk in statement_chunks(&wanted) {
            // Only names whose instance is in the store: a purge takes the write lock too,
            // so none can take the instance between this check and the commit.
            let mut insert = QueryBuilder::<Sqlite>::new(
                "INSERT INTO camunda_keys (instance, kind, node, attempt) \
                 SELECT v.column1, v.column2, v.column3, v.column4 FROM (",
            );
            insert.push_values(chunk.iter(), |mut row, name| {
                row.push_bind(id_text(name.instance))
                    .push_bind(name.kind.as_str())
                    .push_bind(name.node.as_str())
                    .push_bind(i64::from(name.attempt));
            });
            insert.push(
                ") AS v WHERE EXISTS (SELECT 1 FROM instances WHERE id = v.column1) \
                 ON CONFLICT (instance, kind, node, attempt) DO NOTHING",
            );
            insert.build().execute(&mut *tx).await.map_err(backend)?;
            let names: Vec<KeyName> = chunk.iter().map(|n| (*n).clone()).collect();
            let found = keys_query(&names).fetch_all(&mut *tx).await;
            fill_keys(&mut fresh[at..at + chunk.len()], found)?;
            at += chunk.len();
        }
        // A name left without a key names no instance of the store: nothing is kept.
        if let Some(((_, name), _)) = missing.iter().zip(&fresh).find(|(_, k)| **k == 0) {
            tx.rollback().await.map_err(backend)?;
            return Err(StoreError::UnknownInstance(name.instance));
        }
        tx.commit().await.map_err(backend)?;
        for ((i, _), key) in missing.iter().zip(fresh) {
            out[*i] = key;
        }
        Ok(out)
    }

    async fn buffer_message(&self, message: &NewBufferedMessage) -> StoreResult<BufferOutcome> {
        let mut tx = self.begin_write().await?;
        if let Some(id) = &message.message_id {
            let holder = "FROM buffered_messages WHERE name = ?1 AND correlation_key = ?2 \
                 AND message_id = ?3";
            for sql in [
                format!(
                    "DELETE FROM message_takers WHERE message IN \
                     (SELECT id {holder} AND expires_at_ms <= ?4)"
                ),
                format!("DELETE {holder} AND expires_at_ms <= ?4"),
            ] {
                sqlx::query(&sql)
                    .bind(&message.name)
                    .bind(&message.correlation_key)
                    .bind(id)
                    .bind(message.published_at_ms)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
            }
            let live: Option<i64> = sqlx::query_scalar(&format!("SELECT key {holder}"))
                .bind(&message.name)
                .bind(&message.correlation_key)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
            if let Some(key) = live {
                return Ok(BufferOutcome::Duplicate { key });
            }
        }
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO buffered_messages (key, name, correlation_key, message_id, variables, \
             published_at_ms, expires_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(message.key)
        .bind(&message.name)
        .bind(&message.correlation_key)
        .bind(&message.message_id)
        .bind(&message.variables)
        .bind(message.published_at_ms)
        .bind(message.expires_at_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(BufferOutcome::Buffered { id })
    }

    async fn buffered_messages(&self, query: BufferQuery<'_>) -> StoreResult<Vec<BufferedMessage>> {
        let limit = i64::from(effective_buffered_limit(query.limit));
        let join = |inner: &str| {
            format!(
                "SELECT {BUFFERED_COLUMNS} FROM ({inner}) AS m \
                 LEFT JOIN message_takers AS t ON t.message = m.id ORDER BY m.id, t.process"
            )
        };
        let rows = match query.name_and_key {
            Some((name, key)) => {
                let sql = join(
                    "SELECT * FROM buffered_messages WHERE name = ?1 AND correlation_key = ?2 \
                     AND id > ?3 AND expires_at_ms > ?4 ORDER BY id LIMIT ?5",
                );
                sqlx::query(&sql)
                    .bind(name)
                    .bind(key)
                    .bind(query.after)
                    .bind(query.now_ms)
                    .bind(limit)
                    .fetch_all(&self.readers)
                    .await
            }
            None => {
                let sql = join(
                    "SELECT * FROM buffered_messages WHERE id > ?1 AND expires_at_ms > ?2 \
                     ORDER BY id LIMIT ?3",
                );
                sqlx::query(&sql)
                    .bind(query.after)
                    .bind(query.now_ms)
                    .bind(limit)
                    .fetch_all(&self.readers)
                    .await
            }
        };
        buffered_from_rows(&rows.map_err(backend)?)
    }

    async fn expire_messages(&self, now_ms: i64, limit: u32) -> StoreResult<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        let expired = "SELECT id FROM buffered_messages WHERE expires_at_ms <= ?1 \
             ORDER BY expires_at_ms, id LIMIT ?2";
        sqlx::query(&format!(
            "DELETE FROM message_takers WHERE message IN ({expired})"
        ))
        .bind(now_ms)
        .bind(i64::from(limit))
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        let done = sqlx::query(&format!(
            "DELETE FROM buffered_messages WHERE id IN ({expired})"
        ))
        .bind(now_ms)
        .bind(i64::from(limit))
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(done.rows_affected())
    }

    async fn camunda_key(&self, key: i64) -> StoreResult<Option<KeyName>> {
        let row =
            sqlx::query("SELECT instance, kind, node, attempt FROM camunda_keys WHERE key = ?")
                .bind(key)
                .fetch_optional(&self.readers);
        map_optional(row.await, key_name_from_row)
    }

    /// The `attempts` rows (moved there from the row, or written before
    /// `0019_attempts_in_row.sql`), then the row's own history: one read transaction, so
    /// a spill between the two reads cannot drop or repeat a record.
    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>> {
        let mut tx = self.readers.begin().await.map_err(backend)?;
        let sql = format!("SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE instance = ? ORDER BY id");
        let rows = sqlx::query(&sql)
            .bind(id_text(instance))
            .fetch_all(&mut *tx)
            .await;
        let mut out = map_all(rows, attempt_from_row)?;
        let body: Option<Option<Vec<u8>>> =
            sqlx::query_scalar("SELECT history FROM instances WHERE id = ?")
                .bind(id_text(instance))
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
        if let Some(Some(body)) = body {
            out.extend(history::unpack(instance, &body)?);
        }
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    /// One walk of the instance's chain from its newest row down to `after`, a point read
    /// of each row by its rowid, in one read transaction (one snapshot of the file). Paging
    /// an instance of N rows a page of L at a time walks about N²/2L rows in all: fine for
    /// the histories instances have; a replay reads pages of 1,000.
    async fn journal(
        &self,
        instance: InstanceId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>> {
        let keep = journal_limit(limit) as usize;
        let mut tx = self.readers.begin().await.map_err(backend)?;
        let mut next = journal_last(&mut tx, instance).await?;
        // The walk runs newest first and the page is the oldest `keep` steps after
        // `after`: the last `keep` the walk meets, all it holds at once.
        let mut page = std::collections::VecDeque::with_capacity(keep.min(1024));
        while let Some(row) = next {
            let link = chain_link(&mut tx, &self.rounds, row, instance, after).await?;
            let Some(entry) = link.entry else {
                break;
            };
            page.push_back(entry);
            if page.len() > keep {
                page.pop_front();
            }
            next = link.prev;
        }
        tx.commit().await.map_err(backend)?;
        Ok(page.into_iter().rev().collect())
    }

    async fn claim_due_outbox(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<OutboxRecord>> {
        let limit = effective_outbox_claim_limit(claim.limit);
        if limit == 0 {
            return Ok(Vec::new());
        }
        claimed_outbox(
            &self
                .relaxed_claim(Claimed::Rows(OUTBOX_CLAIM_SQL), claim, limit)
                .await?,
        )
    }

    /// One `BEGIN IMMEDIATE` transaction, durable like a commit: the row's update and,
    /// for a poisoned row, its incident.
    async fn record_delivery(
        &self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: DeliveryRecord,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let tried: Option<(String, String, i64)> = sqlx::query_as(RECORD_DELIVERY_SQL)
            .bind(record.state().as_str())
            .bind(record.retry_at_ms())
            .bind(record.error())
            .bind(key)
            .bind(owner)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        let Some((instance, node, deliveries)) = tried else {
            tx.rollback().await.map_err(backend)?;
            return Ok(false);
        };
        if let DeliveryRecord::Poisoned { error } = &record {
            sqlx::query(
                "INSERT INTO incidents (instance, node, code, message, opened_at_ms) \
                 VALUES (?, ?, ?, ?, ?)",
            )
            .bind(instance)
            .bind(node)
            .bind(POISONED_INCIDENT_CODE)
            .bind(poisoned_message(error, deliveries_from_db(deliveries)?))
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(true)
    }

    async fn next_outbox_due(&self) -> StoreResult<Option<i64>> {
        sqlx::query_scalar("SELECT min(due_at_ms) FROM outbox WHERE state = 'pending'")
            .fetch_one(&self.readers)
            .await
            .map_err(backend)
    }

    async fn outbox_row(&self, key: &str) -> StoreResult<Option<OutboxRecord>> {
        let sql = format!("SELECT {OUTBOX_COLUMNS} FROM outbox WHERE key = ?");
        let row = sqlx::query(&sql).bind(key).fetch_optional(&self.readers);
        map_optional(row.await, outbox_from_row)
    }

    async fn outbox(&self, instance: InstanceId) -> StoreResult<Vec<OutboxRecord>> {
        let sql = format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE instance = ? ORDER BY created_at_ms, key"
        );
        let rows = sqlx::query(&sql)
            .bind(id_text(instance))
            .fetch_all(&self.readers);
        map_all(rows.await, outbox_from_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qflow_store::conformance::{commit, deploy, id};
    use qflow_store::DeploymentId;

    type Answer = oneshot::Receiver<StoreResult<Vec<CommitOutcome>>>;

    #[test]
    fn statement_chunks_are_full_statements_then_the_rest() {
        let sizes = |n: usize| -> Vec<usize> {
            let rows: Vec<usize> = (0..n).collect();
            let chunks: Vec<&[usize]> = statement_chunks(&rows).collect();
            assert_eq!(chunks.concat(), rows, "{n}: every row once, in order");
            chunks.iter().map(|c| c.len()).collect()
        };
        assert_eq!(sizes(0), Vec::<usize>::new());
        assert_eq!(sizes(1), [1]);
        assert_eq!(sizes(128), [128]);
        assert_eq!(sizes(300), [128, 128, 44]);
        assert_eq!(sizes(255), [128, 127]);
        for n in 0..1_000 {
            let chunks = sizes(n);
            assert_eq!(chunks.len(), n.div_ceil(ROWS_PER_STATEMENT), "{n}");
            assert!(chunks
                .iter()
                .all(|&s| (1..=ROWS_PER_STATEMENT).contains(&s)));
        }
    }

    fn pending(batches: Vec<Vec<Commit>>) -> (Vec<Pending>, Vec<Answer>) {
        batches
            .into_iter()
            .map(|batch| {
                let (reply, answer) = oneshot::channel();
                (Pending { batch, reply }, answer)
            })
            .unzip()
    }

    /// `close` stops the committer with its connection: what was committed before is in
    /// the file for the next store, a commit after it is refused, not lost silently.
    #[tokio::test]
    async fn a_closed_store_refuses_commits_and_keeps_what_it_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let store = SqliteStore::open(&path).await.unwrap();
        let dep = deploy(&store, "aaaa").await.unwrap();
        let done = store.commit(vec![commit(id(1), None, dep)]).await.unwrap();
        assert_eq!(done, [CommitOutcome::Applied { fence: 1 }]);
        store.close().await;
        match store.commit(vec![commit(id(2), None, dep)]).await {
            Err(StoreError::Backend(e)) => assert!(e.to_string().contains("stopped"), "{e}"),
            other => panic!("a closed store answered {other:?}"),
        }
        drop(store);
        let again = SqliteStore::open(&path).await.unwrap();
        assert_eq!(
            again.instance(id(1)).await.unwrap().map(|r| r.fence),
            Some(1)
        );
        assert!(again.instance(id(2)).await.unwrap().is_none());
    }

    /// Batches joined into one transaction answer each caller with its own outcomes, as
    /// their own transactions in queue order would: a later batch that steps an instance
    /// of an earlier one sees that one's fence, a stale step is a conflict, and a batch
    /// on an unknown deployment fails alone (the joined transaction is dropped and each
    /// batch applied alone), leaving nothing of it behind.
    #[tokio::test]
    async fn a_group_answers_each_batch_as_its_own_transaction_would() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("q.db")).await.unwrap();
        let dep = deploy(&store, "aaaa").await.unwrap();
        let applied = |fence| CommitOutcome::Applied { fence };
        // A connection as the committer opens its own, driven here directly.
        let mut conn = sqlite_commit::open(store.path(), Duration::from_secs(5), 1_000).unwrap();

        let (group, answers) = pending(vec![
            vec![commit(id(1), None, dep), commit(id(2), None, dep)],
            vec![commit(id(1), Some(1), dep), commit(id(3), None, dep)],
            vec![commit(id(1), Some(1), dep)],
        ]);
        sqlite_commit::commit_group(&mut conn, &store.known_deployments, group);
        let mut got = Vec::new();
        for answer in answers {
            got.push(answer.await.unwrap().unwrap());
        }
        assert_eq!(got[0], [applied(1), applied(1)]);
        assert_eq!(got[1], [applied(2), applied(1)]);
        assert!(
            matches!(got[2][..], [CommitOutcome::Conflict { .. }]),
            "{:?}",
            got[2]
        );

        let unknown = DeploymentId(dep.0 + 100);
        let (group, answers) = pending(vec![
            vec![commit(id(4), None, dep)],
            vec![commit(id(5), None, dep), commit(id(6), None, unknown)],
            vec![commit(id(2), Some(1), dep)],
        ]);
        sqlite_commit::commit_group(&mut conn, &store.known_deployments, group);
        let mut answers = answers.into_iter();
        let mut next = || answers.next().unwrap();
        assert_eq!(next().await.unwrap().unwrap(), [applied(1)]);
        match next().await.unwrap() {
            Err(StoreError::UnknownDeployment(d)) => assert_eq!(d, unknown),
            other => panic!("the bad batch answered {other:?}"),
        }
        assert_eq!(next().await.unwrap().unwrap(), [applied(2)]);
        for (n, fence) in [
            (1, Some(2)),
            (2, Some(2)),
            (3, Some(1)),
            (4, Some(1)),
            (5, None),
        ] {
            let found = store.instance(id(n)).await.unwrap().map(|r| r.fence);
            assert_eq!(found, fence, "instance {n}");
        }
    }
}
