//! The SQLite store's commit path ([`Store::commit`](qflow_store::Store::commit)) on a
//! connection of its own (issue 26, `docs/performance.md` "The SQLite commit on a connection
//! of its own").
//!
//! Every other statement of the store goes through sqlx, whose SQLite driver runs each
//! statement on a worker thread of its own: a statement is a hand-off to that thread and
//! its answer a hand-off back. A commit of a few hundred steps is a dozen statements,
//! and with one lane the runtime bench ran with the machine half idle, a third of each
//! commit's 2.5 ms going to those hand-offs and the driver around them (1.7 ms without
//! them, `docs/performance.md`). Here the whole transaction runs on one thread
//! (a blocking task the committer starts per group), through rusqlite on a connection
//! the committer owns, whose prepared statements outlive the commit.
//!
//! The file still has one writer at a time: the committer holds the store's sqlx writer
//! (its pool of one connection) while its transaction runs, so every other write of the
//! store waits its turn in that pool's queue rather than in SQLite's busy handler.
//!
//! The functions mirror the store's statements one for one: the rows a commit writes and
//! the outcomes it answers are those of the sqlx path they replace.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use qflow_store::{
    history, AttemptRecord, Commit, CommitOutcome, DeploymentId, InstanceId, InstanceStatus,
    NewIncident, NewSubscription, PullTaskRecord, ScheduleAdvance, StoreError, StoreResult,
    TimerKind, TimerRecord, TimerRef, UserTaskRecord,
};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{params_from_iter, Connection, OpenFlags, OptionalExtension, ToSql};
use tokio::sync::oneshot;

use crate::common::{
    applied, audit_fences, batch_deployments, contested_key, ended_at_creation, ended_at_update,
    fence_from_db, fence_to_db, first_emit_per_key, last_arm_per_name, last_assign_per_node,
    last_offer_per_node, last_task_offer_per_node, names_to_db, plan, refusal, refused_takes,
    KnownDeployments, HISTORY_SPILL_BYTES,
};
use crate::journal_body;

/// Rows per multi-row statement. At most 13 parameters a row (an instance creation)
/// keeps a statement far below SQLite's 32,766-parameter limit, and a batch of up to this
/// many commits needs one statement per kind of row instead of one per row.
pub(crate) const ROWS_PER_STATEMENT: usize = 128;

/// The committer's prepared-statement cache: about a dozen row families, each in as many
/// shapes as the sizes its chunks come in ([`statement_chunks`]: 1 to 128 rows, the
/// sizes the batches happen to have), plus the single statements. The least recently
/// used is evicted and prepared again when next used, which costs time, never a result.
const STATEMENTS_CACHED: usize = 1_024;

/// One batch waiting for the committer, and where its outcomes go.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) batch: Vec<Commit>,
    pub(crate) reply: oneshot::Sender<StoreResult<Vec<CommitOutcome>>>,
}

/// A driver error of the commit path.
fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(Box::new(e))
}

/// Opens the committer's connection to the store file at `path`, which the store's sqlx
/// writer has created and migrated: the writer's settings (WAL, `synchronous = FULL`,
/// foreign keys, the busy timeout and the checkpoint interval), and temporary tables in
/// memory.
pub(crate) fn open(
    path: &Path,
    busy_timeout: Duration,
    wal_autocheckpoint_pages: u32,
) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "wal_autocheckpoint", wal_autocheckpoint_pages)?;
    // The statements' transient tables (an `UPDATE … FROM (VALUES …)`'s join, a
    // `RETURNING`'s rows: a chunk's snapshots and histories) stay in memory: in temporary
    // files they were about a sixth of the bytes a commit wrote (docs/performance.md).
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(STATEMENTS_CACHED);
    Ok(conn)
}

/// One bound value of a statement, borrowed from the batch where it can be.
#[derive(Debug, Clone)]
pub(crate) enum Arg<'a> {
    Null,
    Int(i64),
    Text(&'a str),
    Blob(&'a [u8]),
    Bytes(Vec<u8>),
}

impl ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Arg::Null => ValueRef::Null,
            Arg::Int(v) => ValueRef::Integer(*v),
            Arg::Text(s) => ValueRef::Text(s.as_bytes()),
            Arg::Blob(b) => ValueRef::Blob(b),
            Arg::Bytes(b) => ValueRef::Blob(b),
        }))
    }
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(v: &'a [u8]) -> Self {
        Arg::Blob(v)
    }
}

impl From<Vec<u8>> for Arg<'_> {
    fn from(v: Vec<u8>) -> Self {
        Arg::Bytes(v)
    }
}

impl<'a, T: Into<Arg<'a>>> From<Option<T>> for Arg<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Arg::Null, Into::into)
    }
}

/// A statement's text and its bound values, built together (the `?` and its value side
/// by side).
#[derive(Debug, Default)]
pub(crate) struct Sql<'a> {
    pub(crate) text: String,
    pub(crate) args: Vec<Arg<'a>>,
}

impl<'a> Sql<'a> {
    pub(crate) fn new(head: &str) -> Sql<'a> {
        Sql {
            text: head.to_owned(),
            args: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, text: &str) -> &mut Sql<'a> {
        self.text.push_str(text);
        self
    }

    /// Appends `?` and binds `value` to it.
    pub(crate) fn bind(&mut self, value: impl Into<Arg<'a>>) -> &mut Sql<'a> {
        self.text.push('?');
        self.args.push(value.into());
        self
    }

    fn execute(&self, conn: &Connection) -> StoreResult<usize> {
        execute(conn, &self.text, &self.args)
    }
}

/// Runs `sql` with `args`; the rows it changed.
fn execute(conn: &Connection, sql: &str, args: &[Arg<'_>]) -> StoreResult<usize> {
    conn.prepare_cached(sql)
        .and_then(|mut statement| statement.execute(params_from_iter(args)))
        .map_err(db)
}

/// Runs `sql` with `args` and maps each row it returns.
fn query<T>(
    conn: &Connection,
    sql: &str,
    args: &[Arg<'_>],
    mut map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    let mut statement = conn.prepare_cached(sql).map_err(db)?;
    let mut rows = statement.query(params_from_iter(args)).map_err(db)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        out.push(map(row).map_err(db)?);
    }
    Ok(out)
}

/// The first row `sql` returns, mapped; `None` when it returns none.
fn query_optional<T>(
    conn: &Connection,
    sql: &str,
    args: &[Arg<'_>],
    map: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> StoreResult<Option<T>> {
    conn.prepare_cached(sql)
        .and_then(|mut statement| statement.query_row(params_from_iter(args), map).optional())
        .map_err(db)
}

/// `rows` in statements of [`ROWS_PER_STATEMENT`] rows and one of the rest (300 rows: 128,
/// 128, 44): a family of rows takes as few statements as it can. Each size is prepared
/// once and then reused from the connection's statement cache. Until 2026-12-06 the rest
/// was cut in powers of two (44: 32, 8, 4), which kept a family to eight shapes but ran up
/// to eight statements where one would do (docs/performance.md, "One statement for the
/// rest").
pub(crate) fn statement_chunks<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    rows.chunks(ROWS_PER_STATEMENT)
}

/// `n` rows of `columns` placeholders each: `(?, ?), (?, ?)`.
fn placeholders(n: usize, columns: usize) -> String {
    let row = format!("({})", vec!["?"; columns].join(", "));
    vec![row.as_str(); n].join(", ")
}

/// The texts of one multi-row statement at each of [`statement_chunks`]' sizes, each
/// built the first time it is used: a statement built afresh every commit costs its
/// formatting and the hash of its text in the prepared-statement cache, for the same text
/// every time.
pub(crate) struct ChunkTexts(std::sync::OnceLock<Vec<std::sync::OnceLock<String>>>);

impl ChunkTexts {
    pub(crate) const fn new() -> ChunkTexts {
        ChunkTexts(std::sync::OnceLock::new())
    }

    /// The text for `rows` rows (1 to [`ROWS_PER_STATEMENT`], as [`statement_chunks`]
    /// yields them) of `columns` bound values each: `build` gets the `(?, …), (?, …)` list.
    pub(crate) fn text(&self, rows: usize, columns: usize, build: impl Fn(&str) -> String) -> &str {
        assert!(
            (1..=ROWS_PER_STATEMENT).contains(&rows),
            "a chunk of {rows} rows"
        );
        let texts = self.0.get_or_init(|| {
            (0..ROWS_PER_STATEMENT)
                .map(|_| std::sync::OnceLock::new())
                .collect()
        });
        texts[rows - 1].get_or_init(|| build(&placeholders(rows, columns)))
    }
}

/// A commit whose CAS won, with its instance id as stored.
type Winner<'a> = (&'a str, &'a Commit);

/// The journal row before a winner's new one (`instances.journal_prev` as its update
/// set it), by instance id; a creation and an instance journaled for the first time
/// have none.
type JournalPrevs = HashMap<String, Option<i64>>;

/// Applies `group` as one batch in one transaction and answers each caller with its own
/// outcomes; when that fails, applies each batch alone (see the store's `Committer`).
/// Returns the transactions it ran.
pub(crate) fn commit_group(
    conn: &mut Connection,
    known: &KnownDeployments,
    group: Vec<Pending>,
) -> u64 {
    if group.len() == 1 {
        let Pending { batch, reply } = group.into_iter().next().expect("one pending batch");
        let _ = reply.send(commit_batch(conn, known, &batch));
        return 1;
    }
    let transactions = 1 + group.len() as u64;
    let lens: Vec<usize> = group.iter().map(|p| p.batch.len()).collect();
    let mut replies = Vec::with_capacity(group.len());
    let mut joined = Vec::with_capacity(lens.iter().sum());
    for pending in group {
        joined.extend(pending.batch);
        replies.push(pending.reply);
    }
    match commit_batch(conn, known, &joined) {
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            for (reply, len) in replies.into_iter().zip(lens) {
                let _ = reply.send(Ok(outcomes.by_ref().take(len).collect()));
            }
            1
        }
        Err(_) => {
            let mut commits = joined.into_iter();
            for (reply, len) in replies.into_iter().zip(lens) {
                let batch: Vec<Commit> = commits.by_ref().take(len).collect();
                let _ = reply.send(commit_batch(conn, known, &batch));
            }
            transactions
        }
    }
}

/// One batch in one `BEGIN IMMEDIATE` transaction: the store's commit (the contract's
/// `Store::commit`), as the committer runs it. A failure anywhere rolls all of it back
/// (the transaction is dropped unfinished).
pub(crate) fn commit_batch(
    conn: &mut Connection,
    known: &KnownDeployments,
    batch: &[Commit],
) -> StoreResult<Vec<CommitOutcome>> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db)?;
    check_deployments(&tx, known, batch)?;
    // The write lock (BEGIN IMMEDIATE) makes this read atomic with `retire`.
    let retired = retired_deployments(&tx, batch)?;
    let stale = stale_schedules(&tx, batch)?;
    let taken = taken_messages(&tx, batch)?;
    let (mut outcomes, rounds) = plan(batch, &retired, &stale, &taken);
    let ids: Vec<String> = batch.iter().map(|c| id_text(c.instance)).collect();
    for round in rounds {
        apply_round(&tx, batch, &ids, &round, &mut outcomes)?;
    }
    tx.commit().map_err(db)?;
    Ok(outcomes)
}

/// Refuses a batch with a commit on a deployment the store does not have.
fn check_deployments(
    conn: &Connection,
    known: &KnownDeployments,
    batch: &[Commit],
) -> StoreResult<()> {
    for commit in batch {
        if known.contains(commit.deployment) {
            continue;
        }
        let found = query_optional(
            conn,
            "SELECT 1 FROM deployments WHERE id = ?",
            &[commit.deployment.0.into()],
            |_| Ok(()),
        )?;
        if found.is_none() {
            return Err(StoreError::UnknownDeployment(commit.deployment));
        }
        known.insert(commit.deployment);
    }
    Ok(())
}

/// The retired ones among the deployments the batch creates instances on or moves them
/// onto (`Commit::moves`).
fn retired_deployments(conn: &Connection, batch: &[Commit]) -> StoreResult<Vec<i64>> {
    let mut retired = Vec::new();
    for id in batch_deployments(batch) {
        let is_retired: Option<bool> = query_optional(
            conn,
            "SELECT retired FROM deployments WHERE id = ?",
            &[id.into()],
            |row| row.get(0),
        )?;
        if is_retired == Some(true) {
            retired.push(id);
        }
    }
    Ok(retired)
}

/// The indexes of the batch's commits whose schedule advance names an occurrence the
/// stored schedule is no longer due at (started elsewhere, replaced, retired). Read in
/// the write transaction, so atomic with every other writer.
fn stale_schedules(conn: &Connection, batch: &[Commit]) -> StoreResult<Vec<usize>> {
    let mut stale = Vec::new();
    for (index, commit) in batch.iter().enumerate() {
        let Some(advance) = &commit.schedule else {
            continue;
        };
        let due: Option<i64> = query_optional(
            conn,
            "SELECT due_at_ms FROM schedules WHERE deployment = ? AND node = ?",
            &[commit.deployment.0.into(), advance.node.as_str().into()],
            |row| row.get(0),
        )?;
        if due != Some(advance.fired_at_ms) {
            stale.push(index);
        }
    }
    Ok(stale)
}

/// The commits of `batch` whose message take cannot be (`common::refused_takes`): the
/// message is gone or expired at the commit's instant, or the process took it. Read
/// under the write lock, so atomic with the takes this transaction writes.
fn taken_messages(conn: &Connection, batch: &[Commit]) -> StoreResult<Vec<usize>> {
    let mut verdicts = Vec::new();
    for (index, commit) in batch.iter().enumerate() {
        let Some(take) = &commit.message_take else {
            continue;
        };
        let live = query_optional(
            conn,
            "SELECT 1 FROM buffered_messages AS m WHERE m.id = ?1 AND m.expires_at_ms > ?2 \
             AND NOT EXISTS (SELECT 1 FROM message_takers AS t \
                 WHERE t.message = m.id AND t.process = ?3)",
            &[
                take.message.into(),
                commit.now_ms.into(),
                take.process.as_str().into(),
            ],
            |_| Ok(()),
        )?;
        verdicts.push((index, live.is_some()));
    }
    Ok(refused_takes(batch, verdicts))
}

/// Records the winners' message takes.
fn apply_takes(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    for &(_, commit) in winners {
        if let Some(take) = &commit.message_take {
            execute(
                conn,
                "INSERT INTO message_takers (message, process) VALUES (?, ?) \
                 ON CONFLICT DO NOTHING",
                &[take.message.into(), take.process.as_str().into()],
            )?;
        }
    }
    Ok(())
}

/// Moves the winners' schedules on (dropping the lease), or deletes a schedule whose
/// last start this was. Only creations that start an occurrence have one.
fn apply_schedules(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    for &(_, commit) in winners {
        if let Some(advance) = &commit.schedule {
            let (sql, args) = move_schedule_args(commit.deployment, advance);
            execute(conn, sql, &args)?;
        }
    }
    Ok(())
}

/// Applies one round (distinct instances) of a batch: the instance rows, then each family
/// of the winners' effect rows. Fills `outcomes` at the round's indexes.
fn apply_round(
    conn: &Connection,
    batch: &[Commit],
    ids: &[String],
    round: &[usize],
    outcomes: &mut [CommitOutcome],
) -> StoreResult<()> {
    let journal_ids = journal_ids(conn, batch, round)?;
    let (winners, prevs) = apply_state(conn, batch, ids, &journal_ids, round, outcomes)?;
    apply_timers(conn, &winners)?;
    apply_incidents(conn, &winners)?;
    apply_subscriptions(conn, &winners)?;
    // A round's instances are distinct: a winner's id names its journal row.
    let by_instance: HashMap<&str, i64> = round
        .iter()
        .filter_map(|&i| journal_ids[i].map(|j| (ids[i].as_str(), j)))
        .collect();
    apply_journal(conn, &winners, &by_instance, &prevs)?;
    apply_pull(conn, &winners)?;
    apply_outbox(conn, &winners)?;
    apply_user_tasks(conn, &winners)?;
    apply_schedules(conn, &winners)?;
    apply_takes(conn, &winners)?;
    apply_audit(conn, &winners)
}

/// Writes the winners' outbox rows: the withdrawals, one delete by the `(instance, node)`
/// index per node (pending and poisoned rows only: a delivered row stays as the record
/// of what was sent), then the emissions as multi-row inserts that leave an existing
/// key alone. Most commits have none and cost nothing here.
fn apply_outbox(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    for &(id, commit) in winners {
        for node in &commit.outbox.withdraw {
            execute(
                conn,
                "DELETE FROM outbox WHERE instance = ? AND node = ? \
                 AND state IN ('pending', 'poisoned')",
                &[id.into(), node.into()],
            )?;
        }
    }
    // The answered rows by key, many to a statement (`key IN (…)` searches the primary
    // key once per key): a synchronous channel call has one in every answer's commit.
    let answered: Vec<&str> = winners
        .iter()
        .flat_map(|&(_, commit)| commit.outbox.answered.iter().map(String::as_str))
        .collect();
    for chunk in statement_chunks(&answered) {
        let sql = format!(
            "UPDATE outbox SET state = 'delivered', deliveries = deliveries + 1, \
             lease_owner = NULL, lease_until_ms = NULL WHERE state = 'pending' AND key IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let args: Vec<Arg<'_>> = chunk.iter().map(|&key| key.into()).collect();
        execute(conn, &sql, &args)?;
    }
    let emits = first_emit_per_key(winners.iter().copied());
    insert_rows(
        conn,
        "INSERT INTO outbox (key, instance, node, channel, attempt, call_id, body, \
         created_at_ms, state, due_at_ms) ",
        &emits,
        "(?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
        |args, (id, commit, emit)| {
            args.extend([
                emit.key.as_str().into(),
                (*id).into(),
                emit.node.as_str().into(),
                emit.channel.as_str().into(),
                i64::from(emit.attempt.get()).into(),
                emit.call_id.as_str().into(),
                emit.body.as_str().into(),
                commit.now_ms.into(),
                commit.now_ms.into(),
            ]);
        },
        " ON CONFLICT (key) DO NOTHING",
    )
}

/// Writes the winners' user-task rows: each withdrawal deletes the task's candidates,
/// then the task (indexed deletes); each offer deletes the candidates the row had, then
/// upserts the rows and inserts the new candidates as multi-row statements; assignee
/// changes are one keyed update each. Most commits have none and cost nothing here.
fn apply_user_tasks(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    let mut offers: Vec<(&str, &UserTaskRecord)> = Vec::new();
    let mut candidates: Vec<(&str, &str, i64, &str, &str)> = Vec::new();
    for &(id, commit) in winners {
        if commit.user_tasks.is_empty() {
            continue;
        }
        let offered = last_task_offer_per_node(commit);
        let cleared = commit
            .user_tasks
            .withdraw
            .iter()
            .map(String::as_str)
            .chain(offered.iter().map(|r| r.node.as_str()));
        for node in cleared {
            execute(
                conn,
                "DELETE FROM user_task_candidates WHERE instance = ? AND node = ?",
                &[id.into(), node.into()],
            )?;
        }
        for node in &commit.user_tasks.withdraw {
            execute(
                conn,
                "DELETE FROM user_tasks WHERE instance = ? AND node = ?",
                &[id.into(), node.into()],
            )?;
            // Its Camunda 8 key goes with it: the task offered there next gets its own.
            execute(
                conn,
                "DELETE FROM camunda_keys WHERE instance = ? AND kind = 'user_task' AND node = ?",
                &[id.into(), node.into()],
            )?;
        }
        for row in offered {
            offers.push((id, row));
            for (kind, names) in [
                ("group", &row.candidate_groups),
                ("user", &row.candidate_users),
            ] {
                for name in names {
                    candidates.push((kind, name, row.created_at_ms, id, &row.node));
                }
            }
        }
    }
    let groups: Vec<String> = offers
        .iter()
        .map(|(_, r)| names_to_db(&r.candidate_groups))
        .collect();
    let users: Vec<String> = offers
        .iter()
        .map(|(_, r)| names_to_db(&r.candidate_users))
        .collect();
    let rows: Vec<(usize, &(&str, &UserTaskRecord))> = offers.iter().enumerate().collect();
    insert_rows(
        conn,
        "INSERT INTO user_tasks (instance, node, deployment, assignee, candidate_groups, \
         candidate_users, created_at_ms) ",
        &rows,
        "(?, ?, ?, ?, ?, ?, ?)",
        |args, (i, (id, row))| {
            args.extend([
                (*id).into(),
                row.node.as_str().into(),
                row.deployment.0.into(),
                row.assignee.as_deref().into(),
                groups[*i].as_str().into(),
                users[*i].as_str().into(),
                row.created_at_ms.into(),
            ]);
        },
        " ON CONFLICT (instance, node) DO UPDATE SET deployment = excluded.deployment, \
         assignee = excluded.assignee, candidate_groups = excluded.candidate_groups, \
         candidate_users = excluded.candidate_users, created_at_ms = excluded.created_at_ms",
    )?;
    insert_rows(
        conn,
        "INSERT INTO user_task_candidates (kind, name, created_at_ms, instance, node) ",
        &candidates,
        "(?, ?, ?, ?, ?)",
        |args, (kind, name, at, id, node)| {
            args.extend([
                (*kind).into(),
                (*name).into(),
                (*at).into(),
                (*id).into(),
                (*node).into(),
            ]);
        },
        "",
    )?;
    for &(id, commit) in winners {
        for (node, assignee) in last_assign_per_node(commit) {
            execute(
                conn,
                "UPDATE user_tasks SET assignee = ? WHERE instance = ? AND node = ?",
                &[assignee.into(), id.into(), node.into()],
            )?;
        }
    }
    Ok(())
}

/// Writes the winners' pull-task rows: the withdrawals as keyed multi-row deletes
/// ([`delete_keyed`]), then the offers as multi-row upserts. Most commits have none and
/// cost nothing here.
fn apply_pull(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    let mut offers: Vec<(&str, &PullTaskRecord)> = Vec::new();
    let mut withdrawn: Vec<(&str, &str)> = Vec::new();
    for &(id, commit) in winners {
        if commit.pull.is_empty() {
            continue;
        }
        withdrawn.extend(commit.pull.withdraw.iter().map(|node| (id, node.as_str())));
        offers.extend(last_offer_per_node(commit).into_iter().map(|row| (id, row)));
    }
    delete_keyed(conn, PULL_DELETE, &withdrawn, |args, (id, node)| {
        args.extend([(*id).into(), (*node).into()]);
    })?;
    // A withdrawn task's job keys go with it: the next offer of the node (a pass after a
    // loop, the attempt after a park or a resume) gets keys of its own.
    delete_keyed(conn, JOB_KEYS_DELETE, &withdrawn, |args, (id, node)| {
        args.extend([(*id).into(), (*node).into()]);
    })?;
    insert_rows(
        conn,
        "INSERT INTO pull_tasks (instance, node, topic, attempt, worker, lock_until_ms, \
         offered_at_ms) ",
        &offers,
        "(?, ?, ?, ?, ?, ?, ?)",
        |args, (id, pull)| {
            args.extend([
                (*id).into(),
                pull.node.as_str().into(),
                pull.topic.as_str().into(),
                i64::from(pull.attempt.get()).into(),
                pull.worker.as_deref().into(),
                pull.lock_until_ms.into(),
                pull.offered_at_ms.into(),
            ]);
        },
        " ON CONFLICT (instance, node) DO UPDATE SET topic = excluded.topic, \
         attempt = excluded.attempt, worker = excluded.worker, \
         lock_until_ms = excluded.lock_until_ms, offered_at_ms = excluded.offered_at_ms",
    )
}

/// Writes the winners' `subscriptions`: the closes, one keyed delete per row, then the
/// opens as multi-row upserts, so a node whose wait began again keeps its new row.
fn apply_subscriptions(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    for (id, commit) in winners {
        for node in &commit.subscriptions.close {
            execute(
                conn,
                "DELETE FROM subscriptions WHERE instance = ? AND node = ?",
                &[(*id).into(), node.into()],
            )?;
        }
    }
    let opens: Vec<(&str, i64, &NewSubscription)> = winners
        .iter()
        .flat_map(|&(id, commit)| {
            commit
                .subscriptions
                .open
                .iter()
                .map(move |s| (id, commit.now_ms, s))
        })
        .collect();
    insert_rows(
        conn,
        "INSERT INTO subscriptions (instance, node, message, correlation_key, opened_at_ms) ",
        &opens,
        "(?, ?, ?, ?, ?)",
        |args, (id, now_ms, s)| {
            args.extend([
                (*id).into(),
                s.node.as_str().into(),
                s.message.as_str().into(),
                s.key.as_str().into(),
                (*now_ms).into(),
            ]);
        },
        " ON CONFLICT (instance, node) DO UPDATE SET message = excluded.message, \
         correlation_key = excluded.correlation_key, opened_at_ms = excluded.opened_at_ms",
    )
}

fn apply_audit(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    let mut rows = Vec::new();
    for &(id, commit) in winners {
        let (before, after) = audit_fences(commit)?;
        for entry in &commit.audit {
            rows.push((id, commit.now_ms, entry, before, after));
        }
    }
    insert_rows(
        conn,
        "INSERT INTO audit (instance, at_ms, actor, action, detail, fence_before, \
         fence_after) ",
        &rows,
        "(?, ?, ?, ?, ?, ?, ?)",
        |args, (id, at_ms, entry, before, after)| {
            args.extend([
                (*id).into(),
                (*at_ms).into(),
                entry.actor.as_str().into(),
                entry.action.as_str().into(),
                entry.detail.as_str().into(),
                (*before).into(),
                (*after).into(),
            ]);
        },
        "",
    )
}

/// Writes the round's `state` rows: creations insert where the id is free, updates
/// compare-and-swap on the fence. Returns the winners, in round order, and their
/// journal links.
fn apply_state<'a>(
    conn: &Connection,
    batch: &'a [Commit],
    ids: &'a [String],
    journal_ids: &[Option<i64>],
    round: &[usize],
    outcomes: &mut [CommitOutcome],
) -> StoreResult<(Vec<Winner<'a>>, JournalPrevs)> {
    let (creates, updates): (Vec<usize>, Vec<usize>) = round
        .iter()
        .partition(|&&index| batch[index].expected_fence.is_none());
    let mut won: JournalPrevs = HashMap::with_capacity(round.len());
    // Instances whose in-row attempt history passed `HISTORY_SPILL_BYTES`.
    let mut spills: Vec<String> = Vec::new();
    for chunk in statement_chunks(&creates) {
        static SQL: ChunkTexts = ChunkTexts::new();
        // No conflict target: a taken id and a taken `(deployment, business_key)` (the
        // unique index `instances_business_key`) both skip the row, and the loser pass
        // below tells them apart. The write lock means every row we can collide with is
        // committed or our own, so skipping is the whole answer.
        let sql = SQL.text(chunk.len(), 15, |values| {
            format!(
                "INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot, \
                 business_key, created_at_ms, updated_at_ms, ended_at_ms, journal_last, \
                 history, history_n, lease_due_ms, lease_incarnation) VALUES {values} \
                 ON CONFLICT DO NOTHING RETURNING id, length(history)"
            )
        });
        let mut args = Vec::with_capacity(chunk.len() * 15);
        for &index in chunk {
            let commit = &batch[index];
            // A creation that starts an attempt arms its lease with the row
            // (`apply_timers` leaves the created rows' leases alone).
            let lease = lease_arm(commit);
            args.extend([
                ids[index].as_str().into(),
                commit.deployment.0.into(),
                1_i64.into(),
                commit.state.status.as_str().into(),
                commit.state.failure_code.as_deref().into(),
                commit.state.snapshot.as_slice().into(),
                commit.state.business_key.as_deref().into(),
                commit.now_ms.into(),
                commit.now_ms.into(),
                ended_at_creation(commit).into(),
                journal_ids[index].into(),
                history::pack(commit.instance, &commit.attempts).into(),
                (commit.attempts.len() as i64).into(),
                lease.map(|t| t.due_at_ms).into(),
                lease.map(|t| i64::from(t.incarnation)).into(),
            ]);
        }
        let created: Vec<(String, Option<i64>)> =
            query(conn, sql, &args, |row| Ok((row.get(0)?, row.get(1)?)))?;
        spills.extend(
            created
                .iter()
                .filter(|(_, len)| len.is_some_and(|l| l > HISTORY_SPILL_BYTES))
                .map(|(id, _)| id.clone()),
        );
        won.extend(created.into_iter().map(|(id, _)| (id, None)));
    }
    // Most updates keep the row's deployment, status and failure code (a step of a
    // running instance): they set only the fence, snapshot and update instant, which no
    // index holds. SQLite rewrites the entries of every index over a column an UPDATE
    // sets, changed or not, and seven indexes hold those three columns, so a full update
    // costs them all. The light statement takes the rows that still match; the rest
    // (an ending, a failure, a migration, a repair, or a lost CAS) take the full one.
    // A step that resolves the in-flight lease clears the row's lease columns as it goes
    // (`lease_resolve`): a light one with the light statement that also sets them
    // (`Shape::LightLease`, which writes the lease's partial index and no other), so a
    // plain step never writes that index.
    let (light, mut full): (Vec<usize>, Vec<usize>) = updates.iter().partition(|&&index| {
        !matches!(
            batch[index].state.status,
            InstanceStatus::Completed | InstanceStatus::Cancelled
        )
    });
    let (leased, light): (Vec<usize>, Vec<usize>) = light
        .into_iter()
        .partition(|&index| lease_resolve(&batch[index]).is_some());
    for (rows, shape) in [(light, Shape::Light), (leased, Shape::LightLease)] {
        let lightly: JournalPrevs =
            update_instances(conn, batch, ids, journal_ids, &rows, shape, &mut spills)?
                .into_iter()
                .collect();
        full.extend(
            rows.iter()
                .filter(|&&index| !lightly.contains_key(&ids[index])),
        );
        won.extend(lightly);
    }
    won.extend(update_instances(
        conn,
        batch,
        ids,
        journal_ids,
        &full,
        Shape::Full,
        &mut spills,
    )?);
    spill_histories(conn, &spills)?;

    let mut winners = Vec::with_capacity(won.len());
    for &index in round {
        let (id, commit) = (ids[index].as_str(), &batch[index]);
        if won.contains_key(id) {
            outcomes[index] = applied(commit);
            winners.push((id, commit));
        } else {
            outcomes[index] = refused(conn, id, commit)?;
        }
    }
    Ok((winners, won))
}

/// Why a commit of the round did not apply: a lost compare-and-swap, or a business key
/// its deployment already has (a creation's key, or the stored key of an instance an
/// update moves to another deployment).
fn refused(conn: &Connection, id: &str, commit: &Commit) -> StoreResult<CommitOutcome> {
    let stored: Option<(i64, Option<String>)> = query_optional(
        conn,
        "SELECT fence, business_key FROM instances WHERE id = ?",
        &[id.into()],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let stored_fence = stored
        .as_ref()
        .map(|(fence, _)| fence_from_db(*fence))
        .transpose()?;
    let mut holder = None;
    if let Some(key) = contested_key(commit, stored.as_ref().map(|(_, key)| key)) {
        let found: Option<String> = query_optional(
            conn,
            "SELECT id FROM instances WHERE deployment = ? AND business_key = ? AND id <> ?",
            &[commit.deployment.0.into(), key.into(), id.into()],
            |row| row.get(0),
        )?;
        holder = found.map(|text| instance_id(&text)).transpose()?;
    }
    Ok(refusal(commit, stored_fence, holder))
}

/// An instance id as the store keeps it: hyphenated UUID text, which operators can read
/// with the sqlite3 shell.
pub(crate) fn id_text(id: InstanceId) -> String {
    id.hyphenated().to_string()
}

/// A stored instance id ([`id_text`]); anything else is a corrupt row.
pub(crate) fn instance_id(text: &str) -> StoreResult<InstanceId> {
    InstanceId::parse_str(text)
        .map_err(|_| StoreError::Corrupt(format!("stored instance id {text:?} is not a UUID")))
}

/// Which columns an update of instance rows sets (`update_instances`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The fence, snapshot, update instant, journal links and history, where the stored
    /// deployment, status and failure code still match: no index holds them.
    Light,
    /// As `Light`, and the in-flight lease's columns (the step resolves it): only the
    /// lease's partial index holds them.
    LightLease,
    /// Every column a step can change, whatever the stored row holds.
    Full,
}

/// The fence CAS of the updates `rows` (indexes into `batch`), a statement per
/// [`statement_chunks`] chunk; returns the ids whose CAS won, each with the journal row
/// its new one follows. `shape` says which columns the statement sets (see `apply_state`).
fn update_instances(
    conn: &Connection,
    batch: &[Commit],
    ids: &[String],
    journal_ids: &[Option<i64>],
    rows: &[usize],
    shape: Shape,
    spills: &mut Vec<String>,
) -> StoreResult<Vec<(String, Option<i64>)>> {
    // A journaled step links its row to the instance's newest one (`journal_prev`,
    // which RETURNING hands to the insert that follows) and becomes the newest (SET
    // reads the old values, so `journal_prev` takes the old `journal_last`).
    const JOURNAL_SET: &str = "journal_prev = CASE WHEN v_journal IS NULL THEN \
         journal_prev ELSE journal_last END, journal_last = COALESCE(v_journal, journal_last)";
    // The step's finished attempts go on the end of the row's history (`history`).
    // `||` on blobs yields text of the same bytes; the CAST makes it a blob again.
    const HISTORY_SET: &str = "history = CASE WHEN v_history IS NULL THEN history \
         ELSE CAST(COALESCE(history, x'') || v_history AS BLOB) END, \
         history_n = history_n + v_history_n";
    const WITH: &str = "WITH v (v_id, v_fence, v_deployment, v_status, v_failure_code, \
         v_snapshot, v_now_ms, v_journal, v_history, v_history_n, v_lease) AS";
    // The in-flight lease resolved by the step (`v_lease`: its incarnation), as the keyed
    // delete of a `timers` row would: only where the incarnation matches.
    const LEASE_SET: &str = "lease_due_ms = CASE WHEN lease_incarnation = v_lease THEN NULL \
         ELSE lease_due_ms END, lease_owner = CASE WHEN lease_incarnation = v_lease THEN NULL \
         ELSE lease_owner END, lease_until_ms = CASE WHEN lease_incarnation = v_lease \
         THEN NULL ELSE lease_until_ms END, lease_incarnation = CASE \
         WHEN lease_incarnation = v_lease THEN NULL ELSE lease_incarnation END";
    static LIGHT: ChunkTexts = ChunkTexts::new();
    static LIGHT_LEASE: ChunkTexts = ChunkTexts::new();
    static FULL: ChunkTexts = ChunkTexts::new();
    let mut won = Vec::with_capacity(rows.len());
    for chunk in statement_chunks(rows) {
        let sql = if shape != Shape::Full {
            let (texts, lease) = match shape {
                Shape::LightLease => (&LIGHT_LEASE, format!(", {LEASE_SET}")),
                _ => (&LIGHT, String::new()),
            };
            texts.text(chunk.len(), 11, |values| {
                format!(
                    "{WITH} (VALUES {values}) UPDATE instances SET fence = fence + 1, \
                     snapshot = v_snapshot, updated_at_ms = v_now_ms, {JOURNAL_SET}, \
                     {HISTORY_SET}{lease} \
                     FROM v WHERE id = v_id AND fence = v_fence AND deployment = v_deployment \
                     AND status = v_status AND failure_code IS v_failure_code \
                     RETURNING id, journal_prev, length(history)"
                )
            })
        } else {
            FULL.text(chunk.len(), 11, |values| {
                format!(
                    "{WITH} (VALUES {values}) UPDATE instances SET fence = fence + 1, \
                     deployment = v_deployment, status = v_status, \
                     failure_code = v_failure_code, snapshot = v_snapshot, \
                     updated_at_ms = v_now_ms, ended_at_ms = {}, {JOURNAL_SET}, {HISTORY_SET}, \
                     {LEASE_SET} \
                     FROM v WHERE id = v_id AND fence = v_fence \
                     AND (deployment = v_deployment OR business_key IS NULL OR NOT EXISTS ( \
                         SELECT 1 FROM instances AS o \
                         WHERE o.deployment = v_deployment \
                         AND o.business_key = instances.business_key)) \
                     RETURNING id, journal_prev, length(history)",
                    ended_at_update("v_status", "v_now_ms", "instances.ended_at_ms")
                )
            })
        };
        let mut args = Vec::with_capacity(chunk.len() * 11);
        for &index in chunk {
            let commit = &batch[index];
            let expected = commit.expected_fence.unwrap_or(0);
            // Read by the statements that set the lease columns (`LEASE_SET`) only.
            args.extend([
                ids[index].as_str().into(),
                fence_to_db(expected)?.into(),
                commit.deployment.0.into(),
                commit.state.status.as_str().into(),
                commit.state.failure_code.as_deref().into(),
                commit.state.snapshot.as_slice().into(),
                commit.now_ms.into(),
                journal_ids[index].into(),
                history::pack(commit.instance, &commit.attempts).into(),
                (commit.attempts.len() as i64).into(),
                lease_resolve(commit).into(),
            ]);
        }
        let updated: Vec<(String, Option<i64>, Option<i64>)> = query(conn, sql, &args, |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
        for (id, prev, len) in updated {
            if len.is_some_and(|l| l > HISTORY_SPILL_BYTES) {
                spills.push(id.clone());
            }
            won.push((id, prev));
        }
    }
    Ok(won)
}

/// Moves the in-row attempt histories of `ids` (past `HISTORY_SPILL_BYTES`) to the
/// `attempts` table, oldest first, and empties them: rare (an instance that has retried
/// some thirty times), so a read of each and one insert for all.
fn spill_histories(conn: &Connection, ids: &[String]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut records: Vec<(String, AttemptRecord)> = Vec::new();
    for id in ids {
        let body: Option<Option<Vec<u8>>> = query_optional(
            conn,
            "SELECT history FROM instances WHERE id = ?",
            &[id.into()],
            |row| row.get(0),
        )?;
        let body = body.ok_or_else(|| {
            StoreError::Corrupt(format!("instance {id} left its row in its own commit"))
        })?;
        let unpacked = history::unpack(instance_id(id)?, body.as_deref().unwrap_or_default())?;
        records.extend(unpacked.into_iter().map(|r| (id.clone(), r)));
    }
    insert_attempt_rows(conn, &records)?;
    for chunk in statement_chunks(ids) {
        let sql = format!(
            "UPDATE instances SET history = NULL, history_n = 0 WHERE id IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let args: Vec<Arg<'_>> = chunk.iter().map(Into::into).collect();
        execute(conn, &sql, &args)?;
    }
    Ok(())
}

/// The last arm of the in-flight lease (`~run`) in `commit`, if any: what the instance
/// row's lease columns take (`0023_lease_in_row.sql`).
fn lease_arm(commit: &Commit) -> Option<&TimerRecord> {
    commit
        .timers
        .arm
        .iter()
        .rev()
        .find(|t| t.name.kind() == TimerKind::Lease)
}

/// The resolves of the in-flight lease (`~run`) in `commit`.
fn lease_resolves(commit: &Commit) -> impl Iterator<Item = &TimerRef> {
    commit
        .timers
        .resolve
        .iter()
        .filter(|t| t.name.kind() == TimerKind::Lease)
}

/// The incarnation of the in-flight lease (`~run`) an update resolves, when it resolves
/// it once and does not arm it again (an arm replaces the lease whatever its
/// incarnation). Several resolves of it in one commit (the runtime writes one at most)
/// are left to [`apply_leases`].
fn lease_resolve(commit: &Commit) -> Option<i64> {
    let mut resolves = lease_resolves(commit);
    match (lease_arm(commit), resolves.next(), resolves.next()) {
        (None, Some(only), None) => Some(i64::from(only.incarnation)),
        _ => None,
    }
}

/// Writes the winners' timers. The in-flight lease (`~run`) lives in the instance's row
/// ([`apply_leases`]); the other names are rows of `timers`: the resolves as keyed
/// multi-row deletes ([`delete_keyed`]), then the arms as multi-row upserts, so a step
/// that resolves and re-arms a name keeps the new timer.
fn apply_timers(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    apply_leases(conn, winners)?;
    let resolved: Vec<(&str, &str, i64)> = winners
        .iter()
        .flat_map(|&(id, commit)| {
            commit
                .timers
                .resolve
                .iter()
                .filter(|t| t.name.kind() != TimerKind::Lease)
                .map(move |t| (id, t.name.as_str(), i64::from(t.incarnation)))
        })
        .collect();
    delete_keyed(
        conn,
        TIMER_DELETE,
        &resolved,
        |args, (id, name, incarnation)| {
            args.extend([(*id).into(), (*name).into(), (*incarnation).into()]);
        },
    )?;
    let arms: Vec<(&str, &TimerRecord)> = winners
        .iter()
        .flat_map(|&(id, commit)| {
            last_arm_per_name(commit)
                .into_iter()
                .filter(|timer| timer.name.kind() != TimerKind::Lease)
                .map(move |timer| (id, timer))
        })
        .collect();
    insert_rows(
        conn,
        "INSERT INTO timers (instance, name, due_at_ms, incarnation) ",
        &arms,
        "(?, ?, ?, ?)",
        |args, (id, timer)| {
            args.extend([
                (*id).into(),
                timer.name.as_str().into(),
                timer.due_at_ms.into(),
                i64::from(timer.incarnation).into(),
            ]);
        },
        " ON CONFLICT (instance, name) DO UPDATE SET due_at_ms = excluded.due_at_ms, \
         incarnation = excluded.incarnation, lease_owner = NULL, leased_until_ms = NULL",
    )
}

/// Arms the in-flight leases (`~run`) of the winners that were updated, in their rows'
/// lease columns, and drops any claim on the old one, as the upsert of a `timers` row
/// does. A creation's lease went in with its row, and a resolve with the row's full
/// update (`lease_resolve`). Most commits arm none and cost nothing here.
fn apply_leases(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    static ARM: ChunkTexts = ChunkTexts::new();
    // Several resolves without an arm (never from the runtime): each clears the lease
    // where its incarnation matches, as each keyed delete of a `timers` row would.
    for &(id, commit) in winners {
        if commit.expected_fence.is_none() || lease_arm(commit).is_some() {
            continue;
        }
        if lease_resolves(commit).nth(1).is_none() {
            continue;
        }
        for resolve in lease_resolves(commit) {
            execute(
                conn,
                "UPDATE instances SET lease_due_ms = NULL, lease_incarnation = NULL, \
                 lease_owner = NULL, lease_until_ms = NULL \
                 WHERE id = ? AND lease_incarnation = ?",
                &[id.into(), i64::from(resolve.incarnation).into()],
            )?;
        }
    }
    let arms: Vec<(&str, &TimerRecord)> = winners
        .iter()
        .filter(|(_, commit)| commit.expected_fence.is_some())
        .filter_map(|&(id, commit)| lease_arm(commit).map(|timer| (id, timer)))
        .collect();
    for chunk in statement_chunks(&arms) {
        let sql = ARM.text(chunk.len(), 3, |values| {
            format!(
                "WITH v (v_id, v_due, v_incarnation) AS (VALUES {values}) \
                 UPDATE instances SET lease_due_ms = v_due, lease_incarnation = v_incarnation, \
                 lease_owner = NULL, lease_until_ms = NULL FROM v WHERE id = v_id"
            )
        });
        let mut args = Vec::with_capacity(chunk.len() * 3);
        for &(id, timer) in chunk {
            args.extend([
                id.into(),
                timer.due_at_ms.into(),
                i64::from(timer.incarnation).into(),
            ]);
        }
        execute(conn, sql, &args)?;
    }
    Ok(())
}

/// Writes the winners' `incidents`: the resolves, one indexed update per row, then the
/// opens as multi-row inserts, so a step that resolves and re-opens a node keeps the new
/// incident open.
fn apply_incidents(conn: &Connection, winners: &[Winner<'_>]) -> StoreResult<()> {
    for (id, commit) in winners {
        // All moves of the commit in one statement, each row by the node it had: a
        // mapping may rename `a` to `b` and `b` to `c` at once.
        let moved = &commit.incidents.moved;
        if moved.is_empty() {
            continue;
        }
        let mut sql = Sql::new("UPDATE incidents SET node = CASE node");
        for (from, to) in moved {
            sql.push(" WHEN ")
                .bind(from.as_str())
                .push(" THEN ")
                .bind(to.as_str());
        }
        sql.push(" ELSE node END WHERE instance = ")
            .bind(*id)
            .push(" AND resolved_at_ms IS NULL AND node IN (");
        for (i, (from, _)) in moved.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.bind(from.as_str());
        }
        sql.push(")");
        sql.execute(conn)?;
    }
    for (id, commit) in winners {
        for node in &commit.incidents.resolve_on {
            execute(
                conn,
                "UPDATE incidents SET resolved_at_ms = ? \
                 WHERE instance = ? AND node = ? AND resolved_at_ms IS NULL",
                &[commit.now_ms.into(), (*id).into(), node.into()],
            )?;
        }
    }
    let opens: Vec<(&str, i64, &NewIncident)> = winners
        .iter()
        .flat_map(|&(id, commit)| {
            commit
                .incidents
                .open
                .iter()
                .map(move |incident| (id, commit.now_ms, incident))
        })
        .collect();
    insert_rows(
        conn,
        "INSERT INTO incidents (instance, node, code, message, opened_at_ms) ",
        &opens,
        "(?, ?, ?, ?, ?)",
        |args, (id, now_ms, incident)| {
            args.extend([
                (*id).into(),
                incident.node.as_str().into(),
                incident.code.as_str().into(),
                incident.message.as_str().into(),
                (*now_ms).into(),
            ]);
        },
        "",
    )
}

/// Appends attempt records to the `attempts` table as multi-row inserts (the spilled
/// in-row histories; a commit's own attempts go in the instance row).
fn insert_attempt_rows(conn: &Connection, attempts: &[(String, AttemptRecord)]) -> StoreResult<()> {
    insert_rows(
        conn,
        "INSERT INTO attempts (instance, node, attempt, started_at_ms, finished_at_ms, \
         outcome, code, message, worker) ",
        attempts,
        "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
        |args, (id, attempt)| {
            args.extend([
                id.as_str().into(),
                attempt.node.as_str().into(),
                i64::from(attempt.attempt.get()).into(),
                attempt.started_at_ms.into(),
                attempt.finished_at_ms.into(),
                attempt.outcome.as_str().into(),
                attempt.code.as_deref().into(),
                attempt.message.as_deref().into(),
                attempt.worker.as_deref().into(),
            ]);
        },
        "",
    )
}

/// The journal row of a round's journaled commits, by batch index: one row for the whole
/// round (`journal_body::ROUND`), the next id in append order (the write lock makes
/// `MAX(id)` ours). A round whose commits all lose their compare-and-swap leaves the id
/// unused. No read when the round journals nothing.
fn journal_ids(
    conn: &Connection,
    batch: &[Commit],
    round: &[usize],
) -> StoreResult<Vec<Option<i64>>> {
    let mut out = vec![None; batch.len()];
    if !round.iter().any(|&i| batch[i].journal.is_some()) {
        return Ok(out);
    }
    let last: i64 = query_optional(
        conn,
        "SELECT COALESCE(MAX(id), 0) FROM journal",
        &[],
        |row| row.get(0),
    )?
    .unwrap_or(0);
    for &index in round {
        if batch[index].journal.is_some() {
            out[index] = Some(last + 1);
        }
    }
    Ok(out)
}

/// Appends the winners' input-journal entries (SPEC G3) as one round row
/// (`journal_body::ROUND`, `0018_journal_rounds.sql`), each entry linked to its
/// instance's row before it (`prevs`: the `journal_prev` the instance update of this
/// round set); a commit without one (the journal is off for its deployment) writes
/// nothing here. One row and two binds a round: the rows a step were most of what the
/// journal cost the one writer (docs/performance.md).
fn apply_journal(
    conn: &Connection,
    winners: &[Winner<'_>],
    journal_ids: &HashMap<&str, i64>,
    prevs: &JournalPrevs,
) -> StoreResult<()> {
    let mut row = None;
    let mut steps = Vec::new();
    for &(id, commit) in winners {
        if let (Some(entry), Some(&jid)) = (&commit.journal, journal_ids.get(id)) {
            row = Some(jid);
            steps.push(journal_body::RoundStep {
                instance: commit.instance,
                prev: prevs.get(id).copied().flatten(),
                entry,
            });
        }
    }
    let Some(row) = row else {
        return Ok(());
    };
    // A round row's `seq` column is 1 (the column is `NOT NULL CHECK (seq >= 1)` for
    // the entry rows before it); its entries carry their own.
    execute(
        conn,
        "INSERT INTO journal (id, prev, seq, body) VALUES (?, NULL, 1, ?)",
        &[row.into(), journal_body::pack_round(&steps).into()],
    )?;
    // The row before, when a purge emptied it and kept it as the newest (so that its id
    // was not given again), is no longer the newest: it goes. A primary-key probe.
    execute(
        conn,
        "DELETE FROM journal WHERE id = ? AND body = x'0200'",
        &[(row - 1).into()],
    )?;
    Ok(())
}

/// The statement heads and terms of [`delete_keyed`]: a timer row by `(instance, name)`
/// and the incarnation it was armed with, a pull-task row by `(instance, node)`, the
/// Camunda 8 job keys of a withdrawn pull task (`Store::camunda_keys`; the term names
/// the kind itself, as terms are joined with OR).
pub(crate) const TIMER_DELETE: (&str, &str) = (
    "DELETE FROM timers WHERE ",
    "instance = ? AND name = ? AND incarnation = ?",
);
pub(crate) const PULL_DELETE: (&str, &str) =
    ("DELETE FROM pull_tasks WHERE ", "instance = ? AND node = ?");
const JOB_KEYS_DELETE: (&str, &str) = (
    "DELETE FROM camunda_keys WHERE ",
    "instance = ? AND kind = 'job' AND node = ?",
);

/// `head (term) OR (term) …` for `rows` rows: the text of one [`delete_keyed`] statement.
pub(crate) fn keyed_delete_text((head, term): (&str, &str), rows: usize) -> String {
    let terms = vec![format!("({term})"); rows];
    format!("{head}{}", terms.join(" OR "))
}

/// Deletes `rows` by their keys, a statement per [`statement_chunks`] chunk:
/// `head (k1 = ? AND k2 = ?) OR (…)`, each row's values bound by `bind`. A commit batch's
/// deletes were one statement per row, the bulk of a pull-task batch's statements. SQLite
/// answers such an `OR` of key equalities with one primary-key search per term (a
/// multi-index OR; a row-value `IN (VALUES …)` would scan the table instead), which
/// `SqliteStore::explain_keyed_deletes` shows and a test checks.
fn delete_keyed<'a, T>(
    conn: &Connection,
    statement: (&str, &str),
    rows: &'a [T],
    mut bind: impl FnMut(&mut Vec<Arg<'a>>, &'a T),
) -> StoreResult<()> {
    for chunk in statement_chunks(rows) {
        let mut args = Vec::new();
        for row in chunk {
            bind(&mut args, row);
        }
        execute(conn, &keyed_delete_text(statement, chunk.len()), &args)?;
    }
    Ok(())
}

/// Runs `insert` + `VALUES` + one `row` (its placeholders, `(?, ?)`) per row + `tail`,
/// a statement per [`statement_chunks`] chunk; `bind` binds one row's values.
fn insert_rows<'a, T>(
    conn: &Connection,
    insert: &str,
    rows: &'a [T],
    row: &str,
    mut bind: impl FnMut(&mut Vec<Arg<'a>>, &'a T),
    tail: &str,
) -> StoreResult<()> {
    for chunk in statement_chunks(rows) {
        let mut args = Vec::new();
        for r in chunk {
            bind(&mut args, r);
        }
        let sql = format!("{insert}VALUES {}{tail}", vec![row; chunk.len()].join(", "));
        execute(conn, &sql, &args)?;
    }
    Ok(())
}

/// The text and values of the write that moves the schedule of `(deployment,
/// advance.node)` to its next occurrence, or deletes it after its last, only where it
/// still stands at `advance.fired_at_ms`.
pub(crate) fn move_schedule_args<'a>(
    deployment: DeploymentId,
    advance: &'a ScheduleAdvance,
) -> (&'static str, Vec<Arg<'a>>) {
    let mut args: Vec<Arg<'a>> = Vec::with_capacity(5);
    let sql = match advance.next {
        Some((due_at_ms, remaining)) => {
            args.extend([due_at_ms.into(), remaining.map(i64::from).into()]);
            "UPDATE schedules SET due_at_ms = ?, remaining = ?, lease_owner = NULL, \
             leased_until_ms = NULL WHERE deployment = ? AND node = ? AND due_at_ms = ?"
        }
        None => "DELETE FROM schedules WHERE deployment = ? AND node = ? AND due_at_ms = ?",
    };
    args.extend([
        deployment.0.into(),
        advance.node.as_str().into(),
        advance.fired_at_ms.into(),
    ]);
    (sql, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R1a on the connection commits run on: WAL, `synchronous = FULL` (2), foreign keys,
    /// the checkpoint interval it is given, and transient tables in memory (2).
    #[tokio::test]
    async fn the_committers_connection_runs_with_the_writers_durability() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let store = crate::SqliteStore::open(&path).await.unwrap();
        let conn = open(&path, Duration::from_secs(5), 1_234).unwrap();
        let pragma = |name: &str| -> String {
            conn.query_row(&format!("PRAGMA {name}"), [], |row| {
                row.get::<_, rusqlite::types::Value>(0)
            })
            .map(|v| match v {
                rusqlite::types::Value::Integer(i) => i.to_string(),
                rusqlite::types::Value::Text(t) => t,
                other => format!("{other:?}"),
            })
            .unwrap()
        };
        assert_eq!(pragma("journal_mode"), "wal");
        assert_eq!(pragma("synchronous"), "2");
        assert_eq!(pragma("foreign_keys"), "1");
        assert_eq!(pragma("wal_autocheckpoint"), "1234");
        assert_eq!(pragma("temp_store"), "2");
        assert_eq!(pragma("busy_timeout"), "5000");
        drop(conn);
        store.close().await;
    }
}
