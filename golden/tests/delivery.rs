//! Scripted delivery failures (`delivery_fails`, `delivery_curves`; docs/simulate.md,
//! "Channel answers"): the parser's refusals name the field's path, and a run shows the
//! failed tries at the instants the channel's delivery curve — the dispatcher's own
//! arithmetic, `qflow_core::delivery` — gives.

use qflow_core::delivery::{AfterFailure, DeliveryCurve};
use qflow_core::sim::{DeliveryTry, Trace};
use qflow_core::{Effect, Input};
use qflow_golden::scenario;
use serde_json::{json, Value};

/// A channel call with three attempts 5 s apart and a 10 s timeout per attempt.
const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <process id="checkout" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="charge"/>
    <serviceTask id="charge" q:channel="payments">
      <extensionElements>
        <q:retry maxAttempts="3" initialInterval="PT5S" jitter="none"/>
        <q:timeout duration="PT10S"/>
      </extensionElements>
    </serviceTask>
    <sequenceFlow id="f2" sourceRef="charge" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>"#;

fn definition() -> qflow_core::Definition {
    qflow_golden::load_model(MODEL).expect("the model loads")
}

/// Parses `scenario` against the model; `Err`: every problem as `path: message`.
fn parse(scenario: Value) -> Result<scenario::Scenario, Vec<String>> {
    scenario::parse(&scenario.to_string(), &definition()).map_err(|es| {
        es.iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    })
}

/// Asserts the scenario is refused with exactly one problem at `path` whose message
/// contains `says`.
fn check_refused(scenario: Value, path: &str, says: &str) {
    check_refused_text(&scenario.to_string(), path, says);
}

/// [`check_refused`] for a scenario's text (`json!` sorts the keys; this keeps the order
/// written).
fn check_refused_text(text: &str, path: &str, says: &str) {
    let problems = scenario::parse(text, &definition()).expect_err(text);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, path, "{problems:?}");
    let message = &problems[0].message;
    assert!(message.contains(says), "{path}: `{message}` lacks `{says}`");
}

fn run(scenario: Value) -> Trace {
    let parsed = parse(scenario).expect("the scenario parses");
    qflow_golden::simulate(&definition(), &parsed).expect("the run completes")
}

/// Every failed try of the run, with the instant of the step it is shown on.
fn tries(trace: &Trace) -> Vec<(i64, DeliveryTry)> {
    trace
        .steps
        .iter()
        .flat_map(|s| s.deliveries.iter().map(|d| (s.at_ms, d.clone())))
        .collect()
}

fn ok(delivery_fails: u32, after_ms: u64) -> Value {
    json!({ "answer": "ok", "outputs": { "receipt": "r" }, "after_ms": after_ms,
            "delivery_fails": delivery_fails })
}

#[test]
fn a_bad_delivery_field_is_refused_with_its_path() {
    let curve = |c: Value| json!({ "delivery_curves": { "payments": c } });
    check_refused(
        curve(json!({ "ceiling": 0 })),
        "delivery_curves.payments.ceiling",
        "must be at least 1",
    );
    check_refused(
        curve(json!({ "initial_ms": 0 })),
        "delivery_curves.payments.initial_ms",
        "must be at least 1",
    );
    check_refused(
        curve(json!({ "multiplier_milli": 999 })),
        "delivery_curves.payments.multiplier_milli",
        "at least 1000",
    );
    check_refused(
        curve(json!({ "initial_ms": 5000, "max_ms": 4000 })),
        "delivery_curves.payments.max_ms",
        "4000 is below initial_ms (5000)",
    );
    check_refused(
        curve(json!({ "celing": 3 })),
        "delivery_curves.payments.celing",
        "unknown field `celing`, expected one of `initial_ms`, `multiplier_milli`, `max_ms`, `ceiling`",
    );
    check_refused(
        curve(json!({ "ceiling": "3" })),
        "delivery_curves.payments.ceiling",
        "invalid type: string \"3\"",
    );
    check_refused(
        curve(json!({ "max_ms": -1 })),
        "delivery_curves.payments.max_ms",
        "invalid value: integer `-1`",
    );
    check_refused(
        curve(json!([500, 2000])),
        "delivery_curves.payments",
        "expected a delivery curve object",
    );
    check_refused(
        json!({ "delivery_curves": { "paymnts": {} } }),
        "delivery_curves.paymnts",
        "no channel-call task of process `checkout` names the channel `paymnts`",
    );
    let answer = |a: Value| json!({ "channels": { "charge": [ok(0, 0), a] } });
    check_refused(
        answer(json!({ "answer": "ok", "delivery_fails": -2 })),
        "channels.charge[1].delivery_fails",
        "invalid value: integer `-2`",
    );
    check_refused(
        answer(json!({ "answer": "ok", "delivery_fails": 1001 })),
        "channels.charge[1].delivery_fails",
        "1001 is over the limit of 1000 failed tries",
    );
    check_refused(
        answer(json!({ "answer": "poison", "delivery_fails": 2 })),
        "channels.charge[1].delivery_fails",
        "answer `poison` takes `message`, `after_ms` or `wake`",
    );
    check_refused_text(
        r#"{"channels": {"charge": [{"delivery_fails": 2, "answer": "poison"}]}}"#,
        "channels.charge[0].answer",
        "answer `poison` does not take the field `delivery_fails` given before it",
    );
    check_refused(
        answer(json!({ "answer": "never", "after_ms": 2 })),
        "channels.charge[1].answer",
        "answer `never` does not take the field `after_ms` given before it: it takes \
         `delivery_fails`",
    );
}

#[test]
fn a_duplicate_channel_curve_is_refused_at_its_key() {
    let text = r#"{"delivery_curves": {"payments": {}, "payments": {"ceiling": 2}}}"#;
    let problems = scenario::parse(text, &definition()).unwrap_err();
    assert_eq!(problems[0].path, "delivery_curves.payments", "{problems:?}");
    assert!(
        problems[0].message.contains("duplicate key `payments`"),
        "{problems:?}"
    );
    let text = r#"{"delivery_curves": {"payments": {"ceiling": 2, "ceiling": 3}}}"#;
    let problems = scenario::parse(text, &definition()).unwrap_err();
    assert_eq!(
        problems[0].path, "delivery_curves.payments.ceiling",
        "{problems:?}"
    );
    assert!(
        problems[0].message.contains("duplicate field `ceiling`"),
        "{problems:?}"
    );
}

#[test]
fn every_model_level_delivery_problem_is_reported_at_once() {
    let problems = parse(json!({
        "delivery_curves": { "payments": { "ceiling": 0 }, "other": {} },
        "channels": { "charge": [ok(5000, 0)] }
    }))
    .unwrap_err();
    assert_eq!(
        problems,
        [
            "channels.charge[0].delivery_fails: 5000 is over the limit of 1000 failed tries",
            "delivery_curves.other: no channel-call task of process `checkout` names the \
             channel `other` (q:channel=\"other\")",
            "delivery_curves.payments.ceiling: must be at least 1 (or left out: try for ever)",
        ]
    );
}

#[test]
fn a_curve_and_delivery_fails_read_back_from_their_serialization() {
    let parsed = parse(json!({
        "delivery_curves": { "payments": { "initial_ms": 7, "ceiling": 4 } },
        "channels": { "charge": [
            ok(2, 5),
            { "answer": "bpmn_error", "code": "E", "delivery_fails": 1 },
            { "answer": "never", "delivery_fails": 3 },
            { "answer": "never" }
        ] }
    }))
    .unwrap();
    let curve = &parsed.delivery_curves["payments"];
    assert_eq!(
        curve,
        &DeliveryCurve {
            initial_ms: 7,
            ceiling: Some(4),
            ..DeliveryCurve::default()
        }
    );
    let again = serde_json::to_string(&parsed).unwrap();
    assert_eq!(scenario::parse_json(&again), Ok(parsed));
}

/// The instants of `n` failed tries from `t0` along `curve`, from the curve's own
/// arithmetic: (instant, next due; `None` = poisoned).
fn expected_tries(curve: &DeliveryCurve, t0: i64, n: u32) -> Vec<(i64, Option<i64>)> {
    let mut at = t0;
    let mut out = Vec::new();
    for k in 1..=n {
        match curve.after_failure(k) {
            AfterFailure::RetryIn(ms) => {
                out.push((at, Some(at + ms as i64)));
                at += ms as i64;
            }
            AfterFailure::Poison => {
                out.push((at, None));
                break;
            }
        }
    }
    out
}

#[test]
fn failed_tries_follow_the_curve_and_after_ms_counts_from_the_delivery() {
    let trace = run(json!({
        "instance": "i-1",
        "delivery_curves": { "payments": { "initial_ms": 1000, "multiplier_milli": 3000 } },
        "channels": { "charge": [ok(3, 250), ok(0, 0)] }
    }));
    let curve = DeliveryCurve {
        initial_ms: 1000,
        multiplier_milli: 3000,
        ..DeliveryCurve::default()
    };
    // Tries at 0, 1000 and 4000 fail; the fourth, at 13000, delivers.
    let want = expected_tries(&curve, 0, 3);
    assert_eq!(
        want,
        [(0, Some(1000)), (1000, Some(4000)), (4000, Some(13000))]
    );
    let got: Vec<(i64, Option<i64>)> = tries(&trace)
        .iter()
        .map(|(_, t)| (t.at_ms, t.next_due_ms))
        .collect();
    // The 10 s timeout fires first (at 10000) with the fourth try still to come: so this
    // run times out, and the re-drive answers. The first three tries are all shown.
    assert_eq!(got, want);
    let numbers: Vec<u32> = tries(&trace).iter().map(|(_, t)| t.try_number).collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert!(tries(&trace)
        .iter()
        .all(|(_, t)| t.key == "i-1/1/1" && !t.poisoned));
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn two_failed_tries_then_the_answer_at_delivery_plus_after_ms() {
    let trace = run(json!({
        "instance": "i-2",
        "channels": { "charge": [ok(2, 250)] }
    }));
    // Default curve: tries at 0 and 500 fail, the third at 1500 delivers; the answer
    // comes 250 ms later.
    let answered = &trace.steps[1];
    assert!(
        matches!(answered.input, Input::ChannelAnswered { .. }),
        "{answered:?}"
    );
    assert_eq!(answered.at_ms, 1750);
    let shown: Vec<(i64, u32, Option<i64>)> = answered
        .deliveries
        .iter()
        .map(|t| (t.at_ms, t.try_number, t.next_due_ms))
        .collect();
    assert_eq!(shown, [(0, 1, Some(500)), (500, 2, Some(1500))]);
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(trace.summary.steps, 2);
}

#[test]
fn failures_up_to_the_ceiling_poison_at_the_last_failed_try() {
    let trace = run(json!({
        "instance": "i-3",
        "delivery_curves": { "payments": { "ceiling": 3 } },
        "channels": { "charge": [ok(3, 0), ok(0, 100)] }
    }));
    let poisoned = &trace.steps[1];
    assert!(
        matches!(&poisoned.input, Input::ChannelPoisoned { message, .. }
            if message.contains("after 3 delivery tries")),
        "{poisoned:?}"
    );
    assert_eq!(poisoned.at_ms, 1500);
    let last = poisoned.deliveries.last().unwrap();
    assert_eq!(
        (last.at_ms, last.try_number, last.poisoned),
        (1500, 3, true)
    );
    assert_eq!(last.next_due_ms, None);
    assert!(poisoned
        .effects
        .iter()
        .any(|e| matches!(e, Effect::WithdrawRequests { .. })));
    // The re-drive's park is 5 s; its request is delivered at once and answered.
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(trace.summary.attempts["charge"], 2);
    assert_eq!(tries(&trace).len(), 3);
}

#[test]
fn a_timeout_withdraws_the_request_and_cancels_its_remaining_tries() {
    let trace = run(json!({
        "instance": "i-4",
        "channels": { "charge": [ok(10, 0), ok(0, 50)] }
    }));
    // Default curve: 0, 500, 1500, 3500, 7500 fail before the 10 s timeout; the try due
    // at 15500 is cancelled by the withdrawal, and the answer never comes.
    let all = tries(&trace);
    let instants: Vec<i64> = all.iter().map(|(_, t)| t.at_ms).collect();
    assert_eq!(instants, [0, 500, 1500, 3500, 7500]);
    let timeout = trace
        .steps
        .iter()
        .find(|s| matches!(&s.input, Input::TimerFired { name, .. } if name.as_str() == "t:charge"))
        .expect("the timeout fires");
    assert_eq!(timeout.at_ms, 10_000);
    assert_eq!(timeout.deliveries.len(), 5);
    assert!(trace.steps.iter().all(|s| !matches!(
        s.input,
        Input::ChannelAnswered { attempt, .. } if attempt.get() == 1
    )));
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(trace.summary.attempts["charge"], 2);
}

#[test]
fn a_request_delivered_before_the_timeout_is_still_answered_late() {
    // One failed try, delivered at 500; the counterpart answers 20 s later, after the
    // timeout: the withdrawal cannot recall a delivered request, so the late answer comes
    // and is judged superseded.
    let trace = run(json!({
        "instance": "i-5",
        "channels": { "charge": [ok(1, 20_000), { "answer": "never" }] }
    }));
    let late = trace
        .steps
        .iter()
        .find(|s| matches!(s.input, Input::ChannelAnswered { .. }))
        .expect("the late answer arrives");
    assert_eq!(late.at_ms, 20_500);
    assert!(late
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Stale { reason } if reason.starts_with("superseded"))));
}

#[test]
fn without_delivery_fails_a_trace_shows_no_tries() {
    let trace = run(json!({ "channels": { "charge": [ok(0, 10)] } }));
    assert!(tries(&trace).is_empty());
    let line = serde_json::to_value(&trace.steps[1]).unwrap();
    assert!(line.get("deliveries").is_none(), "{line}");
}

/// The example of docs/simulate.md, "Failed deliveries", on the model of the golden case
/// `channel_poison_then_retry` (retry every 5 s, 30 s timeout): the instants the text
/// gives.
#[test]
fn the_documented_example_runs_as_the_text_says() {
    let model = std::fs::read_to_string(
        qflow_golden::cases_root().join("channel_poison_then_retry/model.bpmn"),
    )
    .unwrap();
    let def = qflow_golden::load_model(&model).unwrap();
    let text = json!({
      "delivery_curves": { "payments": { "initial_ms": 1000, "multiplier_milli": 3000, "ceiling": 3 } },
      "channels": {
        "charge": [
          { "answer": "ok", "outputs": { "receipt": "never-sent" }, "delivery_fails": 5 },
          { "answer": "ok", "outputs": { "receipt": "r-1" }, "after_ms": 100, "delivery_fails": 2 }
        ]
      }
    })
    .to_string();
    let parsed = scenario::parse(&text, &def).unwrap();
    let trace = qflow_golden::simulate(&def, &parsed).unwrap();
    let shown: Vec<(i64, u32, Option<i64>, bool)> = tries(&trace)
        .iter()
        .map(|(_, t)| (t.at_ms, t.try_number, t.next_due_ms, t.poisoned))
        .collect();
    assert_eq!(
        shown,
        [
            (0, 1, Some(1000), false),
            (1000, 2, Some(4000), false),
            (4000, 3, None, true),
            (9000, 1, Some(10_000), false),
            (10_000, 2, Some(13_000), false),
        ]
    );
    let last = trace.steps.last().unwrap();
    assert_eq!(last.at_ms, 13_100);
    assert_eq!(trace.summary.status, "completed");
}

/// The refusals docs/simulate.md prints, exactly.
#[test]
fn the_documented_refusals_read_as_the_text_says() {
    let shown = |text: &str| -> Vec<String> {
        scenario::parse(text, &definition())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(
        shown(r#"{"delivery_curves": {"payments": {"celing": 3}}}"#),
        [
            "at delivery_curves.payments.celing: unknown field `celing`, expected one of \
          `initial_ms`, `multiplier_milli`, `max_ms`, `ceiling` (line 1, column 42)"
        ]
    );
    assert_eq!(
        shown(r#"{"channels": {"charge": [{"answer": "poison", "delivery_fails": 2}]}}"#),
        [
            "at channels.charge[0].delivery_fails: unknown field `delivery_fails`: answer \
          `poison` takes `message`, `after_ms` or `wake` (line 1, column 62)"
        ]
    );
}

/// A call waiting beside a task that fails the instance: the resume emits the live
/// attempt's request again under its key, and — as a store ignores the emission of a key
/// it holds — the row's failing tries go on as they were, once.
#[test]
fn a_resume_does_not_restart_the_tries_of_a_row_still_failing() {
    const SPLIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <process id="split" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="fork"/>
    <parallelGateway id="fork"/>
    <sequenceFlow id="f2" sourceRef="fork" targetRef="charge"/>
    <sequenceFlow id="f3" sourceRef="fork" targetRef="boom"/>
    <serviceTask id="charge" q:channel="payments">
      <extensionElements><q:timeout duration="PT30S"/></extensionElements>
    </serviceTask>
    <serviceTask id="boom" q:task="boom"/>
    <sequenceFlow id="f4" sourceRef="charge" targetRef="join"/>
    <sequenceFlow id="f5" sourceRef="boom" targetRef="join"/>
    <parallelGateway id="join"/>
    <sequenceFlow id="f6" sourceRef="join" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>"#;
    let def = qflow_golden::load_model(SPLIT).unwrap();
    let text = json!({
        "instance": "i-6",
        "tasks": { "boom": [{ "outcome": "fail", "code": "X", "after_ms": 100 }, { "outcome": "ok" }] },
        "channels": { "charge": [ok(3, 0)] },
        "events": [{ "event": "resume", "at_ms": 700 }]
    })
    .to_string();
    let parsed = scenario::parse(&text, &def).unwrap();
    let trace = qflow_golden::simulate(&def, &parsed).unwrap();
    let resumed = trace
        .steps
        .iter()
        .find(|s| matches!(s.input, Input::Resume { .. }))
        .expect("the resume is taken");
    let instants: Vec<i64> = tries(&trace).iter().map(|(_, t)| t.at_ms).collect();
    assert_eq!(
        instants,
        [0, 500, 1500],
        "resumed with {:?}",
        resumed.effects
    );
    let answers = trace
        .steps
        .iter()
        .filter(|s| matches!(s.input, Input::ChannelAnswered { .. }))
        .count();
    assert_eq!(answers, 1);
    assert_eq!(trace.summary.status, "completed");
}
