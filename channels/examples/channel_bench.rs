//! Durable channel calls per second, end to end on SQLite (issue 9's benchmark): a
//! process `start → charge (q:channel) → end`, a closed loop of `--window` live
//! instances, each call delivered by the outbox dispatcher and answered at once by the
//! counterpart — in-process (`--adapter=in_process`) or an HTTP webhook on loopback
//! (`--adapter=webhook`, a small axum server in this process answering `200` with a
//! JSON answer, requests signed). One call is two durable steps (the start that emits the
//! request, the answer that completes it) plus the dispatcher's claim and delivery
//! record. Every started instance must complete, with exactly one delivery each.
//!
//! ```text
//! cargo run --release -p qflow-channels --example channel_bench -- --adapter=in_process
//! cargo run --release -p qflow-channels --example channel_bench -- --adapter=webhook
//! options: --secs=5 --warmup=1.5 --window=1000 --lanes=1
//! ```
//! The SQLite file lives under `QFLOW_BENCH_DIR`, else the system temp dir (a real disk
//! here: fsyncs are real).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use qflow_channels::{
    Answer, Channel, Channels, DeliveryCurve, Dispatcher, DispatcherConfig, Reply, Request, Secret,
    Webhook,
};
use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock};
use qflow_store::Store;

const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="checkout" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="charge" q:channel="payments">
      <extensionElements><q:timeout duration="PT5M"/></extensionElements>
    </serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>
    <sequenceFlow id="f1" sourceRef="charge" targetRef="end"/>
  </process>
</definitions>"#;

struct Args {
    adapter: String,
    secs: f64,
    warmup: f64,
    window: usize,
    lanes: usize,
}

fn args() -> Args {
    let mut a = Args {
        adapter: "in_process".into(),
        secs: 5.0,
        warmup: 1.5,
        window: 1000,
        lanes: 1,
    };
    for arg in std::env::args().skip(1) {
        let (k, v) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
        match k {
            "--adapter" => a.adapter = v.to_owned(),
            "--secs" => a.secs = v.parse().expect("--secs"),
            "--warmup" => a.warmup = v.parse().expect("--warmup"),
            "--window" => a.window = v.parse().expect("--window"),
            "--lanes" => a.lanes = v.parse().expect("--lanes"),
            "--bench" => {}
            other => panic!("unknown option {other}"),
        }
    }
    a
}

fn receipt() -> Answer {
    let vars = serde_json::json!({"receipt": "r"});
    Answer::variables(vars.as_object().unwrap().clone().into_iter().collect())
}

async fn counterpart(deliveries: Arc<AtomicU64>) -> String {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/pay",
        post(move |body: axum::body::Bytes| {
            let deliveries = deliveries.clone();
            async move {
                let _: Request = serde_json::from_slice(&body).expect("a request");
                deliveries.fetch_add(1, Ordering::Relaxed);
                axum::Json(serde_json::to_value(receipt()).unwrap())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/pay")
}

#[tokio::main]
async fn main() {
    let a = args();
    let dir = std::env::var_os("QFLOW_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(dir).unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(tmp.path().join("bench.db"))
            .await
            .unwrap(),
    );
    let deliveries = Arc::new(AtomicU64::new(0));
    let mut channels = Channels::new();
    match a.adapter.as_str() {
        "in_process" => {
            let d = deliveries.clone();
            channels.in_process("payments", DeliveryCurve::default(), move |_r: Request| {
                d.fetch_add(1, Ordering::Relaxed);
                async { Ok(Reply::Answer(receipt())) }.boxed()
            });
        }
        "webhook" => {
            let url = counterpart(deliveries.clone()).await;
            let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
            let hook = Webhook::new(
                &url,
                Duration::from_secs(2),
                Duration::from_secs(10),
                Some(secret),
                Arc::new(|| 0),
            )
            .unwrap();
            channels.add(Channel {
                name: "payments".into(),
                adapter: Arc::new(hook),
                curve: DeliveryCurve::default(),
                response_timeout_ms: 10_000,
            });
        }
        other => panic!("--adapter: {other} is not in_process or webhook"),
    }
    let config = RuntimeConfig {
        lanes: a.lanes,
        channels: channels.names(),
        retention: None,
        ..RuntimeConfig::default()
    };
    let runtime = Arc::new(Runtime::start(
        store.clone(),
        AsyncHandlers::new(),
        Arc::new(SystemClock),
        config,
    ));
    let dispatcher = Dispatcher::start(
        runtime.clone(),
        Arc::new(channels),
        DispatcherConfig::default(),
    );
    let dep = runtime.deploy(MODEL, None).await.unwrap().id;

    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let completed = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..a.window {
        let (runtime, counting, stop, started, completed) = (
            runtime.clone(),
            counting.clone(),
            stop.clone(),
            started.clone(),
            completed.clone(),
        );
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let counted = counting.load(Ordering::Relaxed);
                let (_, watch) = runtime
                    .start_and_watch(dep, Default::default())
                    .await
                    .expect("starts");
                if counted {
                    started.fetch_add(1, Ordering::Relaxed);
                }
                let seen = watch.answered().await.expect("answered");
                assert_eq!(seen.status, qflow_core::Status::Completed);
                if counted {
                    completed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(a.warmup)).await;
    let d0 = deliveries.load(Ordering::Relaxed);
    let t0 = Instant::now();
    counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(a.secs)).await;
    counting.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let n = completed.load(Ordering::Relaxed);
    assert_eq!(
        n,
        started.load(Ordering::Relaxed),
        "every counted instance completed"
    );
    let stats = dispatcher.stats();
    let calls_per_s = n as f64 / elapsed;
    println!(
        "adapter={} lanes={} window={} calls={} secs={:.2} calls/s={:.0} deliveries_in_window={} answers_taken={} answers_refused={} failed_tries={}",
        a.adapter,
        a.lanes,
        a.window,
        n,
        elapsed,
        calls_per_s,
        deliveries.load(Ordering::Relaxed) - d0,
        stats.answers_taken.load(Ordering::Relaxed),
        stats.answers_refused.load(Ordering::Relaxed),
        stats.failed_tries.load(Ordering::Relaxed),
    );
    dispatcher.shutdown().await;
    let total_delivered = deliveries.load(Ordering::Relaxed);
    let taken = stats.answers_taken.load(Ordering::Relaxed);
    assert_eq!(
        stats.answers_refused.load(Ordering::Relaxed),
        0,
        "no answer refused"
    );
    assert!(total_delivered >= taken);
}
