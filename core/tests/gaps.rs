//! Tests for the lines a mutation run found unguarded in the retry, timer and
//! re-adoption code (issue 8, "tests that would notice a bug"): each one fails when the
//! line it names is deleted.

mod common;

use common::{effects, encode_map, last, model, run_scenario, runs_of, top_level_map};
use qflow_core::{step, Effect, Input, Snapshot, Status};
use qflow_loader::model::Definition;

fn one_task(ext: &str) -> Definition {
    model(&format!(
        r#"<startEvent id="start"/>
        <serviceTask id="pay" q:task="pay"><extensionElements>{ext}</extensionElements></serviceTask>
        <endEvent id="end"/>
        <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
        <sequenceFlow id="f1" sourceRef="pay" targetRef="end"/>"#
    ))
}

/// `fail` resolves every live timer of the instance, not only the failed task's: a
/// FAILED instance must leave no timer row to fire into it.
#[test]
fn a_failed_instance_resolves_its_timers_elsewhere() {
    let def = common::approve_beside_pay();
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "X"}]}}"#,
    );
    let failing = trace.steps.last().expect("a step");
    assert!(failing.effects.iter().any(|e| matches!(
        e,
        Effect::ResolveTimer { name, .. } if name == "b:late"
    )));
    let snap = last(&trace);
    assert_eq!(snap.status(), Status::Failed);
    assert!(snap.timers().is_empty());
}

/// The next attempt may start exactly `maxElapsed` after the first failure; one later
/// it may not. Counted from the first failure, also when the instance starts late.
#[test]
fn max_elapsed_allows_the_boundary_itself_from_the_first_failure() {
    let def = one_task(
        r#"<q:retry maxAttempts="9" initialInterval="PT1S" backoffMultiplier="1"
                    jitter="none" maxElapsed="PT2S"/>"#,
    );
    for start in [0i64, 1_000_000] {
        let trace = run_scenario(
            &def,
            &format!(
                r#"{{"start_at_ms": {start}, "tasks": {{"pay": [
                    {{"outcome": "fail", "code": "X"}}]}}}}"#
            ),
        );
        // Failures at +0, +1000, +2000: the second park ends at +2000, exactly
        // maxElapsed after the first failure (allowed); the third would end at +3000.
        let runs: Vec<i64> = runs_of(&trace, "pay")
            .iter()
            .map(|(at, _)| at - start)
            .collect();
        assert_eq!(runs, vec![0, 1000, 2000], "start {start}");
        let snap = last(&trace);
        assert_eq!(snap.status(), Status::Failed);
        assert_eq!(
            snap.failure().unwrap().detail.as_deref(),
            Some("max_elapsed")
        );
    }
}

/// A failure that parks the task closes its `q:timeout` window: a backoff longer than
/// the timeout must not see the old window fire and count a phantom attempt.
#[test]
fn parking_closes_the_timeout_window() {
    let def = one_task(
        r#"<q:timeout duration="PT2S"/>
           <q:retry maxAttempts="3" initialInterval="PT10S" jitter="none"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "X", "after_ms": 500}, {"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "pay").len(), 2);
    let all = effects(&trace);
    let parked_at = all
        .iter()
        .position(|(_, e)| matches!(e, Effect::ArmTimer { name, .. } if name == "r:pay"))
        .expect("a park");
    assert!(all[..parked_at]
        .iter()
        .rev()
        .take_while(|(at, _)| *at == 500)
        .any(|(_, e)| matches!(e, Effect::ResolveTimer { name, .. } if name == "t:pay")));
    assert!(!all.iter().any(|(_, e)| matches!(
        e,
        Effect::AttemptFinished {
            outcome: qflow_core::AttemptOutcome::TimedOut,
            ..
        }
    )));
}

/// Re-adoption re-emits only attempts in flight — not a task in its backoff window —
/// and, after a retry, the attempt number the counter names.
#[test]
fn readoption_skips_a_parked_task_and_names_the_retried_attempt() {
    let def = model(
        r#"<startEvent id="start"/>
        <parallelGateway id="split"/>
        <serviceTask id="a" q:task="a"><extensionElements>
          <q:retry maxAttempts="3" initialInterval="PT10S" jitter="none"/>
        </extensionElements></serviceTask>
        <serviceTask id="b" q:task="b"/>
        <parallelGateway id="join"/>
        <endEvent id="end"/>
        <sequenceFlow id="f0" sourceRef="start" targetRef="split"/>
        <sequenceFlow id="f1" sourceRef="split" targetRef="a"/>
        <sequenceFlow id="f2" sourceRef="split" targetRef="b"/>
        <sequenceFlow id="f3" sourceRef="a" targetRef="join"/>
        <sequenceFlow id="f4" sourceRef="b" targetRef="join"/>
        <sequenceFlow id="f5" sourceRef="join" targetRef="end"/>"#,
    );
    let start = Input::Start {
        variables: Default::default(),
        start: None,
    };
    let s = step(&def, "i", Snapshot::new(), start, 0).unwrap().snapshot;
    let fail = Input::TaskFailed {
        node: "a".into(),
        attempt: qflow_core::Attempt::FIRST,
        kind: Default::default(),
        code: "X".into(),
        message: String::new(),
    };
    let parked = step(&def, "i", s, fail, 10).unwrap().snapshot;
    let runs = |out: &qflow_core::Step| -> Vec<(String, u32)> {
        out.effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunTask { node, attempt, .. } => Some((node.clone(), attempt.get())),
                _ => None,
            })
            .collect()
    };
    let re = step(&def, "i", parked.clone(), Input::Redrive, 20).unwrap();
    assert_eq!(
        runs(&re),
        vec![("b".to_owned(), 1)],
        "a is parked, not in flight"
    );
    let inc = parked.timers()["r:a"];
    let fired = Input::TimerFired {
        name: "r:a".parse().unwrap(),
        incarnation: inc,
    };
    let retried = step(&def, "i", re.snapshot, fired, 10_010).unwrap();
    assert_eq!(runs(&retried), vec![("a".to_owned(), 2)]);
    let re = step(&def, "i", retried.snapshot, Input::Redrive, 10_020).unwrap();
    assert_eq!(runs(&re), vec![("a".to_owned(), 2), ("b".to_owned(), 1)]);
}

/// A cycle timer's fire count goes with the timer: resolved early (its task completed),
/// nothing of it stays in the snapshot, so a later entry starts counting afresh.
#[test]
fn a_cycle_resolved_early_leaves_no_count_behind() {
    let def = model(
        r#"<startEvent id="start"/>
        <userTask id="sign"/>
        <boundaryEvent id="chase" attachedToRef="sign" cancelActivity="false">
          <timerEventDefinition><timeCycle>R3/PT1S</timeCycle></timerEventDefinition>
        </boundaryEvent>
        <endEvent id="signed"/>
        <endEvent id="chased"/>
        <sequenceFlow id="f0" sourceRef="start" targetRef="sign"/>
        <sequenceFlow id="f1" sourceRef="sign" targetRef="signed"/>
        <sequenceFlow id="f2" sourceRef="chase" targetRef="chased"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 2500, "node": "sign"}]}"#,
    );
    // Two fires (1 s, 2 s), then completion at 2.5 s resolves the third.
    let fires = trace
        .steps
        .iter()
        .filter(|s| matches!(&s.input, Input::TimerFired { name, .. } if name == "b:chase"))
        .count();
    assert_eq!(fires, 2);
    let before_end = Snapshot::decode(&trace.steps[trace.steps.len() - 2].snapshot).unwrap();
    assert_eq!(before_end.inspect()["cycle_fires"]["b:chase"], 2);
    let snap = last(&trace);
    assert_eq!(snap.status(), Status::Completed);
    assert!(snap.inspect().get("cycle_fires").is_none());
}

/// `any_attempt_in_flight` says what `attempts_in_flight` lists, without the list: true
/// while a registered task's attempt runs, false once it is parked in a backoff window,
/// and false once the instance has moved on.
#[test]
fn any_attempt_in_flight_agrees_with_the_list() {
    let def = one_task(r#"<q:retry maxAttempts="3" initialInterval="PT1S" jitter="none"/>"#);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "X"}, {"outcome": "ok"}]}}"#,
    );
    let mut seen = Vec::new();
    for step in &trace.steps {
        let snap = Snapshot::decode(&step.snapshot).unwrap();
        let any = qflow_core::any_attempt_in_flight(&def, &snap);
        assert_eq!(any, !qflow_core::attempts_in_flight(&def, &snap).is_empty());
        seen.push(any);
    }
    // Start (attempt 1 runs), failure (parked), the backoff fires (attempt 2 runs),
    // completion (ended).
    assert_eq!(seen, vec![true, false, true, false]);
}

/// A budget base larger than the attempt in progress (a hand-edited or damaged
/// snapshot) counts the attempt as the first, neither zero nor an underflow: with one
/// attempt allowed, the failure exhausts the policy.
#[test]
fn a_budget_base_beyond_the_attempt_counts_one_attempt() {
    let def = one_task(r#"<q:retry maxAttempts="1" initialInterval="PT1S" jitter="none"/>"#);
    let started = step(
        &def,
        "i-1",
        Snapshot::new(),
        Input::Start {
            variables: Default::default(),
            start: None,
        },
        0,
    )
    .unwrap()
    .snapshot;
    // `b/pay` = 5 beside attempt 1: what the tolerant decoder reads from such bytes.
    let mut view = top_level_map(&started);
    view.push(("b/pay".to_owned(), rmpv::Value::from(5u64)));
    let tampered = Snapshot::decode(&encode_map(&view)).unwrap();
    assert_eq!(tampered.budget_base("pay"), 5);
    let out = step(
        &def,
        "i-1",
        tampered,
        Input::TaskFailed {
            node: "pay".into(),
            attempt: qflow_core::Attempt::FIRST,
            kind: Default::default(),
            code: "X".into(),
            message: String::new(),
        },
        10,
    )
    .unwrap();
    assert_eq!(out.snapshot.status(), Status::Failed);
    assert_eq!(
        out.snapshot.failure().unwrap().detail.as_deref(),
        Some("exhausted")
    );
}

/// A step that fails part-way leaves no timer row behind: the timer boundary its first
/// branch armed is taken back in the same step (stores apply resolves before arms, so a
/// resolve beside the arm would have left the armed row to fire stale later).
#[test]
fn a_step_failing_part_way_takes_back_the_timers_it_armed() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
        <parallelGateway id="split"/>
        <sequenceFlow id="f1" sourceRef="split" targetRef="review"/>
        <sequenceFlow id="f2" sourceRef="split" targetRef="route"/>
        <userTask id="review"/>
        <boundaryEvent id="late" attachedToRef="review"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></boundaryEvent>
        <sequenceFlow id="f3" sourceRef="late" targetRef="e2"/><endEvent id="e2"/>
        <sequenceFlow id="f4" sourceRef="review" targetRef="e"/><endEvent id="e"/>
        <exclusiveGateway id="route"/>
        <sequenceFlow id="f5" sourceRef="route" targetRef="e3"><conditionExpression>missing.field == 1</conditionExpression></sequenceFlow>
        <endEvent id="e3"/>"#,
    );
    let out = step(
        &def,
        "g-1",
        Snapshot::new(),
        Input::Start {
            variables: Default::default(),
            start: None,
        },
        0,
    )
    .unwrap();
    assert_eq!(out.snapshot.status(), Status::Failed);
    assert!(out.snapshot.timers().is_empty());
    let timer_effects: Vec<&Effect> = out
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::ArmTimer { .. } | Effect::ResolveTimer { .. }))
        .collect();
    assert!(timer_effects.is_empty(), "{timer_effects:?}");
}

/// An arm over a live timer that the same step takes back resolves the row it replaced.
#[test]
fn taking_back_a_rearm_resolves_the_row_it_replaced() {
    // A non-interrupting cycle boundary re-arms `b:tick` when it fires; its path then
    // fails the instance in the same step, which takes the re-arm back: the row of the
    // fired incarnation is resolved (by the firing) and no new row is left.
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="review"/>
        <userTask id="review"/>
        <boundaryEvent id="tick" attachedToRef="review" cancelActivity="false"><timerEventDefinition><timeCycle>R5/PT1M</timeCycle></timerEventDefinition></boundaryEvent>
        <sequenceFlow id="f1" sourceRef="tick" targetRef="route"/>
        <exclusiveGateway id="route"/>
        <sequenceFlow id="f2" sourceRef="route" targetRef="e2"><conditionExpression>missing.field == 1</conditionExpression></sequenceFlow>
        <endEvent id="e2"/>
        <sequenceFlow id="f3" sourceRef="review" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, r#"{"horizon_ms": 120000}"#);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Failed);
    let failing = trace.steps.last().unwrap();
    let Input::TimerFired { incarnation, .. } = &failing.input else {
        panic!(
            "the cycle's firing failed the instance: {:?}",
            failing.input
        );
    };
    let timers: Vec<(bool, u32)> = failing
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::ArmTimer { incarnation, .. } => Some((true, *incarnation)),
            Effect::ResolveTimer { incarnation, .. } => Some((false, *incarnation)),
            _ => None,
        })
        .collect();
    assert_eq!(timers, [(false, *incarnation)], "{:?}", failing.effects);
}
