//! The runtime shell over the in-memory store: lanes, group commits, handlers, L7. Every
//! runtime here runs on a [`ManualClock`]: time moves only when a test moves it, and no
//! test sleeps.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use qflow_runtime::{AsyncHandlers, Clock, ManualClock, Runtime, RuntimeConfig};
use qflow_runtime::{Error, TaskOutcome};
use qflow_store::memory::MemoryStore;
use qflow_store::{AttemptOutcome, InstanceFilter, InstanceStatus, Store};
use support::{deploy_and_start, hang_guard};

/// The manual clock's start: an ordinary instant.
const T0: i64 = 1_700_000_000_000;

const LINEAR: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="linear" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="a" q:task="count"/>
    <serviceTask id="b" q:task="count"/>
    <serviceTask id="c" q:task="count"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="a"/>
    <sequenceFlow id="f1" sourceRef="a" targetRef="b"/>
    <sequenceFlow id="f2" sourceRef="b" targetRef="c"/>
    <sequenceFlow id="f3" sourceRef="c" targetRef="end"/>
  </process>
</definitions>"#;

const WITH_RETRY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="retrying" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="a" q:task="count"><extensionElements><q:retry/></extensionElements></serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="a"/>
    <sequenceFlow id="f1" sourceRef="a" targetRef="end"/>
  </process>
</definitions>"#;

fn counting(calls: Arc<AtomicU32>) -> AsyncHandlers {
    AsyncHandlers::new().with_sync("count", move |_: &qflow_runtime::TaskContext<'_>| {
        calls.fetch_add(1, Ordering::SeqCst);
        TaskOutcome::Ok(Default::default())
    })
}

fn runtime(store: Arc<dyn Store>, handlers: AsyncHandlers, lanes: usize) -> Runtime {
    let config = RuntimeConfig {
        lanes,
        ..RuntimeConfig::default()
    };
    Runtime::start(store, handlers, Arc::new(ManualClock::new(T0)), config)
}

#[tokio::test]
async fn a_model_the_loader_refuses_is_refused_at_deploy_with_its_diagnostics() {
    let broken = LINEAR.replace(r#"targetRef="end"/>"#, r#"targetRef="nowhere"/>"#);
    assert_deploy_refused(&broken, "model", "nowhere").await;
    assert_deploy_refused("<definitions", "model", "1:").await;
}

/// Deploying `model` on the memory store is refused with a reason containing `needle`,
/// and nothing is stored.
async fn assert_deploy_refused(model: &str, what_refused: &str, needle: &str) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rt = runtime(store.clone(), AsyncHandlers::new(), 1);
    let err = rt.deploy(model, None).await.expect_err("refused");
    match err {
        Error::Refused { what, why } => {
            assert_eq!(what, what_refused);
            assert!(why.contains(needle), "{why}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(store.deployments().await.expect("lists").is_empty());
    rt.shutdown().await;
}

#[tokio::test]
async fn instances_complete_on_every_lane_count() {
    for lanes in [1, 2, 4] {
        let calls = Arc::new(AtomicU32::new(0));
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let rt = runtime(store.clone(), counting(calls.clone()), lanes);
        let dep = rt.deploy(LINEAR, None).await.expect("deploys");
        for _ in 0..200 {
            rt.start_instance(dep.id, Default::default())
                .await
                .expect("starts");
        }
        rt.wait_until(|s| s.completed >= 200).await;
        let stats = rt.stats().view();
        rt.shutdown().await;
        assert_eq!(stats.completed, 200, "lanes={lanes}");
        assert_eq!(calls.load(Ordering::SeqCst), 600, "lanes={lanes}");
        let done = store
            .instances(&InstanceFilter {
                status: Some(InstanceStatus::Completed),
                limit: 10_000,
                ..InstanceFilter::default()
            })
            .await
            .expect("lists");
        assert_eq!(done.len(), 200);
        let first = done[0].id;
        assert_attempts(&*store, first, &[("a", 1), ("b", 1), ("c", 1)]).await;
        assert!(store.timers(first).await.expect("timers").is_empty());
    }
}

#[tokio::test]
async fn same_content_deploys_to_the_same_version() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rt = runtime(store, AsyncHandlers::new(), 1);
    let one = rt.deploy(LINEAR, None).await.expect("deploys");
    let two = rt.deploy(LINEAR, None).await.expect("deploys again");
    assert_eq!(one.id, two.id);
    rt.shutdown().await;
}

#[tokio::test]
async fn a_stateful_definition_is_refused_on_the_memory_store() {
    assert_deploy_refused(WITH_RETRY, "deployment", "stateful").await;
}

#[tokio::test]
async fn a_missing_handler_is_a_failed_attempt_not_a_crash() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rt = runtime(store.clone(), AsyncHandlers::new(), 2);
    let id = deploy_and_start(&rt, LINEAR).await;
    rt.wait_until(|s| s.failed >= 1).await;
    rt.shutdown().await;
    let rec = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(rec.status, InstanceStatus::Failed);
    assert_eq!(rec.failure_code.as_deref(), Some("HANDLER_MISSING"));
}

#[tokio::test]
async fn an_async_handler_past_its_time_limit_is_a_timed_out_attempt() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // A handler that never answers; only the time limit can end the attempt.
    let handlers = AsyncHandlers::new().with_async("count", |_call| async {
        futures::future::pending::<TaskOutcome>().await
    });
    let config = RuntimeConfig {
        lanes: 1,
        handler_time_limit_ms: 50,
        ..RuntimeConfig::default()
    };
    let clock = Arc::new(ManualClock::new(T0));
    let rt = Runtime::start(store.clone(), handlers, clock.clone(), config);
    let id = deploy_and_start(&rt, LINEAR).await;
    rt.wait_until(|s| s.handler_calls >= 1).await;
    // One millisecond short of the limit the attempt is still running.
    clock.advance_ms(49);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let rec = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(rec.status, InstanceStatus::Running);
    clock.advance_ms(1);
    rt.wait_until(|s| s.failed >= 1).await;
    rt.shutdown().await;
    let rec = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(rec.failure_code.as_deref(), Some("HANDLER_TIMEOUT"));
    let history = store.attempts(id).await.expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].code.as_deref(), Some("HANDLER_TIMEOUT"));
    assert_eq!(history[0].outcome, AttemptOutcome::TimedOut);
    assert_eq!(
        (history[0].started_at_ms, history[0].finished_at_ms),
        (T0, T0 + 50)
    );
}

#[tokio::test]
async fn a_panicking_async_handler_fails_the_attempt_and_the_lane_lives_on() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handlers =
        AsyncHandlers::new().with_async("count", |call: qflow_runtime::TaskCall| async move {
            if call.node == "b" {
                panic!("boom in b");
            }
            TaskOutcome::Ok(Default::default())
        });
    let rt = runtime(store.clone(), handlers, 1);
    let dep = rt.deploy(LINEAR, None).await.expect("deploys");
    let first = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    rt.wait_until(|s| s.failed >= 1).await;
    // The same lane keeps serving new instances after the panic.
    let second = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    rt.wait_until(|s| s.failed >= 2).await;
    rt.shutdown().await;
    for id in [first, second] {
        let rec = store.instance(id).await.expect("reads").expect("exists");
        assert_eq!(rec.failure_code.as_deref(), Some("HANDLER_PANICKED"));
    }
}

#[tokio::test]
async fn shutdown_waits_for_running_handlers_and_commits_their_outcomes() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(T0));
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered = std::sync::Mutex::new(Some(entered_tx));
    let handler_clock = clock.clone();
    let handlers =
        AsyncHandlers::new().with_async("count", move |call: qflow_runtime::TaskCall| {
            let signal = if call.node == "a" {
                entered.lock().expect("lock").take()
            } else {
                None
            };
            // `a` works for 100 ms of the manual clock: shutdown begins in between.
            let done = handler_clock.sleep_until(T0 + 100);
            async move {
                if let Some(tx) = signal {
                    let _ = tx.send(());
                    done.await;
                }
                TaskOutcome::Ok(Default::default())
            }
        });
    let config = RuntimeConfig {
        lanes: 1,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::start(store.clone(), handlers, clock.clone(), config);
    let id = deploy_and_start(&rt, LINEAR).await;
    entered_rx.await.expect("handler a started");
    let shutdown = rt.shutdown();
    futures::pin_mut!(shutdown);
    // The first poll stops new work; it waits for `a`, which waits for the clock.
    assert!(futures::poll!(&mut shutdown).is_pending());
    clock.advance_ms(100);
    shutdown.await;
    // `a`'s outcome was committed during shutdown; `b` was never started.
    let history = store.attempts(id).await.expect("history");
    let nodes: Vec<_> = history
        .iter()
        .map(|a| (a.node.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(nodes, vec![("a", "ok")]);
    let rec = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(rec.status, InstanceStatus::Running);

    // `b` was handed over with a lease due at once: the next runtime on the store
    // re-adopts it without waiting out the in-flight lease.
    // The clock does not move: were the lease not due at once, this would never finish.
    let calls = Arc::new(AtomicU32::new(0));
    let config = RuntimeConfig {
        lanes: 1,
        ..RuntimeConfig::default()
    };
    let next = Runtime::start(store.clone(), counting(calls.clone()), clock, config);
    hang_guard(next.wait_until(|s| s.completed >= 1)).await;
    next.shutdown().await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "b and c ran once each");
    assert_attempts(&*store, id, &[("a", 1), ("b", 1), ("c", 1)]).await;
}

/// The attempt history of `id` is exactly these `(node, attempt)` rows, in order.
async fn assert_attempts(store: &dyn Store, id: qflow_store::InstanceId, expected: &[(&str, u32)]) {
    let history = store.attempts(id).await.expect("history");
    let rows: Vec<_> = history
        .iter()
        .map(|a| (a.node.as_str(), a.attempt.get()))
        .collect();
    assert_eq!(rows, expected);
}

/// A send task with neither a message nor a worker was the element the core could not
/// run; the loader now refuses it (as Camunda 7 and Zeebe do), so a deployment of it is
/// refused with the loader's diagnostic and its position, and nothing is stored. (The
/// core's own list, `qflow_core::unsupported_elements`, stays for definitions built
/// without the loader.)
#[tokio::test]
async fn a_model_with_elements_the_engine_cannot_run_is_refused_at_deploy() {
    const SEND: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="sending" isExecutable="true">
    <startEvent id="start"/>
    <sendTask id="notify"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="notify"/>
    <sequenceFlow id="f1" sourceRef="notify" targetRef="end"/>
  </process>
</definitions>"#;
    assert_deploy_refused(
        SEND,
        "model",
        "5:5: Q114: the sendTask says neither which message it sends nor who sends it",
    )
    .await;
}

#[tokio::test]
async fn a_retirement_made_elsewhere_refuses_the_next_start_here() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let calls = Arc::new(AtomicU32::new(0));
    let rt = runtime(store.clone(), counting(calls), 1);
    let dep = rt.deploy(LINEAR, None).await.expect("deploys");
    rt.start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    rt.wait_until(|s| s.completed >= 1).await;
    // Retired behind this runtime's back, as another replica would: its "known live"
    // cache still says live, and the store's creation check has the last word.
    assert_eq!(
        store.retire(dep.id).await.expect("retires"),
        qflow_store::RetireOutcome::Retired
    );
    let err = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect_err("a retired deployment takes no new instances");
    match err {
        Error::Refused { what, why } => {
            assert_eq!(what, "start");
            assert!(why.contains("retired"), "{why}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let all = store
        .instances(&InstanceFilter {
            limit: 10,
            ..InstanceFilter::default()
        })
        .await
        .expect("lists");
    assert_eq!(all.len(), 1, "the refused start wrote nothing");
    rt.shutdown().await;
}

/// A start whose variables would make a snapshot the engine cannot read is refused with
/// the path of the value, and nothing is stored (issue 8, defect 1).
#[tokio::test]
async fn a_start_with_variables_nested_too_deep_is_refused_and_writes_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rt = runtime(store.clone(), AsyncHandlers::new(), 1);
    let dep = rt.deploy(LINEAR, None).await.expect("deploys");
    let mut deep = serde_json::Value::from(1);
    for _ in 0..64 {
        deep = serde_json::Value::Array(vec![deep]);
    }
    let variables = [("order".to_owned(), deep)].into_iter().collect();
    match rt.start_instance(dep.id, variables).await {
        Err(Error::Core(qflow_core::Error::VariablesRefused(why))) => {
            assert!(why.contains("`order[0]"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let all = store
        .instances(&InstanceFilter::default())
        .await
        .expect("lists");
    assert!(all.is_empty(), "nothing was stored");
    rt.shutdown().await;
}
