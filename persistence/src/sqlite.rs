//! The embedded SQLite store: one database file in WAL mode, the default for `qflow run`
//! and `qflow serve` (SPEC R1).
//!
//! Durability: `synchronous=FULL`, so a commit returns only after its WAL frames are
//! fsynced; nothing acknowledged is lost on power failure (R1a). Throughput beyond the
//! disk's fsync rate comes from group commit: [`Store::commit`] applies a whole batch of
//! instances' commits in one transaction, one fsync. The one write that does not wait
//! for its fsync is a timer lease (see `claim_due_timers`): leases are advisory.
//!
//! Concurrency: exactly one writer connection (SQLite has one writer anyway; a single
//! connection avoids lock hand-offs and `SQLITE_BUSY` between our own writers) and a
//! small read-only pool for reads, which WAL lets run beside the writer. Every write
//! transaction starts with `BEGIN IMMEDIATE`, so another process on the same file waits
//! on the busy timeout instead of failing half-way through an upgrade.
//!
//! Must never: keep a write transaction open across anything but its own statements, or
//! read from the reader pool inside a write (it would not see the transaction's rows).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use qflow_store::memory::effective_instances_limit;
use qflow_store::{
    AttemptRecord, Commit, CommitOutcome, DeploymentId, DeploymentRecord, IncidentRecord,
    InstanceFilter, InstanceId, InstanceRecord, NewIncident, RetireOutcome, Store, StoreError,
    StoreResult, TimerRecord,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};

use crate::common::{
    backend, fence_from_db, fence_to_db, last_arm_per_name, refuse_retired, rounds, status_from_db,
    u32_from_db,
};
use crate::Error;

/// How long a statement waits for another process's lock on the file before failing.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Read-only connections beside the single writer.
pub const READERS_MAX: u32 = 4;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The SQLite-backed durable store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    path: PathBuf,
    /// Deployment ids seen to exist. Deployments are never deleted (retirement is a
    /// flag), so a hit needs no query; a miss is checked inside the write transaction.
    known_deployments: Mutex<HashSet<i64>>,
}

type Tx = sqlx::Transaction<'static, Sqlite>;

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path` and brings its schema up
    /// to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        let path = path.as_ref().to_path_buf();
        let target = path.display().to_string();
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
        let writer = SqlitePoolOptions::new()
            .min_connections(1)
            .max_connections(1)
            // The writer is the store's only path to the file's write lock: never let
            // the pool drop and reopen it behind our back.
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(base.clone().create_if_missing(true))
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
            .connect_with(base.read_only(true))
            .await
            .map_err(connect)?;
        Ok(SqliteStore {
            writer,
            readers,
            path,
            known_deployments: Mutex::new(HashSet::new()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes both pools, waiting for in-flight statements; the file stays consistent
    /// even without this (WAL), it only makes shutdown tidy.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }

    /// The query plan SQLite picks for the timer claim, one line per plan step: the
    /// evidence that polling walks the due index rather than the table (R3).
    pub async fn explain_claim(&self) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {CLAIM_SQL}"))
            .bind("owner")
            .bind(0_i64)
            .bind(0_i64)
            .bind(1_i64)
            .fetch_all(&self.writer)
            .await
            .map_err(backend)?;
        rows.iter()
            .map(|row| row.try_get::<String, _>("detail").map_err(backend))
            .collect()
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

    fn is_known_deployment(&self, id: DeploymentId) -> bool {
        self.known_deployments
            .lock()
            .map(|known| known.contains(&id.0))
            .unwrap_or(false)
    }

    fn remember_deployment(&self, id: DeploymentId) {
        if let Ok(mut known) = self.known_deployments.lock() {
            known.insert(id.0);
        }
    }

    async fn check_deployments(
        &self,
        tx: &mut SqliteConnection,
        batch: &[Commit],
    ) -> StoreResult<()> {
        for commit in batch {
            if self.is_known_deployment(commit.deployment) {
                continue;
            }
            let found = sqlx::query("SELECT 1 FROM deployments WHERE id = ?")
                .bind(commit.deployment.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
            if found.is_none() {
                return Err(StoreError::UnknownDeployment(commit.deployment));
            }
            self.remember_deployment(commit.deployment);
        }
        Ok(())
    }
}

const DEPLOYMENT_COLUMNS: &str = "id, process_id, content_hash, source, deployed_at_ms, retired";
const INSTANCE_COLUMNS: &str =
    "id, deployment, fence, status, failure_code, snapshot, created_at_ms, updated_at_ms";

/// Leases due, unleased (or lease-expired) timers, earliest first. The inner SELECT walks
/// `timers_due` and stops after `limit` matches; the write lock of the surrounding
/// `BEGIN IMMEDIATE` transaction makes the read and the lease one atomic step.
const CLAIM_SQL: &str = "UPDATE timers SET lease_owner = ?1, leased_until_ms = ?2 \
     WHERE rowid IN (SELECT rowid FROM timers \
         WHERE due_at_ms <= ?3 AND (leased_until_ms IS NULL OR leased_until_ms < ?3) \
         ORDER BY due_at_ms LIMIT ?4) \
     RETURNING instance, name, due_at_ms, incarnation";

fn id_text(id: InstanceId) -> String {
    id.hyphenated().to_string()
}

fn parse_id(text: &str) -> StoreResult<InstanceId> {
    InstanceId::parse_str(text)
        .map_err(|_| StoreError::Corrupt(format!("stored instance id {text:?} is not a UUID")))
}

fn deployment_from_row(row: &SqliteRow) -> StoreResult<DeploymentRecord> {
    Ok(DeploymentRecord {
        id: DeploymentId(row.try_get("id").map_err(backend)?),
        process_id: row.try_get("process_id").map_err(backend)?,
        content_hash: row.try_get("content_hash").map_err(backend)?,
        source: row.try_get("source").map_err(backend)?,
        deployed_at_ms: row.try_get("deployed_at_ms").map_err(backend)?,
        retired: row.try_get("retired").map_err(backend)?,
    })
}

fn instance_from_row(row: &SqliteRow) -> StoreResult<InstanceRecord> {
    let id: String = row.try_get("id").map_err(backend)?;
    let status: String = row.try_get("status").map_err(backend)?;
    Ok(InstanceRecord {
        id: parse_id(&id)?,
        deployment: DeploymentId(row.try_get("deployment").map_err(backend)?),
        fence: fence_from_db(row.try_get("fence").map_err(backend)?)?,
        status: status_from_db(&status)?,
        failure_code: row.try_get("failure_code").map_err(backend)?,
        snapshot: row.try_get("snapshot").map_err(backend)?,
        created_at_ms: row.try_get("created_at_ms").map_err(backend)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(backend)?,
    })
}

fn timer_from_row(row: &SqliteRow) -> StoreResult<TimerRecord> {
    let instance: String = row.try_get("instance").map_err(backend)?;
    Ok(TimerRecord {
        instance: parse_id(&instance)?,
        name: row.try_get("name").map_err(backend)?,
        due_at_ms: row.try_get("due_at_ms").map_err(backend)?,
        incarnation: u32_from_db("incarnation", row.try_get("incarnation").map_err(backend)?)?,
    })
}

fn incident_from_row(row: &SqliteRow) -> StoreResult<IncidentRecord> {
    let instance: String = row.try_get("instance").map_err(backend)?;
    Ok(IncidentRecord {
        id: row.try_get("id").map_err(backend)?,
        instance: parse_id(&instance)?,
        node: row.try_get("node").map_err(backend)?,
        code: row.try_get("code").map_err(backend)?,
        message: row.try_get("message").map_err(backend)?,
        opened_at_ms: row.try_get("opened_at_ms").map_err(backend)?,
        resolved_at_ms: row.try_get("resolved_at_ms").map_err(backend)?,
    })
}

fn attempt_from_row(row: &SqliteRow) -> StoreResult<AttemptRecord> {
    let instance: String = row.try_get("instance").map_err(backend)?;
    Ok(AttemptRecord {
        instance: parse_id(&instance)?,
        node: row.try_get("node").map_err(backend)?,
        attempt: u32_from_db("attempt", row.try_get("attempt").map_err(backend)?)?,
        started_at_ms: row.try_get("started_at_ms").map_err(backend)?,
        finished_at_ms: row.try_get("finished_at_ms").map_err(backend)?,
        outcome: row.try_get("outcome").map_err(backend)?,
        code: row.try_get("code").map_err(backend)?,
        message: row.try_get("message").map_err(backend)?,
    })
}

/// Indexes of the batch's creations whose deployment is retired.
async fn retired_creations(
    tx: &mut SqliteConnection,
    batch: &[Commit],
) -> StoreResult<HashSet<usize>> {
    let deployments: HashSet<i64> = batch
        .iter()
        .filter(|c| c.expected_fence.is_none())
        .map(|c| c.deployment.0)
        .collect();
    let mut retired = HashSet::new();
    for id in deployments {
        let is_retired: Option<bool> =
            sqlx::query_scalar("SELECT retired FROM deployments WHERE id = ?")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
        if is_retired == Some(true) {
            retired.insert(id);
        }
    }
    Ok(batch
        .iter()
        .enumerate()
        .filter(|(_, c)| c.expected_fence.is_none() && retired.contains(&c.deployment.0))
        .map(|(index, _)| index)
        .collect())
}

/// Rows per multi-row statement. At most 7 parameters a row keeps a statement far below
/// SQLite's 32,766-parameter limit, and a batch of up to this many commits needs one
/// statement per kind of row instead of one per row.
const ROWS_PER_STATEMENT: usize = 128;

/// Applies one round (distinct instances) of a batch: the compare-and-swap of every
/// commit, then the effect rows of the winners. Fills `outcomes` at the round's indexes.
async fn apply_round(
    tx: &mut SqliteConnection,
    batch: &[Commit],
    ids: &[String],
    round: &[usize],
    outcomes: &mut [CommitOutcome],
) -> StoreResult<()> {
    let (creates, updates): (Vec<usize>, Vec<usize>) = round
        .iter()
        .partition(|&&index| batch[index].expected_fence.is_none());
    let mut won: HashSet<String> = HashSet::with_capacity(round.len());
    for chunk in creates.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot, \
             created_at_ms, updated_at_ms) ",
        );
        query.push_values(chunk, |mut row, &index| {
            let commit = &batch[index];
            row.push_bind(ids[index].as_str())
                .push_bind(commit.deployment.0)
                .push_bind(1_i64)
                .push_bind(commit.status.as_str())
                .push_bind(commit.failure_code.as_deref())
                .push_bind(commit.snapshot.as_slice())
                .push_bind(commit.now_ms)
                .push_bind(commit.now_ms);
        });
        query.push(" ON CONFLICT (id) DO NOTHING RETURNING id");
        let created: Vec<String> = query
            .build_query_scalar()
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        won.extend(created);
    }
    for chunk in updates.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Sqlite> = QueryBuilder::new(
            "WITH v (v_id, v_fence, v_deployment, v_status, v_failure_code, v_snapshot, \
             v_now_ms) AS (",
        );
        let mut fences = Vec::with_capacity(chunk.len());
        for &index in chunk {
            let expected = batch[index].expected_fence.unwrap_or(0);
            fences.push(fence_to_db(expected)?);
        }
        query.push_values(chunk.iter().zip(&fences), |mut row, (&index, &fence)| {
            let commit = &batch[index];
            row.push_bind(ids[index].as_str())
                .push_bind(fence)
                .push_bind(commit.deployment.0)
                .push_bind(commit.status.as_str())
                .push_bind(commit.failure_code.as_deref())
                .push_bind(commit.snapshot.as_slice())
                .push_bind(commit.now_ms);
        });
        query.push(
            ") UPDATE instances SET fence = fence + 1, deployment = v_deployment, \
             status = v_status, failure_code = v_failure_code, snapshot = v_snapshot, \
             updated_at_ms = v_now_ms FROM v WHERE id = v_id AND fence = v_fence \
             RETURNING id",
        );
        let updated: Vec<String> = query
            .build_query_scalar()
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        won.extend(updated);
    }

    let mut winners: Vec<usize> = Vec::with_capacity(won.len());
    for &index in round {
        if won.contains(&ids[index]) {
            let fence = batch[index].expected_fence.map_or(1, |f| f + 1);
            outcomes[index] = CommitOutcome::Applied { fence };
            winners.push(index);
        } else {
            let current: Option<i64> =
                sqlx::query_scalar("SELECT fence FROM instances WHERE id = ?")
                    .bind(ids[index].as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(backend)?;
            outcomes[index] = CommitOutcome::Conflict {
                current_fence: current.map(fence_from_db).transpose()?,
            };
        }
    }
    resolve_effects(tx, batch, ids, &winners).await?;
    insert_effects(tx, batch, ids, &winners).await
}

/// Deletes and updates of the winners' effects, one indexed statement per row. They run
/// before any insert, so a step that replaces a timer or an incident keeps the new one.
async fn resolve_effects(
    tx: &mut SqliteConnection,
    batch: &[Commit],
    ids: &[String],
    winners: &[usize],
) -> StoreResult<()> {
    for &index in winners {
        let commit = &batch[index];
        let id = ids[index].as_str();
        for timer in &commit.resolve_timers {
            sqlx::query("DELETE FROM timers WHERE instance = ? AND name = ? AND incarnation = ?")
                .bind(id)
                .bind(&timer.name)
                .bind(i64::from(timer.incarnation))
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        for node in &commit.resolve_incidents_on {
            sqlx::query(
                "UPDATE incidents SET resolved_at_ms = ? \
                 WHERE instance = ? AND node = ? AND resolved_at_ms IS NULL",
            )
            .bind(commit.now_ms)
            .bind(id)
            .bind(node)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
    }
    Ok(())
}

/// Timer upserts, opened incidents and attempt rows of the winners, as multi-row
/// statements.
async fn insert_effects(
    tx: &mut SqliteConnection,
    batch: &[Commit],
    ids: &[String],
    winners: &[usize],
) -> StoreResult<()> {
    let arms: Vec<(&str, &TimerRecord)> = winners
        .iter()
        .flat_map(|&index| {
            last_arm_per_name(&batch[index])
                .into_iter()
                .map(move |timer| (ids[index].as_str(), timer))
        })
        .collect();
    for chunk in arms.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Sqlite> =
            QueryBuilder::new("INSERT INTO timers (instance, name, due_at_ms, incarnation) ");
        query.push_values(chunk, |mut row, (id, timer)| {
            row.push_bind(*id)
                .push_bind(timer.name.as_str())
                .push_bind(timer.due_at_ms)
                .push_bind(i64::from(timer.incarnation));
        });
        query.push(
            " ON CONFLICT (instance, name) DO UPDATE SET due_at_ms = excluded.due_at_ms, \
             incarnation = excluded.incarnation, lease_owner = NULL, leased_until_ms = NULL",
        );
        query.build().execute(&mut *tx).await.map_err(backend)?;
    }

    let opens: Vec<(&str, i64, &NewIncident)> = winners
        .iter()
        .flat_map(|&index| {
            let commit = &batch[index];
            commit
                .open_incidents
                .iter()
                .map(move |incident| (ids[index].as_str(), commit.now_ms, incident))
        })
        .collect();
    for chunk in opens.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO incidents (instance, node, code, message, opened_at_ms) ",
        );
        query.push_values(chunk, |mut row, (id, now_ms, incident)| {
            row.push_bind(*id)
                .push_bind(incident.node.as_str())
                .push_bind(incident.code.as_str())
                .push_bind(incident.message.as_str())
                .push_bind(*now_ms);
        });
        query.build().execute(&mut *tx).await.map_err(backend)?;
    }

    let attempts: Vec<(&str, &AttemptRecord)> = winners
        .iter()
        .flat_map(|&index| {
            batch[index]
                .attempts
                .iter()
                .map(move |attempt| (ids[index].as_str(), attempt))
        })
        .collect();
    for chunk in attempts.chunks(ROWS_PER_STATEMENT) {
        let mut query: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO attempts (instance, node, attempt, started_at_ms, finished_at_ms, \
             outcome, code, message) ",
        );
        query.push_values(chunk, |mut row, (id, attempt)| {
            row.push_bind(*id)
                .push_bind(attempt.node.as_str())
                .push_bind(i64::from(attempt.attempt))
                .push_bind(attempt.started_at_ms)
                .push_bind(attempt.finished_at_ms)
                .push_bind(attempt.outcome.as_str())
                .push_bind(attempt.code.as_deref())
                .push_bind(attempt.message.as_deref());
        });
        query.build().execute(&mut *tx).await.map_err(backend)?;
    }
    Ok(())
}

/// The lease update of [`Store::claim_due_timers`] in its own `BEGIN IMMEDIATE`
/// transaction on the writer connection.
async fn claim_rows(
    conn: &mut SqliteConnection,
    now_ms: i64,
    lease_ms: i64,
    owner: &str,
    limit: u32,
) -> StoreResult<Vec<SqliteRow>> {
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE")
        .await
        .map_err(backend)?;
    let rows = sqlx::query(CLAIM_SQL)
        .bind(owner)
        .bind(now_ms.saturating_add(lease_ms))
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
    tx.commit().await.map_err(backend)?;
    Ok(rows)
}

#[async_trait]
impl Store for SqliteStore {
    fn is_durable(&self) -> bool {
        true
    }

    async fn deploy(
        &self,
        process_id: &str,
        content_hash: &str,
        source: &str,
        now_ms: i64,
    ) -> StoreResult<DeploymentRecord> {
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query(&format!(
            "INSERT INTO deployments (process_id, content_hash, source, deployed_at_ms) \
             VALUES (?, ?, ?, ?) ON CONFLICT (content_hash) DO NOTHING \
             RETURNING {DEPLOYMENT_COLUMNS}"
        ))
        .bind(process_id)
        .bind(content_hash)
        .bind(source)
        .bind(now_ms)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        let row = match inserted {
            Some(row) => row,
            None => sqlx::query(&format!(
                "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE content_hash = ?"
            ))
            .bind(content_hash)
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?,
        };
        let record = deployment_from_row(&row)?;
        tx.commit().await.map_err(backend)?;
        self.remember_deployment(record.id);
        Ok(record)
    }

    async fn deployment(&self, id: DeploymentId) -> StoreResult<Option<DeploymentRecord>> {
        sqlx::query(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = ?"
        ))
        .bind(id.0)
        .fetch_optional(&self.readers)
        .await
        .map_err(backend)?
        .as_ref()
        .map(deployment_from_row)
        .transpose()
    }

    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>> {
        sqlx::query(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments ORDER BY id"
        ))
        .fetch_all(&self.readers)
        .await
        .map_err(backend)?
        .iter()
        .map(deployment_from_row)
        .collect()
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
        tx.commit().await.map_err(backend)?;
        Ok(RetireOutcome::Retired)
    }

    async fn commit(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        self.check_deployments(&mut tx, &batch).await?;
        let ids: Vec<String> = batch.iter().map(|c| id_text(c.instance)).collect();
        let mut outcomes = vec![
            CommitOutcome::Conflict {
                current_fence: None
            };
            batch.len()
        ];
        // The single writer (BEGIN IMMEDIATE) makes this read atomic with `retire`.
        let retired = retired_creations(&mut tx, &batch).await?;
        for round in rounds(&batch) {
            let round = refuse_retired(round, &retired, &mut outcomes);
            apply_round(&mut tx, &batch, &ids, &round, &mut outcomes).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(outcomes)
    }

    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>> {
        sqlx::query(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ?"
        ))
        .bind(id_text(id))
        .fetch_optional(&self.readers)
        .await
        .map_err(backend)?
        .as_ref()
        .map(instance_from_row)
        .transpose()
    }

    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        let mut query: QueryBuilder<Sqlite> = QueryBuilder::new(format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE 1 = 1"
        ));
        if let Some(deployment) = filter.deployment {
            query.push(" AND deployment = ").push_bind(deployment.0);
        }
        if let Some(status) = filter.status {
            query.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(code) = &filter.failure_code {
            query.push(" AND failure_code = ").push_bind(code.clone());
        }
        query
            .push(" ORDER BY created_at_ms, id LIMIT ")
            .push_bind(i64::from(effective_instances_limit(filter.limit)));
        query
            .build()
            .fetch_all(&self.readers)
            .await
            .map_err(backend)?
            .iter()
            .map(instance_from_row)
            .collect()
    }

    async fn claim_due_timers(
        &self,
        now_ms: i64,
        lease_ms: i64,
        owner: &str,
        limit: u32,
    ) -> StoreResult<Vec<TimerRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // A lease is advisory: losing one in a crash only makes its timer claimable again,
        // and the fence still stops a double step. So the claim commits without waiting
        // for an fsync (WAL `synchronous=NORMAL` for this one transaction); the next FULL
        // commit flushes it along with its own frames. The writer goes back to FULL
        // before anyone else can use it, or is closed.
        let mut conn = self.writer.acquire().await.map_err(backend)?;
        sqlx::query("PRAGMA synchronous = NORMAL")
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
        let claimed = claim_rows(&mut conn, now_ms, lease_ms, owner, limit).await;
        if let Err(e) = sqlx::query("PRAGMA synchronous = FULL")
            .execute(&mut *conn)
            .await
        {
            // Never return a connection that might skip fsyncs to the pool.
            let _ = sqlx::Connection::close(conn.detach()).await;
            return Err(backend(e));
        }
        let rows = claimed?;
        let mut claimed = rows
            .iter()
            .map(timer_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        // RETURNING gives no order guarantee; the contract says earliest due first.
        claimed.sort_by(|a, b| {
            (a.due_at_ms, a.instance, &a.name).cmp(&(b.due_at_ms, b.instance, &b.name))
        });
        Ok(claimed)
    }

    async fn next_timer_due(&self) -> StoreResult<Option<i64>> {
        sqlx::query_scalar("SELECT min(due_at_ms) FROM timers")
            .fetch_one(&self.readers)
            .await
            .map_err(backend)
    }

    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>> {
        sqlx::query(
            "SELECT instance, name, due_at_ms, incarnation FROM timers \
             WHERE instance = ? ORDER BY name",
        )
        .bind(id_text(instance))
        .fetch_all(&self.readers)
        .await
        .map_err(backend)?
        .iter()
        .map(timer_from_row)
        .collect()
    }

    async fn incidents(&self, instance: Option<InstanceId>) -> StoreResult<Vec<IncidentRecord>> {
        let columns = "id, instance, node, code, message, opened_at_ms, resolved_at_ms";
        let rows = match instance {
            Some(id) => {
                sqlx::query(&format!(
                    "SELECT {columns} FROM incidents WHERE instance = ? ORDER BY id"
                ))
                .bind(id_text(id))
                .fetch_all(&self.readers)
                .await
            }
            None => {
                sqlx::query(&format!("SELECT {columns} FROM incidents ORDER BY id"))
                    .fetch_all(&self.readers)
                    .await
            }
        }
        .map_err(backend)?;
        rows.iter().map(incident_from_row).collect()
    }

    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>> {
        sqlx::query(
            "SELECT instance, node, attempt, started_at_ms, finished_at_ms, outcome, code, \
             message FROM attempts WHERE instance = ? ORDER BY id",
        )
        .bind(id_text(instance))
        .fetch_all(&self.readers)
        .await
        .map_err(backend)?
        .iter()
        .map(attempt_from_row)
        .collect()
    }
}
