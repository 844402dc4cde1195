//! Pull tasks on a durable store (SQLite) and a manual clock: fetch-and-lock writes the
//! lock in the instance's commit, the lock's expiry is a timer row the poller fires, an
//! expired lock spends an attempt, and a waiting fetch is woken by a task offered
//! mid-wait. Time moves only when a test moves it.

mod support;

use std::sync::Arc;

use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, Fetch, Input, ManualClock, Runtime, RuntimeConfig};
use qflow_store::{AttemptOutcome, InstanceStatus, PullQuery, Store, TimerKind};
use support::{deploy_and_start, hang_guard};

const T0: i64 = 1_700_000_000_000;

const PULL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="pulling" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="work" q:topic="orders"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="work"/>
    <sequenceFlow id="f1" sourceRef="work" targetRef="end"/>
  </process>
</definitions>"#;

async fn runtime() -> (tempfile::TempDir, Arc<Runtime>, Arc<ManualClock>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
    let clock = Arc::new(ManualClock::new(T0));
    let config = RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::start(store, AsyncHandlers::new(), clock.clone(), config);
    (dir, Arc::new(rt), clock)
}

fn fetch(worker: &str, lock_ms: u64, wait_ms: u64) -> Fetch {
    Fetch {
        worker: worker.into(),
        topics: vec![("orders".into(), lock_ms)],
        max_tasks: 10,
        wait_ms,
    }
}

#[tokio::test]
async fn a_fetched_task_is_locked_durably_and_its_completion_ends_the_instance() {
    let (_dir, rt, _clock) = runtime().await;
    let id = deploy_and_start(&rt, PULL).await;
    let store = rt.store().clone();
    let topics = vec!["orders".to_string()];
    let offered = store
        .offered_pull_tasks(PullQuery {
            topics: &topics,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(offered.len(), 1);
    let locked = rt.fetch_and_lock(&fetch("w1", 5_000, 0)).await.unwrap();
    assert_eq!(locked.len(), 1);
    assert_eq!(locked[0].instance, id);
    assert_eq!(locked[0].lock_until_ms, T0 + 5_000);
    assert_eq!(locked[0].retries, 3);
    // The lock is in the store: the row, and the expiry timer row.
    let rows = store.pull_tasks(id).await.unwrap();
    assert_eq!(rows[0].worker.as_deref(), Some("w1"));
    let timers = store.timers(id).await.unwrap();
    assert!(timers
        .iter()
        .any(|t| t.name.kind() == TimerKind::Lock && t.due_at_ms == T0 + 5_000));
    // A second fetch finds nothing.
    assert!(rt
        .fetch_and_lock(&fetch("w2", 5_000, 0))
        .await
        .unwrap()
        .is_empty());
    let done = Input::PullCompleted {
        node: "work".into(),
        attempt: locked[0].attempt,
        worker: "w1".into(),
        variables: Default::default(),
    };
    rt.claim_and_step(id, done).await.unwrap();
    let record = store.instance(id).await.unwrap().unwrap();
    assert_eq!(record.status, InstanceStatus::Completed);
    assert!(store.pull_tasks(id).await.unwrap().is_empty());
    assert!(store.timers(id).await.unwrap().is_empty());
    let history = store.attempts(id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].worker.as_deref(), Some("w1"));
    assert_eq!(history[0].outcome, AttemptOutcome::Ok);
}

#[tokio::test]
async fn expired_locks_are_fired_by_the_poller_and_end_failed_with_lock_expired() {
    let (_dir, rt, clock) = runtime().await;
    let id = deploy_and_start(&rt, PULL).await;
    let store = rt.store().clone();
    for attempt in 1..=3 {
        let locked = rt.fetch_and_lock(&fetch("gone", 1_000, 0)).await.unwrap();
        assert_eq!(locked.len(), 1, "attempt {attempt} is offered again");
        assert_eq!(locked[0].attempt.get(), attempt);
        // The lock's expiry is the only step the clock's move makes: wait for it to be
        // committed (woken by the runtime's progress, not by polling on time).
        let before = rt.stats().view().steps;
        clock.advance_ms(1_000);
        hang_guard(rt.wait_until(|s| s.steps > before)).await;
        assert_eq!(store.attempts(id).await.unwrap().len(), attempt as usize);
    }
    hang_guard(rt.wait_until(|s| s.failed >= 1)).await;
    let record = store.instance(id).await.unwrap().unwrap();
    assert_eq!(record.status, InstanceStatus::Failed);
    assert_eq!(record.failure_code.as_deref(), Some("LOCK_EXPIRED"));
    let history = store.attempts(id).await.unwrap();
    assert!(history
        .iter()
        .all(|a| a.code.as_deref() == Some("LOCK_EXPIRED") && a.worker.as_deref() == Some("gone")));
    assert!(store.pull_tasks(id).await.unwrap().is_empty());
    assert_eq!(store.incidents(Some(id)).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_waiting_fetch_is_woken_by_a_task_offered_mid_wait() {
    let (_dir, rt, _clock) = runtime().await;
    let dep = rt.deploy(PULL, None).await.unwrap();
    let waiting = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.fetch_and_lock(&fetch("w1", 5_000, 60_000)).await })
    };
    // The fetch registers on its topic before it looks; wait until it waits.
    hang_guard(async {
        while rt.pull_bell().waiting_topics() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let id = rt.start_instance(dep.id, Default::default()).await.unwrap();
    // Woken without the clock moving: the offer rang the bell.
    let locked = hang_guard(waiting).await.unwrap().unwrap();
    assert_eq!(locked.len(), 1);
    assert_eq!(locked[0].instance, id);
    assert_eq!(rt.pull_bell().waiting_topics(), 0);
}

#[tokio::test]
async fn a_waiting_fetch_answers_empty_at_its_deadline() {
    let (_dir, rt, clock) = runtime().await;
    let waiting = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.fetch_and_lock(&fetch("w1", 5_000, 2_000)).await })
    };
    hang_guard(async {
        while rt.pull_bell().waiting_topics() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    clock.advance_ms(2_000);
    let locked = hang_guard(waiting).await.unwrap().unwrap();
    assert!(locked.is_empty());
}

#[tokio::test]
async fn concurrent_fetches_lock_each_task_once_and_share_the_lanes_commits() {
    let (_dir, rt, _clock) = runtime().await;
    let dep = rt.deploy(PULL, None).await.unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for _ in 0..60 {
        ids.insert(rt.start_instance(dep.id, Default::default()).await.unwrap());
    }
    let before = rt.stats().view();
    let fetches = (0..4).map(|w| {
        let rt = rt.clone();
        tokio::spawn(async move {
            let mut f = fetch(&format!("w{w}"), 5_000, 0);
            f.max_tasks = 20;
            rt.fetch_and_lock(&f).await.unwrap()
        })
    });
    let mut locked = Vec::new();
    for f in fetches {
        locked.extend(hang_guard(f).await.unwrap());
    }
    let after = rt.stats().view();
    // Every task handed out once, to one worker, whatever the interleaving.
    let got: std::collections::BTreeSet<_> = locked.iter().map(|t| t.instance).collect();
    assert_eq!(got.len(), locked.len(), "a task was handed out twice");
    assert_eq!(got, ids, "4 fetches of 20 lock all 60 offered tasks");
    for t in &locked {
        let rows = rt.store().pull_tasks(t.instance).await.unwrap();
        assert!(rows[0].worker.is_some());
    }
    // The locks rode the lane's group commit: far fewer commits than locks.
    let steps = after.steps - before.steps;
    let batches = after.batches - before.batches;
    assert_eq!(steps, 60);
    assert!(batches < steps, "{batches} commits for {steps} locks");
}

#[tokio::test]
async fn an_answer_is_judged_on_stored_state_when_the_lane_cache_is_behind() {
    let (_dir, rt, _clock) = runtime().await;
    let id = deploy_and_start(&rt, PULL).await;
    // Locked through the lane: the lane keeps the instance cached, locked by w1.
    let locked = rt.fetch_and_lock(&fetch("w1", 5_000, 0)).await.unwrap();
    let attempt = locked[0].attempt;
    // Outside the lane (an operator, another replica): unlocked, then locked by w2.
    let unlock = Input::PullUnlocked {
        node: "work".into(),
        attempt,
        worker: None,
    };
    rt.claim_and_step(id, unlock).await.unwrap();
    let relock = Input::PullLocked {
        node: "work".into(),
        attempt,
        worker: "w2".into(),
        lock_ms: 5_000,
    };
    rt.claim_and_step(id, relock).await.unwrap();
    let done = |worker: &str| Input::PullCompleted {
        node: "work".into(),
        attempt,
        worker: worker.into(),
        variables: Default::default(),
    };
    // The cache would refuse w2 (it still says w1); the store has the last word.
    rt.send(id, done("w2")).await.unwrap();
    let record = rt.store().instance(id).await.unwrap().unwrap();
    assert_eq!(record.status, InstanceStatus::Completed);
    let history = rt.store().attempts(id).await.unwrap();
    assert_eq!(history[0].worker.as_deref(), Some("w2"));
    let stale = rt.send(id, done("w1")).await;
    assert!(
        matches!(stale, Err(qflow_runtime::Error::Refused { .. })),
        "{stale:?}"
    );
}
