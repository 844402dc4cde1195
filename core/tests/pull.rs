//! Pull tasks (SPEC P1): offered, locked, completed, failed, expired, answered with a BPMN
//! error — through the production step on a virtual clock (`run_scenario`), and stale
//! worker answers through `step` directly.

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::{codes, step, Attempt, AttemptOutcome, Effect, Input, Snapshot, Status};
use serde_json::json;

/// `start → pull(topic "t") → end`, with a catch-all error boundary `caught`; the
/// default budget of three attempts.
fn pull_model() -> qflow_loader::model::Definition {
    model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
        <serviceTask id="work" q:topic="t"/>
        <boundaryEvent id="caught" attachedToRef="work"><errorEventDefinition/></boundaryEvent>
        <sequenceFlow id="f1" sourceRef="work" targetRef="e"/><endEvent id="e"/>
        <sequenceFlow id="f2" sourceRef="caught" targetRef="e2"/><endEvent id="e2"/>"#,
    )
}

fn lock(at_ms: i64, attempt: u32, worker: &str, lock_ms: u64) -> serde_json::Value {
    json!({"event": "pull", "at_ms": at_ms, "input": {
        "type": "pull_locked", "node": "work", "attempt": attempt, "worker": worker,
        "lock_ms": lock_ms}})
}

fn answer(at_ms: i64, input: serde_json::Value) -> serde_json::Value {
    json!({"event": "pull", "at_ms": at_ms, "input": input})
}

fn scenario(events: Vec<serde_json::Value>) -> String {
    json!({"variables": {"n": 1}, "events": events}).to_string()
}

fn history(
    trace: &qflow_core::sim::Trace,
) -> Vec<(u32, AttemptOutcome, Option<String>, Option<String>)> {
    effects(trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::AttemptFinished {
                attempt,
                outcome,
                code,
                worker,
                ..
            } => Some((attempt.get(), outcome, code, worker)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_locked_task_completed_by_its_worker_moves_on_with_the_variables() {
    let def = pull_model();
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(10, 1, "w1", 1_000),
            answer(
                20,
                json!({"type": "pull_completed", "node": "work", "attempt": 1, "worker": "w1",
                       "variables": {"done": true}}),
            ),
        ]),
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(last(&trace).variables()["done"], json!(true));
    assert_eq!(
        history(&trace),
        vec![(1, AttemptOutcome::Ok, None, Some("w1".into()))]
    );
    let offered: Vec<Effect> = effects(&trace)
        .into_iter()
        .map(|(_, e)| e)
        .filter(|e| {
            matches!(
                e,
                Effect::OfferPullTask { .. } | Effect::WithdrawPullTask { .. }
            )
        })
        .collect();
    assert_eq!(offered.len(), 3, "offer, lock, withdraw: {offered:?}");
    assert!(
        matches!(&offered[1], Effect::OfferPullTask { lock: Some(l), .. }
        if l.worker == "w1" && l.until_ms == 1_010)
    );
    // The lock timer went with the completion.
    assert!(last(&trace).timers().is_empty());
}

#[test]
fn expired_locks_spend_the_budget_and_end_failed_with_lock_expired() {
    let def = pull_model();
    // Three attempts (the default budget), each locked and abandoned.
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(0, 1, "w1", 100),
            lock(200, 2, "w2", 100),
            lock(400, 3, "w3", 100),
        ]),
    );
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some(codes::LOCK_EXPIRED)
    );
    let rows = history(&trace);
    assert_eq!(rows.len(), 3);
    for (i, (attempt, outcome, code, worker)) in rows.into_iter().enumerate() {
        assert_eq!(attempt, i as u32 + 1);
        assert_eq!(outcome, AttemptOutcome::TimedOut);
        assert_eq!(code.as_deref(), Some(codes::LOCK_EXPIRED));
        assert_eq!(worker, Some(format!("w{}", i + 1)));
    }
    let snap = last(&trace);
    assert_eq!(snap.pull_retries("work"), Some(0));
    assert!(snap.lock("work").is_none());
    // FAILED withdrew the task from workers.
    assert!(matches!(
        effects(&trace).last().map(|(_, e)| e.clone()),
        Some(Effect::Failed { .. })
    ));
    assert!(effects(&trace)
        .iter()
        .any(|(at, e)| *at == 500 && matches!(e, Effect::WithdrawPullTask { .. })));
}

#[test]
fn a_failure_with_retries_and_a_timeout_parks_then_offers_the_next_attempt() {
    let def = pull_model();
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(0, 1, "w1", 1_000),
            answer(
                10,
                json!({"type": "pull_failed", "node": "work", "attempt": 1, "worker": "w1",
                       "retries": 5, "retry_timeout_ms": 500, "message": "db down"}),
            ),
            // Offered again at 510 (the park's instant), not before.
            lock(600, 2, "w1", 1_000),
            answer(
                610,
                json!({"type": "pull_completed", "node": "work", "attempt": 2, "worker": "w1"}),
            ),
        ]),
    );
    assert_eq!(trace.summary.status, "completed");
    let reoffered: Vec<i64> = effects(&trace)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Effect::OfferPullTask {
                attempt,
                lock: None,
                ..
            } if attempt.get() == 2 => Some(at),
            _ => None,
        })
        .collect();
    assert_eq!(reoffered, vec![510]);
    assert_eq!(
        history(&trace)
            .into_iter()
            .map(|(a, o, c, _)| (a, o, c))
            .collect::<Vec<_>>(),
        vec![
            (
                1,
                AttemptOutcome::Failed,
                Some(codes::PULL_TASK_FAILED.into())
            ),
            (2, AttemptOutcome::Ok, None),
        ]
    );
}

#[test]
fn a_failure_with_no_retries_left_ends_failed() {
    let def = pull_model();
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(0, 1, "w1", 1_000),
            answer(
                10,
                json!({"type": "pull_failed", "node": "work", "attempt": 1, "worker": "w1",
                       "retries": 0, "message": "gave up"}),
            ),
        ]),
    );
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some(codes::PULL_TASK_FAILED)
    );
    assert!(effects(&trace).iter().any(
        |(_, e)| matches!(e, Effect::OpenIncident { code, .. } if code == codes::PULL_TASK_FAILED)
    ));
}

#[test]
fn a_bpmn_error_routes_to_its_boundary_and_spends_no_budget() {
    let def = pull_model();
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(0, 1, "w1", 1_000),
            answer(
                10,
                json!({"type": "pull_bpmn_error", "node": "work", "attempt": 1, "worker": "w1",
                       "code": "E1", "variables": {"why": "no stock"}}),
            ),
        ]),
    );
    assert_eq!(trace.summary.status, "completed");
    let snap = last(&trace);
    assert_eq!(snap.variables()["why"], json!("no stock"));
    assert!(snap.attempts().is_empty());
    assert_eq!(
        history(&trace),
        vec![(
            1,
            AttemptOutcome::BpmnError,
            Some("E1".into()),
            Some("w1".into())
        )]
    );
}

#[test]
fn extending_a_lock_moves_its_expiry_and_unlocking_offers_it_again() {
    let def = pull_model();
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(0, 1, "w1", 100),
            answer(
                50,
                json!({"type": "pull_lock_extended", "node": "work", "attempt": 1,
                       "worker": "w1", "lock_ms": 1_000}),
            ),
            // Past the first expiry (100) the lock still holds.
            answer(
                500,
                json!({"type": "pull_unlocked", "node": "work", "attempt": 1, "worker": "w1"}),
            ),
            lock(600, 1, "w2", 100),
            answer(
                650,
                json!({"type": "pull_completed", "node": "work", "attempt": 1, "worker": "w2"}),
            ),
        ]),
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(
        history(&trace),
        vec![(1, AttemptOutcome::Ok, None, Some("w2".into()))]
    );
}

/// The refusals a worker gets: each answer is stale, changes nothing, and says why.
#[test]
fn answers_from_the_wrong_worker_or_after_expiry_are_refused_with_the_reason() {
    let def = pull_model();
    let start = Input::Start {
        variables: Default::default(),
        start: None,
    };
    let s = step(&def, "i", Snapshot::new(), start, 0).unwrap().snapshot;
    let complete = |worker: &str, attempt: u32| Input::PullCompleted {
        node: "work".into(),
        attempt: Attempt::new(attempt).unwrap(),
        worker: worker.into(),
        variables: Default::default(),
    };
    let stale = |snap: &Snapshot, input: Input, now: i64| -> String {
        let out = step(&def, "i", snap.clone(), input, now).unwrap();
        assert_eq!(&out.snapshot, snap, "a stale input changes nothing");
        match out.effects.as_slice() {
            [Effect::Stale { reason }] => reason.clone(),
            other => panic!("not stale: {other:?}"),
        }
    };
    assert!(stale(&s, complete("w1", 1), 5).contains("not locked by any worker"));
    let locked = step(
        &def,
        "i",
        s,
        Input::PullLocked {
            node: "work".into(),
            attempt: Attempt::FIRST,
            worker: "w1".into(),
            lock_ms: 100,
        },
        10,
    )
    .unwrap()
    .snapshot;
    assert_eq!(locked.lock("work"), Some(("w1", 110)));
    assert!(stale(&locked, complete("w2", 1), 20).contains("locked by worker `w1`, not `w2`"));
    assert!(stale(&locked, complete("w1", 1), 110).contains("expired at 110"));
    assert!(stale(&locked, complete("w1", 2), 20).contains("live attempt is 1"));
    let relock = Input::PullLocked {
        node: "work".into(),
        attempt: Attempt::FIRST,
        worker: "w2".into(),
        lock_ms: 100,
    };
    assert!(stale(&locked, relock, 20).contains("locked by worker `w1` until 110"));
    // The expiry spends the attempt; the old worker's answer now names an attempt that
    // is over.
    let timer = Input::TimerFired {
        name: "l:work".parse().unwrap(),
        incarnation: locked.timers()["l:work"],
    };
    let expired = step(&def, "i", locked, timer, 110).unwrap().snapshot;
    assert_eq!(expired.status(), Status::Running);
    assert_eq!(expired.attempt_in_progress("work").get(), 2);
    assert!(stale(&expired, complete("w1", 1), 120).contains("live attempt is 2"));
}

#[test]
fn a_timer_boundary_interrupting_a_locked_task_withdraws_it() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
        <serviceTask id="work" q:topic="t"/>
        <boundaryEvent id="late" attachedToRef="work"><timerEventDefinition><timeDuration>PT1S</timeDuration></timerEventDefinition></boundaryEvent>
        <sequenceFlow id="f1" sourceRef="work" targetRef="e"/><endEvent id="e"/>
        <sequenceFlow id="f2" sourceRef="late" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let trace = run_scenario(&def, &scenario(vec![lock(10, 1, "w1", 60_000)]));
    assert_eq!(trace.summary.status, "completed");
    let at_boundary: Vec<Effect> = effects(&trace)
        .into_iter()
        .filter(|(at, _)| *at == 1_000)
        .map(|(_, e)| e)
        .collect();
    assert!(at_boundary
        .iter()
        .any(|e| matches!(e, Effect::WithdrawPullTask { node } if node == "work")));
    assert!(at_boundary.iter().any(|e| matches!(e,
        Effect::AttemptFinished { outcome: AttemptOutcome::Interrupted, worker: Some(w), .. } if w == "w1")));
    assert!(last(&trace).timers().is_empty());
}

#[test]
fn resume_after_a_final_failure_offers_one_more_attempt() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
        <serviceTask id="work" q:topic="t"/>
        <sequenceFlow id="f1" sourceRef="work" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(0, 1, "w1", 1_000),
            answer(
                10,
                json!({"type": "pull_failed", "node": "work", "attempt": 1, "worker": "w1",
                       "retries": 0}),
            ),
            json!({"event": "resume", "at_ms": 20, "budget": "keep"}),
            lock(30, 2, "w1", 1_000),
            answer(
                40,
                json!({"type": "pull_completed", "node": "work", "attempt": 2, "worker": "w1"}),
            ),
        ]),
    );
    assert_eq!(trace.summary.status, "completed");
}

/// Camunda 8's "update the job's retries, then resolve the incident": on a task FAILED
/// with no retries left, `pull_retries_set` leaves the instance FAILED, and the resume
/// that keeps the budget then offers the task with those retries; each failure after it
/// counts them down as the worker reports. On a running instance it sets the attempts
/// left of the live attempt. Refused: retries 0, an attempt that is over, another node
/// of a FAILED instance.
#[test]
fn retries_set_on_a_failed_task_are_what_a_kept_resume_offers() {
    let def = pull_model();
    let failed = |at: i64, attempt: u32, retries: u32| {
        answer(
            at,
            json!({"type": "pull_failed", "node": "work", "attempt": attempt, "worker": "w1",
                   "retries": retries}),
        )
    };
    let set = |at: i64, attempt: u32, retries: u32| {
        answer(
            at,
            json!({"type": "pull_retries_set", "node": "work", "attempt": attempt,
                   "retries": retries}),
        )
    };
    let trace = run_scenario(
        &def,
        &scenario(vec![
            lock(0, 1, "w1", 1_000),
            failed(10, 1, 0),
            set(15, 1, 3),
            json!({"event": "resume", "at_ms": 20, "budget": "keep"}),
            lock(30, 2, "w1", 1_000),
            failed(40, 2, 2),
            lock(50, 3, "w1", 1_000),
        ]),
    );
    let steps = &trace.steps;
    let after_set = Snapshot::decode(&steps[3].snapshot).unwrap();
    assert_eq!(
        after_set.status(),
        Status::Failed,
        "setting retries repairs nothing"
    );
    assert_eq!(after_set.pull_retries("work"), Some(3));
    let resumed = Snapshot::decode(&steps[4].snapshot).unwrap();
    assert_eq!(resumed.status(), Status::Running);
    assert_eq!(
        resumed.pull_retries("work"),
        Some(3),
        "the kept budget is the one set"
    );
    // The worker's next failure counts down from them; attempt 3 is offered and locked.
    let relocked = Snapshot::decode(&steps[7].snapshot).unwrap();
    assert_eq!(relocked.status(), Status::Running);
    assert_eq!(relocked.pull_retries("work"), Some(2));
    assert_eq!(
        relocked.attempt_in_progress("work"),
        Attempt::new(3).unwrap()
    );

    // Refusals, straight through `step`: each changes nothing.
    let snap = Snapshot::decode(&steps[3].snapshot).unwrap();
    for (attempt, retries, node, why) in [
        (1, 0, "work", "at least 1"),
        (2, 3, "work", "is over"),
        (1, 3, "e", "not a pull task"),
    ] {
        let input = Input::PullRetriesSet {
            node: node.into(),
            attempt: Attempt::new(attempt).unwrap(),
            retries,
        };
        let out = step(&def, "i", snap.clone(), input, 16).unwrap();
        assert_eq!(out.snapshot, snap, "{why}");
        assert!(
            matches!(&out.effects[..], [Effect::Stale { reason }] if reason.contains(why)),
            "{why}: {:?}",
            out.effects
        );
    }
    // A running instance's live attempt takes it.
    let running = Snapshot::decode(&steps[1].snapshot).unwrap();
    let input = Input::PullRetriesSet {
        node: "work".into(),
        attempt: Attempt::FIRST,
        retries: 7,
    };
    let out = step(&def, "i", running, input, 5).unwrap();
    assert!(out.effects.is_empty(), "{:?}", out.effects);
    assert_eq!(out.snapshot.pull_retries("work"), Some(7));
    assert_eq!(out.snapshot.status(), Status::Running);
}

/// A message end event run by a worker (Zeebe's job on a message throw event): the token
/// waits there as at any pull task, and the instance ends once the worker completes it.
#[test]
fn a_message_end_event_run_by_a_worker_ends_the_instance_when_the_worker_completes_it() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
        <endEvent id="work" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"><extensionElements><zeebe:taskDefinition type="inform"/></extensionElements><messageEventDefinition/></endEvent>"#,
    );
    let waiting = run_scenario(&def, &scenario(vec![]));
    assert_eq!(waiting.summary.status, "running");
    assert!(effects(&waiting).iter().any(|(_, e)| matches!(e,
        Effect::OfferPullTask { topic, .. } if topic == "inform")));
    let done = run_scenario(
        &def,
        &scenario(vec![
            lock(10, 1, "w1", 1_000),
            answer(
                20,
                json!({"type": "pull_completed", "node": "work", "attempt": 1, "worker": "w1",
                       "variables": {"informed": true}}),
            ),
        ]),
    );
    assert_eq!(done.summary.status, "completed");
    assert_eq!(last(&done).variables()["informed"], json!(true));
    // Its end is traced as a message end's, as `qflow simulate` reports ends.
    let ends: Vec<&qflow_core::PathEvent> = done
        .steps
        .iter()
        .flat_map(|s| s.path.iter())
        .filter(|e| matches!(e, qflow_core::PathEvent::End { node, .. } if node == "work"))
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
}
