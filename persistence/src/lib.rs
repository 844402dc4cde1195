//! Durable stores (SQLite, PostgreSQL) implementing `qflow_engine::store::Store`.
