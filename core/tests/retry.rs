//! The retry machinery (SPEC E4–E8), scenario by scenario, through `run_scenario`.
//! Expected park instants are computed with the loader's `RetryPolicy::delay_ms` and
//! `jitter_ppb`: the one formula `qflow check --explain` shows authors.

mod common;

use common::{arms, effects, last, linear, model, model_with, run_scenario, runs_of};
use qflow_core::{step, Attempt, AttemptOutcome, Effect, Input, Snapshot};
use qflow_loader::model::{jitter_ppb, Definition, NodeKind, RetryPolicy};

fn policy(def: &Definition, node: &str) -> RetryPolicy {
    let idx = def.process.find(node).expect("node exists");
    match &def.process.node(idx).kind {
        NodeKind::Task(t) => t.retry.clone().expect("node has a policy"),
        other => panic!("{node} is not a task: {other:?}"),
    }
}

/// Instants of the attempts of `node` when each of the first `failures` attempts fails
/// at once, starting at `start`: what the formula predicts.
fn predicted_runs(
    def: &Definition,
    instance: &str,
    node: &str,
    start: i64,
    failures: u32,
) -> Vec<(i64, u32)> {
    let p = policy(def, node);
    let mut at = start;
    let mut runs = vec![(at, 1)];
    for failed in 1..=failures {
        at += p.delay_ms(failed, jitter_ppb(instance, node, failed)) as i64;
        runs.push((at, failed + 1));
    }
    runs
}

const RETRY3: &str =
    r#"<q:retry maxAttempts="3" initialInterval="PT1S" backoffMultiplier="2" maxInterval="PT1M"/>"#;

#[test]
fn fail_fail_succeed_runs_three_attempts_at_the_predicted_instants() {
    let def = linear(&[("pay", RETRY3)]);
    let trace = run_scenario(
        &def,
        r#"{"instance": "order-7", "start_at_ms": 1000, "tasks": {"pay": [
            {"outcome": "fail", "code": "HANDLER_FAILED"},
            {"outcome": "panic", "message": "boom"},
            {"outcome": "ok", "outputs": {"paid": true}}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    let expected = predicted_runs(&def, "order-7", "pay", 1000, 2);
    assert_eq!(runs_of(&trace, "pay"), expected);
    let parks: Vec<(i64, String)> = arms(&trace)
        .into_iter()
        .map(|(_, due, n)| (due, n))
        .collect();
    assert_eq!(
        parks,
        vec![
            (expected[1].0, "r:pay".to_owned()),
            (expected[2].0, "r:pay".to_owned())
        ]
    );
    assert_eq!(trace.summary.attempts["pay"], 3);
    // In the first park: counter on attempt 2, marker with the class, park timer live.
    let parked = Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    assert_eq!(parked.attempt("pay"), 2);
    assert_eq!(parked.marker("pay"), Some("failed"));
    assert!(parked.timers().contains_key("r:pay"));
    assert_eq!(parked.tokens(), ["pay"]);
    let second = Snapshot::decode(&trace.steps[3].snapshot).unwrap();
    assert_eq!(second.marker("pay"), Some("panicked"));
    // The shell's handler time limit parks with the timeout class.
    let overrun = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "time_limit", "after_ms": 30}, {"outcome": "ok"}]}}"#,
    );
    let parked = Snapshot::decode(&overrun.steps[1].snapshot).unwrap();
    assert_eq!(parked.marker("pay"), Some("timeout"));
    assert!(effects(&overrun).iter().any(|(_, e)| matches!(
        e,
        Effect::AttemptFinished { outcome: AttemptOutcome::TimedOut, code: Some(c), .. }
            if c == "HANDLER_TIMEOUT"
    )));
    // The class comes from the kind the shell typed, never from the code: a handler
    // that reports the shell's code itself made a plain failure.
    let lookalike = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "HANDLER_TIMEOUT"}, {"outcome": "ok"}]}}"#,
    );
    let parked = Snapshot::decode(&lookalike.steps[1].snapshot).unwrap();
    assert_eq!(parked.marker("pay"), Some("failed"));
    // Completion clears the retry keys.
    let done = last(&trace);
    assert!(done.attempts().is_empty() && done.markers().is_empty());
}

#[test]
fn non_retryable_code_fails_at_once_and_keeps_the_counter() {
    let def = model_with(
        r#"<error id="e1" errorCode="CARD_DECLINED"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="pay"/>
        <serviceTask id="pay" q:task="pay"><extensionElements>
          <q:retry maxAttempts="5" nonRetryableCodes="CARD_DECLINED"/></extensionElements></serviceTask>
        <sequenceFlow id="f1" sourceRef="pay" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "CARD_DECLINED"}]}}"#,
    );
    assert_eq!(trace.summary.failure_code.as_deref(), Some("CARD_DECLINED"));
    assert_eq!(runs_of(&trace, "pay").len(), 1);
    let snap = last(&trace);
    assert_eq!(
        snap.failure().unwrap().detail.as_deref(),
        Some("non_retryable")
    );
    assert_eq!(snap.attempt("pay"), 1);
    assert!(snap.timers().is_empty());
}

#[test]
fn exhaustion_fails_with_the_last_code_and_keeps_the_attempt_count() {
    let def = linear(&[("pay", RETRY3)]);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "HANDLER_FAILED"}]}}"#,
    );
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some("HANDLER_FAILED")
    );
    assert_eq!(trace.summary.failure_node.as_deref(), Some("pay"));
    assert_eq!(
        runs_of(&trace, "pay"),
        predicted_runs(&def, "sim-1", "pay", 0, 2)
    );
    let snap = last(&trace);
    assert_eq!(snap.attempt("pay"), 3);
    assert_eq!(snap.failure().unwrap().detail.as_deref(), Some("exhausted"));
    assert_eq!(snap.marker("pay"), None);
    assert_eq!(snap.tokens(), ["pay"]);
    let incidents = effects(&trace)
        .into_iter()
        .filter(|(_, e)| matches!(e, Effect::OpenIncident { .. }))
        .count();
    assert_eq!(incidents, 1);
}

#[test]
fn bpmn_error_routes_to_its_boundary_and_spends_no_budget() {
    let def = model_with(
        r#"<error id="e1" errorCode="REJECTED"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="check"/>
        <serviceTask id="check" q:task="check"><extensionElements>
          <q:retry maxAttempts="2" initialInterval="PT1S" jitter="none"/></extensionElements></serviceTask>
        <boundaryEvent id="rej" attachedToRef="check"><errorEventDefinition errorRef="e1"/></boundaryEvent>
        <sequenceFlow id="f1" sourceRef="check" targetRef="e"/><endEvent id="e"/>
        <sequenceFlow id="f2" sourceRef="rej" targetRef="handle"/><serviceTask id="handle" q:task="handle"/>
        <sequenceFlow id="f3" sourceRef="handle" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    // A BPMN error on the first attempt: routed, no retry key ever written.
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"check": [{"outcome": "bpmn_error", "code": "REJECTED"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "handle").len(), 1);
    for s in &trace.steps {
        let snap = Snapshot::decode(&s.snapshot).unwrap();
        assert!(snap.attempts().is_empty() && snap.markers().is_empty());
    }
    // After one failure the last attempt (2 of 2) throws the BPMN error: still routed,
    // not FAILED for exhaustion.
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"check": [{"outcome": "fail", "code": "HANDLER_FAILED"},
                                {"outcome": "bpmn_error", "code": "REJECTED"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "check"), vec![(0, 1), (1000, 2)]);
    assert_eq!(runs_of(&trace, "handle"), vec![(1000, 1)]);
}

#[test]
fn timeout_with_policy_is_a_retryable_failure() {
    let def = linear(&[(
        "fetch",
        r#"<q:timeout duration="PT5S"/><q:retry maxAttempts="3" initialInterval="PT2S" jitter="none"/>"#,
    )]);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"fetch": [{"outcome": "hang"}, {"outcome": "hang"}, {"outcome": "ok", "after_ms": 100}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    // attempt 1 at 0, times out at 5s, parks 2s; attempt 2 at 7s, times out at 12s,
    // parks 4s; attempt 3 at 16s completes at 16.1s.
    assert_eq!(
        runs_of(&trace, "fetch"),
        vec![(0, 1), (7000, 2), (16_000, 3)]
    );
    assert_eq!(trace.summary.ended_at_ms, 16_100);
    let timed_out = effects(&trace)
        .into_iter()
        .filter(|(_, e)| {
            matches!(
                e,
                Effect::AttemptFinished {
                    outcome: AttemptOutcome::TimedOut,
                    ..
                }
            )
        })
        .count();
    assert_eq!(timed_out, 2);
    let parked = trace
        .steps
        .iter()
        .map(|s| Snapshot::decode(&s.snapshot).unwrap())
        .find(|s| s.marker("fetch").is_some())
        .unwrap();
    assert_eq!(parked.marker("fetch"), Some("timeout"));

    // Exhausted by timeouts: FAILED TIMEOUT, not a catchable error.
    let trace = run_scenario(&def, r#"{"tasks": {"fetch": [{"outcome": "hang"}]}}"#);
    assert_eq!(trace.summary.failure_code.as_deref(), Some("TIMEOUT"));
    assert_eq!(last(&trace).attempt("fetch"), 3);
}

#[test]
fn timeout_without_policy_stays_a_catchable_error() {
    let def = linear(&[("fetch", r#"<q:timeout duration="PT5S"/>"#)]);
    let trace = run_scenario(&def, r#"{"tasks": {"fetch": [{"outcome": "hang"}]}}"#);
    assert_eq!(trace.summary.failure_code.as_deref(), Some("TIMEOUT"));
    assert_eq!(runs_of(&trace, "fetch").len(), 1);
    assert!(last(&trace).attempts().is_empty());
}

const ROUTED: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="pay"/>
  <serviceTask id="pay" q:task="pay"><extensionElements>
    <q:retry maxAttempts="5" initialInterval="PT10S" backoffMultiplier="2" jitter="none"/></extensionElements></serviceTask>
  <boundaryEvent id="late" attachedToRef="pay"><timerEventDefinition><timeDuration>PT15S</timeDuration></timerEventDefinition></boundaryEvent>
  <sequenceFlow id="f1" sourceRef="pay" targetRef="e"/><endEvent id="e"/>
  <sequenceFlow id="f2" sourceRef="late" targetRef="manual"/><userTask id="manual"/>
  <sequenceFlow id="f3" sourceRef="manual" targetRef="e2"/><endEvent id="e2"/>"#;

#[test]
fn routed_timer_boundary_spans_attempts_and_cancels_the_park() {
    let def = model(ROUTED);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "HANDLER_FAILED"}]}}"#,
    );
    // attempt 1 at 0 fails → park to 10s; attempt 2 at 10s fails → park to 30s; the
    // boundary armed once at 0 for 15s fires inside the second backoff window.
    assert_eq!(runs_of(&trace, "pay"), vec![(0, 1), (10_000, 2)]);
    let boundary_arms: Vec<_> = arms(&trace)
        .into_iter()
        .filter(|a| a.2 == "b:late")
        .collect();
    assert_eq!(boundary_arms, vec![(0, 15_000, "b:late".to_owned())]);
    let fired = trace
        .steps
        .iter()
        .find(|s| matches!(&s.input, Input::TimerFired { name, .. } if name == "b:late"))
        .unwrap();
    assert_eq!(fired.at_ms, 15_000);
    assert!(fired
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveTimer { name, .. } if name == "r:pay")));
    // No attempt was in flight, so none is reported interrupted.
    assert!(!fired
        .effects
        .iter()
        .any(|e| matches!(e, Effect::AttemptFinished { .. })));
    let snap = Snapshot::decode(&fired.snapshot).unwrap();
    assert_eq!(snap.tokens(), ["manual"]);
    assert!(snap.attempts().is_empty() && snap.markers().is_empty());
    assert!(!snap.timers().contains_key("r:pay"));
    assert_eq!(trace.summary.stop, qflow_core::sim::Stop::Idle);
}

#[test]
fn stale_timers_change_no_bytes() {
    let def = model(ROUTED);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "HANDLER_FAILED"}]}}"#,
    );
    // The park armed at 10s (incarnation of `r:pay` then) is cancelled by the boundary.
    let cancelled = effects(&trace)
        .into_iter()
        .rev()
        .find_map(|(_, e)| match e {
            Effect::ArmTimer {
                name, incarnation, ..
            } if name == "r:pay" => Some(incarnation),
            _ => None,
        })
        .unwrap();
    let after = trace.steps.last().unwrap().snapshot.clone();
    for (name, incarnation) in [
        ("r:pay", cancelled),
        ("r:pay", 1),
        ("b:late", 1),
        ("c:nowhere", 9),
        ("~run", 0),
    ] {
        let out = step(
            &def,
            "sim-1",
            Snapshot::decode(&after).unwrap(),
            Input::TimerFired {
                name: name.parse().unwrap(),
                incarnation,
            },
            99_000,
        )
        .unwrap();
        assert_eq!(out.snapshot.encode(), after, "{name}#{incarnation}");
        assert!(matches!(out.effects.as_slice(), [Effect::Stale { .. }]));
    }
    // A re-armed name: the earlier incarnation of `r:pay` is stale while the park is live.
    let parked = &trace.steps[1];
    let live = Snapshot::decode(&parked.snapshot).unwrap().timers()["r:pay"];
    let out = step(
        &def,
        "sim-1",
        Snapshot::decode(&parked.snapshot).unwrap(),
        Input::TimerFired {
            name: "r:pay".parse().unwrap(),
            incarnation: live - 1,
        },
        5000,
    )
    .unwrap();
    assert_eq!(out.snapshot.encode(), parked.snapshot);
    // A late result for the dead attempt is stale too.
    let out = step(
        &def,
        "sim-1",
        Snapshot::decode(&parked.snapshot).unwrap(),
        Input::TaskCompleted {
            node: "pay".into(),
            attempt: Attempt::FIRST,
            outputs: Default::default(),
        },
        5000,
    )
    .unwrap();
    assert_eq!(out.snapshot.encode(), parked.snapshot);
    assert!(matches!(out.effects.as_slice(), [Effect::Stale { .. }]));
}

#[test]
fn parallel_branches_retry_independently() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
        <parallelGateway id="fork"/>
        <sequenceFlow id="f1" sourceRef="fork" targetRef="a"/><sequenceFlow id="f2" sourceRef="fork" targetRef="b"/>
        <serviceTask id="a" q:task="a"><extensionElements>{RETRY3}</extensionElements></serviceTask>
        <serviceTask id="b" q:task="b"><extensionElements>{RETRY3}</extensionElements></serviceTask>
        <sequenceFlow id="f3" sourceRef="a" targetRef="join"/><sequenceFlow id="f4" sourceRef="b" targetRef="join"/>
        <parallelGateway id="join"/><sequenceFlow id="f5" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"instance": "par-1", "tasks": {
            "a": [{"outcome": "fail", "code": "HANDLER_FAILED"}, {"outcome": "ok"}],
            "b": [{"outcome": "fail", "code": "HANDLER_FAILED"}, {"outcome": "fail", "code": "HANDLER_FAILED"}, {"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(
        runs_of(&trace, "a"),
        predicted_runs(&def, "par-1", "a", 0, 1)
    );
    assert_eq!(
        runs_of(&trace, "b"),
        predicted_runs(&def, "par-1", "b", 0, 2)
    );
    // While both are parked, each has its own counter, marker and park timer.
    let both = trace
        .steps
        .iter()
        .map(|s| Snapshot::decode(&s.snapshot).unwrap())
        .find(|s| s.markers().len() == 2)
        .expect("a moment with both branches parked");
    assert_eq!(both.attempt("a"), 2);
    assert_eq!(both.attempt("b"), 2);
    assert!(both.timers().contains_key("r:a") && both.timers().contains_key("r:b"));
}

#[test]
fn max_elapsed_bounds_the_time_since_the_first_failure() {
    let def = linear(&[(
        "pay",
        r#"<q:retry maxAttempts="10" initialInterval="PT10S" backoffMultiplier="2" jitter="none" maxElapsed="PT1M"/>"#,
    )]);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "HANDLER_FAILED"}]}}"#,
    );
    // Parks of 10, 20 s keep the next start within 60 s of the first failure (at 0);
    // the third would start at 70 s, past the bound.
    assert_eq!(
        runs_of(&trace, "pay"),
        vec![(0, 1), (10_000, 2), (30_000, 3)]
    );
    let snap = last(&trace);
    assert_eq!(
        snap.failure().unwrap().detail.as_deref(),
        Some("max_elapsed")
    );
    assert_eq!(snap.attempt("pay"), 3);
    assert_eq!(snap.first_failure_ms("pay"), Some(0));
}

#[test]
fn a_model_without_retry_writes_no_retry_key_even_when_tasks_fail() {
    let def = linear(&[("a", ""), ("b", r#"<q:timeout duration="PT1S"/>"#)]);
    for script in [
        r#"{"tasks": {"a": [{"outcome": "fail", "code": "HANDLER_FAILED"}]}}"#,
        r#"{"tasks": {"a": [{"outcome": "panic"}]}}"#,
        r#"{"tasks": {"b": [{"outcome": "hang"}]}}"#,
    ] {
        let trace = run_scenario(&def, script);
        for s in &trace.steps {
            let snap = Snapshot::decode(&s.snapshot).unwrap();
            assert!(
                snap.attempts().is_empty() && snap.markers().is_empty(),
                "{script}"
            );
            assert!(!snap.timers().keys().any(|k| k.starts_with("r:")));
        }
    }
}

#[test]
fn inspect_shows_the_burned_budget_of_a_failed_instance() {
    let def = linear(&[("pay", RETRY3)]);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "HANDLER_FAILED"}]}}"#,
    );
    let view = last(&trace).inspect();
    assert_eq!(
        view,
        serde_json::json!({
            "status": "failed",
            "failure": {"code": "HANDLER_FAILED", "node": "pay", "detail": "exhausted"},
            "frontier": ["pay"],
            "attempts": {"pay": 3},
        })
    );
    let parked = Snapshot::decode(&trace.steps[1].snapshot)
        .unwrap()
        .inspect();
    assert_eq!(
        parked["backoff_markers"],
        serde_json::json!({"pay": "failed"})
    );
    assert_eq!(parked["attempts"], serde_json::json!({"pay": 2}));
}
