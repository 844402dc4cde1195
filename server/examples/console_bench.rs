//! How long each console page takes the server with many instances in the store (issue
//! 12: no page over 200 ms with 100,000 instances).
//!
//! Fills a fresh SQLite store (a temporary directory) with instances of the demo order
//! model through the runtime — one in ten ends FAILED with an incident after its four
//! attempts, the rest complete — then signs in and requests every page through the
//! router (no socket, so the time is the server's own: routing, session, `Ops`, the store,
//! rendering), several times each, and prints the median and the slowest.
//!
//! ```sh
//! cargo run --release -p qflow-server --example console_bench -- 100000
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use futures::StreamExt;
use http_body_util::BodyExt;
use qflow_ops::{InstanceQuery, Ops, StartRequest};
use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock, TaskContext, TaskOutcome};
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use tower::ServiceExt;

const MODEL: &str = include_str!("../../cli/examples/orders.bpmn");
const SECRET: &str = "bench-secret";
/// Requests per page; the figure is their median and their maximum.
const RUNS: usize = 15;
/// Starts in flight while filling.
const STARTS_IN_FLIGHT: usize = 256;

fn handlers() -> AsyncHandlers {
    let ok = |_: &TaskContext<'_>| TaskOutcome::Ok(Default::default());
    AsyncHandlers::new()
        .with_sync("reserve", ok)
        .with_sync("ship", ok)
        .with_sync("release", ok)
        .with_sync("charge", |ctx: &TaskContext<'_>| {
            let h = ctx
                .instance_id
                .bytes()
                .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
            if h % 10 == 0 {
                TaskOutcome::Fail {
                    code: "GATEWAY_UNAVAILABLE".into(),
                    message: format!("gateway timed out (attempt {})", ctx.attempt),
                }
            } else {
                TaskOutcome::Ok(Default::default())
            }
        })
}

async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    cookie: &str,
    form: Option<String>,
) -> (StatusCode, String, Duration) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::COOKIE, cookie);
    let body = match form {
        Some(f) => {
            req = req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            Body::from(f)
        }
        None => Body::empty(),
    };
    let started = Instant::now();
    let res = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let took = started.elapsed();
    (status, String::from_utf8_lossy(&bytes).into_owned(), took)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(dir.path().join("bench.sqlite")).await?);
    let config = RuntimeConfig {
        lanes: 2,
        ..RuntimeConfig::default()
    };
    let rt = Arc::new(Runtime::start(
        store,
        handlers(),
        Arc::new(SystemClock),
        config,
    ));
    let ops = Ops::with_runtime(rt.clone(), "bench");
    let dep = ops.deploy(MODEL, None).await?;

    let fill = Instant::now();
    let mut starts = futures::stream::iter(0..n)
        .map(|_| {
            let ops = ops.clone();
            async move {
                ops.start(StartRequest {
                    deployment: Some(dep.id),
                    ..StartRequest::default()
                })
                .await
            }
        })
        .buffer_unordered(STARTS_IN_FLIGHT);
    while let Some(r) = starts.next().await {
        r?;
    }
    drop(starts);
    // Wait until nothing runs any more (the FAILED ones spend ~2 s of backoff).
    loop {
        let running = ops
            .instances(&InstanceQuery {
                status: Some("running".into()),
                limit: 1,
                ..InstanceQuery::default()
            })
            .await?;
        if running.items.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let counts = ops.instance_counts(None).await?;
    eprintln!(
        "filled {n} instances in {:.1} s: {} completed, {} failed",
        fill.elapsed().as_secs_f64(),
        counts.completed,
        counts.failed
    );

    let mut sha256 = [0u8; 32];
    hex::decode_to_slice(hash_token(SECRET), &mut sha256)?;
    let tokens = Tokens::new(vec![Token {
        name: "bench".into(),
        sha256,
        scopes: Scope::ALL.into_iter().collect(),
    }]);
    let app = qflow_server::router(ops.clone(), tokens, Some(rt.stats()), &Limits::default());
    let res = app
        .clone()
        .oneshot(
            Request::post("/console/sign-in")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("token={SECRET}")))?,
        )
        .await?;
    let cookie = res.headers()[header::SET_COOKIE]
        .to_str()?
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (_, listing, _) = send(&app, Method::GET, "/console/instances", &cookie, None).await;
    let csrf = listing
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_owned();
    let failed = ops
        .instances(&InstanceQuery {
            status: Some("failed".into()),
            limit: 1,
            ..InstanceQuery::default()
        })
        .await?
        .items
        .remove(0)
        .id;
    let middle = ops
        .instances(&InstanceQuery {
            limit: (n / 2).min(10_000) as u32,
            ..InstanceQuery::default()
        })
        .await?
        .next
        .unwrap_or_default();
    let target = ops
        .deploy(
            &MODEL.replace("maxAttempts=\"4\"", "maxAttempts=\"6\""),
            None,
        )
        .await?;

    let pages: Vec<(&str, Method, String, Option<String>)> = vec![
        ("instances", Method::GET, "/console/instances".into(), None),
        (
            "instances, a later page",
            Method::GET,
            format!("/console/instances?cursor={middle}"),
            None,
        ),
        (
            "instances ?state=failed",
            Method::GET,
            "/console/instances?state=failed".into(),
            None,
        ),
        (
            "instances ?failure_code=…",
            Method::GET,
            "/console/instances?failure_code=GATEWAY_UNAVAILABLE".into(),
            None,
        ),
        (
            "instances ?node=charge",
            Method::GET,
            "/console/instances?node=charge".into(),
            None,
        ),
        (
            "instances ?deployment=1",
            Method::GET,
            "/console/instances?deployment=1".into(),
            None,
        ),
        (
            "instances ?state=completed",
            Method::GET,
            "/console/instances?state=completed".into(),
            None,
        ),
        (
            "instances ?deployment=1&state=completed",
            Method::GET,
            "/console/instances?deployment=1&state=completed".into(),
            None,
        ),
        (
            "instance (FAILED)",
            Method::GET,
            format!("/console/instances/{failed}"),
            None,
        ),
        (
            "confirm resume",
            Method::GET,
            format!("/console/instances/{failed}/confirm?action=resume-keep"),
            None,
        ),
        ("incidents", Method::GET, "/console/incidents".into(), None),
        (
            "deployments",
            Method::GET,
            "/console/deployments".into(),
            None,
        ),
        (
            "retry preview",
            Method::GET,
            "/console/deployments/1/retries".into(),
            None,
        ),
        (
            "migrate: map nodes",
            Method::GET,
            format!("/console/migrate?source=1&target={}", target.id),
            None,
        ),
        (
            "migrate: dry run of one instance",
            Method::POST,
            "/console/migrate".into(),
            Some(format!(
                "csrf={csrf}&source=1&target={}&instance={failed}&mode=dry-run",
                target.id
            )),
        ),
        (
            "diagram source",
            Method::GET,
            "/console/deployments/1/source.bpmn".into(),
            None,
        ),
    ];
    println!("| page | median ms | max ms |");
    println!("|---|---:|---:|");
    let mut worst = Duration::ZERO;
    for (name, method, uri, form) in pages {
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let (status, text, took) =
                send(&app, method.clone(), &uri, &cookie, form.clone()).await;
            assert_eq!(status, StatusCode::OK, "{name}: {text}");
            times.push(took);
        }
        times.sort();
        let max = *times.last().unwrap();
        worst = worst.max(max);
        println!(
            "| {name} | {:.1} | {:.1} |",
            times[RUNS / 2].as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    println!(
        "\nslowest request of all: {:.1} ms ({n} instances)",
        worst.as_secs_f64() * 1e3
    );
    drop(app);
    drop(ops);
    if let Ok(rt) = Arc::try_unwrap(rt) {
        rt.shutdown().await;
    }
    Ok(())
}
