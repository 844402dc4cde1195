//! Signal broadcasts and message start events, durably, on SQLite and on PostgreSQL
//! (issue 13): instances waiting for a signal across a restart catch it when another
//! instance throws it — the throw is an outbox row written before the restart and
//! broadcast after it — a signal start event starts one instance per broadcast however
//! often the broadcast is delivered, a non-interrupting boundary catches each broadcast
//! through the API, and a message start event starts one instance per correlation key —
//! published through the API, or by another instance's message end event before the
//! restart.
//!
//! The PostgreSQL half needs `QFLOW_TEST_PG_URL`; without it that half says it is
//! skipped and passes.

use std::future::Future;
use std::sync::Arc;

use qflow_ops::{MessageRequest, SignalRequest};
use qflow_persistence::SqliteStore;
use qflow_store::{DeploymentId, InstanceFilter, InstanceId, InstanceStatus, OutboxState, Store};
use qflow_tests::engine::{eventually, Engine};
use qflow_tests::stores;

/// Waits at a signal catch, then at a user task with a non-interrupting signal boundary.
const WAITER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <signal id="go" name="stock-ready"/>
  <signal id="ping" name="price-changed"/>
  <process id="waiter" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="wait_stock"/>
    <intermediateCatchEvent id="wait_stock"><signalEventDefinition signalRef="go"/></intermediateCatchEvent>
    <sequenceFlow id="f2" sourceRef="wait_stock" targetRef="review"/>
    <userTask id="review"/>
    <boundaryEvent id="repriced" attachedToRef="review" cancelActivity="false"><signalEventDefinition signalRef="ping"/></boundaryEvent>
    <sequenceFlow id="f3" sourceRef="review" targetRef="done"/>
    <endEvent id="done"/>
    <sequenceFlow id="f4" sourceRef="repriced" targetRef="noted"/>
    <endEvent id="noted"/>
  </process>
</definitions>"#;

/// Throws `stock-ready` and ends.
const THROWER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <signal id="go" name="stock-ready"/>
  <process id="thrower" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="announce"/>
    <endEvent id="announce"><signalEventDefinition signalRef="go"/></endEvent>
  </process>
</definitions>"#;

/// Started by `stock-ready`; waits at a user task.
const STARTER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <signal id="go" name="stock-ready"/>
  <process id="restock" isExecutable="true">
    <startEvent id="on_stock"><signalEventDefinition signalRef="go"/></startEvent>
    <sequenceFlow id="f1" sourceRef="on_stock" targetRef="count"/>
    <userTask id="count"/>
    <sequenceFlow id="f2" sourceRef="count" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

/// Started by the message `order-placed`; waits at a user task.
const ORDERS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <message id="placed" name="order-placed"/>
  <process id="orders" isExecutable="true">
    <startEvent id="on_order"><messageEventDefinition messageRef="placed"/></startEvent>
    <sequenceFlow id="f1" sourceRef="on_order" targetRef="pack"/>
    <userTask id="pack"/>
    <sequenceFlow id="f2" sourceRef="pack" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

/// Publishes `order-placed` under the key `order_no` at its end event.
const NOTIFIER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <message id="placed" name="order-placed" q:correlationKey="order_no"/>
  <process id="notifier" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="placed_end"/>
    <endEvent id="placed_end"><messageEventDefinition messageRef="placed"/></endEvent>
  </process>
</definitions>"#;

async fn tokens(store: &dyn Store, id: InstanceId) -> Vec<String> {
    let record = store.instance(id).await.expect("read").expect("exists");
    let snap = qflow_core::Snapshot::decode(&record.snapshot).expect("decodes");
    snap.tokens().to_vec()
}

async fn instances_of(store: &dyn Store, deployment: DeploymentId) -> Vec<InstanceId> {
    let filter = InstanceFilter {
        deployment: Some(deployment),
        limit: 100,
        ..InstanceFilter::default()
    };
    store
        .instances(&filter)
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.id)
        .collect()
}

/// The whole story on one store; `open` opens it again after a restart.
async fn story<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    // Before the restart: three waiters wait at the catch; a thrower throws, but no
    // dispatcher runs, so its signal stays an outbox row.
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "signals-test");
    let deploy = |src: &'static str| {
        let ops = engine.ops.clone();
        async move { DeploymentId(ops.deploy(src, None).await.expect("deploys").id) }
    };
    let waiter = deploy(WAITER).await;
    let thrower = deploy(THROWER).await;
    let starter = deploy(STARTER).await;
    let orders = deploy(ORDERS).await;
    let notifier = deploy(NOTIFIER).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let id = engine
            .runtime
            .start_instance(waiter, Default::default())
            .await
            .expect("starts");
        waiters.push(id);
    }
    let thrown = engine
        .runtime
        .start_instance(thrower, Default::default())
        .await
        .expect("starts");
    for id in &waiters {
        assert_eq!(tokens(&*store, *id).await, vec!["wait_stock".to_owned()]);
        let subs = store.instance_subscriptions(*id).await.expect("subs");
        assert_eq!(subs.len(), 1, "{subs:?}");
        assert_eq!(
            (subs[0].message.as_str(), subs[0].key.as_str()),
            ("stock-ready", "")
        );
    }
    let rows = store.outbox(thrown).await.expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].channel, qflow_runtime::signals::SIGNAL_CHANNEL);
    assert_eq!(rows[0].state, OutboxState::Pending);
    let ended = store.instance(thrown).await.expect("read").expect("there");
    assert_eq!(
        ended.status,
        InstanceStatus::Completed,
        "the thrower ends at once"
    );
    // A message start: the correlation key becomes the business key; repeated, it
    // starts nothing new.
    let order = |key: &str| MessageRequest {
        name: "order-placed".into(),
        correlation_key: key.into(),
        variables: [("sku".to_owned(), serde_json::json!("K-9"))].into(),
        all: false,
        time_to_live_ms: None,
        message_id: None,
    };
    let first = engine.ops.correlate(order("o-1")).await.expect("starts");
    assert_eq!(first.deliveries.len(), 1, "{first:?}");
    assert_eq!(first.deliveries[0].outcome, "started");
    assert_eq!(first.deliveries[0].node, "on_order");
    let order_id: InstanceId = first.deliveries[0].instance.parse().expect("an id");
    assert_eq!(tokens(&*store, order_id).await, vec!["pack".to_owned()]);
    let record = store
        .instance(order_id)
        .await
        .expect("read")
        .expect("there");
    assert_eq!(record.business_key.as_deref(), Some("o-1"));
    // A message published by an instance's end event, before the restart: an outbox row
    // on `qflow:message`, still pending.
    let vars = [("order_no".to_owned(), serde_json::json!("o-4"))].into();
    let notified = engine
        .runtime
        .start_instance(notifier, vars)
        .await
        .expect("starts");
    let rows = store.outbox(notified).await.expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].channel, qflow_runtime::signals::MESSAGE_CHANNEL);
    assert_eq!(rows[0].state, OutboxState::Pending);
    engine.stop().await;
    drop(store);

    // After the restart: the dispatcher broadcasts the row written before it.
    let store = open().await;
    let engine = Engine::start(store.clone(), true, "signals-test");
    let again = engine.ops.correlate(order("o-1")).await.expect("answers");
    assert_eq!(again.deliveries[0].outcome, "already_started", "{again:?}");
    assert_eq!(again.deliveries[0].instance, order_id.to_string());
    let other = engine.ops.correlate(order("o-2")).await.expect("starts");
    assert_eq!(other.deliveries[0].outcome, "started");
    // The message published before the restart starts its instance now, under its key.
    eventually("the published message starts an order", || async {
        instances_of(&*store, orders).await.len() == 3
    })
    .await;
    let mut keys = Vec::new();
    for id in instances_of(&*store, orders).await {
        let record = store.instance(id).await.expect("read").expect("there");
        keys.push(record.business_key.unwrap_or_default());
    }
    keys.sort();
    assert_eq!(keys, ["o-1", "o-2", "o-4"]);
    eventually("the message row is delivered", || async {
        store.outbox(notified).await.expect("rows")[0].state == OutboxState::Delivered
    })
    .await;

    for id in &waiters {
        eventually("a waiter catches the thrown signal", || async {
            tokens(&*store, *id).await == vec!["review".to_owned()]
        })
        .await;
    }
    eventually("the signal row is delivered", || async {
        store.outbox(thrown).await.expect("rows")[0].state == OutboxState::Delivered
    })
    .await;
    let started = instances_of(&*store, starter).await;
    assert_eq!(started.len(), 1, "one start per broadcast: {started:?}");
    assert_eq!(tokens(&*store, started[0]).await, vec!["count".to_owned()]);

    // Through the API: each broadcast reaches every non-interrupting boundary; the same
    // id again starts nothing twice (there is no start for this signal: the three
    // boundaries catch it, and the instances keep waiting at `review`).
    let ping = |id: &str| SignalRequest {
        name: "price-changed".into(),
        variables: [("price".to_owned(), serde_json::json!(99))].into(),
        id: Some(id.into()),
    };
    let b = engine
        .ops
        .broadcast_signal(ping("p-1"))
        .await
        .expect("broadcasts");
    assert_eq!(b.caught.len(), 3, "{b:?}");
    assert!(b.caught.iter().all(|c| c.node == "repriced"));
    assert!(b.started.is_empty());
    for id in &waiters {
        assert_eq!(tokens(&*store, *id).await, vec!["review".to_owned()]);
        let record = store.instance(*id).await.expect("read").expect("there");
        let snap = qflow_core::Snapshot::decode(&record.snapshot).expect("decodes");
        assert_eq!(snap.variables()["price"], serde_json::json!(99));
    }
    // A signal start is idempotent by broadcast id: the same `stock-ready` id twice
    // starts one instance.
    let stock = |id: &str| SignalRequest {
        name: "stock-ready".into(),
        variables: Default::default(),
        id: Some(id.into()),
    };
    let s1 = engine
        .ops
        .broadcast_signal(stock("s-1"))
        .await
        .expect("broadcasts");
    let s2 = engine
        .ops
        .broadcast_signal(stock("s-1"))
        .await
        .expect("broadcasts");
    assert_eq!(s1.started.len(), 1, "{s1:?}");
    assert_eq!(
        s1.started, s2.started,
        "the same id starts the same instance"
    );
    assert!(
        s1.caught.is_empty(),
        "nothing waits at the catch any more: {s1:?}"
    );
    assert_eq!(instances_of(&*store, starter).await.len(), 2);
    // Done: the waiters complete their review.
    for id in &waiters {
        engine
            .ops
            .complete_user_task(*id, "review", Default::default(), None)
            .await
            .expect("completes");
        let record = store.instance(*id).await.expect("read").expect("there");
        assert_eq!(record.status, InstanceStatus::Completed);
        assert!(store
            .instance_subscriptions(*id)
            .await
            .expect("subs")
            .is_empty());
    }
    let none = engine
        .ops
        .broadcast_signal(ping("p-2"))
        .await
        .expect("broadcasts");
    assert!(
        none.caught.is_empty() && none.started.is_empty(),
        "{none:?}"
    );
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_and_message_starts_on_sqlite_across_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    story(stores::sqlite(dir.path().join("signals.sqlite"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_and_message_starts_on_postgres_across_a_restart() {
    if let Some(open) = stores::postgres("signals", 6) {
        story(open).await;
    }
}

/// Catches `tick`, passes a task and a gateway, and waits at the catch again — all in
/// the step that caught it.
const LOOPER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <signal id="tick" name="tick"/>
  <process id="looper" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <intermediateCatchEvent id="wait"><signalEventDefinition signalRef="tick"/></intermediateCatchEvent>
    <sequenceFlow id="f2" sourceRef="wait" targetRef="count"/>
    <task id="count"/>
    <sequenceFlow id="f3" sourceRef="count" targetRef="again"/>
    <exclusiveGateway id="again" default="f4"/>
    <sequenceFlow id="f4" sourceRef="again" targetRef="wait"/>
    <sequenceFlow id="f5" sourceRef="again" targetRef="end"><conditionExpression>false</conditionExpression></sequenceFlow>
    <endEvent id="end"/>
  </process>
</definitions>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_catches_and_waits_again_in_one_step_catches_each_broadcast_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("loop.sqlite"))
            .await
            .expect("open"),
    );
    let engine = Engine::start(store.clone(), false, "signals-test");
    let dep = DeploymentId(engine.ops.deploy(LOOPER, None).await.expect("deploys").id);
    let id = engine
        .runtime
        .start_instance(dep, Default::default())
        .await
        .expect("starts");
    for n in 1..=3 {
        let tick = SignalRequest {
            name: "tick".into(),
            variables: [("n".to_owned(), serde_json::json!(n))].into(),
            id: None,
        };
        let b = engine.ops.broadcast_signal(tick).await.expect("broadcasts");
        assert_eq!(b.caught.len(), 1, "broadcast {n}: {b:?}");
        assert_eq!(tokens(&*store, id).await, vec!["wait".to_owned()]);
        let record = store.instance(id).await.expect("read").expect("there");
        let snap = qflow_core::Snapshot::decode(&record.snapshot).expect("decodes");
        assert_eq!(snap.variables()["n"], serde_json::json!(n));
    }
    engine.stop().await;
}
