//! Compensation, durably, on SQLite and on PostgreSQL (issue 13, `docs/compensation.md`):
//! a compensation throw waits for its handler across a restart — the recorded completion
//! (`g`) and the owed handler run (`z/<handler>`) are in the snapshot the store keeps,
//! the handler is an ordinary user task offered in the task list, and completing it after
//! the restart lets the throw go on.
//!
//! The PostgreSQL half needs `QFLOW_TEST_PG_URL`; without it that half says it is
//! skipped and passes.

use std::future::Future;
use std::sync::Arc;

use qflow_store::{DeploymentId, InstanceId, InstanceStatus, Store, UserTaskQuery};
use qflow_tests::engine::{eventually, Engine};
use qflow_tests::stores;
use serde_json::json;

/// A booking a person makes and, when the trip is called off, undoes by hand.
const TRIP: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="trip" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="book"/>
    <userTask id="book"/>
    <boundaryEvent id="bookUndo" attachedToRef="book"><compensateEventDefinition/></boundaryEvent>
    <userTask id="cancelBooking" isForCompensation="true"/>
    <association id="a1" sourceRef="bookUndo" targetRef="cancelBooking"/>
    <sequenceFlow id="f2" sourceRef="book" targetRef="decide"/>
    <userTask id="decide"/>
    <sequenceFlow id="f3" sourceRef="decide" targetRef="calledOff"/>
    <intermediateThrowEvent id="calledOff"><compensateEventDefinition/></intermediateThrowEvent>
    <sequenceFlow id="f4" sourceRef="calledOff" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

async fn snapshot(store: &dyn Store, id: InstanceId) -> (InstanceStatus, qflow_core::Snapshot) {
    let record = store.instance(id).await.expect("read").expect("exists");
    let snap = qflow_core::Snapshot::decode(&record.snapshot).expect("decodes");
    (record.status, snap)
}

async fn story<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "compensation-test");
    let trip = DeploymentId(engine.ops.deploy(TRIP, None).await.expect("deploys").id);
    let id = engine
        .runtime
        .start_instance(trip, Default::default())
        .await
        .expect("starts");
    let complete = |node: &'static str, vars: serde_json::Value| {
        let ops = engine.ops.clone();
        async move {
            let vars = serde_json::from_value(vars).expect("an object");
            ops.complete_user_task(id, node, vars, None)
                .await
                .expect("completes");
        }
    };
    complete("book", json!({"booking": "B-1"})).await;
    let (_, snap) = snapshot(&*store, id).await;
    assert_eq!(snap.compensable(), ["book"]);
    complete("decide", json!({"go": false})).await;
    eventually("the throw waits for the handler", || async {
        snapshot(&*store, id).await.1.tokens() == ["calledOff", "cancelBooking"]
    })
    .await;
    engine.stop().await;
    drop(store);

    // After the restart: the throw still waits, the handler is still owed, and it is
    // offered in the task list as the user task it is.
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "compensation-test");
    let (status, snap) = snapshot(&*store, id).await;
    assert_eq!(status, InstanceStatus::Running);
    assert!(snap.compensable().is_empty());
    assert_eq!(snap.compensations_owed()["cancelBooking"], ["calledOff"]);
    let query = UserTaskQuery {
        deployment: Some(trip),
        ..UserTaskQuery::default()
    };
    let offered = store.user_tasks(&query).await.expect("task list");
    let offered: Vec<(InstanceId, &str)> = offered
        .iter()
        .map(|t| (t.instance, t.node.as_str()))
        .collect();
    assert_eq!(offered, [(id, "cancelBooking")]);
    engine
        .ops
        .complete_user_task(
            id,
            "cancelBooking",
            [("cancelled".to_owned(), json!(true))].into(),
            None,
        )
        .await
        .expect("completes");
    eventually("the throw goes on and the instance completes", || async {
        snapshot(&*store, id).await.0 == InstanceStatus::Completed
    })
    .await;
    let (_, snap) = snapshot(&*store, id).await;
    assert!(snap.compensations_owed().is_empty() && snap.compensable().is_empty());
    assert_eq!(snap.variables()["cancelled"], json!(true));
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_throw_waits_for_its_handler_across_a_restart_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    story(stores::sqlite(dir.path().join("compensation.sqlite"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_throw_waits_for_its_handler_across_a_restart_on_postgres() {
    if let Some(open) = stores::postgres("compensation", 6) {
        story(open).await;
    }
}
