//! A host process for the crash test: runs the flaky model on a SQLite file until every
//! instance in it is finished, and can be killed at any moment.
//!
//! `qflow-crash-host DB start N` deploys the model, starts N instances (the `i`-th told to
//! fail `i % 4` times), prints `started N` once all N are durable, and runs on.
//! `qflow-crash-host DB resume` only runs what the file holds. Either prints `done` and
//! exits 0 once no instance is running.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use futures::{StreamExt, TryStreamExt};
use qflow_persistence::SqliteStore;
use qflow_store::{InstanceFilter, InstanceStatus, Store};
use qflow_tests::{fast_recovery_config, flaky_model, start_runtime};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (db, mode) = match args.as_slice() {
        [_, db, mode, ..] => (db.clone(), mode.clone()),
        _ => bail!("usage: qflow-crash-host DB start N | DB resume"),
    };
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).await.context("open")?);
    let runtime = start_runtime(store.clone(), fast_recovery_config(2));
    if mode == "start" {
        let n: u32 = args.get(3).context("N")?.parse().context("N")?;
        let dep = runtime
            .deploy(&flaky_model("crash", "flaky", 150), None)
            .await?;
        futures::stream::iter(0..n)
            .map(|i| {
                let vars = [("fail".to_owned(), serde_json::json!(i % 4))].into();
                runtime.start_instance(dep.id, vars)
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
        println!("started {n}");
    }
    let running = InstanceFilter {
        status: Some(InstanceStatus::Running),
        limit: 1,
        ..InstanceFilter::default()
    };
    // Polling the store (not a lane) for the end of the run.
    while !store.instances(&running).await?.is_empty() {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    runtime.shutdown().await;
    println!("done");
    Ok(())
}
