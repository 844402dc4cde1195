//! The engine's public surface beyond scenarios: handler calls, misuse errors, and the
//! snapshot size budget at a wait state.

mod common;

use common::build::linear_def;
use qflow_core::handler::{
    call_input, CallEnded, HANDLER_MISSING, HANDLER_PANICKED, HANDLER_TIMEOUT,
};
use qflow_core::{
    run_handler, step, Attempt, Effect, Error, FailureKind, Handlers, Input, Snapshot, TaskContext,
    TaskOutcome,
};
use qflow_loader::model::Variables;

fn ctx<'a>(inputs: &'a Variables, handler: &'a str) -> TaskContext<'a> {
    TaskContext {
        instance_id: "i-1",
        node: "pay",
        handler,
        attempt: Attempt::new(2).unwrap(),
        inputs,
    }
}

#[test]
fn the_idempotency_key_names_instance_node_and_attempt() {
    let inputs = Variables::new();
    let c = ctx(&inputs, "pay");
    assert_eq!(c.idempotency_key(), "i-1/pay/2");
    let retry = TaskContext {
        attempt: c.attempt.next(),
        ..c
    };
    assert_ne!(retry.idempotency_key(), c.idempotency_key());
}

#[test]
fn a_panicking_handler_becomes_a_failed_attempt() {
    let inputs = Variables::new();
    let panics = |_: &TaskContext<'_>| -> TaskOutcome { panic!("card reader on fire") };
    let input = run_handler(&panics, &ctx(&inputs, "pay"));
    match input {
        Input::TaskFailed {
            node,
            attempt,
            kind,
            code,
            message,
        } => {
            assert_eq!((node.as_str(), attempt.get()), ("pay", 2));
            assert_eq!(kind, FailureKind::Panicked);
            assert_eq!(code, HANDLER_PANICKED);
            assert!(message.contains("card reader on fire"), "{message}");
        }
        other => panic!("expected TaskFailed, got {other:?}"),
    }
}

#[test]
fn handler_outcomes_map_onto_inputs_and_a_missing_handler_is_a_failure() {
    let inputs = Variables::from([("x".to_owned(), 1.into())]);
    let handlers = Handlers::new()
        .with("ok", |c: &TaskContext<'_>| {
            TaskOutcome::Ok(c.inputs.clone())
        })
        .with("err", |_: &TaskContext<'_>| TaskOutcome::BpmnError {
            code: "NO".into(),
            message: "m".into(),
        });
    assert_eq!(handlers.names().collect::<Vec<_>>(), vec!["err", "ok"]);
    assert_eq!(
        handlers.run(&ctx(&inputs, "ok")),
        Input::TaskCompleted {
            node: "pay".into(),
            attempt: Attempt::new(2).unwrap(),
            outputs: inputs.clone()
        }
    );
    assert!(matches!(
        handlers.run(&ctx(&inputs, "err")),
        Input::TaskBpmnError { code, .. } if code == "NO"
    ));
    assert!(matches!(
        handlers.run(&ctx(&inputs, "nobody")),
        Input::TaskFailed { code, kind: FailureKind::Failed, .. } if code == HANDLER_MISSING
    ));
}

/// Every way a call can end maps to its input in one place, with the kind typed there:
/// a host's own code that looks like a shell code is still a plain failure.
#[test]
fn every_end_of_a_call_maps_to_one_typed_input() {
    let inputs = Variables::new();
    let c = ctx(&inputs, "pay");
    let kind_and_code = |ended| match call_input(&c, ended) {
        Input::TaskFailed { kind, code, .. } => (kind, code),
        other => panic!("expected TaskFailed, got {other:?}"),
    };
    assert_eq!(
        kind_and_code(CallEnded::TimedOut { limit_ms: 5 }),
        (FailureKind::TimedOut, HANDLER_TIMEOUT.to_owned())
    );
    assert_eq!(
        kind_and_code(CallEnded::Panicked(None)),
        (FailureKind::Panicked, HANDLER_PANICKED.to_owned())
    );
    assert_eq!(
        kind_and_code(CallEnded::Missing),
        (FailureKind::Failed, HANDLER_MISSING.to_owned())
    );
    let lookalike = TaskOutcome::Fail {
        code: HANDLER_PANICKED.into(),
        message: "a host's own code".into(),
    };
    assert_eq!(
        kind_and_code(CallEnded::Returned(lookalike)),
        (FailureKind::Failed, HANDLER_PANICKED.to_owned())
    );
    // The kind is written out only when it is not the plain default.
    let timed_out = call_input(&c, CallEnded::TimedOut { limit_ms: 5 });
    let json = serde_json::to_value(&timed_out).unwrap();
    assert_eq!(json["kind"], "timed_out");
    let failed = call_input(&c, CallEnded::Missing);
    assert!(serde_json::to_value(&failed).unwrap().get("kind").is_none());
    let back: Input = serde_json::from_value(json).unwrap();
    assert_eq!(back, timed_out);
}

#[test]
fn misuse_is_an_error_and_terminal_instances_ignore_inputs() {
    let def = linear_def(1, None);
    let start = || Input::Start {
        variables: Variables::new(),
        start: None,
    };
    let cancel_new = step(&def, "i", Snapshot::new(), Input::Cancel, 0);
    assert_eq!(cancel_new, Err(Error::NotStarted));
    let started = step(&def, "i", Snapshot::new(), start(), 0).unwrap();
    assert_eq!(
        step(&def, "i", started.snapshot.clone(), start(), 0),
        Err(Error::AlreadyStarted)
    );
    let cancelled = step(&def, "i", started.snapshot, Input::Cancel, 5).unwrap();
    assert!(cancelled.effects.contains(&Effect::Cancelled));
    // The in-flight attempt is reported interrupted.
    assert!(cancelled.effects.iter().any(|e| matches!(
        e,
        Effect::AttemptFinished {
            outcome: qflow_core::AttemptOutcome::Interrupted,
            ..
        }
    )));
    let bytes = cancelled.snapshot.encode();
    let late = step(
        &def,
        "i",
        cancelled.snapshot,
        Input::TaskCompleted {
            node: "t1".into(),
            attempt: Attempt::FIRST,
            outputs: Variables::new(),
        },
        9,
    )
    .unwrap();
    assert_eq!(late.snapshot.encode(), bytes);
    assert!(matches!(late.effects.as_slice(), [Effect::Stale { .. }]));
}

#[test]
fn a_waiting_single_token_instance_with_a_few_small_variables_fits_128_bytes() {
    let def = linear_def(10, None);
    let vars = Variables::from([
        ("amount".to_owned(), 250.into()),
        ("currency".to_owned(), "EUR".into()),
        ("approved".to_owned(), true.into()),
        ("customer".to_owned(), "c-1042".into()),
    ]);
    let out = step(
        &def,
        "i",
        Snapshot::new(),
        Input::Start {
            variables: vars,
            start: None,
        },
        0,
    )
    .unwrap();
    let bytes = out.snapshot.encode();
    assert!(bytes.len() <= 128, "{} bytes", bytes.len());
    assert_eq!(out.snapshot.tokens(), ["t1"]);
}

#[test]
fn bad_scenarios_are_refused_naming_the_field() {
    let def = linear_def(1, None);
    let unknown_field = serde_json::from_str::<qflow_core::sim::Scenario>(r#"{"frob": 1}"#);
    assert!(unknown_field.unwrap_err().to_string().contains("frob"));
    for (json, field) in [
        (r#"{"tasks": {"nope": []}}"#, "tasks.nope"),
        (r#"{"start_at_ms": 10, "horizon_ms": 5}"#, "horizon_ms"),
        (r#"{"max_steps": 0}"#, "max_steps"),
        (
            r#"{"events": [{"event": "complete_user_task", "at_ms": 1, "node": "t1"}]}"#,
            "events[0].node",
        ),
    ] {
        let scenario: qflow_core::sim::Scenario = serde_json::from_str(json).unwrap();
        match qflow_core::sim::run(&def, &scenario) {
            Err(Error::Scenario(msg)) => assert!(msg.starts_with(field), "{msg}"),
            other => panic!("{json}: expected a scenario error, got {other:?}"),
        }
    }
}
