//! Durable stores for qflow: the embedded SQLite file (the default) and PostgreSQL (the
//! scale-out path), both implementing [`qflow_engine::store::Store`] through sqlx, with
//! the schema kept as migrations in this crate (`migrations/sqlite`, `migrations/postgres`).
//!
//! What a store must never do: interpret snapshot bytes, acknowledge a commit before it
//! is durable (SQLite runs `synchronous=FULL`, PostgreSQL synchronous commits), or let a
//! commit whose fence check lost write any of its rows.
//!
//! Room for later issues: the outbox (C1–C6), correlation (C5, C7) and pull-task (P1)
//! tables arrive as further numbered migrations in both directories, written in the same
//! batch transaction as the instance they belong to. No table is created before the code
//! that uses it.

mod common;
pub mod postgres;
pub mod sqlite;

pub use postgres::{PgConfig, PgStore};
pub use sqlite::SqliteStore;

/// Errors from opening or connecting a store. Errors of the store operations themselves
/// are `qflow_engine::store::StoreError`.
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
    #[error("invalid store configuration: {0}")]
    Config(String),
}
