//! A host that embeds the HTTP server with the test handlers (`prep`, `flaky`): what a
//! real application that embeds qflow looks like, and the process the two-server test
//! kills and the HTTP benchmark loads.
//!
//! ```text
//! qflow-server-host (--db FILE | --database-url URL [--schema S]) --listen ADDR
//!                   [--fast-recovery] [--lanes K] [--channel-url URL]
//!                   [--lifecycle-url URL]
//! ```
//!
//! The bearer token comes from `QFLOW_HOST_TOKEN` (all scopes). On start it deploys the
//! flaky model (process `flaky`, retrying task `retrying`) and a one-task model (`one`), prints `listening ADDR` and serves
//! until SIGTERM or SIGINT.
//!
//! With `--channel-url`, the host also has a webhook channel `payments` posting to that
//! URL, built from the same settings a `[channels.payments]` table gives `qflow serve`,
//! its signing secret from `QFLOW_HOST_CHANNEL_SECRET`, and runs the outbox dispatcher.
//! With `--fast-recovery` the dispatcher's lease is short (2 s, over the channel's 1 s
//! response timeout), so the rows a killed host held are delivered again within seconds.
//! With `--lifecycle-url`, a second webhook channel `events` posts to that URL and is the
//! lifecycle channel (C10): every committed retry transition is sent there.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context};
use qflow_channels::{ChannelSettings, Channels, DeliveryCurve, Dispatcher, DispatcherConfig};
use qflow_ops::Ops;
use qflow_runtime::{Runtime, RuntimeConfig, SystemClock};
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use qflow_tests::{fast_recovery_config, flaky_model, handlers, one_task_model};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut db, mut url, mut schema, mut listen) = (None, None, None, None);
    let (mut fast, mut lanes, mut channel_url) = (false, 2usize, None);
    let mut lifecycle_url: Option<String> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next(),
            "--database-url" => url = args.next(),
            "--schema" => schema = args.next(),
            "--listen" => listen = args.next(),
            "--fast-recovery" => fast = true,
            "--lanes" => lanes = args.next().context("--lanes K")?.parse()?,
            "--channel-url" => channel_url = Some(args.next().context("--channel-url URL")?),
            "--lifecycle-url" => lifecycle_url = Some(args.next().context("--lifecycle-url URL")?),
            other => bail!("unknown argument {other}"),
        }
    }
    let listen: SocketAddr = listen.context("--listen ADDR")?.parse()?;
    let store = qflow_tests::stores::host_store(db, url, schema, 8).await?;
    let secret = std::env::var("QFLOW_HOST_TOKEN").context("QFLOW_HOST_TOKEN")?;
    let mut sha256 = [0u8; 32];
    hex::decode_to_slice(hash_token(&secret), &mut sha256)?;
    let tokens = Tokens::new(vec![Token {
        name: "host".to_owned(),
        sha256,
        scopes: Scope::ALL.into_iter().collect(),
    }]);
    let mut config = if fast {
        fast_recovery_config(lanes)
    } else {
        RuntimeConfig {
            lanes,
            ..RuntimeConfig::default()
        }
    };
    let mut channels = match &channel_url {
        Some(url) => webhook("payments", url)?,
        None => Channels::new(),
    };
    if let Some(url) = &lifecycle_url {
        for channel in webhook("events", url)?.into_channels() {
            channels.add(channel);
        }
        config.lifecycle_channel = Some("events".to_owned());
    }
    config.channels = channels.names();
    let runtime = Arc::new(Runtime::start(
        store,
        handlers(),
        Arc::new(SystemClock),
        config,
    ));
    let dispatcher = (!channels.is_empty()).then(|| {
        let lease_ms = if fast { 2_000 } else { 60_000 };
        let dispatcher_config = DispatcherConfig {
            lease_ms,
            poll_interval_ms: 20,
            ..DispatcherConfig::default()
        };
        Dispatcher::start(runtime.clone(), Arc::new(channels), dispatcher_config)
    });
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
    if let Some(dispatcher) = dispatcher {
        dispatcher.shutdown().await;
    }
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown().await;
    }
    Ok(())
}

/// The webhook channel `name` to `url`, through the settings `qflow serve` reads from
/// `[channels.<name>]`: a 1 s response timeout and a delivery curve of 50 ms doubling to
/// 500 ms, without a ceiling.
fn webhook(name: &str, url: &str) -> anyhow::Result<Channels> {
    let settings = ChannelSettings {
        adapter: "webhook".to_owned(),
        url: Some(url.to_owned()),
        connect_timeout_ms: 500,
        response_timeout_ms: 1_000,
        secret_env: Some("QFLOW_HOST_CHANNEL_SECRET".to_owned()),
        secret_file: None,
        ca_file: None,
        delivery: DeliveryCurve {
            initial_ms: 50,
            multiplier_milli: 2_000,
            max_ms: 500,
            ceiling: None,
        },
    };
    let env = |name: &str| std::env::var(name).ok();
    let now_s = Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    });
    let channel = settings.build(name, &env, now_s)?;
    let mut channels = Channels::new();
    channels.add(channel);
    Ok(channels)
}
