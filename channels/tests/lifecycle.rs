//! Lifecycle events (SPEC C10): with a lifecycle channel configured, every committed
//! retry transition of an instance becomes one outbox row for that channel, in the commit
//! of the step that caused it, and the dispatcher delivers it like any request.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use qflow_channels::{Channels, DeliveryCurve, Reply, Request};
use qflow_core::{Budget, Input};
use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, ManualClock, TaskOutcome};
use qflow_store::{InstanceStatus, Store};

mod support;

const T0: i64 = 1_700_000_000_000;

/// Two attempts, 10 s apart: the first fails, the second fails for good.
const PAY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="payment" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="pay" q:task="pay"><extensionElements><q:retry maxAttempts="2" initialInterval="PT10S" jitter="none"/></extensionElements></serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
    <sequenceFlow id="f1" sourceRef="pay" targetRef="end"/>
  </process>
</definitions>"#;

async fn until(what: &str, done: impl Fn() -> bool) {
    let wait = async {
        while !done() {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("never happened: {what}"));
}

#[tokio::test]
async fn every_committed_retry_transition_is_one_event_delivered_in_fence_order() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("q.db")).await.unwrap());
    let clock = Arc::new(ManualClock::new(T0));
    let events: Arc<Mutex<Vec<Request>>> = Arc::default();
    let mut channels = Channels::new();
    let log = events.clone();
    channels.in_process(
        "retry-events",
        DeliveryCurve::default(),
        move |r: Request| {
            log.lock().unwrap().push(r);
            async { Ok(Reply::Accepted) }.boxed()
        },
    );
    // The handler fails twice, then (after the resume) succeeds.
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let handlers =
        AsyncHandlers::new().with_sync("pay", move |_: &qflow_runtime::TaskContext<'_>| {
            if counted.fetch_add(1, Ordering::SeqCst) < 2 {
                TaskOutcome::Fail {
                    code: "GATEWAY_DOWN".into(),
                    message: "503".into(),
                }
            } else {
                TaskOutcome::Ok(Default::default())
            }
        });
    let runtime = support::runtime(&store, &clock, &channels, handlers, |c| {
        c.lifecycle_channel = Some("retry-events".into());
    });
    let dispatcher = support::dispatcher(&runtime, channels);
    let dep = runtime.deploy(PAY, None).await.unwrap();
    let id = runtime
        .start_instance(dep.id, Default::default())
        .await
        .unwrap();
    until("the first failure's event", || {
        !events.lock().unwrap().is_empty()
    })
    .await;
    clock.advance_ms(10_000);
    until("FAILED", || events.lock().unwrap().len() >= 3).await;
    assert_eq!(
        store.instance(id).await.unwrap().unwrap().status,
        InstanceStatus::Failed
    );
    runtime
        .claim_and_step(
            id,
            Input::Resume {
                budget: Budget::Keep,
            },
        )
        .await
        .unwrap();
    until("resumed", || events.lock().unwrap().len() >= 4).await;
    let done = || async { store.instance(id).await.unwrap().unwrap().status };
    for _ in 0..1000 {
        if done().await == InstanceStatus::Completed {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(done().await, InstanceStatus::Completed);
    let seen = events.lock().unwrap().clone();
    let bodies: Vec<serde_json::Value> = seen
        .iter()
        .map(|r| serde_json::Value::Object(r.variables.clone().into_iter().collect()))
        .collect();
    let kinds: Vec<&str> = bodies
        .iter()
        .map(|b| b["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["attempt_failed", "attempt_failed", "failed", "resumed"]
    );
    assert_eq!(
        bodies[0]["next_attempt_at_ms"],
        T0 + 10_000,
        "parked: the next attempt's instant"
    );
    assert_eq!(bodies[0]["attempt"], 1);
    assert_eq!(
        bodies[1]["next_attempt_at_ms"],
        serde_json::Value::Null,
        "exhausted: no next"
    );
    assert_eq!(bodies[2]["code"], "GATEWAY_DOWN");
    assert_eq!(bodies[3]["budget"], "keep");
    // Ordered by the fences of the commits that caused them; one row per event, each key
    // delivered once.
    let fences: Vec<u64> = bodies
        .iter()
        .map(|b| b["fence"].as_u64().unwrap())
        .collect();
    assert!(fences.windows(2).all(|w| w[0] <= w[1]), "{fences:?}");
    let mut keys: Vec<&str> = seen.iter().map(|r| r.idempotency_key.as_str()).collect();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n);
    assert!(keys.iter().all(|k| k.starts_with(&format!("{id}/events/"))));
    dispatcher.shutdown().await;
}
