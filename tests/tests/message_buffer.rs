//! Messages with a time to live (issue 28, `docs/messages.md` "Time to live"), durably, on
//! SQLite and on PostgreSQL: a message published before anything waits for it is kept,
//! and reaches the waits that open later under its name and key — the oldest kept
//! message first, each process at most once, other processes too — until it expires; a
//! second publication with a kept message's id is refused; and a wait that opened while
//! no runtime ran (an operator's step on the store) gets its message from the sweep of
//! the runtime that starts next.
//!
//! The PostgreSQL half needs `QFLOW_TEST_PG_URL`; without it that half says it is
//! skipped and passes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use qflow_ops::{MessageRequest, Ops};
use qflow_runtime::{Clock, SystemClock};
use qflow_store::{BufferQuery, DeploymentId, InstanceId, InstanceStatus, Store};
use qflow_tests::engine::{eventually, Engine};
use qflow_tests::stores;

/// Prepares (a user task), then waits for `paid` under its `order`, then ends.
const BILLING: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <message id="m" name="paid" q:correlationKey="order"/>
  <process id="billing" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="prepare"/>
    <userTask id="prepare"/>
    <sequenceFlow id="f2" sourceRef="prepare" targetRef="wait_paid"/>
    <intermediateCatchEvent id="wait_paid"><messageEventDefinition messageRef="m"/></intermediateCatchEvent>
    <sequenceFlow id="f3" sourceRef="wait_paid" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

/// Waits for `paid` under its `order` at once, then ends.
const AUDIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <message id="m" name="paid" q:correlationKey="order"/>
  <process id="audit" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="wait_paid"/>
    <receiveTask id="wait_paid" messageRef="m"/>
    <sequenceFlow id="f2" sourceRef="wait_paid" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;

fn paid(order: &str, n: i64, ttl_ms: i64, id: Option<&str>) -> MessageRequest {
    MessageRequest {
        name: "paid".into(),
        correlation_key: order.into(),
        variables: [("n".to_owned(), serde_json::json!(n))].into(),
        all: true,
        time_to_live_ms: Some(ttl_ms),
        message_id: id.map(str::to_owned),
    }
}

fn order(key: &str) -> qflow_core::Variables {
    [("order".to_owned(), serde_json::json!(key))].into()
}

async fn status(store: &dyn Store, id: InstanceId) -> InstanceStatus {
    store
        .instance(id)
        .await
        .expect("read")
        .expect("there")
        .status
}

/// The instance's `n`, the number of the message it took (null: none).
async fn taken(store: &dyn Store, id: InstanceId) -> serde_json::Value {
    let record = store.instance(id).await.expect("read").expect("there");
    let snap = qflow_core::Snapshot::decode(&record.snapshot).expect("decodes");
    snap.variables()
        .get("n")
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

async fn tokens(store: &dyn Store, id: InstanceId) -> Vec<String> {
    let record = store.instance(id).await.expect("read").expect("there");
    let snap = qflow_core::Snapshot::decode(&record.snapshot).expect("decodes");
    snap.tokens().to_vec()
}

async fn ends_with(store: &dyn Store, id: InstanceId, n: i64, what: &str) {
    eventually(what, || async {
        status(store, id).await == InstanceStatus::Completed
    })
    .await;
    assert_eq!(taken(store, id).await, serde_json::json!(n), "{what}");
}

async fn story<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "buffer-test");
    let billing = DeploymentId(engine.ops.deploy(BILLING, None).await.expect("deploys").id);
    let audit = DeploymentId(engine.ops.deploy(AUDIT, None).await.expect("deploys").id);
    let start = |deployment: DeploymentId, key: &'static str| {
        let runtime = engine.runtime.clone();
        async move {
            runtime
                .start_instance(deployment, order(key))
                .await
                .expect("starts")
        }
    };
    let b1 = start(billing, "o-1").await;
    let b2 = start(billing, "o-1").await;
    let b3 = start(billing, "o-1").await;

    // Nothing waits yet: both messages are kept, neither delivered; the second has an id,
    // which a third publication repeats and is refused for, writing nothing.
    let m1 = engine
        .ops
        .correlate(paid("o-1", 1, 600_000, None))
        .await
        .expect("kept");
    assert!(m1.deliveries.is_empty(), "{m1:?}");
    let kept = m1.buffered.expect("kept");
    assert!(kept.key >> 51 == 1, "a partition-1 key: {}", kept.key);
    let m2 = engine
        .ops
        .correlate(paid("o-1", 2, 600_000, Some("pay-2")))
        .await
        .expect("kept");
    assert!(m2.deliveries.is_empty(), "{m2:?}");
    let again = engine
        .ops
        .correlate(paid("o-1", 3, 600_000, Some("pay-2")))
        .await;
    assert!(
        matches!(again, Err(qflow_ops::Error::Conflict(ref why)) if why.contains("pay-2")),
        "{again:?}"
    );
    let now = SystemClock.now_ms();
    let listed = store
        .buffered_messages(BufferQuery {
            name_and_key: Some(("paid", "o-1")),
            after: 0,
            now_ms: now,
            limit: 0,
        })
        .await
        .expect("lists");
    assert_eq!(listed.len(), 2, "the refused one is not kept: {listed:?}");
    assert_eq!(listed[0].key, kept.key);

    // b1's wait opens: the oldest message reaches it.
    engine
        .ops
        .complete_user_task(b1, "prepare", Default::default(), None)
        .await
        .expect("completes");
    ends_with(&*store, b1, 1, "b1 takes the first message").await;
    // b2's wait opens: billing took the first, so the second reaches it.
    engine
        .ops
        .complete_user_task(b2, "prepare", Default::default(), None)
        .await
        .expect("completes");
    ends_with(&*store, b2, 2, "b2 takes the second message").await;
    // Another process: an instance that waits from its start takes the oldest.
    let a1 = start(audit, "o-1").await;
    ends_with(&*store, a1, 1, "audit takes the first message too").await;
    // b3's wait opens with nothing kept for billing: it waits, until a publication
    // without a time to live reaches it.
    engine
        .ops
        .complete_user_task(b3, "prepare", Default::default(), None)
        .await
        .expect("completes");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tokens(&*store, b3).await, vec!["wait_paid".to_owned()]);
    let listed = store
        .buffered_messages(BufferQuery {
            name_and_key: Some(("paid", "o-1")),
            after: 0,
            now_ms: SystemClock.now_ms(),
            limit: 0,
        })
        .await
        .expect("lists");
    let takers: Vec<Vec<String>> = listed.iter().map(|m| m.takers.clone()).collect();
    assert_eq!(
        takers,
        vec![
            vec!["audit".to_owned(), "billing".to_owned()],
            vec!["billing".to_owned()]
        ]
    );
    let direct = engine
        .ops
        .correlate(paid("o-1", 4, 0, None))
        .await
        .expect("delivered");
    assert_eq!(direct.deliveries.len(), 1, "{direct:?}");
    ends_with(&*store, b3, 4, "b3 takes the unkept message").await;

    // A wait open at publication takes the message at once, and its process only once:
    // of two audit instances waiting, the older one.
    let a2 = start(audit, "o-2").await;
    let a3 = start(audit, "o-2").await;
    let now_kept = engine
        .ops
        .correlate(paid("o-2", 5, 600_000, None))
        .await
        .expect("kept");
    // The answer lists the deliveries this request made: the runtime's buffer task, rung
    // when a2 and a3 opened their waits, may get there first.
    assert!(now_kept.deliveries.len() <= 1, "{now_kept:?}");
    if let Some(d) = now_kept.deliveries.first() {
        assert_eq!(d.instance, a2.to_string());
    }
    ends_with(&*store, a2, 5, "a2 takes it at publication").await;
    assert_eq!(tokens(&*store, a3).await, vec!["wait_paid".to_owned()]);

    // An expired message reaches nothing.
    let b4 = start(billing, "o-3").await;
    engine
        .ops
        .correlate(paid("o-3", 6, 1, None))
        .await
        .expect("kept");
    tokio::time::sleep(Duration::from_millis(20)).await;
    engine
        .ops
        .complete_user_task(b4, "prepare", Default::default(), None)
        .await
        .expect("completes");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tokens(&*store, b4).await, vec!["wait_paid".to_owned()]);

    // With no runtime running (an operator's tool on the store), nothing rings when a
    // wait opens: a later publication offers the older kept message first, and a wait
    // left open is delivered by the sweep of the next runtime.
    let b5 = start(billing, "o-4").await;
    let b6 = start(billing, "o-6").await;
    engine.stop().await;
    drop(store);
    let store = open().await;
    let offline = Ops::new(store.clone(), Arc::new(|| SystemClock.now_ms()), "operator");
    offline
        .correlate(paid("o-4", 7, 600_000, None))
        .await
        .expect("kept offline");
    offline
        .complete_user_task(b5, "prepare", Default::default(), None)
        .await
        .expect("completes offline");
    assert_eq!(tokens(&*store, b5).await, vec!["wait_paid".to_owned()]);
    let m8 = offline
        .correlate(paid("o-4", 8, 600_000, None))
        .await
        .expect("kept offline");
    assert!(
        m8.deliveries.is_empty(),
        "the older message went first: {m8:?}"
    );
    assert_eq!(status(&*store, b5).await, InstanceStatus::Completed);
    assert_eq!(taken(&*store, b5).await, serde_json::json!(7));
    offline
        .correlate(paid("o-6", 9, 600_000, None))
        .await
        .expect("kept offline");
    offline
        .complete_user_task(b6, "prepare", Default::default(), None)
        .await
        .expect("completes offline");
    assert_eq!(tokens(&*store, b6).await, vec!["wait_paid".to_owned()]);
    let engine = Engine::start(store.clone(), false, "buffer-test");
    ends_with(&*store, b6, 9, "the sweep at start delivers it").await;
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_messages_reach_later_waits_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    story(stores::sqlite(dir.path().join("buffer.sqlite"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_messages_reach_later_waits_on_postgres() {
    if let Some(open) = stores::postgres("buffer", 6) {
        story(open).await;
    }
}

/// More waits under one name and key than an offer reads at a time (256): a kept message
/// that one process took still reaches another process's wait behind all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_message_reaches_a_wait_behind_a_page_of_waits_of_a_process_that_took_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let open = stores::sqlite(dir.path().join("pages.sqlite"));
    let store = open().await;
    let engine = Engine::start(store.clone(), false, "buffer-test");
    let billing = DeploymentId(engine.ops.deploy(BILLING, None).await.expect("deploys").id);
    let audit = DeploymentId(engine.ops.deploy(AUDIT, None).await.expect("deploys").id);
    let mut audits = Vec::new();
    for _ in 0..300 {
        let id = engine
            .runtime
            .start_instance(audit, order("o-p"))
            .await
            .expect("starts");
        audits.push(id);
    }
    let late = engine
        .runtime
        .start_instance(billing, order("o-p"))
        .await
        .expect("starts");
    let kept = engine
        .ops
        .correlate(paid("o-p", 1, 600_000, None))
        .await
        .expect("kept");
    // One audit wait takes it, the oldest; the other 299 are of a process that took it.
    eventually("one audit instance takes it", || async {
        status(&*store, audits[0]).await == InstanceStatus::Completed
    })
    .await;
    assert!(kept.deliveries.len() <= 1, "{kept:?}");
    // Billing's wait opens behind the 299 audit waits still open.
    engine
        .ops
        .complete_user_task(late, "prepare", Default::default(), None)
        .await
        .expect("completes");
    ends_with(&*store, late, 1, "billing takes it past the first page").await;
    for id in &audits[1..] {
        assert_eq!(tokens(&*store, *id).await, vec!["wait_paid".to_owned()]);
    }
    engine.stop().await;
}
