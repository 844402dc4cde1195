//! The PostgreSQL store: several replicas sharing one database, the scale-out path
//! (SPEC R1, R3, R4).
//!
//! Durability: every connection runs with `synchronous_commit=on` whatever the server's
//! default, so a commit returns only once its WAL is flushed (R1a). The one exception is
//! a lease (`claim_due_timers`, `claim_due_outbox`), which is advisory. A batch of commits is
//! one transaction (group commit), written with set-based statements over `UNNEST`ed
//! arrays: a batch of 128 instances costs the same handful of round trips as a batch
//! of one.
//!
//! Replicas: a commit first locks the instance rows of its batch in id order (`FOR
//! UPDATE`), so two replicas committing overlapping batches queue instead of
//! deadlocking, and the fence check happens under that lock. The timer and outbox claims
//! use `FOR UPDATE SKIP LOCKED`, so pollers and dispatchers on several replicas share due
//! rows without waiting on or double-claiming each other's. Every transaction that locks
//! both an instance row and outbox rows locks the instance first (see
//! `record_delivery`), so a commit withdrawing rows and a dispatcher recording a try on
//! one of them queue instead of deadlocking.
//!
//! Must never: build SQL from caller strings (the only interpolated name is the schema,
//! checked to be a plain identifier), or leave the fence check outside the row lock.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::str::FromStr;

use async_trait::async_trait;
use qflow_store::history;
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
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, PgConnection, Postgres, Row};

use crate::common::HISTORY_SPILL_BYTES;
use crate::common::{
    applied, attempt_from_row, audit_fences, audit_from_row, backend, batch_deployments,
    check_key_names, claimed_outbox, claimed_schedules, claimed_timers, contested_key,
    deliveries_from_db, deployment_from_row, ended_at_update, fence_from_db, fence_to_db,
    first_emit_per_key, incident_from_row, instance_from_row, instances_query, journal_from_row,
    journal_limit, key_name_from_row, last_arm_per_name, last_offer_per_node, map_all,
    map_optional, merge_offered, outbox_from_row, plan, pull_from_row, purge_choice, purge_limit,
    refusal, schedule_from_row, seq_to_db, status_count_from_row, subscription_from_row,
    timer_from_row, Field, KnownDeployments, StatusArms, StoreRow, ATTEMPT_COLUMNS, AUDIT_COLUMNS,
    DEPLOYMENT_COLUMNS, INCIDENT_COLUMNS, INSTANCE_COLUMNS, INSTANCE_COUNTS_SQL, JOURNAL_COLUMNS,
    OUTBOX_COLUMNS, PULL_COLUMNS, SCHEDULE_COLUMNS, SUBSCRIPTION_COLUMNS, TIMER_COLUMNS,
};
use crate::common::{buffered_from_rows, refused_takes, BUFFERED_COLUMNS};
use crate::common::{
    last_assign_per_node, last_task_offer_per_node, names_to_db, task_walks, user_task_from_row,
    user_tasks_query, USER_TASK_COLUMNS,
};
use crate::Error;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connection settings beyond the URL.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// Schema holding qflow's tables, created if missing. Default: `None`, the server's
    /// search path (normally `public`). Lets several qflow installations (or test runs)
    /// share one database.
    pub schema: Option<String>,
    /// Pool size per replica. Default: 8.
    pub max_connections: u32,
}

impl Default for PgConfig {
    fn default() -> PgConfig {
        PgConfig {
            schema: None,
            max_connections: 8,
        }
    }
}

/// The PostgreSQL-backed durable store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
    known_deployments: KnownDeployments,
}

type Tx = sqlx::Transaction<'static, Postgres>;

/// Accepts plain lowercase identifiers only, so the name can be interpolated unquoted.
fn check_schema_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "schema {name:?} must be 1-63 characters of a-z, 0-9 and _, not starting with a digit"
        )))
    }
}

/// The statement that applies a round's steps to their instance rows: compare-and-swap on
/// the fence, one row of `UNNEST` per step. Its plan, under [`commit_planning`], is
/// `PgStore::explain_commit_update`'s.
fn update_instances_sql() -> String {
    format!(
        "UPDATE instances AS i SET fence = i.fence + 1, deployment = v.deployment, \
         status = v.status, failure_code = v.failure_code, snapshot = v.snapshot, \
         updated_at_ms = v.now_ms, ended_at_ms = {}, \
         journal_last = COALESCE(v.journal, i.journal_last), \
         history = CASE WHEN v.history IS NULL THEN i.history \
             ELSE COALESCE(i.history, ''::bytea) || v.history END, \
         history_n = i.history_n + v.history_n \
         FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], \
                     $6::bytea[], $7::bigint[], $8::bigint[], $9::bytea[], $10::integer[]) \
         AS v(id, fence, deployment, status, failure_code, snapshot, now_ms, journal, \
              history, history_n) \
         WHERE i.id = v.id AND i.fence = v.fence \
         AND (i.deployment = v.deployment OR i.business_key IS NULL OR NOT EXISTS ( \
             SELECT 1 FROM instances AS o \
             WHERE o.deployment = v.deployment AND o.business_key = i.business_key)) \
         RETURNING i.id, octet_length(i.history)",
        ended_at_update("v.status", "v.now_ms", "i.ended_at_ms")
    )
}

/// How a commit's statements are planned, set at the start of its transaction: they
/// reach their rows through their keys, by nested loops over the indexes, never by a hash
/// or merge join over a scan of a whole table (docs/performance.md, "PostgreSQL: a
/// commit's joins by key"). Left to costs, PostgreSQL 15 joined the `UNNEST` of a batch to
/// `instances` by a sequential scan once the table held some thousands of rows (its
/// default `random_page_cost` prices each index probe as a disk read), and a prepared
/// statement kept that plan as the table grew: every commit then read every instance.
async fn commit_planning(tx: &mut Tx) -> StoreResult<()> {
    sqlx::query(
        "SELECT set_config('enable_hashjoin', 'off', true), \
         set_config('enable_mergejoin', 'off', true)",
    )
    .execute(&mut **tx)
    .await
    .map_err(backend)?;
    Ok(())
}

impl PgStore {
    /// Connects to `url` (e.g. `postgres://postgres@127.0.0.1:5432/test`) and brings the
    /// schema up to date. Migrations take an advisory lock, so replicas may start together.
    pub async fn connect(url: &str) -> Result<PgStore, Error> {
        PgStore::connect_with(url, PgConfig::default()).await
    }

    pub async fn connect_with(url: &str, config: PgConfig) -> Result<PgStore, Error> {
        if config.max_connections == 0 {
            return Err(Error::Config(
                "max_connections must be at least 1".to_string(),
            ));
        }
        if let Some(schema) = &config.schema {
            check_schema_name(schema)?;
        }
        let target = redact(url);
        let connect = |source| Error::Connect {
            target: target.clone(),
            source,
        };
        let mut options = PgConnectOptions::from_str(url).map_err(connect)?;
        if let Some(schema) = &config.schema {
            let mut admin = PgConnection::connect_with(&options)
                .await
                .map_err(connect)?;
            let created = sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .execute(&mut admin)
                .await;
            // Two replicas starting together can both pass the IF NOT EXISTS check; the
            // loser's duplicate error means the schema is there, which is all we need.
            if let Err(e) = created {
                if !is_duplicate_object(&e) {
                    return Err(connect(e));
                }
            }
            admin.close().await.map_err(connect)?;
            options = options.options([("search_path", schema.as_str())]);
        }
        options = options.options([("synchronous_commit", "on")]);
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .connect_with(options)
            .await
            .map_err(connect)?;
        MIGRATOR.run(&pool).await.map_err(|source| Error::Migrate {
            target: target.clone(),
            source,
        })?;
        Ok(PgStore {
            pool,
            known_deployments: KnownDeployments::default(),
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The plan PostgreSQL picks for the store's listing statement for `filter`, with its
    /// values bound (`EXPLAIN`, not executed): the evidence that a page reads an index in
    /// the listing's order.
    pub async fn explain_instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<String>> {
        let mut q = instances_query::<Postgres>(filter, "UUID", StatusArms::One, "EXPLAIN ");
        let rows = q.build().fetch_all(&self.pool).await.map_err(backend)?;
        rows.iter().map(|row| row.field("QUERY PLAN")).collect()
    }

    /// The plan PostgreSQL picks for a commit's update of the instance rows `ids` (each
    /// stepped from fence 1), as a commit plans it ([`commit_planning`]) and with the
    /// batch's values bound (`EXPLAIN`, not executed): the evidence that a commit reaches
    /// its rows through the primary key, whatever the table holds.
    pub async fn explain_commit_update(&self, ids: &[InstanceId]) -> StoreResult<Vec<String>> {
        let n = ids.len();
        let mut tx: Tx = self.pool.begin().await.map_err(backend)?;
        commit_planning(&mut tx).await?;
        let rows = sqlx::query(&format!("EXPLAIN {}", update_instances_sql()))
            .bind(ids)
            .bind(vec![1_i64; n])
            .bind(vec![1_i64; n])
            .bind(vec!["running"; n])
            .bind(vec![None::<String>; n])
            .bind(vec![vec![0_u8]; n])
            .bind(vec![0_i64; n])
            .bind(vec![None::<i64>; n])
            .bind(vec![None::<Vec<u8>>; n])
            .bind(vec![0_i32; n])
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        tx.rollback().await.map_err(backend)?;
        rows.iter().map(|row| row.field("QUERY PLAN")).collect()
    }

    /// The generic plan PostgreSQL uses for the timer claim once the prepared statement
    /// has run a few times (`EXPLAIN EXECUTE` under `force_generic_plan`, not executed):
    /// the evidence that polling walks the due index rather than the table (R3).
    pub async fn explain_claim(&self, now_ms: i64, limit: u32) -> StoreResult<Vec<String>> {
        self.explain_generic(CLAIM_SQL, now_ms, limit).await
    }

    /// The same evidence for the outbox claim: a dispatcher's claim walks `outbox_due`,
    /// the pending rows' due index.
    pub async fn explain_outbox_claim(&self, now_ms: i64, limit: u32) -> StoreResult<Vec<String>> {
        self.explain_generic(OUTBOX_CLAIM_SQL, now_ms, limit).await
    }

    /// The generic plan of a lease update taking (owner, lease end, now, limit).
    async fn explain_generic(
        &self,
        sql: &str,
        now_ms: i64,
        limit: u32,
    ) -> StoreResult<Vec<String>> {
        let mut tx: Tx = self.pool.begin().await.map_err(backend)?;
        // EXPLAIN of a statement with bound parameters plans it with those values (a
        // custom plan); only a named PREPARE shows the generic plan a long-running
        // poller actually ends up with.
        sqlx::query("SET LOCAL plan_cache_mode = force_generic_plan")
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        sqlx::query(&format!(
            "PREPARE qflow_claim_plan (text, bigint, bigint, bigint) AS {sql}"
        ))
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        let rows = sqlx::query(&format!(
            "EXPLAIN EXECUTE qflow_claim_plan ('explain', {now_ms}, {now_ms}, {limit})"
        ))
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
        sqlx::query("DEALLOCATE qflow_claim_plan")
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        tx.rollback().await.map_err(backend)?;
        rows.iter()
            .map(|row| row.try_get::<String, _>(0).map_err(backend))
            .collect()
    }

    /// Runs a lease update (`CLAIM_SQL` or `OUTBOX_CLAIM_SQL`: owner, lease end, now,
    /// limit) in its own transaction, committed without waiting for the WAL flush. A
    /// lease is advisory: losing one in a crash only makes its timer or outbox row
    /// claimable again, and the fence (a timer) or the idempotency key (a delivery)
    /// still stops a double effect. The lease is visible to other replicas as soon as
    /// this returns, and the next synchronous commit flushes it.
    async fn relaxed_claim(
        &self,
        sql: &str,
        claim: TimerClaim<'_>,
        limit: u32,
    ) -> StoreResult<Vec<PgRow>> {
        let mut tx: Tx = self.pool.begin().await.map_err(backend)?;
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        let rows = sqlx::query(sql)
            .bind(claim.owner)
            .bind(claim.now_ms.saturating_add(claim.lease_ms))
            .bind(claim.now_ms)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(rows)
    }

    async fn check_deployments(&self, tx: &mut PgConnection, batch: &[Commit]) -> StoreResult<()> {
        let unknown: Vec<i64> = batch
            .iter()
            .map(|c| c.deployment.0)
            .filter(|id| !self.known_deployments.contains(DeploymentId(*id)))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let found: Vec<i64> = sqlx::query_scalar("SELECT id FROM deployments WHERE id = ANY($1)")
            .bind(&unknown)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        for id in &found {
            self.known_deployments.insert(DeploymentId(*id));
        }
        match unknown.iter().find(|id| !found.contains(id)) {
            Some(missing) => Err(StoreError::UnknownDeployment(DeploymentId(*missing))),
            None => Ok(()),
        }
    }
}

/// The retired ones among the deployments the batch creates instances on or moves them
/// onto (`Commit::moves`). The deployment
/// rows are locked `FOR KEY SHARE`, which `retire`'s `FOR UPDATE` waits for (and which
/// waits for it): a retirement and a creation on one deployment are serialised, so either
/// the retirement counts the new instance and is refused, or the creation sees `retired`.
async fn retired_deployments(tx: &mut PgConnection, batch: &[Commit]) -> StoreResult<Vec<i64>> {
    let deployments = batch_deployments(batch);
    if deployments.is_empty() {
        return Ok(Vec::new());
    }
    // Lock first, then read in a new statement: under READ COMMITTED the second
    // statement's snapshot is taken after any retirement we waited for has committed.
    sqlx::query("SELECT 1 FROM deployments WHERE id = ANY($1) ORDER BY id FOR KEY SHARE")
        .bind(&deployments)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    sqlx::query_scalar("SELECT id FROM deployments WHERE id = ANY($1) AND retired")
        .bind(&deployments)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)
}

/// `unique_violation` or `duplicate_schema`: a concurrent creator got there first.
fn is_duplicate_object(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("23505" | "42P06")),
        _ => false,
    }
}

/// Hides a password in a connection URL before it goes into an error message.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Leases due, unleased (or lease-expired) timers, earliest first. The inner SELECT walks
/// `timers_due` and stops after `limit` rows; `SKIP LOCKED` passes over rows another
/// replica is claiming right now, and the lease predicate is re-checked on the locked
/// row version, so a row just leased elsewhere is not taken again.
///
/// The outer UPDATE finds the locked rows by `ctid` (a TID scan) rather than by
/// `(instance, name) IN (...)`: with the latter, the generic plan a prepared statement
/// settles on after five runs hash-joins against a sequential scan of every parked timer
/// (measured: 30 ms at 100k parked rows instead of 0.4 ms). A row's ctid cannot change
/// while we hold its lock; if it was replaced after our snapshot, the TID scan skips it
/// and it is simply not claimed this time.
const CLAIM_SQL: &str = "UPDATE timers SET lease_owner = $1, leased_until_ms = $2 \
     WHERE ctid = ANY(ARRAY(SELECT ctid FROM timers \
         WHERE due_at_ms <= $3 AND (leased_until_ms IS NULL OR leased_until_ms < $3) \
         ORDER BY due_at_ms LIMIT $4 FOR UPDATE SKIP LOCKED)) \
     RETURNING instance, name, due_at_ms, incarnation";

/// Leases due pending outbox rows whose lease is free or expired, earliest due first
/// (then by key in byte order, the `"C"` collation `outbox_due` is built with), exactly
/// as [`CLAIM_SQL`] does timers and for the same reasons (`SKIP LOCKED`, the lease
/// re-checked on the locked row, the outer update by `ctid`). The literal
/// `state = 'pending'` matches the partial index's predicate in the generic plan.
const OUTBOX_CLAIM_SQL: &str = "UPDATE outbox SET lease_owner = $1, lease_until_ms = $2 \
     WHERE ctid = ANY(ARRAY(SELECT ctid FROM outbox \
         WHERE state = 'pending' AND due_at_ms <= $3 \
         AND (lease_until_ms IS NULL OR lease_until_ms < $3) \
         ORDER BY due_at_ms, key COLLATE \"C\" LIMIT $4 FOR UPDATE SKIP LOCKED)) \
     RETURNING *";

/// One delivery try, recorded only on a pending row leased to the caller: counts it,
/// drops the lease, and sets the state, the next due instant (kept when `$2` is NULL)
/// and the last error (kept when `$3` is NULL).
const RECORD_DELIVERY_SQL: &str = "UPDATE outbox SET state = $1, \
     due_at_ms = COALESCE($2::bigint, due_at_ms), last_error = COALESCE($3::text, last_error), \
     deliveries = deliveries + 1, lease_owner = NULL, lease_until_ms = NULL \
     WHERE key = $4 AND state = 'pending' AND lease_owner = $5 \
     RETURNING instance, node, deliveries";

/// One purge batch as one statement (one round trip, one short transaction). `doomed`
/// chooses the instances (`common::purge_choice`: the `instances_ended` or
/// `instances_deployment_ended` index, oldest end first) and locks them `FOR UPDATE SKIP
/// LOCKED`: a row a lane is committing right now (it holds the row lock from its own
/// `FOR UPDATE`), or another replica's purge is deleting, is passed over rather than
/// waited for, so replicas purge at once and nobody blocks a lane. A lane that comes to
/// a row after we locked it waits for this statement only, then finds no row and treats
/// its commit as a lost compare-and-swap. `MATERIALIZED` makes the choice once for all
/// the deletes. The children go in sibling CTEs of the same statement; the foreign keys
/// (`NO ACTION`) are checked at the statement's end, when they are gone too. Journal rows
/// are found through each instance's chain (`journal_chain`, read from the instance rows
/// as the statement's snapshot has them, before `instances_gone`).
fn purge_sql(by_deployment: bool) -> String {
    let choice = purge_choice("status", "$1", by_deployment.then_some("$3"), "$2");
    format!(
        "WITH RECURSIVE doomed AS MATERIALIZED ({choice} FOR UPDATE SKIP LOCKED), \
         attempts_gone AS (DELETE FROM attempts WHERE instance IN (SELECT id FROM doomed) \
             RETURNING 1), \
         journal_chain(id) AS ( \
             SELECT journal_last FROM instances \
                 WHERE id IN (SELECT id FROM doomed) AND journal_last IS NOT NULL \
             UNION ALL \
             SELECT j.prev FROM journal AS j JOIN journal_chain AS c ON j.id = c.id \
                 WHERE j.prev IS NOT NULL AND j.prev < j.id), \
         journal_gone AS (DELETE FROM journal WHERE id IN (SELECT id FROM journal_chain) \
             RETURNING 1), \
         incidents_gone AS (DELETE FROM incidents WHERE instance IN (SELECT id FROM doomed) \
             RETURNING 1), \
         audit_gone AS (DELETE FROM audit WHERE instance IN (SELECT id FROM doomed) \
             RETURNING 1), \
         timers_gone AS (DELETE FROM timers WHERE instance IN (SELECT id FROM doomed) \
             RETURNING 1), \
         pulls_gone AS (DELETE FROM pull_tasks WHERE instance IN (SELECT id FROM doomed) \
             RETURNING 1), \
         subscriptions_gone AS (DELETE FROM subscriptions \
             WHERE instance IN (SELECT id FROM doomed) RETURNING 1), \
         outbox_gone AS (DELETE FROM outbox WHERE instance IN (SELECT id FROM doomed) \
             RETURNING 1), \
         candidates_gone AS (DELETE FROM user_task_candidates \
             WHERE instance IN (SELECT id FROM doomed) RETURNING 1), \
         user_tasks_gone AS (DELETE FROM user_tasks \
             WHERE instance IN (SELECT id FROM doomed) RETURNING 1), \
         keys_gone AS (DELETE FROM camunda_keys WHERE instance IN (SELECT id FROM doomed) \
             RETURNING 1), \
         instances_gone AS (DELETE FROM instances WHERE id IN (SELECT id FROM doomed) \
             RETURNING 1) \
         SELECT (SELECT count(*) FROM instances_gone) AS instances, \
                (SELECT count(*) FROM attempts_gone) + (SELECT COALESCE(sum(history_n), 0) \
                    FROM instances WHERE id IN (SELECT id FROM doomed)) AS attempts, \
                (SELECT count(*) FROM journal_gone) AS journal, \
                (SELECT count(*) FROM incidents_gone) AS incidents, \
                (SELECT count(*) FROM audit_gone) AS audit, \
                (SELECT count(*) FROM timers_gone) + (SELECT count(*) FROM pulls_gone) \
                    + (SELECT count(*) FROM user_tasks_gone) AS timers, \
                (SELECT count(*) FROM subscriptions_gone) AS subscriptions, \
                (SELECT count(*) FROM outbox_gone) AS outbox, \
                (SELECT count(*) FROM keys_gone) AS keys"
    )
}

/// A count a purge returned, as the outcome's unsigned figure.
fn purged(row: &PgRow, name: &str) -> StoreResult<u64> {
    let n: i64 = row.field(name)?;
    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("purge counted {n} {name}")))
}

/// Instance ids are `uuid` columns.
impl StoreRow for PgRow {
    fn instance_id(&self, name: &str) -> StoreResult<InstanceId> {
        self.field(name)
    }
}

/// Column arrays of instance rows, for one `UNNEST`.
#[derive(Default)]
struct InstanceColumns {
    id: Vec<InstanceId>,
    fence: Vec<i64>,
    deployment: Vec<i64>,
    status: Vec<&'static str>,
    failure_code: Vec<Option<String>>,
    snapshot: Vec<Vec<u8>>,
    /// Written by creations only; an update keeps the stored key.
    business_key: Vec<Option<String>>,
    now_ms: Vec<i64>,
    /// The id of the commit's journal row, if it writes one: the instance's newest.
    journal: Vec<Option<i64>>,
    /// The step's finished attempts, packed (`qflow_store::history`), and how many.
    history: Vec<Option<Vec<u8>>>,
    history_n: Vec<i32>,
}

impl InstanceColumns {
    fn push(&mut self, commit: &Commit, fence: i64, journal: Option<i64>) {
        self.journal.push(journal);
        self.id.push(commit.instance);
        self.fence.push(fence);
        self.deployment.push(commit.deployment.0);
        self.status.push(commit.state.status.as_str());
        self.failure_code.push(commit.state.failure_code.clone());
        self.snapshot.push(commit.state.snapshot.clone());
        self.business_key.push(commit.state.business_key.clone());
        self.now_ms.push(commit.now_ms);
        self.history
            .push(history::pack(commit.instance, &commit.attempts));
        // A step finishes a few attempts (one per task it completes or fails).
        self.history_n
            .push(i32::try_from(commit.attempts.len()).unwrap_or(i32::MAX));
    }
}

/// Applies one round (distinct instances) of a batch: the instance rows, then each family
/// of the winners' effect rows, one statement per kind of row. Fills `outcomes` at the
/// round's indexes.
async fn apply_round(
    tx: &mut PgConnection,
    batch: &[Commit],
    round: &[usize],
    outcomes: &mut [CommitOutcome],
) -> StoreResult<()> {
    let (winners, links) = apply_state(tx, batch, round, outcomes).await?;
    apply_timers(tx, &winners).await?;
    apply_incidents(tx, &winners).await?;
    apply_subscriptions(tx, &winners).await?;
    apply_journal(tx, &winners, &links).await?;
    apply_pull(tx, &winners).await?;
    apply_outbox(tx, &winners).await?;
    apply_user_tasks(tx, &winners).await?;
    apply_schedules(tx, &winners).await?;
    apply_takes(tx, &winners).await?;
    apply_audit(tx, &winners).await
}

/// A new deployment's schedules replace those of the process's other deployments (the
/// caller holds the process's deployment lock).
async fn replace_schedules(
    tx: &mut PgConnection,
    record: &DeploymentRecord,
    schedules: &[NewSchedule],
) -> StoreResult<()> {
    sqlx::query(
        "DELETE FROM schedules WHERE deployment IN \
         (SELECT id FROM deployments WHERE process_id = $1 AND id <> $2)",
    )
    .bind(&record.process_id)
    .bind(record.id.0)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    for s in schedules {
        sqlx::query(
            "INSERT INTO schedules (deployment, node, due_at_ms, remaining) \
             VALUES ($1, $2, $3, $4)",
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

/// The indexes of the batch's commits whose schedule advance names an occurrence the
/// stored schedule is no longer due at (started elsewhere, replaced, retired). The row
/// is locked `FOR UPDATE`: a concurrent commit of the same occurrence waits for this
/// transaction and then reads the moved row, so it is refused. Rows are locked in
/// `(deployment, node)` order, whatever the batch's order, so two batches holding the
/// same schedules never wait for each other in a cycle.
async fn stale_schedules(tx: &mut PgConnection, batch: &[Commit]) -> StoreResult<Vec<usize>> {
    let mut scheduled: Vec<(i64, &str, usize, &ScheduleAdvance)> = batch
        .iter()
        .enumerate()
        .filter_map(|(index, c)| {
            let advance = c.schedule.as_deref()?;
            Some((c.deployment.0, advance.node.as_str(), index, advance))
        })
        .collect();
    scheduled.sort_by_key(|&(deployment, node, index, _)| (deployment, node, index));
    let mut stale = Vec::new();
    for (deployment, _, index, advance) in scheduled {
        let due: Option<i64> = sqlx::query_scalar(
            "SELECT due_at_ms FROM schedules WHERE deployment = $1 AND node = $2 FOR UPDATE",
        )
        .bind(deployment)
        .bind(&advance.node)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        if due != Some(advance.fired_at_ms) {
            stale.push(index);
        }
    }
    Ok(stale)
}

/// Moves the winners' schedules on (dropping the lease), or deletes a schedule whose
/// last start this was. Only creations that start an occurrence have one.
async fn apply_schedules(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    for commit in winners {
        if let Some(advance) = &commit.schedule {
            move_schedule(tx, commit.deployment, advance).await?;
        }
    }
    Ok(())
}

/// Moves the schedule of `(deployment, advance.node)` to its next occurrence, or deletes
/// it after its last, only where it still stands at `advance.fired_at_ms`; returns
/// whether it did. The one write of a schedule's move, for a start's commit (whose
/// compare-and-swap was checked before, `stale_schedules`) and for a skip.
async fn move_schedule(
    tx: &mut PgConnection,
    deployment: DeploymentId,
    advance: &ScheduleAdvance,
) -> StoreResult<bool> {
    let query = match advance.next {
        Some((due_at_ms, remaining)) => sqlx::query(
            "UPDATE schedules SET due_at_ms = $1, remaining = $2, lease_owner = NULL, \
             leased_until_ms = NULL WHERE deployment = $3 AND node = $4 AND due_at_ms = $5",
        )
        .bind(due_at_ms)
        .bind(remaining.map(i64::from)),
        None => sqlx::query(
            "DELETE FROM schedules WHERE deployment = $1 AND node = $2 AND due_at_ms = $3",
        ),
    };
    let done = query
        .bind(deployment.0)
        .bind(&advance.node)
        .bind(advance.fired_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    Ok(done.rows_affected() == 1)
}

/// Leases due schedules whose lease is free or expired, earliest due first, as
/// [`CLAIM_SQL`] does timers (`SKIP LOCKED`, the lease re-checked on the locked row).
const SCHEDULE_CLAIM_SQL: &str = "UPDATE schedules SET lease_owner = $1, leased_until_ms = $2 \
     WHERE ctid = ANY(ARRAY(SELECT ctid FROM schedules \
         WHERE due_at_ms <= $3 AND (leased_until_ms IS NULL OR leased_until_ms < $3) \
         ORDER BY due_at_ms LIMIT $4 FOR UPDATE SKIP LOCKED)) \
     RETURNING deployment, node, due_at_ms, remaining";

/// Column arrays of `user_tasks` rows, for one `UNNEST`.
#[derive(Default)]
struct UserTaskColumns<'a> {
    instance: Vec<InstanceId>,
    node: Vec<&'a str>,
    deployment: Vec<i64>,
    assignee: Vec<Option<&'a str>>,
    groups: Vec<String>,
    users: Vec<String>,
    at: Vec<i64>,
}

/// Column arrays of `user_task_candidates` rows, for one `UNNEST`.
#[derive(Default)]
struct CandidateColumns<'a> {
    kind: Vec<&'static str>,
    name: Vec<&'a str>,
    at: Vec<i64>,
    instance: Vec<InstanceId>,
    node: Vec<&'a str>,
}

/// Writes the winners' user-task rows, one `UNNEST` statement per kind of row: the
/// candidates of withdrawn and offered tasks deleted, the withdrawn tasks deleted, the
/// offers upserted, their candidates inserted, the assignee changes applied. Most
/// commits have none and send nothing.
async fn apply_user_tasks(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    if winners.iter().all(|c| c.user_tasks.is_empty()) {
        return Ok(());
    }
    let unnest_delete = |table: &str| {
        format!(
            "DELETE FROM {table} AS d USING UNNEST($1::uuid[], $2::text[]) AS v(instance, node) \
             WHERE d.instance = v.instance AND d.node = v.node"
        )
    };
    let (mut instance, mut node) = (Vec::new(), Vec::new());
    let (mut gone_instance, mut gone_node) = (Vec::new(), Vec::new());
    let mut offers: Vec<(InstanceId, &UserTaskRecord)> = Vec::new();
    for commit in winners {
        for n in &commit.user_tasks.withdraw {
            instance.push(commit.instance);
            node.push(n.as_str());
            gone_instance.push(commit.instance);
            gone_node.push(n.as_str());
        }
        for row in last_task_offer_per_node(commit) {
            instance.push(commit.instance);
            node.push(row.node.as_str());
            offers.push((commit.instance, row));
        }
    }
    for (table, ids, nodes) in [
        ("user_task_candidates", &instance, &node),
        ("user_tasks", &gone_instance, &gone_node),
    ] {
        if ids.is_empty() {
            continue;
        }
        sqlx::query(&unnest_delete(table))
            .bind(ids)
            .bind(nodes)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
    }
    // A withdrawn task's Camunda 8 key goes with it: the task offered there next gets its
    // own.
    if !gone_instance.is_empty() {
        sqlx::query(
            "DELETE FROM camunda_keys AS k USING UNNEST($1::uuid[], $2::text[]) AS v(instance, node) \
             WHERE k.instance = v.instance AND k.kind = 'user_task' AND k.node = v.node",
        )
        .bind(&gone_instance)
        .bind(&gone_node)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    if !offers.is_empty() {
        let mut cols = UserTaskColumns::default();
        let mut cand = CandidateColumns::default();
        for (id, row) in &offers {
            cols.instance.push(*id);
            cols.node.push(row.node.as_str());
            cols.deployment.push(row.deployment.0);
            cols.assignee.push(row.assignee.as_deref());
            cols.groups.push(names_to_db(&row.candidate_groups));
            cols.users.push(names_to_db(&row.candidate_users));
            cols.at.push(row.created_at_ms);
            for (kind, names) in [
                ("group", &row.candidate_groups),
                ("user", &row.candidate_users),
            ] {
                for name in names {
                    cand.kind.push(kind);
                    cand.name.push(name.as_str());
                    cand.at.push(row.created_at_ms);
                    cand.instance.push(*id);
                    cand.node.push(row.node.as_str());
                }
            }
        }
        sqlx::query(
            "INSERT INTO user_tasks (instance, node, deployment, assignee, candidate_groups, \
             candidate_users, created_at_ms) \
             SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], \
                                  $6::text[], $7::bigint[]) \
             ON CONFLICT (instance, node) DO UPDATE SET deployment = EXCLUDED.deployment, \
             assignee = EXCLUDED.assignee, candidate_groups = EXCLUDED.candidate_groups, \
             candidate_users = EXCLUDED.candidate_users, created_at_ms = EXCLUDED.created_at_ms",
        )
        .bind(&cols.instance)
        .bind(&cols.node)
        .bind(&cols.deployment)
        .bind(&cols.assignee)
        .bind(&cols.groups)
        .bind(&cols.users)
        .bind(&cols.at)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        if !cand.kind.is_empty() {
            sqlx::query(
                "INSERT INTO user_task_candidates (kind, name, created_at_ms, instance, node) \
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::uuid[], \
                                      $5::text[])",
            )
            .bind(&cand.kind)
            .bind(&cand.name)
            .bind(&cand.at)
            .bind(&cand.instance)
            .bind(&cand.node)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
    }
    let (mut instance, mut node, mut assignee) = (Vec::new(), Vec::new(), Vec::new());
    for commit in winners {
        for (n, a) in last_assign_per_node(commit) {
            instance.push(commit.instance);
            node.push(n);
            assignee.push(a);
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "UPDATE user_tasks AS t SET assignee = v.assignee \
             FROM UNNEST($1::uuid[], $2::text[], $3::text[]) AS v(instance, node, assignee) \
             WHERE t.instance = v.instance AND t.node = v.node",
        )
        .bind(&instance)
        .bind(&node)
        .bind(&assignee)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    Ok(())
}

/// Writes the winners' outbox rows: the withdrawals in one `UNNEST` delete (pending and
/// poisoned rows only: a delivered row stays as the record of what was sent), then the
/// emissions in one `UNNEST` insert that leaves an existing key alone. Most commits have
/// none and send nothing. The instance rows are locked already (`apply_state`), which
/// is the lock order `record_delivery` keeps too.
async fn apply_outbox(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    let (mut instance, mut node) = (Vec::new(), Vec::new());
    for commit in winners {
        for n in &commit.outbox.withdraw {
            instance.push(commit.instance);
            node.push(n.as_str());
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "DELETE FROM outbox AS o USING UNNEST($1::uuid[], $2::text[]) AS v(instance, node) \
             WHERE o.instance = v.instance AND o.node = v.node \
             AND o.state IN ('pending', 'poisoned')",
        )
        .bind(&instance)
        .bind(&node)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    let answered: Vec<&str> = winners
        .iter()
        .flat_map(|c| c.outbox.answered.iter().map(String::as_str))
        .collect();
    if !answered.is_empty() {
        sqlx::query(
            "UPDATE outbox SET state = 'delivered', deliveries = deliveries + 1, \
             lease_owner = NULL, lease_until_ms = NULL \
             WHERE key = ANY($1::text[]) AND state = 'pending'",
        )
        .bind(&answered)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    let emits = first_emit_per_key(winners.iter().map(|c| ((), *c)));
    if emits.is_empty() {
        return Ok(());
    }
    let mut key = Vec::with_capacity(emits.len());
    let mut instance = Vec::with_capacity(emits.len());
    let mut node = Vec::with_capacity(emits.len());
    let mut channel = Vec::with_capacity(emits.len());
    let mut attempt = Vec::with_capacity(emits.len());
    let mut call_id = Vec::with_capacity(emits.len());
    let mut body = Vec::with_capacity(emits.len());
    let mut now_ms = Vec::with_capacity(emits.len());
    for ((), commit, row) in emits {
        key.push(row.key.as_str());
        instance.push(commit.instance);
        node.push(row.node.as_str());
        channel.push(row.channel.as_str());
        attempt.push(i64::from(row.attempt.get()));
        call_id.push(row.call_id.as_str());
        body.push(row.body.as_str());
        now_ms.push(commit.now_ms);
    }
    sqlx::query(
        "INSERT INTO outbox (key, instance, node, channel, attempt, call_id, body, \
         created_at_ms, state, due_at_ms) \
         SELECT key, instance, node, channel, attempt, call_id, body, now_ms, 'pending', now_ms \
         FROM UNNEST($1::text[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], \
                     $6::text[], $7::text[], $8::bigint[]) \
         AS v(key, instance, node, channel, attempt, call_id, body, now_ms) \
         ON CONFLICT (key) DO NOTHING",
    )
    .bind(&key)
    .bind(&instance)
    .bind(&node)
    .bind(&channel)
    .bind(&attempt)
    .bind(&call_id)
    .bind(&body)
    .bind(&now_ms)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    Ok(())
}

/// Writes the winners' pull-task rows: the withdrawals in one `UNNEST` delete, then the
/// offers in one `UNNEST` upsert. Most commits have none and send nothing.
async fn apply_pull(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    let (mut instance, mut node) = (Vec::new(), Vec::new());
    for commit in winners {
        for n in &commit.pull.withdraw {
            instance.push(commit.instance);
            node.push(n.as_str());
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "DELETE FROM pull_tasks AS p USING UNNEST($1::uuid[], $2::text[]) AS v(instance, node) \
             WHERE p.instance = v.instance AND p.node = v.node",
        )
        .bind(&instance)
        .bind(&node)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        // A withdrawn task's job keys go with it: the next offer of the node (a pass after
        // a loop, the attempt after a park or a resume) gets keys of its own.
        sqlx::query(
            "DELETE FROM camunda_keys AS k USING UNNEST($1::uuid[], $2::text[]) AS v(instance, node) \
             WHERE k.instance = v.instance AND k.kind = 'job' AND k.node = v.node",
        )
        .bind(&instance)
        .bind(&node)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    let (mut instance, mut node, mut topic, mut attempt, mut worker, mut until, mut at) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for commit in winners {
        for row in last_offer_per_node(commit) {
            instance.push(commit.instance);
            node.push(row.node.as_str());
            topic.push(row.topic.as_str());
            attempt.push(i64::from(row.attempt.get()));
            worker.push(row.worker.as_deref());
            until.push(row.lock_until_ms);
            at.push(row.offered_at_ms);
        }
    }
    if instance.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO pull_tasks (instance, node, topic, attempt, worker, lock_until_ms, \
         offered_at_ms) \
         SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[], \
                              $6::bigint[], $7::bigint[]) \
         ON CONFLICT (instance, node) DO UPDATE SET topic = EXCLUDED.topic, \
         attempt = EXCLUDED.attempt, worker = EXCLUDED.worker, \
         lock_until_ms = EXCLUDED.lock_until_ms, offered_at_ms = EXCLUDED.offered_at_ms",
    )
    .bind(&instance)
    .bind(&node)
    .bind(&topic)
    .bind(&attempt)
    .bind(&worker)
    .bind(&until)
    .bind(&at)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    Ok(())
}

/// The commits of `batch` whose message take cannot be (`common::refused_takes`): the
/// message is gone or expired at the commit's instant, or the process took it. Each
/// message's row is locked first (`FOR UPDATE`, held to the end of the transaction), so
/// two replicas' takes of one message are serialized and the second reads the first's
/// taker row once it has committed.
async fn taken_messages(tx: &mut PgConnection, batch: &[Commit]) -> StoreResult<Vec<usize>> {
    let ids: BTreeSet<i64> = batch
        .iter()
        .filter_map(|c| c.message_take.as_ref().map(|t| t.message))
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // One statement, in id order: two batches taking the same messages lock them in the
    // same order, so they wait for each other rather than deadlock.
    let ids: Vec<i64> = ids.into_iter().collect();
    let rows: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT id, expires_at_ms FROM buffered_messages WHERE id = ANY($1) \
         ORDER BY id FOR UPDATE",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await
    .map_err(backend)?;
    let expires: HashMap<i64, i64> = rows.into_iter().collect();
    let mut verdicts = Vec::new();
    for (index, commit) in batch.iter().enumerate() {
        let Some(take) = &commit.message_take else {
            continue;
        };
        let taken: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM message_takers WHERE message = $1 AND process = $2")
                .bind(take.message)
                .bind(&take.process)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
        let live = expires
            .get(&take.message)
            .is_some_and(|e| *e > commit.now_ms)
            && taken.is_none();
        verdicts.push((index, live));
    }
    Ok(refused_takes(batch, verdicts))
}

/// Records the winners' message takes.
async fn apply_takes(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    for commit in winners {
        if let Some(take) = &commit.message_take {
            sqlx::query(
                "INSERT INTO message_takers (message, process) VALUES ($1, $2) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(take.message)
            .bind(&take.process)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
    }
    Ok(())
}

/// Writes the winners' `subscriptions`: the closes, then the opens as one upsert, so a
/// node whose wait began again keeps its new row.
async fn apply_subscriptions(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    let (mut instance, mut node) = (Vec::new(), Vec::new());
    for commit in winners {
        for closed in &commit.subscriptions.close {
            instance.push(commit.instance);
            node.push(closed.as_str());
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "DELETE FROM subscriptions AS s \
             USING UNNEST($1::uuid[], $2::text[]) AS v(instance, node) \
             WHERE s.instance = v.instance AND s.node = v.node",
        )
        .bind(&instance)
        .bind(&node)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    let (mut instance, mut node, mut message, mut key, mut now_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for commit in winners {
        for s in &commit.subscriptions.open {
            instance.push(commit.instance);
            node.push(s.node.as_str());
            message.push(s.message.as_str());
            key.push(s.key.as_str());
            now_ms.push(commit.now_ms);
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "INSERT INTO subscriptions (instance, node, message, correlation_key, opened_at_ms) \
             SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::bigint[]) \
             ON CONFLICT (instance, node) DO UPDATE SET message = EXCLUDED.message, \
             correlation_key = EXCLUDED.correlation_key, opened_at_ms = EXCLUDED.opened_at_ms",
        )
        .bind(&instance)
        .bind(&node)
        .bind(&message)
        .bind(&key)
        .bind(&now_ms)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    Ok(())
}

async fn apply_audit(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    let (mut instance, mut at_ms, mut actor, mut action, mut detail) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for commit in winners {
        let (b, a) = audit_fences(commit)?;
        for entry in &commit.audit {
            instance.push(commit.instance);
            at_ms.push(commit.now_ms);
            actor.push(entry.actor.as_str());
            action.push(entry.action.as_str());
            detail.push(entry.detail.as_str());
            before.push(b);
            after.push(a);
        }
    }
    if instance.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO audit (instance, at_ms, actor, action, detail, fence_before, fence_after) \
         SELECT instance, at_ms, actor, action, detail, fence_before, fence_after \
         FROM UNNEST($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
                     $6::bigint[], $7::bigint[]) \
         WITH ORDINALITY AS v(instance, at_ms, actor, action, detail, fence_before, \
                              fence_after, ord) ORDER BY ord",
    )
    .bind(&instance)
    .bind(&at_ms)
    .bind(&actor)
    .bind(&action)
    .bind(&detail)
    .bind(&before)
    .bind(&after)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    Ok(())
}

/// Writes the round's `state` rows: lock, fence check, then creations and updates.
/// Returns the winners, in round order.
async fn apply_state<'a>(
    tx: &mut PgConnection,
    batch: &'a [Commit],
    round: &[usize],
    outcomes: &mut [CommitOutcome],
) -> StoreResult<(Vec<&'a Commit>, JournalLinks)> {
    let mut ids: Vec<InstanceId> = round.iter().map(|&i| batch[i].instance).collect();
    ids.sort_unstable();
    // Locking in id order is what keeps two replicas' overlapping batches from deadlocking.
    // The lock also holds the instance's newest journal row still, which the commit's own
    // row follows.
    let current: HashMap<InstanceId, Stored> = sqlx::query(
        "SELECT id, fence, journal_last FROM instances WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await
    .map_err(backend)?
    .iter()
    .map(|row| {
        Ok((
            row.instance_id("id")?,
            (row.field("fence")?, row.field("journal_last")?),
        ))
    })
    .collect::<StoreResult<_>>()?;
    // Each commit of the round goes into the creations, the updates (with the fence and
    // newest journal row it found), or is a conflict now.
    let mut sent: Vec<(usize, Option<Stored>)> = Vec::with_capacity(round.len());
    for &index in round {
        let commit = &batch[index];
        let stored = current.get(&commit.instance).copied();
        match (commit.expected_fence, stored) {
            (None, None) => sent.push((index, None)),
            (Some(expected), Some((fence, last))) if fence_to_db(expected)? == fence => {
                sent.push((index, Some((fence, last))))
            }
            _ => {
                outcomes[index] = CommitOutcome::Conflict {
                    current_fence: stored.map(|(f, _)| fence_from_db(f)).transpose()?,
                };
            }
        }
    }
    let journaled = sent
        .iter()
        .filter(|(index, _)| batch[*index].journal.is_some())
        .count();
    let mut journal_ids = journal_ids(tx, journaled).await?.into_iter();
    let mut links = JournalLinks::with_capacity(journaled);

    let mut creates = InstanceColumns::default();
    let mut updates = InstanceColumns::default();
    for &(index, found) in &sent {
        let commit = &batch[index];
        let journal = commit.journal.as_ref().and_then(|_| journal_ids.next());
        if let Some(id) = journal {
            links.insert(commit.instance, (id, found.and_then(|(_, last)| last)));
        }
        match found {
            None => creates.push(commit, 1, journal),
            Some((fence, _)) => updates.push(commit, fence, journal),
        }
    }
    // The commits that went into a statement: one of those that did not win was stopped
    // by a concurrent creation of its id or by a business key.
    let sent: HashSet<usize> = sent.into_iter().map(|(index, _)| index).collect();

    let mut won: HashSet<InstanceId> = HashSet::with_capacity(round.len());
    // Instances whose in-row attempt history passed `HISTORY_SPILL_BYTES`.
    let mut spills: Vec<InstanceId> = Vec::new();
    if !creates.id.is_empty() {
        let created: Vec<(InstanceId, Option<i32>)> = sqlx::query_as(
            "INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot, \
             business_key, created_at_ms, updated_at_ms, ended_at_ms, journal_last, \
             history, history_n) \
             SELECT v.id, v.deployment, 1, v.status, v.failure_code, v.snapshot, v.business_key, \
                    v.now_ms, v.now_ms, \
                    CASE WHEN v.status IN ('completed', 'cancelled') THEN v.now_ms END, \
                    v.journal, v.history, v.history_n \
             FROM UNNEST($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::bytea[], \
                         $6::text[], $7::bigint[], $8::bigint[], $9::bytea[], $10::integer[]) \
             AS v(id, deployment, status, failure_code, snapshot, business_key, now_ms, journal, \
                  history, history_n) \
             ON CONFLICT DO NOTHING RETURNING id, octet_length(history)",
        )
        .bind(&creates.id)
        .bind(&creates.deployment)
        .bind(&creates.status)
        .bind(&creates.failure_code)
        .bind(&creates.snapshot)
        .bind(&creates.business_key)
        .bind(&creates.now_ms)
        .bind(&creates.journal)
        .bind(&creates.history)
        .bind(&creates.history_n)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
        for (id, len) in created {
            if len.is_some_and(|l| i64::from(l) > HISTORY_SPILL_BYTES) {
                spills.push(id);
            }
            won.insert(id);
        }
    }
    if !updates.id.is_empty() {
        let sql = update_instances_sql();
        let updated: Vec<(InstanceId, Option<i32>)> = sqlx::query_as(&sql)
            .bind(&updates.id)
            .bind(&updates.fence)
            .bind(&updates.deployment)
            .bind(&updates.status)
            .bind(&updates.failure_code)
            .bind(&updates.snapshot)
            .bind(&updates.now_ms)
            .bind(&updates.journal)
            .bind(&updates.history)
            .bind(&updates.history_n)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        for (id, len) in updated {
            if len.is_some_and(|l| i64::from(l) > HISTORY_SPILL_BYTES) {
                spills.push(id);
            }
            won.insert(id);
        }
    }
    spill_histories(tx, &spills).await?;

    let mut winners = Vec::with_capacity(won.len());
    for &index in round {
        let commit = &batch[index];
        if won.contains(&commit.instance) {
            outcomes[index] = applied(commit);
            winners.push(commit);
        } else if sent.contains(&index) {
            outcomes[index] = refused(tx, commit).await?;
        }
    }
    Ok((winners, links))
}

/// A locked instance row's fence and newest journal row.
type Stored = (i64, Option<i64>);

/// Each journaled commit's row: its id and the instance's row before it (none for a
/// creation or an instance journaled for the first time), by instance. A commit that did
/// not win leaves an unused id behind, as a rolled-back sequence call does.
type JournalLinks = HashMap<InstanceId, (i64, Option<i64>)>;

/// `n` ids for journal rows, one `nextval` each in one statement (none when `n` is 0).
/// A step's id is taken after the lock on its instance's row, which the step before it
/// held until it committed, so an instance's rows ascend with its steps.
async fn journal_ids(tx: &mut PgConnection, n: usize) -> StoreResult<Vec<i64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT nextval('journal_id_seq') FROM generate_series(1, $1)")
        .bind(n as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)
}

/// Why a commit that went into the round's statements did not apply: another replica
/// created the same id between our lock and our insert, or the commit's business key is
/// taken on its deployment (a creation's key, or the stored key of an instance an update
/// moves to another deployment).
///
/// Why this is race-free for creations: the unique index `instances_business_key` is
/// the guard, not a check we make. Two transactions inserting one key on one deployment
/// meet in that index; `ON CONFLICT DO NOTHING` makes the second wait until the first
/// ends, then skip its row if the first committed (or insert it if the first rolled
/// back). This function runs as new statements, which under READ COMMITTED see the
/// winner's committed row, so the refusal names it. No lock we hold (the instance rows
/// `FOR UPDATE`, the deployment `FOR KEY SHARE`) would serialise two creations of new
/// ids, so a check-then-insert alone would let both win.
///
/// A move (migration) is guarded by `NOT EXISTS` in the update; one racing a concurrent
/// creation of its key on the target deployment passes that check and then meets the
/// index, which fails the whole batch as a backend error: nothing is written and no key
/// is ever held twice, but the caller sees an error instead of the refusal.
async fn refused(tx: &mut PgConnection, commit: &Commit) -> StoreResult<CommitOutcome> {
    let stored: Option<(i64, Option<String>)> =
        sqlx::query_as("SELECT fence, business_key FROM instances WHERE id = $1")
            .bind(commit.instance)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
    let stored_fence = stored
        .as_ref()
        .map(|(fence, _)| fence_from_db(*fence))
        .transpose()?;
    let mut holder = None;
    if let Some(key) = contested_key(commit, stored.as_ref().map(|(_, key)| key)) {
        holder = sqlx::query_scalar(
            "SELECT id FROM instances WHERE deployment = $1 AND business_key = $2 AND id <> $3",
        )
        .bind(commit.deployment.0)
        .bind(key)
        .bind(commit.instance)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
    }
    Ok(refusal(commit, stored_fence, holder))
}

/// Writes the winners' `timers`: the resolves, then the arms (upserts), so a step that
/// resolves and re-arms a name keeps the new timer.
async fn apply_timers(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    let (mut instance, mut name, mut incarnation) = (Vec::new(), Vec::new(), Vec::new());
    for commit in winners {
        for timer in &commit.timers.resolve {
            instance.push(commit.instance);
            name.push(timer.name.as_str());
            incarnation.push(i64::from(timer.incarnation));
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "DELETE FROM timers AS t USING UNNEST($1::uuid[], $2::text[], $3::bigint[]) \
             AS v(instance, name, incarnation) \
             WHERE t.instance = v.instance AND t.name = v.name AND t.incarnation = v.incarnation",
        )
        .bind(&instance)
        .bind(&name)
        .bind(&incarnation)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    let (mut instance, mut name, mut due_at_ms, mut incarnation) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for commit in winners {
        for timer in last_arm_per_name(commit) {
            instance.push(commit.instance);
            name.push(timer.name.as_str());
            due_at_ms.push(timer.due_at_ms);
            incarnation.push(i64::from(timer.incarnation));
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "INSERT INTO timers (instance, name, due_at_ms, incarnation) \
             SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bigint[]) \
             ON CONFLICT (instance, name) DO UPDATE SET due_at_ms = EXCLUDED.due_at_ms, \
             incarnation = EXCLUDED.incarnation, lease_owner = NULL, leased_until_ms = NULL",
        )
        .bind(&instance)
        .bind(&name)
        .bind(&due_at_ms)
        .bind(&incarnation)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    Ok(())
}

/// Writes the winners' `incidents`: the resolves, then the opens, so a step that resolves
/// and re-opens a node keeps the new incident open.
async fn apply_incidents(tx: &mut PgConnection, winners: &[&Commit]) -> StoreResult<()> {
    let (mut instance, mut from, mut to) = (Vec::new(), Vec::new(), Vec::new());
    for commit in winners {
        for (f, t) in &commit.incidents.moved {
            instance.push(commit.instance);
            from.push(f.as_str());
            to.push(t.as_str());
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "UPDATE incidents AS i SET node = v.to_node \
             FROM UNNEST($1::uuid[], $2::text[], $3::text[]) AS v(instance, from_node, to_node) \
             WHERE i.instance = v.instance AND i.node = v.from_node AND i.resolved_at_ms IS NULL",
        )
        .bind(&instance)
        .bind(&from)
        .bind(&to)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    let (mut instance, mut node, mut now_ms) = (Vec::new(), Vec::new(), Vec::new());
    for commit in winners {
        for resolved in &commit.incidents.resolve_on {
            instance.push(commit.instance);
            node.push(resolved.as_str());
            now_ms.push(commit.now_ms);
        }
    }
    if !instance.is_empty() {
        sqlx::query(
            "UPDATE incidents AS i SET resolved_at_ms = v.now_ms \
             FROM UNNEST($1::uuid[], $2::text[], $3::bigint[]) AS v(instance, node, now_ms) \
             WHERE i.instance = v.instance AND i.node = v.node AND i.resolved_at_ms IS NULL",
        )
        .bind(&instance)
        .bind(&node)
        .bind(&now_ms)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    let (mut instance, mut node, mut code, mut message, mut now_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for commit in winners {
        for incident in &commit.incidents.open {
            instance.push(commit.instance);
            node.push(incident.node.as_str());
            code.push(incident.code.as_str());
            message.push(incident.message.as_str());
            now_ms.push(commit.now_ms);
        }
    }
    if !instance.is_empty() {
        // WITH ORDINALITY keeps the batch order in the assigned ids.
        sqlx::query(
            "INSERT INTO incidents (instance, node, code, message, opened_at_ms) \
             SELECT instance, node, code, message, now_ms \
             FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::bigint[]) \
             WITH ORDINALITY AS v(instance, node, code, message, now_ms, ord) ORDER BY ord",
        )
        .bind(&instance)
        .bind(&node)
        .bind(&code)
        .bind(&message)
        .bind(&now_ms)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    }
    Ok(())
}

/// Moves the in-row attempt histories of `ids` (past [`HISTORY_SPILL_BYTES`]) to the
/// `attempts` table, each instance's oldest first, and empties them: rare (an instance
/// that has retried some thirty times), so one read and one insert for all. The rows are
/// locked by this transaction's `FOR UPDATE` already.
async fn spill_histories(tx: &mut PgConnection, ids: &[InstanceId]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let rows: Vec<(InstanceId, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT id, history FROM instances WHERE id = ANY($1) ORDER BY id")
            .bind(ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
    let mut records = Vec::new();
    for (id, body) in rows {
        records.extend(history::unpack(id, body.as_deref().unwrap_or_default())?);
    }
    let mut at = AttemptColumns::default();
    for record in &records {
        at.push(record.instance, record);
    }
    insert_attempts(tx, &at).await?;
    sqlx::query("UPDATE instances SET history = NULL, history_n = 0 WHERE id = ANY($1)")
        .bind(ids)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    Ok(())
}

/// Inserts `at`'s attempt rows in one `UNNEST` insert, their ids in `at`'s order.
async fn insert_attempts(tx: &mut PgConnection, at: &AttemptColumns<'_>) -> StoreResult<()> {
    if at.instance.is_empty() {
        return Ok(());
    }
    // WITH ORDINALITY keeps the batch order in the assigned ids.
    sqlx::query(
        "INSERT INTO attempts (instance, node, attempt, started_at_ms, finished_at_ms, \
         outcome, code, message, worker) \
         SELECT instance, node, attempt, started_at_ms, finished_at_ms, outcome, code, message, \
                worker \
         FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], \
                     $6::text[], $7::text[], $8::text[], $9::text[]) \
         WITH ORDINALITY AS v(instance, node, attempt, started_at_ms, finished_at_ms, \
                              outcome, code, message, worker, ord) ORDER BY ord",
    )
    .bind(&at.instance)
    .bind(&at.node)
    .bind(&at.attempt)
    .bind(&at.started_at_ms)
    .bind(&at.finished_at_ms)
    .bind(&at.outcome)
    .bind(&at.code)
    .bind(&at.message)
    .bind(&at.worker)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    Ok(())
}

/// Appends the winners' input-journal rows (SPEC G3) in one `UNNEST` insert, each with
/// the id `apply_state` gave it and linked to its instance's row before it (`links`); a
/// round without any (the journal is off for its deployments) sends nothing.
async fn apply_journal(
    tx: &mut PgConnection,
    winners: &[&Commit],
    links: &JournalLinks,
) -> StoreResult<()> {
    let mut j = JournalColumns::default();
    for commit in winners {
        if let (Some(entry), Some(&(id, prev))) = (&commit.journal, links.get(&commit.instance)) {
            j.push(id, prev, commit.instance, seq_to_db(entry.seq)?, entry);
        }
    }
    if j.instance.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO journal (id, prev, instance, seq, deployment, at_ms, input, delta, \
         snapshot_hash, effects_hash, row_hash) \
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::uuid[], $4::bigint[], \
                              $5::bigint[], $6::bigint[], $7::text[], $8::bytea[], $9::bytea[], \
                              $10::bytea[], $11::bytea[])",
    )
    .bind(&j.id)
    .bind(&j.prev)
    .bind(&j.instance)
    .bind(&j.seq)
    .bind(&j.deployment)
    .bind(&j.at_ms)
    .bind(&j.input)
    .bind(&j.delta)
    .bind(&j.snapshot_hash)
    .bind(&j.effects_hash)
    .bind(&j.row_hash)
    .execute(&mut *tx)
    .await
    .map_err(backend)?;
    Ok(())
}

/// Column arrays of `journal` rows, for one `UNNEST`.
#[derive(Default)]
struct JournalColumns<'a> {
    id: Vec<i64>,
    prev: Vec<Option<i64>>,
    instance: Vec<InstanceId>,
    seq: Vec<i64>,
    deployment: Vec<i64>,
    at_ms: Vec<i64>,
    input: Vec<&'a str>,
    delta: Vec<&'a [u8]>,
    snapshot_hash: Vec<&'a [u8]>,
    effects_hash: Vec<&'a [u8]>,
    row_hash: Vec<&'a [u8]>,
}

impl<'a> JournalColumns<'a> {
    fn push(
        &mut self,
        id: i64,
        prev: Option<i64>,
        instance: InstanceId,
        seq: i64,
        entry: &'a JournalEntry,
    ) {
        self.id.push(id);
        self.prev.push(prev);
        self.instance.push(instance);
        self.seq.push(seq);
        self.deployment.push(entry.deployment.0);
        self.at_ms.push(entry.at_ms);
        self.input.push(&entry.input);
        self.delta.push(&entry.delta);
        self.snapshot_hash.push(&entry.snapshot_hash);
        self.effects_hash.push(&entry.effects_hash);
        self.row_hash.push(&entry.row_hash);
    }
}

#[derive(Default)]
struct AttemptColumns<'a> {
    instance: Vec<InstanceId>,
    node: Vec<&'a str>,
    attempt: Vec<i64>,
    started_at_ms: Vec<i64>,
    finished_at_ms: Vec<i64>,
    outcome: Vec<&'a str>,
    code: Vec<Option<&'a str>>,
    message: Vec<Option<&'a str>>,
    worker: Vec<Option<&'a str>>,
}

impl<'a> AttemptColumns<'a> {
    fn push(&mut self, instance: InstanceId, attempt: &'a AttemptRecord) {
        self.instance.push(instance);
        self.node.push(&attempt.node);
        self.attempt.push(i64::from(attempt.attempt.get()));
        self.started_at_ms.push(attempt.started_at_ms);
        self.finished_at_ms.push(attempt.finished_at_ms);
        self.outcome.push(attempt.outcome.as_str());
        self.code.push(attempt.code.as_deref());
        self.message.push(attempt.message.as_deref());
        self.worker.push(attempt.worker.as_deref());
    }
}

#[async_trait]
impl Store for PgStore {
    fn is_durable(&self) -> bool {
        true
    }

    async fn close(&self) {
        PgStore::close(self).await;
    }

    async fn deploy(&self, new: NewDeployment<'_>) -> StoreResult<DeploymentRecord> {
        let mut tx: Tx = self.pool.begin().await.map_err(backend)?;
        // Looked up first, so that deploying the same content again uses no new version
        // number (an insert that conflicts would still consume one); the insert's
        // conflict clause covers two replicas deploying the same content at once.
        let existing = sqlx::query(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE content_hash = $1"
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
        // Deployments of one process are serialised from here to the commit, so that the
        // version numbers and the schedules' replacement happen in one order: the newest
        // deployment's schedules are the ones left.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))")
            .bind(new.process_id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        let inserted = sqlx::query(&format!(
            "INSERT INTO deployments (process_id, content_hash, source, deployed_at_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (content_hash) DO NOTHING \
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
                "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE content_hash = $1"
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
        let sql = format!("SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = $1");
        let row = sqlx::query(&sql).bind(id.0).fetch_optional(&self.pool);
        map_optional(row.await, deployment_from_row)
    }

    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>> {
        let sql = format!("SELECT {DEPLOYMENT_COLUMNS} FROM deployments ORDER BY id");
        map_all(
            sqlx::query(&sql).fetch_all(&self.pool).await,
            deployment_from_row,
        )
    }

    async fn retire(&self, id: DeploymentId) -> StoreResult<RetireOutcome> {
        let mut tx: Tx = self.pool.begin().await.map_err(backend)?;
        // FOR UPDATE conflicts with the key-share lock an instance insert takes on its
        // deployment, so creations in flight finish before the count below.
        let exists = sqlx::query("SELECT 1 FROM deployments WHERE id = $1 FOR UPDATE")
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        if exists.is_none() {
            return Ok(RetireOutcome::NotFound);
        }
        let blocking: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM instances \
             WHERE deployment = $1 AND status IN ('running', 'failed')",
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
        sqlx::query("UPDATE deployments SET retired = TRUE WHERE id = $1")
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        sqlx::query("DELETE FROM schedules WHERE deployment = $1")
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
        let mut tx: Tx = self.pool.begin().await.map_err(backend)?;
        commit_planning(&mut tx).await?;
        self.check_deployments(&mut tx, &batch).await?;
        let retired = retired_deployments(&mut tx, &batch).await?;
        let stale = stale_schedules(&mut tx, &batch).await?;
        let taken = taken_messages(&mut tx, &batch).await?;
        let (mut outcomes, rounds) = plan(&batch, &retired, &stale, &taken);
        for round in rounds {
            apply_round(&mut tx, &batch, &round, &mut outcomes).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(outcomes)
    }

    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = $1");
        let row = sqlx::query(&sql).bind(id).fetch_optional(&self.pool);
        map_optional(row.await, instance_from_row)
    }

    /// One `= ANY($1)` over the primary key.
    async fn instances_by_id(&self, ids: &[InstanceId]) -> StoreResult<Vec<InstanceRecord>> {
        let ids: BTreeSet<InstanceId> = ids.iter().copied().collect();
        let ids: Vec<InstanceId> = ids.into_iter().collect();
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ANY($1)");
        let rows = sqlx::query(&sql).bind(&ids).fetch_all(&self.pool);
        map_all(rows.await, instance_from_row)
    }

    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        let mut query = instances_query::<Postgres>(filter, "UUID", StatusArms::One, "");
        map_all(query.build().fetch_all(&self.pool).await, instance_from_row)
    }

    async fn claim_due_timers(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<TimerRecord>> {
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        claimed_timers(&self.relaxed_claim(CLAIM_SQL, claim, claim.limit).await?)
    }

    async fn claim_due_schedules(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<ScheduleRecord>> {
        // Most databases have no schedule due: a read settles that without a write.
        let due: Option<i64> = sqlx::query_scalar("SELECT min(due_at_ms) FROM schedules")
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        if claim.limit == 0 || due.is_none_or(|due| due > claim.now_ms) {
            return Ok(Vec::new());
        }
        claimed_schedules(
            &self
                .relaxed_claim(SCHEDULE_CLAIM_SQL, claim, claim.limit)
                .await?,
        )
    }

    async fn advance_schedule(
        &self,
        deployment: DeploymentId,
        advance: &ScheduleAdvance,
    ) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let moved = move_schedule(&mut tx, deployment, advance).await?;
        tx.commit().await.map_err(backend)?;
        Ok(moved)
    }

    async fn schedules(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<ScheduleRecord>> {
        let sql = format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules \
             WHERE $1::BIGINT IS NULL OR deployment = $1 ORDER BY deployment, node COLLATE \"C\""
        );
        let rows = sqlx::query(&sql)
            .bind(deployment.map(|d| d.0))
            .fetch_all(&self.pool);
        map_all(rows.await, schedule_from_row)
    }

    async fn next_timer_due(&self) -> StoreResult<Option<i64>> {
        sqlx::query_scalar("SELECT min(due_at_ms) FROM timers")
            .fetch_one(&self.pool)
            .await
            .map_err(backend)
    }

    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>> {
        let sql = format!(
            "SELECT {TIMER_COLUMNS} FROM timers WHERE instance = $1 ORDER BY name COLLATE \"C\""
        );
        let rows = sqlx::query(&sql).bind(instance).fetch_all(&self.pool);
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
             WHERE message = $1 AND correlation_key = $2 \
             ORDER BY opened_at_ms, instance, node LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(message)
            .bind(key)
            .bind(i64::from(effective_subscriptions_limit(limit)))
            .fetch_all(&self.pool);
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
             WHERE message = $1 AND correlation_key = $2 \
             AND (opened_at_ms, instance, node) > ($3, $4, $5) \
             ORDER BY opened_at_ms, instance, node LIMIT $6"
        );
        let rows = sqlx::query(&sql)
            .bind(message)
            .bind(key)
            .bind(after.opened_at_ms)
            .bind(after.instance)
            .bind(after.node.as_str())
            .bind(i64::from(effective_subscriptions_limit(limit)))
            .fetch_all(&self.pool);
        map_all(rows.await, subscription_from_row)
    }

    async fn instance_subscriptions(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE instance = $1 ORDER BY node"
        );
        let rows = sqlx::query(&sql).bind(instance).fetch_all(&self.pool);
        map_all(rows.await, subscription_from_row)
    }

    async fn instance_counts(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<(InstanceStatus, u64)>> {
        let rows = match deployment {
            None => sqlx::query(INSTANCE_COUNTS_SQL).fetch_all(&self.pool).await,
            Some(d) => {
                let sql = crate::common::instance_counts_of_deployment_sql("$1");
                sqlx::query(&sql).bind(d.0).fetch_all(&self.pool).await
            }
        };
        Ok(crate::common::all_counts(map_all(
            rows,
            status_count_from_row,
        )?))
    }

    async fn incidents(&self, instance: Option<InstanceId>) -> StoreResult<Vec<IncidentRecord>> {
        let sql = format!(
            "SELECT {INCIDENT_COLUMNS} FROM incidents \
             WHERE $1::uuid IS NULL OR instance = $1 ORDER BY id"
        );
        let rows = sqlx::query(&sql).bind(instance).fetch_all(&self.pool);
        map_all(rows.await, incident_from_row)
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
            format!("SELECT {INCIDENT_COLUMNS} FROM incidents {only}ORDER BY id DESC LIMIT $1");
        let rows = sqlx::query(&sql)
            .bind(i64::from(effective_instances_limit(limit)))
            .fetch_all(&self.pool);
        map_all(rows.await, incident_from_row)
    }

    async fn audit(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        let limit = i64::from(effective_instances_limit(limit));
        // The newest `limit` rows, returned oldest first.
        let sql = format!(
            "SELECT * FROM (SELECT {AUDIT_COLUMNS} FROM audit \
             WHERE $1::uuid IS NULL OR instance = $1 ORDER BY id DESC LIMIT $2) AS newest \
             ORDER BY id"
        );
        let rows = sqlx::query(&sql)
            .bind(instance)
            .bind(limit)
            .fetch_all(&self.pool);
        map_all(rows.await, audit_from_row)
    }

    async fn purge_finished(&self, request: PurgeRequest) -> StoreResult<PurgeOutcome> {
        if request.limit == 0 {
            return Ok(PurgeOutcome::default());
        }
        let sql = purge_sql(request.deployment.is_some());
        let mut query = sqlx::query(&sql)
            .bind(request.ended_before_ms)
            .bind(purge_limit(&request));
        if let Some(deployment) = request.deployment {
            query = query.bind(deployment.0);
        }
        let row = query.fetch_one(&self.pool).await.map_err(backend)?;
        Ok(PurgeOutcome {
            instances: purged(&row, "instances")?,
            attempts: purged(&row, "attempts")?,
            journal: purged(&row, "journal")?,
            incidents: purged(&row, "incidents")?,
            audit: purged(&row, "audit")?,
            timers: purged(&row, "timers")?,
            subscriptions: purged(&row, "subscriptions")?,
            outbox: purged(&row, "outbox")?,
            keys: purged(&row, "keys")?,
        })
    }

    /// One statement: a lateral scan of `pull_tasks_offered` per topic, each stopping at
    /// the limit, merged.
    async fn offered_pull_tasks(&self, query: PullQuery<'_>) -> StoreResult<Vec<PullTaskRecord>> {
        let limit = query.limit.min(PULL_QUERY_LIMIT_MAX);
        if limit == 0 || query.topics.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT p.* FROM UNNEST($1::text[]) AS t(topic) CROSS JOIN LATERAL ( \
                 SELECT {PULL_COLUMNS} FROM pull_tasks \
                 WHERE topic = t.topic AND worker IS NULL \
                 ORDER BY offered_at_ms, instance, node COLLATE \"C\" LIMIT $2) AS p"
        );
        let rows = sqlx::query(&sql)
            .bind(query.topics)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await;
        Ok(merge_offered(map_all(rows, pull_from_row)?, limit))
    }

    async fn pull_tasks(&self, instance: InstanceId) -> StoreResult<Vec<PullTaskRecord>> {
        let sql = format!(
            "SELECT {PULL_COLUMNS} FROM pull_tasks WHERE instance = $1 ORDER BY node COLLATE \"C\""
        );
        let rows = sqlx::query(&sql).bind(instance).fetch_all(&self.pool);
        map_all(rows.await, pull_from_row)
    }

    /// One indexed range walk per walk of the query (`common::task_walks`), each
    /// stopping at the limit, merged.
    async fn user_tasks(&self, query: &UserTaskQuery) -> StoreResult<Vec<UserTaskRecord>> {
        let walks = task_walks(query);
        let merging = walks.len() > 1;
        let mut out = Vec::new();
        for walk in walks {
            let mut q = user_tasks_query::<Postgres>(query, walk, "JOIN", "UUID", "");
            let rows = q.build().fetch_all(&self.pool).await;
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
            "SELECT {USER_TASK_COLUMNS} FROM user_tasks AS t WHERE t.instance = $1 ORDER BY t.node"
        );
        let rows = sqlx::query(&sql).bind(instance).fetch_all(&self.pool);
        map_all(rows.await, user_task_from_row)
    }

    /// The names' existing keys by `camunda_keys_name`, the missing ones inserted (in the
    /// unique index's order, so two replicas inserting the same names lock them in the
    /// same order and never deadlock; a conflict skips the row and an identity value),
    /// then every key read back in the names' order.
    async fn camunda_keys(&self, names: &[KeyName]) -> StoreResult<Vec<i64>> {
        check_key_names(names)?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut instances = Vec::with_capacity(names.len());
        let mut kinds = Vec::with_capacity(names.len());
        let mut nodes = Vec::with_capacity(names.len());
        let mut attempts = Vec::with_capacity(names.len());
        for name in names {
            instances.push(name.instance);
            kinds.push(name.kind.as_str());
            nodes.push(name.node.as_str());
            attempts.push(i64::from(name.attempt));
        }
        let wanted = "SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::bigint[]) \
             WITH ORDINALITY AS w(instance, kind, node, attempt, n)";
        let missing = sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM ({wanted}) AS w WHERE NOT EXISTS (SELECT 1 FROM camunda_keys AS k \
             WHERE (k.instance, k.kind, k.node, k.attempt) = (w.instance, w.kind, w.node, w.attempt))"
        ))
        .bind(&instances)
        .bind(&kinds)
        .bind(&nodes)
        .bind(&attempts)
        .fetch_one(&self.pool)
        .await
        .map_err(backend)?;
        if missing > 0 {
            // Only names whose instance row exists, locked against a purge for the
            // statement (a purge's `FOR UPDATE SKIP LOCKED` passes it over; one that
            // holds it first has deleted it when the lock is granted, and the name is
            // left out): no key outlives its instance.
            sqlx::query(&format!(
                "WITH live AS (SELECT id FROM instances WHERE id = ANY($1::uuid[]) \
                     ORDER BY id FOR KEY SHARE) \
                 INSERT INTO camunda_keys (instance, kind, node, attempt) \
                 SELECT instance, kind, node, attempt FROM ({wanted}) AS w \
                 WHERE w.instance IN (SELECT id FROM live) \
                 ORDER BY instance, kind, node COLLATE \"C\", attempt \
                 ON CONFLICT ON CONSTRAINT camunda_keys_name DO NOTHING"
            ))
            .bind(&instances)
            .bind(&kinds)
            .bind(&nodes)
            .bind(&attempts)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        }
        let keys = sqlx::query_scalar::<_, i64>(&format!(
            "SELECT k.key FROM ({wanted}) AS w JOIN camunda_keys AS k \
             ON (k.instance, k.kind, k.node, k.attempt) = (w.instance, w.kind, w.node, w.attempt) \
             ORDER BY w.n"
        ))
        .bind(&instances)
        .bind(&kinds)
        .bind(&nodes)
        .bind(&attempts)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        if keys.len() != names.len() {
            // A name without a key names no instance of the store (never created, or
            // purged meanwhile).
            let gone: Vec<uuid::Uuid> = sqlx::query_scalar(
                "SELECT i FROM UNNEST($1::uuid[]) AS i WHERE NOT EXISTS \
                 (SELECT 1 FROM instances WHERE id = i) LIMIT 1",
            )
            .bind(&instances)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
            return Err(match gone.first() {
                Some(id) => StoreError::UnknownInstance(*id),
                None => StoreError::Corrupt(format!(
                    "{} of {} names have a Camunda key after they were given one",
                    keys.len(),
                    names.len()
                )),
            });
        }
        Ok(keys)
    }

    async fn buffer_message(&self, message: &NewBufferedMessage) -> StoreResult<BufferOutcome> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        if let Some(id) = &message.message_id {
            // Takers go with the message (ON DELETE CASCADE).
            sqlx::query(
                "DELETE FROM buffered_messages WHERE name = $1 AND correlation_key = $2 \
                 AND message_id = $3 AND expires_at_ms <= $4",
            )
            .bind(&message.name)
            .bind(&message.correlation_key)
            .bind(id)
            .bind(message.published_at_ms)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        // The unique index settles two publications of one id racing.
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO buffered_messages (key, name, correlation_key, message_id, variables, \
             published_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT DO NOTHING RETURNING id",
        )
        .bind(message.key)
        .bind(&message.name)
        .bind(&message.correlation_key)
        .bind(&message.message_id)
        .bind(&message.variables)
        .bind(message.published_at_ms)
        .bind(message.expires_at_ms)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        let outcome = match id {
            Some(id) => BufferOutcome::Buffered { id },
            None => {
                let key: i64 = sqlx::query_scalar(
                    "SELECT key FROM buffered_messages WHERE name = $1 \
                     AND correlation_key = $2 AND message_id = $3",
                )
                .bind(&message.name)
                .bind(&message.correlation_key)
                .bind(&message.message_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(backend)?;
                BufferOutcome::Duplicate { key }
            }
        };
        tx.commit().await.map_err(backend)?;
        Ok(outcome)
    }

    async fn buffered_messages(&self, query: BufferQuery<'_>) -> StoreResult<Vec<BufferedMessage>> {
        let limit = i64::from(effective_buffered_limit(query.limit));
        let join = |inner: &str| {
            format!(
                "SELECT {BUFFERED_COLUMNS} FROM ({inner}) AS m \
                 LEFT JOIN message_takers AS t ON t.message = m.id \
                 ORDER BY m.id, t.process COLLATE \"C\""
            )
        };
        let rows = match query.name_and_key {
            Some((name, key)) => {
                let sql = join(
                    "SELECT * FROM buffered_messages WHERE name = $1 AND correlation_key = $2 \
                     AND id > $3 AND expires_at_ms > $4 ORDER BY id LIMIT $5",
                );
                sqlx::query(&sql)
                    .bind(name)
                    .bind(key)
                    .bind(query.after)
                    .bind(query.now_ms)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await
            }
            None => {
                let sql = join(
                    "SELECT * FROM buffered_messages WHERE id > $1 AND expires_at_ms > $2 \
                     ORDER BY id LIMIT $3",
                );
                sqlx::query(&sql)
                    .bind(query.after)
                    .bind(query.now_ms)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await
            }
        };
        buffered_from_rows(&rows.map_err(backend)?)
    }

    async fn expire_messages(&self, now_ms: i64, limit: u32) -> StoreResult<u64> {
        if limit == 0 {
            return Ok(0);
        }
        // Rows a take is locking are skipped, not waited for: the next expiry gets them.
        let done = sqlx::query(
            "DELETE FROM buffered_messages WHERE id IN (SELECT id FROM buffered_messages \
             WHERE expires_at_ms <= $1 ORDER BY expires_at_ms, id LIMIT $2 \
             FOR UPDATE SKIP LOCKED)",
        )
        .bind(now_ms)
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(done.rows_affected())
    }

    async fn camunda_key(&self, key: i64) -> StoreResult<Option<KeyName>> {
        let row =
            sqlx::query("SELECT instance, kind, node, attempt FROM camunda_keys WHERE key = $1")
                .bind(key)
                .fetch_optional(&self.pool);
        map_optional(row.await, key_name_from_row)
    }

    /// The `attempts` rows, then the row's packed history (`0017_attempts_in_row.sql`),
    /// read in one snapshot: a commit that moves the row's records to the table between two
    /// reads could otherwise hide them from both.
    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        let sql = format!("SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE instance = $1 ORDER BY id");
        let rows = sqlx::query(&sql).bind(instance).fetch_all(&mut *tx);
        let mut out = map_all(rows.await, attempt_from_row)?;
        let body: Option<Option<Vec<u8>>> =
            sqlx::query_scalar("SELECT history FROM instances WHERE id = $1")
                .bind(instance)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        if let Some(Some(body)) = body {
            out.extend(history::unpack(instance, &body)?);
        }
        Ok(out)
    }

    /// One walk of the instance's chain (`0014_journal_in_append_order.sql`) from its
    /// newest row down to `after`, by each row's primary key. Paging an instance of N rows
    /// a page of L at a time walks about N²/2L rows in all: fine for the histories
    /// instances have; a replay reads pages of 1,000.
    async fn journal(
        &self,
        instance: InstanceId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>> {
        // Every stored seq fits a BIGINT: nothing comes after a larger one.
        let Ok(after) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        let sql = format!(
            "WITH RECURSIVE chain(id) AS ( \
                 SELECT journal_last FROM instances WHERE id = $1 AND journal_last IS NOT NULL \
                 UNION ALL \
                 SELECT j.prev FROM journal AS j JOIN chain AS c ON j.id = c.id \
                     WHERE j.prev IS NOT NULL AND j.prev < j.id AND j.seq > $2) \
             SELECT {JOURNAL_COLUMNS} FROM journal WHERE id IN (SELECT id FROM chain) \
             AND seq > $2 ORDER BY seq LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(instance)
            .bind(after)
            .bind(journal_limit(limit))
            .fetch_all(&self.pool);
        map_all(rows.await, journal_from_row)
    }

    async fn claim_due_outbox(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<OutboxRecord>> {
        let limit = effective_outbox_claim_limit(claim.limit);
        if limit == 0 {
            return Ok(Vec::new());
        }
        claimed_outbox(&self.relaxed_claim(OUTBOX_CLAIM_SQL, claim, limit).await?)
    }

    /// One synchronous transaction: the row's update and, for a poisoned row, its
    /// incident. A poison first locks the instance row `FOR KEY SHARE` — the lock the
    /// incident's foreign key would take anyway — before it touches the outbox row: a
    /// commit holds its instance `FOR UPDATE` and then deletes outbox rows, so taking the
    /// two locks in the other order could deadlock with a commit withdrawing this row.
    /// A delivered or failed try locks the outbox row only (its update does not touch
    /// the foreign key), so it cannot wait on an instance.
    async fn record_delivery(
        &self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: DeliveryRecord,
    ) -> StoreResult<bool> {
        let mut tx: Tx = self.pool.begin().await.map_err(backend)?;
        if matches!(record, DeliveryRecord::Poisoned { .. }) {
            let instance = sqlx::query(
                "SELECT 1 FROM instances \
                 WHERE id = (SELECT instance FROM outbox WHERE key = $1) FOR KEY SHARE",
            )
            .bind(key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
            if instance.is_none() {
                tx.rollback().await.map_err(backend)?;
                return Ok(false);
            }
        }
        let tried: Option<(InstanceId, String, i64)> = sqlx::query_as(RECORD_DELIVERY_SQL)
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
                 VALUES ($1, $2, $3, $4, $5)",
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
            .fetch_one(&self.pool)
            .await
            .map_err(backend)
    }

    async fn outbox_row(&self, key: &str) -> StoreResult<Option<OutboxRecord>> {
        let sql = format!("SELECT {OUTBOX_COLUMNS} FROM outbox WHERE key = $1");
        let row = sqlx::query(&sql).bind(key).fetch_optional(&self.pool);
        map_optional(row.await, outbox_from_row)
    }

    async fn outbox(&self, instance: InstanceId) -> StoreResult<Vec<OutboxRecord>> {
        let sql = format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE instance = $1 \
             ORDER BY created_at_ms, key COLLATE \"C\""
        );
        let rows = sqlx::query(&sql).bind(instance).fetch_all(&self.pool);
        map_all(rows.await, outbox_from_row)
    }
}
