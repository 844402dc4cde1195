//! The stores a durable feature test runs its story on, opened again after each restart
//! the story makes: one SQLite file, or a fresh schema of the PostgreSQL database that
//! `QFLOW_TEST_PG_URL` names (without it, the PostgreSQL half says it is skipped).

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use qflow_persistence::{PgConfig, PgStore, SqliteStore};
use qflow_store::Store;

/// Opens the story's store; each call opens it again, as a restarted process would.
pub type Opener = Box<dyn Fn() -> BoxFuture<'static, Arc<dyn Store>> + Send + Sync>;

/// An opener of the SQLite file at `path`.
pub fn sqlite(path: PathBuf) -> Opener {
    Box::new(move || {
        let path = path.clone();
        async move {
            let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.expect("open"));
            store
        }
        .boxed()
    })
}

/// An opener of a fresh schema `<prefix>_<uuid>` at `QFLOW_TEST_PG_URL` with at most
/// `max_connections` connections; `None`, after saying the test is skipped, without it.
pub fn postgres(prefix: &str, max_connections: u32) -> Option<Opener> {
    let url = match std::env::var("QFLOW_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            eprintln!("skipped: QFLOW_TEST_PG_URL not set");
            return None;
        }
    };
    let schema = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    Some(Box::new(move || {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            let config = PgConfig {
                schema: Some(schema),
                max_connections,
            };
            let store: Arc<dyn Store> =
                Arc::new(PgStore::connect_with(&url, config).await.expect("connect"));
            store
        }
        .boxed()
    }))
}

/// The store a host binary (`qflow-server-host`, `qflow-activity-host`) runs on, from its
/// `--db FILE` or `--database-url URL` (with `--schema`) arguments.
pub async fn host_store(
    db: Option<String>,
    url: Option<String>,
    schema: Option<String>,
    max_connections: u32,
) -> anyhow::Result<Arc<dyn Store>> {
    use anyhow::Context;
    Ok(match (db, url) {
        (Some(db), None) => Arc::new(SqliteStore::open(&db).await.context("open sqlite")?),
        (None, Some(url)) => Arc::new(
            PgStore::connect_with(
                &url,
                PgConfig {
                    schema,
                    max_connections,
                },
            )
            .await
            .context("connect postgres")?,
        ),
        _ => anyhow::bail!("give --db FILE or --database-url URL"),
    })
}
