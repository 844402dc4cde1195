//! The runtime shell over the in-memory store: lanes, group commits, handlers, L7.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use qflow_engine::memory::MemoryStore;
use qflow_engine::runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock};
use qflow_engine::store::{InstanceFilter, InstanceStatus, Store};
use qflow_engine::{Error, TaskOutcome};

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
    AsyncHandlers::new().with_sync("count", move |_: &qflow_engine::TaskContext<'_>| {
        calls.fetch_add(1, Ordering::SeqCst);
        TaskOutcome::Ok(Default::default())
    })
}

fn runtime(store: Arc<dyn Store>, handlers: AsyncHandlers, lanes: usize) -> Runtime {
    let config = RuntimeConfig {
        lanes,
        ..RuntimeConfig::default()
    };
    Runtime::start(store, handlers, Arc::new(SystemClock), config)
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
        let attempts = store.attempts(first).await.expect("history");
        let nodes: Vec<_> = attempts
            .iter()
            .map(|a| (a.node.as_str(), a.attempt))
            .collect();
        assert_eq!(nodes, vec![("a", 1), ("b", 1), ("c", 1)]);
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
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rt = runtime(store.clone(), AsyncHandlers::new(), 1);
    let err = rt.deploy(WITH_RETRY, None).await.expect_err("refused");
    match err {
        Error::Refused { what, why } => {
            assert_eq!(what, "deployment");
            assert!(why.contains("stateful"), "{why}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(store.deployments().await.expect("lists").is_empty());
    rt.shutdown().await;
}

#[tokio::test]
async fn a_missing_handler_is_a_failed_attempt_not_a_crash() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rt = runtime(store.clone(), AsyncHandlers::new(), 2);
    let dep = rt.deploy(LINEAR, None).await.expect("deploys");
    let id = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    rt.wait_until(|s| s.failed >= 1).await;
    rt.shutdown().await;
    let rec = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(rec.status, InstanceStatus::Failed);
    assert_eq!(rec.failure_code.as_deref(), Some("HANDLER_MISSING"));
}
