//! Helpers shared by the SQLite and PostgreSQL stores: column lists, row mapping, batch
//! planning, the deployment cache, integer conversions with corruption checks, and error
//! mapping. Nothing here sends a statement.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use qflow_store::memory::{effective_instances_limit, node_timer_names};
use qflow_store::{
    Attempt, AttemptOutcome, AttemptRecord, AuditRecord, BufferedMessage, Commit, CommitOutcome,
    DeploymentId, DeploymentRecord, IncidentRecord, InstanceFilter, InstanceId, InstanceRecord,
    InstanceStatus, JournalEntry, KeyKind, KeyName, NewOutboxRow, OutboxRecord, OutboxState,
    PullTaskRecord, PurgeRequest, ScheduleRecord, StoreError, StoreResult, SubscriptionRecord,
    TimerName, TimerRecord, UserTaskQuery, UserTaskRecord, CAMUNDA_KEYS_MAX, JOURNAL_PAGE_MAX,
    PURGE_LIMIT_MAX,
};
use sqlx::{ColumnIndex, Database, Decode, Encode, QueryBuilder, Row, Type};

/// In-row attempt-history bytes (`instances.history`: SQLite's `0019_attempts_in_row.sql`,
/// PostgreSQL's `0017_attempts_in_row.sql`) past which a commit moves them to the
/// `attempts` table: about 30 records of a typical task, and a row that still fits its
/// page beside a snapshot. Both stores spill at the same size.
pub(crate) const HISTORY_SPILL_BYTES: i64 = 2048;

pub(crate) const DEPLOYMENT_COLUMNS: &str =
    "id, process_id, content_hash, source, deployed_at_ms, retired";
pub(crate) const INSTANCE_COLUMNS: &str = "id, deployment, fence, status, failure_code, \
     snapshot, business_key, created_at_ms, updated_at_ms, ended_at_ms";
pub(crate) const TIMER_COLUMNS: &str = "instance, name, due_at_ms, incarnation";
pub(crate) const INCIDENT_COLUMNS: &str =
    "id, instance, node, code, message, opened_at_ms, resolved_at_ms";
/// A buffered message joined with its takers (`m`, `t`): one row per taker, or one with
/// a NULL `process` when there is none, ordered by `m.id`, then `t.process`.
pub(crate) const BUFFERED_COLUMNS: &str = "m.id, m.key, m.name, m.correlation_key, \
     m.message_id, m.variables, m.published_at_ms, m.expires_at_ms, t.process";
pub(crate) const SUBSCRIPTION_COLUMNS: &str =
    "instance, node, message, correlation_key, opened_at_ms";
pub(crate) const ATTEMPT_COLUMNS: &str =
    "instance, node, attempt, started_at_ms, finished_at_ms, outcome, code, message, worker";
pub(crate) const PULL_COLUMNS: &str =
    "instance, node, topic, attempt, worker, lock_until_ms, offered_at_ms";
/// The columns of a `user_tasks` row, qualified by the alias `t` every task-list query
/// gives the table.
pub(crate) const USER_TASK_COLUMNS: &str = "t.instance, t.node, t.deployment, t.assignee, \
     t.candidate_groups, t.candidate_users, t.created_at_ms";

pub(crate) const JOURNAL_COLUMNS: &str =
    "seq, deployment, at_ms, input, delta, snapshot_hash, effects_hash, row_hash";

pub(crate) const OUTBOX_COLUMNS: &str = "key, instance, node, channel, attempt, call_id, body, \
     created_at_ms, state, deliveries, due_at_ms, last_error";

/// Wraps a driver error as the store contract's backend error.
pub(crate) fn backend(e: sqlx::Error) -> StoreError {
    StoreError::Backend(Box::new(e))
}

/// One column of a result row, by name, with driver errors mapped.
pub(crate) trait Field<T> {
    fn field(&self, name: &str) -> StoreResult<T>;
}

impl<R, T> Field<T> for R
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    T: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    fn field(&self, name: &str) -> StoreResult<T> {
        self.try_get(name).map_err(backend)
    }
}

/// A result row of either backend: the column types the row mappers read, and the
/// instance id, which SQLite keeps as text and PostgreSQL as `uuid`.
pub(crate) trait StoreRow:
    Field<i64>
    + Field<Option<i64>>
    + Field<bool>
    + Field<String>
    + Field<Option<String>>
    + Field<Vec<u8>>
{
    fn instance_id(&self, name: &str) -> StoreResult<InstanceId>;
}

/// Maps every fetched row, or passes the driver error on.
pub(crate) fn map_all<R, T>(
    rows: Result<Vec<R>, sqlx::Error>,
    map: impl Fn(&R) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    rows.map_err(backend)?.iter().map(map).collect()
}

/// Maps the row if one was fetched, or passes the driver error on.
pub(crate) fn map_optional<R, T>(
    row: Result<Option<R>, sqlx::Error>,
    map: impl Fn(&R) -> StoreResult<T>,
) -> StoreResult<Option<T>> {
    row.map_err(backend)?.as_ref().map(map).transpose()
}

/// Reads `DEPLOYMENT_COLUMNS`.
pub(crate) fn deployment_from_row(row: &impl StoreRow) -> StoreResult<DeploymentRecord> {
    Ok(DeploymentRecord {
        id: DeploymentId(row.field("id")?),
        process_id: row.field("process_id")?,
        content_hash: row.field("content_hash")?,
        source: row.field("source")?,
        deployed_at_ms: row.field("deployed_at_ms")?,
        retired: row.field("retired")?,
    })
}

/// Reads `INSTANCE_COLUMNS`.
pub(crate) fn instance_from_row(row: &impl StoreRow) -> StoreResult<InstanceRecord> {
    let status: String = row.field("status")?;
    Ok(InstanceRecord {
        id: row.instance_id("id")?,
        deployment: DeploymentId(row.field("deployment")?),
        fence: fence_from_db(row.field("fence")?)?,
        status: status_from_db(&status)?,
        failure_code: row.field("failure_code")?,
        snapshot: row.field("snapshot")?,
        business_key: row.field("business_key")?,
        created_at_ms: row.field("created_at_ms")?,
        updated_at_ms: row.field("updated_at_ms")?,
        ended_at_ms: row.field("ended_at_ms")?,
    })
}

/// Reads `TIMER_COLUMNS`.
pub(crate) fn timer_from_row(row: &impl StoreRow) -> StoreResult<TimerRecord> {
    let name: String = row.field("name")?;
    Ok(TimerRecord {
        instance: row.instance_id("instance")?,
        name: timer_name_from_db(&name)?,
        due_at_ms: row.field("due_at_ms")?,
        incarnation: u32_from_db("incarnation", row.field("incarnation")?)?,
    })
}

/// The columns [`schedule_from_row`] reads.
pub(crate) const SCHEDULE_COLUMNS: &str = "deployment, node, due_at_ms, remaining";

/// Reads `SCHEDULE_COLUMNS`.
pub(crate) fn schedule_from_row(row: &impl StoreRow) -> StoreResult<ScheduleRecord> {
    let remaining: Option<i64> = row.field("remaining")?;
    Ok(ScheduleRecord {
        deployment: DeploymentId(row.field("deployment")?),
        node: row.field("node")?,
        due_at_ms: row.field("due_at_ms")?,
        remaining: remaining.map(|r| u32_from_db("remaining", r)).transpose()?,
    })
}

/// Claimed schedules in the contract's order: earliest due first, then by deployment
/// and node (a `RETURNING` clause gives rows in no promised order).
pub(crate) fn claimed_schedules(rows: &[impl StoreRow]) -> StoreResult<Vec<ScheduleRecord>> {
    let mut claimed = rows
        .iter()
        .map(schedule_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
    claimed.sort_by(|a, b| {
        (a.due_at_ms, a.deployment, &a.node).cmp(&(b.due_at_ms, b.deployment, &b.node))
    });
    Ok(claimed)
}

/// Reads `INCIDENT_COLUMNS`.
pub(crate) fn incident_from_row(row: &impl StoreRow) -> StoreResult<IncidentRecord> {
    Ok(IncidentRecord {
        id: row.field("id")?,
        instance: row.instance_id("instance")?,
        node: row.field("node")?,
        code: row.field("code")?,
        message: row.field("message")?,
        opened_at_ms: row.field("opened_at_ms")?,
        resolved_at_ms: row.field("resolved_at_ms")?,
    })
}

/// Reads `SUBSCRIPTION_COLUMNS`.
pub(crate) fn subscription_from_row(row: &impl StoreRow) -> StoreResult<SubscriptionRecord> {
    Ok(SubscriptionRecord {
        instance: row.instance_id("instance")?,
        node: row.field("node")?,
        message: row.field("message")?,
        key: row.field("correlation_key")?,
        opened_at_ms: row.field("opened_at_ms")?,
    })
}

/// Reads a `status, n` count row.
pub(crate) fn status_count_from_row(row: &impl StoreRow) -> StoreResult<(InstanceStatus, u64)> {
    let status: String = row.field("status")?;
    let n: i64 = row.field("n")?;
    let status = InstanceStatus::parse(&status)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown instance status `{status}`")))?;
    let n = u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("a count of {n}")))?;
    Ok((status, n))
}

/// Every status with its count (0 for those `rows` lack), in [`InstanceStatus`] order.
pub(crate) fn all_counts(rows: Vec<(InstanceStatus, u64)>) -> Vec<(InstanceStatus, u64)> {
    InstanceStatus::ALL
        .into_iter()
        .map(|s| (s, rows.iter().find(|(r, _)| *r == s).map_or(0, |(_, n)| *n)))
        .collect()
}

/// The count queries behind `Store::instance_counts`: one count per status, each a range
/// of an index that begins with the status (`(status, created_at_ms, id)`), or, for one
/// deployment (bound first), of the `(deployment, status, …)` one.
pub(crate) const INSTANCE_COUNTS_SQL: &str =
    "SELECT status, count(*) AS n FROM instances GROUP BY status";
pub(crate) fn instance_counts_of_deployment_sql(placeholder: &str) -> String {
    format!("SELECT status, count(*) AS n FROM instances WHERE deployment = {placeholder} GROUP BY status")
}

pub(crate) const AUDIT_COLUMNS: &str =
    "id, instance, at_ms, actor, action, detail, fence_before, fence_after";

/// The fences an applied commit moved between, as the audit log records them.
pub(crate) fn audit_fences(commit: &Commit) -> Result<(Option<i64>, i64), StoreError> {
    let before = commit.expected_fence.map(fence_to_db).transpose()?;
    let after = fence_to_db(commit.expected_fence.map_or(1, |f| f.saturating_add(1)))?;
    Ok((before, after))
}

/// Reads `AUDIT_COLUMNS`.
pub(crate) fn audit_from_row(row: &impl StoreRow) -> StoreResult<AuditRecord> {
    let before: Option<i64> = row.field("fence_before")?;
    Ok(AuditRecord {
        id: row.field("id")?,
        instance: row.instance_id("instance")?,
        at_ms: row.field("at_ms")?,
        actor: row.field("actor")?,
        action: row.field("action")?,
        detail: row.field("detail")?,
        fence_before: before.map(fence_from_db).transpose()?,
        fence_after: fence_from_db(row.field("fence_after")?)?,
    })
}

/// Reads `ATTEMPT_COLUMNS`.
pub(crate) fn attempt_from_row(row: &impl StoreRow) -> StoreResult<AttemptRecord> {
    let outcome: String = row.field("outcome")?;
    Ok(AttemptRecord {
        instance: row.instance_id("instance")?,
        node: row.field("node")?,
        attempt: attempt_from_db(row.field("attempt")?)?,
        started_at_ms: row.field("started_at_ms")?,
        finished_at_ms: row.field("finished_at_ms")?,
        outcome: outcome_from_db(&outcome)?,
        code: row.field("code")?,
        message: row.field("message")?,
        worker: row.field("worker")?,
    })
}

/// Reads `JOURNAL_COLUMNS`.
pub(crate) fn journal_from_row(row: &impl StoreRow) -> StoreResult<JournalEntry> {
    let seq: i64 = row.field("seq")?;
    Ok(JournalEntry {
        seq: u64::try_from(seq)
            .map_err(|_| StoreError::Corrupt(format!("stored journal seq {seq} is negative")))?,
        deployment: DeploymentId(row.field("deployment")?),
        at_ms: row.field("at_ms")?,
        input: row.field("input")?,
        delta: row.field("delta")?,
        snapshot_hash: row.field("snapshot_hash")?,
        effects_hash: row.field("effects_hash")?,
        row_hash: row.field("row_hash")?,
    })
}

/// A journal row's `seq` as the `BIGINT`/`INTEGER` column holds it.
pub(crate) fn seq_to_db(seq: u64) -> Result<i64, StoreError> {
    i64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("journal seq {seq} out of range")))
}

/// The rows one journal read returns: 0 is [`JOURNAL_PAGE_MAX`], more is capped at it.
pub(crate) fn journal_limit(limit: u32) -> i64 {
    i64::from(match limit {
        0 => JOURNAL_PAGE_MAX,
        n => n.min(JOURNAL_PAGE_MAX),
    })
}

/// Rows of several per-topic scans as one fetch: oldest offer first, then instance and
/// node (the contract's order), at most `limit`, no row twice (a topic named twice).
pub(crate) fn merge_offered(mut rows: Vec<PullTaskRecord>, limit: u32) -> Vec<PullTaskRecord> {
    rows.sort_by(|a, b| {
        (a.offered_at_ms, a.instance, &a.node).cmp(&(b.offered_at_ms, b.instance, &b.node))
    });
    rows.dedup_by(|a, b| a.instance == b.instance && a.node == b.node);
    rows.truncate(limit as usize);
    rows
}

/// Reads `PULL_COLUMNS`.
/// Refuses more names than one [`Store::camunda_keys`] call takes.
pub(crate) fn check_key_names(names: &[KeyName]) -> StoreResult<()> {
    if names.len() > CAMUNDA_KEYS_MAX {
        return Err(StoreError::Corrupt(format!(
            "{} names asked for Camunda keys at once; at most {CAMUNDA_KEYS_MAX}",
            names.len()
        )));
    }
    Ok(())
}

/// The name a `camunda_keys` row gave its key.
pub(crate) fn key_name_from_row(row: &impl StoreRow) -> StoreResult<KeyName> {
    let kind: String = row.field("kind")?;
    Ok(KeyName {
        instance: row.instance_id("instance")?,
        kind: KeyKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("stored key kind {kind:?} is not one")))?,
        node: row.field("node")?,
        attempt: u32_from_db("attempt", row.field("attempt")?)?,
    })
}

pub(crate) fn pull_from_row(row: &impl StoreRow) -> StoreResult<PullTaskRecord> {
    Ok(PullTaskRecord {
        instance: row.instance_id("instance")?,
        node: row.field("node")?,
        topic: row.field("topic")?,
        attempt: attempt_from_db(row.field("attempt")?)?,
        worker: row.field("worker")?,
        lock_until_ms: row.field("lock_until_ms")?,
        offered_at_ms: row.field("offered_at_ms")?,
    })
}

/// The pull rows of a commit to upsert: the last offer per node (a step may lock what
/// it offered a moment before), so one statement never names a row twice.
pub(crate) fn last_offer_per_node(commit: &Commit) -> Vec<&PullTaskRecord> {
    let mut out: Vec<&PullTaskRecord> = Vec::with_capacity(commit.pull.offer.len());
    for row in commit.pull.offer.iter().rev() {
        if !out.iter().any(|r| r.node == row.node) {
            out.push(row);
        }
    }
    out.reverse();
    out
}

/// Reads `OUTBOX_COLUMNS` (a claim's `RETURNING *` has them too).
pub(crate) fn outbox_from_row(row: &impl StoreRow) -> StoreResult<OutboxRecord> {
    let state: String = row.field("state")?;
    Ok(OutboxRecord {
        key: row.field("key")?,
        instance: row.instance_id("instance")?,
        node: row.field("node")?,
        channel: row.field("channel")?,
        attempt: attempt_from_db(row.field("attempt")?)?,
        call_id: row.field("call_id")?,
        body: row.field("body")?,
        created_at_ms: row.field("created_at_ms")?,
        state: OutboxState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown outbox state {state:?}")))?,
        deliveries: deliveries_from_db(row.field("deliveries")?)?,
        due_at_ms: row.field("due_at_ms")?,
        last_error: row.field("last_error")?,
    })
}

pub(crate) fn deliveries_from_db(value: i64) -> Result<u32, StoreError> {
    u32_from_db("delivery count", value)
}

/// The rows an outbox claim's `RETURNING` gave, earliest due first and then by key (as
/// bytes), as the contract says (`RETURNING` itself promises no order).
pub(crate) fn claimed_outbox(rows: &[impl StoreRow]) -> StoreResult<Vec<OutboxRecord>> {
    let mut claimed = rows
        .iter()
        .map(outbox_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
    claimed.sort_by(|a, b| (a.due_at_ms, &a.key).cmp(&(b.due_at_ms, &b.key)));
    Ok(claimed)
}

/// The outbox rows a round's winners emit, each key once: the first emission of a key
/// wins, in batch order (the contract's rule within a commit, kept across a round so
/// that one statement never inserts a key twice and no backend's tie-breaking decides).
/// `W` is how the caller names the winner's instance.
pub(crate) fn first_emit_per_key<'a, W: Copy>(
    winners: impl IntoIterator<Item = (W, &'a Commit)>,
) -> Vec<(W, &'a Commit, &'a NewOutboxRow)> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for (who, commit) in winners {
        for row in &commit.outbox.emit {
            if seen.insert(row.key.as_str()) {
                out.push((who, commit, row));
            }
        }
    }
    out
}

/// Reads `USER_TASK_COLUMNS`; the candidate lists are JSON arrays of names.
pub(crate) fn user_task_from_row(row: &impl StoreRow) -> StoreResult<UserTaskRecord> {
    let names = |column: &str| -> StoreResult<Vec<String>> {
        let text: String = row.field(column)?;
        serde_json::from_str(&text)
            .map_err(|e| StoreError::Corrupt(format!("user_tasks.{column} {text:?}: {e}")))
    };
    Ok(UserTaskRecord {
        instance: row.instance_id("instance")?,
        node: row.field("node")?,
        deployment: DeploymentId(row.field("deployment")?),
        assignee: row.field("assignee")?,
        candidate_groups: names("candidate_groups")?,
        candidate_users: names("candidate_users")?,
        created_at_ms: row.field("created_at_ms")?,
    })
}

/// A candidate list as the `user_tasks` row stores it.
pub(crate) fn names_to_db(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned())
}

/// The user-task rows of a commit to upsert: the last offer per node, so one statement
/// never names a row twice.
pub(crate) fn last_task_offer_per_node(commit: &Commit) -> Vec<&UserTaskRecord> {
    let mut out: Vec<&UserTaskRecord> = Vec::with_capacity(commit.user_tasks.offer.len());
    for row in commit.user_tasks.offer.iter().rev() {
        if !out.iter().any(|r| r.node == row.node) {
            out.push(row);
        }
    }
    out.reverse();
    out
}

/// The assignee changes of a commit: the last per node.
pub(crate) fn last_assign_per_node(commit: &Commit) -> Vec<(&str, Option<&str>)> {
    let mut out: Vec<(&str, Option<&str>)> = Vec::new();
    for (node, assignee) in commit.user_tasks.assign.iter().rev() {
        if !out.iter().any(|(n, _)| n == node) {
            out.push((node.as_str(), assignee.as_deref()));
        }
    }
    out.reverse();
    out
}

/// The index a task-list query walks: the most selective one its filters name. The
/// other filters are conditions on the rows the walk meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskWalk<'q> {
    Assignee(&'q str),
    /// `user_task_candidates` by `(kind, name)`.
    Candidate {
        kind: &'static str,
        name: &'q str,
    },
    Deployment(i64),
    Created,
}

/// The walks a query takes: one, or one per candidate group (merged by the caller with
/// [`qflow_store::merge_user_tasks`]).
pub(crate) fn task_walks(q: &UserTaskQuery) -> Vec<TaskWalk<'_>> {
    if let Some(a) = &q.assignee {
        return vec![TaskWalk::Assignee(a)];
    }
    if let Some(u) = &q.candidate_user {
        return vec![TaskWalk::Candidate {
            kind: "user",
            name: u,
        }];
    }
    if !q.candidate_groups.is_empty() {
        let mut groups: Vec<&str> = q.candidate_groups.iter().map(String::as_str).collect();
        groups.sort_unstable();
        groups.dedup();
        return groups
            .into_iter()
            .map(|name| TaskWalk::Candidate {
                kind: "group",
                name,
            })
            .collect();
    }
    match q.deployment {
        Some(d) => vec![TaskWalk::Deployment(d.0)],
        None => vec![TaskWalk::Created],
    }
}

/// `SELECT USER_TASK_COLUMNS` of one walk of a task-list query, in the listing order
/// after the query's cursor, at most its limit. `join` joins the candidates to their
/// tasks (`CROSS JOIN` on SQLite, which keeps the candidates as the outer loop, `JOIN`
/// on PostgreSQL); `id_type` is the SQL type an id given as text is cast to; `explain`
/// is put before the statement (`EXPLAIN QUERY PLAN `, for the plan tests) or empty.
pub(crate) fn user_tasks_query<'q, DB>(
    q: &'q UserTaskQuery,
    walk: TaskWalk<'q>,
    join: &str,
    id_type: &str,
    explain: &str,
) -> QueryBuilder<'q, DB>
where
    DB: Database,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> String: Encode<'a, DB> + Type<DB>,
{
    // The walked table: its columns carry the order and the cursor.
    let (mut query, by) = match walk {
        TaskWalk::Candidate { kind, name } => {
            let mut query = QueryBuilder::new(format!(
                "{explain}SELECT {USER_TASK_COLUMNS} FROM user_task_candidates AS c {join} user_tasks AS t \
                 ON t.instance = c.instance AND t.node = c.node WHERE c.kind = "
            ));
            query.push_bind(kind).push(" AND c.name = ").push_bind(name);
            (query, "c")
        }
        walk => {
            let mut query = QueryBuilder::new(format!(
                "{explain}SELECT {USER_TASK_COLUMNS} FROM user_tasks AS t WHERE 1 = 1"
            ));
            match walk {
                TaskWalk::Assignee(a) => {
                    query.push(" AND t.assignee = ").push_bind(a);
                }
                TaskWalk::Deployment(d) => {
                    query.push(" AND t.deployment = ").push_bind(d);
                }
                _ => {}
            }
            (query, "t")
        }
    };
    let walked_assignee = matches!(walk, TaskWalk::Assignee(_));
    let walked_user = matches!(walk, TaskWalk::Candidate { kind: "user", .. });
    let walked_group = matches!(walk, TaskWalk::Candidate { kind: "group", .. });
    if let (Some(a), false) = (&q.assignee, walked_assignee) {
        query.push(" AND t.assignee = ").push_bind(a.as_str());
    }
    match q.assigned {
        Some(true) => {
            query.push(" AND t.assignee IS NOT NULL");
        }
        Some(false) => {
            query.push(" AND t.assignee IS NULL");
        }
        None => {}
    }
    if let (Some(d), false) = (q.deployment, matches!(walk, TaskWalk::Deployment(_))) {
        query.push(" AND t.deployment = ").push_bind(d.0);
    }
    // Each EXISTS is a lookup by the candidates' `(instance, node)` index.
    if let (Some(u), false) = (&q.candidate_user, walked_user) {
        query
            .push(
                " AND EXISTS (SELECT 1 FROM user_task_candidates AS u WHERE u.instance = \
                 t.instance AND u.node = t.node AND u.kind = 'user' AND u.name = ",
            )
            .push_bind(u.as_str())
            .push(")");
    }
    if !q.candidate_groups.is_empty() && !walked_group {
        query.push(
            " AND EXISTS (SELECT 1 FROM user_task_candidates AS g WHERE g.instance = \
             t.instance AND g.node = t.node AND g.kind = 'group' AND g.name IN (",
        );
        let mut names = query.separated(", ");
        for g in &q.candidate_groups {
            names.push_bind(g.as_str());
        }
        query.push("))");
    }
    if let Some((at, id, node)) = &q.after {
        query
            .push(format!(
                " AND ({by}.created_at_ms, {by}.instance, {by}.node) > ("
            ))
            .push_bind(*at)
            .push(", CAST(")
            .push_bind(id.to_string())
            .push(format!(" AS {id_type}), "))
            .push_bind(node.as_str())
            .push(")");
    }
    query
        .push(format!(
            " ORDER BY {by}.created_at_ms, {by}.instance, {by}.node LIMIT "
        ))
        .push_bind(i64::from(q.effective_limit()));
    query
}

/// The timers a claim's `RETURNING` gave, earliest due first as the contract says
/// (`RETURNING` itself promises no order).
pub(crate) fn claimed_timers(rows: &[impl StoreRow]) -> StoreResult<Vec<TimerRecord>> {
    let mut claimed = rows
        .iter()
        .map(timer_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
    claimed.sort_by(|a, b| {
        (a.due_at_ms, a.instance, &a.name).cmp(&(b.due_at_ms, b.instance, &b.name))
    });
    Ok(claimed)
}

/// How a listing of instances tests their status: which statement shape the backend's
/// indexes serve in the listing's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusArms {
    /// One `SELECT`, the status (when filtered) a bound parameter: PostgreSQL, whose
    /// indexes include `(created_at_ms, id)` and `(deployment, created_at_ms, id)`
    /// (PostgreSQL 15 would sort every row the arms below match, not merge them).
    One,
    /// One `SELECT` per status, each naming its status as a literal and read in order
    /// from `(status, created_at_ms)` or `(deployment, status, created_at_ms)` (the
    /// instances of one millisecond sorted by id), merged by `UNION ALL … ORDER BY`
    /// (SQLite's plan: `MERGE (UNION ALL)`): SQLite since
    /// `0021_fewer_instance_indexes.sql`, which dropped the two indexes that served a
    /// listing without a status. A filter by failure code is read as [`StatusArms::One`]
    /// whatever the backend: the partial index of the instances that have a code
    /// (`0022_status_indexes_without_id.sql`) holds every one in order.
    PerStatus,
}

/// `SELECT INSTANCE_COLUMNS` of the instances matching `filter`, oldest first, at most
/// the contract's limit, after `prefix` (`EXPLAIN QUERY PLAN ` for the plan tests, or
/// nothing). `id_type` is the SQL type an id given as text is cast to for the keyset
/// comparison (`TEXT` on SQLite, `UUID` on PostgreSQL): both order ids as the store
/// contract does, by their bytes (lowercase hyphenated text sorts the same way).
pub(crate) fn instances_query<'f, DB>(
    filter: &'f InstanceFilter,
    id_type: &str,
    arms: StatusArms,
    prefix: &str,
) -> QueryBuilder<'f, DB>
where
    DB: Database,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> String: Encode<'a, DB> + Type<DB>,
{
    let mut query = QueryBuilder::new(prefix);
    // A filter by failure code is one read, whatever the status, on every backend: of the
    // partial index of the instances that have a code (`instances_coded`), in order.
    let arms = if filter.failure_code.is_some() {
        StatusArms::One
    } else {
        arms
    };
    match (arms, filter.status) {
        (StatusArms::One, status) => {
            query.push(format!(
                "SELECT {INSTANCE_COLUMNS} FROM instances WHERE 1 = 1"
            ));
            if let Some(status) = status {
                query.push(" AND status = ").push_bind(status.as_str());
            }
            push_instance_conditions(&mut query, filter, id_type);
        }
        (StatusArms::PerStatus, Some(status)) => {
            push_status_arm(&mut query, status);
            push_instance_conditions(&mut query, filter, id_type);
        }
        (StatusArms::PerStatus, None) => {
            for (i, status) in InstanceStatus::ALL.into_iter().enumerate() {
                if i > 0 {
                    query.push(" UNION ALL ");
                }
                push_status_arm(&mut query, status);
                push_instance_conditions(&mut query, filter, id_type);
            }
        }
    }
    query
        .push(" ORDER BY created_at_ms, id LIMIT ")
        .push_bind(i64::from(effective_instances_limit(filter.limit)));
    query
}

/// One arm of a [`StatusArms::PerStatus`] listing: its status as a literal (one of the
/// four fixed words of [`InstanceStatus::as_str`], never caller text).
fn push_status_arm<DB: Database>(query: &mut QueryBuilder<'_, DB>, status: InstanceStatus) {
    query.push(format!(
        "SELECT {INSTANCE_COLUMNS} FROM instances WHERE status = '{}'",
        status.as_str()
    ));
}

/// The filter's conditions other than the status, each an ` AND …` with its values bound.
fn push_instance_conditions<'f, DB>(
    query: &mut QueryBuilder<'f, DB>,
    filter: &'f InstanceFilter,
    id_type: &str,
) where
    DB: Database,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> String: Encode<'a, DB> + Type<DB>,
{
    if let Some(deployment) = filter.deployment {
        query.push(" AND deployment = ").push_bind(deployment.0);
    }
    if let Some(code) = &filter.failure_code {
        query.push(" AND failure_code = ").push_bind(code.as_str());
    }
    if let Some(key) = &filter.business_key {
        query.push(" AND business_key = ").push_bind(key.as_str());
    }
    if let Some(from) = filter.created_from_ms {
        query.push(" AND created_at_ms >= ").push_bind(from);
    }
    if let Some(to) = filter.created_to_ms {
        query.push(" AND created_at_ms < ").push_bind(to);
    }
    if let Some(from) = filter.ended_from_ms {
        query.push(" AND ended_at_ms >= ").push_bind(from);
    }
    if let Some(to) = filter.ended_to_ms {
        query.push(" AND ended_at_ms < ").push_bind(to);
    }
    if let Some(node) = &filter.node {
        // Each EXISTS is a lookup by the child table's `(instance, ...)` key.
        query
            .push(
                " AND (EXISTS (SELECT 1 FROM incidents AS i WHERE i.instance = instances.id \
                 AND i.node = ",
            )
            .push_bind(node.as_str())
            .push(" AND i.resolved_at_ms IS NULL)")
            .push(" OR EXISTS (SELECT 1 FROM timers AS t WHERE t.instance = instances.id AND t.name IN (");
        let mut names = query.separated(", ");
        for name in node_timer_names(node) {
            names.push_bind(name.as_str().to_owned());
        }
        query
            .push("))")
            .push(
                " OR EXISTS (SELECT 1 FROM subscriptions AS s WHERE s.instance = instances.id \
                 AND s.node = ",
            )
            .push_bind(node.as_str())
            .push("))");
    }
    if let Some((at, id)) = filter.after {
        // The `>=` alone bounds the index range to the cursor's start; the OR then only
        // sorts out the instances of its millisecond.
        query
            .push(" AND created_at_ms >= ")
            .push_bind(at)
            .push(" AND (created_at_ms > ")
            .push_bind(at)
            .push(" OR (created_at_ms = ")
            .push_bind(at)
            .push(" AND id > CAST(")
            .push_bind(id.to_string())
            .push(format!(" AS {id_type})))"));
    }
}

/// Deployment ids seen to exist. Deployments are never deleted (retirement is a flag),
/// so a hit needs no query; a miss is checked inside the write transaction.
#[derive(Debug, Default)]
pub(crate) struct KnownDeployments(Mutex<HashSet<i64>>);

impl KnownDeployments {
    pub(crate) fn contains(&self, id: DeploymentId) -> bool {
        self.0
            .lock()
            .map(|known| known.contains(&id.0))
            .unwrap_or(false)
    }

    pub(crate) fn insert(&self, id: DeploymentId) {
        if let Ok(mut known) = self.0.lock() {
            known.insert(id.0);
        }
    }
}

/// The distinct deployments the batch creates instances on.
pub(crate) fn batch_deployments(batch: &[Commit]) -> Vec<i64> {
    batch
        .iter()
        .filter(|c| c.expected_fence.is_none() || c.moves)
        .map(|c| c.deployment.0)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect()
}

/// Plans a batch: its outcomes, each a conflict until its round applies it, and its
/// rounds, in each of which every instance appears at most once, in batch order. The
/// contract asks for distinct instances per batch; a caller that repeats one still gets
/// the sequential meaning (the second commit sees the first one's fence), because each
/// round is applied completely before the next starts. Creations with the same business
/// key on the same deployment are put in successive rounds the same way, so the first
/// one's row exists when the next is inserted, and the store's key check refuses it
/// (one statement never inserts two rows with one key). Creations on a `retired`
/// deployment are in no round; their outcome is already `DeploymentRetired`.
///
/// `stale` are the indexes of commits whose schedule advance (`Commit::schedule`) no
/// longer matches the stored schedule: refused as conflicts, like a lost CAS.
pub(crate) fn plan(
    batch: &[Commit],
    retired: &[i64],
    stale: &[usize],
    taken: &[usize],
) -> (Vec<CommitOutcome>, Vec<Vec<usize>>) {
    let mut outcomes = vec![
        CommitOutcome::Conflict {
            current_fence: None
        };
        batch.len()
    ];
    // The first round each instance, and each (deployment, key) created, may still go in.
    let mut next_by_instance: HashMap<InstanceId, usize> = HashMap::with_capacity(batch.len());
    let mut next_by_key: HashMap<(i64, &str), usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (index, commit) in batch.iter().enumerate() {
        let creation = commit.expected_fence.is_none();
        let key = commit
            .state
            .business_key
            .as_deref()
            .filter(|_| creation)
            .map(|k| (commit.deployment.0, k));
        let by_instance = next_by_instance.get(&commit.instance).copied().unwrap_or(0);
        let by_key = key.and_then(|k| next_by_key.get(&k).copied()).unwrap_or(0);
        let round = by_instance.max(by_key);
        while rounds.len() <= round {
            rounds.push(Vec::new());
        }
        next_by_instance.insert(commit.instance, round + 1);
        if (creation || commit.moves) && retired.contains(&commit.deployment.0) {
            outcomes[index] = CommitOutcome::DeploymentRetired;
            continue;
        }
        if stale.contains(&index) {
            continue;
        }
        if taken.contains(&index) {
            outcomes[index] = CommitOutcome::MessageTaken;
            continue;
        }
        if let Some(k) = key {
            next_by_key.insert(k, round + 1);
        }
        rounds[round].push(index);
    }
    rounds.retain(|r| !r.is_empty());
    (outcomes, rounds)
}

/// The business key a refused commit may have been stopped by: a creation's own key, or
/// for an update the key stored on the instance (`stored`: the row's key, if the row
/// exists), which an update never changes.
pub(crate) fn contested_key<'a>(
    commit: &'a Commit,
    stored: Option<&'a Option<String>>,
) -> Option<&'a str> {
    match commit.expected_fence {
        None => commit.state.business_key.as_deref(),
        Some(_) => stored.and_then(|key| key.as_deref()),
    }
}

/// Why a commit of a round was not applied, from what the store holds now (read in the
/// same transaction, after the round's statements): `stored_fence` is the instance's
/// fence, `holder` the other instance holding the commit's key on the commit's
/// deployment (for a creation the commit's key, for an update the stored one). With the
/// compare-and-swap still holding, only the key can have stopped the commit; otherwise
/// it lost the CAS.
pub(crate) fn refusal(
    commit: &Commit,
    stored_fence: Option<u64>,
    holder: Option<InstanceId>,
) -> CommitOutcome {
    let cas_held = match commit.expected_fence {
        None => stored_fence.is_none(),
        Some(expected) => stored_fence == Some(expected),
    };
    match holder {
        Some(existing) if cas_held => CommitOutcome::DuplicateBusinessKey { existing },
        _ => CommitOutcome::Conflict {
            current_fence: stored_fence,
        },
    }
}

/// Records a won CAS: the new fence is one past the expected one, 1 for a creation.
pub(crate) fn applied(commit: &Commit) -> CommitOutcome {
    CommitOutcome::Applied {
        fence: commit.expected_fence.map_or(1, |f| f + 1),
    }
}

pub(crate) fn fence_to_db(fence: u64) -> Result<i64, StoreError> {
    i64::try_from(fence).map_err(|_| StoreError::Corrupt(format!("fence {fence} out of range")))
}

pub(crate) fn fence_from_db(fence: i64) -> Result<u64, StoreError> {
    u64::try_from(fence)
        .ok()
        .filter(|f| *f >= 1)
        .ok_or_else(|| StoreError::Corrupt(format!("stored fence {fence} is not positive")))
}

/// `ended_at_ms` of a creation: the commit's instant if the instance ends in its first
/// step, else none.
pub(crate) fn ended_at_creation(commit: &Commit) -> Option<i64> {
    commit.state.status.has_ended().then_some(commit.now_ms)
}

/// The SQL expression (the same text on both backends) an update writes to
/// `ended_at_ms`: the stored end if there is one, else the commit's instant if the commit
/// ends the instance; nothing while it runs or is FAILED. `status` and `now_ms` name the
/// commit's values, `stored` the row's current end.
pub(crate) fn ended_at_update(status: &str, now_ms: &str, stored: &str) -> String {
    format!(
        "CASE WHEN {status} IN ('completed', 'cancelled') THEN COALESCE({stored}, {now_ms}) END"
    )
}

/// Caps a purge's limit (see `qflow_store::PURGE_LIMIT_MAX`), as a bound parameter.
pub(crate) fn purge_limit(request: &PurgeRequest) -> i64 {
    i64::from(request.limit.min(PURGE_LIMIT_MAX))
}

/// The purge's choice of instances, for one backend's statement: ended (completed or
/// cancelled, with an end instant) before `$cutoff`, of one deployment when `$deployment`
/// is given, oldest end first. The status test repeats what `ended_at_ms` already says,
/// so that a running or FAILED row is never chosen whatever its other columns hold;
/// `status` is how the backend spells the column there — SQLite gets `+status`, which
/// keeps its planner off the indexes that begin with the status (without statistics it
/// preferred `instances_status`, dropped by `0021`, then sorted every completed instance
/// per batch). Two texts rather than `(? IS NULL OR
/// deployment = ?)`, so each plan can use its index.
pub(crate) fn purge_choice(
    status: &str,
    cutoff: &str,
    deployment: Option<&str>,
    limit: &str,
) -> String {
    let by_deployment = deployment.map_or(String::new(), |d| format!(" AND deployment = {d}"));
    format!(
        "SELECT id FROM instances WHERE ended_at_ms < {cutoff} \
         AND {status} IN ('completed', 'cancelled'){by_deployment} \
         ORDER BY ended_at_ms LIMIT {limit}"
    )
}

fn u32_from_db(what: &str, value: i64) -> Result<u32, StoreError> {
    u32::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("stored {what} {value} out of range")))
}

fn status_from_db(status: &str) -> Result<InstanceStatus, StoreError> {
    InstanceStatus::parse(status)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown instance status {status:?}")))
}

/// Timer arms of one commit with repeated names collapsed to the last one: PostgreSQL
/// refuses to upsert the same key twice in one statement, and the last arm wins anyway.
pub(crate) fn last_arm_per_name(commit: &Commit) -> Vec<&TimerRecord> {
    let mut out: Vec<&TimerRecord> = Vec::with_capacity(commit.timers.arm.len());
    for timer in &commit.timers.arm {
        if let Some(slot) = out.iter_mut().find(|t| t.name == timer.name) {
            *slot = timer;
        } else {
            out.push(timer);
        }
    }
    out
}

fn attempt_from_db(value: i64) -> Result<Attempt, StoreError> {
    u32_from_db("attempt", value).and_then(|n| {
        Attempt::new(n).ok_or_else(|| StoreError::Corrupt("stored attempt 0".to_owned()))
    })
}

fn timer_name_from_db(name: &str) -> Result<TimerName, StoreError> {
    TimerName::parse(name)
        .ok_or_else(|| StoreError::Corrupt(format!("stored timer name {name:?} is not one")))
}

fn outcome_from_db(outcome: &str) -> Result<AttemptOutcome, StoreError> {
    AttemptOutcome::parse(outcome)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown attempt outcome {outcome:?}")))
}

/// Folds rows of [`BUFFERED_COLUMNS`] into messages with their takers.
pub(crate) fn buffered_from_rows<R: StoreRow>(rows: &[R]) -> StoreResult<Vec<BufferedMessage>> {
    let mut out: Vec<BufferedMessage> = Vec::new();
    for row in rows {
        let id: i64 = row.field("id")?;
        let process: Option<String> = row.field("process")?;
        if out.last().is_none_or(|m| m.id != id) {
            out.push(BufferedMessage {
                id,
                key: row.field("key")?,
                name: row.field("name")?,
                correlation_key: row.field("correlation_key")?,
                message_id: row.field("message_id")?,
                variables: row.field("variables")?,
                published_at_ms: row.field("published_at_ms")?,
                expires_at_ms: row.field("expires_at_ms")?,
                takers: Vec::new(),
            });
        }
        if let (Some(process), Some(message)) = (process, out.last_mut()) {
            message.takers.push(process);
        }
    }
    Ok(out)
}

/// The commits of `batch` whose message take cannot be, given what the store holds:
/// `live(message, process, now_ms)` tells whether the message is live at `now_ms` and not
/// taken by `process`. A second take of one message for one process in the batch is
/// refused too, whatever becomes of the first (a take refused so is offered again by the
/// buffer's sweep).
pub(crate) fn refused_takes<'a>(
    batch: &'a [Commit],
    verdicts: impl IntoIterator<Item = (usize, bool)>,
) -> Vec<usize> {
    let verdicts: HashMap<usize, bool> = verdicts.into_iter().collect();
    let mut seen: HashSet<(i64, &'a str)> = HashSet::new();
    let mut refused = Vec::new();
    for (index, commit) in batch.iter().enumerate() {
        let Some(take) = &commit.message_take else {
            continue;
        };
        let first = seen.insert((take.message, take.process.as_str()));
        if !first || !verdicts.get(&index).copied().unwrap_or(false) {
            refused.push(index);
        }
    }
    refused
}
