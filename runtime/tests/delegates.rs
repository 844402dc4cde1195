//! `[delegates]` routes on a durable store (SQLite): a Camunda 7 Java binding runs on the
//! topic the loader derives from it, on a routed topic, or as a registered handler; the
//! routes are part of the deployment, and a runtime with other routes refuses to run its
//! instances rather than run a task another way under them.

mod support;

use std::sync::Arc;

use qflow_persistence::SqliteStore;
use qflow_runtime::delegates::{DelegateRoute, DelegateRoutes};
use qflow_runtime::{
    AsyncHandlers, Error, Fetch, Input, ManualClock, Runtime, RuntimeConfig, TaskOutcome,
};
use qflow_store::{InstanceStatus, Store};
use support::{deploy_and_start, hang_guard};

const T0: i64 = 1_700_000_000_000;

const CHARGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d" targetNamespace="t">
  <process id="charging" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="charge" camunda:class="com.acme.ChargeCard">
      <extensionElements>
        <camunda:field name="currency" stringValue="EUR"/>
      </extensionElements>
    </serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>
    <sequenceFlow id="f1" sourceRef="charge" targetRef="end"/>
  </process>
</definitions>"#;

async fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    Arc::new(
        SqliteStore::open(dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    )
}

fn config(routes: DelegateRoutes) -> RuntimeConfig {
    RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        delegates: routes,
        ..RuntimeConfig::default()
    }
}

fn fetch(topic: &str) -> Fetch {
    Fetch {
        worker: "w".into(),
        topics: vec![(topic.into(), 10_000)],
        max_tasks: 10,
        wait_ms: 0,
    }
}

/// A one-lane runtime on a SQLite file in `dir`, on a manual clock at `T0`.
async fn runtime(
    dir: &tempfile::TempDir,
    handlers: AsyncHandlers,
    routes: DelegateRoutes,
) -> Runtime {
    let clock = Arc::new(ManualClock::new(T0));
    Runtime::start(store(dir).await, handlers, clock, config(routes))
}

fn routes(binding: &str, route: DelegateRoute) -> DelegateRoutes {
    [(binding.to_owned(), route)].into()
}

#[tokio::test]
async fn a_binding_runs_on_its_derived_topic_with_its_header_and_fields() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(&dir, AsyncHandlers::new(), DelegateRoutes::new()).await;
    let dep = rt.deploy(CHARGE, None).await.unwrap();
    assert!(
        !dep.content_hash.contains('.'),
        "no route applied: the plain hash"
    );
    let id = rt.start_instance(dep.id, Default::default()).await.unwrap();
    let locked = rt.fetch_and_lock(&fetch("chargeCard")).await.unwrap();
    assert_eq!(locked.len(), 1);
    assert_eq!(
        locked[0].headers,
        [("class".to_owned(), "com.acme.ChargeCard".to_owned())]
    );
    assert_eq!(locked[0].variables["currency"], "EUR", "a field is a local");
    let done = Input::PullCompleted {
        node: "charge".into(),
        attempt: locked[0].attempt,
        worker: "w".into(),
        variables: Default::default(),
    };
    rt.claim_and_step(id, done).await.unwrap();
    let record = rt.store().instance(id).await.unwrap().unwrap();
    assert_eq!(record.status, InstanceStatus::Completed);
    assert!(
        !record_vars_have(&rt, id, "currency").await,
        "the field stays local"
    );
}

async fn record_vars_have(rt: &Runtime, id: qflow_store::InstanceId, name: &str) -> bool {
    let record = rt.store().instance(id).await.unwrap().unwrap();
    let snap = qflow_core::Snapshot::decode(&record.snapshot).unwrap();
    snap.variables().contains_key(name)
}

#[tokio::test]
async fn a_routed_topic_replaces_the_derived_one() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        &dir,
        AsyncHandlers::new(),
        routes(
            "com.acme.ChargeCard",
            DelegateRoute::Topic("payments".into()),
        ),
    )
    .await;
    let dep = rt.deploy(CHARGE, None).await.unwrap();
    assert!(dep.content_hash.contains('.'), "{}", dep.content_hash);
    // The same content under the same routes is the same deployment.
    let id = deploy_and_start(&rt, CHARGE).await;
    let record = rt.store().instance(id).await.unwrap().unwrap();
    assert_eq!(record.deployment, dep.id);
    assert!(rt
        .fetch_and_lock(&fetch("chargeCard"))
        .await
        .unwrap()
        .is_empty());
    let locked = rt.fetch_and_lock(&fetch("payments")).await.unwrap();
    assert_eq!(locked.len(), 1);
    assert_eq!(
        locked[0].headers[0].0, "class",
        "the worker still learns the binding"
    );
}

#[tokio::test]
async fn a_binding_routed_to_a_handler_runs_in_the_host_with_the_fields() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let handlers =
        AsyncHandlers::new().with_sync("charge-card", |c: &qflow_runtime::TaskContext<'_>| {
            let mut out = qflow_core::Variables::new();
            out.insert(
                "charged_in".into(),
                c.inputs.get("currency").cloned().unwrap_or_default(),
            );
            TaskOutcome::Ok(out)
        });
    let rt = Runtime::start(
        store(&dir).await,
        handlers,
        clock,
        config(routes(
            "com.acme.ChargeCard",
            DelegateRoute::Task("charge-card".into()),
        )),
    );
    let dep = rt.deploy_checked(CHARGE, None).await.unwrap();
    let id = rt.start_instance(dep.id, Default::default()).await.unwrap();
    hang_guard(rt.wait_until(|s| s.completed >= 1)).await;
    let record = rt.store().instance(id).await.unwrap().unwrap();
    assert_eq!(record.status, InstanceStatus::Completed);
    let snap = qflow_core::Snapshot::decode(&record.snapshot).unwrap();
    assert_eq!(snap.variables()["charged_in"], "EUR");
}

#[tokio::test]
async fn a_deployment_is_not_run_under_other_routes_than_it_was_made_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let clock = Arc::new(ManualClock::new(T0));
    let first = Runtime::start(
        store.clone(),
        AsyncHandlers::new(),
        clock.clone(),
        config(routes(
            "com.acme.ChargeCard",
            DelegateRoute::Topic("payments".into()),
        )),
    );
    let routed = first.deploy(CHARGE, None).await.unwrap();
    first.shutdown().await;

    // Restarted without the route: the routed deployment's instances are refused, and
    // deploying the model again makes another deployment, run on the derived topic.
    let second = Runtime::start(
        store,
        AsyncHandlers::new(),
        clock,
        config(DelegateRoutes::new()),
    );
    let e = second
        .start_instance(routed.id, Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Refused { why, .. } if why.contains("other [delegates] routes") && why.contains("now: none")),
        "{e}"
    );
    // Asked again, the same refusal (kept, not re-parsed on every wake).
    let again = second
        .start_instance(routed.id, Default::default())
        .await
        .unwrap_err();
    assert_eq!(again.to_string(), e.to_string());
    let plain = second.deploy(CHARGE, None).await.unwrap();
    assert_ne!(plain.id, routed.id);
    second
        .start_instance(plain.id, Default::default())
        .await
        .unwrap();
    assert_eq!(
        second
            .fetch_and_lock(&fetch("chargeCard"))
            .await
            .unwrap()
            .len(),
        1
    );
}
