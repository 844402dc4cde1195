//! Operator repairs as core inputs (SPEC O3, O4a): resume a FAILED instance, keeping or
//! resetting its budget; retry a parked task now. Preconditions are the core's: the
//! wrong state is stale residue and changes no byte.

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::{step, Budget, Effect, Input, Snapshot, Status, TimerKind};
use qflow_loader::model::Definition;

fn retrying(max: u32, interval: &str) -> Definition {
    model(&format!(
        r#"<startEvent id="start"/>
        <serviceTask id="pay" q:task="pay"><extensionElements>
          <q:retry maxAttempts="{max}" initialInterval="{interval}" maxInterval="PT2H" jitter="none"/>
        </extensionElements></serviceTask>
        <endEvent id="end"/>
        <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
        <sequenceFlow id="f1" sourceRef="pay" targetRef="end"/>"#
    ))
}

/// A FAILED instance after `max` failures of `pay`.
fn failed(def: &Definition) -> Snapshot {
    let trace = run_scenario(
        def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}]}}"#,
    );
    let snap = last(&trace);
    assert_eq!(snap.status(), Status::Failed);
    snap
}

#[test]
fn resume_is_refused_unless_the_instance_is_failed() {
    let def = retrying(2, "PT1S");
    let running = step(
        &def,
        "i",
        Snapshot::new(),
        Input::Start {
            variables: Default::default(),
            start: None,
        },
        0,
    )
    .unwrap()
    .snapshot;
    let bytes = running.encode();
    let out = step(
        &def,
        "i",
        running,
        Input::Resume {
            budget: Budget::Keep,
        },
        5,
    )
    .unwrap();
    assert_eq!(out.snapshot.encode(), bytes);
    match out.effects.as_slice() {
        [Effect::Stale { reason }] => assert!(reason.contains("not failed"), "{reason}"),
        other => panic!("expected one stale effect, got {other:?}"),
    }
}

#[test]
fn resume_keeps_or_resets_the_budget_and_always_moves_the_attempt_on() {
    let def = retrying(2, "PT1S");
    let snap = failed(&def);
    assert_eq!(snap.attempt("pay"), 2);
    for (budget, base) in [(Budget::Keep, 0), (Budget::Reset, 2)] {
        let out = step(&def, "i", snap.clone(), Input::Resume { budget }, 60_000).unwrap();
        let s = &out.snapshot;
        assert_eq!(s.status(), Status::Running, "{budget:?}");
        assert!(s.failure().is_none());
        assert_eq!(s.attempt("pay"), 3, "a new attempt, never a reused number");
        assert_eq!(s.budget_base("pay"), base, "{budget:?}");
        assert!(out
            .effects
            .contains(&Effect::ResolveIncident { node: "pay".into() }));
        let runs: Vec<u32> = out
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunTask { attempt, .. } => Some(attempt.get()),
                _ => None,
            })
            .collect();
        assert_eq!(runs, vec![3], "{budget:?}");
        // The next failure: kept budget is spent (FAILED again), a reset one parks with
        // the curve starting over (1 s after the failure, not 4 s).
        let fail = Input::TaskFailed {
            node: "pay".into(),
            attempt: s.attempt_in_progress("pay"),
            kind: Default::default(),
            code: "DOWN".into(),
            message: String::new(),
        };
        let next = step(&def, "i", out.snapshot, fail, 61_000).unwrap();
        match budget {
            Budget::Keep => assert_eq!(next.snapshot.status(), Status::Failed),
            Budget::Reset => {
                let park = next.effects.iter().find_map(|e| match e {
                    Effect::ArmTimer {
                        name, due_at_ms, ..
                    } if name.kind() == TimerKind::Retry => Some(*due_at_ms),
                    _ => None,
                });
                assert_eq!(park, Some(62_000));
            }
        }
    }
}

#[test]
fn resume_re_arms_what_failing_resolved_for_other_tokens() {
    // A user task with a timer boundary waits beside the task that fails.
    let def = common::approve_beside_pay();
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}]}}"#,
    );
    let snap = last(&trace);
    assert_eq!(snap.status(), Status::Failed);
    assert!(snap.timers().is_empty(), "failing resolved the boundary");
    let out = step(
        &def,
        "i",
        snap,
        Input::Resume {
            budget: Budget::Keep,
        },
        7_000,
    )
    .unwrap();
    let boundary = out.effects.iter().find_map(|e| match e {
        Effect::ArmTimer {
            name, due_at_ms, ..
        } if name == "b:late" => Some(*due_at_ms),
        _ => None,
    });
    assert_eq!(
        boundary,
        Some(7_000 + 3_600_000),
        "re-armed from the resume instant"
    );
    assert!(out.snapshot.timers().contains_key("b:late"));
}

#[test]
fn retry_now_runs_the_parked_attempt_and_leaves_the_counter() {
    let def = retrying(3, "PT1H");
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}, {"outcome": "hang"}]},
            "horizon_ms": 1000}"#,
    );
    let parked = last(&trace);
    assert_eq!(parked.marker("pay"), Some("failed"));
    assert_eq!(parked.attempt("pay"), 2);
    let out = step(
        &def,
        "i",
        parked.clone(),
        Input::RetryNow { node: None },
        500,
    )
    .unwrap();
    assert_eq!(out.snapshot.attempt("pay"), 2, "the counter is untouched");
    assert_eq!(out.snapshot.marker("pay"), None);
    assert!(!out.snapshot.timers().contains_key("r:pay"));
    assert!(out
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveTimer { name, .. } if name == "r:pay")));
    assert!(out
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunTask { attempt, .. } if attempt.get() == 2)));
    // Nothing parked any more: a second retry-now is stale.
    let again = step(&def, "i", out.snapshot, Input::RetryNow { node: None }, 600).unwrap();
    assert!(matches!(again.effects.as_slice(), [Effect::Stale { .. }]));
    // A node that is not a registered task: stale, with the reason.
    let wrong = step(
        &def,
        "i",
        parked,
        Input::RetryNow {
            node: Some("end".into()),
        },
        500,
    )
    .unwrap();
    match wrong.effects.as_slice() {
        [Effect::Stale { reason }] => assert!(reason.contains("`end`"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let _ = effects(&trace);
}

/// Re-adoption is free up to `READOPTIONS_MAX` times per attempt; past it the attempt is
/// a failed one with its own code (issue 8, defect 3). With a policy it parks and the
/// next attempt starts with a clean count.
#[test]
fn an_attempt_re_adopted_past_the_limit_fails_with_evidence() {
    use qflow_core::{codes, READOPTIONS_MAX};
    for (def, parks) in [
        (
            model(
                r#"<startEvent id="start"/>
            <serviceTask id="pay" q:task="pay"/>
            <endEvent id="end"/>
            <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
            <sequenceFlow id="f1" sourceRef="pay" targetRef="end"/>"#,
            ),
            false,
        ),
        (retrying(3, "PT1S"), true),
    ] {
        let start = Input::Start {
            variables: Default::default(),
            start: None,
        };
        let mut snap = step(&def, "i", Snapshot::new(), start, 0).unwrap().snapshot;
        for n in 1..=READOPTIONS_MAX {
            let out = step(&def, "i", snap, Input::Redrive, i64::from(n)).unwrap();
            assert!(out.effects.iter().any(|e| matches!(
                e,
                Effect::RunTask { attempt, .. } if attempt.get() == 1
            )));
            assert_eq!(out.snapshot.readoptions("pay"), n);
            snap = out.snapshot;
        }
        let out = step(&def, "i", snap, Input::Redrive, 99).unwrap();
        assert!(out.effects.iter().any(|e| matches!(
            e,
            Effect::AttemptFinished { code: Some(c), .. } if c == codes::READOPTION_LIMIT
        )));
        assert!(!out
            .effects
            .iter()
            .any(|e| matches!(e, Effect::RunTask { .. })));
        if parks {
            assert_eq!(out.snapshot.status(), Status::Running);
            assert_eq!(out.snapshot.marker("pay"), Some("failed"));
            // The park fires: attempt 2 runs with no re-adoption counted yet.
            let inc = out.snapshot.timers()["r:pay"];
            let fired = Input::TimerFired {
                name: "r:pay".parse().unwrap(),
                incarnation: inc,
            };
            let next = step(&def, "i", out.snapshot, fired, 5_000).unwrap();
            assert_eq!(next.snapshot.readoptions("pay"), 0);
            assert_eq!(next.snapshot.attempt("pay"), 2);
        } else {
            assert_eq!(out.snapshot.status(), Status::Failed);
            assert_eq!(
                out.snapshot.failure().unwrap().code,
                codes::READOPTION_LIMIT
            );
            assert_eq!(
                out.snapshot.readoptions("pay"),
                READOPTIONS_MAX,
                "the evidence stays"
            );
        }
    }
}

/// Migration (O2) in the core: validated against the target, stale with every reason
/// when it does not fit; applied, keys travel with the renamed node and a park timer is
/// re-armed under its new name at its old instant.
#[test]
fn migrate_renames_what_travels_and_refuses_what_does_not_fit() {
    use std::collections::BTreeMap;
    let v1 = retrying(3, "PT1H");
    let rename = |ext: &str| {
        model(&format!(
            r#"<startEvent id="start"/>
            <serviceTask id="charge" q:task="pay"><extensionElements>{ext}</extensionElements></serviceTask>
            <endEvent id="end"/>
            <sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>
            <sequenceFlow id="f1" sourceRef="charge" targetRef="end"/>"#
        ))
    };
    let with_retry = rename(
        r#"<q:retry maxAttempts="3" initialInterval="PT1H" maxInterval="PT2H" jitter="none"/>"#,
    );
    let without_retry = rename("");
    let mapping = BTreeMap::from([("pay".to_owned(), "charge".to_owned())]);
    let start = Input::Start {
        variables: Default::default(),
        start: None,
    };
    let running = step(&v1, "i", Snapshot::new(), start, 0).unwrap().snapshot;

    // In flight: refused.
    let input = Input::Migrate {
        mapping: mapping.clone(),
        timers: BTreeMap::new(),
        user_tasks: Vec::new(),
    };
    let out = step(&with_retry, "i", running.clone(), input, 5).unwrap();
    match out.effects.as_slice() {
        [Effect::Stale { reason }] => assert!(reason.contains("in flight"), "{reason}"),
        other => panic!("{other:?}"),
    }

    // Parked: the park row's due instant comes with the plan.
    let fail = Input::TaskFailed {
        node: "pay".into(),
        attempt: qflow_core::Attempt::FIRST,
        kind: Default::default(),
        code: "DOWN".into(),
        message: String::new(),
    };
    let parked = step(&v1, "i", running, fail, 10).unwrap().snapshot;
    let timers = BTreeMap::from([("r:pay".to_owned(), 3_600_010)]);
    let input = Input::Migrate {
        mapping: mapping.clone(),
        timers: timers.clone(),
        user_tasks: Vec::new(),
    };
    // A target whose task has no q:retry cannot hold the park: refused, bytes unchanged.
    let bytes = parked.encode();
    let out = step(&without_retry, "i", parked.clone(), input.clone(), 20).unwrap();
    assert_eq!(out.snapshot.encode(), bytes);
    match out.effects.as_slice() {
        [Effect::Stale { reason }] => assert!(reason.contains("`r:pay`"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let out = step(&with_retry, "i", parked, input, 20).unwrap();
    let s = &out.snapshot;
    assert_eq!(s.tokens(), ["charge"]);
    assert_eq!(s.attempt("charge"), 2);
    assert_eq!(s.marker("charge"), Some("failed"));
    assert!(s.timers().contains_key("r:charge") && !s.timers().contains_key("r:pay"));
    assert!(out
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveTimer { name, .. } if name == "r:pay")));
    assert!(out.effects.iter().any(|e| matches!(
        e,
        Effect::ArmTimer { name, due_at_ms: 3_600_010, .. } if name == "r:charge"
    )));
}

/// The `b:` timer firings of a run, as `(instant, name)`.
fn fired_timers(trace: &qflow_core::sim::Trace) -> Vec<(i64, String)> {
    trace
        .steps
        .iter()
        .filter_map(|s| match &s.input {
            Input::TimerFired { name, .. } if name.as_str().starts_with("b:") => {
                Some((s.at_ms, name.as_str().to_owned()))
            }
            _ => None,
        })
        .collect()
}

/// A resume does not arm again what had fired for good before the failure: a one-shot
/// non-interrupting timer event sub-process that fired stays fired, and a cycle goes on
/// counting its repetitions where it stood (before, both started over from the resume).
#[test]
fn a_resume_re_arms_neither_a_fired_one_shot_nor_a_cycle_from_scratch() {
    // `review` waits with an R3/PT10S reminder while `pay`, beside it, fails at 15 s; the
    // process-level nudge (PT5S, non-interrupting) fired at 5 s.
    let def = common::model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
        <parallelGateway id="split"/>
        <sequenceFlow id="f1" sourceRef="split" targetRef="review"/>
        <sequenceFlow id="f2" sourceRef="split" targetRef="pay"/>
        <userTask id="review"/>
        <boundaryEvent id="tick" attachedToRef="review" cancelActivity="false"><timerEventDefinition><timeCycle>R3/PT10S</timeCycle></timerEventDefinition></boundaryEvent>
        <sequenceFlow id="f3" sourceRef="tick" targetRef="t1"/><endEvent id="t1"/>
        <sequenceFlow id="f4" sourceRef="review" targetRef="e1"/><endEvent id="e1"/>
        <serviceTask id="pay" q:task="pay"/>
        <sequenceFlow id="f5" sourceRef="pay" targetRef="e2"/><endEvent id="e2"/>
        <subProcess id="nudge" triggeredByEvent="true">
          <startEvent id="ns" isInterrupting="false"><timerEventDefinition><timeDuration>PT5S</timeDuration></timerEventDefinition></startEvent>
          <sequenceFlow id="g0" sourceRef="ns" targetRef="ne"/><endEvent id="ne"/>
        </subProcess>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "DOWN", "after_ms": 15000}, {"outcome": "ok"}]},
            "events": [{"event": "resume", "at_ms": 40000},
                       {"event": "complete_user_task", "at_ms": 90000, "node": "review"}],
            "horizon_ms": 100000}"#,
    );
    let failed = trace
        .steps
        .iter()
        .map(|s| Snapshot::decode(&s.snapshot).unwrap())
        .find(|s| s.status() == Status::Failed)
        .expect("a FAILED step");
    // While FAILED the snapshot keeps what fired for good and how far the cycle got.
    let view = failed.inspect();
    assert_eq!(view["spent_timers"], serde_json::json!(["b:ns"]), "{view}");
    assert_eq!(
        view["cycle_fires"],
        serde_json::json!({"b:tick": 1}),
        "{view}"
    );
    // The nudge never fires again; the reminder makes its two remaining repetitions from
    // the resume on (50 s, 60 s), not three.
    assert_eq!(
        fired_timers(&trace),
        [
            (5000, "b:ns".to_owned()),
            (10_000, "b:tick".to_owned()),
            (50_000, "b:tick".to_owned()),
            (60_000, "b:tick".to_owned())
        ]
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert_eq!(end.inspect().get("spent_timers"), None);
}
