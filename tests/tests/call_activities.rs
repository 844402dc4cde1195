//! Call activities, durably, on SQLite and on PostgreSQL (issue 13): a parent's call
//! starts a child pinned to a deployment of the called process — the newest live one,
//! or the version a binding names — through an outbox row written with the parent's
//! step and delivered across a restart; the child's variables come back through the
//! output mappings; an operator's cancel of a child fails the parent's attempt, and its
//! `q:retry` starts a new child; cancelling a parent cancels its child; a call of a
//! process nobody deployed fails the parent with `CALLED_PROCESS_NOT_FOUND`.
//!
//! The PostgreSQL half needs `QFLOW_TEST_PG_URL`; without it that half says it is
//! skipped and passes.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_runtime::calls::{child_instance_id, CALL_CHANNEL};
use qflow_store::{DeploymentId, InstanceId, InstanceStatus, OutboxState, Store};
use qflow_tests::engine::{eventually, Engine, LIMIT};
use qflow_tests::stores;
use serde_json::json;

/// The called process, first version: a review an operator completes.
const KYC_V1: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="kyc" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="review"/>
    <userTask id="review"/>
    <sequenceFlow id="f2" sourceRef="review" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

/// Its second version: the review has another id.
const KYC_V2: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="kyc" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="review_v2"/>
    <userTask id="review_v2"/>
    <sequenceFlow id="f2" sourceRef="review_v2" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

/// Calls the newest `kyc` with a retry; maps `customer` in and `score` out.
const ONBOARDING: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="onboarding" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="check"/>
    <callActivity id="check" calledElement="kyc">
      <extensionElements>
        <q:retry maxAttempts="2" initialInterval="PT0.2S" jitter="none"/>
        <q:input target="customer" source="name"/>
        <q:output target="score" source="result.score"/>
      </extensionElements>
    </callActivity>
    <sequenceFlow id="f2" sourceRef="check" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

/// Calls version 1 of `kyc`, whatever is newer (Camunda 7's version binding).
const PINNED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d" targetNamespace="t">
  <process id="pinned" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="check"/>
    <callActivity id="check" calledElement="kyc" camunda:calledElementBinding="version" camunda:calledElementVersion="1"/>
    <sequenceFlow id="f2" sourceRef="check" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

/// Calls a process nobody deployed.
const ORPHAN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="orphan" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="check"/>
    <callActivity id="check" calledElement="nobody-deployed-this"/>
    <sequenceFlow id="f2" sourceRef="check" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

async fn snapshot(
    store: &dyn Store,
    id: InstanceId,
) -> Option<(qflow_store::InstanceRecord, qflow_core::Snapshot)> {
    let record = store.instance(id).await.expect("read")?;
    let snap = qflow_core::Snapshot::decode(&record.snapshot).expect("decodes");
    Some((record, snap))
}

/// The child the parent's call activity `check` waits for now.
async fn child_of(store: &dyn Store, parent: InstanceId) -> Option<InstanceId> {
    let (_, snap) = snapshot(store, parent).await?;
    let call = *snap.children().get("check")?;
    Some(child_instance_id(&format!("{parent}/{call}")))
}

async fn status(store: &dyn Store, id: InstanceId) -> Option<InstanceStatus> {
    snapshot(store, id).await.map(|(r, _)| r.status)
}

/// Waits until the parent's current child exists and waits at `node`; returns it.
async fn running_child(store: &dyn Store, parent: InstanceId, node: &str) -> InstanceId {
    let began = Instant::now();
    loop {
        if let Some(child) = child_of(store, parent).await {
            if let Some((_, snap)) = snapshot(store, child).await {
                if snap.tokens() == [node.to_owned()] {
                    return child;
                }
            }
        }
        assert!(
            began.elapsed() < LIMIT,
            "no child of {parent} waits at {node}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn story<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    // Before the restart: the call's start is an outbox row, and no dispatcher runs.
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "calls-test");
    let deploy = |src: &'static str| {
        let ops = engine.ops.clone();
        async move { DeploymentId(ops.deploy(src, None).await.expect("deploys").id) }
    };
    let kyc_v1 = deploy(KYC_V1).await;
    let onboarding = deploy(ONBOARDING).await;
    let pinned = deploy(PINNED).await;
    let orphan = deploy(ORPHAN).await;
    let first = engine
        .runtime
        .start_instance(onboarding, [("name".to_owned(), json!("Ada"))].into())
        .await
        .expect("starts");
    let rows = store.outbox(first).await.expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].channel, CALL_CHANNEL);
    assert_eq!(rows[0].state, OutboxState::Pending);
    let expected_child = child_of(&*store, first).await.expect("a call");
    assert!(
        snapshot(&*store, expected_child).await.is_none(),
        "not started yet"
    );
    engine.stop().await;
    drop(store);

    // After the restart the dispatcher starts the child, once, on the newest deployment.
    let store = open().await;
    let engine = Engine::start(store.clone(), true, "calls-test");
    let child = running_child(&*store, first, "review").await;
    assert_eq!(child, expected_child);
    let (record, snap) = snapshot(&*store, child).await.unwrap();
    assert_eq!(record.deployment, kyc_v1);
    assert_eq!(
        snap.variables(),
        &[("customer".to_owned(), json!("Ada"))].into()
    );
    assert_eq!(
        snap.parent().map(|p| p.instance.clone()),
        Some(first.to_string())
    );
    eventually("the start row is delivered", || async {
        store.outbox(first).await.expect("rows")[0].state == OutboxState::Delivered
    })
    .await;

    // A newer version: a new call takes it; a version binding keeps version 1; the
    // child already running stays where it started.
    let kyc_v2 = DeploymentId(engine.ops.deploy(KYC_V2, None).await.expect("deploys").id);
    let second = engine
        .runtime
        .start_instance(onboarding, [("name".to_owned(), json!("Bo"))].into())
        .await
        .expect("starts");
    let second_child = running_child(&*store, second, "review_v2").await;
    assert_eq!(
        snapshot(&*store, second_child).await.unwrap().0.deployment,
        kyc_v2
    );
    let third = engine
        .runtime
        .start_instance(pinned, Default::default())
        .await
        .expect("starts");
    let pinned_child = running_child(&*store, third, "review").await;
    assert_eq!(
        snapshot(&*store, pinned_child).await.unwrap().0.deployment,
        kyc_v1
    );
    let lost = engine
        .runtime
        .start_instance(orphan, Default::default())
        .await
        .expect("starts");
    eventually(
        "a call of an undeployed process fails its parent",
        || async { status(&*store, lost).await == Some(InstanceStatus::Failed) },
    )
    .await;
    let (_, snap) = snapshot(&*store, lost).await.unwrap();
    assert_eq!(snap.failure().unwrap().code, "CALLED_PROCESS_NOT_FOUND");
    engine.stop().await;
    drop(store);

    // Second restart, the children waiting: their ends reach their parents.
    let store = open().await;
    let engine = Engine::start(store.clone(), true, "calls-test");
    engine
        .ops
        .complete_user_task(
            child,
            "review",
            [("score".to_owned(), json!(7))].into(),
            None,
        )
        .await
        .expect("completes");
    eventually("the first parent completes", || async {
        status(&*store, first).await == Some(InstanceStatus::Completed)
    })
    .await;
    let (_, snap) = snapshot(&*store, first).await.unwrap();
    assert_eq!(snap.variables()["score"], json!(7));
    assert!(snap.children().is_empty());

    // An operator cancels the second child: the parent's attempt fails, and its retry
    // starts a new child on the newest deployment.
    engine.ops.cancel(second_child).await.expect("cancels");
    let began = Instant::now();
    let retried = loop {
        if let Some(c) = child_of(&*store, second).await {
            if c != second_child {
                break c;
            }
        }
        assert!(began.elapsed() < LIMIT, "no second child");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let retried_child = running_child(&*store, second, "review_v2").await;
    assert_eq!(retried, retried_child);
    engine
        .ops
        .complete_user_task(
            retried,
            "review_v2",
            [("score".to_owned(), json!(3))].into(),
            None,
        )
        .await
        .expect("completes");
    eventually("the second parent completes on its retry", || async {
        status(&*store, second).await == Some(InstanceStatus::Completed)
    })
    .await;
    let history = store.attempts(second).await.expect("history");
    let outcomes: Vec<(u32, String, Option<String>)> = history
        .iter()
        .filter(|a| a.node == "check")
        .map(|a| {
            (
                a.attempt.get(),
                a.outcome.as_str().to_owned(),
                a.code.clone(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (
                1,
                "failed".to_owned(),
                Some("CALLED_INSTANCE_FAILED".to_owned())
            ),
            (2, "ok".to_owned(), None),
        ]
    );
    assert_eq!(
        status(&*store, second_child).await,
        Some(InstanceStatus::Cancelled)
    );

    // Cancelling a parent cancels its child.
    engine.ops.cancel(third).await.expect("cancels");
    eventually("the pinned child is cancelled with its parent", || async {
        status(&*store, pinned_child).await == Some(InstanceStatus::Cancelled)
    })
    .await;
    assert_eq!(
        status(&*store, third).await,
        Some(InstanceStatus::Cancelled)
    );
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_activities_on_sqlite_across_restarts() {
    let dir = tempfile::tempdir().expect("temp dir");
    story(stores::sqlite(dir.path().join("calls.sqlite"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_activities_on_postgres_across_restarts() {
    if let Some(open) = stores::postgres("calls", 6) {
        story(open).await;
    }
}
