//! A host that embeds the HTTP server with the test handlers (`prep`, `flaky`): what a
//! real application that embeds qflow looks like, and the process the two-server test
//! kills and the HTTP benchmark loads.
//!
//! ```text
//! qflow-server-host (--db FILE | --database-url URL [--schema S]) --listen ADDR
//!                   [--fast-recovery] [--lanes K]
//! ```
//!
//! The bearer token comes from `QFLOW_HOST_TOKEN` (all scopes). On start it deploys the
//! flaky model (process `flaky`, retrying task `retrying`) and a one-task model (`one`), prints `listening ADDR` and serves
//! until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context};
use qflow_ops::Ops;
use qflow_persistence::{PgConfig, PgStore, SqliteStore};
use qflow_runtime::{Runtime, RuntimeConfig, SystemClock};
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use qflow_store::Store;
use qflow_tests::{fast_recovery_config, flaky_model, handlers, one_task_model};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut db, mut url, mut schema, mut listen) = (None, None, None, None);
    let (mut fast, mut lanes) = (false, 2usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next(),
            "--database-url" => url = args.next(),
            "--schema" => schema = args.next(),
            "--listen" => listen = args.next(),
            "--fast-recovery" => fast = true,
            "--lanes" => lanes = args.next().context("--lanes K")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let listen: SocketAddr = listen.context("--listen ADDR")?.parse()?;
    let store: Arc<dyn Store> = match (db, url) {
        (Some(db), None) => Arc::new(SqliteStore::open(&db).await.context("open sqlite")?),
        (None, Some(url)) => Arc::new(
            PgStore::connect_with(
                &url,
                PgConfig {
                    schema,
                    max_connections: 8,
                },
            )
            .await
            .context("connect postgres")?,
        ),
        _ => bail!("give --db FILE or --database-url URL"),
    };
    let secret = std::env::var("QFLOW_HOST_TOKEN").context("QFLOW_HOST_TOKEN")?;
    let mut sha256 = [0u8; 32];
    hex::decode_to_slice(hash_token(&secret), &mut sha256)?;
    let tokens = Tokens::new(vec![Token {
        name: "host".to_owned(),
        sha256,
        scopes: Scope::ALL.into_iter().collect(),
    }]);
    let config = if fast {
        fast_recovery_config(lanes)
    } else {
        RuntimeConfig {
            lanes,
            ..RuntimeConfig::default()
        }
    };
    let runtime = Arc::new(Runtime::start(
        store,
        handlers(),
        Arc::new(SystemClock),
        config,
    ));
    let ops = Ops::with_runtime(runtime.clone(), "host");
    ops.deploy(&flaky_model("flaky", "retrying", 100), None)
        .await?;
    ops.deploy(&one_task_model(), None).await?;
    let app = qflow_server::router(ops, tokens, Some(runtime.stats()), &Limits::default());
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening {}", listener.local_addr()?);
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown().await;
    }
    Ok(())
}
