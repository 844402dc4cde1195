//! Durable stores for qflow: the embedded SQLite file (the default) and PostgreSQL (the
//! scale-out path), both implementing [`qflow_store::Store`] through sqlx, with
//! the schema kept as migrations in this crate (`migrations/sqlite`, `migrations/postgres`).
//!
//! What a store must never do: interpret snapshot bytes, acknowledge a commit before it
//! is durable (SQLite runs `synchronous=FULL`, PostgreSQL synchronous commits), or let a
//! commit whose fence check lost write any of its rows.
//!
//! Schema (migrations `0001_core`, `0002_audit`, `0003_business_key`, `0004_retention`,
//! `0005_subscriptions`, `0006_pull_tasks`, `0007_listing_order`, `0008_open_incidents`,
//! `0010_outbox`, `0011_schedules`, `0012_journal` in both directories, and
//! `0013_journal_without_foreign_keys` and `0014_journal_in_append_order` on PostgreSQL
//! only (SQLite's `0012` has that layout already), `0015_journal_packed` on SQLite only
//! (a row's fields but `id`, `prev` and `seq` in one `body`, `journal_body.rs`) and `0018_journal_rounds` on SQLite only (one row a commit round, its body every journaled step of the round); `0009` belongs to the user-task family, on its own
//! branch: sqlx applies every migration a database lacks whatever its number, so the two
//! merge as they are). An applied migration is never edited, a change is a new one:
//! `0005_subscriptions`, `0007_listing_order`, `0008_open_incidents`, `0009_user_tasks` in
//! both directories (`0006` is the pull-task family's); an applied migration is
//! never edited, a change is a new one):
//!
//! | table | rows | written by |
//! |---|---|---|
//! | `deployments` | one per distinct content hash; `id` is the version | `deploy`, `retire` |
//! | `instances` | snapshot bytes, fence, status, failure code, business key (unique per deployment, partial index), end instant (partial indexes for retention); indexes `(status, created_at_ms, id)` and `(deployment, status, created_at_ms, id)`, so a listing page reads in order (`0007`; on SQLite since `0021` a page without a status filter merges one ordered read per status, since `0022` the two status indexes end at `created_at_ms` (one millisecond's instances sorted by id) and failure codes have a partial index of the instances that have one; PostgreSQL also keeps `(created_at_ms, id)` and `(deployment, created_at_ms, id)`, and since its `0019` failure codes in the same partial index as SQLite's); on SQLite since `0023` the in-flight lease timer `~run` with its claim (`lease_*` columns, partial index `instances_lease_due` of the armed ones) | `commit` (CAS on fence), `purge_finished`, `claim_due_timers` (SQLite: a due lease's claim) |
//! | `timers` | `(instance, name)` key, due instant, incarnation, lease; index on due (on SQLite every name but `~run`) | `commit`, `claim_due_timers` |
//! | `incidents` | opened/resolved per instance and node; partial index of open ones (`0008`) | `commit`, `record_delivery` (a poisoned row's `POISONED` incident) |
//! | `attempts` | attempt history (O1a), append-only | `commit` |
//! | `journal` | the input journal (SPEC G3, `0012`; PostgreSQL `0013`, `0014`): one row per journaled step, in append order — keyed by `id` (SQLite's rowid, PostgreSQL's `journal_id_seq`), an instance's rows found through a chain from `instances.journal_last` down each row's `prev` (always an older id); `seq` is the fence the step wrote; no other index; on SQLite a row's other fields are one packed `body` (`0015`; rows written before it keep them as columns), and since `0018` a row holds a whole commit round's steps, each entry with its instance and `prev` (the instance's entry found by its id); appended by commits, rewritten only by a purge taking its instances' entries out (the newest row emptied rather than deleted, so no id is given twice) | `commit` (`Commit::journal`), `purge_finished` |
//! | `audit` | operator actions, with the fences their commit moved between | `commit` |
//! | `subscriptions` | `(instance, node)` key, message name and correlation key; index on `(message, correlation_key, opened_at_ms)` | `commit` |
//! | `pull_tasks` | `(instance, node)` key, topic, attempt, lock; partial index of offered (unlocked) rows by topic | `commit` |
//! | `schedules` | timer start schedules (`0011`): `(deployment, node)` key, next due instant, starts left (NULL: unbounded), lease; index on due | `deploy` (a new deployment replaces its process's other rows), `retire`, `claim_due_schedules` (lease), `commit` (`Commit::schedule`: moved on or deleted under a compare-and-swap on the due instant) |
//! | `outbox` | channel requests, one per attempt: idempotency key (primary key), instance, node, channel, attempt, call id, body, state (`pending`, `delivered`, `poisoned`), delivery count, due instant, last error, lease; partial index `outbox_due` on `(due_at_ms, key)` of pending rows, index on `(instance, node)` | `commit` (emit, withdraw), `claim_due_outbox` (lease), `record_delivery` |
//! | `user_tasks` | the task list: one row per user task a running instance waits at — deployment, assignee, candidate groups and users (JSON arrays), offer instant; indexes ending in `(created_at_ms, instance, node)` by assignee (partial), by deployment and over all (`0009`) | `commit`, `purge_finished` |
//! | `user_task_candidates` | one row per candidate of a task (`kind` group or user, name, the task's instant), keyed in the listing order so a page by candidate is an index walk | `commit`, `purge_finished` |
//!
//! Correlation (C5, C7: live response waits by key) arrives as a further numbered
//! migration in both directories, and its rows as an additive field on `Commit`, written
//! by the same batch transaction and only when that commit's CAS won. No table is
//! created before the code that uses it.
//!
//! Every batch is applied in rounds of distinct instances; within a round the instance
//! rows are written first (the CAS, `apply_state`), then the winners' effect rows family
//! by family. Each store writes each family of `Commit` in exactly one function
//! (`apply_timers` — except SQLite's in-flight lease, which a creation's insert and the
//! row's own update write in `apply_state`, and `apply_timers` arms —, `apply_incidents`, `apply_subscriptions`, `apply_attempts`,
//! `apply_journal`, `apply_pull`, `apply_outbox`, `apply_audit`, called once per round from
//! `apply_round`), its deletes and updates before its inserts (so a step that resolves
//! and re-arms a timer keeps the new one, and one that withdraws a dead attempt's outbox
//! rows and emits the next attempt's keeps the new row). A new family is one more such
//! function per store. Retention (`purge_finished`) is the one path that deletes
//! instances: one short transaction per batch, children first (outbox rows included,
//! whatever their state). Rows are batched across the round: PostgreSQL binds arrays
//! (`UNNEST`), one statement per kind of row; SQLite inserts multi-row `VALUES` in
//! chunks.

mod common;
pub mod journal_body;
pub mod postgres;
pub mod sqlite;
mod sqlite_commit;

pub use postgres::{PgConfig, PgStore};
pub use sqlite::{SqliteSettings, SqliteStore, StoreFile};

/// Errors from opening or connecting a store. Errors of the store operations themselves
/// are `qflow_store::StoreError`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open database {target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("cannot migrate database {target}: {source}")]
    Migrate {
        target: String,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// The file holds something other than a qflow store (another program's database,
    /// a text file, a directory): it is neither opened nor changed.
    #[error("{target} is not a qflow store: it is {found}")]
    NotAStore { target: String, found: String },
    /// The SQLite store's committer could not open its own connection to the file.
    #[error("cannot open database {target} for commits: {source}")]
    Committer {
        target: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("invalid store configuration: {0}")]
    Config(String),
}
