//! Whatever the engine writes, it can read (SPEC E2, issue 8 defect 1): values are
//! bounded where they enter, and a property test drives arbitrary nesting through every
//! entry point and decodes what was written.

mod common;

use common::{linear, run_scenario};
use proptest::prelude::*;
use qflow_core::limits::{INPUT_BYTES_MAX, VALUE_DEPTH_MAX};
use qflow_core::sim::Scenario;
use qflow_core::{codes, step, Attempt, Effect, Error, Input, Snapshot, Status};
use qflow_loader::model::Variables;
use serde_json::Value;

fn nested(depth: usize) -> Value {
    let mut v = Value::from(1);
    for _ in 1..depth {
        v = Value::Array(vec![v]);
    }
    v
}

fn vars(v: Value) -> Variables {
    Variables::from([("x".to_owned(), v)])
}

fn start(variables: Variables) -> Input {
    Input::Start {
        variables,
        start: None,
    }
}

#[test]
fn start_variables_nested_past_the_bound_are_refused_and_within_it_round_trip() {
    let def = linear(&[("pay", "")]);
    // 64 levels: encoded by the old engine, then unreadable by its own decoder.
    let refused = step(&def, "i", Snapshot::new(), start(vars(nested(64))), 0);
    match refused {
        Err(Error::VariablesRefused(why)) => assert!(why.contains("`x[0]"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let ok = step(
        &def,
        "i",
        Snapshot::new(),
        start(vars(nested(VALUE_DEPTH_MAX))),
        0,
    )
    .unwrap();
    let bytes = ok.snapshot.encode();
    let back = Snapshot::decode(&bytes).expect("what is written decodes");
    assert_eq!(back.variables(), ok.snapshot.variables());
}

#[test]
fn handler_outputs_past_the_bound_fail_the_attempt_with_a_code() {
    let def = linear(&[("pay", "")]);
    let started = step(&def, "i", Snapshot::new(), start(Variables::new()), 0).unwrap();
    let done = Input::TaskCompleted {
        node: "pay".into(),
        attempt: Attempt::FIRST,
        outputs: vars(nested(64)),
    };
    let out = step(&def, "i", started.snapshot, done, 5).unwrap();
    assert_eq!(out.snapshot.status(), Status::Failed);
    assert_eq!(out.snapshot.failure().unwrap().code, codes::OUTPUTS_REFUSED);
    assert!(out.effects.iter().any(|e| matches!(
        e,
        Effect::AttemptFinished { code: Some(c), .. } if c == codes::OUTPUTS_REFUSED
    )));
    Snapshot::decode(&out.snapshot.encode()).expect("what is written decodes");
}

/// A scripted handler's outputs are a result, not an input the step refuses: the reader
/// takes them over the bound (a handler can return such a value), and the engine fails
/// the attempt for them as it does for a real handler.
#[test]
fn a_scenario_with_deep_outputs_ends_failed_not_unreadable() {
    let def = linear(&[("pay", "")]);
    let deep = serde_json::to_string(&nested(64)).unwrap();
    let trace = run_scenario(
        &def,
        &format!(r#"{{"tasks": {{"pay": [{{"outcome": "ok", "outputs": {{"x": {deep}}}}}]}}}}"#),
    );
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some(codes::OUTPUTS_REFUSED)
    );
}

/// `depth` levels of arrays around a 1, as JSON text.
fn nested_json(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth - 1), "]".repeat(depth - 1))
}

/// Issue 27, point 3: a scenario whose variables the step would refuse (a run stopped by
/// `Error::VariablesRefused`, exit status 2 from `qflow simulate`) is refused by the
/// scenario reader instead, wherever the scenario carries them; one level less is read
/// and runs. The JSON paths are asserted where a path-tracking reader is used
/// (`cli/tests/simulate.rs`).
#[test]
fn the_scenario_reader_refuses_variables_the_step_would_refuse() {
    let places = |v: &str| {
        [
            format!(r#"{{"variables": {{"x": {v}}}}}"#),
            format!(
                r#"{{"events": [{{"event": "complete_user_task", "at_ms": 1, "node": "approve", "variables": {{"x": {v}}}}}]}}"#
            ),
            format!(
                r#"{{"events": [{{"event": "message", "at_ms": 1, "name": "m", "variables": {{"x": {v}}}}}]}}"#
            ),
            format!(
                r#"{{"events": [{{"event": "signal", "at_ms": 1, "name": "s", "variables": {{"x": {v}}}}}]}}"#
            ),
            format!(
                r#"{{"events": [{{"event": "user_task_bpmn_error", "at_ms": 1, "node": "approve", "code": "E", "variables": {{"x": {v}}}}}]}}"#
            ),
            format!(
                r#"{{"events": [{{"event": "escalate_user_task", "at_ms": 1, "node": "approve", "code": "E", "variables": {{"x": {v}}}}}]}}"#
            ),
            format!(r#"{{"channels": {{"call": [{{"answer": "ok", "outputs": {{"x": {v}}}}}]}}}}"#),
            format!(
                r#"{{"events": [{{"event": "pull", "at_ms": 1, "input": {{"type": "pull_completed", "node": "fetch", "attempt": 1, "worker": "w", "variables": {{"x": {v}}}}}}}]}}"#
            ),
            format!(
                r#"{{"events": [{{"event": "channel", "at_ms": 1, "input": {{"type": "channel_answered", "call": 1, "attempt": 1, "variables": {{"x": {v}}}}}}}]}}"#
            ),
        ]
    };
    let deep = nested_json(VALUE_DEPTH_MAX + 1);
    for json in places(&deep) {
        let err = serde_json::from_str::<Scenario>(&json)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{} levels", VALUE_DEPTH_MAX)),
            "{json}: {err}"
        );
    }
    for json in places(&nested_json(VALUE_DEPTH_MAX)) {
        serde_json::from_str::<Scenario>(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
    }
    // Deeper than the JSON reader's own recursion limit: still the bound's message.
    let abyss = format!(r#"{{"variables": {{"x": {}}}}}"#, nested_json(200));
    let err = serde_json::from_str::<Scenario>(&abyss)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nested 33 levels deep"), "{err}");
    // Within the bound the run goes through the step: started, not refused.
    let def = linear(&[("pay", "")]);
    let ok = format!(
        r#"{{"variables": {{"x": {}}}}}"#,
        nested_json(VALUE_DEPTH_MAX)
    );
    let trace = run_scenario(&def, &ok);
    assert_eq!(trace.summary.status, "completed");
}

/// The size bound of one input (`INPUT_BYTES_MAX`, counted as `check_variables` counts)
/// is the reader's too, for the object that is one input.
#[test]
fn the_scenario_reader_refuses_an_input_over_the_size_bound() {
    // Each number counts 8 bytes: a file far under the bound makes an input over it.
    let items = INPUT_BYTES_MAX / 8 + 1;
    let many = format!("[{}1]", "1,".repeat(items));
    let err = serde_json::from_str::<Scenario>(&format!(r#"{{"variables": {{"x": {many}}}}}"#))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("more than {INPUT_BYTES_MAX} bytes")),
        "{err}"
    );
    let event = format!(
        r#"{{"events": [{{"event": "message", "at_ms": 1, "name": "m", "variables": {{"x": {many}}}}}]}}"#
    );
    let err = serde_json::from_str::<Scenario>(&event)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("more than {INPUT_BYTES_MAX} bytes")),
        "{err}"
    );
    // Half of it in each of two inputs is within the bound for each.
    let half = format!("[{}1]", "1,".repeat(items / 2));
    let two = format!(
        r#"{{"variables": {{"x": {half}}}, "events": [{{"event": "message", "at_ms": 1, "name": "m", "variables": {{"x": {half}}}}}]}}"#
    );
    serde_json::from_str::<Scenario>(&two).expect("each input is within the bound");
}

/// Any JSON value up to 48 levels deep, so both sides of the bound are generated.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::from),
    ];
    leaf.prop_recursive(48, 256, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value of exactly `depth` levels ending in `leaf`, to reach deep values that
/// `prop_recursive` rarely builds.
fn chain(depth: usize, leaf: Value) -> Value {
    let mut v = leaf;
    for i in 1..depth {
        v = if i % 2 == 0 {
            Value::Array(vec![v])
        } else {
            Value::Object([("k".to_owned(), v)].into_iter().collect())
        };
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// Write ⇒ read: through the start, a handler's outputs and a user-task completion,
    /// every snapshot the core writes decodes to the same state — or the value is
    /// refused before anything is written.
    #[test]
    fn whatever_is_written_can_be_read(v in value(), depth in 1usize..80, leaf in value()) {
        let def = common::model(r#"<startEvent id="start"/>
            <serviceTask id="pay" q:task="pay"/>
            <userTask id="approve"/>
            <endEvent id="end"/>
            <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
            <sequenceFlow id="f1" sourceRef="pay" targetRef="approve"/>
            <sequenceFlow id="f2" sourceRef="approve" targetRef="end"/>"#);
        for candidate in [v, chain(depth, leaf)] {
            let mut snap = Snapshot::new();
            let inputs = [
                start(vars(candidate.clone())),
                Input::TaskCompleted {
                    node: "pay".into(),
                    attempt: Attempt::FIRST,
                    outputs: vars(candidate.clone()),
                },
                Input::UserTaskCompleted { node: "approve".into(), variables: vars(candidate.clone()), assignee: None },
            ];
            for input in inputs {
                let before = snap.encode();
                match step(&def, "i", snap.clone(), input, 0) {
                    Ok(out) => {
                        let bytes = out.snapshot.encode();
                        let back = Snapshot::decode(&bytes);
                        prop_assert!(back.is_ok(), "written but unreadable: {back:?}");
                        prop_assert_eq!(back.unwrap().encode(), bytes);
                        snap = out.snapshot;
                    }
                    Err(Error::VariablesRefused(_)) => {
                        // Refused: the caller keeps the old state; nothing was written.
                        prop_assert_eq!(snap.encode(), before);
                        if snap.status() == Status::New {
                            snap = step(&def, "i", snap, start(Variables::new()), 0).unwrap().snapshot;
                        }
                    }
                    Err(e) => prop_assert!(false, "unexpected error {e}"),
                }
                if snap.status().is_terminal() {
                    break;
                }
            }
        }
    }
}
