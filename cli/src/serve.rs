//! `qflow serve`: the HTTP API and the operator console (`/console/`, `docs/console.md`),
//! and with `--demo` the bundled order model and its scripted handlers, over the
//! embedded SQLite default or a PostgreSQL database.
//!
//! First contact: with no configured tokens, the server makes an admin token, prints it
//! once and keeps only its SHA-256, in a file beside the store (`<db>.admin-token`, mode
//! 0600), so a restart keeps the same token without ever writing it down. Several
//! `qflow serve` processes on one PostgreSQL database are replicas.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use qflow_channels::{Channels, Dispatcher, DispatcherConfig};
use qflow_ops::Ops;
use qflow_persistence::PgStore;
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock};
use qflow_server::{auth, Scope, ServerConfig, Token, Tokens};
use qflow_store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server configuration (`qflow.toml`: listen address, limits, tokens).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where to listen, overriding the configuration (default 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The SQLite file to serve; created when missing.
    #[arg(long, default_value = "qflow.sqlite")]
    db: PathBuf,
    /// A PostgreSQL URL to serve instead (better from the environment variable, so the
    /// password stays out of the process list).
    #[arg(long, env = "QFLOW_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Register the demo's scripted handlers and deploy the bundled order model (the one
    /// `qflow run` runs), so the API has something to show.
    #[arg(long)]
    demo: bool,
    /// Lane executors. Default 1 on SQLite (one lane keeps its one writer busy, and more
    /// only slow it), 2 on PostgreSQL (`qflow_runtime::default_lanes`).
    #[arg(long)]
    lanes: Option<usize>,
    /// How long ended (completed or cancelled) instances are kept before they are
    /// purged: an ISO-8601 duration (`P7D`, `PT12H`) or `forever`. Overrides the
    /// configuration's `retention.default` (default 7 days). FAILED instances are kept
    /// until resolved, whatever this says.
    #[arg(long, value_parser = qflow_server::config::parse_retention)]
    retention: Option<i64>,
    /// Journal every process's steps (SPEC G3, docs/replay.md), whatever the
    /// configuration's `[journal]` says.
    #[arg(long)]
    journal: bool,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(serve(args))
}

async fn serve(args: &Args) -> Result<ExitCode> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            ServerConfig::from_toml(&text, &path.display().to_string())?
        }
        None => ServerConfig::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    // Before anything is opened or written: a start refused for a channel's settings
    // (a secret's variable unset) must leave no store behind, and above all no admin
    // token whose hash is kept but which was never printed.
    let channels = build_channels(&config, args.config.as_deref())?;
    let (store, token_file): (Arc<dyn Store>, PathBuf) = match &args.database_url {
        Some(url) => {
            // The URL is not repeated in the error: it may carry a password.
            let store = PgStore::connect(url).await.map_err(|e| {
                anyhow::anyhow!("connecting to PostgreSQL failed: {}", pg_reason(&e))
            })?;
            (Arc::new(store), PathBuf::from("qflow-postgres.admin-token"))
        }
        None => {
            let store = crate::run::open_store(&args.db).await?;
            (Arc::new(store), token_file_for(&args.db))
        }
    };
    // Bound before an admin token is made: a port that is taken must not leave behind
    // the hash of a token nobody was shown (the next start would then refuse every
    // request until the file is deleted).
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let mut first_token = None;
    if config.tokens.is_empty() {
        let (token, fresh) = admin_token(&token_file)?;
        first_token = fresh;
        config.tokens.push(token);
    }
    let handlers = if args.demo {
        crate::run::handlers()
    } else {
        AsyncHandlers::new()
    };
    if let Some(ms) = args.retention {
        config.retention.default_ms = ms;
    }
    if args.journal {
        config.journal = qflow_runtime::journal::JournalPolicy::All;
    }
    let runtime_config = RuntimeConfig {
        lanes: args
            .lanes
            .unwrap_or_else(|| qflow_runtime::default_lanes(&*store))
            .max(1),
        retention: Some(config.retention.clone()),
        channels: channels.names(),
        lifecycle_channel: config.lifecycle_channel.clone(),
        delegates: config.delegates.clone(),
        journal: config.journal.clone(),
        ..RuntimeConfig::default()
    };
    let runtime = Arc::new(Runtime::start(
        store.clone(),
        handlers,
        Arc::new(SystemClock),
        runtime_config,
    ));
    // The outbox is delivered by this process (and by any other replica on the store):
    // channel requests, and the signals instances throw. Without channels only signal
    // rows can be there; this process prompts the dispatcher after every commit that
    // writes one, so a slow poll (another replica's throws) keeps the idle dispatcher
    // from taking the store's single writer every 50 ms.
    let dispatcher_config = if channels.is_empty() {
        DispatcherConfig {
            poll_interval_ms: 1_000,
            ..DispatcherConfig::default()
        }
    } else {
        DispatcherConfig::default()
    };
    let dispatcher = Dispatcher::start(runtime.clone(), Arc::new(channels), dispatcher_config);
    let ops = Ops::with_runtime(runtime.clone(), "qflow-serve");
    if args.demo {
        let d = ops
            .deploy(crate::run::ORDERS_MODEL, None)
            .await
            .context("deploying the bundled order model")?;
        say_err!(
            "qflow: deployed the bundled order model as deployment {}",
            d.id
        );
    }
    let addr = listener.local_addr()?;
    let app = qflow_server::router_with_console(
        ops,
        Tokens::new(config.tokens.clone()),
        Some(runtime.stats()),
        &config.limits,
        &config.console,
    );
    {
        let mut err = std::io::stderr().lock();
        writeln!(
            err,
            "qflow: serving http://{addr}  (console: http://{addr}/console/, API docs: \
             http://{addr}/openapi.json)"
        )?;
        match &first_token {
            Some(token) => writeln!(
                err,
                "qflow: admin token (shown once, only its hash is kept in {}):\n\n    {token}\n\n\
                 qflow: try  curl -H 'Authorization: Bearer {token}' http://{addr}/v1/deployments",
                token_file.display()
            )?,
            None if args.config.is_none() => writeln!(
                err,
                "qflow: using the admin token made on first start (its hash is in {}; delete \
                 that file for a new token)",
                token_file.display()
            )?,
            None => {}
        }
    }
    let shutdown = async {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installs the SIGTERM handler");
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        say_err!("qflow: shutting down: finishing requests and running handlers");
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving HTTP")?;
    // The router (and every `Ops` clone in it) is gone; the dispatcher finishes the
    // deliveries in flight (a row whose try is not recorded is tried again on the next
    // start), then the runtime lets its handlers finish and commits their outcomes.
    dispatcher.shutdown().await;
    sole(runtime).await?.shutdown().await;
    // Closed, a SQLite file is whole on its own: the WAL is folded into it and the `-wal`
    // and `-shm` files beside it are removed.
    store.close().await;
    Ok(ExitCode::SUCCESS)
}

/// How long shutdown waits for the last clones of the runtime to go.
const RUNTIME_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The runtime once nothing else holds it. A connection's task can still hold its clone
/// of the router (and so of the runtime) for a moment after the graceful shutdown has
/// returned (seen once in `cli/tests/serve.rs`: "still in use at shutdown"), so the last
/// clones are given a bounded time to go rather than failing the shutdown at once.
async fn sole(mut runtime: Arc<Runtime>) -> Result<Runtime> {
    let deadline = tokio::time::Instant::now() + RUNTIME_RELEASE_WAIT;
    loop {
        match Arc::try_unwrap(runtime) {
            Ok(runtime) => return Ok(runtime),
            Err(shared) if tokio::time::Instant::now() < deadline => {
                runtime = shared;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(shared) => bail!(
                "the runtime was still in use at shutdown ({} holders after {} s)",
                Arc::strong_count(&shared) - 1,
                RUNTIME_RELEASE_WAIT.as_secs()
            ),
        }
    }
}

/// The channels of `[channels.<name>]`, their secrets read from the environment or their
/// files now, so a missing secret stops the start instead of the first delivery.
fn build_channels(config: &ServerConfig, origin: Option<&std::path::Path>) -> Result<Channels> {
    let origin = origin.map_or_else(|| "qflow.toml".to_owned(), |p| p.display().to_string());
    let env = |name: &str| std::env::var(name).ok();
    let now_s: Arc<dyn Fn() -> i64 + Send + Sync> = Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    });
    let mut channels = Channels::new();
    for (name, settings) in &config.channels {
        let channel = settings
            .build(name, &env, now_s.clone())
            .map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        channels.add(channel);
    }
    Ok(channels)
}

/// The error's reason without the URL it was given.
fn pg_reason(e: &qflow_persistence::Error) -> String {
    let text = e.to_string();
    text.split("postgres://")
        .next()
        .unwrap_or(&text)
        .trim_end()
        .to_owned()
}

fn token_file_for(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".admin-token");
    db.with_file_name(name)
}

/// The admin token of a server without configured tokens: the hash kept in `file`, or a
/// fresh token whose hash is written there (returned so it is printed once).
fn admin_token(file: &Path) -> Result<(Token, Option<String>)> {
    let all = Scope::ALL.into_iter().collect();
    if let Ok(text) = std::fs::read_to_string(file) {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut sha256).map_err(|_| {
            anyhow::anyhow!(
                "{} does not hold a token hash (64 hex digits); delete it for a new admin token",
                file.display()
            )
        })?;
        let token = Token {
            name: "admin".to_owned(),
            sha256,
            scopes: all,
        };
        return Ok((token, None));
    }
    let secret = auth::generate_token().context("reading the system's randomness")?;
    let hash = auth::hash_token(&secret);
    write_private(file, &format!("{hash}\n"))
        .with_context(|| format!("writing {}", file.display()))?;
    let mut sha256 = [0u8; 32];
    hex::decode_to_slice(&hash, &mut sha256).expect("a SHA-256 in hex");
    Ok((
        Token {
            name: "admin".to_owned(),
            sha256,
            scopes: all,
        },
        Some(secret),
    ))
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(text.as_bytes())
}

#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TokenCommand {
    /// Make a new random token; prints it, then the `sha256` line for `qflow.toml`.
    New,
    /// Read a token from stdin and print its SHA-256 for `qflow.toml`.
    Hash,
}

pub fn token(args: &TokenArgs) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match args.command {
        TokenCommand::New => {
            let secret = auth::generate_token().context("reading the system's randomness")?;
            writeln!(out, "{secret}")?;
            writeln!(out, "sha256 = \"{}\"", auth::hash_token(&secret))?;
        }
        TokenCommand::Hash => {
            let mut secret = String::new();
            std::io::stdin().read_line(&mut secret)?;
            let secret = secret.trim_end_matches(['\r', '\n']);
            if secret.is_empty() {
                bail!("no token on stdin");
            }
            writeln!(out, "sha256 = \"{}\"", auth::hash_token(secret))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
