//! The runtime on a durable store (SQLite in a temp directory) and a manual clock: a
//! backoff is a timer park the poller re-drives when the clock reaches it, and a replica
//! that dies mid-attempt leaves a lease another one re-adopts once it lapses. Time moves
//! only when a test moves it; nothing here sleeps.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, ManualClock, Runtime, RuntimeConfig, TaskOutcome};
use qflow_store::{AttemptOutcome, InstanceStatus, Store, TimerKind};
use support::{deploy_and_start, hang_guard};

const T0: i64 = 1_700_000_000_000;

/// One task with a retry policy: three attempts, 10 s apart, no jitter.
const RETRYING: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="retrying" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="pay" q:task="pay"><extensionElements><q:retry maxAttempts="3" initialInterval="PT10S" jitter="none"/></extensionElements></serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
    <sequenceFlow id="f1" sourceRef="pay" targetRef="end"/>
  </process>
</definitions>"#;

/// `(kind, due)` of every timer row of `id`.
async fn timers_of(store: &dyn Store, id: qflow_store::InstanceId) -> Vec<(TimerKind, i64)> {
    let timers = store.timers(id).await.expect("timers");
    timers
        .iter()
        .map(|t| (t.name.kind(), t.due_at_ms))
        .collect()
}

async fn sqlite() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("qflow.db"))
        .await
        .expect("opens sqlite");
    (dir, Arc::new(store))
}

/// One lane; the poller looks every millisecond of the manual clock, so a timer fires at
/// the very instant the clock reaches it.
fn config() -> RuntimeConfig {
    RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        ..RuntimeConfig::default()
    }
}

#[tokio::test]
async fn a_failed_attempt_parks_until_the_clock_reaches_its_backoff_then_redrives() {
    let (_dir, store) = sqlite().await;
    let clock = Arc::new(ManualClock::new(T0));
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let handlers =
        AsyncHandlers::new().with_sync("pay", move |_: &qflow_runtime::TaskContext<'_>| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                TaskOutcome::Fail {
                    code: "CARD_DECLINED".into(),
                    message: "first try".into(),
                }
            } else {
                TaskOutcome::Ok(Default::default())
            }
        });
    let rt = Runtime::start(store.clone(), handlers, clock.clone(), config());
    let id = deploy_and_start(&rt, RETRYING).await;
    hang_guard(rt.wait_until(|s| s.parks >= 1)).await;

    // Parked: one attempt spent, the park row due exactly one backoff later, no lease
    // (nothing is in flight during a backoff window).
    assert_eq!(
        timers_of(&*store, id).await,
        [(TimerKind::Retry, T0 + 10_000)]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A millisecond early nothing fires; at the instant the poller re-drives.
    clock.advance_ms(9_999);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the park holds until it is due"
    );
    clock.advance_ms(1);
    hang_guard(rt.wait_until(|s| s.completed >= 1)).await;
    rt.shutdown().await;

    let rec = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(rec.status, InstanceStatus::Completed);
    let history: Vec<_> = store
        .attempts(id)
        .await
        .expect("history")
        .into_iter()
        .map(|a| {
            (
                a.attempt.get(),
                a.outcome,
                a.started_at_ms,
                a.finished_at_ms,
            )
        })
        .collect();
    assert_eq!(
        history,
        vec![
            (1, AttemptOutcome::Failed, T0, T0),
            (2, AttemptOutcome::Ok, T0 + 10_000, T0 + 10_000),
        ]
    );
    assert!(store.timers(id).await.expect("timers").is_empty());
}

#[tokio::test]
async fn a_replica_that_dies_mid_attempt_is_re_adopted_once_its_lease_lapses() {
    let (_dir, store) = sqlite().await;
    let clock = Arc::new(ManualClock::new(T0));
    // Replica A's handler never answers: it is running when A dies.
    let stuck = AsyncHandlers::new().with_async("pay", |_call| async {
        futures::future::pending::<TaskOutcome>().await
    });
    let a = Runtime::start(store.clone(), stuck, clock.clone(), config());
    let id = deploy_and_start(&a, RETRYING).await;
    hang_guard(a.wait_until(|s| s.handler_calls >= 1)).await;
    let lease_ms = config().inflight_lease_ms;
    assert_eq!(
        timers_of(&*store, id).await,
        [(TimerKind::Lease, T0 + lease_ms)]
    );
    a.abort();

    // Replica B starts on the same store. Before the lease lapses it leaves the attempt
    // alone; once it lapses it re-adopts attempt 1: no budget spent.
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let ok = AsyncHandlers::new().with_sync("pay", move |c: &qflow_runtime::TaskContext<'_>| {
        assert_eq!(c.attempt.get(), 1, "re-adoption runs the same attempt");
        counted.fetch_add(1, Ordering::SeqCst);
        TaskOutcome::Ok(Default::default())
    });
    let b = Runtime::start(store.clone(), ok, clock.clone(), config());
    clock.advance_ms(lease_ms - 1);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the live lease is respected"
    );
    clock.advance_ms(1);
    hang_guard(b.wait_until(|s| s.completed >= 1)).await;
    b.shutdown().await;

    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let history: Vec<_> = store
        .attempts(id)
        .await
        .expect("history")
        .into_iter()
        .map(|a| (a.node, a.attempt.get(), a.outcome))
        .collect();
    assert_eq!(history, vec![("pay".to_owned(), 1, AttemptOutcome::Ok)]);
    assert!(store.timers(id).await.expect("timers").is_empty());
}

/// A step taken outside the lanes — the path operator repairs use — is durable when the
/// call returns, and the handler calls it asks for still run on the lane.
#[tokio::test]
async fn claim_and_step_moves_an_instance_outside_the_lanes() {
    const REVIEW: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="review" isExecutable="true">
    <startEvent id="start"/>
    <userTask id="approve"/>
    <serviceTask id="ship" q:task="count"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="approve"/>
    <sequenceFlow id="f1" sourceRef="approve" targetRef="ship"/>
    <sequenceFlow id="f2" sourceRef="ship" targetRef="end"/>
  </process>
</definitions>"#;
    let (_dir, store) = sqlite().await;
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let handlers =
        AsyncHandlers::new().with_sync("count", move |_: &qflow_runtime::TaskContext<'_>| {
            counted.fetch_add(1, Ordering::SeqCst);
            TaskOutcome::Ok(Default::default())
        });
    let clock = Arc::new(ManualClock::new(T0));
    let rt = Runtime::start(
        store.clone(),
        handlers,
        clock,
        RuntimeConfig {
            lanes: 2,
            ..config()
        },
    );
    let id = deploy_and_start(&rt, REVIEW).await;
    let before = store.instance(id).await.expect("reads").expect("exists");
    let complete = qflow_runtime::Input::UserTaskCompleted {
        node: "approve".into(),
        variables: Default::default(),
        assignee: None,
    };
    let stepped = rt
        .claim_and_step(id, complete.clone())
        .await
        .expect("steps");
    assert_eq!(stepped.fence, before.fence + 1);
    assert_eq!(stepped.calls.len(), 1, "the step asks for `ship`");
    hang_guard(rt.wait_until(|s| s.completed >= 1)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "`ship` ran once");
    // The same input again is stale: refused, nothing written.
    let done = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(done.status, InstanceStatus::Completed);
    match rt.claim_and_step(id, complete).await {
        Err(qflow_runtime::Error::Refused { what, .. }) => assert_eq!(what, "input"),
        other => panic!("expected a refusal, got {:?}", other.map(|s| s.fence)),
    }
    let after = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(after.fence, done.fence);
    rt.shutdown().await;
}

/// A poison attempt — every replica that runs it dies before an outcome is committed —
/// does not crash-loop forever: each restart re-adopts it, and past the limit it is a
/// failed attempt with `READOPTION_LIMIT`, FAILED with the evidence (issue 8, defect 3).
#[tokio::test]
async fn an_attempt_whose_replicas_keep_dying_ends_failed_instead_of_crash_looping() {
    const PLAIN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="poison" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="pay" q:task="pay"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
    <sequenceFlow id="f1" sourceRef="pay" targetRef="end"/>
  </process>
</definitions>"#;
    let (_dir, store) = sqlite().await;
    let clock = Arc::new(ManualClock::new(T0));
    let lease_ms = config().inflight_lease_ms;
    // Each replica's handler never answers: the replica "dies" (is aborted) mid-attempt.
    let stuck = || {
        AsyncHandlers::new().with_async("pay", |_call| async {
            futures::future::pending::<TaskOutcome>().await
        })
    };
    let first = Runtime::start(store.clone(), stuck(), clock.clone(), config());
    let id = deploy_and_start(&first, PLAIN).await;
    hang_guard(first.wait_until(|s| s.handler_calls >= 1)).await;
    first.abort();
    for restart in 1..=qflow_core::READOPTIONS_MAX {
        let replica = Runtime::start(store.clone(), stuck(), clock.clone(), config());
        clock.advance_ms(lease_ms);
        hang_guard(replica.wait_until(|s| s.handler_calls >= 1)).await;
        replica.abort();
        let rec = store.instance(id).await.expect("reads").expect("exists");
        assert_eq!(
            rec.status,
            InstanceStatus::Running,
            "restart {restart}: re-adopted"
        );
    }
    let last = Runtime::start(store.clone(), stuck(), clock.clone(), config());
    clock.advance_ms(lease_ms);
    hang_guard(last.wait_until(|s| s.failed >= 1)).await;
    last.shutdown().await;
    let rec = store.instance(id).await.expect("reads").expect("exists");
    assert_eq!(
        rec.failure_code.as_deref(),
        Some(qflow_core::codes::READOPTION_LIMIT)
    );
    let history = store.attempts(id).await.expect("history");
    assert_eq!(history.len(), 1, "one attempt, ended by the limit");
    assert_eq!(history[0].outcome, AttemptOutcome::Failed);
    assert!(store.timers(id).await.expect("timers").is_empty());
}

/// One service task `q:task="<task>"` in process `<process>`.
fn one_task(process: &str, task: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="{process}" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="work" q:task="{task}"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="work"/>
    <sequenceFlow id="f1" sourceRef="work" targetRef="end"/>
  </process>
</definitions>"#
    )
}

/// Retention (O7) on a manual clock: once their retention has passed, finished instances
/// and their attempt history go, in batches; one within retention stays until it too is
/// past; a FAILED and a running instance stay at any age.
#[tokio::test]
async fn retention_purges_finished_instances_past_their_retention_only() {
    const WAITING: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="waiting" isExecutable="true">
    <startEvent id="start"/>
    <userTask id="approve"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="approve"/>
    <sequenceFlow id="f1" sourceRef="approve" targetRef="end"/>
  </process>
</definitions>"#;
    const DAY_MS: i64 = qflow_runtime::retention::DAY_MS;
    let (_dir, store) = sqlite().await;
    let clock = Arc::new(ManualClock::new(T0));
    let handlers = AsyncHandlers::new()
        .with_sync("ok", |_: &qflow_runtime::TaskContext<'_>| {
            TaskOutcome::Ok(Default::default())
        })
        .with_sync("boom", |_: &qflow_runtime::TaskContext<'_>| {
            TaskOutcome::Fail {
                code: "BOOM".into(),
                message: "no retry policy: FAILED at once".into(),
            }
        });
    let retention = qflow_runtime::RetentionConfig {
        default_ms: DAY_MS,
        batch_max: 2,
        interval_ms: 1_000,
        ..Default::default()
    };
    let rt = Runtime::start(
        store.clone(),
        handlers,
        clock.clone(),
        RuntimeConfig {
            retention: Some(retention),
            ..config()
        },
    );
    let ok = rt
        .deploy(&one_task("fine", "ok"), None)
        .await
        .expect("deploys")
        .id;
    let boom = rt
        .deploy(&one_task("broken", "boom"), None)
        .await
        .expect("deploys")
        .id;
    let waiting = rt.deploy(WAITING, None).await.expect("deploys").id;
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(
            rt.start_instance(ok, Default::default())
                .await
                .expect("starts"),
        );
    }
    let failed = rt
        .start_instance(boom, Default::default())
        .await
        .expect("starts");
    let running = rt
        .start_instance(waiting, Default::default())
        .await
        .expect("starts");
    hang_guard(rt.wait_until(|s| s.completed >= 5 && s.failed >= 1)).await;

    // Most of a day later: nothing is past its retention yet.
    clock.set_ms(T0 + DAY_MS * 9 / 10);
    let recent = rt
        .start_instance(ok, Default::default())
        .await
        .expect("starts");
    hang_guard(rt.wait_until(|s| s.completed >= 6)).await;
    assert_eq!(rt.stats().view().purged, 0);

    // A day and a half after the start: the five old ones go (three batches of at most
    // two), the recent one (ended 0.6 days ago) stays.
    clock.set_ms(T0 + DAY_MS * 3 / 2);
    hang_guard(rt.wait_until(|s| s.purged >= 5)).await;
    for id in &old {
        assert!(
            store.instance(*id).await.expect("reads").is_none(),
            "{id} kept"
        );
        assert!(
            store.attempts(*id).await.expect("reads").is_empty(),
            "{id}'s attempts kept"
        );
    }
    let kept = store
        .instance(recent)
        .await
        .expect("reads")
        .expect("recent kept");
    assert_eq!(kept.ended_at_ms, Some(T0 + DAY_MS * 9 / 10));
    assert_eq!(store.attempts(recent).await.expect("reads").len(), 1);

    // A hundred days on: the recent one has gone too; FAILED and running never go.
    clock.set_ms(T0 + 100 * DAY_MS);
    hang_guard(rt.wait_until(|s| s.purged >= 6)).await;
    assert!(store.instance(recent).await.expect("reads").is_none());
    let f = store
        .instance(failed)
        .await
        .expect("reads")
        .expect("FAILED kept");
    assert_eq!(f.status, InstanceStatus::Failed);
    assert_eq!(f.ended_at_ms, None);
    assert_eq!(
        store.attempts(failed).await.expect("reads").len(),
        1,
        "its history too"
    );
    assert!(!store
        .incidents(Some(failed))
        .await
        .expect("reads")
        .is_empty());
    let r = store
        .instance(running)
        .await
        .expect("reads")
        .expect("running kept");
    assert_eq!(r.status, InstanceStatus::Running);
    assert_eq!(rt.stats().view().purged, 6);
    rt.shutdown().await;
}
